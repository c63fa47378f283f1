//! # weft-explore
//!
//! VAIF's control loop (seeds §3): which tracepoints to enable next, and why. Its one job is
//! the part above the statistics (those are `weft_analyze::vaif`'s): the search space, the
//! search strategies, the loop and the hypothesis forest.
//!
//! * [`space`]: the search space learned from an exhaustive run — tracepoints with their
//!   hierarchy, request types, keys (with bins a developer may add), concurrency points,
//!   potential critical paths with their frequencies, the always-on set — as an editable TOML
//!   file, and matching a group's path against the potential paths;
//! * [`project`]: a trace as a set of enabled tracepoints would record it;
//! * [`strategy`]: hierarchical and flat search inside a critical-path edge;
//! * [`explore`]: the loop — per epoch and request type: group, decide (variance, consistently
//!   slow, keys), enable within a budget, record — over a [`backend::Backend`];
//! * [`backend`]: that trait, [`backend::Replay`], which replays exhaustive trace files with
//!   only the enabled tracepoints showing, and [`backend::live::Live`], a running collector's
//!   read API (traces), control API (switching, with what it enabled persisted and undone on
//!   the next start after a crash) and agents' reports (congestion);
//! * [`forest`]: the hypothesis forest, stored as JSON (in the state directory, and published
//!   to the collector, which keeps it next to the traces and shows it in its UI), validated,
//!   rendered as text, and asked why a tracepoint is on.

pub mod backend;
pub mod explore;
pub mod forest;
pub mod project;
pub mod space;
pub mod strategy;

use weft_analyze::vaif::ConfigError;
use weft_analyze::vaif::correlate::CorrelateError;
use weft_analyze::vaif::hb::PathError;

/// What can go wrong exploring.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A search-space file that is not usable.
    #[error(transparent)]
    Space(#[from] space::SpaceError),
    /// A trace without a critical path (no root, several roots, a cycle…), named.
    #[error(transparent)]
    Trace(#[from] PathError),
    /// Thresholds out of range.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Key correlation failed.
    #[error(transparent)]
    Correlate(#[from] CorrelateError),
    /// A request type the search space does not know.
    #[error("request type {0:?} is not in the search space (its request types: {1})")]
    UnknownRequestType(String, String),
    /// A request type no trace of the run belonged to.
    #[error("request type {0:?} never occurred in the traces")]
    NeverOccurred(String),
    /// Nothing to learn from.
    #[error("no traces to learn from")]
    NoTraces,
    /// A file whose trace format cannot be told.
    #[error("{path}: cannot tell its trace format (OTLP JSON/protobuf, Zipkin, Jaeger)")]
    Format {
        /// The file.
        path: String,
    },
    /// A trace file that does not decode.
    #[error("{message}")]
    Codec {
        /// The decoder's message, naming the file.
        message: String,
    },
    /// A state file that does not parse.
    #[error("{path}: {message}")]
    Json {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// Reading or writing a file.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A collector's answer about the forest.
    #[error("{url}: {detail}")]
    Collector {
        /// The request.
        url: String,
        /// What went wrong.
        detail: String,
    },
    /// The backend failed.
    #[error("backend: {0}")]
    Backend(#[from] backend::BackendError),
}

#[cfg(test)]
pub(crate) mod test_support {
    use weft_model::{Span, SpanId, TraceId};

    /// A span of trace `trace`: id `id`, parent `parent` (0: a root), [start, end].
    pub(crate) fn span(trace: u128, id: u64, parent: u64, name: &str, start: u64, end: u64) -> Span {
        Span {
            trace_id: TraceId::from_u128(trace),
            span_id: SpanId::from_u64(id),
            parent_span_id: (parent != 0).then(|| SpanId::from_u64(parent)),
            name: name.into(),
            start_ns: start,
            end_ns: end,
            ..Span::default()
        }
    }
}
