//! `weft serve --demo`: traffic weft generates itself, so a first run has something to show.
//!
//! A simulated online shop (frontend, checkout, cart, catalog, currency, payment, shipping,
//! email, recommendation, ad; see `weft_store::synth`): 8–40 spans per request over gRPC and
//! HTTP with databases and caches, a few percent failing in payment, and one host whose clock
//! runs 4 ms ahead (try `adjustClockSkew=true`). It backfills the last `backfill` of traffic
//! at start, then keeps generating requests in real time. The spans go through the same
//! durable append as received ones (counted under `receiver="demo"`).
//!
//! Every tenth request is also accompanied by a woven simulator request (host → NIC → network
//! → NIC → host with `caused_by` links; see [`woven`]), so the UI's cross-component views have
//! something to show. At start the demo also weaves [`PING_ROUNDS`] rounds of the synthetic
//! SimBricks ping with weft-weave's real pipeline ([`ping`]), spread over the backfill window:
//! what `weft weave` makes of simulator logs, for the breakdown per component and direction.

use std::time::Duration;

use weft_model::codec::Rejected;
use weft_store::synth::Synth;

pub mod ping;
pub mod woven;

use crate::ingest;
use crate::metrics::Receiver;
use crate::state::AppState;

/// Demo traffic settings.
#[derive(Debug, Clone)]
pub struct DemoConfig {
    /// Requests per second.
    pub rate: f64,
    /// How much past traffic to generate at start.
    pub backfill: Duration,
    /// Seed (fixed: the same shop every run).
    pub seed: u64,
}

/// Ping rounds the demo weaves at start.
pub const PING_ROUNDS: u64 = 24;

impl Default for DemoConfig {
    fn default() -> Self {
        DemoConfig { rate: 2.0, backfill: Duration::from_secs(15 * 60), seed: 42 }
    }
}

/// Starts the generator; it stops when `state`'s store is closed or the task is aborted.
pub fn start(state: AppState, cfg: DemoConfig) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let interval_ns = (1e9 / cfg.rate.max(0.01)) as u64;
        let now = weft_model::time::now_unix_nanos();
        let start = now.saturating_sub(cfg.backfill.as_nanos().min(u64::MAX as u128) as u64);
        let mut synth = Synth::new(cfg.seed, start, interval_ns);
        let period = (now - start) / PING_ROUNDS;
        let seed = cfg.seed;
        match tokio::task::spawn_blocking(move || ping::woven_ping(PING_ROUNDS, start, period, seed)).await {
            Ok(Ok(p)) => {
                tracing::info!(
                    spans = p.spans.len(),
                    rejected_lines = p.rejected_lines,
                    unmatched = p.unmatched,
                    "demo: wove the synthetic SimBricks ping"
                );
                if !append(&state, p.spans).await {
                    return;
                }
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "demo: could not weave the synthetic ping"),
            Err(e) => tracing::warn!(error = %e, "demo: ping weaving task failed"),
        }
        let mut made = 0u64;
        // Backfill in batches of ~1000 spans, through the blocking pool.
        loop {
            let mut batch = Vec::new();
            while batch.len() < 1000 && synth.next_start_ns < weft_model::time::now_unix_nanos() {
                woven_every_tenth(&mut batch, &mut made, synth.next_start_ns, cfg.seed);
                batch.extend(synth.trace());
            }
            let done = synth.next_start_ns >= weft_model::time::now_unix_nanos();
            if !batch.is_empty() && !append(&state, batch).await {
                return;
            }
            if done {
                break;
            }
        }
        tracing::info!("demo traffic backfilled; generating live requests");
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        loop {
            tick.tick().await;
            let mut batch = Vec::new();
            while synth.next_start_ns <= weft_model::time::now_unix_nanos() {
                woven_every_tenth(&mut batch, &mut made, synth.next_start_ns, cfg.seed);
                batch.extend(synth.trace());
            }
            if !batch.is_empty() && !append(&state, batch).await {
                return;
            }
        }
    })
}

fn woven_every_tenth(batch: &mut Vec<weft_model::Span>, made: &mut u64, start_ns: u64, seed: u64) {
    if made.is_multiple_of(10) {
        batch.extend(woven::woven_request(seed ^ made.wrapping_mul(0x9E37_79B9), start_ns));
    }
    *made += 1;
}

/// Appends; false when the store refuses for good (closed / read-only).
async fn append(state: &AppState, batch: Vec<weft_model::Span>) -> bool {
    let st = state.clone();
    let r = tokio::task::spawn_blocking(move || {
        st.metrics.receiver(Receiver::Demo).requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        ingest::store_spans(&st, Receiver::Demo, batch, Rejected::default())
    })
    .await;
    match r {
        Ok(Ok(_)) => true,
        Ok(Err(ingest::IngestError::Overloaded(_))) => {
            tokio::time::sleep(Duration::from_millis(500)).await;
            true
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e.message(), "demo traffic stopped");
            false
        }
        Err(_) => false,
    }
}
