//! # weft-sources
//!
//! Readers and parsers that turn raw inputs into [`weft_model::Event`]s.
//!
//! Shared pieces, for every source kind (simulator logs here; CTF and perf_event sources reuse
//! them):
//!
//! * [`reader`]: [`reader::LineReader`] — chunked reading of files and FIFOs with a bounded
//!   buffer; [`reader::open_input`].
//! * [`parse`]: the [`parse::LineParser`] trait, [`parse::Stamp`] (source id + clock),
//!   [`parse::Cursor`] and number helpers for hand-written byte parsers, [`parse::Interner`].
//! * [`reject`]: per-source accounting of skipped and rejected lines (reason counts + the first
//!   few samples with line numbers).
//! * [`drive`]: [`drive::Driver`] — the read → parse → order-check loop with live counters.
//! * [`error`]: [`SourceError`], for failures of a whole input (malformed records are counted,
//!   not errors).
//!
//! [`ctf`]: a CTF 1.8 reader for LTTng traces (TSDL metadata, binary streams, time-ordered
//! merge) producing tracepoint events, from trace directories or from live sessions read while
//! they record (a client of `lttng-relayd`'s viewer protocol, [`ctf::live`]); its mapping and
//! limits are documented there.
//!
//! Simulator logs ([`sim`]): gem5, SimBricks nicbm, ns-3 (SimBricks fork and stock), QEMU;
//! [`symbols`]: symbol tables (objdump, readelf, nm/kallsyms, ELF) for resolving addresses.
//!
//! Kernel capture (`perf`, Linux): perf_event_open tracepoints, syscalls, uprobes, per-CPU
//! rings, EXIST scheduler records, detection of the Intel PT PMU (`perf::pt`).
//!
//! Intel PT decoding (`intel_pt`, feature `intel-pt`, off by default: it builds Intel's libipt
//! with cmake): packets, the instruction flow with its events, function calls and returns.

#![warn(missing_docs)]

pub mod ctf;
pub mod drive;
pub mod error;
#[cfg(feature = "intel-pt")]
pub mod intel_pt;
pub mod parse;
#[cfg(target_os = "linux")]
pub mod perf;
pub mod reader;
pub mod reject;
pub mod sim;
pub mod symbols;

pub use error::SourceError;
