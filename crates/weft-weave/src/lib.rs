//! # weft-weave
//!
//! Pipeline runtime: stages, bounded queues, timestamp-ordered merge with watermarks, actors, span weavers, topology config

pub mod blkin;
