//! weft-agent integration tests (one binary).

mod bin;
mod local;
mod otlp;
mod spool;
