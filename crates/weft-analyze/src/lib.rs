//! # weft-analyze
//!
//! Trace analysis: critical path, grouping, statistics, variance decomposition, breakdowns, hypothesis forest
