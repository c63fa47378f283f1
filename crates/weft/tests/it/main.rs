//! Integration tests of the `weft` binary (`CARGO_BIN_EXE_weft`, run as a subprocess) on real
//! files, real peers and real kernels: the real `weft serve` driven by the OpenTelemetry Python
//! SDK's exporters and py_zipkin (installed by `.ci/test`) and killed with SIGKILL mid-stream,
//! three collectors over one SeaweedFS bucket read back by a fourth (feature `s3`),
//! real `weft agent` processes draining the archipelago example's four tiers (which re-run this
//! test binary), LTTng, perf, ns-3, headless Chromium. One binary for all of them.

mod agent;
mod architecture;
mod breakdown;
mod case_study;
#[cfg(feature = "s3")]
mod collectors;
mod common;
mod convert;
mod crash;
mod deep_queues;
mod exist;
mod explore;
mod faults;
mod import_ctf;
mod import_probe;
mod live_kernel;
mod live_query;
mod lttng_live;
mod peers;
mod record;
mod serve;
mod ui;
mod weave;

pub use serve::{WeftServe, weft_bin};
