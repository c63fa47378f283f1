//! # weft-store
//!
//! Durable span store: WAL, Parquet segments, manifest, retention, compaction, DataFusion SQL, trace lookup
