//! The Jaeger query service's HTTP JSON API — the one Jaeger UI's trace view and Grafana's
//! Jaeger data source call — answering in Jaeger's "UI JSON" (see
//! [`weft_model::codec::jaeger`]), so they can point at weft unchanged.
//!
//! Every answer is Jaeger's envelope `{"data", "total", "limit", "offset", "errors"}`:
//!
//! | endpoint | `data` |
//! |---|---|
//! | `GET /api/services` | service names (`total`: their number) |
//! | `GET /api/services/{service}/operations` | span names of a service |
//! | `GET /api/operations?service=&spanKind=` | `[{"name", "spanKind"}]` (`service` required) |
//! | `GET /api/traces?service&operation&tag&tags&start&end&minDuration&maxDuration&limit&lookback` | matching traces, newest first |
//! | `GET /api/traces?traceID=a&traceID=b` | those traces; each unknown id is an `errors` entry `{"msg": "trace not found", "traceID"}` |
//! | `GET /api/traces/{traceID}` | one trace; 404 when unknown |
//! | `GET /api/dependencies?endTs&lookback&service` | `[{"parent", "child", "callCount"}]` |
//!
//! Units are Jaeger's: `start`/`end` in µs since the epoch (default: the 48 h before now),
//! `minDuration`/`maxDuration` Go durations (`100ms`), `endTs`/`lookback` of dependencies in ms
//! (default: the 24 h before now). `lookback` of a search is a label Jaeger UI and Grafana send
//! beside `start` (`1h`, `custom`); weft uses it, when it is a Go duration, only if `start` is
//! missing. `tag=key:value` may repeat; `tags` is a JSON object of string values. `limit`
//! defaults to Jaeger's 100 and is capped at 10 000 (0 means the default). On
//! `GET /api/traces/{traceID}`, `start`/`end` are checked but do not narrow the lookup (an id
//! lookup is cheap in weft). Traces are returned raw (`raw` is accepted);
//! `adjustClockSkew=true` applies read-time clock-skew adjustment as on the other read APIs.
//! A bad parameter is a 400 whose `errors` entry `{"code": 400, "msg"}` names it.

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use weft_model::codec::jaeger;
use weft_model::{Span, SpanKind, TraceId};
use weft_store::TraceQuery;

use crate::api::{ApiError, json_bytes};
use crate::metrics::Api;
use crate::params::{self, ParamError};
use crate::state::AppState;
use crate::zipkin::maybe_adjust;

/// Jaeger's default number of traces a search returns.
const DEFAULT_LIMIT: usize = 100;
/// The most traces (or trace ids) one request may ask for.
const MAX_LIMIT: usize = 10_000;
/// Jaeger's default search window before `end`.
const DEFAULT_SEARCH_LOOKBACK_NS: u64 = 48 * 3600 * 1_000_000_000;
/// Jaeger's default dependencies window, ms.
const DEFAULT_DEPENDENCY_LOOKBACK_MS: u64 = 24 * 3600 * 1000;

/// Routes of the query service's HTTP JSON API.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/services", get(services))
        .route("/api/services/{service}/operations", get(service_operations))
        .route("/api/operations", get(operations))
        .route("/api/traces", get(find_traces))
        .route("/api/traces/{trace_id}", get(get_trace))
        .route("/api/dependencies", get(dependencies))
}

/// Query parameters in order, repeats kept (`traceID` and `tag` may repeat).
pub type Pairs = Vec<(String, String)>;

/// The first non-empty value of `name` (Jaeger reads the first one).
fn first<'a>(p: &'a Pairs, name: &str) -> Option<&'a str> {
    p.iter().find(|(k, v)| k == name && !v.is_empty()).map(|(_, v)| v.as_str())
}

fn all<'a>(p: &'a Pairs, name: &'a str) -> impl Iterator<Item = &'a str> {
    p.iter().filter(move |(k, v)| k == name && !v.is_empty()).map(|(_, v)| v.as_str())
}

/// An error in Jaeger's envelope: `{"data": null, ..., "errors": [{"code", "msg"}]}`.
#[derive(Debug)]
pub struct JaegerError(ApiError);

impl From<ApiError> for JaegerError {
    fn from(e: ApiError) -> Self {
        JaegerError(e)
    }
}

impl From<ParamError> for JaegerError {
    fn from(e: ParamError) -> Self {
        JaegerError(ApiError::from(e))
    }
}

impl IntoResponse for JaegerError {
    fn into_response(self) -> Response {
        let err = serde_json::json!({"code": self.0.status.as_u16(), "msg": self.0.message});
        let mut r = envelope(b"null", 0, &[err]);
        *r.status_mut() = self.0.status;
        r
    }
}

/// Jaeger's structured response around already encoded `data`.
fn envelope(data: &[u8], total: usize, errors: &[serde_json::Value]) -> Response {
    let mut out = Vec::with_capacity(data.len() + 80);
    out.extend_from_slice(b"{\"data\":");
    out.extend_from_slice(data);
    out.extend_from_slice(format!(",\"total\":{total},\"limit\":0,\"offset\":0,\"errors\":").as_bytes());
    if errors.is_empty() {
        out.extend_from_slice(b"null");
    } else {
        out.extend_from_slice(&serde_json::to_vec(errors).unwrap_or_else(|_| b"null".to_vec()));
    }
    out.push(b'}');
    json_bytes(out)
}

fn data<T: serde::Serialize>(v: &T, total: usize) -> Response {
    envelope(&serde_json::to_vec(v).unwrap_or_else(|_| b"null".to_vec()), total, &[])
}

async fn services(State(state): State<AppState>) -> Result<Response, JaegerError> {
    let _t = state.metrics.time(Api::Jaeger);
    let v = state.store.services().await.map_err(|e| ApiError::store(&state, Api::Jaeger, e))?;
    Ok(data(&v, v.len()))
}

async fn service_operations(
    State(state): State<AppState>,
    Path(service): Path<String>,
) -> Result<Response, JaegerError> {
    let _t = state.metrics.time(Api::Jaeger);
    let ops =
        state.store.operations(Some(&service)).await.map_err(|e| ApiError::store(&state, Api::Jaeger, e))?;
    let mut names: Vec<String> = ops.into_iter().map(|(n, _)| n).collect();
    names.dedup();
    Ok(data(&names, names.len()))
}

async fn operations(State(state): State<AppState>, Query(p): Query<Pairs>) -> Result<Response, JaegerError> {
    let _t = state.metrics.time(Api::Jaeger);
    let service =
        first(&p, "service").ok_or_else(|| ApiError::bad_request("parameter 'service' is required"))?;
    let kind = match first(&p, "spanKind") {
        Some(k) => Some(SpanKind::parse(k).ok_or_else(|| {
            ParamError(format!(
                "unable to parse param 'spanKind': {k:?} is not one of server, client, producer, consumer, internal, unspecified"
            ))
        })?),
        None => None,
    };
    let ops =
        state.store.operations(Some(service)).await.map_err(|e| ApiError::store(&state, Api::Jaeger, e))?;
    let list: Vec<serde_json::Value> = ops
        .into_iter()
        .filter(|(_, k)| kind.is_none_or(|want| want == *k))
        .map(|(n, k)| serde_json::json!({"name": n, "spanKind": crate::jaeger::jaeger_kind(k)}))
        .collect();
    Ok(data(&list, list.len()))
}

/// A `u64` parameter in Jaeger's wording.
fn int_param(name: &str, v: &str) -> Result<u64, ParamError> {
    v.trim().parse::<u64>().map_err(|_| {
        ParamError(format!("unable to parse param '{name}': {v:?} is not a non-negative integer"))
    })
}

fn bool_param(p: &Pairs, name: &str) -> Result<bool, ParamError> {
    first(p, name).map_or(Ok(false), |v| params::bool_param(name, v))
}

/// What `GET /api/traces` asks for: a search, or trace ids when any `traceID` is given.
#[derive(Debug, Clone)]
pub struct Search {
    /// The store query (its window also bounds the id lookups in Jaeger; weft ignores it there).
    pub query: TraceQuery,
    /// `traceID` values, in order.
    pub trace_ids: Vec<TraceId>,
    /// `adjustClockSkew=true`.
    pub adjust: bool,
}

/// Parses the parameters of `GET /api/traces` (`now_ns` is the default `end`).
pub fn search_params(p: &Pairs, now_ns: u64) -> Result<Search, ParamError> {
    let end_ns = match first(p, "end") {
        Some(v) => int_param("end", v)?.saturating_mul(1000).saturating_add(999),
        None => now_ns,
    };
    let start_ns = match first(p, "start") {
        Some(v) => int_param("start", v)?.saturating_mul(1000),
        // `lookback` is a label (`custom`, `2d`) unless it is a Go duration.
        None => end_ns.saturating_sub(
            first(p, "lookback")
                .and_then(|v| params::go_duration("lookback", v).ok())
                .unwrap_or(DEFAULT_SEARCH_LOOKBACK_NS),
        ),
    };
    let mut q = TraceQuery {
        service: first(p, "service").map(str::to_owned),
        span_name: first(p, "operation").map(str::to_owned),
        start_min_ns: Some(start_ns),
        start_max_ns: Some(end_ns),
        limit: DEFAULT_LIMIT,
        ..TraceQuery::default()
    };
    if let Some(v) = first(p, "limit") {
        let n = int_param("limit", v)?;
        if n > 0 {
            q.limit = n.min(MAX_LIMIT as u64) as usize;
        }
    }
    for (name, slot) in [("minDuration", &mut q.min_duration_ns), ("maxDuration", &mut q.max_duration_ns)] {
        if let Some(v) = first(p, name) {
            *slot = Some(params::go_duration(name, v)?);
        }
    }
    if let (Some(min), Some(max)) = (q.min_duration_ns, q.max_duration_ns)
        && min != 0
        && max != 0
        && max < min
    {
        return Err(ParamError("'maxDuration' should be greater than 'minDuration'".into()));
    }
    for tag in all(p, "tag") {
        let (k, v) = tag.split_once(':').ok_or_else(|| {
            ParamError(format!("malformed 'tag' parameter, expecting key:value, received: {tag}"))
        })?;
        q.attributes.push((k.to_owned(), Some(v.to_owned())));
    }
    for tags in all(p, "tags") {
        let m: serde_json::Map<String, serde_json::Value> = serde_json::from_str(tags)
            .map_err(|e| ParamError(format!("malformed 'tags' parameter, cannot unmarshal JSON: {e}")))?;
        for (k, v) in m {
            let serde_json::Value::String(v) = v else {
                return Err(ParamError(format!(
                    "malformed 'tags' parameter: the value of {k:?} is not a string ({v})"
                )));
            };
            q.attributes.push((k, Some(v)));
        }
    }
    let mut trace_ids = Vec::new();
    for id in all(p, "traceID") {
        if trace_ids.len() == MAX_LIMIT {
            return Err(ParamError(format!("more than {MAX_LIMIT} traceID parameters")));
        }
        trace_ids.push(params::trace_id_param("traceID", id)?);
    }
    bool_param(p, "raw")?;
    Ok(Search { query: q, trace_ids, adjust: bool_param(p, "adjustClockSkew")? })
}

async fn find_traces(State(state): State<AppState>, Query(p): Query<Pairs>) -> Result<Response, JaegerError> {
    let _t = state.metrics.time(Api::Jaeger);
    let s = search_params(&p, weft_model::time::now_unix_nanos())?;
    let mut errors = Vec::new();
    let found: Vec<Vec<Span>> = if s.trace_ids.is_empty() {
        crate::api::search(&state, Api::Jaeger, s.query.clone()).await?
    } else {
        let mut out = Vec::new();
        for id in &s.trace_ids {
            let t = crate::api::trace(&state, Api::Jaeger, *id).await?;
            if t.is_empty() {
                errors.push(
                    serde_json::json!({"msg": "trace not found", "traceID": jaeger::trace_id_string(id)}),
                );
            } else {
                out.push(t);
            }
        }
        out
    };
    let found: Vec<Vec<Span>> = found.into_iter().map(|t| maybe_adjust(t, s.adjust)).collect();
    Ok(envelope(&jaeger::encode_traces(&found), 0, &errors))
}

async fn get_trace(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(p): Query<Pairs>,
) -> Result<Response, JaegerError> {
    let _t = state.metrics.time(Api::Jaeger);
    let tid = params::trace_id_param("traceID", &id)?;
    for name in ["start", "end"] {
        if let Some(v) = first(&p, name) {
            int_param(name, v)?;
        }
    }
    bool_param(&p, "raw")?;
    let adjust = bool_param(&p, "adjustClockSkew")?;
    let spans = crate::api::trace(&state, Api::Jaeger, tid).await?;
    if spans.is_empty() {
        return Err(ApiError::not_found("trace not found").into());
    }
    Ok(envelope(&jaeger::encode_traces(&[maybe_adjust(spans, adjust)]), 0, &[]))
}

async fn dependencies(
    State(state): State<AppState>,
    Query(p): Query<Pairs>,
) -> Result<Response, JaegerError> {
    let _t = state.metrics.time(Api::Jaeger);
    let end_ms = match first(&p, "endTs") {
        Some(v) => int_param("endTs", v)?,
        None => weft_model::time::now_unix_nanos() / 1_000_000,
    };
    let lookback_ms =
        first(&p, "lookback").map_or(Ok(DEFAULT_DEPENDENCY_LOOKBACK_MS), |v| int_param("lookback", v))?;
    let from = end_ms.saturating_sub(lookback_ms).saturating_mul(1_000_000);
    let to = end_ms.saturating_mul(1_000_000).saturating_add(999_999);
    let service = first(&p, "service");
    let links: Vec<serde_json::Value> = crate::api::dependency_links(&state, Api::Jaeger, from, to)
        .await?
        .into_iter()
        .filter(|l| service.is_none_or(|s| l.parent == s || l.child == s))
        .map(|l| serde_json::json!({"parent": l.parent, "child": l.child, "callCount": l.call_count}))
        .collect();
    Ok(data(&links, 0))
}
