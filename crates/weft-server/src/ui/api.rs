//! JSON endpoints of the web UI (`/api/ui/...`): what the Zipkin and Jaeger APIs do not give
//! efficiently — summary rows instead of whole traces, a columnar trace with its critical path
//! computed here, span details on demand, a dependency graph by service or component, the
//! comparison of two traces, and time breakdowns per component and direction.
//!
//! | endpoint | answer |
//! |---|---|
//! | `GET /api/ui/services` | `{services, components, operations: {service: [names]}}` |
//! | `GET /api/ui/search?service&component&name&attrs&minDuration&maxDuration&lookback&start&end&limit` | `{traces: [{traceId, startMs, durationNs, spanCount, errors, rootService, rootName, services: [[name, spans]]}], elapsedMs}` |
//! | `GET /api/ui/trace/{id}?adjust` | columnar trace ([`super::view`]), 404 when unknown |
//! | `GET /api/ui/span/{trace}/{span}?adjust` | one span: attributes, resource, events, links out and in |
//! | `GET /api/ui/dependencies?by=service\|component&lookback&end` | `{nodes, edges}` (calls and `caused_by` links) |
//! | `GET /api/ui/compare?a&b` | [`weft_analyze::compare`] of two traces |
//! | `GET /api/ui/breakdown?traces=a,b,...&by&wire&rules` | [`weft_analyze::breakdown`] per trace and per direction over all of them ([`super::breakdown`]) |
//!
//! `attrs` is `key=value` terms separated by spaces (`key="a value"` quotes; a bare `key` means
//! present; `error` matches failed spans). Durations are Go-style (`10ms`); `lookback` is a
//! duration back from `end` (ms since the epoch, default now) or `all`; `start` (ms) bounds
//! from below instead.

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use serde_json::{Value as J, json};
use weft_analyze::compare::{CompareOptions, compare as compare_traces};
use weft_model::{SpanId, TraceId, conv};
use weft_store::{TraceQuery, sql_str};

use super::view::{Prepared, relation};
use crate::api::{ApiError, json_bytes};
use crate::metrics::Api;
use crate::params::{self, ParamError, Params};
use crate::state::AppState;

/// Routes of the UI's JSON API.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/ui/services", get(services))
        .route("/api/ui/search", get(search))
        .route("/api/ui/trace/{id}", get(trace))
        .route("/api/ui/span/{trace}/{span}", get(span))
        .route("/api/ui/dependencies", get(dependencies))
        .route("/api/ui/compare", get(compare))
        .route("/api/ui/breakdown", get(super::breakdown::handler))
}

fn json(v: &J) -> Response {
    json_bytes(serde_json::to_vec(v).unwrap_or_default())
}

fn hex_lit(h: &str) -> String {
    format!("decode({}, 'hex')", sql_str(h))
}

/// Runs SQL; returns its rows as JSON arrays.
async fn rows(state: &AppState, sql: &str, max: usize) -> Result<Vec<Vec<J>>, ApiError> {
    let r = crate::api::sql(state, Api::Other, sql.to_owned(), max).await?;
    let j = weft_store::render::to_json(&r.schema, &r.batches);
    Ok(match j.get("rows") {
        Some(J::Array(rows)) => rows.iter().map(|r| r.as_array().cloned().unwrap_or_default()).collect(),
        _ => Vec::new(),
    })
}

fn s(v: &J) -> String {
    match v {
        J::String(s) => s.clone(),
        J::Null => String::new(),
        other => other.to_string(),
    }
}

fn adjust(p: &Params) -> Result<bool, ParamError> {
    match params::get(p, &["adjust", "adjustClockSkew"]) {
        Some((v, name)) => params::bool_param(name, v),
        None => Ok(false),
    }
}

async fn services(State(state): State<AppState>) -> Result<Response, ApiError> {
    let _t = state.metrics.time(Api::Other);
    let ops = state.store.operations_all().await.map_err(|e| ApiError::store(&state, Api::Other, e))?;
    let mut services: Vec<String> = Vec::new();
    let mut operations = serde_json::Map::new();
    for (svc, name, _) in ops {
        if services.last() != Some(&svc) {
            services.push(svc.clone());
        }
        let e = operations.entry(svc).or_insert_with(|| J::Array(Vec::new()));
        if let J::Array(a) = e
            && a.last().and_then(J::as_str) != Some(name.as_str())
        {
            a.push(J::String(name));
        }
    }
    services.dedup();
    let comp = rows(
        &state,
        &format!(
            "SELECT DISTINCT attributes[{k}] AS c FROM spans WHERE attributes[{k}] IS NOT NULL ORDER BY c LIMIT 1000",
            k = sql_str(conv::COMPONENT)
        ),
        1000,
    )
    .await?;
    let components: Vec<String> =
        comp.iter().filter_map(|r| r.first().map(s)).filter(|c| !c.is_empty()).collect();
    Ok(json(&json!({"services": services, "components": components, "operations": operations})))
}

/// Splits `key=value key2="a b" key3` into terms.
pub fn parse_attrs(q: &str) -> Result<Vec<(String, Option<String>)>, ParamError> {
    let mut out = Vec::new();
    let mut chars = q.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            break;
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c.is_whitespace() || c == '=' {
                break;
            }
            key.push(c);
            chars.next();
        }
        if chars.peek() == Some(&'=') {
            chars.next();
            let mut val = String::new();
            if chars.peek() == Some(&'"') {
                chars.next();
                let mut closed = false;
                for c in chars.by_ref() {
                    if c == '"' {
                        closed = true;
                        break;
                    }
                    val.push(c);
                }
                if !closed {
                    return Err(ParamError(format!(
                        "malformed parameter attrs: unclosed quote after {key}="
                    )));
                }
            } else {
                while let Some(&c) = chars.peek() {
                    if c.is_whitespace() {
                        break;
                    }
                    val.push(c);
                    chars.next();
                }
            }
            if key.is_empty() {
                return Err(ParamError(format!(
                    "malformed parameter attrs: a term has no key before ={val}"
                )));
            }
            out.push((key, Some(val)));
        } else {
            out.push((key, None));
        }
    }
    Ok(out)
}

/// Builds the store query from the UI's search parameters.
pub fn search_query(p: &Params) -> Result<TraceQuery, ParamError> {
    let nonempty = |k: &str| p.get(k).map(|v| v.trim()).filter(|v| !v.is_empty()).map(str::to_owned);
    let mut q = TraceQuery {
        service: nonempty("service"),
        span_name: nonempty("name"),
        limit: match nonempty("limit") {
            Some(v) => params::u64_param("limit", &v)?.clamp(1, 1000) as usize,
            None => 50,
        },
        ..TraceQuery::default()
    };
    if let Some(c) = nonempty("component") {
        q.attributes.push((conv::COMPONENT.to_owned(), Some(c)));
    }
    if let Some(a) = p.get("attrs") {
        q.attributes.extend(parse_attrs(a)?);
    }
    if let Some(v) = nonempty("minDuration") {
        q.min_duration_ns = Some(params::go_duration("minDuration", &v)?);
    }
    if let Some(v) = nonempty("maxDuration") {
        q.max_duration_ns = Some(params::go_duration("maxDuration", &v)?);
    }
    let end_ms = match nonempty("end") {
        Some(v) => Some(params::u64_param("end", &v)?),
        None => None,
    };
    if let Some(e) = end_ms {
        q.start_max_ns = Some(e.saturating_mul(1_000_000).saturating_add(999_999));
    }
    if let Some(v) = nonempty("start") {
        q.start_min_ns = Some(params::u64_param("start", &v)?.saturating_mul(1_000_000));
    } else if let Some(v) = nonempty("lookback").filter(|v| v != "all") {
        let back = params::go_duration("lookback", &v)?;
        let end_ns =
            end_ms.map(|e| e.saturating_mul(1_000_000)).unwrap_or_else(weft_model::time::now_unix_nanos);
        q.start_min_ns = Some(end_ns.saturating_sub(back));
    }
    Ok(q)
}

async fn search(State(state): State<AppState>, Query(p): Query<Params>) -> Result<Response, ApiError> {
    let _t = state.metrics.time(Api::Other);
    let t0 = Instant::now();
    let q = search_query(&p)?;
    let ids =
        crate::api::read(&state, Api::Other, move |store| async move { store.search_trace_ids(&q).await })
            .await?;
    if ids.is_empty() {
        return Ok(json(&json!({"traces": [], "elapsedMs": t0.elapsed().as_secs_f64() * 1e3})));
    }
    let list = ids.iter().map(|t| hex_lit(&t.to_string())).collect::<Vec<_>>().join(", ");
    let summary = rows(
        &state,
        &format!(
            "SELECT encode(trace_id, 'hex'), count(*), CAST(min(start_time) AS BIGINT), \
             max(CAST(start_time AS BIGINT) + duration_ns), \
             sum(CASE WHEN status_code = 'error' THEN 1 ELSE 0 END), \
             first_value(service_name ORDER BY parent_span_id IS NOT NULL, start_time), \
             first_value(name ORDER BY parent_span_id IS NOT NULL, start_time) \
             FROM spans WHERE trace_id IN ({list}) GROUP BY trace_id"
        ),
        ids.len() + 1,
    )
    .await?;
    let per_service = rows(
        &state,
        &format!(
            "SELECT encode(trace_id, 'hex'), service_name, count(*) FROM spans WHERE trace_id IN ({list}) \
             GROUP BY 1, 2 ORDER BY 1, 3 DESC"
        ),
        100_000,
    )
    .await?;
    let mut svc: std::collections::HashMap<String, Vec<J>> = std::collections::HashMap::new();
    for r in &per_service {
        if let [t, name, n] = r.as_slice() {
            svc.entry(s(t)).or_default().push(json!([s(name), n]));
        }
    }
    let mut by_id: std::collections::HashMap<String, J> = std::collections::HashMap::new();
    for r in summary {
        let [t, n, st, en, errs, rs, rn] = r.as_slice() else { continue };
        let id = s(t);
        let start = st.as_i64().unwrap_or(0);
        let end = en.as_i64().unwrap_or(start);
        by_id.insert(
            id.clone(),
            json!({
                "traceId": id,
                "startMs": start as f64 / 1e6,
                "durationNs": end.saturating_sub(start).max(0),
                "spanCount": n,
                "errors": errs,
                "rootService": rs,
                "rootName": rn,
                "services": svc.remove(&id).unwrap_or_default(),
            }),
        );
    }
    let traces: Vec<J> = ids.iter().filter_map(|t| by_id.remove(&t.to_string())).collect();
    Ok(json(&json!({"traces": traces, "elapsedMs": t0.elapsed().as_secs_f64() * 1e3})))
}

/// The prepared trace (cache, else the store).
async fn prepared(state: &AppState, id: TraceId, adjust: bool) -> Result<Arc<Prepared>, ApiError> {
    if let Some(p) = state.ui_cache.get(id, adjust) {
        return Ok(p);
    }
    let spans = crate::api::trace(state, Api::Other, id).await?;
    if spans.is_empty() {
        return Err(ApiError::not_found(format!("trace {id} not found")));
    }
    let p = tokio::task::spawn_blocking(move || {
        let spans = crate::zipkin::maybe_adjust(spans, adjust);
        Arc::new(Prepared::new(id, spans, adjust))
    })
    .await
    .map_err(|e| ApiError {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        message: format!("trace task: {e}"),
    })?;
    state.ui_cache.put(p.clone());
    Ok(p)
}

async fn trace(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(p): Query<Params>,
) -> Result<Response, ApiError> {
    let _t = state.metrics.time(Api::Other);
    let tid = params::trace_id_param("trace id", &id)?;
    let adj = adjust(&p)?;
    let prep = prepared(&state, tid, adj).await?;
    // Links into this trace from other traces (the network hop that caused a NIC receive...).
    let inc = rows(
        &state,
        &format!(
            "SELECT encode(linked_span_id, 'hex'), encode(trace_id, 'hex'), encode(span_id, 'hex'), relation \
             FROM span_links WHERE linked_trace_id = {} AND trace_id <> linked_trace_id LIMIT 10000",
            hex_lit(&tid.to_string())
        ),
        10_000,
    )
    .await?;
    let body = tokio::task::spawn_blocking(move || {
        let incoming: Vec<(usize, String, String, String)> = inc
            .iter()
            .filter_map(|r| {
                let [to, t, sp, rel] = r.as_slice() else { return None };
                let row = *prep.by_id.get(&SpanId::from_hex(&s(to)).ok()?)?;
                let rel = s(rel);
                Some((row, s(t), s(sp), if rel.is_empty() { "link".into() } else { rel }))
            })
            .collect();
        prep.to_json(&incoming)
    })
    .await
    .map_err(|e| ApiError {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        message: format!("trace task: {e}"),
    })?;
    Ok(json_bytes(body))
}

fn attrs_json(a: &weft_model::Attributes) -> J {
    J::Array(a.iter().map(|kv| json!([kv.key, kv.value.to_string(), kv.value.type_name()])).collect())
}

async fn span(
    State(state): State<AppState>,
    Path((trace_hex, span_hex)): Path<(String, String)>,
    Query(p): Query<Params>,
) -> Result<Response, ApiError> {
    let _t = state.metrics.time(Api::Other);
    let tid = params::trace_id_param("trace id", &trace_hex)?;
    let sid = SpanId::from_hex(span_hex.trim())
        .map_err(|e| ApiError::bad_request(format!("malformed span id {span_hex:?}: {e}")))?;
    let adj = adjust(&p)?;
    let prep = prepared(&state, tid, adj).await?;
    let Some(&row) = prep.by_id.get(&sid) else {
        return Err(ApiError::not_found(format!("span {sid} not found in trace {tid}")));
    };
    let sp = &prep.spans[row];
    // Targets of links to other traces: one SQL lookup for their service and name.
    let foreign: Vec<(TraceId, SpanId)> =
        sp.links.iter().filter(|l| l.trace_id != tid).map(|l| (l.trace_id, l.span_id)).take(200).collect();
    let mut names: std::collections::HashMap<(String, String), (String, String)> = Default::default();
    if !foreign.is_empty() {
        let cond = foreign
            .iter()
            .map(|(t, s)| {
                format!("(trace_id = {} AND span_id = {})", hex_lit(&t.to_string()), hex_lit(&s.to_string()))
            })
            .collect::<Vec<_>>()
            .join(" OR ");
        for r in rows(
            &state,
            &format!("SELECT encode(trace_id, 'hex'), encode(span_id, 'hex'), service_name, name FROM spans WHERE {cond}"),
            1000,
        )
        .await?
        {
            if let [t, s_, svc, n] = r.as_slice() {
                names.insert((s(t), s(s_)), (s(svc), s(n)));
            }
        }
    }
    let links: Vec<J> = sp
        .links
        .iter()
        .map(|l| {
            let (t, s_) = (l.trace_id.to_string(), l.span_id.to_string());
            let target = if l.trace_id == tid {
                prep.by_id
                    .get(&l.span_id)
                    .map(|&r| (prep.spans[r].service_name().to_owned(), prep.spans[r].name.to_string()))
            } else {
                names.get(&(t.clone(), s_.clone())).cloned()
            };
            json!({
                "traceId": t, "spanId": s_, "relation": relation(l.relation),
                "attributes": attrs_json(&l.attributes),
                "service": target.as_ref().map(|x| x.0.clone()), "name": target.map(|x| x.1),
            })
        })
        .collect();
    // Links pointing at this span, from any trace.
    let inc = rows(
        &state,
        &format!(
            "SELECT encode(l.trace_id, 'hex'), encode(l.span_id, 'hex'), l.relation, s.service_name, s.name \
             FROM span_links l LEFT JOIN spans s ON s.trace_id = l.trace_id AND s.span_id = l.span_id \
             WHERE l.linked_trace_id = {} AND l.linked_span_id = {} LIMIT 200",
            hex_lit(&tid.to_string()),
            hex_lit(&sid.to_string())
        ),
        200,
    )
    .await?;
    let incoming: Vec<J> = inc
        .iter()
        .filter_map(|r| {
            let [t, s_, rel, svc, n] = r.as_slice() else { return None };
            let rel = s(rel);
            Some(json!({"traceId": s(t), "spanId": s(s_), "relation": if rel.is_empty() { "link".to_owned() } else { rel }, "service": svc, "name": n}))
        })
        .collect();
    let on_path: u64 = prep
        .critical
        .sections
        .iter()
        .filter(|c| c.span == row)
        .map(|c| c.end_ns.saturating_sub(c.start_ns))
        .sum();
    let children = (row + 1..prep.subtree_end[row] as usize).filter(|&c| prep.parent[c] == Some(row)).count();
    let body = json!({
        "traceId": tid.to_string(),
        "spanId": sid.to_string(),
        "parentSpanId": sp.parent_span_id.map(|p| p.to_string()),
        "row": row,
        "name": sp.name,
        "kind": sp.kind.as_str(),
        "service": sp.service_name(),
        "component": sp.attributes.get_str(conv::COMPONENT).unwrap_or(sp.service_name()),
        "startNs": sp.start_ns.to_string(),
        "startMs": sp.start_ns as f64 / 1e6,
        "offsetNs": sp.start_ns.saturating_sub(prep.start_ns),
        "durationNs": sp.duration_ns(),
        "criticalNs": on_path,
        "children": children,
        "descendants": prep.subtree_end[row] as usize - row - 1,
        "status": {"code": sp.status.code.as_str(), "message": sp.status.message},
        "attributes": attrs_json(&sp.attributes),
        "resource": attrs_json(&sp.resource.attributes),
        "scope": {"name": sp.scope.name, "version": sp.scope.version},
        "events": sp.events.iter().map(|e| json!({
            "offsetNs": e.time_ns.saturating_sub(sp.start_ns) as i64,
            "name": e.name, "attributes": attrs_json(&e.attributes),
        })).collect::<Vec<_>>(),
        "links": links,
        "incoming": incoming,
        "dropped": {"attributes": sp.dropped_attributes_count, "events": sp.dropped_events_count, "links": sp.dropped_links_count},
    });
    Ok(json(&body))
}

async fn dependencies(State(state): State<AppState>, Query(p): Query<Params>) -> Result<Response, ApiError> {
    let _t = state.metrics.time(Api::Other);
    let by_component = match p.get("by").map(String::as_str) {
        None | Some("") | Some("service") => false,
        Some("component") => true,
        Some(o) => {
            return Err(ApiError::bad_request(format!(
                "malformed parameter by: {o:?} (service or component)"
            )));
        }
    };
    let end_ns = match p.get("end").filter(|v| !v.is_empty()) {
        Some(v) => params::u64_param("end", v)?.saturating_mul(1_000_000).saturating_add(999_999),
        None => weft_model::time::now_unix_nanos(),
    };
    let from_ns = match p.get("lookback").map(String::as_str) {
        None | Some("") | Some("all") => 0,
        Some(v) => end_ns.saturating_sub(params::go_duration("lookback", v)?),
    };
    let key = |t: &str| {
        if by_component {
            format!("coalesce({t}.attributes[{}], {t}.service_name)", sql_str(conv::COMPONENT))
        } else {
            format!("{t}.service_name")
        }
    };
    let win = |t: &str| {
        format!(
            "{t}.start_time >= to_timestamp_nanos({}) AND {t}.start_time <= to_timestamp_nanos({})",
            from_ns.min(i64::MAX as u64),
            end_ns.min(i64::MAX as u64)
        )
    };
    let (kc, kp, ks, kt) = (key("c"), key("p"), key("s"), key("t"));
    let nodes = rows(
        &state,
        &format!(
            "SELECT {k} AS n, count(*), sum(CASE WHEN c.status_code = 'error' THEN 1 ELSE 0 END), \
             count(DISTINCT c.trace_id), first_value(c.resource_attributes[{ck}]) \
             FROM spans c WHERE {w} GROUP BY 1 ORDER BY 2 DESC LIMIT 500",
            k = kc,
            ck = sql_str(conv::COMPONENT_KIND),
            w = win("c")
        ),
        500,
    )
    .await?;
    let calls = rows(
        &state,
        &format!(
            "SELECT {kp} AS a, {kc} AS b, count(*), sum(CASE WHEN c.status_code = 'error' THEN 1 ELSE 0 END) \
             FROM spans c JOIN spans p ON c.trace_id = p.trace_id AND c.parent_span_id = p.span_id \
             WHERE {w} AND {kp} <> {kc} GROUP BY 1, 2 ORDER BY 3 DESC LIMIT 2000",
            w = win("c")
        ),
        2000,
    )
    .await?;
    let caused = rows(
        &state,
        &format!(
            "SELECT {kt} AS a, {ks} AS b, count(*), 0 FROM span_links l \
             JOIN spans s ON l.trace_id = s.trace_id AND l.span_id = s.span_id \
             JOIN spans t ON l.linked_trace_id = t.trace_id AND l.linked_span_id = t.span_id \
             WHERE l.relation = 'caused_by' AND {w} AND {kt} <> {ks} GROUP BY 1, 2 ORDER BY 3 DESC LIMIT 2000",
            w = win("s")
        ),
        2000,
    )
    .await?;
    let nodes: Vec<J> = nodes
        .iter()
        .filter_map(|r| {
            let [n, spans, errs, traces, kind] = r.as_slice() else { return None };
            Some(json!({"id": s(n), "spans": spans, "errors": errs, "traces": traces, "kind": s(kind)}))
        })
        .collect();
    let mut edges = Vec::new();
    for (list, kind) in [(&calls, "call"), (&caused, "caused_by")] {
        for r in list.iter() {
            if let [a, b, n, e] = r.as_slice() {
                edges.push(json!({"from": s(a), "to": s(b), "count": n, "errors": e, "kind": kind}));
            }
        }
    }
    Ok(json(
        &json!({"by": if by_component { "component" } else { "service" }, "nodes": nodes, "edges": edges}),
    ))
}

async fn compare(State(state): State<AppState>, Query(p): Query<Params>) -> Result<Response, ApiError> {
    let _t = state.metrics.time(Api::Other);
    let get = |k: &str| p.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
    let (Some(a), Some(b)) = (get("a"), get("b")) else {
        return Err(ApiError::bad_request("compare needs two trace ids: ?a=...&b=..."));
    };
    let ta = params::trace_id_param("a", a)?;
    let tb = params::trace_id_param("b", b)?;
    let adj = adjust(&p)?;
    let pa = prepared(&state, ta, adj).await?;
    let pb = prepared(&state, tb, adj).await?;
    // A read slot on the SQL runtime, like the other read APIs: not the receivers' workers.
    let body = crate::api::read(&state, Api::Other, move |_| async move {
        let task = tokio::task::spawn_blocking(move || compare_json(ta, tb, &pa, &pb));
        task.await.map_err(|e| weft_store::StoreError::Query(format!("compare task: {e}")))
    })
    .await?;
    Ok(json_bytes(body))
}

/// The answer of `compare`.
fn compare_json(ta: TraceId, tb: TraceId, pa: &Prepared, pb: &Prepared) -> Vec<u8> {
    let c = compare_traces(&pa.spans, &pb.spans, &CompareOptions::default());
    let side = |x: &Option<weft_analyze::compare::Side>, p: &Prepared| -> J {
        match x {
            None => J::Null,
            Some(x) => json!({
                "count": x.count, "totalNs": x.total_ns, "maxNs": x.max_ns,
                "startNs": x.start_off_ns, "endNs": x.end_off_ns, "errors": x.errors,
                "spanId": p.spans.get(x.first).map(|s| s.span_id.to_string()),
            }),
        }
    };
    let nodes: Vec<J> = c
        .nodes
        .iter()
        .map(|n| {
            json!({
                "depth": n.depth, "service": n.service, "name": n.name,
                "a": side(&n.a, pa), "b": side(&n.b, pb),
                "change": n.change, "deltaNs": n.delta_ns,
            })
        })
        .collect();
    let body = json!({
        "a": {"traceId": ta.to_string(), "durationNs": c.a_duration_ns, "spans": c.a_spans, "startMs": pa.start_ns as f64 / 1e6, "criticalNs": pa.critical.total_ns()},
        "b": {"traceId": tb.to_string(), "durationNs": c.b_duration_ns, "spans": c.b_spans, "startMs": pb.start_ns as f64 / 1e6, "criticalNs": pb.critical.total_ns()},
        "nodes": nodes,
    });
    serde_json::to_vec(&body).unwrap_or_default()
}
