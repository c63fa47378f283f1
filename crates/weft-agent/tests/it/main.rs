//! weft-agent integration tests (one binary).

mod convert;
mod local;
mod otlp;
mod spool;
