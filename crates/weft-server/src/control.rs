//! The control API: switch tracepoints in instrumented processes through their agents, run
//! live queries through them ([`crate::live`]), and the agents' congestion reports.
//!
//! | route | auth | what |
//! |---|---|---|
//! | `POST /api/control/probes[?wait=2s]` | bearer | queue a [`ProbeCommand`] (JSON) for the agents; with `wait`, answer once every targeted agent reported (or the wait ended) |
//! | `GET /api/control/probes` | bearer | recent commands |
//! | `GET /api/control/probes/{id}` | bearer | a command with its results per agent and process |
//! | `POST /api/control/captures[?wait=3s]` | bearer | queue an EXIST [`CaptureCommand`] (JSON) for the agents; with `wait`, answer once every targeted agent returned its [`CaptureOutcome`] (or the wait ended) |
//! | `GET /api/control/captures` | bearer | recent captures |
//! | `GET /api/control/captures/{id}` | bearer | a capture with its outcome per agent |
//! | `POST /api/control/exist/plan[?wait=20s]` | bearer | ask EXIST's coverage optimizer ([`crate::exist`]) for a profiling round over the replicas the agents report, dispatch its captures; with `wait`, answer with their outcomes and each service's merged profile |
//! | `GET /api/control/agents` | bearer | agents seen, with their last report |
//! | `POST /api/control/poll` | bearer | agents: return results, long-poll for new commands ([`PollRequest`] → [`PollResponse`]) |
//! | `/api/control/queries…`, `POST /api/control/live` | bearer | live queries: see [`crate::live`] |
//! | `PUT /api/control/explore/forest` | bearer | `weft explore`'s hypothesis forest, kept in the data directory ([`crate::explore`]) |
//! | `POST /api/agents/report` | bearer token | an agent's [`AgentReport`]: per-process ring occupancy and drops, its spool; shown on `/metrics` |
//!
//! The token comes from `weft serve --control-token` (or `WEFT_CONTROL_TOKEN`); without one the
//! `/api/control/*` routes answer 404 (control disabled). A missing or wrong token gets 401. Every
//! body is bounded ([`MAX_MESSAGE_BYTES`] for commands, 16 MiB for polls, 1 MiB for reports);
//! a malformed command gets 400 naming the field. The collector keeps the last
//! [`MAX_COMMANDS`] commands and `ServerConfig::max_agents` agents (the staler ones go first).
//!
//! Every capture is recorded with why it was dispatched (`reason`: `manual`, `profiling round
//! N`, or the anomaly rule that fired and what it measured); the anomaly rules
//! (`ServerConfig::exist`) watch the spans as they are ingested ([`ControlHub::observe_spans`])
//! and dispatch a capture of every replica of their service.
//!
//! An agent's first poll (no `after`) only learns the current cursor: commands are for the
//! processes running when they are issued, not replayed to agents that connect later.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Serialize;
use weft_control::proto::{
    AgentReport, CaptureCommand, CaptureOutcome, CommandResult, MAX_MESSAGE_BYTES, PollRequest, PollResponse,
    ProbeCommand, QueuedCapture, QueuedCommand,
};
use weft_probe::select::glob_match;

use crate::api::{ApiError, json_bytes};
use crate::exist::{self, Plan, Profile, Replica, RuleState, ServiceInput, Trigger};
use crate::state::{AppState, ExistConfig};

/// Commands kept.
pub const MAX_COMMANDS: usize = 1024;
/// Agents tracked by default (`ServerConfig::max_agents`).
pub const MAX_AGENTS: usize = 4096;
/// An agent that has not polled or reported for this long is not a command target.
pub const AGENT_STALE: Duration = Duration::from_secs(60);

struct Entry {
    id: u64,
    command: ProbeCommand,
    created: SystemTime,
    targets: Vec<String>,
    results: BTreeMap<String, CommandResult>,
}

struct CaptureEntry {
    id: u64,
    capture: CaptureCommand,
    /// Why it was dispatched.
    reason: String,
    /// The service and round of the optimizer that planned it.
    service: Option<String>,
    round: Option<u64>,
    created: SystemTime,
    targets: Vec<String>,
    results: BTreeMap<String, CaptureOutcome>,
}

struct AgentEntry {
    host: String,
    last_seen: Instant,
    polling: bool,
    report: Option<AgentReport>,
}

#[derive(Default)]
struct Hub {
    next_id: u64,
    commands: VecDeque<Entry>,
    captures: VecDeque<CaptureEntry>,
    agents: HashMap<String, AgentEntry>,
    /// EXIST rounds planned (profiling and anomalies).
    rounds: u64,
    /// Agents forgotten to make room past `max_agents`.
    agents_evicted: u64,
}

impl Hub {
    /// The agents polling now whose name `glob` matches (all without one), sorted.
    fn polling_agents(&self, glob: Option<&str>) -> Vec<String> {
        let mut t: Vec<String> = self
            .agents
            .iter()
            .filter(|(name, a)| {
                a.polling && a.last_seen.elapsed() < AGENT_STALE && glob.is_none_or(|g| glob_match(g, name))
            })
            .map(|(n, _)| n.clone())
            .collect();
        t.sort();
        t
    }

    /// Queues a capture; its id.
    fn queue_capture(
        &mut self,
        capture: CaptureCommand,
        reason: String,
        planned: Option<(&str, u64)>,
    ) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let targets = self.polling_agents(capture.agent.as_deref());
        if self.captures.len() >= MAX_COMMANDS {
            self.captures.pop_front();
        }
        tracing::info!(id, reason = %reason, "capture queued");
        self.captures.push_back(CaptureEntry {
            id,
            capture,
            reason,
            service: planned.map(|p| p.0.to_owned()),
            round: planned.map(|p| p.1),
            created: SystemTime::now(),
            targets,
            results: BTreeMap::new(),
        });
        id
    }

    /// The merged profile of each round of `service`, oldest first (empty rounds left out).
    fn round_profiles(&self, service: &str) -> Vec<Profile> {
        let mut rounds: BTreeMap<u64, Profile> = BTreeMap::new();
        for e in self.captures.iter().filter(|e| e.service.as_deref() == Some(service)) {
            let Some(r) = e.round else { continue };
            let p = rounds.entry(r).or_default();
            for o in e.results.values() {
                p.merge(&Profile::from_counts(&o.functions));
            }
        }
        rounds.into_values().filter(|p| p.total() > 0).collect()
    }

    /// The optimizer's inputs: the services of the targets the live agents report.
    fn exist_inputs(&self, cfg: &ExistConfig) -> Vec<ServiceInput> {
        let mut by_service: BTreeMap<&str, Vec<Replica>> = BTreeMap::new();
        for (name, a) in &self.agents {
            if !a.polling || a.last_seen.elapsed() >= AGENT_STALE {
                continue;
            }
            for t in a.report.iter().flat_map(|r| &r.targets) {
                by_service.entry(&t.service).or_default().push(Replica {
                    agent: name.clone(),
                    pid: t.pid,
                    binary_bytes: t.binary_bytes,
                });
            }
        }
        by_service
            .into_iter()
            .map(|(service, replicas)| {
                let past = self.round_profiles(service);
                let instability = match past.as_slice() {
                    [.., a, b] => Some(b.change(a)),
                    _ => None,
                };
                ServiceInput {
                    service: service.to_owned(),
                    replicas,
                    priority: cfg.priorities.get(service).copied().unwrap_or(0.5),
                    instability,
                }
            })
            .collect()
    }

    /// Plans a round and queues its captures (one per replica, addressed to its agent by pid).
    fn dispatch_round(
        &mut self,
        cfg: &ExistConfig,
        trigger: &Trigger,
        seed: u64,
        functions: &[String],
        why: &str,
    ) -> (u64, Plan, Vec<u64>) {
        let inputs = self.exist_inputs(cfg);
        let plan = exist::plan(&inputs, &cfg.optimizer, trigger, seed);
        self.rounds += 1;
        let round = self.rounds;
        let mut ids = Vec::new();
        for p in &plan.captures {
            for r in &p.replicas {
                let capture = CaptureCommand {
                    pid: Some(r.pid),
                    service: None,
                    cgroup: None,
                    period_ms: p.period_ms,
                    cores: None,
                    budget_bytes: None,
                    backend: None,
                    functions: functions.to_vec(),
                    module: None,
                    force: false,
                    tracepoints: Vec::new(),
                    agent: Some(r.agent.clone()),
                };
                let reason = format!(
                    "{why} (round {round}, {} of {} replicas)",
                    p.replicas.len(),
                    inputs.iter().find(|i| i.service == p.service).map_or(0, |i| i.replicas.len())
                );
                ids.push(self.queue_capture(capture, reason, Some((&p.service, round))));
            }
        }
        (round, plan, ids)
    }
}

/// Counters of the control API.
#[derive(Debug, Default)]
pub struct ControlCounters {
    /// Commands queued.
    pub commands: AtomicU64,
    /// Requests refused for their token.
    pub unauthorized: AtomicU64,
    /// Requests refused as malformed.
    pub malformed: AtomicU64,
    /// Agent polls.
    pub polls: AtomicU64,
    /// Agent reports.
    pub reports: AtomicU64,
}

/// The control API's state (in [`AppState`]).
pub struct ControlHub {
    token: Option<String>,
    /// Agents remembered at most (here and by the live-query exchange).
    pub(crate) max_agents: usize,
    hub: Mutex<Hub>,
    exist: ExistConfig,
    rules: Mutex<Vec<RuleState>>,
    notify: tokio::sync::Notify,
    /// Counters (rendered on `/metrics`).
    pub counters: ControlCounters,
    /// Live queries ([`crate::live`]).
    pub live: crate::live::LiveHub,
}

impl ControlHub {
    /// A hub remembering at most `max_agents` agents; `token = None` disables the control routes.
    pub fn new(token: Option<String>, max_agents: usize) -> ControlHub {
        ControlHub::with_exist(token, max_agents, ExistConfig::default())
    }

    /// A hub with EXIST's optimizer settings, priorities and anomaly rules.
    pub fn with_exist(token: Option<String>, max_agents: usize, exist: ExistConfig) -> ControlHub {
        ControlHub {
            token: token.filter(|t| !t.is_empty()),
            max_agents: max_agents.max(1),
            hub: Mutex::new(Hub { next_id: 1, ..Hub::default() }),
            rules: Mutex::new(exist.rules.iter().cloned().map(RuleState::new).collect()),
            exist,
            notify: tokio::sync::Notify::new(),
            counters: ControlCounters::default(),
            live: crate::live::LiveHub::default(),
        }
    }

    /// Feeds the anomaly rules with ingested spans (the server spans of their services); a
    /// rule that fires dispatches a capture of every replica of its service. Cheap without
    /// rules.
    pub fn observe_spans(&self, spans: &[weft_model::Span]) {
        if self.exist.rules.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut fired = Vec::new();
        {
            let mut rules = self.rules.lock().unwrap_or_else(|e| e.into_inner());
            for s in spans.iter().filter(|s| s.kind == weft_model::SpanKind::Server) {
                let service = s.resource.service_name();
                for r in rules.iter_mut().filter(|r| r.rule.service == service) {
                    let latency = Duration::from_nanos(s.end_ns.saturating_sub(s.start_ns));
                    if let Some(f) = r.observe(latency, now) {
                        fired.push((r.rule.clone(), f));
                    }
                }
            }
        }
        if fired.is_empty() || !self.enabled() {
            return;
        }
        let mut hub = self.lock();
        for (rule, f) in fired {
            let why = format!(
                "anomaly: {} measured {:.1} ms over {} spans (rule `{}`)",
                rule.service,
                f.value.as_secs_f64() * 1e3,
                f.samples,
                rule.text
            );
            let seed = hub.rounds;
            let (round, plan, ids) = hub.dispatch_round(
                &self.exist,
                &Trigger::Anomaly(rule.service.clone()),
                seed,
                &rule.functions,
                &why,
            );
            tracing::warn!(round, captures = ids.len(), skipped = ?plan.skipped, "{why}");
        }
        drop(hub);
        self.notify.notify_waiters();
    }

    /// Is the control API enabled?
    pub fn enabled(&self) -> bool {
        self.token.is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Hub> {
        self.hub.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The bearer token of a request: 404 when the control API is off, 401 when wrong.
    pub(crate) fn check(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let Some(want) = &self.token else {
            return Err(ApiError::not_found(
                "the control API is disabled: start weft serve with --control-token (or WEFT_CONTROL_TOKEN)",
            ));
        };
        let got = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
            .map(str::trim);
        match got {
            Some(g) if constant_time_eq(g.as_bytes(), want.as_bytes()) => Ok(()),
            _ => {
                self.counters.unauthorized.fetch_add(1, Ordering::Relaxed);
                Err(ApiError {
                    status: StatusCode::UNAUTHORIZED,
                    message: "missing or wrong bearer token (Authorization: Bearer <--control-token>)".into(),
                })
            }
        }
    }

    /// [`ControlHub::check`], then the `wait` parameter ([`parse_wait`]).
    pub(crate) fn check_wait(
        &self,
        headers: &HeaderMap,
        wait: Option<&str>,
    ) -> Result<Option<Duration>, ApiError> {
        self.check(headers)?;
        wait.map(parse_wait).transpose()
    }

    /// [`ControlHub::check_wait`], then the body (at most `limit` bytes; a bad one is counted
    /// as malformed).
    pub(crate) async fn request(
        &self,
        headers: &HeaderMap,
        wait: Option<&str>,
        body: Body,
        limit: usize,
    ) -> Result<(Option<Duration>, bytes::Bytes), ApiError> {
        let wait = self.check_wait(headers, wait)?;
        let bytes = read_body(body, limit).await.inspect_err(|_| {
            self.counters.malformed.fetch_add(1, Ordering::Relaxed);
        })?;
        Ok((wait, bytes))
    }

    fn seen(&self, hub: &mut Hub, agent: &str, host: &str, polling: bool) -> bool {
        if !hub.agents.contains_key(agent) && hub.agents.len() >= self.max_agents {
            let oldest = hub.agents.iter().min_by_key(|(_, a)| a.last_seen).map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                hub.agents.remove(&k);
                hub.agents_evicted += 1;
            }
        }
        let e = hub.agents.entry(agent.to_string()).or_insert_with(|| AgentEntry {
            host: host.to_string(),
            last_seen: Instant::now(),
            polling,
            report: None,
        });
        e.last_seen = Instant::now();
        e.host = host.to_string();
        e.polling |= polling;
        true
    }

    /// [`ControlHub::request`] with the body parsed by `parse` (a bad one counted as
    /// malformed); the error answer otherwise.
    async fn admit_body<T>(
        &self,
        headers: &HeaderMap,
        q: &WaitParam,
        body: Body,
        parse: impl FnOnce(&[u8]) -> Result<T, ApiError>,
    ) -> Result<(Option<Duration>, T), Response> {
        let (wait, bytes) = self
            .request(headers, q.wait.as_deref(), body, MAX_MESSAGE_BYTES)
            .await
            .map_err(IntoResponse::into_response)?;
        let v = parse(&bytes).map_err(|e| {
            self.counters.malformed.fetch_add(1, Ordering::Relaxed);
            e.into_response()
        })?;
        Ok((wait, v))
    }

    /// Waits up to `w` until `done` holds (checked at every change of the hub).
    async fn wait_for(&self, w: Duration, done: impl Fn(&Hub) -> bool) {
        let deadline = tokio::time::Instant::now() + w;
        loop {
            let notified = self.notify.notified();
            if done(&self.lock()) || tokio::time::Instant::now() >= deadline {
                return;
            }
            let _ = tokio::time::timeout_at(deadline, notified).await;
        }
    }

    /// Prometheus text for the agents' reports (appended to `/metrics`).
    pub fn render_metrics(&self) -> String {
        let hub = self.lock();
        let mut o = String::new();
        let c = &self.counters;
        let _ = writeln!(
            o,
            "# HELP weft_control_commands_total Control commands accepted.\n# TYPE weft_control_commands_total counter\nweft_control_commands_total {}",
            c.commands.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            o,
            "# HELP weft_control_unauthorized_total Control requests refused for their token.\n# TYPE weft_control_unauthorized_total counter\nweft_control_unauthorized_total {}",
            c.unauthorized.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            o,
            "# HELP weft_control_malformed_total Control requests refused as malformed.\n# TYPE weft_control_malformed_total counter\nweft_control_malformed_total {}",
            c.malformed.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            o,
            "# HELP weft_agent_reports_total Agent reports received.\n# TYPE weft_agent_reports_total counter\nweft_agent_reports_total {}",
            c.reports.load(Ordering::Relaxed)
        );
        let live = hub.agents.values().filter(|a| a.last_seen.elapsed() < AGENT_STALE).count();
        let _ = writeln!(
            o,
            "# HELP weft_agents Agents seen in the last minute.\n# TYPE weft_agents gauge\nweft_agents {live}"
        );
        let _ = writeln!(
            o,
            "# HELP weft_agents_evicted_total Agents forgotten to make room (at most {} are remembered).\n# TYPE weft_agents_evicted_total counter\nweft_agents_evicted_total {}",
            self.max_agents, hub.agents_evicted
        );
        type G = fn(&weft_control::proto::ProcessReport) -> String;
        let per: [(&str, &str, G); 5] = [
            (
                "weft_agent_process_ring_occupancy_max",
                "Fullest probe ring of the process (0..1), as its agent last reported.",
                |p| p.max_occupancy.to_string(),
            ),
            ("weft_agent_process_pending_bytes", "Probe bytes recorded and not yet drained.", |p| {
                p.pending_bytes.to_string()
            }),
            ("weft_agent_process_dropped_ring_full", "Records dropped because a ring was full.", |p| {
                p.dropped_ring_full.to_string()
            }),
            ("weft_agent_process_dropped_no_ring", "Records dropped because no ring was free.", |p| {
                p.dropped_no_ring.to_string()
            }),
            ("weft_agent_process_records", "Records the agent drained.", |p| p.records.to_string()),
        ];
        let mut agents: Vec<(&String, &AgentEntry)> = hub.agents.iter().collect();
        agents.sort_by(|a, b| a.0.cmp(b.0));
        for (name, help, get) in per {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge");
            for (agent, e) in &agents {
                let Some(r) = &e.report else { continue };
                for p in &r.processes {
                    let _ = writeln!(
                        o,
                        "{name}{{agent=\"{}\",pid=\"{}\",service=\"{}\"}} {}",
                        esc(agent),
                        p.pid,
                        esc(&p.service),
                        get(p)
                    );
                }
            }
        }
        type P = fn(&weft_control::proto::PipelineReport) -> u64;
        let spool: [(&str, P); 4] = [
            ("weft_agent_spool_bytes", |p| p.spool_bytes),
            ("weft_agent_spool_dropped_spans", |p| p.spool_dropped_spans),
            ("weft_agent_spans_sent", |p| p.spans_sent),
            ("weft_agent_send_errors", |p| p.send_errors),
        ];
        for (name, get) in spool {
            let _ = writeln!(o, "# TYPE {name} gauge");
            for (agent, e) in &agents {
                if let Some(r) = &e.report {
                    let _ = writeln!(o, "{name}{{agent=\"{}\"}} {}", esc(agent), get(&r.pipeline));
                }
            }
        }
        o
    }
}

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Routes (merged into the router).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/control/probes", post(submit).get(list_commands))
        .route("/api/control/probes/{id}", get(get_command))
        .route("/api/control/captures", post(submit_capture).get(list_captures))
        .route("/api/control/captures/{id}", get(get_capture))
        .route("/api/control/exist/plan", post(exist_plan))
        .route("/api/control/agents", get(list_agents))
        .route("/api/control/poll", post(poll))
        .route("/api/agents/report", post(report))
        .merge(crate::live::routes())
}

/// A request body of at most `limit` bytes (413 above).
pub(crate) async fn read_body(body: Body, limit: usize) -> Result<bytes::Bytes, ApiError> {
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        let too_big = e.to_string().contains("length limit")
            || std::error::Error::source(&e).is_some_and(|s| s.to_string().contains("length limit"));
        if too_big {
            ApiError {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                message: format!("body exceeds the limit of {limit} bytes"),
            }
        } else {
            ApiError::bad_request(format!("reading the body: {e}"))
        }
    })
}

pub(crate) fn json<T: Serialize>(status: StatusCode, v: &T) -> Response {
    let mut r = json_bytes(serde_json::to_vec(v).unwrap_or_default());
    *r.status_mut() = status;
    r
}

#[derive(Serialize)]
struct CommandView {
    id: u64,
    command: ProbeCommand,
    created_unix_ms: u64,
    targets: Vec<String>,
    results: Vec<CommandResult>,
    complete: bool,
    /// Tracepoints matched and processes that acknowledged, over every result.
    matched: usize,
    applied_processes: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    warning: Option<String>,
}

fn view(e: &Entry) -> CommandView {
    let results: Vec<CommandResult> = e.results.values().cloned().collect();
    let matched = results.iter().flat_map(|r| &r.processes).map(|p| p.matched).sum();
    let applied_processes = results.iter().flat_map(|r| &r.processes).filter(|p| p.applied).count();
    CommandView {
        id: e.id,
        command: e.command.clone(),
        created_unix_ms: e
            .created
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
        targets: e.targets.clone(),
        complete: Queued::complete(e),
        results,
        matched,
        applied_processes,
        warning: e
            .targets
            .is_empty()
            .then(|| "no agent is polling this collector: nothing was switched".into()),
    }
}

#[derive(serde::Deserialize)]
struct WaitParam {
    wait: Option<String>,
}

fn parse_wait(s: &str) -> Result<Duration, ApiError> {
    let s = s.trim();
    let (num, unit) = s.find(|c: char| !c.is_ascii_digit()).map(|i| s.split_at(i)).unwrap_or((s, "ms"));
    let n: u64 =
        num.parse().map_err(|_| ApiError::bad_request(format!("wait={s:?}: expected e.g. 2s or 500ms")))?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        _ => return Err(ApiError::bad_request(format!("wait={s:?}: unit must be ms or s"))),
    };
    Ok(d.min(Duration::from_secs(30)))
}

async fn submit(
    State(st): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<WaitParam>,
    body: Body,
) -> Response {
    let c = &st.control;
    let parse = |b: &[u8]| ProbeCommand::parse(b).map_err(|e| ApiError::bad_request(e.to_string()));
    let (wait, cmd) = match c.admit_body(&headers, &q, body, parse).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let id = {
        let mut hub = c.lock();
        let id = hub.next_id;
        hub.next_id += 1;
        let targets = hub.polling_agents(cmd.agent.as_deref());
        if hub.commands.len() >= MAX_COMMANDS {
            hub.commands.pop_front();
        }
        hub.commands.push_back(Entry {
            id,
            command: cmd,
            created: SystemTime::now(),
            targets,
            results: BTreeMap::new(),
        });
        id
    };
    c.counters.commands.fetch_add(1, Ordering::Relaxed);
    tracing::info!(id, "control command queued");
    c.notify.notify_waiters();
    submitted(c, wait, id, |hub| &hub.commands).await
}

/// A queued command or capture, as the routes show it.
trait Queued {
    type View: Serialize;
    /// `command` or `capture`, for messages.
    const WHAT: &'static str;
    fn id(&self) -> u64;
    fn view(&self) -> Self::View;
    /// Every targeted agent answered.
    fn complete(&self) -> bool;
}

impl Queued for Entry {
    type View = CommandView;
    const WHAT: &'static str = "command";
    fn id(&self) -> u64 {
        self.id
    }
    fn view(&self) -> CommandView {
        view(self)
    }
    fn complete(&self) -> bool {
        self.targets.iter().all(|t| self.results.contains_key(t))
    }
}

impl Queued for CaptureEntry {
    type View = CaptureView;
    const WHAT: &'static str = "capture";
    fn id(&self) -> u64 {
        self.id
    }
    fn view(&self) -> CaptureView {
        capture_view(self)
    }
    fn complete(&self) -> bool {
        self.targets.iter().all(|t| self.results.contains_key(t))
    }
}

/// The answer to a submission: after `wait` (if any) for every targeted agent, the entry
/// (200 when complete, 202 when not).
async fn submitted<E: Queued>(
    c: &ControlHub,
    wait: Option<Duration>,
    id: u64,
    list: fn(&Hub) -> &VecDeque<E>,
) -> Response {
    if let Some(w) = wait {
        c.wait_for(w, |hub| list(hub).iter().find(|e| e.id() == id).is_none_or(E::complete)).await;
    }
    let hub = c.lock();
    match list(&hub).iter().find(|e| e.id() == id) {
        Some(e) => json(if e.complete() { StatusCode::OK } else { StatusCode::ACCEPTED }, &e.view()),
        None => ApiError::not_found(format!("the {} was evicted", E::WHAT)).into_response(),
    }
}

/// The last 100 entries, newest first.
fn recent<E: Queued>(st: &AppState, headers: &HeaderMap, list: fn(&Hub) -> &VecDeque<E>) -> Response {
    if let Err(e) = st.control.check(headers) {
        return e.into_response();
    }
    let hub = st.control.lock();
    let v: Vec<E::View> = list(&hub).iter().rev().take(100).map(E::view).collect();
    json(StatusCode::OK, &v)
}

/// One entry by id.
fn one<E: Queued>(st: &AppState, headers: &HeaderMap, id: &str, list: fn(&Hub) -> &VecDeque<E>) -> Response {
    if let Err(e) = st.control.check(headers) {
        return e.into_response();
    }
    let Ok(id) = id.parse::<u64>() else {
        return ApiError::bad_request(format!("{} id {id:?} is not a number", E::WHAT)).into_response();
    };
    let hub = st.control.lock();
    match list(&hub).iter().find(|e| e.id() == id) {
        Some(e) => json(StatusCode::OK, &e.view()),
        None => ApiError::not_found(format!("no {} {id} (the last {MAX_COMMANDS} are kept)", E::WHAT))
            .into_response(),
    }
}

async fn list_commands(State(st): State<AppState>, headers: HeaderMap) -> Response {
    recent(&st, &headers, |hub| &hub.commands)
}

async fn get_command(State(st): State<AppState>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    one(&st, &headers, &id, |hub| &hub.commands)
}

#[derive(Serialize)]
struct AgentView<'a> {
    agent: &'a str,
    host: &'a str,
    last_seen_ms_ago: u64,
    polling: bool,
    report: Option<&'a AgentReport>,
}

async fn list_agents(State(st): State<AppState>, headers: HeaderMap) -> Response {
    if let Err(e) = st.control.check(&headers) {
        return e.into_response();
    }
    let hub = st.control.lock();
    let mut v: Vec<AgentView<'_>> = hub
        .agents
        .iter()
        .map(|(k, a)| AgentView {
            agent: k,
            host: &a.host,
            last_seen_ms_ago: a.last_seen.elapsed().as_millis() as u64,
            polling: a.polling,
            report: a.report.as_ref(),
        })
        .collect();
    v.sort_by(|a, b| a.agent.cmp(b.agent));
    json(StatusCode::OK, &v)
}

fn pending_for(hub: &Hub, agent: &str, after: u64) -> Vec<QueuedCommand> {
    hub.commands
        .iter()
        .filter(|e| e.id > after && e.command.agent.as_deref().is_none_or(|g| glob_match(g, agent)))
        .take(MAX_PER_POLL)
        .map(|e| QueuedCommand { id: e.id, command: e.command.clone() })
        .collect()
}

/// Commands (and captures) handed to an agent in one poll at most.
const MAX_PER_POLL: usize = 64;

fn captures_for(hub: &Hub, agent: &str, after: u64) -> Vec<QueuedCapture> {
    hub.captures
        .iter()
        .filter(|e| e.id > after && e.capture.targets_agent(agent))
        .take(MAX_PER_POLL)
        .map(|e| QueuedCapture { id: e.id, capture: e.capture.clone() })
        .collect()
}

#[derive(Serialize)]
struct CaptureView {
    id: u64,
    capture: CaptureCommand,
    reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    service: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    round: Option<u64>,
    created_unix_ms: u64,
    targets: Vec<String>,
    results: Vec<CaptureOutcome>,
    complete: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    warning: Option<String>,
}

fn capture_view(e: &CaptureEntry) -> CaptureView {
    CaptureView {
        id: e.id,
        capture: e.capture.clone(),
        reason: e.reason.clone(),
        service: e.service.clone(),
        round: e.round,
        created_unix_ms: e
            .created
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
        targets: e.targets.clone(),
        complete: Queued::complete(e),
        results: e.results.values().cloned().collect(),
        warning: e
            .targets
            .is_empty()
            .then(|| "no agent is polling this collector: nothing was captured".into()),
    }
}

async fn submit_capture(
    State(st): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<WaitParam>,
    body: Body,
) -> Response {
    let c = &st.control;
    let parse = |b: &[u8]| CaptureCommand::parse(b).map_err(|e| ApiError::bad_request(e.to_string()));
    let (wait, capture) = match c.admit_body(&headers, &q, body, parse).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let id = c.lock().queue_capture(capture, "manual".into(), None);
    c.counters.commands.fetch_add(1, Ordering::Relaxed);
    c.notify.notify_waiters();
    submitted(c, wait, id, |hub| &hub.captures).await
}

async fn list_captures(State(st): State<AppState>, headers: HeaderMap) -> Response {
    recent(&st, &headers, |hub| &hub.captures)
}

async fn get_capture(State(st): State<AppState>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    one(&st, &headers, &id, |hub| &hub.captures)
}

async fn poll(State(st): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let c = &st.control;
    let bytes = match c.request(&headers, None, body, 16 << 20).await {
        Ok((_, b)) => b,
        Err(e) => return e.into_response(),
    };
    let req: PollRequest = match serde_json::from_slice(&bytes) {
        Ok(r) => r,
        Err(e) => {
            c.counters.malformed.fetch_add(1, Ordering::Relaxed);
            return ApiError::bad_request(format!("poll request: {e}")).into_response();
        }
    };
    if req.agent.is_empty() || req.agent.len() > 256 {
        return ApiError::bad_request("poll request: field agent must be 1..=256 bytes").into_response();
    }
    c.counters.polls.fetch_add(1, Ordering::Relaxed);
    let got_results = !req.results.is_empty() || !req.capture_results.is_empty();
    {
        let mut hub = c.lock();
        c.seen(&mut hub, &req.agent, &req.host, true);
        for (id, res) in req.results {
            if let Some(e) = hub.commands.iter_mut().find(|e| e.id == id) {
                if !e.targets.contains(&req.agent) {
                    e.targets.push(req.agent.clone());
                }
                e.results.insert(req.agent.clone(), res);
            }
        }
        for (id, res) in req.capture_results {
            if let Some(e) = hub.captures.iter_mut().find(|e| e.id == id) {
                if !e.targets.contains(&req.agent) {
                    e.targets.push(req.agent.clone());
                }
                e.results.insert(req.agent.clone(), res);
            }
        }
    }
    if got_results {
        c.notify.notify_waiters();
    }
    let Some(after) = req.after else {
        let cursor = c.lock().next_id - 1;
        return json(StatusCode::OK, &PollResponse { cursor, ..PollResponse::default() });
    };
    let deadline = tokio::time::Instant::now() + Duration::from_millis(req.wait_ms.min(30_000));
    loop {
        let notified = c.notify.notified();
        let (commands, mut captures, cursor) = {
            let mut hub = c.lock();
            c.seen(&mut hub, &req.agent, &req.host, true);
            (pending_for(&hub, &req.agent, after), captures_for(&hub, &req.agent, after), hub.next_id - 1)
        };
        if !commands.is_empty() || !captures.is_empty() || tokio::time::Instant::now() >= deadline {
            // Commands and captures share the ids: a truncated list of either bounds the cursor.
            let mut cursor = cursor.max(after);
            if commands.len() == MAX_PER_POLL {
                cursor = cursor.min(commands.last().map_or(cursor, |q| q.id));
            }
            if captures.len() == MAX_PER_POLL {
                cursor = cursor.min(captures.last().map_or(cursor, |q| q.id));
            }
            let commands: Vec<QueuedCommand> = commands.into_iter().filter(|q| q.id <= cursor).collect();
            captures.retain(|q| q.id <= cursor);
            return json(StatusCode::OK, &PollResponse { cursor, commands, captures });
        }
        let _ = tokio::time::timeout_at(deadline, notified).await;
    }
}

async fn report(State(st): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let c = &st.control;
    // A report registers (or replaces) an agent: only holders of the token may do that.
    if let Err(e) = c.check(&headers) {
        return e.into_response();
    }
    let bytes = match read_body(body, 1 << 20).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let r: AgentReport = match serde_json::from_slice(&bytes) {
        Ok(r) => r,
        Err(e) => {
            c.counters.malformed.fetch_add(1, Ordering::Relaxed);
            return ApiError::bad_request(format!("agent report: {e}")).into_response();
        }
    };
    if r.agent.is_empty() || r.agent.len() > 256 || r.processes.len() > 100_000 {
        return ApiError::bad_request("agent report: field agent must be 1..=256 bytes").into_response();
    }
    c.counters.reports.fetch_add(1, Ordering::Relaxed);
    let mut hub = c.lock();
    c.seen(&mut hub, &r.agent, &r.host, false);
    if let Some(a) = hub.agents.get_mut(&r.agent) {
        a.report = Some(r);
    }
    let mut resp = StatusCode::NO_CONTENT.into_response();
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// The body of `POST /api/control/exist/plan` (all optional).
#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct PlanRequest {
    /// The sampler's seed (default: the round number).
    #[serde(default)]
    seed: Option<u64>,
    /// Globs of the functions captured (default: every function of each target's executable).
    #[serde(default)]
    functions: Vec<String>,
    /// Plan only; dispatch nothing.
    #[serde(default)]
    dry_run: bool,
}

#[derive(Serialize)]
struct MergedView {
    service: String,
    /// Replicas whose outcome came back with calls.
    replicas: usize,
    profile: Profile,
}

#[derive(Serialize)]
struct PlanView {
    round: u64,
    seed: u64,
    plan: Plan,
    captures: Vec<CaptureView>,
    /// Per service, the replicas' profiles merged (filled as outcomes arrive).
    merged: Vec<MergedView>,
    complete: bool,
}

async fn exist_plan(
    State(st): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<WaitParam>,
    body: Body,
) -> Response {
    let c = &st.control;
    let parse = |b: &[u8]| {
        let bad = |m: String| ApiError::bad_request(format!("plan request: {m}"));
        if b.iter().all(u8::is_ascii_whitespace) {
            return Ok(PlanRequest::default());
        }
        let r: PlanRequest = serde_json::from_slice(b).map_err(|e| bad(e.to_string()))?;
        if r.functions.len() > 256 || r.functions.iter().any(|f| f.is_empty() || f.len() > 256) {
            return Err(bad("field functions: at most 256 globs of 1..=256 bytes".into()));
        }
        Ok(r)
    };
    let (wait, req) = match c.admit_body(&headers, &q, body, parse).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let (round, seed, plan, ids) = {
        let mut hub = c.lock();
        let seed = req.seed.unwrap_or(hub.rounds + 1);
        if req.dry_run {
            let plan =
                exist::plan(&hub.exist_inputs(&c.exist), &c.exist.optimizer, &Trigger::Profiling, seed);
            (0, seed, plan, Vec::new())
        } else {
            let (round, plan, ids) =
                hub.dispatch_round(&c.exist, &Trigger::Profiling, seed, &req.functions, "profiling");
            (round, seed, plan, ids)
        }
    };
    c.counters.commands.fetch_add(ids.len() as u64, Ordering::Relaxed);
    c.notify.notify_waiters();
    let done = |hub: &Hub| {
        ids.iter().all(|id| hub.captures.iter().find(|e| e.id == *id).is_none_or(Queued::complete))
    };
    if let Some(w) = wait {
        c.wait_for(w, done).await;
    }
    let hub = c.lock();
    let entries: Vec<&CaptureEntry> = hub.captures.iter().filter(|e| ids.contains(&e.id)).collect();
    let merged = plan
        .captures
        .iter()
        .map(|p| {
            let mut profile = Profile::default();
            let mut replicas = 0;
            for o in entries
                .iter()
                .filter(|e| e.service.as_deref() == Some(&*p.service))
                .flat_map(|e| e.results.values())
            {
                let one = Profile::from_counts(&o.functions);
                replicas += usize::from(one.total() > 0);
                profile.merge(&one);
            }
            MergedView { service: p.service.clone(), replicas, profile }
        })
        .collect();
    let complete = done(&hub);
    let view = PlanView {
        round,
        seed,
        plan,
        captures: entries.iter().map(|e| capture_view(e)).collect(),
        merged,
        complete,
    };
    json(if complete { StatusCode::OK } else { StatusCode::ACCEPTED }, &view)
}
