//! Jaeger query API v3 (the HTTP/JSON gateway of `jaeger.api_v3.QueryService`), so Jaeger UI,
//! Grafana and scripts can read weft as a backend.
//!
//! | endpoint | answer |
//! |---|---|
//! | `GET /api/v3/services` | `{"services": [...]}` |
//! | `GET /api/v3/operations?service=&spanKind=` | `{"operations": [{"name", "spanKind"}]}` |
//! | `GET /api/v3/traces?query.serviceName&query.operationName&query.attributes&query.startTimeMin&query.startTimeMax&query.durationMin&query.durationMax&query.searchDepth` | `{"result": <OTLP JSON TracesData>}`, 404 when nothing matches |
//! | `GET /api/v3/traces/{trace_id}` | `{"result": <OTLP JSON>}`, 404 when unknown |
//!
//! Parameter names are the current camelCase ones; the older snake_case names
//! (`query.service_name`, `query.start_time_min`, `query.num_traces`, ...) are accepted too.
//! Times are RFC 3339, durations Go-style (`100ms`); `query.attributes` is a JSON object of
//! string values. Traces are returned raw; `adjustClockSkew=true` applies read-time clock-skew
//! adjustment (opt-in, spans marked with `weft.skew.adjusted_ns`). Errors are
//! `{"error": {"httpCode", "message"}}`.

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::routing::get;
use weft_model::Span;
use weft_model::codec::otlp;
use weft_store::TraceQuery;

use crate::api::{ApiError, json_bytes};
use crate::metrics::Api;
use crate::params::{self, ParamError, Params};
use crate::state::AppState;
use crate::zipkin::maybe_adjust;

/// Routes of api_v3.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/v3/services", get(services))
        .route("/api/v3/operations", get(operations))
        .route("/api/v3/traces", get(find_traces))
        .route("/api/v3/traces/{trace_id}", get(get_trace))
}

pub(crate) fn jaeger_kind(k: weft_model::SpanKind) -> &'static str {
    match k {
        weft_model::SpanKind::Unspecified => "",
        other => other.as_str(),
    }
}

async fn services(State(state): State<AppState>) -> Result<Response, ApiError> {
    let _t = state.metrics.time(Api::Jaeger);
    let v = state.store.services().await.map_err(|e| ApiError::store(&state, Api::Jaeger, e))?;
    Ok(json_bytes(serde_json::to_vec(&serde_json::json!({ "services": v })).unwrap_or_default()))
}

async fn operations(State(state): State<AppState>, Query(p): Query<Params>) -> Result<Response, ApiError> {
    let _t = state.metrics.time(Api::Jaeger);
    let service = params::get(&p, &["service"]).map(|(v, _)| v);
    let kind = match params::get(&p, &["spanKind", "span_kind"]) {
        Some((k, name)) => Some(
            weft_model::SpanKind::parse(k)
                .ok_or_else(|| ApiError::bad_request(format!("malformed parameter {name}: {k:?}")))?,
        ),
        None => None,
    };
    let ops = state.store.operations(service).await.map_err(|e| ApiError::store(&state, Api::Jaeger, e))?;
    let list: Vec<serde_json::Value> = ops
        .into_iter()
        .filter(|(_, k)| kind.is_none_or(|want| want == *k))
        .map(|(n, k)| serde_json::json!({"name": n, "spanKind": jaeger_kind(k)}))
        .collect();
    Ok(json_bytes(serde_json::to_vec(&serde_json::json!({ "operations": list })).unwrap_or_default()))
}

/// Builds the store query for api_v3's `FindTraces` parameters.
pub fn trace_query(p: &Params) -> Result<TraceQuery, ParamError> {
    let mut q = TraceQuery { limit: 20, ..TraceQuery::default() };
    q.service = params::get(p, &["query.serviceName", "query.service_name"]).map(|(v, _)| v.to_owned());
    q.span_name = params::get(p, &["query.operationName", "query.operation_name"]).map(|(v, _)| v.to_owned());
    if let Some((v, name)) = params::get(p, &["query.startTimeMin", "query.start_time_min"]) {
        q.start_min_ns = Some(params::rfc3339(name, v)?);
    }
    if let Some((v, name)) = params::get(p, &["query.startTimeMax", "query.start_time_max"]) {
        q.start_max_ns = Some(params::rfc3339(name, v)?);
    }
    if let Some((v, name)) = params::get(p, &["query.durationMin", "query.duration_min"]) {
        q.min_duration_ns = Some(params::go_duration(name, v)?);
    }
    if let Some((v, name)) = params::get(p, &["query.durationMax", "query.duration_max"]) {
        q.max_duration_ns = Some(params::go_duration(name, v)?);
    }
    if let Some((v, name)) = params::get(p, &["query.searchDepth", "query.search_depth", "query.num_traces"])
    {
        q.limit = params::u64_param(name, v)?.clamp(1, 10_000) as usize;
    }
    if let Some((v, name)) = params::get(p, &["query.rawTraces", "query.raw_traces"]) {
        params::bool_param(name, v)?;
    }
    if let Some((v, _)) = params::get(p, &["query.attributes"]) {
        let m: serde_json::Map<String, serde_json::Value> = serde_json::from_str(v).map_err(|e| {
            ParamError(format!("malformed parameter query.attributes: not a JSON object: {e}"))
        })?;
        for (k, val) in m {
            let s = match val {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            };
            q.attributes.push((k, Some(s)));
        }
    }
    Ok(q)
}

fn adjust(p: &Params) -> Result<bool, ParamError> {
    match params::get(p, &["adjustClockSkew", "adjust_clock_skew"]) {
        Some((v, name)) => params::bool_param(name, v),
        None => Ok(false),
    }
}

fn result(spans: &[Span]) -> Response {
    let inner = otlp::encode_json(spans);
    let mut out = Vec::with_capacity(inner.len() + 12);
    out.extend_from_slice(b"{\"result\":");
    out.extend_from_slice(&inner);
    out.push(b'}');
    json_bytes(out)
}

async fn find_traces(State(state): State<AppState>, Query(p): Query<Params>) -> Result<Response, ApiError> {
    let _t = state.metrics.time(Api::Jaeger);
    let q = trace_query(&p)?;
    let adj = adjust(&p)?;
    let found = crate::api::search(&state, Api::Jaeger, q).await?;
    if found.is_empty() {
        return Err(ApiError::not_found("No traces found"));
    }
    let spans: Vec<Span> = found.into_iter().flat_map(|t| maybe_adjust(t, adj)).collect();
    Ok(result(&spans))
}

async fn get_trace(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(p): Query<Params>,
) -> Result<Response, ApiError> {
    let _t = state.metrics.time(Api::Jaeger);
    let tid = params::trace_id_param("trace_id", &id)?;
    for (names, what) in [(["startTime", "start_time"], "start"), (["endTime", "end_time"], "end")] {
        if let Some((v, name)) = params::get(&p, &names) {
            params::rfc3339(name, v)
                .map_err(|e| ApiError::bad_request(format!("{e} ({what} of the trace window)")))?;
        }
    }
    if let Some((v, name)) = params::get(&p, &["rawTraces", "raw_traces"]) {
        params::bool_param(name, v)?;
    }
    let adj = adjust(&p)?;
    let spans = crate::api::trace(&state, Api::Jaeger, tid).await?;
    if spans.is_empty() {
        return Err(ApiError::not_found(format!("trace {tid} not found")));
    }
    Ok(result(&maybe_adjust(spans, adj)))
}
