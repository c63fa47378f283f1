//! The agent's link to the collector's control plane: congestion reports
//! (`POST /api/agents/report`) and control commands (`POST /api/control/poll`, long poll with
//! the bearer token). Spans go through [`crate::ship`] instead.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::metrics::Metrics;
use crate::proto::{CommandResult, PollRequest, PollResponse, ProbeCommand};

/// Where the collector is and how to authenticate.
#[derive(Debug, Clone)]
pub struct Link {
    /// `http://host:port` of any of the collector's HTTP listeners.
    pub base: String,
    /// Bearer token for the control API (`weft serve --control-token`); without it the agent
    /// does not take commands from the collector.
    pub token: Option<String>,
    pub agent: String,
    pub host: String,
}

impl Link {
    fn url(&self, path: &str) -> String {
        let b = self.base.trim_end_matches('/');
        let b = b.strip_suffix("/v1/traces").unwrap_or(b);
        format!("{b}{path}")
    }
}

fn http(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .timeout_connect(Some(Duration::from_secs(2)))
        .build()
        .into()
}

fn sleep_unless(stop: &AtomicBool, d: Duration) {
    let until = Instant::now() + d;
    while !stop.load(Ordering::Relaxed) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50).min(until.saturating_duration_since(Instant::now())));
    }
}

/// Push [`crate::proto::AgentReport`]s every `interval` until `stop`.
pub fn run_reporter(link: Link, metrics: Arc<Metrics>, stop: Arc<AtomicBool>, interval: Duration) {
    let agent = http(Duration::from_secs(5));
    let url = link.url("/api/agents/report");
    let mut warned = false;
    while !stop.load(Ordering::Relaxed) {
        let report = metrics.report(&link.agent, &link.host);
        let body = serde_json::to_vec(&report).unwrap_or_default();
        let ok = agent
            .post(&url)
            .header("Content-Type", "application/json")
            .send(&body[..])
            .map(|r| r.status().is_success())
            .unwrap_or(false);
        if ok {
            metrics.reports_sent.fetch_add(1, Ordering::Relaxed);
            warned = false;
        } else {
            metrics.report_errors.fetch_add(1, Ordering::Relaxed);
            if !warned {
                tracing::debug!(url = %url, "congestion report not accepted");
                warned = true;
            }
        }
        sleep_unless(&stop, interval);
    }
}

/// Fetch commands from the collector, execute them with `exec`, return the results on the next
/// poll; until `stop`. Results that could not be delivered are kept for the next poll.
pub fn run_poller(
    link: Link,
    stop: Arc<AtomicBool>,
    exec: Arc<dyn Fn(&ProbeCommand) -> CommandResult + Send + Sync>,
) {
    let Some(token) = link.token.clone() else { return };
    let wait = Duration::from_secs(5);
    let agent = http(wait + Duration::from_secs(10));
    let url = link.url("/api/control/poll");
    let mut after: Option<u64> = None;
    let mut results: Vec<(u64, CommandResult)> = Vec::new();
    let mut backoff = Duration::from_millis(200);
    let mut last_complaint = String::new();
    while !stop.load(Ordering::Relaxed) {
        let req = PollRequest {
            agent: link.agent.clone(),
            host: link.host.clone(),
            after,
            results: results.clone(),
            wait_ms: wait.as_millis() as u64,
        };
        let body = serde_json::to_vec(&req).unwrap_or_default();
        let res = agent
            .post(&url)
            .header("Content-Type", "application/json")
            .header("Authorization", &format!("Bearer {token}"))
            .send(&body[..]);
        let complaint = match res {
            Ok(mut r) if r.status().is_success() => {
                let bytes = r.body_mut().with_config().limit(16 << 20).read_to_vec().unwrap_or_default();
                match serde_json::from_slice::<PollResponse>(&bytes) {
                    Ok(resp) => {
                        results.clear();
                        after = Some(resp.cursor);
                        for q in resp.commands {
                            tracing::info!(id = q.id, op = q.command.op.as_str(), selector = ?q.command.selector, "control command from the collector");
                            // (exec counts the request and its outcome)
                            results.push((q.id, exec(&q.command)));
                        }
                        backoff = Duration::from_millis(200);
                        last_complaint.clear();
                        continue;
                    }
                    Err(e) => format!("unreadable poll answer: {e}"),
                }
            }
            Ok(r) => match r.status().as_u16() {
                401 | 403 => "the collector refused the control token".to_string(),
                404 => "the collector's control API is disabled (no --control-token)".to_string(),
                s => format!("control poll answered HTTP {s}"),
            },
            Err(e) => format!("control poll failed: {e}"),
        };
        if complaint != last_complaint {
            tracing::warn!(url = %url, "{complaint}");
            last_complaint = complaint;
        }
        sleep_unless(&stop, backoff);
        backoff = (backoff * 2).min(Duration::from_secs(10));
    }
}
