//! `weft serve`: the collector and store — OTLP (HTTP, gRPC) and Zipkin receivers, Zipkin and
//! Jaeger read APIs, SQL, metrics — on one data directory, no external services; with
//! `--read-only`, a query node (over several collectors' prefixes of a bucket with
//! `--segments`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;

use anyhow::Context;
use weft_server::ingest::IngestError;
use weft_server::{AppState, Receiver, ServerConfig};
use weft_store::{FsyncPolicy, Store, StoreConfig};
use weft_synth::demo::{Appended, DemoConfig};

use weft_cli::units::{fmt_bytes, parse_duration, parse_size};

/// Arguments of `weft serve`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Data directory (WAL, segments, manifest). Default: $WEFT_DATA_DIR, else
    /// $XDG_DATA_HOME/weft, else ~/.local/share/weft; with --demo, a fresh temporary directory
    /// deleted on exit.
    #[arg(long, env = "WEFT_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Keep segments and manifests in an S3-compatible bucket, `s3://bucket/prefix` (the data
    /// directory keeps the WAL and a copy of the live segments). Endpoint, region and
    /// credentials: the AWS_* environment variables, over them --segments-credentials. Needs a
    /// weft built with the `s3` feature.
    #[arg(long, env = "WEFT_SEGMENTS")]
    pub segments: Option<String>,
    /// Serve reads only: no ingest listeners (--otlp-http, --otlp-grpc and --zipkin are not
    /// bound), no flushes, compaction or retention. With --segments s3://bucket/root: the
    /// union of every collector under that URL (its own MANIFEST.json and each
    /// `root/<name>/MANIFEST.json`, e.g. collectors started with --segments
    /// s3://bucket/root/<name>), re-read every --refresh-interval; the data directory is then
    /// only a cache of the segment files read. Without --segments: the data directory as it was
    /// when opened.
    #[arg(long, conflicts_with = "demo")]
    pub read_only: bool,
    /// With --read-only --segments: how often the collectors' manifests are re-read (new
    /// segments join, compacted or retired ones leave).
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub refresh_interval: std::time::Duration,
    /// A file of `AWS_*=value` lines (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT,
    /// AWS_REGION, …) for --segments; its values are never logged.
    #[arg(long, requires = "segments")]
    pub segments_credentials: Option<PathBuf>,
    /// Generate a simulated online shop's traffic (backfilled and live) to look at.
    #[arg(long)]
    pub demo: bool,
    /// Demo requests per second.
    #[arg(long, default_value_t = 2.0)]
    pub demo_rate: f64,
    /// OTLP/HTTP listener: `POST /v1/traces` only (`off` to disable).
    #[arg(long, default_value = "127.0.0.1:4318")]
    pub otlp_http: String,
    /// OTLP/gRPC listener (`off` to disable).
    #[arg(long, default_value = "127.0.0.1:4317")]
    pub otlp_grpc: String,
    /// Zipkin listener: `POST /api/v2/spans` only (`off` to disable).
    #[arg(long, default_value = "127.0.0.1:9411")]
    pub zipkin: String,
    /// Query listener: Zipkin and Jaeger read APIs, SQL, metrics, the control API, UI (`off` to
    /// disable). The ingest listeners serve ingest only.
    #[arg(long, default_value = "127.0.0.1:16686")]
    pub http: String,
    /// WAL fsync policy: `always` (before each acknowledgement), `never`, or a period (`100ms`).
    #[arg(long, default_value = "100ms")]
    pub fsync: FsyncPolicy,
    /// In-memory buffer size that triggers a flush to a Parquet segment.
    #[arg(long, default_value = "64MiB", value_parser = parse_size)]
    pub flush_size: u64,
    /// Longest unflushed data stays in memory (and in the WAL) before a flush.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub flush_interval: std::time::Duration,
    /// Buffered bytes past which receivers answer 503 (flushing cannot keep up).
    #[arg(long, default_value = "256MiB", value_parser = parse_size)]
    pub max_buffer: u64,
    /// How often retention and compaction run.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub maintenance_interval: std::time::Duration,
    /// Delete data older than this (e.g. `7d`).
    #[arg(long, value_parser = parse_duration)]
    pub retention: Option<std::time::Duration>,
    /// Delete the oldest data while segments exceed this size (e.g. `50GiB`).
    #[arg(long, value_parser = parse_size)]
    pub retention_size: Option<u64>,
    /// Largest request body as sent (a gRPC message as declared); larger requests get 413
    /// (gRPC: RESOURCE_EXHAUSTED without a RetryInfo).
    #[arg(long, default_value = "16MiB", value_parser = parse_size)]
    pub max_request_size: u64,
    /// Largest request body once decompressed (gzip, deflate; gRPC message once inflated);
    /// larger requests get 413.
    #[arg(long, default_value = "64MiB", value_parser = parse_size)]
    pub max_decompressed_size: u64,
    /// Request bytes in flight at once; past it, 429.
    #[arg(long, default_value = "256MiB", value_parser = parse_size)]
    pub max_inflight: u64,
    /// Longest a client may take to send a request's headers; also how long a new connection
    /// (HTTP/2 and gRPC included) may wait before its first request and an idle keep-alive
    /// connection stays open. Then the connection is closed (slowloris).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub header_timeout: std::time::Duration,
    /// Longest a client may take to send a request's body; past it, 408 (a trickling body
    /// gives back its share of --max-inflight).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub body_timeout: std::time::Duration,
    /// Connections each listener keeps open at most; more are closed at once (counted in
    /// weft_connections_refused_total).
    #[arg(long, default_value_t = 1024)]
    pub max_connections: usize,
    /// On exit, how long requests in progress may take to finish before their connections
    /// are dropped.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub shutdown_timeout: std::time::Duration,
    /// Longest a read query (SQL, the read APIs) may run; past it, it is cancelled (504).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub query_timeout: std::time::Duration,
    /// SQL queries (`/api/sql`) running at once; more get 503 with Retry-After.
    #[arg(long, default_value_t = 4)]
    pub sql_concurrency: usize,
    /// Largest SQL result (Arrow memory); a larger one is refused (400 naming the limit).
    #[arg(long, default_value = "64MiB", value_parser = parse_size)]
    pub sql_max_bytes: u64,
    /// Memory one SQL query may hold while it runs, of the 1 GiB all queries share (sorts spill
    /// at it; past it anything else fails, 400 naming the flag).
    #[arg(long, default_value = "256MiB", value_parser = parse_size)]
    pub sql_query_memory: u64,
    /// Read API requests (searches, trace reads, the UI) whose store work runs at once, apart
    /// from the SQL slots; more get 503 with Retry-After.
    #[arg(long, default_value_t = 8)]
    pub read_concurrency: usize,
    /// Spans a trace read, a search or traceMany returns at most (a search returns fewer
    /// traces; a trace read past it gets 400 naming the flag).
    #[arg(long, default_value_t = 200_000)]
    pub read_max_spans: usize,
    /// Bearer token that enables the control API (`/api/control/*`: switch tracepoints through
    /// the agents). Without it the control API is off.
    #[arg(long, env = "WEFT_CONTROL_TOKEN", hide_env_values = true)]
    pub control_token: Option<String>,
    /// Another host name requests may name in their `Host` header, besides localhost and IP
    /// addresses (repeatable; `*` allows any). Other names get 403: a web page cannot reach the
    /// server through DNS rebinding. Needed when clients reach weft serve by a name.
    #[arg(long = "allow-host", value_name = "HOST")]
    pub allow_hosts: Vec<String>,
    /// Read the control token from the first line of this file instead (keeps it out of the
    /// process list).
    #[arg(long, value_name = "FILE")]
    pub control_token_file: Option<std::path::PathBuf>,
    /// An EXIST anomaly rule over the ingested spans (repeatable): `service=S p99>50ms
    /// window=10s [cooldown=60s] [functions=a,b]`; when a window's quantile of S's server spans
    /// is over the threshold, every replica of S is captured (once per cooldown).
    #[arg(long = "exist-rule", value_name = "RULE", value_parser = weft_server::exist::AnomalyRule::parse)]
    pub exist_rules: Vec<weft_server::exist::AnomalyRule>,
    /// A service's priority for EXIST's coverage optimizer, `SERVICE=P` with P in [0, 1]
    /// (repeatable; 0.5 when not given).
    #[arg(long = "exist-priority", value_name = "SERVICE=P", value_parser = parse_priority)]
    pub exist_priorities: Vec<(String, f64)>,
    /// Slowdown of a target while traced, as measured (2.8 = 280 % slower): with
    /// --exist-budget and --exist-round it caps the captures' period.
    #[arg(long, default_value_t = 2.8)]
    pub exist_overhead: f64,
    /// Mean slowdown EXIST's captures may cost a service over a round (0.01 = 1 %).
    #[arg(long, default_value_t = 0.01)]
    pub exist_budget: f64,
    /// Time between EXIST profiling rounds (for the overhead cap).
    #[arg(long, default_value = "60s", value_parser = weft_cli::units::parse_duration)]
    pub exist_round: std::time::Duration,
    /// Share of a service's replicas one profiling round traces at priority 1 (half at 0).
    #[arg(long, default_value_t = 0.5)]
    pub exist_sample: f64,
}

fn parse_priority(v: &str) -> Result<(String, f64), String> {
    let (s, p) = v.split_once('=').ok_or_else(|| format!("{v:?}: expected SERVICE=P"))?;
    let p: f64 = p.parse().map_err(|_| format!("{v:?}: P must be a number in [0, 1]"))?;
    if s.is_empty() || !(0.0..=1.0).contains(&p) {
        return Err(format!("{v:?}: expected SERVICE=P with P in [0, 1]"));
    }
    Ok((s.to_owned(), p))
}

fn listener(flag: &str, v: &str) -> anyhow::Result<Option<SocketAddr>> {
    if v == "off" || v.is_empty() {
        return Ok(None);
    }
    v.parse().map(Some).with_context(|| format!("--{flag} {v:?}: expected HOST:PORT (an IP address) or off"))
}

/// The default data directory.
pub fn default_data_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("weft");
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    home.join(".local").join("share").join("weft")
}

struct TempDir(PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `weft serve` until Ctrl-C / SIGTERM.
pub fn run(args: Args) -> anyhow::Result<()> {
    let mut _temp = None;
    let dir = match (&args.data_dir, args.demo) {
        (Some(d), _) => d.clone(),
        (None, true) => {
            let d = std::env::temp_dir().join(format!("weft-demo-{}", std::process::id()));
            _temp = Some(TempDir(d.clone()));
            d
        }
        (None, false) => default_data_dir(),
    };
    let mut sc = StoreConfig::new(&dir);
    sc.fsync = args.fsync;
    sc.flush_bytes = args.flush_size as usize;
    sc.flush_interval = args.flush_interval;
    sc.max_buffer_bytes = args.max_buffer as usize;
    sc.retention_age = args.retention;
    sc.retention_bytes = args.retention_size;
    sc.maintenance_interval = args.maintenance_interval;
    sc.read_only = args.read_only;
    sc.refresh_interval = args.refresh_interval;
    if let Some(url) = &args.segments {
        #[cfg(feature = "s3")]
        {
            sc.bucket = Some(weft_store::BucketConfig {
                url: url.clone(),
                credentials_file: args.segments_credentials.clone(),
            });
        }
        #[cfg(not(feature = "s3"))]
        anyhow::bail!(
            "--segments {url}: this weft was built without the `s3` feature (cargo build --features s3)"
        );
    }
    // A reader binds no ingest listener.
    let ingest = |flag: &str, v: &str| if args.read_only { Ok(None) } else { listener(flag, v) };
    let cfg = ServerConfig {
        otlp_http: ingest("otlp-http", &args.otlp_http)?,
        otlp_grpc: ingest("otlp-grpc", &args.otlp_grpc)?,
        zipkin: ingest("zipkin", &args.zipkin)?,
        http: listener("http", &args.http)?,
        max_request_bytes: args.max_request_size as usize,
        max_inflight_bytes: args.max_inflight as usize,
        max_decompressed_bytes: args.max_decompressed_size as usize,
        header_timeout: args.header_timeout,
        body_timeout: args.body_timeout,
        max_connections: args.max_connections,
        shutdown_timeout: args.shutdown_timeout,
        query_timeout: args.query_timeout,
        sql_concurrency: args.sql_concurrency,
        sql_max_bytes: args.sql_max_bytes as usize,
        sql_query_memory: args.sql_query_memory as usize,
        read_concurrency: args.read_concurrency,
        read_max_spans: args.read_max_spans,
        allowed_hosts: args.allow_hosts.clone(),
        control_token: weft_cli::control_token(
            args.control_token.as_deref(),
            args.control_token_file.as_deref(),
        )?,
        exist: weft_server::state::ExistConfig {
            optimizer: weft_server::exist::OptimizerConfig {
                reference_overhead: args.exist_overhead,
                overhead_budget: args.exist_budget,
                round: args.exist_round,
                sample: args.exist_sample,
                ..Default::default()
            },
            priorities: args.exist_priorities.iter().cloned().collect(),
            rules: args.exist_rules.clone(),
        },
        ..ServerConfig::default()
    };

    let store = Store::open(sc).with_context(|| format!("opening the store in {}", dir.display()))?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("weft-serve").build()?;
    let state = AppState::new(store.clone(), cfg);
    let running = rt.block_on(weft_server::start(state.clone()))?;

    let st = store.stats();
    let m = store.metrics();
    let role = if args.read_only { "read-only query node" } else { "collector and store" };
    println!("weft serve — {role} ({} {})", env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION"));
    if let (true, Some(url)) = (args.read_only, &args.segments) {
        println!(
            "  segments   {url} and every {url}/<name>/ (re-read every {:?}; no ingest listeners)",
            args.refresh_interval
        );
    }
    println!(
        "  data       {}{}",
        store.dir().display(),
        if _temp.is_some() { "  (temporary: deleted on exit)" } else { "" }
    );
    println!(
        "             {} segments, {}, {} spans stored; {} buffered spans replayed from the WAL{}",
        st.segments,
        fmt_bytes(st.segment_bytes),
        st.segment_spans,
        st.buffer_spans,
        match m.wal_records_torn.load(Ordering::Relaxed) {
            0 => String::new(),
            n => format!(" ({n} torn WAL record(s) cut)"),
        }
    );
    if let Some(a) = running.otlp_grpc {
        println!("  OTLP/gRPC  {a}");
    }
    if let Some(a) = running.otlp_http {
        println!("  OTLP/HTTP  http://{a}/v1/traces");
    }
    if let Some(a) = running.zipkin {
        println!("  Zipkin     http://{a}/api/v2/spans");
    }
    let query = running.http;
    if let Some(a) = query {
        println!(
            "  Jaeger     http://{a}/api/v3/services  (api_v3; Zipkin read API: http://{a}/api/v2/services)"
        );
        println!("  UI         http://{a}/");
        println!("  SQL        http://{a}/api/sql   tables: spans, span_events, span_links, events");
        println!("  metrics    http://{a}/metrics   index: http://{a}/api");
        if state.control.enabled() {
            println!(
                "  control    http://{a}/api/control/probes   (bearer token; agents poll /api/control/poll)"
            );
        }
    }
    let demo = if args.demo {
        let dc = DemoConfig { rate: args.demo_rate, ..Default::default() };
        println!(
            "  demo       a simulated shop: {} requests/s, last {} min backfilled; {} woven SimBricks ping rounds",
            dc.rate,
            dc.backfill.as_secs() / 60,
            weft_synth::demo::PING_ROUNDS
        );
        let _g = rt.enter();
        let st = state.clone();
        Some(weft_synth::demo::start(dc, move |batch| {
            match weft_server::ingest::store_generated(&st, Receiver::Demo, batch) {
                Ok(_) => Appended::Stored,
                Err(IngestError::Overloaded(_)) => Appended::Busy,
                Err(e) => Appended::Refused(e.message()),
            }
        }))
    } else {
        None
    };
    if let Some(a) = query {
        println!();
        println!("Try:  curl -s http://{a}/api/v3/services");
        println!(
            "      weft query --url http://{a} \"SELECT service_name, count(*) AS spans, avg(duration_ns)/1e6 AS avg_ms FROM spans GROUP BY 1 ORDER BY 2 DESC\""
        );
    }
    if st.segment_spans + st.buffer_spans == 0 && !args.demo && !args.read_only {
        println!(
            "      (no data yet: point an OpenTelemetry or Zipkin exporter here, or restart with --demo)"
        );
    }
    println!("Ctrl-C stops (buffered spans are flushed first).");

    rt.block_on(shutdown_signal());
    eprintln!("stopping: flushing buffered spans...");
    if let Some(d) = demo {
        d.abort();
    }
    rt.block_on(running.shutdown());
    let close = store.close();
    let st = store.stats();
    let mut accepted = Vec::new();
    for r in Receiver::ALL {
        let n = state.metrics.receiver(r).spans_accepted.load(Ordering::Relaxed);
        if n > 0 {
            accepted.push(format!("{} {n}", r.as_str()));
        }
    }
    println!(
        "stopped: spans accepted this run: {}; store: {} segments, {}, {} spans",
        if accepted.is_empty() { "none".into() } else { accepted.join(", ") },
        st.segments,
        fmt_bytes(st.segment_bytes),
        st.segment_spans
    );
    drop(rt);
    close.context("flushing the store on exit")?;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = ctrl_c.await;
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
