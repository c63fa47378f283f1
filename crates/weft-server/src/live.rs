//! Live queries at the cluster level: the collector plans a query (weft-query, typed against
//! the tracepoints its agents report), deploys it to every agent, merges the agents' partials
//! per window and serves the results.
//!
//! | route | auth | what |
//! |---|---|---|
//! | `POST /api/control/queries[?wait=2s][&keep=NAME]` | bearer | body: the query text. 201 with its id and plan; `EXPLAIN …` answers the plan only (200); an invalid query gets 400 with `line`, `column` and `reason`. With `wait`, answers once every live agent runs (or refused) it. With `keep`, its closed windows are written to the store's result table `NAME` (SQL: `live_NAME`, see [`crate::live_keep`]); a name not `[a-z0-9_]{1,64}`, or of a table holding other columns, gets 400 |
//! | `GET /api/control/queries` | bearer | the queries, running and ended, and the agents in the exchange |
//! | `GET /api/control/queries/{id}/results[?windows=N]` | bearer | closed windows (rows, contributing and missing agents), the total (closed windows and late partials), per-agent totals, agents' state (running, late, dead), failures, late partials, bytes received, `kept` (a kept query's table, windows and rows written, waiting, write errors) |
//! | `DELETE /api/control/queries/{id}[?wait=2s]` | bearer | remove: agents detach it from every process (their tables are freed); its results stay readable |
//! | `POST /api/control/live` | bearer | agents: deliver partials, learn which queries to run ([`LiveSync`] → [`LiveAnswer`]); held until the set changes |
//!
//! A window `[start, start + interval)` closes `interval + grace` after its start (grace: half
//! the interval, at least 1 s); a partial arriving later is counted as late and merged into the
//! query's total and its agent's total only (never into a closed window, which was already
//! served and kept). An
//! agent expected in a window (it reported the query running) and absent from it is listed as
//! missing; an agent silent for longer than its long poll plus [`DEAD_AFTER`] is dead. Nothing
//! waits for either. Bounded: [`MAX_QUERIES`] queries (the oldest ended ones go first),
//! [`MAX_WINDOWS`] closed and [`MAX_OPEN_WINDOWS`] open windows each (a partial for a window
//! that cannot have started yet is refused and counted), [`MAX_SCHEMAS`] tracepoint schemas,
//! `ServerConfig::max_agents` agents (the stalest go first).
//!
//! A happened-before join of two weft-probe tracepoints is deployed as two plans
//! (`weft_query::LivePlan::join_plans`): the query's id runs the downstream half, whose
//! partials are merged as above; id `| `[`CARRY`] runs the upstream half, which packs the
//! carried columns into the request's baggage (its partials are not merged; its failures are
//! the query's).
//!
//! A kept query's closed windows are written by the handlers that close them (outside the
//! hub's lock, on a blocking thread) every [`KEEP_WINDOWS`] windows, [`KEEP_EVERY`], and once
//! the query has ended and its last window closed; a failed write is counted (`kept.errors`)
//! and logged, its windows dropped. The store bounds each table by rows
//! ([`weft_store::results::MAX_RESULT_ROWS`]).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Serialize;
use serde_json::{Value, json};
use weft_control::live::{LiveAnswer, LiveFailure, LiveSync, QueryDeploy, WirePlan, WireSource};
use weft_probe::agg::{KeyValue, Output, Partial};
use weft_query::merge::{Cell, rows};
use weft_query::{ListCatalog, LivePlan};
use weft_store::datafusion::arrow::datatypes::SchemaRef;

use crate::api::ApiError;
use crate::control::json as json_answer;
use crate::live_keep::{self, KeptWindow};
use crate::state::AppState;

/// Bit set in the deploy id of a join's upstream half.
pub const CARRY: u64 = 1 << 62;

/// Queries kept (running and ended).
pub const MAX_QUERIES: usize = 256;
/// Closed windows kept per query.
pub const MAX_WINDOWS: usize = 600;
/// Tracepoint schemas kept.
pub const MAX_SCHEMAS: usize = 16384;
/// Windows open (collecting partials) per query at most.
pub const MAX_OPEN_WINDOWS: usize = 64;
/// Failures kept per query.
const MAX_FAILURES: usize = 256;
/// Longest query text.
const MAX_QUERY_BYTES: usize = 64 << 10;
/// A kept query's closed windows are written once this many wait.
pub const KEEP_WINDOWS: usize = 60;
/// … or once the oldest waiting one has waited this long.
pub const KEEP_EVERY: Duration = Duration::from_secs(10);
/// Silence beyond an agent's long poll after which it is dead.
pub const DEAD_AFTER: Duration = Duration::from_secs(10);

struct LiveAgent {
    last_seen: Instant,
    wait: Duration,
    running: BTreeSet<u64>,
    failed: BTreeSet<u64>,
}

impl LiveAgent {
    fn dead(&self) -> bool {
        self.last_seen.elapsed() > self.wait + DEAD_AFTER
    }
}

#[derive(Serialize, Clone)]
struct AgentFailure {
    agent: String,
    #[serde(flatten)]
    failure: LiveFailure,
}

struct OpenWindow {
    parts: BTreeMap<String, Partial>,
}

struct Closed {
    start: u64,
    partial: Partial,
    agents: Vec<String>,
    missing: Vec<String>,
}

/// Where a kept query's windows go, and how that went.
struct Keep {
    name: String,
    schema: SchemaRef,
    pending: Vec<KeptWindow>,
    since: Option<Instant>,
    windows: u64,
    rows: u64,
    errors: u64,
    last_error: Option<String>,
}

struct LiveQuery {
    text: String,
    keep: Option<Keep>,
    plan: LivePlan,
    deploy: QueryDeploy,
    /// A join's upstream half (deployed as id `| CARRY`).
    carry: Option<QueryDeploy>,
    created: Instant,
    interval_ns: u64,
    grace_ns: u64,
    ends: Option<Instant>,
    removed: bool,
    open: BTreeMap<u64, OpenWindow>,
    closed: VecDeque<Closed>,
    /// Start of the newest closed window (later partials for it or older ones are late).
    closed_until: u64,
    total: Partial,
    by_agent: BTreeMap<String, Partial>,
    /// Agent → ms from submission to its first report of running the query.
    started: BTreeMap<String, u64>,
    failures: VecDeque<AgentFailure>,
    late: u64,
    /// Partials for a window that cannot have started yet, or beyond [`MAX_OPEN_WINDOWS`].
    refused: u64,
    reports: u64,
    /// Compact partial bytes received (what crossed the network, before base64 and JSON).
    partial_bytes: u64,
    merge_errors: u64,
}

impl LiveQuery {
    fn active(&self) -> bool {
        !self.removed && self.ends.is_none_or(|e| Instant::now() < e)
    }

    fn state(&self) -> &'static str {
        if self.removed {
            "removed"
        } else if self.active() {
            "running"
        } else {
            "finished"
        }
    }

    /// Close every window whose grace ended.
    fn close_due(&mut self, now_ns: u64, agents: &BTreeMap<String, LiveAgent>, id: u64) {
        let due: Vec<u64> = self
            .open
            .keys()
            .filter(|s| s.saturating_add(self.interval_ns + self.grace_ns) <= now_ns)
            .copied()
            .collect();
        for start in due {
            let Some(w) = self.open.remove(&start) else { continue };
            let mut partial = Partial::default();
            for (agent, p) in &w.parts {
                if partial.merge(p).is_err() {
                    self.merge_errors += 1;
                    continue;
                }
                let _ = self.by_agent.entry(agent.clone()).or_default().merge(p);
            }
            if self.total.merge(&partial).is_err() {
                self.merge_errors += 1;
            }
            let missing: Vec<String> = self
                .started
                .keys()
                .filter(|a| !w.parts.contains_key(*a))
                .filter(|a| agents.get(*a).is_none_or(|x| !x.failed.contains(&id)))
                .cloned()
                .collect();
            if self.closed.len() >= MAX_WINDOWS {
                self.closed.pop_front();
            }
            self.closed_until = self.closed_until.max(start + 1);
            if let Some(k) = &mut self.keep {
                k.since.get_or_insert_with(Instant::now);
                k.pending.push(KeptWindow {
                    start_ns: start,
                    end_ns: start.saturating_add(self.interval_ns),
                    rows: rows(&self.plan, &partial),
                    agents: w.parts.len(),
                    missing: missing.len(),
                });
            }
            self.closed.push_back(Closed { start, partial, agents: w.parts.into_keys().collect(), missing });
        }
    }

    /// The kept windows due to be written (see the module's doc).
    fn take_kept(&mut self) -> Option<(String, SchemaRef, Vec<KeptWindow>)> {
        let done = !self.active() && self.open.is_empty();
        let k = self.keep.as_mut()?;
        let due =
            k.pending.len() >= KEEP_WINDOWS || k.since.is_some_and(|t| t.elapsed() >= KEEP_EVERY) || done;
        if k.pending.is_empty() || !due {
            return None;
        }
        k.since = None;
        Some((k.name.clone(), k.schema.clone(), std::mem::take(&mut k.pending)))
    }
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    queries: BTreeMap<u64, LiveQuery>,
    schemas: BTreeMap<String, String>,
    agents: BTreeMap<String, LiveAgent>,
}

impl Inner {
    fn close_all(&mut self) {
        let now = weft_probe::clock::realtime_ns();
        let Inner { queries, agents, .. } = self;
        for (id, q) in queries.iter_mut() {
            q.close_due(now, agents, *id);
        }
    }

    fn wanted(&self) -> Vec<&QueryDeploy> {
        self.queries
            .values()
            .filter(|q| q.active())
            .flat_map(|q| std::iter::once(&q.deploy).chain(&q.carry))
            .collect()
    }
}

/// The collector's live queries (held by [`crate::control::ControlHub`]).
pub struct LiveHub {
    inner: Mutex<Inner>,
    notify: tokio::sync::Notify,
}

impl Default for LiveHub {
    fn default() -> Self {
        LiveHub {
            inner: Mutex::new(Inner { next_id: 1, ..Inner::default() }),
            notify: tokio::sync::Notify::new(),
        }
    }
}

impl LiveHub {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Routes (merged by [`crate::control::routes`]).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/control/queries", post(submit).get(list))
        .route("/api/control/queries/{id}", axum::routing::delete(remove))
        .route("/api/control/queries/{id}/results", get(results))
        .route("/api/control/live", post(sync))
}

#[derive(serde::Deserialize)]
struct Params {
    wait: Option<String>,
    windows: Option<usize>,
    keep: Option<String>,
}

/// Closes the due windows and writes the kept ones to the store (on a blocking thread: file
/// writes and fsyncs).
async fn keep_due(st: &AppState) {
    let jobs: Vec<(u64, String, SchemaRef, LivePlan, Vec<KeptWindow>)> = {
        let mut inner = st.control.live.lock();
        inner.close_all();
        inner
            .queries
            .iter_mut()
            .filter_map(|(id, q)| {
                q.take_kept().map(|(name, schema, w)| (*id, name, schema, q.plan.clone(), w))
            })
            .collect()
    };
    if jobs.is_empty() {
        return;
    }
    let st2 = st.clone();
    let done = tokio::task::spawn_blocking(move || {
        jobs.into_iter()
            .map(|(id, name, schema, plan, windows)| {
                let rows: usize = windows.iter().map(|w| w.rows.len()).sum();
                let r = live_keep::batch(&plan, &schema, &windows)
                    .map_err(|e| e.to_string())
                    .and_then(|b| st2.store.append_result_rows(&name, &b).map_err(|e| e.to_string()));
                (id, windows.len() as u64, rows as u64, r)
            })
            .collect::<Vec<_>>()
    })
    .await;
    let Ok(done) = done else { return };
    let mut inner = st.control.live.lock();
    for (id, windows, rows, r) in done {
        let Some(k) = inner.queries.get_mut(&id).and_then(|q| q.keep.as_mut()) else { continue };
        match r {
            Ok(()) => {
                k.windows += windows;
                k.rows += rows;
            }
            Err(e) => {
                tracing::warn!(id, table = %k.name, error = %e, windows, "kept windows not written");
                k.errors += 1;
                k.last_error = Some(e);
            }
        }
    }
}

fn query_id(id: &str) -> Result<u64, ApiError> {
    id.parse().map_err(|_| ApiError::bad_request(format!("query id {id:?} is not a number")))
}

fn invalid(e: &weft_query::QueryError) -> Response {
    let body = json!({
        "error": {"httpCode": 400, "message": e.to_string()},
        "line": e.line,
        "column": e.column,
        "reason": e.message,
    });
    json_answer(StatusCode::BAD_REQUEST, &body)
}

/// Wait (up to `wait`) until `done` holds, re-checking whenever the hub changes.
async fn wait_until(hub: &LiveHub, wait: Option<Duration>, done: impl Fn(&Inner) -> bool) {
    let Some(w) = wait else { return };
    let deadline = tokio::time::Instant::now() + w;
    loop {
        let notified = hub.notify.notified();
        if done(&hub.lock()) || tokio::time::Instant::now() >= deadline {
            return;
        }
        let _ = tokio::time::timeout_at(deadline, notified).await;
    }
}

async fn submit(
    State(st): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<Params>,
    body: Body,
) -> Response {
    let c = &st.control;
    let (wait, bytes) = match c.request(&headers, q.wait.as_deref(), body, MAX_QUERY_BYTES).await {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let Ok(text) = String::from_utf8(bytes.to_vec()) else {
        return ApiError::bad_request("the query is not UTF-8 text").into_response();
    };
    let hub = &c.live;
    if let Some(name) = &q.keep
        && let Err(e) = weft_store::results::check_name(name)
    {
        return ApiError::bad_request(format!("keep: {e}")).into_response();
    }
    let catalog = {
        let inner = hub.lock();
        inner
            .schemas
            .iter()
            .fold(ListCatalog::new(), |cat, (n, f)| cat.probe(n, f))
            .tracefs("/sys/kernel/tracing/events")
    };
    let plan = match weft_query::plan(&text, &catalog) {
        Ok(p) => p,
        Err(e) => return invalid(&e),
    };
    let explain = weft_query::explain(&plan);
    if plan.explain {
        return json_answer(StatusCode::OK, &json!({"explain": explain}));
    }
    // Where the probe-level plan runs: weft-probe tracepoints (a join's two halves among
    // them) need no wire source; kernel tracepoints and uprobes name theirs.
    let wire = |source| match source {
        weft_query::Source::Probe(_) => None,
        weft_query::Source::Kernel { system, event } => {
            Some(WireSource::Tracepoint(format!("{system}:{event}")))
        }
        weft_query::Source::Uprobe { binary, symbol, ret } => {
            Some(WireSource::Uprobe { binary, symbol, ret })
        }
    };
    let (source, probe, carry) = match (plan.source_plan(), plan.join_plans()) {
        (Some((source, probe)), _) => (wire(source), probe, None),
        (None, Some(j)) => (None, j.downstream, Some(j.upstream)),
        (None, None) => {
            let what = "happened-before joins run between two weft-probe tracepoints only";
            return ApiError::bad_request(format!("cannot run this query: {what}")).into_response();
        }
    };
    let keep = match &q.keep {
        Some(name) => {
            let schema = live_keep::schema(&plan);
            match st.store.result_table_schema(name) {
                Ok(Some(have)) if have.fields() != schema.fields() => {
                    let cols: Vec<&str> = have.fields().iter().map(|f| f.name().as_str()).collect();
                    let msg = format!(
                        "keep: result table {name} holds other columns ({}): keep this query under another name",
                        cols.join(", ")
                    );
                    return ApiError::bad_request(msg).into_response();
                }
                Ok(_) => {}
                Err(e) => return ApiError::bad_request(format!("keep: {e}")).into_response(),
            }
            Some(Keep {
                name: name.clone(),
                schema,
                pending: Vec::new(),
                since: None,
                windows: 0,
                rows: 0,
                errors: 0,
                last_error: None,
            })
        }
        None => None,
    };
    let interval = plan.window.interval.or(plan.window.duration).unwrap_or(Duration::from_secs(1));
    let interval_ns = interval.as_nanos().max(1_000_000) as u64;
    let id = {
        let mut inner = hub.lock();
        if inner.queries.len() >= MAX_QUERIES {
            let ended = inner.queries.iter().find(|(_, q)| !q.active()).map(|(k, _)| *k);
            match ended {
                Some(k) => {
                    inner.queries.remove(&k);
                }
                None => {
                    return ApiError {
                        status: StatusCode::TOO_MANY_REQUESTS,
                        message: format!("{MAX_QUERIES} live queries are running: remove one first"),
                    }
                    .into_response();
                }
            }
        }
        let id = inner.next_id;
        inner.next_id += 1;
        let deploy = QueryDeploy {
            query: id,
            plan: WirePlan::from(&probe),
            interval_ms: (interval_ns / 1_000_000).max(1),
            duration_ms: plan.window.duration.map(|d| d.as_millis() as u64),
            source,
        };
        let carry =
            carry.map(|c| QueryDeploy { query: id | CARRY, plan: WirePlan::from(&c), ..deploy.clone() });
        let now = Instant::now();
        inner.queries.insert(
            id,
            LiveQuery {
                text: text.clone(),
                keep,
                ends: plan.window.duration.map(|d| now + d),
                plan,
                deploy,
                carry,
                created: now,
                interval_ns,
                grace_ns: (interval_ns / 2).max(1_000_000_000),
                removed: false,
                open: BTreeMap::new(),
                closed: VecDeque::new(),
                closed_until: 0,
                total: Partial::default(),
                by_agent: BTreeMap::new(),
                started: BTreeMap::new(),
                failures: VecDeque::new(),
                late: 0,
                refused: 0,
                reports: 0,
                partial_bytes: 0,
                merge_errors: 0,
            },
        );
        id
    };
    tracing::info!(id, query = %text, "live query deployed");
    hub.notify.notify_waiters();
    wait_until(hub, wait, |inner| {
        inner.agents.values().filter(|a| !a.dead()).all(|a| a.running.contains(&id) || a.failed.contains(&id))
    })
    .await;
    let inner = hub.lock();
    let started: BTreeMap<String, u64> =
        inner.queries.get(&id).map(|q| q.started.clone()).unwrap_or_default();
    let agents: Vec<&String> = inner.agents.iter().filter(|(_, a)| !a.dead()).map(|(k, _)| k).collect();
    json_answer(
        StatusCode::CREATED,
        &json!({"id": id, "explain": explain, "agents": agents, "started_ms": started}),
    )
}

async fn list(State(st): State<AppState>, headers: HeaderMap) -> Response {
    if let Err(e) = st.control.check(&headers) {
        return e.into_response();
    }
    let inner = st.control.live.lock();
    let queries: Vec<Value> = inner
        .queries
        .iter()
        .map(|(id, q)| {
            json!({"id": id, "query": q.text, "state": q.state(), "interval_ms": q.deploy.interval_ms,
                   "age_ms": q.created.elapsed().as_millis() as u64, "windows": q.closed.len()})
        })
        .collect();
    let agents: Vec<Value> = inner
        .agents
        .iter()
        .map(|(name, a)| {
            json!({"agent": name, "dead": a.dead(), "running": a.running, "failed": a.failed,
                   "last_seen_ms_ago": a.last_seen.elapsed().as_millis() as u64})
        })
        .collect();
    json_answer(StatusCode::OK, &json!({"queries": queries, "agents": agents}))
}

async fn remove(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(q): Query<Params>,
) -> Response {
    let c = &st.control;
    let wait = match c.check_wait(&headers, q.wait.as_deref()) {
        Ok(w) => w,
        Err(e) => return e.into_response(),
    };
    let id = match query_id(&id) {
        Ok(id) => id,
        Err(e) => return e.into_response(),
    };
    match c.live.lock().queries.get_mut(&id) {
        Some(q) => q.removed = true,
        None => return ApiError::not_found(format!("no live query {id}")).into_response(),
    }
    tracing::info!(id, "live query removed");
    c.live.notify.notify_waiters();
    wait_until(&c.live, wait, |inner| inner.agents.values().all(|a| a.dead() || !a.running.contains(&id)))
        .await;
    let inner = c.live.lock();
    let still: Vec<&String> =
        inner.agents.iter().filter(|(_, a)| !a.dead() && a.running.contains(&id)).map(|(k, _)| k).collect();
    json_answer(StatusCode::OK, &json!({"id": id, "removed": true, "still_running_on": still}))
}

fn key_json(k: &KeyValue) -> Value {
    match k {
        KeyValue::Int(v) => json!(v),
        KeyValue::Uint(v) => json!(v),
        KeyValue::Float(bits) => json!(f64::from_bits(*bits)),
        KeyValue::Bool(b) => json!(b),
        KeyValue::Str(s) => json!(String::from_utf8_lossy(s)),
    }
}

fn output_json(o: &Output) -> Value {
    match o {
        Output::Null => Value::Null,
        Output::Int(v) => match i64::try_from(*v) {
            Ok(i) => json!(i),
            Err(_) => json!(v.to_string()),
        },
        Output::Float(f) => json!(f),
        Output::Buckets(b) => json!(b),
    }
}

/// A partial's rows as JSON arrays (output columns in order, the plan's top-N applied).
fn rows_json(plan: &LivePlan, p: &Partial) -> Vec<Vec<Value>> {
    rows(plan, p)
        .iter()
        .map(|r| {
            r.iter()
                .map(|c| match c {
                    Cell::Key(k) => key_json(k),
                    Cell::Value(o) => output_json(o),
                })
                .collect()
        })
        .collect()
}

fn partial_json(plan: &LivePlan, p: &Partial) -> Value {
    json!({"events": p.events, "drops": {"table_full": p.drops.table_full,
           "type_mismatch": p.drops.type_mismatch, "busy": p.drops.busy}, "rows": rows_json(plan, p)})
}

async fn results(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(params): Query<Params>,
) -> Response {
    if let Err(e) = st.control.check(&headers) {
        return e.into_response();
    }
    let id = match query_id(&id) {
        Ok(id) => id,
        Err(e) => return e.into_response(),
    };
    keep_due(&st).await;
    let mut inner = st.control.live.lock();
    inner.close_all();
    let Some(q) = inner.queries.get(&id) else {
        return ApiError::not_found(format!("no live query {id}")).into_response();
    };
    let n = params.windows.unwrap_or(10).min(MAX_WINDOWS);
    let windows: Vec<Value> = q
        .closed
        .iter()
        .rev()
        .take(n)
        .map(|w| {
            json!({"start_ns": w.start, "agents": w.agents, "missing": w.missing,
                   "result": partial_json(&q.plan, &w.partial)})
        })
        .collect();
    let by_agent: BTreeMap<&String, Value> =
        q.by_agent.iter().map(|(a, p)| (a, partial_json(&q.plan, p))).collect();
    let agents: Vec<Value> = inner
        .agents
        .iter()
        .filter(|(name, a)| {
            q.started.contains_key(*name) || a.running.contains(&id) || a.failed.contains(&id)
        })
        .map(|(name, a)| {
            let late = q.closed.back().is_some_and(|w| w.missing.contains(name));
            let state = if a.dead() {
                "dead"
            } else if a.failed.contains(&id) {
                "failed"
            } else if late {
                "late"
            } else if a.running.contains(&id) {
                "running"
            } else {
                "stopped"
            };
            json!({"agent": name, "state": state, "running": a.running.contains(&id),
                   "last_seen_ms_ago": a.last_seen.elapsed().as_millis() as u64,
                   "started_ms": q.started.get(name)})
        })
        .collect();
    let body = json!({
        "id": id,
        "query": q.text,
        "state": q.state(),
        "interval_ms": q.deploy.interval_ms,
        "columns": q.plan.outputs.iter().map(|(n, _)| n).collect::<Vec<_>>(),
        "windows": windows,
        "windows_closed": q.closed.len(),
        "windows_open": q.open.len(),
        "total": partial_json(&q.plan, &q.total),
        "by_agent": by_agent,
        "agents": agents,
        "failures": q.failures,
        "late_partials": q.late,
        "refused_partials": q.refused,
        "reports": q.reports,
        "partial_bytes": q.partial_bytes,
        "merge_errors": q.merge_errors,
        "kept": q.keep.as_ref().map(|k| json!({"table": format!("{}{}", weft_store::results::SQL_PREFIX, k.name),
            "windows": k.windows, "rows": k.rows, "waiting": k.pending.len(), "errors": k.errors,
            "last_error": k.last_error})),
    });
    json_answer(StatusCode::OK, &body)
}

async fn sync(State(st): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let c = &st.control;
    let bytes = match c.request(&headers, None, body, 16 << 20).await {
        Ok((_, b)) => b,
        Err(e) => return e.into_response(),
    };
    let req: LiveSync = match serde_json::from_slice(&bytes) {
        Ok(r) => r,
        Err(e) => return ApiError::bad_request(format!("live exchange: {e}")).into_response(),
    };
    if req.agent.is_empty() || req.agent.len() > 256 {
        return ApiError::bad_request("live exchange: field agent must be 1..=256 bytes").into_response();
    }
    let hub = &c.live;
    let wait = Duration::from_millis(req.wait_ms.min(30_000));
    let have: BTreeSet<u64> = req.running.iter().chain(&req.failed).copied().collect();
    {
        let mut inner = hub.lock();
        inner.close_all();
        let now_ns = weft_probe::clock::realtime_ns();
        if let Some(list) = &req.tracepoints {
            for (name, spec) in list {
                if inner.schemas.len() < MAX_SCHEMAS || inner.schemas.contains_key(name) {
                    inner.schemas.insert(name.clone(), spec.clone());
                }
            }
        }
        if !inner.agents.contains_key(&req.agent) && inner.agents.len() >= c.max_agents {
            let stalest = inner.agents.iter().min_by_key(|(_, a)| a.last_seen).map(|(k, _)| k.clone());
            if let Some(k) = stalest {
                inner.agents.remove(&k);
            }
        }
        inner.agents.insert(
            req.agent.clone(),
            LiveAgent {
                last_seen: Instant::now(),
                wait,
                running: req.running.iter().copied().collect(),
                failed: req.failed.iter().copied().collect(),
            },
        );
        for r in &req.reports {
            let Some(q) = inner.queries.get_mut(&r.query) else { continue };
            q.reports += 1;
            let partial = match r.partial() {
                Ok(p) => p,
                Err(e) => {
                    q.merge_errors += 1;
                    tracing::warn!(agent = %req.agent, error = %e, "unreadable partial");
                    continue;
                }
            };
            q.partial_bytes += partial.encode().len() as u64;
            let start = r.window_start_ns;
            if start < q.closed_until || start.saturating_add(q.interval_ns + q.grace_ns) <= now_ns {
                // its window is gone (or due), but what it counted still belongs to the totals
                q.late += 1;
                let to_agent = q.by_agent.entry(r.agent.clone()).or_default().merge(&partial);
                if q.total.merge(&partial).is_err() || to_agent.is_err() {
                    q.merge_errors += 1;
                }
                continue;
            }
            if start > now_ns.saturating_add(q.interval_ns)
                || (!q.open.contains_key(&start) && q.open.len() >= MAX_OPEN_WINDOWS)
            {
                // a window that cannot have started yet, or more open ones than clocks explain
                q.refused += 1;
                continue;
            }
            let w = q.open.entry(start).or_insert_with(|| OpenWindow { parts: BTreeMap::new() });
            if w.parts.entry(r.agent.clone()).or_default().merge(&partial).is_err() {
                q.merge_errors += 1;
            }
        }
        for f in &req.failures {
            if let Some(q) = inner.queries.get_mut(&(f.query & !CARRY)) {
                if q.failures.len() >= MAX_FAILURES {
                    q.failures.pop_front();
                }
                q.failures.push_back(AgentFailure { agent: req.agent.clone(), failure: f.clone() });
            }
        }
        for id in &req.running {
            if let Some(q) = inner.queries.get_mut(id) {
                let ms = q.created.elapsed().as_millis() as u64;
                q.started.entry(req.agent.clone()).or_insert(ms);
            }
        }
    }
    hub.notify.notify_waiters();
    keep_due(&st).await;
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let notified = hub.notify.notified();
        let wanted: Vec<QueryDeploy> = hub.lock().wanted().into_iter().cloned().collect();
        let ids: BTreeSet<u64> = wanted.iter().map(|q| q.query).collect();
        if ids != have || tokio::time::Instant::now() >= deadline {
            return json_answer(StatusCode::OK, &LiveAnswer { queries: wanted });
        }
        let _ = tokio::time::timeout_at(deadline, notified).await;
    }
}
