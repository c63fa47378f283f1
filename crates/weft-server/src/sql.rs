//! `POST /api/sql` (and `GET /api/sql?q=`): read-only SQL over the store's tables (`spans`,
//! `span_events`, `span_links`, `events`; see `weft_store::schema`).
//!
//! The body is the SQL text (any content type), or JSON `{"query": "...", "format": "..."}`.
//! `format` (body field or query parameter): `json` (default) → `{"columns": [{"name", "type"}],
//! "rows": [[...]], "truncated", "elapsed_ms"}`; `csv` → `text/csv`; `table` → a text table.
//! At most `max_rows` (parameter) and never more than
//! [`ServerConfig::sql_max_rows`](crate::ServerConfig::sql_max_rows) rows come back
//! (`truncated` says when more existed); statements that change anything are refused (400).
//!
//! Limits: at most [`ServerConfig::sql_concurrency`](crate::ServerConfig::sql_concurrency)
//! queries run at once (more get 503 with `Retry-After: 1`); they run on a runtime of their
//! own, so a heavy query cannot starve the receivers; a query past
//! [`ServerConfig::query_timeout`](crate::ServerConfig::query_timeout) is cancelled (504); a
//! result past [`ServerConfig::sql_max_bytes`](crate::ServerConfig::sql_max_bytes) is refused
//! (400); each query may hold at most
//! [`ServerConfig::sql_query_memory`](crate::ServerConfig::sql_query_memory) of DataFusion's
//! memory pool (`StoreConfig::query_memory_bytes`, shared by all queries) while it runs (sorts
//! spill at it; past it anything else fails, 400 naming the limit).

use std::time::Instant;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use weft_store::render;

use crate::api::{ApiError, json_bytes};
use crate::metrics::Api;
use crate::params::Params;
use crate::state::AppState;

/// Routes: `/api/sql`.
pub fn routes() -> Router<AppState> {
    Router::new().route("/api/sql", get(sql_get).post(sql_post))
}

async fn sql_get(State(state): State<AppState>, Query(p): Query<Params>) -> Result<Response, ApiError> {
    let q = p.get("q").or_else(|| p.get("query")).cloned().unwrap_or_default();
    run(state, &q, p.get("format").map(String::as_str), max_rows(&p)?).await
}

async fn sql_post(
    State(state): State<AppState>,
    Query(p): Query<Params>,
    headers: HeaderMap,
    body: String,
) -> Result<Response, ApiError> {
    let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let trimmed = body.trim_start();
    let (query, format) = if ct.starts_with("application/json") || trimmed.starts_with('{') {
        let v: serde_json::Value = serde_json::from_str(&body)
            .map_err(|e| ApiError::bad_request(format!("body is not JSON: {e}")))?;
        let q = v
            .get("query")
            .and_then(|q| q.as_str())
            .ok_or_else(|| ApiError::bad_request("JSON body needs a string field \"query\""))?
            .to_owned();
        (q, v.get("format").and_then(|f| f.as_str()).map(str::to_owned))
    } else {
        (body, None)
    };
    let format = p.get("format").cloned().or(format);
    run(state, &query, format.as_deref(), max_rows(&p)?).await
}

fn max_rows(p: &Params) -> Result<Option<usize>, ApiError> {
    match p.get("max_rows").filter(|v| !v.is_empty()) {
        Some(v) => Ok(Some(crate::params::u64_param("max_rows", v)? as usize)),
        None => Ok(None),
    }
}

async fn run(
    state: AppState,
    query: &str,
    format: Option<&str>,
    max_rows: Option<usize>,
) -> Result<Response, ApiError> {
    let _t = state.metrics.time(Api::Sql);
    if query.trim().is_empty() {
        return Err(ApiError::bad_request("no query given (POST the SQL text, or GET /api/sql?q=...)"));
    }
    let format = format.unwrap_or("json");
    if !matches!(format, "json" | "csv" | "table") {
        return Err(ApiError::bad_request(format!("format {format:?}: use json, csv or table")));
    }
    let Ok(_slot) = state.sql_slots.clone().try_acquire_owned() else {
        return Err(crate::api::busy(
            &state,
            Api::Sql,
            format!(
                "{} SQL queries are running already (weft serve --sql-concurrency); retry later",
                state.config.sql_concurrency
            ),
        ));
    };
    let start = Instant::now();
    let limit = max_rows.unwrap_or(state.config.sql_max_rows).min(state.config.sql_max_rows);
    let limits = weft_store::SqlLimits {
        max_rows: limit,
        max_bytes: state.config.sql_max_bytes,
        max_memory: state.config.sql_query_memory,
        memory_setting: "weft serve --sql-query-memory",
    };
    let (store, q) = (state.store.clone(), query.to_owned());
    let res =
        crate::api::on_sql_runtime(&state, Api::Sql, async move { store.sql_bounded(&q, &limits).await })
            .await?;
    let elapsed_ms = start.elapsed().as_secs_f64() * 1e3;
    let (body, ct): (Vec<u8>, &'static str) = match format {
        "csv" => (render::to_csv(&res.schema, &res.batches).into_bytes(), "text/csv; charset=utf-8"),
        "table" => (render::to_table(&res.schema, &res.batches).into_bytes(), "text/plain; charset=utf-8"),
        _ => {
            let mut j = render::to_json(&res.schema, &res.batches);
            if let Some(o) = j.as_object_mut() {
                o.insert("truncated".into(), res.truncated.into());
                o.insert("elapsed_ms".into(), serde_json::json!(elapsed_ms));
            }
            return Ok(json_bytes(serde_json::to_vec(&j).unwrap_or_default()));
        }
    };
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    if res.truncated {
        r.headers_mut().insert("x-weft-truncated", HeaderValue::from_static("true"));
    }
    Ok(r)
}
