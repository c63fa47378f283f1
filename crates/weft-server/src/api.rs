//! Helpers shared by the read APIs: errors as JSON, and where their store work runs.
//!
//! The read APIs' store work (searches, trace reads, `traceMany`, the UI's queries, dependency
//! links) runs like `POST /api/sql` on the SQL runtime, apart from the receivers' (a burst of
//! UI searches cannot take the workers ingest needs), in slots of its own
//! ([`ServerConfig::read_concurrency`](crate::ServerConfig::read_concurrency): more at once get
//! 503 with `Retry-After: 1`, and `/api/sql` keeps its slots), cancelled past
//! `--query-timeout` (504). Trace reads, searches and `traceMany` return at most
//! [`ServerConfig::read_max_spans`](crate::ServerConfig::read_max_spans) spans.

use std::future::Future;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use weft_analyze::dependencies::{DependencyLink, DependencyLinker};
use weft_model::{Span, TraceId};
use weft_store::{SqlResult, StoreError, TraceQuery};

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
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            // Every 503 here is "busy now": all slots taken.
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(1));
        }
        r
    }
}

/// 503 (with `Retry-After: 1`): every slot of `what` is taken.
pub fn busy(state: &AppState, api: Api, what: String) -> ApiError {
    state.metrics.query_error(api);
    ApiError { status: StatusCode::SERVICE_UNAVAILABLE, message: what }
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

/// Runs `f` on the SQL runtime, cancelled past the query timeout (the task is aborted, which
/// drops DataFusion's streams and so stops their work).
pub async fn on_sql_runtime<T: Send + 'static>(
    state: &AppState,
    api: Api,
    f: impl Future<Output = Result<T, StoreError>> + Send + 'static,
) -> Result<T, ApiError> {
    let task = state.sql_runtime.spawn(f);
    let abort = task.abort_handle();
    let joined = async {
        task.await.unwrap_or_else(|e| Err(StoreError::Query(format!("the query task failed: {e}"))))
    };
    let res = with_timeout(state, api, joined).await;
    abort.abort();
    res
}

/// Runs a read API's store work `f(store)` in a read slot on the SQL runtime (see the module).
pub async fn read<T: Send + 'static, F>(
    state: &AppState,
    api: Api,
    f: impl FnOnce(weft_store::Store) -> F,
) -> Result<T, ApiError>
where
    F: Future<Output = Result<T, StoreError>> + Send + 'static,
{
    let Ok(_slot) = state.read_slots.clone().try_acquire_owned() else {
        return Err(busy(
            state,
            api,
            format!(
                "{} reads are running already (weft serve --read-concurrency); retry later",
                state.config.read_concurrency
            ),
        ));
    };
    on_sql_runtime(state, api, f(state.store.clone())).await
}

/// Reads traces (in one read slot, on the SQL runtime's blocking pool), leaving out unknown
/// ones; fails naming the limit when they hold more than `read_max_spans` spans (reading
/// stops there: [`weft_store::Store::trace_bounded`]).
pub async fn traces(state: &AppState, api: Api, ids: Vec<TraceId>) -> Result<Vec<Vec<Span>>, ApiError> {
    let max = state.config.read_max_spans;
    read(state, api, move |store| async move {
        let read = tokio::task::spawn_blocking(move || {
            let mut out = Vec::with_capacity(ids.len());
            let mut n = 0usize;
            for id in ids {
                // Reading stops past the spans left of the limit: a huge trace is not loaded.
                let read = store.trace_bounded(id, max - n)?;
                if read.truncated {
                    return Err(StoreError::Query(format!(
                        "the traces asked for hold more than {max} spans (weft serve --read-max-spans)"
                    )));
                }
                let t = read.spans;
                n += t.len();
                if !t.is_empty() {
                    out.push(t);
                }
            }
            Ok(out)
        });
        read.await.map_err(|e| StoreError::Query(format!("trace read task: {e}")))?
    })
    .await
}

/// Reads one trace (empty when unknown); see [`traces`].
pub async fn trace(state: &AppState, api: Api, id: TraceId) -> Result<Vec<Span>, ApiError> {
    Ok(traces(state, api, vec![id]).await?.pop().unwrap_or_default())
}

/// Traces matching `q`, newest first, as many as hold at most `read_max_spans` spans together.
pub async fn search(state: &AppState, api: Api, q: TraceQuery) -> Result<Vec<Vec<Span>>, ApiError> {
    let max = state.config.read_max_spans;
    read(state, api, move |store| async move { store.search_bounded(&q, max).await }).await
}

/// Runs SQL (in a read slot) returning at most `max_rows` rows.
pub async fn sql(state: &AppState, api: Api, sql: String, max_rows: usize) -> Result<SqlResult, ApiError> {
    read(state, api, move |store| async move { store.sql(&sql, max_rows).await }).await
}

/// Runs SQL returning one string column; returns its non-null values.
pub async fn sql_strings(state: &AppState, api: Api, sql: &str) -> Result<Vec<String>, ApiError> {
    let r = self::sql(state, api, sql.to_owned(), 100_000).await?;
    Ok(weft_store::render::first_column_strings(&r.batches))
}

/// Service dependency links of the traces with spans starting in `[from_ns, to_ns]`.
pub async fn dependency_links(
    state: &AppState,
    api: Api,
    from_ns: u64,
    to_ns: u64,
) -> Result<Vec<DependencyLink>, ApiError> {
    read(state, api, move |store| async move {
        let mut linker = DependencyLinker::new();
        store.for_each_trace_in_window(from_ns, to_ns, |t| linker.put_trace(t)).await?;
        Ok(linker.links())
    })
    .await
}
