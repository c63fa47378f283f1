//! Configuration and the state every handler shares.

use std::net::SocketAddr;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use weft_store::Store;

use crate::metrics::Metrics;

/// Server configuration. Every listener binds 127.0.0.1 by default.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// OTLP/HTTP receiver (`POST /v1/traces`); default 127.0.0.1:4318.
    pub otlp_http: Option<SocketAddr>,
    /// OTLP/gRPC receiver (`TraceService/Export`); default 127.0.0.1:4317.
    pub otlp_grpc: Option<SocketAddr>,
    /// Zipkin receiver (`POST /api/v2/spans`); default 127.0.0.1:9411.
    pub zipkin: Option<SocketAddr>,
    /// Query APIs (Zipkin v2 read, Jaeger api_v3, SQL), `/metrics`, control API, UI; default
    /// 127.0.0.1:16686.
    pub http: Option<SocketAddr>,
    /// Largest request body accepted as sent (compressed), bytes → 413 above.
    pub max_request_bytes: usize,
    /// Largest request body after decompression, bytes → 413 above.
    pub max_decompressed_bytes: usize,
    /// Request bytes being received, decoded and stored at once; past it, 429.
    pub max_inflight_bytes: usize,
    /// Longest a client may take to send a request's headers, longest a connection may wait
    /// for its first request (any protocol, HTTP/2 included), and longest a keep-alive
    /// connection may wait idle for its next request; then it is closed. HTTP/2 connections
    /// are also pinged this often and closed when a ping goes unanswered as long.
    pub header_timeout: Duration,
    /// Longest a client may take to send a request's body (from the request's start) → 408.
    pub body_timeout: Duration,
    /// Connections one listener keeps open at most; one more is closed at once (counted).
    pub max_connections: usize,
    /// On shutdown, how long requests in progress may take to finish before their
    /// connections are dropped.
    pub shutdown_timeout: Duration,
    /// Longest a read query may run.
    pub query_timeout: Duration,
    /// Rows `POST /api/sql` returns at most.
    pub sql_max_rows: usize,
    /// Bytes (Arrow memory) a `POST /api/sql` result may hold; a larger one is refused (400).
    pub sql_max_bytes: usize,
    /// `POST /api/sql` queries running at once; more get 503 with `Retry-After`.
    pub sql_concurrency: usize,
    /// Read API requests (searches, trace reads, the UI's queries) whose store work runs at
    /// once, on the SQL runtime, apart from `sql_concurrency`'s slots; more get 503
    /// (`--read-concurrency`).
    pub read_concurrency: usize,
    /// Spans a trace read, a search or `traceMany` returns at most (`--read-max-spans`).
    pub read_max_spans: usize,
    /// Bytes of the store's query memory pool one `POST /api/sql` query may hold while it runs
    /// (sorts spill at it; anything else fails the query, 400 naming the limit).
    pub sql_query_memory: usize,
    /// Keys `GET /api/v2/autocompleteKeys` offers (Zipkin's `AUTOCOMPLETE_KEYS`).
    pub autocomplete_keys: Vec<String>,
    /// Bearer token of the control API (`/api/control/*`); `None` disables it.
    pub control_token: Option<String>,
    /// Host names HTTP requests may name in their `Host` besides `localhost` and IP addresses:
    /// a request naming another host is refused (403), so a web page cannot reach the server
    /// through DNS rebinding (which needs a name). `*` allows any.
    pub allowed_hosts: Vec<String>,
    /// Agents the control API remembers at most; past it the stalest is forgotten (counted).
    pub max_agents: usize,
    /// EXIST's coverage optimizer, service priorities and anomaly rules.
    pub exist: ExistConfig,
}

/// EXIST's cluster-level settings (`crate::exist`).
#[derive(Debug, Clone, Default)]
pub struct ExistConfig {
    /// The coverage optimizer's settings.
    pub optimizer: crate::exist::OptimizerConfig,
    /// Service → priority in [0, 1] (0.5 when absent).
    pub priorities: std::collections::BTreeMap<String, f64>,
    /// Anomaly rules evaluated over the ingested spans.
    pub rules: Vec<crate::exist::AnomalyRule>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        let local = |port: u16| Some(SocketAddr::from(([127, 0, 0, 1], port)));
        ServerConfig {
            otlp_http: local(4318),
            otlp_grpc: local(4317),
            zipkin: local(9411),
            http: local(16686),
            max_request_bytes: 16 << 20,
            max_decompressed_bytes: 64 << 20,
            max_inflight_bytes: 256 << 20,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            max_connections: 1024,
            shutdown_timeout: Duration::from_secs(10),
            query_timeout: Duration::from_secs(30),
            sql_max_rows: 10_000,
            sql_max_bytes: 64 << 20,
            sql_concurrency: 4,
            sql_query_memory: 256 << 20,
            read_concurrency: 8,
            read_max_spans: 200_000,
            autocomplete_keys: vec![
                "http.request.method".into(),
                "http.route".into(),
                "http.response.status_code".into(),
                "rpc.method".into(),
                "db.system".into(),
            ],
            control_token: None,
            allowed_hosts: Vec::new(),
            exist: ExistConfig::default(),
            max_agents: crate::control::MAX_AGENTS,
        }
    }
}

/// What handlers share. Cloning is cheap; modules that need more state (UI caches, the
/// control API's registry) add a field here.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

/// The shared parts of [`AppState`].
pub struct Shared {
    /// The store.
    pub store: Store,
    /// Counters and histograms.
    pub metrics: Metrics,
    /// Configuration.
    pub config: ServerConfig,
    /// The control API (commands for agents, agent reports).
    pub control: crate::control::ControlHub,
    /// In-flight request bytes, in KiB permits.
    pub(crate) inflight: Arc<Semaphore>,
    /// Slots of `POST /api/sql` queries running at once.
    pub(crate) sql_slots: Arc<Semaphore>,
    /// Slots of the read APIs' store work running at once.
    pub(crate) read_slots: Arc<Semaphore>,
    /// The runtime `POST /api/sql` queries and the read APIs' store work run on, apart from the
    /// receivers' (a heavy query cannot take the workers ingest needs).
    pub(crate) sql_runtime: SqlRuntime,
    /// Traces the UI prepared recently (see `ui::view`).
    pub ui_cache: crate::ui::view::TraceCache,
}

impl Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl AppState {
    /// `POST /api/sql` queries running now.
    pub fn sql_running(&self) -> usize {
        self.config.sql_concurrency.clamp(1, Semaphore::MAX_PERMITS) - self.sql_slots.available_permits()
    }

    /// Read API requests whose store work runs now.
    pub fn reads_running(&self) -> usize {
        self.config.read_concurrency.clamp(1, Semaphore::MAX_PERMITS) - self.read_slots.available_permits()
    }

    /// KiB of the in-flight budget free now.
    pub fn inflight_available(&self) -> usize {
        self.inflight.available_permits()
    }

    /// State for a store and configuration.
    pub fn new(store: Store, config: ServerConfig) -> Self {
        let permits = (config.max_inflight_bytes / 1024).clamp(1, Semaphore::MAX_PERMITS);
        let sql_slots = Arc::new(Semaphore::new(config.sql_concurrency.clamp(1, Semaphore::MAX_PERMITS)));
        AppState(Arc::new(Shared {
            sql_runtime: SqlRuntime::new(),
            sql_slots,
            read_slots: Arc::new(Semaphore::new(config.read_concurrency.clamp(1, Semaphore::MAX_PERMITS))),
            store,
            metrics: Metrics::default(),
            inflight: Arc::new(Semaphore::new(permits)),
            ui_cache: Default::default(),
            control: crate::control::ControlHub::with_exist(
                config.control_token.clone(),
                config.max_agents,
                config.exist.clone(),
            ),
            config,
        }))
    }
}

/// The SQL runtime: a few worker threads of its own (`weft-sql`), shut down in the background
/// when the state goes (it may be dropped on an async thread, where a blocking drop panics).
pub(crate) struct SqlRuntime(Option<tokio::runtime::Runtime>);

impl SqlRuntime {
    fn new() -> SqlRuntime {
        // as many workers as DataFusion makes partitions (one per core)
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).max(2);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("weft-sql")
            // IO too: DataFusion reads a bucket's segment files through object_store's HTTP
            // client, on this runtime.
            .enable_all()
            .build();
        match rt {
            Ok(rt) => SqlRuntime(Some(rt)),
            Err(e) => {
                tracing::warn!(error = %e, "no separate SQL runtime: SQL runs on the receivers' runtime");
                SqlRuntime(None)
            }
        }
    }

    /// Runs `f` on the SQL runtime (on the caller's when there is none); the task is aborted
    /// when the returned handle is.
    pub(crate) fn spawn<F>(&self, f: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match &self.0 {
            Some(rt) => rt.spawn(f),
            None => tokio::spawn(f),
        }
    }
}

impl Drop for SqlRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}
