//! # weft-analyze
//!
//! Analyses over spans, and nothing else. Turning events into spans is weft-weave's job.
//!
//! * [`critical_path`]: the chain of span sections that set a trace's latency.
//! * [`breakdown`]: per-component time breakdowns of one trace or many.
//! * [`compare`]: structural comparison of two traces.
//! * [`dependencies`]: service dependency links.
//! * [`skew`]: clock-skew adjustment of cross-host parent/child spans.
//! * [`kernel`]: kernel activity (from kernel spans) attributed to application spans.
//! * [`vaif`]: VAIF's analysis — critical paths over the tracepoint records of spans, requests
//!   grouped by path, the response-time variance decomposed over the path's edges, keys
//!   correlated with response time.
//!
//! Every algorithm takes `&[Span]` (one trace or many) and never touches storage, so the CLI,
//! the server and tests can run it on files, woven output or query results alike — and the
//! crate stays free of DataFusion.

pub mod breakdown;
pub mod compare;
pub mod critical_path;
pub mod dependencies;
pub mod kernel;
pub mod skew;
pub mod vaif;
