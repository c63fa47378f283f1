//! Integration tests of weft-sources: every fixture, property tests, the FIFO reader.

mod ctf;
mod fixtures;
#[cfg(target_os = "linux")]
mod perf;
mod props;
