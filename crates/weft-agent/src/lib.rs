//! # weft-agent
//!
//! Per-node agent: drains probe rings and kernel sources, store-and-forward to the collector, tracepoint control
