//! `weft import`: brings recorded traces into weft.
//!
//! `weft import probe PATH` reads weft-probe capture files — what a program instrumented with
//! weft-probe (Rust or C) writes in in-process mode, without an agent — and assembles their
//! records into spans ([`weft_weave::probe`]); the outputs and the summary are those of the
//! CTF import below. PATH is a capture file or a directory: its files that are captures (by
//! their content, or the `.wcap` extension) are imported.
//!
//! `weft import ctf TRACE_DIR` reads CTF 1.8 traces — an LTTng session's output directory
//! (`ust/uid/<uid>/64-bit/`, `ust/pid/…/`, `kernel/`) or any directory with CTF traces
//! (`metadata` + stream files) below it — and writes
//!
//! * spans: BlkKin's `zipkin:*` events woven into Zipkin-style spans
//!   ([`weft_weave::blkin`]), to a file (`--to`, any format `weft convert` writes), a data
//!   directory (`--data-dir`), or a running weft / OTLP receiver (`--server`, OTLP/HTTP);
//! * raw events: every event as a tracepoint event, into the data directory's `events` table
//!   (`--data-dir`) or a JSON Lines file (`--events-to`).
//!
//! `weft import ctf --live net://HOST[:PORT]/host/HOSTNAME/SESSION` follows an LTTng live
//! session through `lttng-relayd` instead, to the same outputs (see [`live`]).
//!
//! Stream files are decoded in parallel (`--jobs`, one thread per stream at most); `--jobs 1`
//! decodes them as one time-ordered merge. Corrupt packets are skipped and counted (or stop the
//! import with `--strict`); the summary reports them with the tracer's own losses (LTTng's
//! discarded events and missing packets).

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use weft_model::codec::stream::Format;
use weft_model::{Event, EventKind, SourceId, Span};
use weft_sources::ctf::{CtfTrace, DecodeOptions, Merged, StreamDecoder, StreamStats, open_traces};
use weft_store::{Store, StoreConfig};
use weft_weave::Run;
use weft_weave::blkin::{BlkkinStats, BlkkinWeaver};
use weft_weave::export::{Client, ClientOptions, Jitter, Outcome, Retries, RetryPolicy, Rng};
use weft_weave::pipeline::{
    EventSource, Order, RunOptions, SourceProgress, SourceReport, StageError, WeaveStage,
};
use weft_weave::probe::{AsmStats, CaptureFiles, CaptureOptions, CaptureReport, ProbeStage};
use weft_weave::sink::{Backpressure, CustomSink, SinkError, SinkReport, SinkSpec, SpanSink};

use super::pipeline::{StoreSink, append_retrying, sink_lines, source_errors, watch};

mod live;

/// Arguments of `weft import`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub kind: Kind,
}

/// What to import.
#[derive(clap::Subcommand, Debug)]
pub enum Kind {
    /// CTF 1.8 traces (LTTng-UST, LTTng kernel): BlkKin spans and every event.
    Ctf(CtfArgs),
    /// weft-probe capture files (in-process mode, no agent): spans and every record.
    Probe(ProbeArgs),
}

/// Arguments of `weft import probe`.
#[derive(clap::Args, Debug)]
pub struct ProbeArgs {
    /// A capture file, or a directory of them (files that start with the capture magic or end
    /// in `.wcap`).
    pub path: PathBuf,
    #[command(flatten)]
    pub out: Outputs,
}

/// Arguments of `weft import ctf`.
#[derive(clap::Args, Debug)]
pub struct CtfArgs {
    /// A trace directory: an LTTng session's output, or any directory with CTF traces below it.
    #[arg(required_unless_present = "live", conflicts_with = "live")]
    pub trace_dir: Option<PathBuf>,
    /// Follow a live session while it records, from lttng-relayd:
    /// net://HOST[:PORT]/host/HOSTNAME/SESSION (port 5344 by default). Runs until the session
    /// is destroyed (or Ctrl-C).
    #[arg(long, value_name = "URL")]
    pub live: Option<String>,
    /// Live: a span is output once no event touched it for this long (trace time).
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    pub span_idle_ms: u64,
    /// Decoding threads (0: one per CPU, at most one per stream file; 1: a time-ordered merge).
    #[arg(long, default_value_t = 0)]
    pub jobs: usize,
    #[command(flatten)]
    pub out: Outputs,
}

/// Where an import goes, and how strict it is (shared by every `weft import`).
#[derive(clap::Args, Debug)]
pub struct Outputs {
    /// Write the spans to this file (format from the name — `x.zipkin.json`, `x.jaeger.json`,
    /// `x.pb`, ...; plain `.json` is OTLP/JSON — or --format).
    #[arg(long)]
    pub to: Option<PathBuf>,
    /// Format of --to: otlp-json, otlp-proto, zipkin, zipkin-proto, jaeger, chrome.
    #[arg(long)]
    pub format: Option<String>,
    /// Write every event to this file, one JSON object per line.
    #[arg(long)]
    pub events_to: Option<PathBuf>,
    /// Append spans and events to this data directory (weft's store; not while a server
    /// writes to it).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Send the spans to a running weft (or any OTLP/HTTP receiver) at this base URL.
    #[arg(long)]
    pub server: Option<String>,
    /// Stop at the first corrupt packet or record (default: skip it, count it, go on).
    #[arg(long)]
    pub strict: bool,
    /// Only spans: do not keep the raw events.
    #[arg(long)]
    pub no_events: bool,
    /// Source id stamped on the events.
    #[arg(long, default_value_t = 0)]
    pub source_id: u32,
}

/// Runs `weft import`.
pub fn run(args: Args) -> anyhow::Result<()> {
    match args.kind {
        Kind::Ctf(a) => ctf(a),
        Kind::Probe(a) => probe(a),
    }
}

/// Events per batch from a CTF source.
const BATCH: usize = 4096;
/// Spans per batch to the sinks (and per append to a data directory).
const SPAN_BATCH: usize = 1000;

/// What [`Outputs::open`] opened.
struct Opened {
    sinks: Vec<SinkSpec>,
    store: Option<Arc<Store>>,
    tap: Arc<Mutex<EventTap>>,
}

impl Outputs {
    fn check(&self) -> anyhow::Result<()> {
        if self.to.is_none() && self.events_to.is_none() && self.data_dir.is_none() && self.server.is_none() {
            bail!(
                "say where the trace goes: --to FILE (spans), --events-to FILE, --data-dir DIR or --server URL"
            );
        }
        Ok(())
    }

    /// The span sinks, the store and the event tap (counts every event, writes them to the
    /// store and the events file).
    fn open(&self) -> anyhow::Result<Opened> {
        let mut sinks = Vec::new();
        if let Some(path) = &self.to {
            let format = match &self.format {
                Some(f) => Format::parse(f).with_context(|| format!("unknown format {f:?}"))?,
                None => Format::from_path(path)
                    .or_else(|| path.extension().is_some_and(|e| e == "json").then_some(Format::OtlpJson))
                    .with_context(|| {
                        format!("cannot tell the format of {} from its name: give --format", path.display())
                    })?,
            };
            anyhow::ensure!(format.can_write(), "weft cannot write {}", format.name());
            sinks.push(SinkSpec::File {
                path: path.clone(),
                format,
                backpressure: Backpressure::Block,
                queue_batches: 4,
            });
        }
        if let Some(url) = &self.server {
            sinks.push(SinkSpec::Custom(CustomSink::new(format!("server {url}"), ServerSink::new(url))));
        }
        let store = match &self.data_dir {
            Some(dir) => Some(Arc::new(
                Store::open(StoreConfig::new(dir)).with_context(|| format!("opening {}", dir.display()))?,
            )),
            None => None,
        };
        if let (Some(store), Some(dir)) = (&store, &self.data_dir) {
            let sink = StoreSink::new(store.clone(), SPAN_BATCH);
            sinks.push(SinkSpec::Custom(CustomSink::new(format!("data directory {}", dir.display()), sink)));
        }
        let file = match &self.events_to {
            Some(p) => Some(std::io::BufWriter::new(
                std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
            )),
            None => None,
        };
        let keep = !self.no_events && (store.is_some() || file.is_some());
        let tap = EventTap {
            store: store.clone(),
            file,
            keep,
            events: 0,
            events_out: 0,
            by_name: HashMap::new(),
            first_ns: u64::MAX,
            last_ns: 0,
            line: Vec::new(),
        };
        Ok(Opened { sinks, store, tap: Arc::new(Mutex::new(tap)) })
    }
}

fn ctf(args: CtfArgs) -> anyhow::Result<()> {
    args.out.check()?;
    let trace_dir = match (&args.trace_dir, &args.live) {
        (_, Some(url)) => return live::run(&args, url),
        (Some(d), None) => d,
        (None, None) => bail!("give a trace directory or --live URL"),
    };
    let started = Instant::now();
    let traces = open_traces(trace_dir).with_context(|| format!("reading {}", trace_dir.display()))?;
    let opts = DecodeOptions { strict: args.out.strict, ..DecodeOptions::default() };
    let mut decoders = Vec::new();
    for t in &traces {
        decoders.extend(t.decoders(&opts)?);
    }
    let streams = decoders.len();
    let out = args.out.open()?;
    let source = SourceId(args.out.source_id);
    let jobs = match args.jobs {
        0 => std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(streams.max(1)),
        n => n.min(streams.max(1)),
    };
    let stats = Arc::new(Mutex::new(StreamStats::default()));
    let sources = ctf_sources(decoders, jobs, source, trace_dir, &stats);
    let stage = CtfStage { weaver: BlkkinWeaver::default(), tap: out.tap.clone() };
    let run = Run::with(sources, stage, out.sinks, run_options(2))?;
    watch(&run);
    let report = run.wait()?;
    source_errors(&report.sources)?;
    let counts = finish_events(&out.tap)?;
    if let Some(s) = &out.store {
        s.close().context("flushing the data directory")?;
    }
    let stats = stats.lock().map(|s| s.clone()).unwrap_or_default();
    summary(&args, &traces, streams, jobs, &stats, &report.weave, report.spans, &counts, started.elapsed());
    print_sinks(&report.sinks);
    if stats.errors > 0 && args.out.strict {
        bail!("decoding errors");
    }
    Ok(())
}

/// Arrival order (BlkKin spans are grouped by ids, capture records by file), `queue` batches
/// per source, spans to the sinks in batches of [`SPAN_BATCH`].
fn run_options(queue: usize) -> RunOptions {
    RunOptions {
        batch_events: SPAN_BATCH,
        queue_batches: queue,
        order: Order::Arrival,
        ..RunOptions::default()
    }
}

/// `jobs` ≤ 1: one source, the time-ordered merge of every stream file; else `jobs` sources
/// (threads), each decoding its share of the stream files (largest first, each to the least
/// loaded).
fn ctf_sources(
    decoders: Vec<StreamDecoder>,
    jobs: usize,
    source: SourceId,
    dir: &Path,
    stats: &Arc<Mutex<StreamStats>>,
) -> Vec<Box<dyn EventSource>> {
    if jobs <= 1 {
        let total = decoders.iter().map(StreamDecoder::len).sum();
        return vec![Box::new(CtfMerged {
            dir: dir.to_path_buf(),
            total,
            merged: Merged::new(decoders),
            source,
            stats: stats.clone(),
        })];
    }
    let mut shares: Vec<Vec<StreamDecoder>> = (0..jobs).map(|_| Vec::new()).collect();
    let mut decoders = decoders;
    decoders.sort_by_key(|d| std::cmp::Reverse(d.len()));
    let mut load = vec![0u64; jobs];
    for d in decoders {
        let i = (0..jobs).min_by_key(|i| load[*i]).unwrap_or(0);
        load[i] += d.len();
        shares[i].push(d);
    }
    shares
        .into_iter()
        .enumerate()
        .map(|(i, share)| -> Box<dyn EventSource> {
            Box::new(CtfShare {
                name: format!("ctf-{}", i + 1),
                dir: dir.to_path_buf(),
                total: share.iter().map(StreamDecoder::len).sum(),
                decoders: share.into(),
                done: 0,
                source,
                stats: stats.clone(),
            })
        })
        .collect()
}

/// Every stream file of the traces, decoded as one time-ordered merge (`--jobs 1`).
struct CtfMerged {
    dir: PathBuf,
    total: u64,
    merged: Merged,
    source: SourceId,
    stats: Arc<Mutex<StreamStats>>,
}

impl EventSource for CtfMerged {
    fn name(&self) -> &str {
        "ctf"
    }
    fn path(&self) -> &Path {
        &self.dir
    }
    fn total_bytes(&self) -> u64 {
        self.total
    }
    fn next_batch(&mut self, batch: &mut Vec<Event>, p: &SourceProgress) -> Result<bool, String> {
        while batch.len() < BATCH {
            match self.merged.next_event().map_err(|e| e.to_string())? {
                Some(ev) => batch.push(ev.to_event(self.source)),
                None => break,
            }
        }
        p.counters.bytes.store(self.merged.bytes_done(), Ordering::Relaxed);
        p.counters.events.fetch_add(batch.len() as u64, Ordering::Relaxed);
        Ok(batch.len() == BATCH)
    }
    fn finish(self: Box<Self>, _: &mut SourceReport) {
        if let Ok(mut s) = self.stats.lock() {
            s.merge(&self.merged.stats());
        }
    }
}

/// Some stream files, decoded one after the other (one of `--jobs` threads).
struct CtfShare {
    name: String,
    dir: PathBuf,
    total: u64,
    decoders: VecDeque<StreamDecoder>,
    /// Bytes of the finished stream files.
    done: u64,
    source: SourceId,
    stats: Arc<Mutex<StreamStats>>,
}

impl EventSource for CtfShare {
    fn name(&self) -> &str {
        &self.name
    }
    fn path(&self) -> &Path {
        &self.dir
    }
    fn total_bytes(&self) -> u64 {
        self.total
    }
    fn next_batch(&mut self, batch: &mut Vec<Event>, p: &SourceProgress) -> Result<bool, String> {
        let Some(d) = self.decoders.front_mut() else { return Ok(false) };
        let mut more = true;
        while batch.len() < BATCH {
            more = d.next_event().map_err(|e| e.to_string())?;
            if !more {
                break;
            }
            batch.push(d.event().to_event(self.source));
        }
        p.counters.bytes.store(self.done + d.bytes_done(), Ordering::Relaxed);
        p.counters.events.fetch_add(batch.len() as u64, Ordering::Relaxed);
        if !more {
            self.done += d.len();
            if let Ok(mut s) = self.stats.lock() {
                s.merge(d.stats());
            }
            self.decoders.pop_front();
        }
        Ok(!self.decoders.is_empty())
    }
}

/// BlkKin's weaver behind the event tap.
struct CtfStage {
    weaver: BlkkinWeaver,
    tap: Arc<Mutex<EventTap>>,
}

impl WeaveStage for CtfStage {
    type Item = Event;
    type Report = BlkkinStats;
    fn push(&mut self, events: &[Event], out: &mut Vec<Span>) -> Result<(), StageError> {
        tap_events(&self.tap, events)?;
        WeaveStage::push(&mut self.weaver, events, out)
    }
    fn finish(&mut self, out: &mut Vec<Span>) -> Result<(), StageError> {
        WeaveStage::finish(&mut self.weaver, out)
    }
    fn into_report(self) -> BlkkinStats {
        self.weaver.into_report()
    }
}

/// Every event an import reads: counted, and kept (data directory, events file) unless
/// `--no-events`.
struct EventTap {
    store: Option<Arc<Store>>,
    file: Option<std::io::BufWriter<std::fs::File>>,
    keep: bool,
    events: u64,
    events_out: u64,
    by_name: HashMap<Arc<str>, u64>,
    first_ns: u64,
    last_ns: u64,
    line: Vec<u8>,
}

impl EventTap {
    fn events(&mut self, events: &[Event]) -> anyhow::Result<()> {
        for e in events {
            self.events += 1;
            self.first_ns = self.first_ns.min(e.time_ns);
            self.last_ns = self.last_ns.max(e.time_ns);
            if let EventKind::Tracepoint(t) = &e.kind {
                match self.by_name.get_mut(&t.name) {
                    Some(n) => *n += 1,
                    None => {
                        self.by_name.insert(t.name.clone(), 1);
                    }
                }
            }
        }
        if self.keep {
            if let Some(store) = &self.store {
                append_retrying(|| store.append_events(events)).context("appending events")?;
            }
            if let Some(f) = self.file.as_mut() {
                for e in events {
                    self.line.clear();
                    serde_json::to_writer(&mut self.line, &e.to_json())?;
                    self.line.push(b'\n');
                    f.write_all(&self.line).context("writing events")?;
                }
            }
            self.events_out += events.len() as u64;
        }
        Ok(())
    }
}

/// `events` to the tap, as a weave stage's error.
fn tap_events(tap: &Mutex<EventTap>, events: &[Event]) -> Result<(), StageError> {
    let mut tap = tap.lock().map_err(|_| "the event tap is poisoned")?;
    tap.events(events).map_err(|e| format!("{e:#}").into())
}

/// Flushes the events file; the counts for the summary.
fn finish_events(tap: &Mutex<EventTap>) -> anyhow::Result<Counts> {
    let mut tap = tap.lock().map_err(|_| anyhow::anyhow!("the event tap is poisoned"))?;
    if let Some(f) = tap.file.as_mut() {
        f.flush().context("writing events")?;
    }
    let mut by_name: Vec<(String, u64)> = tap.by_name.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    by_name.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    Ok(Counts {
        events: tap.events,
        events_out: tap.events_out,
        by_name,
        first_ns: tap.first_ns,
        last_ns: tap.last_ns,
    })
}

struct Counts {
    events: u64,
    events_out: u64,
    by_name: Vec<(String, u64)>,
    first_ns: u64,
    last_ns: u64,
}

/// The sinks' lines of the summary (what each wrote, format losses, errors).
fn print_sinks(sinks: &[SinkReport]) {
    for line in sink_lines(sinks) {
        println!("  {line}");
    }
}

fn probe(args: ProbeArgs) -> anyhow::Result<()> {
    args.out.check()?;
    let started = Instant::now();
    let files = capture_files(&args.path)?;
    let out = args.out.open()?;
    let opts = CaptureOptions {
        strict: args.out.strict,
        events: true,
        source: SourceId(args.out.source_id),
        ..CaptureOptions::default()
    };
    let tap = out.tap.clone();
    let stage = ProbeStage::new(opts, Some(Box::new(move |events: &[Event]| tap_events(&tap, events))));
    let source = CaptureFiles::new("captures", &args.path, files);
    // One capture per batch, one batch queued: a few captures in memory at most.
    let run = Run::with_items(vec![Box::new(source)], stage, out.sinks, run_options(1))?;
    watch(&run);
    let report = run.wait()?;
    source_errors(&report.sources)?;
    let counts = finish_events(&out.tap)?;
    if let Some(s) = &out.store {
        s.close().context("flushing the data directory")?;
    }
    probe_summary(&args.out, &report.weave, report.spans, &counts, started.elapsed());
    print_sinks(&report.sinks);
    Ok(())
}

/// `path` if it is a capture, or the captures in directory `path` (by content or `.wcap`).
fn capture_files(path: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let is_capture = |p: &Path| -> bool {
        let mut head = [0u8; 8];
        let magic = std::fs::File::open(p).and_then(|mut f| f.read_exact(&mut head)).is_ok()
            && head == weft_probe::capture::CAPTURE_MAGIC;
        magic || p.extension().is_some_and(|e| e == "wcap")
    };
    let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if !meta.is_dir() {
        if !is_capture(path) {
            bail!("{}: not a weft-probe capture (no WEFTCAP1 magic)", path.display());
        }
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    for e in std::fs::read_dir(path).with_context(|| format!("reading {}", path.display()))? {
        let p = e.with_context(|| format!("reading {}", path.display()))?.path();
        if p.is_file() && is_capture(&p) {
            files.push(p);
        }
    }
    if files.is_empty() {
        bail!("{}: no weft-probe capture files in it", path.display());
    }
    files.sort();
    Ok(files)
}

fn probe_summary(out: &Outputs, reports: &[CaptureReport], spans: u64, c: &Counts, took: Duration) {
    let secs = took.as_secs_f64().max(1e-9);
    let records: u64 = reports.iter().map(|r| r.stats.records).sum();
    println!(
        "imported {records} records from {} capture(s) in {secs:.2} s ({:.2} M records/s)",
        reports.len(),
        records as f64 / secs / 1e6,
    );
    for r in reports {
        println!(
            "  {}: service {}, pid {}, {} tracepoints, {} records",
            r.path.display(),
            r.service,
            r.pid,
            r.tracepoints,
            r.stats.records
        );
    }
    summary_events(c);
    let mut a = AsmStats::default();
    for r in reports {
        a.add(&r.stats.assembler);
    }
    let mut notes = Vec::new();
    if a.event_spans > 0 {
        notes.push(format!("{} from standalone events", a.event_spans));
    }
    if a.incomplete > 0 {
        notes.push(format!("{} incomplete (a start or end missing)", a.incomplete));
    }
    if a.orphans_dropped > 0 {
        notes.push(format!("{} known only from annotations, dropped", a.orphans_dropped));
    }
    if a.unknown_tracepoint > 0 {
        notes.push(format!("{} records of unregistered tracepoints", a.unknown_tracepoint));
    }
    if a.truncated > 0 {
        notes.push(format!("{} events or attributes over the per-span limits", a.truncated));
    }
    println!(
        "  weft-probe: {records} records → {spans} spans{}",
        if notes.is_empty() { String::new() } else { format!(" ({})", notes.join(", ")) }
    );
    let dropped: u64 = reports.iter().map(|r| r.stats.producer_dropped).sum();
    if dropped > 0 {
        println!(
            "  producer losses: {dropped} records dropped by the process (full rings: raise the ring size)"
        );
    }
    let bad: u64 = reports.iter().map(|r| r.stats.bad_records).sum();
    if bad > 0 {
        println!("  decoding errors: {bad} records skipped");
        for r in reports {
            for s in &r.stats.error_samples {
                println!("    {}: {s}", r.path.display());
            }
        }
    }
    summary_wrote(out, spans, c);
}

/// A server's OTLP/HTTP receiver, through the exporter every weft sender uses.
pub(super) struct ServerSink {
    client: Client,
    retries: Retries,
}

impl ServerSink {
    /// A sink posting to `url` (an OTLP/HTTP endpoint) with `weft import`'s retries.
    pub(super) fn new(url: &str) -> ServerSink {
        let client =
            Client::new(&ClientOptions { timeout: Duration::from_secs(60), ..ClientOptions::new(url) });
        ServerSink { client, retries: IMPORT_RETRIES.retries(Rng::from_time().next_u64()) }
    }
}

/// `weft import`'s retries: up to 20 per batch, 50 ms doubling to 2 s (a server catching up
/// with its flush answers 429/503 for a moment), then the import fails.
const IMPORT_RETRIES: RetryPolicy = RetryPolicy {
    initial: Duration::from_millis(50),
    max_backoff: Duration::from_secs(2),
    max_retry_after: Duration::from_secs(30),
    max_retries: Some(20),
    jitter: Jitter::Equal,
};

impl SpanSink for ServerSink {
    fn write(&mut self, spans: &[Span]) -> Result<(), SinkError> {
        for chunk in spans.chunks(SPAN_BATCH) {
            let body = self.client.encode(chunk);
            let d = self.client.deliver(&body, self.client.gzip(), &mut self.retries, std::thread::sleep);
            self.retries.reset();
            let url = self.client.url();
            let msg = match d.outcome {
                Outcome::Acked { .. } => continue,
                Outcome::Refused { status, message } => {
                    format!("{url} refused the spans: HTTP {status}: {message}")
                }
                Outcome::Retry { reason, .. } => {
                    format!("{url} did not take the spans after {} attempts: {reason}", d.requests)
                }
            };
            return Err(SinkError::Write { sink: "server".into(), msg });
        }
        Ok(())
    }
    fn finish(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
}

#[allow(clippy::too_many_arguments)]
fn summary(
    args: &CtfArgs,
    traces: &[CtfTrace],
    streams: usize,
    jobs: usize,
    st: &StreamStats,
    b: &BlkkinStats,
    spans: u64,
    c: &Counts,
    took: Duration,
) {
    let secs = took.as_secs_f64().max(1e-9);
    println!(
        "imported {} events from {} trace(s), {} stream file(s), {} packets in {:.2} s ({:.2} M events/s, {} decoding thread(s))",
        c.events,
        traces.len(),
        streams,
        st.packets,
        secs,
        c.events as f64 / secs / 1e6,
        jobs
    );
    for t in traces {
        let md = t.metadata();
        let env = |k: &str| md.env(k).map(|v| v.to_string()).unwrap_or_default();
        println!(
            "  {}: {} {}, host {}, {} event classes",
            t.dir.display(),
            env("domain"),
            env("tracer_name"),
            env("hostname"),
            t.compiled.events.len()
        );
    }
    summary_events(c);
    println!(
        "  BlkKin: {} events → {} spans{}{}",
        b.events,
        spans,
        if b.malformed > 0 { format!(", {} malformed events not used", b.malformed) } else { String::new() },
        if b.evicted > 0 {
            format!(", {} spans closed early (too many open)", b.evicted)
        } else {
            String::new()
        }
    );
    for s in &b.samples {
        println!("    {s}");
    }
    if st.discarded_events > 0 || st.lost_packets > 0 {
        println!(
            "  tracer losses: {} events discarded by the tracer, {} packets missing (use bigger or more sub-buffers)",
            st.discarded_events, st.lost_packets
        );
    }
    if st.errors > 0 {
        println!("  decoding errors: {} ({} bytes skipped)", st.errors, st.skipped_bytes);
        for s in &st.error_samples {
            println!("    {s}");
        }
    }
    summary_wrote(&args.out, spans, c);
}

/// The summary's lines about the events: their time span and the most frequent names.
fn summary_events(c: &Counts) {
    if c.first_ns <= c.last_ns {
        println!(
            "  time span: {:.6} s (first event at {} ns since the epoch)",
            (c.last_ns - c.first_ns) as f64 / 1e9,
            c.first_ns
        );
    }
    for (name, n) in c.by_name.iter().take(10) {
        println!("  {n:>10}  {name}");
    }
    if c.by_name.len() > 10 {
        println!("  ... and {} more event names", c.by_name.len() - 10);
    }
}

/// The summary's last line: what went where.
fn summary_wrote(out: &Outputs, spans: u64, c: &Counts) {
    let mut wrote = Vec::new();
    if let Some(p) = &out.to {
        wrote.push(format!("{spans} spans to {}", p.display()));
    }
    if let Some(u) = &out.server {
        wrote.push(format!("{spans} spans to {u}"));
    }
    if let Some(d) = &out.data_dir {
        wrote.push(format!("{spans} spans and {} events to {}", c.events_out, d.display()));
    }
    if let Some(p) = &out.events_to {
        wrote.push(format!("{} events to {}", c.events_out, p.display()));
    }
    if out.server.is_some() && out.data_dir.is_none() && out.events_to.is_none() && !out.no_events {
        wrote.push("raw events not kept (a server takes spans only: add --data-dir or --events-to)".into());
    }
    println!("  wrote {}", wrote.join("; "));
}
