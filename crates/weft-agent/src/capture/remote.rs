//! Captures requested through the collector's control API: a [`CaptureCommand`] from the
//! command long poll runs on the node's [`Engine`]; its function calls are woven into the
//! request spans the agent drained from the target's weft-probe rings meanwhile (the
//! [`Tap`]) and go to the collector through the agent's spool and OTLP sender, like every
//! other span; a [`CaptureOutcome`] goes back on the next poll, with the capture's
//! function-occurrence profile ([`function_counts`]).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weft_control::proto::{CaptureCommand, CaptureOutcome};
use weft_model::{Span, conv};

use super::engine::{Backend, CaptureError, CaptureRequest, CaptureTarget, Cores, Engine};
use crate::agent::encode_batch;
use crate::spool::{Appended, Spool};

/// Application spans kept by a [`Tap`] at most.
pub const MAX_TAPPED: usize = 200_000;

/// While a capture runs, a copy of the spans the agent drains that carry a thread id (the
/// requests its function calls go into); bounded by [`MAX_TAPPED`], the rest counted.
#[derive(Debug, Default)]
pub struct Tap {
    active: bool,
    spans: Vec<Span>,
    dropped: u64,
}

impl Tap {
    /// Starts keeping spans (forgets earlier ones).
    pub fn start(&mut self) {
        *self = Tap { active: true, ..Tap::default() };
    }

    /// Stops; the spans kept and how many were over the bound.
    pub fn take(&mut self) -> (Vec<Span>, u64) {
        let t = std::mem::take(self);
        (t.spans, t.dropped)
    }

    /// Keeps what it can of `spans` while active.
    pub fn offer(&mut self, spans: &[Span]) {
        if !self.active {
            return;
        }
        for s in spans.iter().filter(|s| s.attributes.get(conv::THREAD_ID).is_some()) {
            if self.spans.len() < MAX_TAPPED {
                self.spans.push(s.clone());
            } else {
                self.dropped += 1;
            }
        }
    }
}

/// The request an agent runs for `cmd`.
pub fn request_from(cmd: &CaptureCommand) -> Result<CaptureRequest, CaptureError> {
    let target = match (cmd.pid, &cmd.service, &cmd.cgroup) {
        (Some(p), None, None) => CaptureTarget::Pid(p),
        (None, Some(s), None) => CaptureTarget::Service(s.clone()),
        (None, None, Some(c)) => CaptureTarget::Cgroup(c.into()),
        _ => return Err(CaptureError::Target("give exactly one target: pid, service or cgroup".into())),
    };
    let cores = match cmd.cores.as_deref() {
        None => Cores::Auto,
        Some(s) => Cores::parse(s).ok_or_else(|| {
            CaptureError::Target(format!("cores {s:?}: give auto or a CPU list such as 0-3,6"))
        })?,
    };
    let backend = match cmd.backend.as_deref() {
        None | Some("software") => Backend::Software,
        Some("intel_pt") => Backend::IntelPt,
        Some(b) => return Err(CaptureError::Target(format!("backend {b:?}: give software or intel_pt"))),
    };
    Ok(CaptureRequest {
        target,
        period: Duration::from_millis(cmd.period_ms),
        cores,
        budget: cmd.budget_bytes,
        backend,
        functions: cmd.functions.clone(),
        module: cmd.module.as_ref().map(Into::into),
        force: cmd.force,
        tracepoints: cmd.tracepoints.clone(),
    })
}

/// Calls per function name over the function-call spans among `spans` (EXIST's
/// function-occurrence profile of the capture), sorted by name.
pub fn function_counts(spans: &[Span]) -> Vec<(String, u64)> {
    use weft_model::Value;
    use weft_model::kernel::KIND;
    let mut counts: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
    for s in spans {
        if matches!(s.attributes.get(KIND), Some(Value::Str(k)) if &**k == "uprobe") {
            *counts.entry(&s.name).or_default() += 1;
        }
    }
    counts.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// Runs the collector's captures on this node.
#[derive(Clone)]
pub struct Executor {
    /// The node's engine (one allocator for every capture).
    pub engine: Engine,
    /// Filled by the drain loop while a capture runs.
    pub tap: Arc<Mutex<Tap>>,
    pub spool: Arc<Spool>,
    pub agent: String,
    pub host: String,
    pub compress: bool,
    /// Spans per spooled batch.
    pub batch: usize,
    /// How long after the period the tap stays open, so requests that ended in it are drained
    /// (the drain loop's batch interval and a poll).
    pub settle: Duration,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor").field("agent", &self.agent).field("engine", &self.engine).finish()
    }
}

impl Executor {
    /// Runs `cmd` and ships its spans; never panics, errors are in the outcome.
    pub fn run(&self, cmd: &CaptureCommand) -> CaptureOutcome {
        let received = Instant::now();
        let mut out =
            CaptureOutcome { agent: self.agent.clone(), host: self.host.clone(), ..Default::default() };
        let tap = |f: &mut dyn FnMut(&mut Tap)| {
            if let Ok(mut t) = self.tap.lock() {
                f(&mut t)
            }
        };
        tap(&mut |t| t.start());
        let result = request_from(cmd).and_then(|req| self.engine.run(&req, received));
        let r = match result {
            Ok(r) => r,
            Err(e) => {
                tap(&mut |t| {
                    t.take();
                });
                out.error = Some(e.to_string());
                return out;
            }
        };
        std::thread::sleep(self.settle);
        let mut app = Vec::new();
        tap(&mut |t| {
            app = std::mem::take(&mut t.spans);
            if t.dropped > 0 {
                tracing::warn!(
                    dropped = t.dropped,
                    "capture: request spans over the tap's bound were not used"
                );
            }
            *t = Tap::default();
        });
        let fs = r.spans(&app, &self.host);
        let c = &r.counters;
        out.pids = r.pids.clone();
        (out.start_ns, out.end_ns) = (r.start_ns, r.end_ns);
        (out.calls, out.switches, out.control_ops, out.lost) = (c.calls, c.switches, c.control_ops, c.lost);
        out.tracepoints = c.tracepoints as u64;
        out.start_latency_us = c.start_latency.as_micros() as u64;
        out.stop_latency_us = c.stop_latency.as_micros() as u64;
        out.full_cores = c.full_cores.clone();
        out.target_exited = c.target_exited;
        out.in_requests = fs.nest.placed + fs.nest.nested;
        out.functions = function_counts(&fs.spans);
        for chunk in fs.spans.chunks(self.batch.max(1)) {
            match self.spool.append(&encode_batch(chunk, self.compress), chunk.len() as u32, self.compress) {
                Ok(Appended::Stored { .. }) => out.spans += chunk.len() as u64,
                Ok(Appended::Dropped) => {}
                Err(e) => {
                    out.error = Some(format!("capture spans not spooled: {e}"));
                    break;
                }
            }
        }
        tracing::info!(calls = c.calls, spans = out.spans, in_requests = out.in_requests, "capture shipped");
        out
    }
}
