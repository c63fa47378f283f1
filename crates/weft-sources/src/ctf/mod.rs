//! A CTF 1.8 reader (the Common Trace Format LTTng writes).
//!
//! ```text
//!  metadata (TSDL text, or packets with magic 0x75D11D57)
//!     └─ lex ─▶ tsdl (recursive descent) ─▶ Metadata ─▶ compile ─▶ Compiled (type nodes,
//!                                                                  slots, event tables)
//!  stream files (one per CPU and channel)
//!     └─ StreamDecoder: packet header/context ─▶ events (header, contexts, payload) ─▶ Val buffers
//!           └─ Merged: k-way merge by time ─▶ EventRecord ─▶ weft Event (Tracepoint)
//! ```
//!
//! * [`meta`]: types and blocks as declared; [`meta::metadata_text`] reads both metadata forms.
//! * [`tsdl`] (private): the parser — `typealias`, `typedef`, `struct`, `variant`, `enum`,
//!   `integer` (any size 1–64 bits, any alignment, byte order, signedness, base, encoding, clock
//!   map), `floating_point` (binary32/64), `string`, arrays, sequences, `align(N)`, and the
//!   `trace`, `env`, `clock`, `stream`, `event` blocks. Errors name `file:line:col`.
//! * [`compile`]: resolves byte orders, alignments, sequence-length and variant-tag paths
//!   (relative, and absolute `trace.packet.header.…` to `event.fields.…`), marks the fields the
//!   decoder needs (magic, uuid, stream id, packet/content size, clock fields, event id,
//!   `cpu_id`, `events_discarded`, `packet_seq_num`).
//! * [`decode`]: [`StreamDecoder`] — bit-level reads, alignment, timestamp reconstruction from
//!   partial clock fields (LTTng's 27-bit compact headers wrap around), strict or lenient
//!   error handling, per-stream counters (events, packets, discarded events, lost packets,
//!   errors with samples). Errors name the stream file, the packet's byte offset and the byte
//!   (and bit) where decoding failed.
//! * [`record`]: [`EventRecord`] and its mapping to `EventKind::Tracepoint` (table there).
//! * [`live`]: LTTng live — the viewer side of `lttng-relayd`'s protocol ([`live::Viewer`]) and
//!   [`LiveReader`], which follows a session while it records: live decoders fed packet by
//!   packet ([`StreamDecoder::live`]), metadata re-parsed as it grows, a time-ordered merge
//!   released up to a watermark (event times, inactivity beacons).
//! * [`trace`]: [`CtfTrace`] (one metadata + its streams), [`find_traces`] (LTTng-UST and
//!   kernel layouts, recursively), [`Merged`] (time-ordered k-way merge) and [`CtfReader`]
//!   (weft events in batches).
//!
//! Memory is bounded by one packet per open stream (LTTng packets are sub-buffers: 4 KiB to a
//! few MiB; [`DecodeOptions::max_packet_bytes`] caps them).
//!
//! Checked against babeltrace2 field by field: real LTTng-UST recordings of a provider with
//! every field type, synthetic traces (weft-synth's CTF writer) with both LTTng header
//! layouts, both byte orders, unaligned bit fields and timestamp wrap-around, and babeltrace's
//! own CTF test traces (during development).
//!
//! Not supported (each is a clear error naming the declaration): CTF 2 (LTTng 2.13 writes 1.8),
//! integers wider than 64 bits, floating point other than binary32/binary64, compressed,
//! encrypted or checksummed metadata packets. A packet UUID that differs from the metadata's
//! is read with a warning, as babeltrace2 does. Fields referred to by sequences and variants
//! must be declared before them (CTF requires it).

pub mod bits;
pub mod compile;
pub mod decode;
pub mod error;
mod lex;
pub mod live;
pub mod meta;
pub mod record;
pub mod trace;
mod tsdl;

pub use compile::{Compiled, EventClass, Scope, StreamClass};
pub use decode::{DecodeOptions, StreamDecoder, StreamStats, Val};
pub use error::CtfError;
pub use live::{LiveError, LiveOptions, LiveReader, LiveStats, LiveUrl};
pub use meta::Metadata;
pub use record::EventRecord;
pub use trace::{CtfReader, CtfTrace, Merged, find_traces, open_traces};

/// Compiles TSDL text (for tests, fuzzing and tools; `name` appears in errors).
pub fn compile_text(text: &str, name: &str) -> Result<std::sync::Arc<Compiled>, CtfError> {
    let md = tsdl::parse(text).map_err(|e| e.with_path(name))?;
    Ok(std::sync::Arc::new(compile::compile(md, std::path::Path::new(name))?))
}
