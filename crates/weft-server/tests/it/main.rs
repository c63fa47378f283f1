//! weft-server integration tests: a real server on loopback ports, a real store in a temp dir,
//! real HTTP (ureq) and gRPC (tonic) clients. One binary, so DataFusion links once.

mod control;
mod exist;
mod explore;
mod ingest;
mod jaeger_query;
mod listeners;
mod live_keep;
mod params;
mod reads;
mod ui;

use std::net::SocketAddr;
use std::time::Duration;

use weft_server::{AppState, Running, ServerConfig};
use weft_store::{FsyncPolicy, Store, StoreConfig};

pub struct TestServer {
    pub rt: tokio::runtime::Runtime,
    pub running: Option<Running>,
    /// The query listener (reads, SQL, metrics, control API, UI).
    pub http: SocketAddr,
    /// The OTLP/HTTP listener.
    pub otlp: SocketAddr,
    /// The Zipkin listener.
    pub zipkin: SocketAddr,
    pub grpc: SocketAddr,
    pub store: Store,
    pub agent: ureq::Agent,
    dir: Option<tempfile::TempDir>,
}

pub fn loopback0() -> Option<SocketAddr> {
    Some(SocketAddr::from(([127, 0, 0, 1], 0)))
}

impl TestServer {
    pub fn start() -> TestServer {
        Self::with(|_, _| {})
    }

    pub fn with(tweak: impl FnOnce(&mut StoreConfig, &mut ServerConfig)) -> TestServer {
        Self::in_dir(tempfile::tempdir().unwrap(), tweak)
    }

    /// A server on the data directory `dir` (e.g. one a stopped server left, see
    /// [`TestServer::stop`]).
    pub fn in_dir(
        dir: tempfile::TempDir,
        tweak: impl FnOnce(&mut StoreConfig, &mut ServerConfig),
    ) -> TestServer {
        let mut sc = StoreConfig::new(dir.path());
        sc.fsync = FsyncPolicy::Never;
        sc.flush_interval = Duration::from_secs(3600);
        sc.maintenance_interval = Duration::from_secs(3600);
        sc.query_memory_bytes = 256 << 20;
        let mut cfg = ServerConfig {
            otlp_http: loopback0(),
            otlp_grpc: loopback0(),
            zipkin: loopback0(),
            http: loopback0(),
            ..ServerConfig::default()
        };
        tweak(&mut sc, &mut cfg);
        let store = Store::open(sc).unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let running = rt.block_on(weft_server::start(AppState::new(store.clone(), cfg))).unwrap();
        // No pooled connections: a request the server refuses before reading its body (413, a bad
        // query) ends that connection, and a pooled one could be reused just as the server closes
        // it ("Peer disconnected" on the next request, seen once in CI).
        let agent: ureq::Agent =
            ureq::Agent::config_builder().http_status_as_error(false).max_idle_connections(0).build().into();
        TestServer {
            http: running.http.unwrap(),
            otlp: running.otlp_http.unwrap(),
            zipkin: running.zipkin.unwrap(),
            grpc: running.otlp_grpc.unwrap(),
            running: Some(running),
            rt,
            store,
            agent,
            dir: Some(dir),
        }
    }

    /// A URL on the query listener.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.http, path)
    }

    /// Where a POST to `path` goes: the receivers' own listeners, else the query listener.
    pub fn post_url(&self, path: &str) -> String {
        let addr = match path {
            "/v1/traces" => self.otlp,
            "/api/v2/spans" => self.zipkin,
            _ => self.http,
        };
        format!("http://{addr}{path}")
    }

    /// Shuts the server down and closes its store; returns the data directory.
    pub fn stop(mut self) -> tempfile::TempDir {
        if let Some(r) = self.running.take() {
            self.rt.block_on(r.shutdown());
        }
        let dir = self.dir.take().unwrap();
        drop(self);
        dir
    }

    pub fn state(&self) -> &AppState {
        &self.running.as_ref().unwrap().state
    }

    /// GET → (status, body).
    pub fn get(&self, path: &str) -> (u16, String) {
        let mut r = self.agent.get(&self.url(path)).call().unwrap();
        let status = r.status().as_u16();
        (status, r.body_mut().read_to_string().unwrap())
    }

    /// GET → JSON (asserting 200).
    pub fn get_json(&self, path: &str) -> serde_json::Value {
        let (s, b) = self.get(path);
        assert_eq!(s, 200, "GET {path}: {b}");
        serde_json::from_str(&b).unwrap_or_else(|e| panic!("GET {path}: {e}: {b}"))
    }

    /// POST (to the listener of `path`, see [`TestServer::post_url`]) → (status, headers of
    /// interest, body bytes).
    pub fn post(&self, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, Option<String>, Vec<u8>) {
        let mut req = self.agent.post(&self.post_url(path));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let mut r = req.send(body).unwrap();
        let status = r.status().as_u16();
        let retry = r.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_owned);
        (status, retry, r.body_mut().read_to_vec().unwrap())
    }

    pub fn metric(&self, line_prefix: &str) -> f64 {
        let (_, text) = self.get("/metrics");
        text.lines()
            .find(|l| l.starts_with(line_prefix))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("metric {line_prefix} missing"))
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(r) = self.running.take() {
            self.rt.block_on(r.shutdown());
        }
    }
}

/// Realistic spans (whole traces) at a recent time.
pub fn spans(seed: u64, n: usize) -> Vec<weft_model::Span> {
    let start = weft_model::time::now_unix_nanos() - 600_000_000_000;
    weft_synth::shop::Shop::new(seed, start, 5_000_000).spans(n)
}

pub fn canon(mut v: Vec<weft_model::Span>) -> Vec<weft_model::Span> {
    v.sort_by_key(|s| (s.trace_id, s.start_ns, s.span_id));
    v
}

pub fn gzip(b: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}
