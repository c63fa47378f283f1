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

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::sync_channel;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use weft_model::codec::stream::{Format, SpanWriter, WriterOptions, writer};
use weft_model::{Event, EventKind, SourceId, Span};
use weft_probe::capture::Capture;
use weft_sources::ctf::{CtfTrace, DecodeOptions, Merged, StreamDecoder, StreamStats, open_traces};
use weft_store::{Store, StoreConfig, StoreError};
use weft_weave::blkin::{BlkkinStats, BlkkinWeaver};
use weft_weave::export::{Client, ClientOptions, Jitter, Outcome, Retries, RetryPolicy, Rng};
use weft_weave::probe::{AsmStats, CaptureOptions, CaptureStats, assemble_capture};

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

const BATCH: usize = 4096;
const SPAN_BATCH: usize = 1000;

/// Where spans go.
enum SpanSink {
    File(Box<dyn SpanWriter>),
    Server(ServerSink),
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

    /// The span sinks, the store and the events file.
    #[allow(clippy::type_complexity)]
    fn open(
        &self,
    ) -> anyhow::Result<(Vec<SpanSink>, Option<Store>, Option<std::io::BufWriter<std::fs::File>>)> {
        let mut span_files: Vec<SpanSink> = Vec::new();
        if let Some(path) = &self.to {
            let format = match &self.format {
                Some(f) => Format::parse(f).with_context(|| format!("unknown format {f:?}"))?,
                None => Format::from_path(path)
                    .or_else(|| path.extension().is_some_and(|e| e == "json").then_some(Format::OtlpJson))
                    .with_context(|| {
                        format!("cannot tell the format of {} from its name: give --format", path.display())
                    })?,
            };
            let f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
            span_files.push(SpanSink::File(writer(
                format,
                std::io::BufWriter::new(f),
                WriterOptions::default(),
            )?));
        }
        if let Some(url) = &self.server {
            let client =
                Client::new(&ClientOptions { timeout: Duration::from_secs(60), ..ClientOptions::new(url) });
            span_files.push(SpanSink::Server(ServerSink {
                client,
                retries: IMPORT_RETRIES.retries(Rng::from_time().next_u64()),
            }));
        }
        let store = match &self.data_dir {
            Some(dir) => Some(
                Store::open(StoreConfig::new(dir)).with_context(|| format!("opening {}", dir.display()))?,
            ),
            None => None,
        };
        let events_file = match &self.events_to {
            Some(p) => Some(std::io::BufWriter::new(
                std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
            )),
            None => None,
        };
        Ok((span_files, store, events_file))
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
    let total_bytes: u64 = decoders.iter().map(StreamDecoder::len).sum();
    let streams = decoders.len();
    let (span_files, store, mut events_file) = args.out.open()?;
    let keep_events = !args.out.no_events && (store.is_some() || events_file.is_some());

    let bar = weft_cli::progress::bytes_bar(Some(total_bytes), "ctf");
    let mut imp = Importer::new(span_files, store.as_ref(), events_file.as_mut(), keep_events);
    let source = SourceId(args.out.source_id);
    let jobs = match args.jobs {
        0 => std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(streams.max(1)),
        n => n.min(streams.max(1)),
    };
    let stats = if jobs <= 1 {
        let mut merged = Merged::new(decoders);
        let mut batch = Vec::with_capacity(BATCH);
        loop {
            batch.clear();
            while batch.len() < BATCH {
                match merged.next_event()? {
                    Some(ev) => batch.push(ev.to_event(source)),
                    None => break,
                }
            }
            if batch.is_empty() {
                break;
            }
            imp.batch(&batch)?;
            bar.set_position(merged.bytes_done());
        }
        merged.stats()
    } else {
        parallel(decoders, jobs, source, &mut imp, &bar)?
    };
    bar.finish_and_clear();
    let (spans, bstats) = imp.finish()?;
    if let Some(s) = &store {
        s.close().context("flushing the data directory")?;
    }
    summary(&args, &traces, streams, jobs, &stats, &bstats, spans, &imp_counts(&imp), started.elapsed());
    if stats.errors > 0 && args.out.strict {
        bail!("decoding errors");
    }
    Ok(())
}

/// One capture file imported.
struct CaptureReport {
    path: PathBuf,
    service: String,
    pid: u32,
    tracepoints: usize,
    stats: CaptureStats,
}

fn probe(args: ProbeArgs) -> anyhow::Result<()> {
    args.out.check()?;
    let started = Instant::now();
    let files = capture_files(&args.path)?;
    let (span_files, store, mut events_file) = args.out.open()?;
    let keep_events = !args.out.no_events && (store.is_some() || events_file.is_some());
    let mut imp = Importer::new(span_files, store.as_ref(), events_file.as_mut(), keep_events);
    let opts = CaptureOptions {
        strict: args.out.strict,
        events: true,
        source: SourceId(args.out.source_id),
        ..CaptureOptions::default()
    };
    let bar = weft_cli::progress::count_bar(files.len() as u64, "captures");
    let mut reports = Vec::new();
    for path in &files {
        let cap = Capture::read(path)?;
        let stats = assemble_capture(&cap, path, &opts, |events, spans| imp.batch_with_spans(events, spans))?;
        reports.push(CaptureReport {
            path: path.clone(),
            service: cap.service.clone(),
            pid: cap.pid,
            tracepoints: cap.tracepoints.len(),
            stats,
        });
        bar.inc(1);
    }
    bar.finish_and_clear();
    let (spans, _) = imp.finish()?;
    if let Some(s) = &store {
        s.close().context("flushing the data directory")?;
    }
    probe_summary(&args.out, &reports, spans, &imp_counts(&imp), started.elapsed());
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

/// Decodes the streams on `jobs` threads (each owning some stream files) into event batches.
fn parallel(
    decoders: Vec<StreamDecoder>,
    jobs: usize,
    source: SourceId,
    imp: &mut Importer<'_>,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<StreamStats> {
    let mut shares: Vec<Vec<StreamDecoder>> = (0..jobs).map(|_| Vec::new()).collect();
    // Largest files first, each to the least loaded thread.
    let mut decoders = decoders;
    decoders.sort_by_key(|d| std::cmp::Reverse(d.len()));
    let mut load = vec![0u64; jobs];
    for d in decoders {
        let i = (0..jobs).min_by_key(|i| load[*i]).unwrap_or(0);
        load[i] += d.len();
        shares[i].push(d);
    }
    let (tx, rx) = sync_channel::<(Vec<Event>, u64)>(jobs * 2);
    std::thread::scope(|s| -> anyhow::Result<StreamStats> {
        let mut handles = Vec::new();
        for share in shares {
            let tx = tx.clone();
            handles.push(s.spawn(move || -> Result<StreamStats, weft_sources::ctf::CtfError> {
                let mut stats = StreamStats::default();
                for mut d in share {
                    let mut done = 0u64;
                    let mut batch = Vec::with_capacity(BATCH);
                    loop {
                        let more = d.next_event()?;
                        if more {
                            batch.push(d.event().to_event(source));
                        }
                        if batch.len() == BATCH || (!more && !batch.is_empty()) {
                            let now = d.bytes_done();
                            let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                            if tx.send((full, now - done)).is_err() {
                                return Ok(stats); // the importer stopped
                            }
                            done = now;
                        }
                        if !more {
                            break;
                        }
                    }
                    stats.merge(d.stats());
                }
                Ok(stats)
            }));
        }
        drop(tx);
        let mut failed = None;
        for (batch, bytes) in rx.iter() {
            if failed.is_none()
                && let Err(e) = imp.batch(&batch)
            {
                failed = Some(e);
                break;
            }
            bar.inc(bytes);
        }
        drop(rx);
        let mut stats = StreamStats::default();
        for h in handles {
            match h.join() {
                Ok(Ok(s)) => stats.merge(&s),
                Ok(Err(e)) => return Err(e.into()),
                Err(_) => bail!("a decoding thread panicked"),
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(stats),
        }
    })
}

struct Importer<'a> {
    weaver: BlkkinWeaver,
    span_sinks: Vec<SpanSink>,
    store: Option<&'a Store>,
    events_file: Option<&'a mut std::io::BufWriter<std::fs::File>>,
    keep_events: bool,
    pending_spans: Vec<Span>,
    spans_out: u64,
    events: u64,
    events_out: u64,
    by_name: HashMap<std::sync::Arc<str>, u64>,
    first_ns: u64,
    last_ns: u64,
    line: Vec<u8>,
}

struct Counts {
    events: u64,
    events_out: u64,
    by_name: Vec<(String, u64)>,
    first_ns: u64,
    last_ns: u64,
}

fn imp_counts(imp: &Importer<'_>) -> Counts {
    let mut by_name: Vec<(String, u64)> = imp.by_name.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    by_name.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    Counts {
        events: imp.events,
        events_out: imp.events_out,
        by_name,
        first_ns: imp.first_ns,
        last_ns: imp.last_ns,
    }
}

impl<'a> Importer<'a> {
    fn new(
        span_sinks: Vec<SpanSink>,
        store: Option<&'a Store>,
        events_file: Option<&'a mut std::io::BufWriter<std::fs::File>>,
        keep_events: bool,
    ) -> Importer<'a> {
        Importer {
            weaver: BlkkinWeaver::default(),
            span_sinks,
            store,
            events_file,
            keep_events,
            pending_spans: Vec::new(),
            spans_out: 0,
            events: 0,
            events_out: 0,
            by_name: HashMap::new(),
            first_ns: u64::MAX,
            last_ns: 0,
            line: Vec::new(),
        }
    }

    /// Events of a CTF trace: counted, kept, and woven (BlkKin).
    fn batch(&mut self, events: &[Event]) -> anyhow::Result<()> {
        self.events(events)?;
        for e in events {
            self.weaver.push(e);
        }
        self.weaver.drain(&mut self.pending_spans);
        if self.pending_spans.len() >= SPAN_BATCH {
            self.flush_spans()?;
        }
        Ok(())
    }

    /// Events and the spans made of them elsewhere (a capture's records).
    fn batch_with_spans(&mut self, events: &[Event], spans: &mut Vec<Span>) -> anyhow::Result<()> {
        self.events(events)?;
        self.pending_spans.append(spans);
        if self.pending_spans.len() >= SPAN_BATCH {
            self.flush_spans()?;
        }
        Ok(())
    }

    /// Counts `events` and writes them to the event outputs.
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
        if self.keep_events {
            if let Some(store) = self.store {
                append_retrying(|| store.append_events(events)).context("appending events")?;
            }
            if let Some(f) = self.events_file.as_deref_mut() {
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

    fn flush_spans(&mut self) -> anyhow::Result<()> {
        if self.pending_spans.is_empty() {
            return Ok(());
        }
        let spans = std::mem::take(&mut self.pending_spans);
        for chunk in spans.chunks(SPAN_BATCH) {
            for sink in &mut self.span_sinks {
                match sink {
                    SpanSink::File(w) => w.write(chunk)?,
                    SpanSink::Server(server) => server.post(chunk)?,
                }
            }
            if let Some(store) = self.store {
                append_retrying(|| store.append(chunk)).context("appending spans")?;
            }
            self.spans_out += chunk.len() as u64;
        }
        Ok(())
    }

    fn finish(&mut self) -> anyhow::Result<(u64, BlkkinStats)> {
        let weaver = std::mem::take(&mut self.weaver);
        let (rest, stats) = weaver.finish();
        self.pending_spans.extend(rest);
        self.flush_spans()?;
        for sink in std::mem::take(&mut self.span_sinks) {
            if let SpanSink::File(w) = sink {
                let losses = w.finish()?;
                for (what, n) in losses.iter() {
                    tracing::info!("span file: {n} {what}");
                }
            }
        }
        if let Some(f) = self.events_file.as_deref_mut() {
            f.flush().context("writing events")?;
        }
        Ok((self.spans_out, stats))
    }
}

/// The store refuses appends while its flush catches up: wait and retry.
fn append_retrying(mut f: impl FnMut() -> weft_store::Result<()>) -> weft_store::Result<()> {
    let mut wait = Duration::from_millis(5);
    loop {
        match f() {
            Err(StoreError::Overloaded { .. }) => {
                std::thread::sleep(wait);
                wait = (wait * 2).min(Duration::from_millis(500));
            }
            other => return other,
        }
    }
}

/// A server's OTLP/HTTP receiver, through the exporter every weft sender uses.
struct ServerSink {
    client: Client,
    retries: Retries,
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

impl ServerSink {
    fn post(&mut self, spans: &[Span]) -> anyhow::Result<()> {
        let body = self.client.encode(spans);
        let d = self.client.deliver(&body, self.client.gzip(), &mut self.retries, std::thread::sleep);
        self.retries.reset();
        let url = self.client.url();
        match d.outcome {
            Outcome::Acked { .. } => Ok(()),
            Outcome::Refused { status, message } => {
                bail!("{url} refused the spans: HTTP {status}: {message}")
            }
            Outcome::Retry { reason, .. } => {
                bail!("{url} did not take the spans after {} attempts: {reason}", d.requests)
            }
        }
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
