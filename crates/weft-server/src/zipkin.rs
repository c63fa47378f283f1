//! Zipkin v2 API: `POST /api/v2/spans` (JSON, or proto3 with `Content-Type:
//! application/x-protobuf`; gzip), served on the Zipkin listener ([`ingest_routes`]), and the
//! read API Zipkin's UI and tools use, served on the query listener ([`routes`]).
//!
//! | endpoint | answer |
//! |---|---|
//! | `GET /api/v2/services` | service names |
//! | `GET /api/v2/spans?serviceName=` | span names of a service (`spanKind=` narrows) |
//! | `GET /api/v2/remoteServices?serviceName=` | `peer.service` values of a service's spans |
//! | `GET /api/v2/traces?serviceName&remoteServiceName&spanName&annotationQuery&minDuration&maxDuration&endTs&lookback&limit` | matching traces, newest first |
//! | `GET /api/v2/trace/{traceId}` | one trace (404 when unknown) |
//! | `GET /api/v2/traceMany?traceIds=a,b` | several traces (unknown ids are left out; at most [`MAX_TRACE_MANY_IDS`] ids) |
//! | `GET /api/v2/dependencies?endTs&lookback` | service links in the window |
//! | `GET /api/v2/autocompleteKeys`, `autocompleteValues?key=` | searchable tag keys / values |
//!
//! Times are Zipkin's: `endTs`/`lookback` in ms, durations in µs. `annotationQuery` is
//! `term and term ...` with `key=value` (tag value) or `key` (tag present or annotation name);
//! all criteria must hold on one span. `adjustClockSkew=true` on the trace endpoints applies
//! read-time clock-skew adjustment (see `weft_analyze::skew`); adjusted spans carry the tag
//! `weft.skew.adjusted_ns`.

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use weft_model::codec::{Rejected, zipkin};
use weft_model::{Span, TraceId};
use weft_store::TraceQuery;

use crate::api::{ApiError, json_bytes};

/// Trace ids one `traceMany` request may ask for.
pub const MAX_TRACE_MANY_IDS: usize = 1000;
use crate::ingest::{self, IngestError};
use crate::metrics::{Api, Receiver};
use crate::params::{self, ParamError, Params};
use crate::state::AppState;

/// The Zipkin receiver: `POST /api/v2/spans`.
pub fn ingest_routes() -> Router<AppState> {
    Router::new().route("/api/v2/spans", post(post_spans))
}

/// The Zipkin v2 read API.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/v2/spans", get(span_names))
        .route("/api/v2/services", get(services))
        .route("/api/v2/remoteServices", get(remote_services))
        .route("/api/v2/traces", get(traces))
        .route("/api/v2/trace/{id}", get(trace))
        .route("/api/v2/traceMany", get(trace_many))
        .route("/api/v2/dependencies", get(dependencies))
        .route("/api/v2/autocompleteKeys", get(autocomplete_keys))
        .route("/api/v2/autocompleteValues", get(autocomplete_values))
}

fn ingest_error(e: IngestError) -> Response {
    let mut r = (e.status(), e.message()).into_response();
    if let Some(s) = e.retry_after() {
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    r
}

async fn post_spans(State(state): State<AppState>, headers: HeaderMap, body: axum::body::Body) -> Response {
    let ct =
        headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_ascii_lowercase();
    let proto = ct.starts_with("application/x-protobuf") || ct.starts_with("application/protobuf");
    // An explicit type is required: a web page can send a body without one to any address
    // (a CORS "simple request"), which must not store spans.
    if !proto && !ct.starts_with("application/json") {
        let r = Receiver::Zipkin;
        state.metrics.receiver(r).requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        state.metrics.receiver(r).requests_malformed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return ingest_error(IngestError::Unsupported(format!(
            "Content-Type {ct:?} is not supported: use application/json or application/x-protobuf"
        )));
    }
    let admitted = match ingest::admit(&state, Receiver::Zipkin, &headers, body).await {
        Ok(a) => a,
        Err(e) => return ingest_error(e),
    };
    let ack = ingest::Ack::of(&headers);
    match ingest::store_body(&state, Receiver::Zipkin, ack, admitted, move |b: &[u8]| decode_body(proto, b))
        .await
    {
        Ok(_) => {
            let mut r = StatusCode::ACCEPTED.into_response();
            ack.confirm(r.headers_mut());
            r
        }
        Err(e) => ingest_error(e),
    }
}

/// Decodes a Zipkin v2 body (JSON or proto3). Zipkin has no partial success: a batch with a
/// bad span is refused whole, the error naming it.
pub fn decode_body(proto: bool, b: &[u8]) -> Result<(Vec<Span>, Rejected), weft_model::codec::CodecError> {
    let spans = if proto { zipkin::decode_v2_proto(b)? } else { zipkin::decode_v2_json(b)? };
    Ok((spans, Rejected::default()))
}

fn zipkin_json(v: Vec<u8>) -> Response {
    let mut r = (StatusCode::OK, v).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn required<'a>(p: &'a Params, name: &str) -> Result<&'a str, ApiError> {
    p.get(name)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| ApiError::bad_request(format!("parameter {name} is required")))
}

async fn services(State(state): State<AppState>) -> Result<Response, ApiError> {
    let _t = state.metrics.time(Api::Zipkin);
    let v = state.store.services().await.map_err(|e| ApiError::store(&state, Api::Zipkin, e))?;
    Ok(json_bytes(serde_json::to_vec(&v).unwrap_or_default()))
}

async fn span_names(State(state): State<AppState>, Query(p): Query<Params>) -> Result<Response, ApiError> {
    let _t = state.metrics.time(Api::Zipkin);
    let svc = required(&p, "serviceName")?;
    let kind = match p.get("spanKind").filter(|v| !v.is_empty()) {
        Some(k) => Some(
            weft_model::SpanKind::parse(k)
                .ok_or_else(|| ApiError::bad_request(format!("malformed parameter spanKind: {k:?}")))?,
        ),
        None => None,
    };
    let ops = state.store.operations(Some(svc)).await.map_err(|e| ApiError::store(&state, Api::Zipkin, e))?;
    let mut names: Vec<String> =
        ops.into_iter().filter(|(_, k)| kind.is_none_or(|want| want == *k)).map(|(n, _)| n).collect();
    names.sort();
    names.dedup();
    Ok(json_bytes(serde_json::to_vec(&names).unwrap_or_default()))
}

async fn remote_services(
    State(state): State<AppState>,
    Query(p): Query<Params>,
) -> Result<Response, ApiError> {
    let _t = state.metrics.time(Api::Zipkin);
    let svc = required(&p, "serviceName")?;
    let sql = format!(
        "SELECT DISTINCT attributes['peer.service'] AS r FROM spans WHERE service_name = {} AND attributes['peer.service'] IS NOT NULL ORDER BY r",
        weft_store::sql_str(svc)
    );
    let v = crate::api::sql_strings(&state, Api::Zipkin, &sql).await?;
    Ok(json_bytes(serde_json::to_vec(&v).unwrap_or_default()))
}

fn now_ms() -> u64 {
    weft_model::time::now_unix_nanos() / 1_000_000
}

fn opt_u64(p: &Params, name: &str) -> Result<Option<u64>, ParamError> {
    match p.get(name).filter(|v| !v.is_empty()) {
        Some(v) => params::u64_param(name, v).map(Some),
        None => Ok(None),
    }
}

/// Builds the store query for Zipkin's `/traces` parameters.
pub fn trace_query(p: &Params) -> Result<TraceQuery, ParamError> {
    let end_ms = opt_u64(p, "endTs")?.unwrap_or_else(now_ms);
    let lookback_ms = opt_u64(p, "lookback")?.unwrap_or(end_ms);
    let mut q = TraceQuery {
        service: p.get("serviceName").filter(|v| !v.is_empty()).cloned(),
        span_name: p.get("spanName").filter(|v| !v.is_empty() && v.as_str() != "all").cloned(),
        min_duration_ns: opt_u64(p, "minDuration")?.map(|us| us.saturating_mul(1000)),
        max_duration_ns: opt_u64(p, "maxDuration")?.map(|us| us.saturating_mul(1000)),
        start_min_ns: Some(end_ms.saturating_sub(lookback_ms).saturating_mul(1_000_000)),
        start_max_ns: Some(end_ms.saturating_mul(1_000_000).saturating_add(999_999)),
        limit: opt_u64(p, "limit")?.unwrap_or(10).clamp(1, 10_000) as usize,
        ..TraceQuery::default()
    };
    if let Some(r) = p.get("remoteServiceName").filter(|v| !v.is_empty()) {
        q.attributes.push((weft_model::conv::PEER_SERVICE.to_owned(), Some(r.clone())));
    }
    if let Some(aq) = p.get("annotationQuery") {
        for term in aq.split(" and ").map(str::trim).filter(|t| !t.is_empty()) {
            match term.split_once('=') {
                Some((k, v)) => q.attributes.push((k.trim().to_owned(), Some(v.trim().to_owned()))),
                None => q.attributes.push((term.to_owned(), None)),
            }
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

/// Applies clock-skew adjustment when asked.
pub fn maybe_adjust(mut t: Vec<Span>, on: bool) -> Vec<Span> {
    if on {
        weft_analyze::skew::adjust_trace(&mut t);
    }
    t
}

fn encode_traces(traces: &[Vec<Span>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(traces.iter().map(|t| t.len() * 400).sum::<usize>() + 2);
    out.push(b'[');
    for (i, t) in traces.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&zipkin::encode_v2_json(t));
    }
    out.push(b']');
    out
}

async fn traces(State(state): State<AppState>, Query(p): Query<Params>) -> Result<Response, ApiError> {
    let _t = state.metrics.time(Api::Zipkin);
    let q = trace_query(&p)?;
    let adj = adjust(&p)?;
    let found = crate::api::search(&state, Api::Zipkin, q).await?;
    let found: Vec<Vec<Span>> = found.into_iter().map(|t| maybe_adjust(t, adj)).collect();
    Ok(zipkin_json(encode_traces(&found)))
}

async fn trace(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(p): Query<Params>,
) -> Result<Response, ApiError> {
    let _t = state.metrics.time(Api::Zipkin);
    let tid: TraceId = params::trace_id_param("traceId", &id)?;
    let adj = adjust(&p)?;
    let spans = crate::api::trace(&state, Api::Zipkin, tid).await?;
    if spans.is_empty() {
        return Err(ApiError::not_found(format!("trace {tid} not found")));
    }
    Ok(zipkin_json(zipkin::encode_v2_json(&maybe_adjust(spans, adj))))
}

async fn trace_many(State(state): State<AppState>, Query(p): Query<Params>) -> Result<Response, ApiError> {
    let _t = state.metrics.time(Api::Zipkin);
    let ids = required(&p, "traceIds")?;
    let adj = adjust(&p)?;
    let mut tids = Vec::new();
    for id in ids.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if tids.len() == MAX_TRACE_MANY_IDS {
            return Err(ApiError::bad_request(format!(
                "traceIds: more than {MAX_TRACE_MANY_IDS} trace ids; ask in several requests"
            )));
        }
        tids.push(params::trace_id_param("traceIds", id)?);
    }
    let out = crate::api::traces(&state, Api::Zipkin, tids).await?;
    let out: Vec<Vec<Span>> = out.into_iter().map(|t| maybe_adjust(t, adj)).collect();
    Ok(zipkin_json(encode_traces(&out)))
}

async fn dependencies(State(state): State<AppState>, Query(p): Query<Params>) -> Result<Response, ApiError> {
    let _t = state.metrics.time(Api::Zipkin);
    let end_ms = match p.get("endTs").filter(|v| !v.is_empty()) {
        Some(v) => params::u64_param("endTs", v)?,
        None => now_ms(),
    };
    let lookback_ms = opt_u64(&p, "lookback")?.unwrap_or(86_400_000);
    let from = end_ms.saturating_sub(lookback_ms).saturating_mul(1_000_000);
    let to = end_ms.saturating_mul(1_000_000).saturating_add(999_999);
    let links = crate::api::dependency_links(&state, Api::Zipkin, from, to).await?;
    Ok(json_bytes(serde_json::to_vec(&links).unwrap_or_default()))
}

async fn autocomplete_keys(State(state): State<AppState>) -> Response {
    json_bytes(serde_json::to_vec(&state.config.autocomplete_keys).unwrap_or_default())
}

async fn autocomplete_values(
    State(state): State<AppState>,
    Query(p): Query<Params>,
) -> Result<Response, ApiError> {
    let _t = state.metrics.time(Api::Zipkin);
    let key = required(&p, "key")?;
    let k = weft_store::sql_str(key);
    let sql = format!(
        "SELECT DISTINCT v FROM (SELECT attributes[{k}] AS v FROM spans UNION ALL SELECT resource_attributes[{k}] AS v FROM spans) WHERE v IS NOT NULL ORDER BY v LIMIT 1000"
    );
    let v = crate::api::sql_strings(&state, Api::Zipkin, &sql).await?;
    Ok(json_bytes(serde_json::to_vec(&v).unwrap_or_default()))
}
