//! weft-agent integration tests (one binary).

mod local;
mod otlp;
mod spool;
