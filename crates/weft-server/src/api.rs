//! Helpers shared by the read APIs: errors as JSON, timeouts, blocking trace reads.

use std::future::Future;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use weft_analyze::dependencies::{DependencyLink, DependencyLinker};
use weft_model::{Span, TraceId};
use weft_store::StoreError;

use crate::metrics::Api;
use crate::params::ParamError;
use crate::state::AppState;

/// An error answer: `{"error": {"httpCode": N, "message": "..."}}` (Jaeger's gateway shape,
/// which Zipkin clients accept as any non-2xx body).
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// What went wrong.
    pub message: String,
}

impl ApiError {
    /// 400.
    pub fn bad_request(m: impl Into<String>) -> Self {
        ApiError { status: StatusCode::BAD_REQUEST, message: m.into() }
    }
    /// 404.
    pub fn not_found(m: impl Into<String>) -> Self {
        ApiError { status: StatusCode::NOT_FOUND, message: m.into() }
    }
    /// A store error on `api` (counted): query errors are the caller's (400), others 500.
    pub fn store(state: &AppState, api: Api, e: StoreError) -> Self {
        state.metrics.query_error(api);
        match e {
            StoreError::Query(m) => ApiError::bad_request(m),
            other => {
                tracing::error!(error = %other, "read failed");
                ApiError { status: StatusCode::INTERNAL_SERVER_ERROR, message: other.to_string() }
            }
        }
    }
}

impl From<ParamError> for ApiError {
    fn from(e: ParamError) -> Self {
        ApiError::bad_request(e.0)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"error": {"httpCode": self.status.as_u16(), "message": self.message}});
        let mut r = (self.status, body.to_string()).into_response();
        r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        r
    }
}

/// A 200 JSON response from encoded bytes.
pub fn json_bytes(v: Vec<u8>) -> Response {
    let mut r = (StatusCode::OK, v).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// Runs a store future under the configured query timeout.
pub async fn with_timeout<T>(
    state: &AppState,
    api: Api,
    f: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, ApiError> {
    match tokio::time::timeout(state.config.query_timeout, f).await {
        Ok(r) => r.map_err(|e| ApiError::store(state, api, e)),
        Err(_) => {
            state.metrics.query_error(api);
            Err(ApiError {
                status: StatusCode::GATEWAY_TIMEOUT,
                message: format!(
                    "query exceeded the {} s limit (weft serve --query-timeout); it was cancelled",
                    state.config.query_timeout.as_secs_f64()
                ),
            })
        }
    }
}

/// Reads one trace on the blocking pool.
pub async fn trace(state: &AppState, api: Api, id: TraceId) -> Result<Vec<Span>, ApiError> {
    let store = state.store.clone();
    let r = tokio::task::spawn_blocking(move || store.trace(id)).await.map_err(|e| ApiError {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        message: format!("trace read task: {e}"),
    })?;
    r.map_err(|e| ApiError::store(state, api, e))
}

/// Runs SQL returning one string column; returns its non-null values.
pub async fn sql_strings(state: &AppState, api: Api, sql: &str) -> Result<Vec<String>, ApiError> {
    let r = with_timeout(state, api, state.store.sql(sql, 100_000)).await?;
    Ok(weft_store::render::first_column_strings(&r.batches))
}

/// Service dependency links of the traces with spans starting in `[from_ns, to_ns]`.
pub async fn dependency_links(
    state: &AppState,
    api: Api,
    from_ns: u64,
    to_ns: u64,
) -> Result<Vec<DependencyLink>, ApiError> {
    let mut linker = DependencyLinker::new();
    let fut = state.store.for_each_trace_in_window(from_ns, to_ns, |t| linker.put_trace(t));
    with_timeout(state, api, fut).await?;
    Ok(linker.links())
}
