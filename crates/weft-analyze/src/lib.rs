//! # weft-analyze
//!
//! Trace analysis over spans: critical path, per-component breakdowns, service dependencies,
//! and VAIF's analysis ([`vaif`]: critical paths over tracepoint records, requests grouped by
//! path, the response-time variance decomposed over the path's edges, keys correlated with
//! response time).
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
