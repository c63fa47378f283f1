//! The topology file as TOML gives it, before validation.

use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRun {
    pub(super) seed: Option<u64>,
    pub(super) epoch_ns: Option<u64>,
    pub(super) batch_events: Option<usize>,
    pub(super) queue_batches: Option<usize>,
    pub(super) merge_buffer_events: Option<usize>,
    pub(super) merge_stall_ms: Option<u64>,
    pub(super) max_span_events: Option<usize>,
    pub(super) span_events: Option<String>,
    pub(super) keep_bare_calls: Option<bool>,
    pub(super) max_cause_age_ns: Option<u64>,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(untagged)]
pub(super) enum Num {
    Int(i64),
    Str(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawClock {
    pub(super) unit: Option<String>,
    pub(super) epoch_ns: Option<u64>,
    pub(super) origin: Option<Num>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSymbols {
    pub(super) path: String,
    pub(super) id: Option<String>,
    pub(super) format: Option<String>,
    pub(super) offset: Option<Num>,
    pub(super) section: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSource {
    pub(super) name: String,
    pub(super) kind: String,
    pub(super) path: String,
    pub(super) clock: Option<RawClock>,
    pub(super) nic: Option<String>,
    pub(super) nodes: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub(super) symbols: Vec<RawSymbols>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLink {
    pub(super) kind: String,
    pub(super) host: Option<String>,
    pub(super) nic: Option<String>,
    pub(super) net: Option<String>,
    pub(super) node: Option<u32>,
    pub(super) device: Option<u32>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFunctions {
    pub(super) sys_entry: Option<Vec<String>>,
    pub(super) kernel_tx: Option<Vec<String>>,
    pub(super) kernel_rx: Option<Vec<String>>,
    pub(super) driver_tx: Option<Vec<String>>,
    pub(super) driver_rx: Option<Vec<String>>,
    pub(super) pci_write: Option<Vec<String>>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFilter {
    pub(super) drop_types: Option<Vec<String>>,
    pub(super) window_ns: Option<[u64; 2]>,
    pub(super) window_raw: Option<[u64; 2]>,
    pub(super) components: Option<Vec<String>>,
    pub(super) only_interesting: Option<bool>,
    pub(super) blacklist: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSink {
    pub(super) kind: String,
    pub(super) path: Option<String>,
    pub(super) format: Option<String>,
    pub(super) url: Option<String>,
    pub(super) batch_spans: Option<usize>,
    pub(super) queue_batches: Option<usize>,
    pub(super) max_retries: Option<u32>,
    pub(super) timeout_ms: Option<u64>,
    pub(super) backpressure: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTopology {
    #[serde(default)]
    pub(super) run: RawRun,
    #[serde(default)]
    pub(super) source: Vec<RawSource>,
    #[serde(default)]
    pub(super) link: Vec<RawLink>,
    #[serde(default)]
    pub(super) functions: RawFunctions,
    #[serde(default)]
    pub(super) filter: RawFilter,
    #[serde(default)]
    pub(super) sink: Vec<RawSink>,
}
