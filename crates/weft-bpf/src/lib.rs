//! weft-bpf: the probe level of live queries in the kernel — eBPF programs generated from a
//! query, checked by the kernel's verifier, attached to kernel tracepoints, uprobes and
//! uretprobes, aggregating per CPU; the partial state read back and merged per group.
//!
//! No compiler runs at run time: [`compile`] turns a [`Query`] (source, filter, group key,
//! aggregates: the typed IR the planner hands down) into eBPF instructions with weft's own
//! emitter ([`insn`]), [`Probe::attach`] creates the maps, loads the programs with `bpf(2)`
//! and attaches them through `perf_event_open(2)` ([`weft_sources::perf`]: tracefs formats
//! give field offsets, ELF symbol tables give uprobe offsets). [`Probe::read`] merges the
//! per-CPU values of every group into one [`Partial`]; [`Probe::take`] reads and resets (per
//! window: the programs write to one of two generations, switched before the old one is read
//! and deleted, so no hit is lost or counted twice); dropping the [`Probe`] detaches the
//! programs and frees every map and fd.
//!
//! * Maps: a per-CPU hash (group key → state), or a per-CPU array when there is no key; a
//!   per-CPU drop counter (hits of a group the full hash could not take, uretprobe entries the
//!   full start map could not take); a zeroed template a new group starts from; for latency a
//!   hash thread → entry time (`bpf_ktime_get_ns`), read and deleted at the return.
//! * State, per group and CPU, in 8-byte words: count and sum 1 (sums wrap, as bpftrace's),
//!   min and max 2 (seen, value; compared signed), `hist` 65 buckets and `lhist` its buckets
//!   in bpftrace's layout (the same indices as weft-probe's mergeable states).
//! * Failure is clean: a source that does not resolve (no tracepoint, no such symbol), a
//!   program the verifier refuses ([`Error::Verifier`] carries its log) or an attach the
//!   kernel refuses (permissions) returns an error with nothing left attached or allocated.
//! * Limits: x86-64 register layout for uprobe arguments and return values; root (or
//!   `CAP_BPF` + `CAP_PERFMON`); values are 64-bit integers; strings only as `comm`.
//!
//! Why raw `bpf(2)` and an emitter of our own rather than a library: the programs are made
//! at run time from a query, so what is needed is "load these instructions", which neither
//! library offers — aya 0.13 makes its programs from ELF objects (`Ebpf::load`), libbpf-rs
//! from objects clang compiled (its skeletons need clang at build time; libbpf-sys builds
//! libbpf from C). Measured on the project's machine (2 vCPUs, release builds, stripped
//! binaries): a program that only calls `aya::Ebpf::load` builds 27 crates in 36.5 s of CPU
//! and is 991 KB (an empty one is 346 KB); this crate, over what the agent links already
//! (weft-sources), builds in 2.6 s of CPU and adds 111 KiB (563 → 677 KB), with no new
//! third-party crate.

pub mod emit;
pub mod insn;
mod probe;
pub mod query;
pub mod sys;

use std::io;
use std::path::PathBuf;

pub use emit::{Compiled, compile};
pub use probe::{KeyPart, Partial, Probe, State};
pub use query::{Agg, Cmp, Const, Filter, Location, Query, Source, Value};

/// What can go wrong generating, loading, attaching or reading a probe.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The query cannot be run as asked (names the part).
    #[error("query: {0}")]
    Query(String),
    /// Resolving the source (tracefs, ELF symbols) or attaching the perf event failed.
    #[error(transparent)]
    Perf(#[from] weft_sources::perf::PerfError),
    /// A `bpf(2)` call failed.
    #[error("{op} ({what}): {source}{hint}")]
    Bpf { op: &'static str, what: String, hint: &'static str, source: io::Error },
    /// The verifier refused a program; `log` is its explanation.
    #[error("the kernel's verifier refused program {program} ({source}):\n{log}")]
    Verifier { program: String, source: io::Error, log: String },
    /// Attaching a loaded program to its event failed.
    #[error("attach {what}: {source}")]
    Attach { what: String, source: io::Error },
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    /// The generator produced something inconsistent (a bug, reported rather than loaded).
    #[error(transparent)]
    Asm(#[from] insn::AsmError),
    #[error("internal: {0}")]
    Internal(String),
}
