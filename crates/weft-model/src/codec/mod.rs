//! Codecs: every trace format weft reads and writes, to and from [`crate::Span`].
//!
//! | module | format | read | write |
//! |---|---|---|---|
//! | [`otlp`] | OTLP protobuf (`ExportTraceServiceRequest`) and OTLP/JSON | yes | yes |
//!
//! Every decoder returns a [`CodecError`] that names the format, the position (byte offset
//! or line and column), the field and the problem — never panics, never returns an empty
//! result for input it did not understand. Decoders come in a strict form (the first bad span
//! fails the call) and a lenient form that skips bad spans and counts them in [`Rejected`].

mod error;
#[allow(dead_code)] // streaming entry points: used by `codec::stream`
pub(crate) mod jsonscan;
#[allow(dead_code)]
pub(crate) mod jsonw;
pub mod otlp;
pub mod sample;

pub use error::{CodecError, ErrorDetails, ErrorKind, Position, Rejected};
