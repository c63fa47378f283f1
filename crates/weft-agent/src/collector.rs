//! The agent's loops on the collector's control plane: congestion reports every few seconds and
//! the control-command long poll, both through [`weft_control::client::Collector`]. Spans go
//! through [`crate::ship`] instead.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use weft_control::client::{Collector, POLL_ROUTE, REPORT_ROUTE};
use weft_control::proto::{CaptureCommand, CaptureOutcome, CommandResult, PollRequest, ProbeCommand};

use crate::metrics::Metrics;

/// Which collector, and who the agent is there.
#[derive(Debug, Clone)]
pub struct Link {
    /// The collector's control API (with the bearer token of `weft serve --control-token`;
    /// without it the agent does not take commands from the collector).
    pub collector: Collector,
    pub agent: String,
    pub host: String,
}

fn sleep_unless(stop: &AtomicBool, d: Duration) {
    let until = Instant::now() + d;
    while !stop.load(Ordering::Relaxed) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50).min(until.saturating_duration_since(Instant::now())));
    }
}

/// Processes listed as capture targets in one report at most.
pub const MAX_TARGETS: usize = 4096;

/// Push [`weft_control::proto::AgentReport`]s every `interval` until `stop`, with the
/// processes that declare `probe_dir` theirs as capture targets.
pub fn run_reporter(
    link: Link,
    metrics: Arc<Metrics>,
    stop: Arc<AtomicBool>,
    interval: Duration,
    probe_dir: std::path::PathBuf,
) {
    let mut warned = false;
    while !stop.load(Ordering::Relaxed) {
        let mut report = metrics.report(&link.agent, &link.host);
        report.targets = crate::capture::usage::declared_targets(&probe_dir, MAX_TARGETS);
        match link.collector.report(&report) {
            Ok(()) => {
                metrics.reports_sent.fetch_add(1, Ordering::Relaxed);
                warned = false;
            }
            Err(e) => {
                metrics.report_errors.fetch_add(1, Ordering::Relaxed);
                if !warned {
                    tracing::debug!(url = %link.collector.url(REPORT_ROUTE), "congestion report not accepted: {e}");
                    warned = true;
                }
            }
        }
        sleep_unless(&stop, interval);
    }
}

/// Fetch commands from the collector, execute them with `exec` (captures with `capture`, in
/// this thread: a capture holds the poll for its period), return the results on the next
/// poll; until `stop`. Results that could not be delivered are kept for the next poll. Returns
/// at once without a control token.
pub fn run_poller(
    link: Link,
    stop: Arc<AtomicBool>,
    exec: Arc<dyn Fn(&ProbeCommand) -> CommandResult + Send + Sync>,
    capture: Arc<dyn Fn(&CaptureCommand) -> CaptureOutcome + Send + Sync>,
) {
    if !link.collector.has_token() {
        return;
    }
    let wait = Duration::from_secs(5);
    let mut after: Option<u64> = None;
    let mut results: Vec<(u64, CommandResult)> = Vec::new();
    let mut capture_results: Vec<(u64, CaptureOutcome)> = Vec::new();
    let mut backoff = Duration::from_millis(200);
    let mut last_complaint = String::new();
    while !stop.load(Ordering::Relaxed) {
        let req = PollRequest {
            agent: link.agent.clone(),
            host: link.host.clone(),
            after,
            results: results.clone(),
            capture_results: capture_results.clone(),
            wait_ms: wait.as_millis() as u64,
        };
        match link.collector.poll(&req) {
            Ok(resp) => {
                results.clear();
                capture_results.clear();
                after = Some(resp.cursor);
                for q in resp.commands {
                    tracing::info!(id = q.id, op = q.command.op.as_str(), selector = ?q.command.selector, "control command from the collector");
                    // (exec counts the request and its outcome)
                    results.push((q.id, exec(&q.command)));
                }
                for q in resp.captures {
                    tracing::info!(id = q.id, period_ms = q.capture.period_ms, "capture from the collector");
                    capture_results.push((q.id, capture(&q.capture)));
                }
                backoff = Duration::from_millis(200);
                last_complaint.clear();
                continue;
            }
            Err(e) => {
                let complaint = e.to_string();
                if complaint != last_complaint {
                    tracing::warn!(url = %link.collector.url(POLL_ROUTE), "{complaint}");
                    last_complaint = complaint;
                }
            }
        }
        sleep_unless(&stop, backoff);
        backoff = (backoff * 2).min(Duration::from_secs(10));
    }
}
