//! The live backend: the loop against a running collector (`weft serve`) and its agents.
//!
//! * traces: `GET /api/v3/traces` (Jaeger api_v3, OTLP JSON: whole traces with parents,
//!   attributes and events) by root span name and start-time window, at most `max`, newest
//!   first; traces whose root is another span are left out;
//! * switching: `POST /api/control/probes?wait=` through [`weft_control::client::Collector`]
//!   (bearer token). A tracepoint of the search space is a span name or `span/event`; the
//!   probe a selector names is the span's, or the event's;
//! * congestion: `GET /api/control/agents` — any live process whose fullest ring is over half
//!   full, or any agent whose spool is.
//!
//! What it enabled is written to `STATE/enabled.json` before each switch, so that a run that
//! ends any way — normally, interrupted ([`Live::restore`]) or killed (the next
//! [`Live::connect`] finds the file) — disables exactly what it enabled: only tracepoints that
//! were off when it started, never one that was already on.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use weft_control::client::{ClientError, Collector};
use weft_control::proto::{ProbeCommand, ProbeOp};
use weft_model::Span;
use weft_model::codec::otlp::decode_json;
use weft_probe::Selector;

use super::{Backend, BackendError, ByTrace, Window};
use crate::space::{SearchSpace, TracepointKind};

/// The persisted list of what a run enabled, in its state directory.
pub const ENABLED_FILE: &str = "enabled.json";
/// Largest trace answer read, in bytes.
const MAX_ANSWER: u64 = 256 << 20;

/// Why the live backend failed.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// The control API refused or failed.
    #[error("control API at {url}: {source}")]
    Control {
        /// The collector's control base URL.
        url: String,
        /// The cause.
        source: ClientError,
    },
    /// The read API failed.
    #[error("read API {url}: {detail}")]
    Read {
        /// The request.
        url: String,
        /// What went wrong.
        detail: String,
    },
    /// A command reached no agent.
    #[error("{command}: {warning}")]
    NoAgent {
        /// The command.
        command: String,
        /// The collector's warning.
        warning: String,
    },
    /// The state file.
    #[error("{path}: {detail}")]
    State {
        /// The file.
        path: String,
        /// What went wrong.
        detail: String,
    },
    /// Stopped by the user (Ctrl-C).
    #[error("interrupted")]
    Interrupted,
}

/// Where the collector is and how to talk to it.
#[derive(Debug, Clone)]
pub struct LiveConfig {
    /// Base URL of the read API (the collector's query listener).
    pub reads: String,
    /// Base URL of the control API.
    pub control: String,
    /// The control token.
    pub token: Option<String>,
    /// Where `enabled.json` lives.
    pub state_dir: PathBuf,
    /// A trace is read once it started this long ago (its spans must reach the store).
    pub settle: Duration,
    /// How long a switch waits for every agent to apply it.
    pub switch_wait: Duration,
}

/// The loop's view of a running system (see the module docs).
pub struct Live {
    reads: String,
    http: ureq::Agent,
    control: Collector,
    control_url: String,
    state_file: PathBuf,
    settle: Duration,
    switch_wait: Duration,
    /// Search-space tracepoint → the probe that records it.
    probes: HashMap<String, String>,
    /// Probes on when the run started.
    original: BTreeSet<String>,
    /// Probes this run turned on → the tracepoints it turned them on for.
    ours: BTreeMap<String, BTreeSet<String>>,
    interrupted: Box<dyn Fn() -> bool + Send>,
    congested_checks: u64,
    cleaned: usize,
}

impl Live {
    /// Connects: disables what a previous run left enabled (its `enabled.json`), then lists the
    /// probes that are on. A refused token is an error here, before anything is switched.
    pub fn connect(config: LiveConfig, space: &SearchSpace) -> Result<Live, LiveError> {
        let probes = space
            .tracepoints
            .iter()
            .map(|t| {
                let probe = match (t.kind, &t.parent) {
                    (TracepointKind::Annotation, Some(p)) => t
                        .name
                        .strip_prefix(p.as_str())
                        .and_then(|r| r.strip_prefix('/'))
                        .or_else(|| t.name.rsplit_once('/').map(|(_, e)| e))
                        .unwrap_or(&t.name),
                    _ => &t.name,
                };
                (t.name.clone(), probe.to_owned())
            })
            .collect();
        let http = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(2)))
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();
        let mut live = Live {
            reads: config.reads.trim_end_matches('/').to_owned(),
            http,
            control: Collector::new(&config.control, config.token),
            control_url: config.control.clone(),
            state_file: config.state_dir.join(ENABLED_FILE),
            settle: config.settle,
            switch_wait: config.switch_wait,
            probes,
            original: BTreeSet::new(),
            ours: BTreeMap::new(),
            interrupted: Box::new(|| false),
            congested_checks: 0,
            cleaned: 0,
        };
        std::fs::create_dir_all(&config.state_dir).map_err(|e| LiveError::State {
            path: config.state_dir.display().to_string(),
            detail: e.to_string(),
        })?;
        live.ours = live.load()?;
        if !live.ours.is_empty() {
            tracing::warn!(
                "{}: a previous run left {} tracepoints enabled; disabling them",
                live.state_file.display(),
                live.ours.len()
            );
            live.cleaned = live.ours.len();
            live.restore()?;
        }
        live.original = live.list_enabled()?;
        Ok(live)
    }

    /// Makes every wait check `interrupted` (e.g. a Ctrl-C flag); once it says so the backend
    /// fails with [`LiveError::Interrupted`].
    pub fn with_interrupt(mut self, interrupted: impl Fn() -> bool + Send + 'static) -> Live {
        self.interrupted = Box::new(interrupted);
        self
    }

    /// Probes on when the run started.
    pub fn original(&self) -> &BTreeSet<String> {
        &self.original
    }

    /// Probes a previous run had left enabled, disabled at connect.
    pub fn cleaned(&self) -> usize {
        self.cleaned
    }

    /// Congestion checks that found an agent's queue over half full.
    pub fn congested_checks(&self) -> u64 {
        self.congested_checks
    }

    /// Disables every probe this run enabled (and only those), then removes `enabled.json`.
    pub fn restore(&mut self) -> Result<(), LiveError> {
        while let Some((probe, _)) = self.ours.pop_first() {
            self.command(ProbeOp::Disable, &probe)?;
            self.save()?;
        }
        match std::fs::remove_file(&self.state_file) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => {
                Err(LiveError::State { path: self.state_file.display().to_string(), detail: e.to_string() })
            }
        }
    }

    /// The probes enabled in any process now.
    pub fn list_enabled(&self) -> Result<BTreeSet<String>, LiveError> {
        let list = ProbeCommand { op: ProbeOp::List, selector: None, pid: None, service: None, agent: None };
        let status = self.control.submit(&list, self.switch_wait).map_err(|e| self.control_error(e))?;
        if let Some(w) = status.warning {
            return Err(LiveError::NoAgent { command: "list".into(), warning: w });
        }
        Ok(status
            .results
            .iter()
            .flat_map(|r| &r.processes)
            .flat_map(|p| &p.tracepoints)
            .filter(|t| t.enabled)
            .map(|t| t.name.clone())
            .collect())
    }

    fn control_error(&self, source: ClientError) -> LiveError {
        LiveError::Control { url: self.control_url.clone(), source }
    }

    fn command(&self, op: ProbeOp, probe: &str) -> Result<usize, LiveError> {
        let cmd = ProbeCommand {
            op,
            selector: Some(format!("name:{probe}")),
            pid: None,
            service: None,
            agent: None,
        };
        let status = self.control.submit(&cmd, self.switch_wait).map_err(|e| self.control_error(e))?;
        if let Some(w) = status.warning {
            return Err(LiveError::NoAgent { command: format!("{} {probe}", op.as_str()), warning: w });
        }
        if !status.complete {
            tracing::warn!("{} {probe}: not every agent answered within {:?}", op.as_str(), self.switch_wait);
        }
        Ok(status.matched)
    }

    fn load(&self) -> Result<BTreeMap<String, BTreeSet<String>>, LiveError> {
        let path = self.state_file.display().to_string();
        match std::fs::read(&self.state_file) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| LiveError::State { path, detail: e.to_string() }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
            Err(e) => Err(LiveError::State { path, detail: e.to_string() }),
        }
    }

    fn save(&self) -> Result<(), LiveError> {
        let err = |e: std::io::Error| LiveError::State {
            path: self.state_file.display().to_string(),
            detail: e.to_string(),
        };
        let tmp = self.state_file.with_extension("json.tmp");
        let bytes = serde_json::to_vec_pretty(&self.ours).unwrap_or_default();
        std::fs::write(&tmp, bytes).map_err(err)?;
        std::fs::rename(&tmp, &self.state_file).map_err(err)
    }

    /// Sleeps `d`, waking every 100 ms to check for an interrupt.
    fn sleep(&self, d: Duration) -> Result<(), LiveError> {
        let end = Instant::now() + d;
        loop {
            if (self.interrupted)() {
                return Err(LiveError::Interrupted);
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            std::thread::sleep(left.min(Duration::from_millis(100)));
        }
    }
}

fn now_ns() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// `ns` since the epoch as RFC 3339 (UTC, nanoseconds).
fn rfc3339(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // civil date from days since 1970-01-01 (proleptic Gregorian, eras of 400 years)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:09}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        ns % 1_000_000_000
    )
}

/// Percent-encodes a query value.
fn encode(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl Backend for Live {
    fn begin_epoch(&mut self, epoch: u64, length: Duration) -> Result<Option<Window>, BackendError> {
        if (self.interrupted)() {
            return Err(LiveError::Interrupted.into());
        }
        let start_ns = now_ns();
        Ok(Some(Window { epoch, start_ns, end_ns: start_ns + length.as_nanos() as u64 }))
    }

    fn congested(&mut self, interval: Duration) -> Result<bool, BackendError> {
        self.sleep(interval)?;
        let agents = self.control.agents().map_err(|e| self.control_error(e))?;
        let full: Vec<String> = agents
            .iter()
            .filter_map(|a| {
                let r = a.report.as_ref()?;
                let ring =
                    r.processes.iter().filter(|p| p.alive).map(|p| p.max_occupancy).fold(0.0, f64::max);
                let spool = if r.pipeline.spool_limit_bytes > 0 {
                    r.pipeline.spool_bytes as f64 / r.pipeline.spool_limit_bytes as f64
                } else {
                    0.0
                };
                (ring > 0.5 || spool > 0.5).then(|| {
                    format!("{} (ring {:.0} %, spool {:.0} %)", a.agent, ring * 100.0, spool * 100.0)
                })
            })
            .collect();
        if full.is_empty() {
            return Ok(false);
        }
        self.congested_checks += 1;
        tracing::warn!("congested: {}; enabling nothing this epoch", full.join(", "));
        Ok(true)
    }

    fn traces(
        &mut self,
        request_type: &str,
        window: &Window,
        max: usize,
    ) -> Result<Vec<Vec<Span>>, BackendError> {
        // wait for the window's traces to reach the store
        let until = window.end_ns.min(now_ns().saturating_sub(self.settle.as_nanos() as u64));
        if until <= window.start_ns {
            return Ok(Vec::new());
        }
        let url = format!(
            "{}/api/v3/traces?query.operationName={}&query.startTimeMin={}&query.startTimeMax={}&query.searchDepth={}",
            self.reads,
            encode(request_type),
            encode(&rfc3339(window.start_ns)),
            encode(&rfc3339(until)),
            max.clamp(1, 10_000)
        );
        let read = |detail: String| LiveError::Read { url: url.clone(), detail };
        let mut r = self.http.get(&url).call().map_err(|e| read(e.to_string()))?;
        match r.status().as_u16() {
            200 => {}
            404 => return Ok(Vec::new()),
            s => {
                let body = r.body_mut().read_to_string().unwrap_or_default();
                return Err(read(format!("HTTP {s}: {}", body.chars().take(300).collect::<String>())).into());
            }
        }
        let bytes =
            r.body_mut().with_config().limit(MAX_ANSWER).read_to_vec().map_err(|e| read(e.to_string()))?;
        let v: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| read(e.to_string()))?;
        let inner = serde_json::to_vec(&v["result"]).map_err(|e| read(e.to_string()))?;
        let spans = decode_json(&inner).map_err(|e| read(e.to_string()))?;
        let mut by_trace = ByTrace::default();
        spans.into_iter().for_each(|s| by_trace.push(s));
        Ok(by_trace
            .finish()
            .into_iter()
            .filter(|t| t.iter().any(|s| s.parent_span_id.is_none() && s.name == request_type))
            .take(max)
            .collect())
    }

    fn switch(&mut self, command: &ProbeCommand) -> Result<usize, BackendError> {
        let selector = command.validate()?;
        let Some(Selector::Name(unit)) = selector else {
            return Err(format!("the live backend switches by name: {:?}", command.selector).into());
        };
        let probe = self.probes.get(&unit).cloned().unwrap_or_else(|| unit.clone());
        match command.op {
            ProbeOp::Enable => {
                if self.original.contains(&probe) {
                    return Ok(0);
                }
                let first = !self.ours.contains_key(&probe);
                self.ours.entry(probe.clone()).or_default().insert(unit);
                self.save()?;
                if first {
                    return Ok(self.command(ProbeOp::Enable, &probe)?);
                }
                Ok(0)
            }
            ProbeOp::Disable | ProbeOp::ForceDisable => {
                let Some(units) = self.ours.get_mut(&probe) else { return Ok(0) };
                units.remove(&unit);
                if !units.is_empty() {
                    return Ok(0);
                }
                let n = self.command(ProbeOp::Disable, &probe)?;
                self.ours.remove(&probe);
                self.save()?;
                Ok(n)
            }
            ProbeOp::List => Ok(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_format_as_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(rfc3339(951_782_400_000_000_007), "2000-02-29T00:00:00.000000007Z");
        assert_eq!(rfc3339(1_798_761_599_500_000_000), "2026-12-31T23:59:59.500000000Z");
        assert_eq!(encode("POST /a+b"), "POST%20%2Fa%2Bb");
    }
}
