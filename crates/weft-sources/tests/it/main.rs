//! Integration tests of weft-sources: every fixture, property tests, arbitrary bytes into every
//! parser of untrusted files, the FIFO reader.

mod ctf;
mod fixtures;
mod hostile;
#[cfg(feature = "intel-pt")]
mod intel_pt;
#[cfg(target_os = "linux")]
mod perf;
mod props;
