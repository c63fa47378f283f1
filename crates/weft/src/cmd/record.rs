//! `weft record`: a bounded kernel capture through perf_event_open — scheduler switches,
//! system calls, any tracefs tracepoint, uprobes on unmodified binaries — for a process, a
//! thread set, a cgroup, a command it starts, or the whole machine; written out as kernel
//! spans (any trace format), raw events (JSON Lines), EXIST scheduler records, and/or into a
//! data directory; optionally woven into the application's own spans (`--weave`).

use std::collections::{BTreeMap, HashSet};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use weft_analyze::kernel::{AttributionOptions, AttributionStats, attribute};
use weft_model::codec::stream::{self, Format};
use weft_model::{Event, Span};
use weft_sources::perf::{
    Capture, CaptureConfig, CaptureStats, StoppedChild, Target, UprobeTarget, exist, syscall_name,
};
use weft_weave::Run;
use weft_weave::kernel::{KernelSpanOptions, KernelSpanStats, KernelStage};
use weft_weave::pipeline::{
    EventSource, Order, RunOptions, SourceProgress, SourceReport, StageError, WeaveStage,
};
use weft_weave::sink::{Backpressure, CustomSink, SinkSpec};

use super::pipeline::{StoreSink, append_retrying, sink_lines, source_errors, span_file_format, watch};

use weft_cli::units;

/// Arguments of `weft record`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Tracepoints to record, `SYSTEM:EVENT` (repeatable). Default when neither -e nor
    /// --uprobe is given: sched:sched_switch, raw_syscalls:sys_enter, raw_syscalls:sys_exit.
    #[arg(short = 'e', long = "event", value_name = "SYSTEM:EVENT")]
    pub events: Vec<String>,
    /// Uprobe (entry and return) on a function of an unmodified binary, `BINARY:FUNCTION`.
    #[arg(long, value_name = "BINARY:FUNCTION")]
    pub uprobe: Vec<String>,
    /// Trace these processes (all their threads, and threads/children they create).
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["tid", "cgroup", "exec"])]
    pub pid: Vec<u32>,
    /// Trace exactly these threads.
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["cgroup", "exec"])]
    pub tid: Vec<u32>,
    /// Trace the tasks of this cgroup (v2 directory, e.g. /sys/fs/cgroup/system.slice/x.service).
    #[arg(long, conflicts_with = "exec")]
    pub cgroup: Option<PathBuf>,
    /// Stop after this long (e.g. 10s, 500ms). Without it: until the target exits or Ctrl-C.
    #[arg(long, value_parser = units::parse_duration)]
    pub duration: Option<Duration>,
    /// Kernel spans (and woven application spans) to this file; format from --format or the name.
    #[arg(long)]
    pub to: Option<PathBuf>,
    /// Format of --to (otlp-json, otlp-proto, zipkin, jaeger, chrome, ...).
    #[arg(long)]
    pub format: Option<String>,
    /// Raw events to this file, one JSON object per line.
    #[arg(long, value_name = "FILE")]
    pub events_out: Option<PathBuf>,
    /// Scheduler switches of the traced threads as EXIST compact records (24 bytes each).
    #[arg(long, value_name = "FILE")]
    pub sched_out: Option<PathBuf>,
    /// Append events and spans to this weft data directory (the store `weft serve` reads).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Application spans (any readable format) carrying `thread.id`: attribute kernel activity
    /// to them and add them, woven, to the output. Read after the capture ends.
    #[arg(long, value_name = "FILE")]
    pub weave: Option<PathBuf>,
    /// Don't add kernel child spans (syscalls, off-CPU intervals) under woven spans; only
    /// summary attributes.
    #[arg(long)]
    pub no_child_spans: bool,
    /// Ring buffer per CPU (a power-of-two number of 4 KiB pages), e.g. 1MiB, 8MiB.
    #[arg(long, default_value = "2MiB", value_parser = units::parse_size)]
    pub ring_size: u64,
    /// Keep at most this many events in memory; more are dropped and counted.
    #[arg(long, default_value_t = 5_000_000)]
    pub max_events: usize,
    /// Start this command (held before exec until the events are attached) and trace it;
    /// stops when it exits. Must come last: everything after it is the command.
    #[arg(long, num_args = 1.., allow_hyphen_values = true, value_name = "CMD")]
    pub exec: Vec<String>,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Runs `weft record`.
pub fn run(args: Args) -> anyhow::Result<()> {
    if args.to.is_none() && args.events_out.is_none() && args.sched_out.is_none() && args.data_dir.is_none() {
        bail!("nowhere to write: give --to FILE, --events-out FILE, --sched-out FILE and/or --data-dir DIR");
    }
    let out_format = span_file_format(args.to.as_deref(), args.format.as_deref())?;
    let pages = (args.ring_size / 4096).max(1) as usize;
    if !pages.is_power_of_two() {
        bail!("--ring-size {} is not a power-of-two number of 4 KiB pages", units::fmt_bytes(args.ring_size));
    }
    let mut tracepoints = args.events.clone();
    if tracepoints.is_empty() && args.uprobe.is_empty() {
        tracepoints = CaptureConfig::default().tracepoints;
    }
    let uprobes = args.uprobe.iter().map(|u| UprobeTarget::resolve(u)).collect::<Result<Vec<_>, _>>()?;

    // SAFETY: installing an async-signal-safe handler that only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    let mut child = if args.exec.is_empty() { None } else { Some(StoppedChild::spawn(&args.exec)?) };
    let target = if let Some(c) = &child {
        Target::Exec(c.pid)
    } else if !args.pid.is_empty() {
        for p in &args.pid {
            if !alive(*p) {
                bail!("--pid {p}: no such process");
            }
        }
        Target::Pids(args.pid.clone())
    } else if !args.tid.is_empty() {
        Target::Tids(args.tid.clone())
    } else if let Some(c) = &args.cgroup {
        Target::Cgroup(c.clone())
    } else {
        Target::All
    };
    if target == Target::All && args.duration.is_none() {
        tracing::warn!("recording every task until Ctrl-C (give --duration, --pid or --exec to bound it)");
    }
    let cfg = CaptureConfig {
        tracepoints,
        uprobes,
        target: target.clone(),
        ring_pages: pages,
        ..CaptureConfig::default()
    };
    let cap = Capture::open(&cfg).context("opening the kernel capture")?;
    cap.enable()?;
    let started = Instant::now();
    let start_ns = weft_model::time::now_unix_nanos();
    if let Some(c) = child.as_mut() {
        c.release()?;
    }
    eprintln!(
        "weft record: recording {} ({} events on {} CPUs){}",
        describe(&target, &args.exec),
        cap.stats().opened,
        cap.stats().cpus.len(),
        args.duration.map(|d| format!(" for {d:?}")).unwrap_or_else(|| ", Ctrl-C to stop".into())
    );

    // The capture is the pipeline's source; the kernel weaver needs all of it (up to
    // --max-events), so its stage weaves when the capture ends.
    let end = Arc::new(Mutex::new(CaptureEnd::default()));
    let source = KernelCapture {
        cap,
        child,
        target: target.clone(),
        duration: args.duration,
        started,
        end: end.clone(),
        path: PathBuf::from("perf_event"),
    };
    let kopts = KernelSpanOptions {
        host: hostname(),
        syscall_name,
        traced: None,
        seed: start_ns ^ u64::from(std::process::id()).rotate_left(32),
        window: None,
    };
    let store = match &args.data_dir {
        Some(dir) => Some(Arc::new(
            weft_store::Store::open(weft_store::StoreConfig::new(dir))
                .with_context(|| format!("opening {}", dir.display()))?,
        )),
        None => None,
    };
    let mut sinks = Vec::new();
    if let (Some(p), Some(format)) = (&args.to, out_format) {
        sinks.push(SinkSpec::File {
            path: p.clone(),
            format,
            backpressure: Backpressure::Block,
            queue_batches: 4,
        });
    }
    if let (Some(store), Some(dir)) = (&store, &args.data_dir) {
        let sink = StoreSink::new(store.clone(), 10_000);
        sinks.push(SinkSpec::Custom(CustomSink::new(format!("data directory {}", dir.display()), sink)));
    }
    let stage = RecordStage {
        kernel: KernelStage::new(kopts, Some(start_ns), args.max_events),
        end: end.clone(),
        events_out: args.events_out.clone(),
        sched_out: args.sched_out.clone(),
        store: store.clone(),
        weave: args.weave.clone(),
        child_spans: !args.no_child_spans,
        summary: RecordSummary::default(),
    };
    let opts = RunOptions {
        batch_events: 10_000,
        queue_batches: 16,
        order: Order::Arrival,
        ..RunOptions::default()
    };
    let run = Run::with(vec![Box::new(source)], stage, sinks, opts)?;
    watch(&run);
    let report = run.wait()?;
    source_errors(&report.sources)?;
    if let Some(store) = &store {
        store.close()?;
    }
    let r = report.weave;
    let CaptureEnd { stats, exit_code, .. } = end.lock().map(|e| e.clone()).unwrap_or_default();
    for s in &report.sinks {
        if !s.losses.is_empty() {
            eprintln!("note: {} cannot carry everything: {}", s.name, s.losses);
        }
    }

    // Summary.
    let secs = started.elapsed().as_secs_f64();
    let mut table = comfy_table::Table::new();
    table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
    table.set_header(vec!["cpu", "records", "lost", "corrupt reads"]);
    for c in &stats.cpus {
        table.add_row(vec![
            c.cpu.to_string(),
            c.records.to_string(),
            c.lost.to_string(),
            c.corrupt.to_string(),
        ]);
    }
    eprintln!("{table}");
    let types: Vec<String> = r.by_type.iter().map(|(k, v)| format!("{k} {v}")).collect();
    eprintln!(
        "weft record: {:.1}s, {} events ({}), {} lost in the kernel, {} dropped over --max-events, {} scheduler switches of untraced threads filtered, {} switch-ins recovered, {} malformed records",
        secs,
        r.events,
        if types.is_empty() { "none".into() } else { types.join(", ") },
        stats.lost(),
        r.dropped,
        stats.sched_filtered,
        stats.decode.switch_ins_recovered,
        stats.decode.malformed,
    );
    for e in &stats.decode.first_errors {
        eprintln!("  malformed: {e}");
    }
    eprintln!(
        "weft record: kernel spans: {} threads, {} syscalls, {} on-CPU intervals, {} uprobe calls ({} incomplete, {} mismatched syscall exits, {} unmatched returns)",
        r.kernel.threads,
        r.kernel.syscalls,
        r.kernel.on_cpu,
        r.kernel.uprobe_calls,
        r.kernel.incomplete,
        r.kernel.mismatched,
        r.kernel.unmatched_returns
    );
    if let Some(w) = &r.weave {
        eprintln!(
            "weft record: woven: {} application spans attributed, {} without thread.id, {} on threads without kernel data, {} kernel child spans added ({} over the per-span limit)",
            w.attributed, w.without_thread, w.unknown_thread, w.children, w.children_dropped
        );
    }
    if args.sched_out.is_some() {
        eprintln!("weft record: {} EXIST scheduler records", r.sched_records);
    }
    if let Some(code) = exit_code
        && code != 0
    {
        eprintln!("weft record: the command exited with status {code}");
    }
    if stats.lost() > 0 {
        eprintln!("weft record: WARNING: the kernel lost {} records: raise --ring-size", stats.lost());
    }
    for line in sink_lines(&report.sinks) {
        eprintln!("weft record: {line}");
    }
    Ok(())
}

/// What the capture knows when it ends.
#[derive(Debug, Clone, Default)]
struct CaptureEnd {
    stats: CaptureStats,
    traced: Option<HashSet<u32>>,
    exit_code: Option<i32>,
}

/// The kernel capture as a pipeline source: polls the rings until the duration is over, the
/// target exits or Ctrl-C.
struct KernelCapture {
    cap: Capture,
    child: Option<StoppedChild>,
    target: Target,
    duration: Option<Duration>,
    started: Instant,
    end: Arc<Mutex<CaptureEnd>>,
    path: PathBuf,
}

impl KernelCapture {
    fn stop(&mut self) -> bool {
        if STOP.load(Ordering::SeqCst) || self.duration.is_some_and(|d| self.started.elapsed() >= d) {
            return true;
        }
        if let Some(c) = self.child.as_mut()
            && let Some(code) = c.try_wait()
        {
            if let Ok(mut e) = self.end.lock() {
                e.exit_code = Some(code);
            }
            return true;
        }
        matches!(&self.target, Target::Pids(p) if !p.iter().any(|p| alive(*p)))
    }
}

impl EventSource for KernelCapture {
    fn name(&self) -> &str {
        "record"
    }
    fn path(&self) -> &Path {
        &self.path
    }
    fn next_batch(&mut self, batch: &mut Vec<Event>, p: &SourceProgress) -> Result<bool, String> {
        let more = if self.stop() {
            self.cap.finish(batch);
            false
        } else {
            self.cap.poll(Duration::from_millis(100), batch).map_err(|e| e.to_string())?;
            true
        };
        p.counters.events.fetch_add(batch.len() as u64, Ordering::Relaxed);
        p.counters.rejected.store(self.cap.stats().lost(), Ordering::Relaxed);
        Ok(more)
    }
    fn finish(self: Box<Self>, _: &mut SourceReport) {
        if let Ok(mut e) = self.end.lock() {
            e.stats = self.cap.stats();
            e.traced = self.cap.traced_threads().cloned();
        }
    }
}

/// What [`RecordStage`] did, for the summary.
#[derive(Debug, Default)]
struct RecordSummary {
    events: usize,
    by_type: BTreeMap<&'static str, u64>,
    dropped: u64,
    sched_records: u64,
    kernel: KernelSpanStats,
    weave: Option<AttributionStats>,
}

/// The kernel weaver, then what `weft record` does with the whole capture: raw events (file,
/// data directory), EXIST scheduler records, the application's spans woven (`--weave`).
struct RecordStage {
    kernel: KernelStage,
    end: Arc<Mutex<CaptureEnd>>,
    events_out: Option<PathBuf>,
    sched_out: Option<PathBuf>,
    store: Option<Arc<weft_store::Store>>,
    weave: Option<PathBuf>,
    child_spans: bool,
    summary: RecordSummary,
}

impl RecordStage {
    fn outputs(&mut self, out: &mut Vec<Span>) -> anyhow::Result<()> {
        let traced = self.end.lock().map(|e| e.traced.clone()).unwrap_or_default();
        self.kernel.opts.traced = traced.clone();
        let mut kernel_spans = Vec::new();
        WeaveStage::finish(&mut self.kernel, &mut kernel_spans).map_err(|e| anyhow::anyhow!("{e}"))?;
        let events = self.kernel.events();
        if let Some(p) = &self.events_out {
            write_events(p, events)?;
        }
        if let Some(p) = &self.sched_out {
            let f = std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?;
            let mut w =
                exist::Writer::new(BufWriter::new(f)).with_context(|| format!("writing {}", p.display()))?;
            let is_traced = |t: u32| traced.as_ref().is_none_or(|s| s.contains(&t));
            for e in events {
                for r in exist::from_event(e, is_traced) {
                    w.write(&r).with_context(|| format!("writing {}", p.display()))?;
                }
            }
            self.summary.sched_records = w.records;
            w.finish().with_context(|| format!("writing {}", p.display()))?;
        }
        if let Some(store) = &self.store {
            for chunk in events.chunks(50_000) {
                append_retrying(|| store.append_events(chunk))?;
            }
        }
        if let Some(p) = &self.weave {
            let mut app = read_spans(p)?;
            let st = attribute(
                &mut app,
                &kernel_spans,
                &AttributionOptions { child_spans: self.child_spans, ..AttributionOptions::default() },
            );
            self.summary.weave = Some(st);
            out.extend(app);
        }
        out.extend(kernel_spans);
        for e in events {
            *self.summary.by_type.entry(type_label(e)).or_insert(0) += 1;
        }
        self.summary.events = events.len();
        self.summary.dropped = self.kernel.dropped();
        self.summary.kernel = self.kernel.stats().clone();
        Ok(())
    }
}

impl WeaveStage for RecordStage {
    type Item = Event;
    type Report = RecordSummary;
    fn push(&mut self, events: &[Event], out: &mut Vec<Span>) -> Result<(), StageError> {
        WeaveStage::push(&mut self.kernel, events, out)
    }
    fn finish(&mut self, out: &mut Vec<Span>) -> Result<(), StageError> {
        self.outputs(out).map_err(|e| format!("{e:#}").into())
    }
    fn into_report(self) -> RecordSummary {
        self.summary
    }
}

fn describe(t: &Target, exec: &[String]) -> String {
    match t {
        Target::All => "every task".into(),
        Target::Pids(p) => format!("pid {}", p.iter().map(u32::to_string).collect::<Vec<_>>().join(",")),
        Target::Tids(p) => format!("tid {}", p.iter().map(u32::to_string).collect::<Vec<_>>().join(",")),
        Target::Cgroup(c) => format!("cgroup {}", c.display()),
        Target::Exec(pid) => format!("`{}` (pid {pid})", exec.join(" ")),
    }
}

fn type_label(e: &Event) -> &'static str {
    match &e.kind {
        weft_model::EventKind::Tracepoint(_) => "tracepoint",
        _ => e.type_name(),
    }
}

pub(super) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into())
}

fn write_events(path: &Path, events: &[Event]) -> anyhow::Result<()> {
    let f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut w = BufWriter::new(f);
    for e in events {
        serde_json::to_writer(&mut w, &e.to_json())?;
        w.write_all(b"\n")?;
    }
    w.flush().with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

pub(super) fn read_spans(path: &Path) -> anyhow::Result<Vec<Span>> {
    let mut f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut head = vec![0u8; 64 << 10];
    let n = f.read(&mut head)?;
    head.truncate(n);
    let format = Format::from_path(path)
        .filter(|f| f.can_read())
        .or_else(|| Format::detect(&head))
        .with_context(|| format!("{}: cannot tell its trace format", path.display()))?;
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut r = stream::reader(format, BufReader::new(f), false)
        .with_context(|| format!("reading {}", path.display()))?;
    let mut spans = Vec::new();
    while r.next_batch(&mut spans, 10_000).with_context(|| format!("reading {}", path.display()))? {}
    Ok(spans)
}
