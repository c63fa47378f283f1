//! The sender: takes batches from the [`Spool`] in order and posts them to the collector's
//! OTLP/HTTP receiver (`POST /v1/traces`, protobuf, gzip unless `--no-compress`) through
//! [`weft_weave::export`]'s client and retry policy, acknowledging each in the spool only after
//! the collector answered 2xx (which `weft serve` sends after the durable append).
//!
//! | answer | what the sender does |
//! |---|---|
//! | 2xx | acknowledge; spans the collector refused as invalid (OTLP partial success) are counted |
//! | 400, 413, 415 | the batch can never succeed: counted as refused, logged, acknowledged |
//! | anything else (429, 5xx, 401, 403, 404, …), connection errors, timeouts | keep the batch and retry it, forever, with jittered exponential backoff (100 ms … `max_backoff`) or after the `Retry-After` given (up to 30 s); `collector_up` = 0 |

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use weft_weave::export::{Client, ClientOptions, Outcome, RetryPolicy, Rng};

use crate::metrics::Metrics;
use crate::spool::Spool;

/// Where and how to send.
#[derive(Debug, Clone)]
pub struct SenderConfig {
    /// `http://host:port` of the collector's OTLP/HTTP listener, or the full `.../v1/traces` URL.
    pub endpoint: String,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Longest pause between retries (without `Retry-After`).
    pub max_backoff: Duration,
}

impl SenderConfig {
    pub fn new(endpoint: impl Into<String>) -> SenderConfig {
        SenderConfig {
            endpoint: endpoint.into(),
            timeout: Duration::from_secs(10),
            max_backoff: Duration::from_secs(5),
        }
    }

    fn client(&self) -> Client {
        Client::new(&ClientOptions {
            timeout: self.timeout,
            connect_timeout: Some(Duration::from_secs(2)),
            // A batch leaves the spool on the acknowledgement: it must survive a crash of the
            // collector's machine by then, whatever the collector's fsync period.
            ack_after_fsync: true,
            ..ClientOptions::new(&self.endpoint)
        })
    }

    /// The retry policy: never give up on a batch that may still be accepted.
    fn policy(&self) -> RetryPolicy {
        RetryPolicy { max_backoff: self.max_backoff, max_retries: None, ..RetryPolicy::default() }
    }
}

/// Run the sender until `stop` is set and either the spool is empty or `linger` has passed.
pub fn run(
    spool: Arc<Spool>,
    cfg: SenderConfig,
    metrics: Arc<Metrics>,
    stop: Arc<AtomicBool>,
    linger: Duration,
) {
    let client = cfg.client();
    let url = client.url().to_owned();
    let mut retries = cfg.policy().retries(Rng::from_time().next_u64());
    let mut stop_at: Option<Instant> = None;
    let mut warned_unsynced = false;
    loop {
        if stop.load(Ordering::Relaxed) {
            let at = *stop_at.get_or_insert_with(|| Instant::now() + linger);
            if Instant::now() >= at || spool.stats().pending_batches == 0 {
                return;
            }
        }
        let batch = match spool.next(Duration::from_millis(200)) {
            Ok(Some(b)) => b,
            Ok(None) => continue,
            Err(e) => {
                tracing::error!(error = %e, "spool read failed");
                metrics.spool_errors.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(500));
                continue;
            }
        };
        let t0 = Instant::now();
        match client.send(&batch.payload, batch.gzip) {
            Outcome::Acked { rejected, fsynced } => {
                if !fsynced && !warned_unsynced {
                    warned_unsynced = true;
                    tracing::warn!(
                        url = %url,
                        "the collector acknowledges without confirming an fsync (not weft serve, or an older one): \
                         a crash of its machine can lose batches already deleted from the spool"
                    );
                }
                metrics.collector_up.store(true, Ordering::Relaxed);
                metrics.batches_sent.fetch_add(1, Ordering::Relaxed);
                metrics
                    .spans_sent
                    .fetch_add((batch.spans as u64).saturating_sub(rejected), Ordering::Relaxed);
                metrics.spans_rejected.fetch_add(rejected, Ordering::Relaxed);
                metrics.send_micros.fetch_add(t0.elapsed().as_micros() as u64, Ordering::Relaxed);
                if rejected > 0 {
                    tracing::warn!(
                        rejected,
                        seq = batch.seq,
                        "collector refused spans of a batch as invalid"
                    );
                }
                retries.reset();
                if let Err(e) = spool.ack(&batch) {
                    tracing::error!(error = %e, "spool acknowledgement failed");
                    metrics.spool_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
            Outcome::Refused { status, message } => {
                metrics.collector_up.store(true, Ordering::Relaxed);
                metrics.batches_refused.fetch_add(1, Ordering::Relaxed);
                metrics.spans_refused.fetch_add(batch.spans as u64, Ordering::Relaxed);
                tracing::error!(status, %message, seq = batch.seq, spans = batch.spans, "collector refused a batch; dropped");
                retries.reset();
                if let Err(e) = spool.ack(&batch) {
                    tracing::error!(error = %e, "spool acknowledgement failed");
                }
            }
            Outcome::Retry { reason, after, .. } => {
                if metrics.collector_up.swap(false, Ordering::Relaxed) {
                    tracing::warn!(%reason, url = %url, "collector unavailable; batches stay in the spool");
                }
                metrics.send_errors.fetch_add(1, Ordering::Relaxed);
                // The policy never gives up (`max_retries: None`).
                let pause = retries.next(after).unwrap_or(cfg.max_backoff);
                let until = Instant::now() + pause;
                while Instant::now() < until {
                    if stop.load(Ordering::Relaxed) && stop_at.is_some_and(|a| Instant::now() >= a) {
                        return;
                    }
                    if stop.load(Ordering::Relaxed) && stop_at.is_none() {
                        stop_at = Some(Instant::now() + linger);
                    }
                    std::thread::sleep(
                        Duration::from_millis(20).min(until.saturating_duration_since(Instant::now())),
                    );
                }
            }
        }
    }
}
