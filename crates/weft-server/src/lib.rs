//! # weft-server
//!
//! The collector: receivers and read APIs over one [`weft_store::Store`].
//!
//! | listener (default) | serves |
//! |---|---|
//! | OTLP/gRPC `127.0.0.1:4317` | `opentelemetry.proto.collector.trace.v1.TraceService/Export` ([`otlp`]) |
//! | OTLP/HTTP `127.0.0.1:4318` | every HTTP route below, notably `POST /v1/traces` |
//! | Zipkin `127.0.0.1:9411` | every HTTP route, notably `POST /api/v2/spans` and the Zipkin read API ([`zipkin`]) |
//! | query `127.0.0.1:16686` | every HTTP route: Jaeger api_v3 ([`jaeger`]), `POST /api/sql` ([`sql`]), `GET /metrics`, UI |
//!
//! All HTTP listeners serve one router, so a client may use any of them. The router is built
//! from one module per API family, each exposing `routes() -> Router<AppState>`; a new family
//! (the UI, the control API) is one more module and one `.merge(...)` line in [`router`].
//! Handlers share [`AppState`] (the store, metrics, configuration).

#![warn(missing_docs)]

pub mod api;
pub mod control;
pub mod ingest;
pub mod jaeger;
pub mod live;
pub mod metrics;
pub mod otlp;
pub mod params;
pub mod sql;
pub mod state;
pub mod ui;
pub mod zipkin;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use metrics::{Api, Metrics, Receiver};
pub use state::{AppState, ServerConfig};

/// Errors starting the server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A listener could not be bound.
    #[error("cannot listen on {addr} ({what}): {source}")]
    Bind {
        /// Which listener.
        what: &'static str,
        /// Address.
        addr: SocketAddr,
        /// OS error.
        #[source]
        source: std::io::Error,
    },
}

/// The HTTP router every HTTP listener serves.
pub fn router(state: AppState) -> Router {
    Router::new()
        .merge(otlp::routes())
        .merge(zipkin::routes())
        .merge(jaeger::routes())
        .merge(sql::routes())
        .merge(ui::routes())
        .merge(control::routes())
        .route("/metrics", get(metrics_text))
        .route("/api", get(index))
        .route("/api/status", get(status))
        .fallback(not_found)
        .with_state(state)
}

async fn metrics_text(State(state): State<AppState>) -> Response {
    let mut text = state.metrics.render(&state.store);
    text.push_str(&state.control.render_metrics());
    let mut r = (StatusCode::OK, text).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"));
    r
}

async fn status(State(state): State<AppState>) -> Response {
    let body = serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "data_dir": state.store.dir(),
        "store": state.store.stats(),
    });
    api::json_bytes(body.to_string().into_bytes())
}

const INDEX: &str = "weft collector\n\
\n\
ingest:   POST /v1/traces (OTLP/HTTP protobuf or JSON), gRPC TraceService/Export (OTLP/gRPC),\n\
          POST /api/v2/spans (Zipkin v2 JSON or proto3)\n\
zipkin:   GET /api/v2/services | spans?serviceName= | remoteServices?serviceName= | traces?... |\n\
          trace/{id} | traceMany?traceIds= | dependencies?endTs=&lookback= | autocompleteKeys | autocompleteValues?key=\n\
jaeger:   GET /api/v3/services | operations?service= | traces?query.serviceName=... | traces/{trace_id}\n\
sql:      POST /api/sql (body: SQL; ?format=json|csv|table), GET /api/sql?q=\n\
          tables: spans, span_events, span_links, events\n\
metrics:  GET /metrics (Prometheus text)\n\
control:  POST /api/control/probes (bearer token; {\"op\":\"enable\",\"selector\":\"group:io\"}) | GET /api/control/probes/{id} |\n\
          GET /api/control/agents | POST /api/control/poll (agents) | POST /api/agents/report (agents)\n\
live:     POST /api/control/queries (bearer token; body: a live query) | GET /api/control/queries/{id}/results |\n\
          DELETE /api/control/queries/{id} | POST /api/control/live (agents)\n\
status:   GET /api/status\n\
ui:       GET / (the web UI); GET /api/ui/services | search | trace/{id} | span/{trace}/{span} |\n\
          dependencies | compare?a=&b= | breakdown?traces=&by=&wire=&rules=\n";

async fn index() -> &'static str {
    INDEX
}

async fn not_found() -> Response {
    api::ApiError::not_found("no such endpoint (GET /api lists them)").into_response()
}

/// A running server.
pub struct Running {
    /// Bound OTLP/HTTP address.
    pub otlp_http: Option<SocketAddr>,
    /// Bound OTLP/gRPC address.
    pub otlp_grpc: Option<SocketAddr>,
    /// Bound Zipkin address.
    pub zipkin: Option<SocketAddr>,
    /// Bound query/UI address.
    pub http: Option<SocketAddr>,
    /// The shared state.
    pub state: AppState,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Running {
    /// Stops accepting connections and waits for the listeners to finish in-flight requests.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

async fn bind(what: &'static str, addr: SocketAddr) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr).await.map_err(|source| ServerError::Bind { what, addr, source })
}

/// The `Host` names HTTP requests may use besides IP addresses (see
/// [`ServerConfig::allowed_hosts`]): lower case, without port; `None` allows any.
fn host_allowlist(cfg: &ServerConfig, bound: &[SocketAddr]) -> Option<Arc<Vec<String>>> {
    if cfg.allowed_hosts.iter().any(|h| h == "*") {
        return None;
    }
    let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"].iter().map(|h| h.to_string()).collect();
    hosts.extend(bound.iter().filter(|a| !a.ip().is_unspecified()).map(|a| a.ip().to_string()));
    hosts.extend(cfg.allowed_hosts.iter().map(|h| h.trim().to_ascii_lowercase()));
    Some(Arc::new(hosts))
}

/// The host part of a `Host` value (`name:port`, `1.2.3.4`, `[::1]:80`), lower case.
fn host_name(value: &str) -> String {
    let v = value.trim();
    let host = match v.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => v
            .rsplit_once(':')
            .map_or(v, |(h, port)| if port.bytes().all(|b| b.is_ascii_digit()) { h } else { v }),
    };
    host.trim_end_matches('.').to_ascii_lowercase()
}

async fn check_host(
    State(allowed): State<Arc<Vec<String>>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let named = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| req.uri().authority().map(|a| a.as_str().to_owned()));
    match named {
        // HTTP/1.0 without Host: no browser sends that.
        None => next.run(req).await,
        // An address is no rebinding vector (a page's origin would be that address itself):
        // clients of a listener bound to 0.0.0.0 may name any of the machine's addresses.
        Some(h) if host_name(&h).parse::<std::net::IpAddr>().is_ok() => next.run(req).await,
        Some(h) if allowed.contains(&host_name(&h)) => next.run(req).await,
        Some(h) => api::ApiError {
            status: StatusCode::FORBIDDEN,
            message: format!(
                "Host {h:?} is not allowed (DNS rebinding protection): start weft serve with --allow-host {}",
                host_name(&h)
            ),
        }
        .into_response(),
    }
}

/// Binds every configured listener and starts serving. Port 0 picks a free port (see the
/// returned addresses).
pub async fn start(state: AppState) -> Result<Running, ServerError> {
    let cfg = state.config.clone();
    let (stop, stop_rx) = watch::channel(false);
    let mut tasks = Vec::new();
    let mut bound = [None; 4];
    let listeners = [
        ("OTLP/HTTP", cfg.otlp_http, false),
        ("OTLP/gRPC", cfg.otlp_grpc, true),
        ("Zipkin", cfg.zipkin, false),
        ("query", cfg.http, false),
    ];
    let mut sockets = Vec::new();
    for (i, (what, addr, grpc)) in listeners.into_iter().enumerate() {
        let Some(addr) = addr else { continue };
        let l = bind(what, addr).await?;
        let local = l.local_addr().map_err(|source| ServerError::Bind { what, addr, source })?;
        bound[i] = Some(local);
        sockets.push((what, l, grpc));
    }
    let mut http_router = router(state.clone());
    if let Some(allowed) = host_allowlist(&cfg, &bound.iter().flatten().copied().collect::<Vec<_>>()) {
        http_router = http_router.layer(axum::middleware::from_fn_with_state(allowed, check_host));
    }
    for (what, l, grpc) in sockets {
        let app = if grpc { otlp::grpc_router(state.clone()) } else { http_router.clone() };
        let mut rx = stop_rx.clone();
        tasks.push(tokio::spawn(async move {
            let shutdown = async move {
                let _ = rx.wait_for(|s| *s).await;
            };
            if let Err(e) = axum::serve(l, app).with_graceful_shutdown(shutdown).await {
                tracing::error!(listener = what, error = %e, "listener failed");
            }
        }));
    }
    Ok(Running {
        otlp_http: bound[0],
        otlp_grpc: bound[1],
        zipkin: bound[2],
        http: bound[3],
        state,
        stop,
        tasks,
    })
}
