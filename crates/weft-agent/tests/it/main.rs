//! weft-agent integration tests (one binary).

mod bin;
mod convert;
mod local;
mod ship;
mod spool;
