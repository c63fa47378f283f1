//! # weft-model
//!
//! weft's data model and the codecs of every trace format it speaks.
//!
//! * [`id`]: 128-bit [`TraceId`], 64-bit [`SpanId`], hex on text wire formats.
//! * [`time`]: `u64` ns since the UNIX epoch at the boundary; [`Clock`] maps raw source time.
//! * [`value`]: typed attributes ([`Value`], [`Attributes`]) — OTLP's `AnyValue` model — and
//!   [`Str`], the string of keys, names and string values (inline up to 24 bytes, static
//!   strings without copying: few heap allocations per span).
//! * [`span`]: [`Span`] with kind, status, [`Resource`], [`Scope`], [`SpanEvent`]s
//!   (annotations) and [`Link`]s with a [`LinkRelation`].
//! * [`event`]: low-level [`Event`]s normalized per component kind (host, NIC, network,
//!   kernel, tracepoint), which sources emit and weavers turn into spans.
//! * [`conv`]: the attribute keys weft uses; [`kernel`]: those of kernel spans.
//! * [`codec`]: the trace formats weft reads and writes (OTLP protobuf and JSON, ...), each
//!   module with its mapping table: which field goes where, what is lost in each direction.
//!
//! Each module documents how its types map onto the wire formats.

#![warn(missing_docs)]

pub mod codec;
pub mod conv;
pub mod event;
pub mod id;
pub mod kernel;
pub mod span;
pub mod time;
pub mod value;

pub use event::{ComponentKind, Event, EventKind, SourceId};
pub use id::{IdError, SpanId, TraceId};
pub use span::{Link, LinkRelation, Resource, Scope, Span, SpanEvent, SpanKind, Status, StatusCode};
pub use time::{Clock, TimeUnit, UnixNanos};
pub use value::{Attributes, KeyValue, Str, Value};
