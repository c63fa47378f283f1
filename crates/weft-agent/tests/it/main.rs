//! weft-agent integration tests (one binary).

mod bin;
mod capture;
mod exist;
mod local;
mod ship;
mod spool;
