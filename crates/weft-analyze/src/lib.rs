//! # weft-analyze
//!
//! Trace analysis over spans: critical path, per-component breakdowns, service dependencies,
//! grouping, statistics, variance decomposition and the hypothesis forest.
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
