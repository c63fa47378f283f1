//! weft-store integration tests (one binary: DataFusion links once).

mod duplicates;
mod durability;
mod faults;
mod maintenance;
mod reads;
mod resources;
mod search;

use std::time::Duration;

use weft_model::Span;
use weft_store::{FsyncPolicy, Store, StoreConfig};
use weft_synth::shop::Shop;

/// A config for tests: small buffers, no automatic flushes or maintenance unless asked.
pub fn config(dir: &std::path::Path) -> StoreConfig {
    let mut c = StoreConfig::new(dir);
    c.fsync = FsyncPolicy::Never;
    c.flush_interval = Duration::from_secs(3600);
    c.maintenance_interval = Duration::from_secs(3600);
    c.wal_retry_interval = Duration::from_secs(3600);
    c.query_memory_bytes = 256 << 20;
    c
}

/// Realistic spans (whole traces) starting at a fixed time.
pub fn spans(seed: u64, n: usize) -> Vec<Span> {
    Shop::new(seed, 1_700_000_000_000_000_000, 2_000_000).spans(n)
}

pub fn open(dir: &std::path::Path) -> Store {
    Store::open(config(dir)).unwrap()
}

/// Sorts a trace's spans canonically for comparisons.
pub fn canon(mut v: Vec<Span>) -> Vec<Span> {
    v.sort_by_key(|s| (s.trace_id, s.start_ns, s.span_id));
    v
}

/// Runs a future on a small runtime.
pub fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap().block_on(f)
}
