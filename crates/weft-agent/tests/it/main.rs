//! weft-agent integration tests (one binary).

mod bin;
mod local;
mod ship;
mod spool;
