//! `weft serve --demo`: traffic weft generates itself, so a first run has something to show.
//!
//! A simulated online shop (frontend, checkout, cart, catalog, currency, payment, shipping,
//! email, recommendation, ad; see [`crate::shop`]): 8–40 spans per request over gRPC and
//! HTTP with databases and caches, a few percent failing in payment, and one host whose clock
//! runs 4 ms ahead (try `adjustClockSkew=true`). It backfills the last `backfill` of traffic
//! at start, then keeps generating requests in real time. The spans go where the caller's
//! `append` puts them: the weft binary hands them to the collector's durable append, as if
//! received (counted under `receiver="demo"`).
//!
//! Every tenth request is also accompanied by a woven simulator request (host → NIC → network
//! → NIC → host with `caused_by` links; see [`woven`]), so the UI's cross-component views have
//! something to show. At start the demo also weaves [`PING_ROUNDS`] rounds of the synthetic
//! SimBricks ping with weft-weave's real pipeline ([`ping`]), spread over the backfill window:
//! what `weft weave` makes of simulator logs, for the breakdown per component and direction.

use std::time::Duration;

use weft_model::Span;

use crate::shop::Shop;

pub mod ping;
pub mod woven;

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

/// What became of a batch handed to the demo's `append`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Appended {
    /// Stored.
    Stored,
    /// Refused for now (the store's buffer is full): the demo waits half a second and goes on.
    Busy,
    /// Refused for good (closed, read-only, failing): the demo stops, logging why.
    Refused(String),
}

/// Starts the generator on the current tokio runtime. `append` stores one batch (it runs on
/// the blocking pool); the generator stops when `append` answers [`Appended::Refused`] or the
/// task is aborted.
pub fn start<A>(cfg: DemoConfig, append: A) -> tokio::task::JoinHandle<()>
where
    A: Fn(Vec<Span>) -> Appended + Clone + Send + Sync + 'static,
{
    tokio::spawn(async move {
        let interval_ns = (1e9 / cfg.rate.max(0.01)) as u64;
        let now = weft_model::time::now_unix_nanos();
        let start = now.saturating_sub(cfg.backfill.as_nanos().min(u64::MAX as u128) as u64);
        let mut shop = Shop::new(cfg.seed, start, interval_ns);
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
                if !hand_over(&append, p.spans).await {
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
            while batch.len() < 1000 && shop.next_start_ns < weft_model::time::now_unix_nanos() {
                woven_every_tenth(&mut batch, &mut made, shop.next_start_ns, cfg.seed);
                batch.extend(shop.trace());
            }
            let done = shop.next_start_ns >= weft_model::time::now_unix_nanos();
            if !batch.is_empty() && !hand_over(&append, batch).await {
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
            while shop.next_start_ns <= weft_model::time::now_unix_nanos() {
                woven_every_tenth(&mut batch, &mut made, shop.next_start_ns, cfg.seed);
                batch.extend(shop.trace());
            }
            if !batch.is_empty() && !hand_over(&append, batch).await {
                return;
            }
        }
    })
}

fn woven_every_tenth(batch: &mut Vec<Span>, made: &mut u64, start_ns: u64, seed: u64) {
    if made.is_multiple_of(10) {
        batch.extend(woven::woven_request(seed ^ made.wrapping_mul(0x9E37_79B9), start_ns));
    }
    *made += 1;
}

/// Hands a batch to `append` on the blocking pool; false when the demo should stop.
async fn hand_over<A>(append: &A, batch: Vec<Span>) -> bool
where
    A: Fn(Vec<Span>) -> Appended + Clone + Send + Sync + 'static,
{
    let append = append.clone();
    match tokio::task::spawn_blocking(move || append(batch)).await {
        Ok(Appended::Stored) => true,
        Ok(Appended::Busy) => {
            tokio::time::sleep(Duration::from_millis(500)).await;
            true
        }
        Ok(Appended::Refused(why)) => {
            tracing::warn!(error = %why, "demo traffic stopped");
            false
        }
        Err(_) => false,
    }
}
