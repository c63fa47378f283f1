//! weft-agent integration tests (one binary).

mod convert;
mod local;
mod ship;
mod spool;
