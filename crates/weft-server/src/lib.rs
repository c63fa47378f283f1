//! # weft-server
//!
//! The collector: receivers and read APIs over one [`weft_store::Store`].
//!
//! | listener (default) | serves |
//! |---|---|
//! | OTLP/gRPC `127.0.0.1:4317` | `opentelemetry.proto.collector.trace.v1.TraceService/Export` ([`otlp`]) |
//! | OTLP/HTTP `127.0.0.1:4318` | `POST /v1/traces` ([`otlp`]) and nothing else |
//! | Zipkin `127.0.0.1:9411` | `POST /api/v2/spans` ([`zipkin`]) and nothing else |
//! | query `127.0.0.1:16686` | Zipkin v2 read API ([`zipkin`]), Jaeger api_v3 ([`jaeger`]), the Jaeger query service's HTTP JSON API ([`jaeger_query`]), `POST /api/sql` ([`sql`]), `GET /metrics`, the control API ([`control`]), `weft explore`'s forest ([`explore`]), UI ([`ui`]) |
//!
//! Each listener serves only its own routes (like Jaeger's collector and query ports): an
//! ingest port bound to a public address exposes ingest, not SQL, the UI or the control API.
//! The query router is built from one module per API family, each exposing
//! `routes() -> Router<AppState>`; a new family is one more module and one `.merge(...)` line
//! in [`query_router`]. Handlers share [`AppState`] (the store, metrics, configuration).
//!
//! EXIST's cluster level lives here too ([`exist`]): the coverage optimizer the control API's
//! `POST /api/control/exist/plan` runs over the replicas the agents report, the anomaly rules
//! evaluated over the ingested spans, and the merging and accuracy of function profiles.
//! So does Fay's cluster level ([`live`]): live queries planned, deployed to the agents, their
//! partials merged per window, and kept windows written to the store ([`live_keep`]).

#![warn(missing_docs)]

pub mod api;
mod conn;
pub mod control;
pub mod exist;
pub mod explore;
pub mod ingest;
pub mod jaeger;
pub mod jaeger_query;
pub mod live;
pub mod live_keep;
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

/// The router of the query listener: read APIs, SQL, metrics, the control API and the UI.
pub fn query_router(state: AppState) -> Router {
    Router::new()
        .merge(zipkin::routes())
        .merge(jaeger::routes())
        .merge(jaeger_query::routes())
        .merge(sql::routes())
        .merge(ui::routes())
        .merge(control::routes())
        .merge(explore::routes())
        .route("/metrics", get(metrics_text))
        .route("/api", get(index))
        .route("/api/status", get(status))
        .fallback(not_found)
        .layer(axum::middleware::map_response(security_headers))
        .with_state(state)
}

/// What the UI may load: its own files only — no inline scripts or styles, no other origins,
/// no framing (every view is built with DOM calls and `textContent`).
const CSP: &str = "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; \
                   form-action 'self'; frame-ancestors 'none'";

/// Every answer of the query listener carries the UI's Content-Security-Policy and
/// `X-Content-Type-Options: nosniff` (a JSON or text answer is never run as a script).
async fn security_headers(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    r
}

/// The router of the OTLP/HTTP listener: `POST /v1/traces` only.
pub fn otlp_http_router(state: AppState) -> Router {
    otlp::routes().fallback(|| ingest_only("OTLP/HTTP", "POST /v1/traces")).with_state(state)
}

/// The router of the Zipkin listener: `POST /api/v2/spans` only.
pub fn zipkin_router(state: AppState) -> Router {
    zipkin::ingest_routes().fallback(|| ingest_only("Zipkin", "POST /api/v2/spans")).with_state(state)
}

/// 404 of an ingest listener for anything but its receiver.
async fn ingest_only(listener: &'static str, route: &'static str) -> Response {
    api::ApiError::not_found(format!(
        "the {listener} listener serves {route} only; the read APIs, SQL, metrics, the control API \
         and the UI are on the query listener (weft serve --http)"
    ))
    .into_response()
}

async fn metrics_text(State(state): State<AppState>) -> Response {
    let mut text = state.metrics.render(&state.store);
    text.push_str(&state.control.render_metrics());
    text.push_str(&format!(
        "# HELP weft_sql_running POST /api/sql queries running now (at most --sql-concurrency).\n\
         # TYPE weft_sql_running gauge\nweft_sql_running {}\n\
         # HELP weft_reads_running Read API requests whose store work runs now (at most --read-concurrency).\n\
         # TYPE weft_reads_running gauge\nweft_reads_running {}\n",
        state.sql_running(),
        state.reads_running()
    ));
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

const INDEX: &str = "weft collector (this is the query listener)\n\
\n\
ingest:   on their own listeners: POST /v1/traces (OTLP/HTTP protobuf or JSON), gRPC\n\
          TraceService/Export (OTLP/gRPC), POST /api/v2/spans (Zipkin v2 JSON or proto3)\n\
zipkin:   GET /api/v2/services | spans?serviceName= | remoteServices?serviceName= | traces?... |\n\
          trace/{id} | traceMany?traceIds= | dependencies?endTs=&lookback= | autocompleteKeys | autocompleteValues?key=\n\
jaeger:   GET /api/v3/services | operations?service= | traces?query.serviceName=... | traces/{trace_id}\n\
          GET /api/services | services/{service}/operations | operations?service=&spanKind= |\n\
          traces?service=&operation=&tags=&start=&end=&minDuration=&maxDuration=&limit= | traces?traceID= |\n\
          traces/{traceID} | dependencies?endTs=&lookback= (Jaeger UI / Grafana JSON)\n\
sql:      POST /api/sql (body: SQL; ?format=json|csv|table), GET /api/sql?q=\n\
          tables: spans, span_events, span_links, events, live_NAME (kept live queries)\n\
metrics:  GET /metrics (Prometheus text)\n\
control:  POST /api/control/probes (bearer token; {\"op\":\"enable\",\"selector\":\"group:io\"}) | GET /api/control/probes/{id} |\n\
          GET /api/control/agents | POST /api/control/poll (agents) | POST /api/agents/report (agents) |\n\
          PUT /api/control/explore/forest (weft explore's hypothesis forest, kept in the data directory)\n\
live:     POST /api/control/queries[?keep=NAME] (bearer token; body: a live query) | GET /api/control/queries/{id}/results |\n\
          DELETE /api/control/queries/{id} | POST /api/control/live (agents)\n\
status:   GET /api/status\n\
ui:       GET / (the web UI); GET /api/ui/services | search | trace/{id} | span/{trace}/{span} |\n\
          dependencies | compare?a=&b= | breakdown?traces=&by=&wire=&rules= | explore\n";

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
    /// Stops accepting connections and waits for the listeners to finish in-flight requests,
    /// at most [`ServerConfig::shutdown_timeout`] (then the connections left are dropped).
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

/// Builds a listener's router.
type RouterFn = fn(AppState) -> Router;

/// Binds every configured listener and starts serving. Port 0 picks a free port (see the
/// returned addresses).
pub async fn start(state: AppState) -> Result<Running, ServerError> {
    let cfg = state.config.clone();
    let (stop, stop_rx) = watch::channel(false);
    let mut tasks = Vec::new();
    let mut bound = [None; 4];
    let listeners: [(&'static str, _, RouterFn, bool); 4] = [
        ("OTLP/HTTP", cfg.otlp_http, otlp_http_router, false),
        ("OTLP/gRPC", cfg.otlp_grpc, otlp::grpc_router, true),
        ("Zipkin", cfg.zipkin, zipkin_router, false),
        ("query", cfg.http, query_router, false),
    ];
    let mut sockets = Vec::new();
    for (i, (what, addr, router, grpc)) in listeners.into_iter().enumerate() {
        let Some(addr) = addr else { continue };
        let l = bind(what, addr).await?;
        let local = l.local_addr().map_err(|source| ServerError::Bind { what, addr, source })?;
        bound[i] = Some(local);
        sockets.push((i, what, l, router, grpc));
    }
    let allowed = host_allowlist(&cfg, &bound.iter().flatten().copied().collect::<Vec<_>>());
    for (i, what, l, router, grpc) in sockets {
        let mut app = router(state.clone());
        app = app.layer(axum::middleware::from_fn_with_state(cfg.body_timeout, conn::limit_body));
        if let (false, Some(allowed)) = (grpc, &allowed) {
            app = app.layer(axum::middleware::from_fn_with_state(allowed.clone(), check_host));
        }
        let (rx, cfg, counters) = (stop_rx.clone(), cfg.clone(), state.metrics.listener(i));
        tasks.push(tokio::spawn(async move { conn::serve(what, l, app, &cfg, counters, rx).await }));
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
