//! The agent's command line — `weft agent` and the lean `weft-agent` binary run the same
//! [`Args`] and [`run`]: drain the weft-probe rings of the local processes, ship spans to
//! `weft serve` through a bounded on-disk spool, report congestion, and take tracepoint commands
//! from `weft probes` (local socket) and the collector's control API.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use weft_cli::units::{fmt_bytes, parse_duration, parse_size};

use crate::spool::FullPolicy;
use crate::{Agent, AgentConfig};

/// Arguments of `weft agent`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Segment directory of the instrumented processes (created mode 0700 if missing, so
    /// processes started afterwards record into shared memory).
    #[arg(long, env = "WEFT_PROBE_DIR")]
    pub probe_dir: Option<PathBuf>,
    /// The collector: base URL of `weft serve`'s OTLP/HTTP listener, where spans go (`off` =
    /// spool only).
    #[arg(long, env = "WEFT_COLLECTOR", default_value = "http://127.0.0.1:4318")]
    pub collector: String,
    /// Base URL of the collector's control API (reports, commands): `weft serve`'s query
    /// listener. Default: the `--collector` host on port 16686 (the query listener's default).
    #[arg(long, env = "WEFT_CONTROL_URL")]
    pub control_url: Option<String>,
    /// Bearer token of the collector's control API (the same as `weft serve --control-token`);
    /// without it the agent takes no commands from the collector.
    #[arg(long, env = "WEFT_CONTROL_TOKEN", hide_env_values = true)]
    pub control_token: Option<String>,
    /// Read the control token from the first line of this file instead (keeps it out of the
    /// process list).
    #[arg(long, value_name = "FILE")]
    pub control_token_file: Option<PathBuf>,
    /// Spool directory (batches wait here until the collector acknowledges them). Default:
    /// $XDG_STATE_HOME/weft/agent-spool, else ~/.local/state/weft/agent-spool.
    #[arg(long, env = "WEFT_SPOOL_DIR")]
    pub spool_dir: Option<PathBuf>,
    /// Spool bound (bytes on disk).
    #[arg(long, default_value = "256MiB", value_parser = parse_size)]
    pub spool_size: u64,
    /// What goes when the spool is full: drop-oldest or drop-newest (counted either way).
    #[arg(long, default_value = "drop-oldest")]
    pub spool_full: FullPolicy,
    /// fdatasync every spooled batch (survives machine crashes, not only agent crashes).
    #[arg(long)]
    pub spool_fsync: bool,
    /// The agent's own `GET /metrics` listener (`off` to disable).
    #[arg(long, default_value = "127.0.0.1:9469")]
    pub metrics: String,
    /// Agent name in reports and control results (default: the host name).
    #[arg(long)]
    pub name: Option<String>,
    /// Pause between drain cycles.
    #[arg(long, default_value = "50ms", value_parser = parse_duration)]
    pub poll_interval: Duration,
    /// Longest a span waits in the agent before its batch is spooled.
    #[arg(long, default_value = "200ms", value_parser = parse_duration)]
    pub batch_interval: Duration,
    /// Spans per batch at most.
    #[arg(long, default_value_t = 2000)]
    pub max_batch_spans: usize,
    /// Do not serve the local control socket (`weft probes` then works on the segments directly).
    #[arg(long)]
    pub no_socket: bool,
    /// Send batches uncompressed (less agent CPU; for a collector on the same host).
    #[arg(long)]
    pub no_compress: bool,
    /// Keep raw TSC start/end times on spans (`weft.raw.start`, `weft.raw.end`).
    #[arg(long)]
    pub raw_times: bool,
    /// At exit, how long to keep sending what is spooled.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub linger: Duration,
}

/// The default spool directory.
pub fn default_spool_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("weft").join("agent-spool");
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    home.join(".local").join("state").join("weft").join("agent-spool")
}

/// A `--collector` / `--control-url` value as an `http://` base URL; `off` is `None`.
fn base_url(flag: &str, v: &str) -> anyhow::Result<Option<String>> {
    Ok(match v {
        "off" | "" => None,
        u if u.starts_with("http://") => Some(u.trim_end_matches('/').to_string()),
        u if u.starts_with("https://") => {
            anyhow::bail!("--{flag} {u}: https is not supported (use a local proxy)")
        }
        u => Some(format!("http://{}", u.trim_end_matches('/'))),
    })
}

/// Set by the SIGINT/SIGTERM handler.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Ctrl-C and SIGTERM set [`STOP`] instead of ending the process.
fn catch_stop_signals() -> anyhow::Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic (async-signal-safe); `signal` takes no
        // pointers besides the handler's address.
        let prev =
            unsafe { libc::signal(sig, on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t) };
        if prev == libc::SIG_ERR {
            anyhow::bail!("installing the handler of signal {sig}: {}", std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Sleeps up to `d`, less if a stop signal arrives; true once one has.
fn stopped_within(d: Duration) -> bool {
    let until = Instant::now() + d;
    while !STOP.load(Ordering::Relaxed) {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
    true
}

/// Runs the agent until Ctrl-C / SIGTERM.
pub fn run(args: Args) -> anyhow::Result<()> {
    let probe_dir = args.probe_dir.clone().unwrap_or_else(weft_probe::layout::default_dir);
    let spool_dir = args.spool_dir.clone().unwrap_or_else(default_spool_dir);
    let mut cfg = AgentConfig::new(&probe_dir, &spool_dir);
    cfg.collector = base_url("collector", &args.collector)?;
    cfg.control_url = match &args.control_url {
        Some(u) => base_url("control-url", u)?,
        None => cfg.collector.as_deref().map(weft_cli::query_url_near),
    };
    cfg.control_token =
        weft_cli::control_token(args.control_token.as_deref(), args.control_token_file.as_deref())?;
    cfg.spool.limit_bytes = args.spool_size.max(64 * 1024);
    cfg.spool.chunk_bytes = (cfg.spool.limit_bytes / 8).clamp(1024, 8 << 20);
    cfg.spool.policy = args.spool_full;
    cfg.spool.fsync = args.spool_fsync;
    cfg.metrics_addr = match args.metrics.as_str() {
        "off" | "" => None,
        a => Some(
            a.parse::<SocketAddr>().with_context(|| format!("--metrics {a:?}: expected HOST:PORT or off"))?,
        ),
    };
    if let Some(n) = &args.name {
        cfg.name = n.clone();
    }
    cfg.poll_interval = args.poll_interval;
    cfg.batch_interval = args.batch_interval;
    cfg.max_batch_spans = args.max_batch_spans.max(1);
    cfg.socket = !args.no_socket;
    cfg.linger = args.linger;
    cfg.compress = !args.no_compress;
    cfg.assembler.raw_times = args.raw_times;
    let collector = cfg.collector.clone();
    let control = match (&cfg.control_url, cfg.control_token.is_some()) {
        (Some(u), true) => format!("control API {u}"),
        (Some(_), false) => "control API off: no --control-token".to_string(),
        (None, _) => "control API off".to_string(),
    };
    let spool_limit = cfg.spool.limit_bytes;
    catch_stop_signals()?;
    let agent = Agent::start(cfg).context("starting the agent")?;
    let m = agent.metrics();
    let s0 = m.spool();
    println!("weft agent — weft {}", env!("CARGO_PKG_VERSION"));
    println!(
        "  probes     {}  (processes record here; control socket {})",
        probe_dir.display(),
        if args.no_socket {
            "off".into()
        } else {
            crate::control::socket_path(&probe_dir).display().to_string()
        }
    );
    println!(
        "  spool      {}  (bound {}, {}; {} batches pending from before)",
        spool_dir.display(),
        fmt_bytes(spool_limit),
        match args.spool_full {
            FullPolicy::DropOldest => "drops the oldest when full",
            FullPolicy::DropNewest => "drops the newest when full",
        },
        s0.pending_batches
    );
    match &collector {
        Some(c) => println!("  collector  {c}  (OTLP/HTTP; {control})"),
        None => println!("  collector  off: batches stay in the spool"),
    }
    if let Some(a) = agent.metrics_addr() {
        println!("  metrics    http://{a}/metrics");
    }
    println!("Ctrl-C stops (the last batches are spooled and, for --linger, sent).");

    let bar = weft_cli::progress::spinner("agent");
    loop {
        let s = m.spool();
        bar.set_message(format!(
            "{} processes, {} spans built, {} sent, spool {} ({} pending){}",
            m.processes().len(),
            m.spans_built.load(Ordering::Relaxed),
            m.spans_sent.load(Ordering::Relaxed),
            fmt_bytes(s.bytes),
            s.pending_batches,
            if m.collector_up.load(Ordering::Relaxed) || collector.is_none() {
                ""
            } else {
                ", collector unreachable"
            },
        ));
        bar.tick();
        if stopped_within(Duration::from_millis(500)) {
            break;
        }
    }
    bar.finish_and_clear();
    eprintln!("stopping: spooling the last records...");
    agent.join();
    let s = m.spool();
    let g = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    println!(
        "stopped: {} records read, {} spans built ({} incomplete), {} sent in {} batches, {} refused; spool: {} batches pending, {} dropped ({} spans) by the {} bound; {} segments drained and removed",
        g(&m.records),
        g(&m.spans_built),
        g(&m.spans_incomplete),
        g(&m.spans_sent),
        g(&m.batches_sent),
        g(&m.spans_rejected) + g(&m.spans_refused),
        s.pending_batches,
        s.dropped_batches,
        s.dropped_spans,
        fmt_bytes(s.limit_bytes),
        g(&m.segments_removed),
    );
    Ok(())
}
