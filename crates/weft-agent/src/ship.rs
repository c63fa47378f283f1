//! The sender: takes batches from the [`Spool`] in order and posts them to the collector's
//! OTLP/HTTP receiver (`POST /v1/traces`, protobuf, gzip unless `--no-compress`), acknowledging each in the spool only
//! after the collector answered 200 (which `weft serve` sends after the durable append).
//!
//! | answer | what the sender does |
//! |---|---|
//! | 200 | acknowledge; spans the collector refused as invalid (OTLP partial success) are counted |
//! | 400, 413, 415 and other 4xx but 408/429 | the batch can never succeed: counted as refused, logged, acknowledged |
//! | 408, 429, 5xx, connection errors, timeouts | retry the same batch with exponential backoff (100 ms … 5 s, or the `Retry-After` given, up to 30 s); `collector_up` = 0 |

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use prost::Message;
use weft_model::codec::otlp::proto;

use crate::metrics::Metrics;
use crate::spool::{Batch, Spool};

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

    /// The URL posted to.
    pub fn url(&self) -> String {
        let e = self.endpoint.trim_end_matches('/');
        if e.ends_with("/v1/traces") { e.to_string() } else { format!("{e}/v1/traces") }
    }
}

/// What one attempt gave.
#[derive(Debug)]
pub enum Outcome {
    /// Stored; `rejected` spans were refused as invalid.
    Acked { rejected: u64 },
    /// Can never succeed (4xx).
    Refused { status: u16, message: String },
    /// Try again after `after` (or the backoff when `None`).
    Retry { reason: String, after: Option<Duration> },
}

/// Post one batch.
pub fn send(agent: &ureq::Agent, url: &str, b: &Batch) -> Outcome {
    let mut req = agent.post(url).header("Content-Type", "application/x-protobuf");
    if b.gzip {
        req = req.header("Content-Encoding", "gzip");
    }
    let res = req.send(&b.payload[..]);
    let mut resp = match res {
        Ok(r) => r,
        Err(e) => return Outcome::Retry { reason: e.to_string(), after: None },
    };
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|s| Duration::from_secs(s.min(30)));
    let body = resp.body_mut().with_config().limit(1 << 20).read_to_vec().unwrap_or_default();
    match status {
        200..=299 => {
            let rejected = proto::ExportTraceServiceResponse::decode(&body[..])
                .ok()
                .and_then(|r| r.partial_success)
                .map(|p| p.rejected_spans.max(0) as u64)
                .unwrap_or(0);
            Outcome::Acked { rejected }
        }
        408 | 429 | 500..=599 => {
            Outcome::Retry { reason: format!("HTTP {status}: {}", error_text(&body)), after: retry_after }
        }
        _ => Outcome::Refused { status, message: error_text(&body) },
    }
}

fn error_text(body: &[u8]) -> String {
    #[derive(Clone, PartialEq, prost::Message)]
    struct RpcStatus {
        #[prost(int32, tag = "1")]
        code: i32,
        #[prost(string, tag = "2")]
        message: String,
    }
    if let Ok(s) = RpcStatus::decode(body)
        && !s.message.is_empty()
    {
        return s.message;
    }
    String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned()
}

/// Run the sender until `stop` is set and either the spool is empty or `linger` has passed.
pub fn run(
    spool: Arc<Spool>,
    cfg: SenderConfig,
    metrics: Arc<Metrics>,
    stop: Arc<AtomicBool>,
    linger: Duration,
) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(cfg.timeout))
        .timeout_connect(Some(Duration::from_secs(2)))
        .build()
        .into();
    let url = cfg.url();
    let mut backoff = Duration::from_millis(100);
    let mut stop_at: Option<Instant> = None;
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
        match send(&agent, &url, &batch) {
            Outcome::Acked { rejected } => {
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
                backoff = Duration::from_millis(100);
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
                if let Err(e) = spool.ack(&batch) {
                    tracing::error!(error = %e, "spool acknowledgement failed");
                }
            }
            Outcome::Retry { reason, after } => {
                if metrics.collector_up.swap(false, Ordering::Relaxed) {
                    tracing::warn!(%reason, url = %url, "collector unavailable; batches stay in the spool");
                }
                metrics.send_errors.fetch_add(1, Ordering::Relaxed);
                let pause = after.unwrap_or(backoff);
                backoff = (backoff * 2).min(cfg.max_backoff);
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
