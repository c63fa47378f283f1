//! # weft-probe
//!
//! In-process instrumentation: static tracepoints switchable at run time, per-thread rings, context propagation, a tracing layer
