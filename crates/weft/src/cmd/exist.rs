//! `weft exist capture`: one EXIST capture on this node — a target's function calls (and, with
//! `--tracepoints`, its weft-probe tracepoints) for a bounded period (weft-agent's capture
//! engine, software backend), woven into the requests that ran them (`--weave`: the
//! application's spans with `thread.id`) and written to a file, a data directory and/or a
//! server — or a series of them (`--every`, `--rounds`: one process, one engine, the module's
//! symbols read once), with each round's CPU and the series' peak memory reported. `weft exist plan`: profiling rounds of the collector's coverage optimizer
//! (`POST /api/control/exist/plan`) — one, or one every `--every` for `--rounds` — printing
//! which replicas get which period and why.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use weft_agent::capture::alloc::{AllocConfig, Allocator};
use weft_agent::capture::engine::{Backend, CaptureRequest, CaptureTarget, Cores, Engine};
use weft_cli::units;
use weft_control::client::{Collector, PlanRequest};
use weft_model::codec::stream;
use weft_sources::perf::exist;
use weft_weave::sink::SpanSink;

use super::import::ServerSink;
use super::pipeline::{append_retrying, span_file_format};
use super::record::{hostname, read_spans};

/// Arguments of `weft exist`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub command: Sub,
}

/// `weft exist` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum Sub {
    /// Trace a target's function calls for a bounded period and weave them into its requests.
    Capture(Box<CaptureArgs>),
    /// Ask the collector's coverage optimizer for profiling rounds and print their plans.
    Plan(PlanArgs),
}

/// Arguments of `weft exist plan`.
#[derive(clap::Args, Debug)]
pub struct PlanArgs {
    /// The collector's query listener (which serves the control API).
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:16686")]
    pub collector: String,
    /// File holding the control token (else WEFT_CONTROL_TOKEN).
    #[arg(long, value_name = "FILE")]
    pub control_token_file: Option<PathBuf>,
    /// The spatial sampler's seed (default: the collector's round number).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Functions the captures probe, as globs (default: every function of each executable).
    #[arg(long, value_delimiter = ',', value_name = "GLOB")]
    pub functions: Vec<String>,
    /// Plan only: print what a round would capture, dispatch nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// How long to wait for a round's capture outcomes (0: do not wait).
    #[arg(long, default_value = "20s", value_parser = units::parse_duration)]
    pub wait: Duration,
    /// Start a round this often (timed profiling rounds; with --rounds).
    #[arg(long, value_parser = units::parse_duration)]
    pub every: Option<Duration>,
    /// How many rounds (1 to 10000); SIGINT/SIGTERM stops earlier, between rounds.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub rounds: u64,
    /// Print each round's answer as JSON (one line per round).
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `weft exist capture`.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["pid", "service", "cgroup"])))]
pub struct CaptureArgs {
    /// The target process (all its threads).
    #[arg(long)]
    pub pid: Option<u32>,
    /// The target service: processes whose comm or program name is this.
    #[arg(long)]
    pub service: Option<String>,
    /// The target cgroup (v2 directory).
    #[arg(long)]
    pub cgroup: Option<PathBuf>,
    /// How long to trace (0.1 s to 2 s without --force).
    #[arg(long, default_value = "500ms", value_parser = units::parse_duration)]
    pub period: Duration,
    /// Functions to probe, as globs (repeatable or comma-separated); default: every function
    /// of the module (at most 128).
    #[arg(long, value_delimiter = ',', value_name = "GLOB")]
    pub functions: Vec<String>,
    /// The binary or library whose functions are probed (default: the target's executable).
    #[arg(long, value_name = "PATH")]
    pub module: Option<PathBuf>,
    /// Memory for this capture's per-core buffers (default: the node's 512 MiB).
    #[arg(long, value_parser = units::parse_size)]
    pub budget: Option<u64>,
    /// Cores to trace: `auto` (where the target ran recently, plus a sample) or a list (0-3,6).
    #[arg(long, default_value = "auto")]
    pub cores: String,
    /// The tracer: `software` (uprobes) or `intel-pt`.
    #[arg(long, default_value = "software")]
    pub backend: String,
    /// Accept a period outside 0.1-2 s.
    #[arg(long)]
    pub force: bool,
    /// The target's weft-probe tracepoints to switch on for the period (`all`, names, globs,
    /// `group:G`, `level:L`; repeatable or comma-separated); the enabled set is restored at
    /// the end. Their spans reach the node's agent like any other.
    #[arg(long, value_delimiter = ',', value_name = "SELECTOR")]
    pub tracepoints: Vec<String>,
    /// The weft-probe segment directory (default `$WEFT_PROBE_DIR` or `/dev/shm/weft-<uid>`).
    #[arg(long)]
    pub probe_dir: Option<PathBuf>,
    /// The application's spans (any readable format) carrying `thread.id`: the function calls
    /// go inside the request span that ran them. Read after the capture.
    #[arg(long, value_name = "FILE")]
    pub weave: Option<PathBuf>,
    /// Write the spans (with the --weave spans) to this file; format from --format or the name.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Format of --out.
    #[arg(long)]
    pub format: Option<String>,
    /// Append the spans to this weft data directory.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Send the spans to this OTLP/HTTP endpoint (e.g. a `weft serve`).
    #[arg(long, value_name = "URL")]
    pub server: Option<String>,
    /// The target threads' scheduler switches as EXIST's 24-byte records.
    #[arg(long, value_name = "FILE")]
    pub sched_out: Option<PathBuf>,
    /// Start a capture this often (a series; with --rounds). Between the captures nothing is
    /// attached to the target.
    #[arg(long, value_parser = units::parse_duration)]
    pub every: Option<Duration>,
    /// How many captures (1 to 1000000); SIGINT/SIGTERM ends the series after the running
    /// capture. With more than one, round N writes --out and --sched-out with `.N` before
    /// the file's extension.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub rounds: u64,
}

/// Runs `weft exist`.
pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        Sub::Capture(a) => capture(*a),
        Sub::Plan(a) => plan(a),
    }
}

/// `--cores`: `auto` or a CPU list.
fn parse_cores(s: &str) -> anyhow::Result<Cores> {
    Cores::parse(s).with_context(|| format!("--cores {s:?}: give `auto` or a CPU list such as 0-3,6"))
}

fn capture(args: CaptureArgs) -> anyhow::Result<()> {
    let received = Instant::now();
    if args.out.is_none() && args.data_dir.is_none() && args.server.is_none() && args.sched_out.is_none() {
        bail!("nowhere to write: give --out FILE, --data-dir DIR, --server URL and/or --sched-out FILE");
    }
    if args.rounds > 1 && args.every.is_none() {
        bail!(
            "--rounds {} needs --every DURATION (the time from one capture's start to the next)",
            args.rounds
        );
    }
    let every = args.every.unwrap_or_default();
    if args.every.is_some_and(|e| e < args.period) {
        bail!("--every {every:?} is shorter than --period {:?}", args.period);
    }
    let out_format = span_file_format(args.out.as_deref(), args.format.as_deref())?;
    let backend = match args.backend.as_str() {
        "software" | "sw" => Backend::Software,
        "intel-pt" | "intel_pt" | "pt" => Backend::IntelPt,
        b => bail!("--backend {b:?}: give software or intel-pt"),
    };
    let target = match (args.pid, &args.service, &args.cgroup) {
        (Some(p), _, _) => CaptureTarget::Pid(p),
        (_, Some(s), _) => CaptureTarget::Service(s.clone()),
        (_, _, Some(c)) => CaptureTarget::Cgroup(c.clone()),
        _ => bail!("give a target: --pid, --service or --cgroup"),
    };
    let req = CaptureRequest {
        target,
        period: args.period,
        cores: parse_cores(&args.cores)?,
        budget: args.budget,
        backend,
        functions: args.functions.clone(),
        module: args.module.clone(),
        force: args.force,
        tracepoints: args.tracepoints.clone(),
    };
    let mut engine = Engine::new(Allocator::new(AllocConfig::default())?);
    if let Some(d) = &args.probe_dir {
        engine = engine.with_probe_dir(d);
    }
    if args.rounds == 1 {
        capture_once(&args, &engine, &req, out_format, received, None)?;
        return Ok(());
    }
    install_stop_handler();
    let mut peak_buffers = (0u64, 0u64);
    let mut done = 0;
    let mut failed = None;
    for n in 1..=args.rounds {
        let started = Instant::now();
        let c = match capture_once(&args, &engine, &req, out_format, started, Some(n)) {
            Ok(c) => c,
            Err(e) => {
                // The series' figures are still reported (a target that went away ends it).
                failed = Some(e.context(format!("round {n} of {}", args.rounds)));
                break;
            }
        };
        done = n;
        peak_buffers = peak_buffers.max((c.peak_bytes, c.buffer_bytes));
        if n < args.rounds && !pause(every.saturating_sub(started.elapsed())) {
            break;
        }
    }
    let u = usage_self();
    eprintln!(
        "weft exist: series: {done} of {} rounds; process CPU {:.3} s (user {:.3}, system {:.3}); peak RSS {} bytes; \
         peak capture buffers {} of {} bytes granted",
        args.rounds,
        (u.user + u.system).as_secs_f64(),
        u.user.as_secs_f64(),
        u.system.as_secs_f64(),
        u.max_rss,
        peak_buffers.0,
        peak_buffers.1
    );
    failed.map_or(Ok(()), Err)
}

/// `path` for round `n` of a series: `.N` before its extension (`x.json` → `x.3.json`).
fn round_path(path: &std::path::Path, n: Option<u64>) -> PathBuf {
    let Some(n) = n else { return path.to_path_buf() };
    let name = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    let numbered = match name.split_once('.') {
        Some((stem, ext)) => format!("{stem}.{n}.{ext}"),
        None => format!("{name}.{n}"),
    };
    path.with_file_name(numbered)
}

/// This process's CPU time and peak resident set (`getrusage`).
struct SelfUsage {
    user: Duration,
    system: Duration,
    /// Bytes.
    max_rss: u64,
}

fn usage_self() -> SelfUsage {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is always valid.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    SelfUsage { user: tv(ru.ru_utime), system: tv(ru.ru_stime), max_rss: ru.ru_maxrss as u64 * 1024 }
}

/// One capture of `req`, woven and written (`round`: its number in a series); its counters.
fn capture_once(
    args: &CaptureArgs,
    engine: &Engine,
    req: &CaptureRequest,
    out_format: Option<stream::Format>,
    received: Instant,
    round: Option<u64>,
) -> anyhow::Result<weft_agent::capture::engine::Counters> {
    let r = engine.run(req, received)?;
    let after_capture = usage_self();
    let c = &r.counters;
    if let Some(n) = round {
        // The window in Unix time, for tools that line it up with their own samples.
        eprintln!("weft exist: round {n}: window {}..{} ns (Unix time)", r.start_ns, r.end_ns);
    }
    let cores: Vec<String> =
        r.buffers.iter().map(|b| format!("{}: {}", b.core, units::fmt_bytes(b.bytes))).collect();
    eprintln!(
        "weft exist: captured pid {} ({}) for {:.1} ms on cores [{}]: {} functions, {} calls, {} returns, {} scheduler records",
        r.pids.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
        r.module.display(),
        (r.end_ns - r.start_ns) as f64 / 1e6,
        cores.join(", "),
        c.functions,
        c.calls,
        c.returns,
        c.switches
    );
    if c.tracepoints > 0 {
        eprintln!("weft exist: {} weft-probe tracepoints on for the period, then back off", c.tracepoints);
    }
    eprintln!(
        "weft exist: start latency {:.2} ms, stop latency {:.3} ms; {} control operations (cores switched on: {:?}); peak memory {} of {}",
        c.start_latency.as_secs_f64() * 1e3,
        c.stop_latency.as_secs_f64() * 1e3,
        c.control_ops,
        c.cores_enabled.iter().map(|x| x.0).collect::<Vec<_>>(),
        units::fmt_bytes(c.peak_bytes),
        units::fmt_bytes(c.buffer_bytes)
    );
    let app = match &args.weave {
        Some(p) => read_spans(p)?,
        None => Vec::new(),
    };
    let fs = r.spans(&app, &hostname());
    eprintln!(
        "weft exist: {} function spans: {} inside requests, {} inside enclosing calls, {} outside any request ({} unmatched returns)",
        fs.kernel.uprobe_calls, fs.nest.placed, fs.nest.nested, fs.nest.unplaced, fs.kernel.unmatched_returns
    );
    let mut spans = app;
    spans.extend(fs.spans);

    if let Some(p) = &args.sched_out {
        let p = &round_path(p, round);
        let f = std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?;
        let mut w = exist::Writer::new(std::io::BufWriter::new(f))
            .with_context(|| format!("writing {}", p.display()))?;
        for rec in &r.sched {
            w.write(rec).with_context(|| format!("writing {}", p.display()))?;
        }
        w.finish().with_context(|| format!("writing {}", p.display()))?;
    }
    if let (Some(p), Some(format)) = (&args.out, out_format) {
        let p = &round_path(p, round);
        let f = std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?;
        let mut w = stream::writer(format, std::io::BufWriter::new(f), Default::default())?;
        w.write(&spans).with_context(|| format!("writing {}", p.display()))?;
        let losses = w.finish().with_context(|| format!("writing {}", p.display()))?;
        if !losses.is_empty() {
            eprintln!("note: {} cannot carry everything: {losses}", format.name());
        }
    }
    if let Some(dir) = &args.data_dir {
        let store = weft_store::Store::open(weft_store::StoreConfig::new(dir))
            .with_context(|| format!("opening {}", dir.display()))?;
        append_retrying(|| store.append(&spans))?;
        store.close()?;
    }
    if let Some(url) = &args.server {
        let mut sink = ServerSink::new(url);
        sink.write(&spans)?;
    }
    eprintln!("weft exist: wrote {} spans", spans.len());
    let done = usage_self();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    eprintln!(
        "weft exist: CPU: {:.1} ms setup, {:.1} ms in the period ({} wake-ups), {:.1} ms release (capturing thread); \
         {:.1} ms weaving and writing; functions {}",
        ms(c.cpu_setup),
        ms(c.cpu_window),
        c.polls,
        ms(c.cpu_release),
        ms((done.user + done.system).saturating_sub(after_capture.user + after_capture.system)),
        if c.functions_cached { "cached" } else { "resolved from the module's symbols" }
    );
    Ok(r.counters)
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// SIGINT and SIGTERM end a series between its rounds instead of the process.
fn install_stop_handler() {
    // SAFETY: installing an async-signal-safe handler that only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
}

/// Sleeps `d` in short steps; false when interrupted.
fn pause(d: Duration) -> bool {
    let end = Instant::now() + d;
    while !INTERRUPTED.load(Ordering::SeqCst) {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
    false
}

fn plan(args: PlanArgs) -> anyhow::Result<()> {
    let token = super::control_token(args.control_token_file.as_deref())?;
    if token.is_empty() {
        bail!("the control API needs a token: give --control-token-file FILE or set WEFT_CONTROL_TOKEN");
    }
    if args.rounds > 1 && args.every.is_none() {
        bail!("--rounds {} needs --every DURATION (the time between rounds)", args.rounds);
    }
    let every = args.every.unwrap_or_default();
    if args.every.is_some_and(|e| e < Duration::from_secs(1)) {
        bail!("--every {every:?}: at least 1s between rounds");
    }
    let collector = Collector::new(&args.collector, Some(token));
    install_stop_handler();
    for n in 1..=args.rounds {
        let started = Instant::now();
        let req = PlanRequest { seed: args.seed, functions: args.functions.clone(), dry_run: args.dry_run };
        let answer = collector
            .exist_plan(&req, args.wait)
            .with_context(|| format!("round {n} of {}: {}", args.rounds, args.collector))?;
        if args.json {
            println!("{answer}");
        } else {
            print_round(&answer);
        }
        if n < args.rounds && !pause(every.saturating_sub(started.elapsed())) {
            eprintln!("weft exist plan: interrupted after {n} of {} rounds", args.rounds);
            break;
        }
    }
    Ok(())
}

/// A round's answer, for people: the plan (service, period, replicas), the skipped services
/// and why, each capture's reason and outcome, the merged profiles.
fn print_round(a: &serde_json::Value) {
    let s = |v: &serde_json::Value| v.as_str().unwrap_or("").to_owned();
    let list = |v: &serde_json::Value| v.as_array().cloned().unwrap_or_default();
    let round = a["round"].as_u64().unwrap_or(0);
    let head = if round == 0 { "dry run".to_owned() } else { format!("round {round}") };
    println!("{head} (seed {})", a["seed"].as_u64().unwrap_or(0));
    for p in list(&a["plan"]["captures"]) {
        let replicas: Vec<String> = list(&p["replicas"])
            .iter()
            .map(|r| format!("{}/pid {}", s(&r["agent"]), r["pid"].as_u64().unwrap_or(0)))
            .collect();
        println!(
            "  {}: {} ms on {} replica(s): {}",
            s(&p["service"]),
            p["period_ms"].as_u64().unwrap_or(0),
            replicas.len(),
            replicas.join(", ")
        );
    }
    for k in list(&a["plan"]["skipped"]) {
        println!("  {}: skipped: {}", s(&k["service"]), s(&k["why"]));
    }
    for c in list(&a["captures"]) {
        println!("  capture {} ({}):", c["id"].as_u64().unwrap_or(0), s(&c["reason"]));
        for o in list(&c["results"]) {
            match o["error"].as_str() {
                Some(e) => println!("    {}: {e}", s(&o["agent"])),
                None => println!(
                    "    {}: {} calls, {} spans ({} in requests)",
                    s(&o["agent"]),
                    o["calls"].as_u64().unwrap_or(0),
                    o["spans"].as_u64().unwrap_or(0),
                    o["in_requests"].as_u64().unwrap_or(0)
                ),
            }
        }
        if c["complete"] != serde_json::Value::Bool(true) {
            println!("    (outcomes still pending)");
        }
    }
    for m in list(&a["merged"]) {
        let total: u64 = m["profile"].as_object().map_or(0, |o| o.values().filter_map(|v| v.as_u64()).sum());
        println!(
            "  {} merged over {} replica(s): {total} calls",
            s(&m["service"]),
            m["replicas"].as_u64().unwrap_or(0)
        );
    }
}
