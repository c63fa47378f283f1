//! The running pipeline: one thread per source, the merge thread, the weave thread, one thread
//! per sink, connected by bounded channels of batches. Every command that turns events into
//! spans runs on it: `weft weave` (simulator logs), `weft import` (CTF, weft-probe captures)
//! and `weft record` (a perf_event capture).
//!
//! ```text
//! source 0 ──(bounded: queue_batches × Vec<Event>)──┐
//! source 1 ──────────────────────────────────────────┼─▶ merge ──(bounded)──▶ weave ──▶ sink queues ──▶ sinks
//! source 2 ──────────────────────────────────────────┘
//! ```
//!
//! The parts are open:
//!
//! * an [`EventSource`] produces batches of events on its own thread — a simulator log (the
//!   sources of a [`Topology`]), a CTF trace's streams, weft-probe capture files, a kernel
//!   capture — and publishes its progress in a [`SourceProgress`];
//! * the merge orders the sources' batches ([`Order::Time`]: the k-way merge of
//!   [`crate::merge`], for weavers that need one timeline) or passes them on as they arrive
//!   ([`Order::Arrival`], for weavers that group by ids);
//! * a [`WeaveStage`] turns the events into spans on the weave thread: the simulator weavers
//!   ([`Weave`]), BlkKin's ([`crate::blkin::BlkkinWeaver`]), the kernel weaver
//!   ([`crate::kernel::KernelStage`]), or a caller's stage wrapping one of them;
//! * the sinks are [`SinkSpec`]s, a caller's own included ([`SinkSpec::Custom`]).
//!
//! Memory is bounded by the batch sizes and queue lengths, the merge's buffer bound, the
//! weavers' bounds and the assembler's bounds — never by the input's size — except for a stage
//! that needs its whole input (the kernel weaver: it keeps the capture, up to its own bound).
//! Sources may be named pipes that simulators write while they run (online mode): nothing is
//! persisted, a FIFO is opened when its writer opens it, and backpressure reaches the writers.
//!
//! [`Run::start`] (a topology) and [`Run::with`] (any sources and stage) start everything and
//! return at once; the per-source [`SourceProgress`] counters can be read while it runs;
//! [`Run::wait`] returns the [`RunReport`].

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Select, Sender, bounded};
use weft_model::{Event, SourceId, Span};
use weft_sources::drive::{Driver, LiveCounters, SourceStats};
use weft_sources::parse::LineParser;
use weft_sources::reader::{InputKind, LineReader, open_input};
use weft_sources::sim::parser_for;

use crate::actor::{ActorStats, Actors};
use crate::merge::{MergeStats, Merger};
use crate::sink::{SinkError, SinkHandle, SinkReport, SinkSpec};
use crate::topology::{RunSpec, SourceSpec, Topology, TopologyError};
use crate::weaver::{ConfigError, Weave, WeaveStats};

/// Why a run could not start or finish.
#[derive(Debug, thiserror::Error)]
pub enum WeaveError {
    /// The topology is unusable (including its symbol tables).
    #[error(transparent)]
    Topology(#[from] TopologyError),
    /// The weavers cannot be built from the topology.
    #[error("{file}: {0}", file = .1.display())]
    Config(ConfigError, PathBuf),
    /// A sink failed.
    #[error(transparent)]
    Sink(#[from] SinkError),
    /// The weave stage failed (it stopped the run).
    #[error("{0}")]
    Stage(StageError),
    /// A pipeline thread could not be started or died.
    #[error("pipeline: {0}")]
    Thread(String),
}

/// A weave stage's failure (a caller's stage writing events somewhere, ...).
pub type StageError = Box<dyn std::error::Error + Send + Sync>;

/// What a source is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceState {
    /// Opening (a FIFO waits here for its writer).
    Opening,
    /// Reading.
    Reading,
    /// Finished (end of input or error).
    Done,
}

/// Live counters of one source, readable while the run goes on.
#[derive(Debug)]
pub struct SourceProgress {
    /// Component name.
    pub name: String,
    /// File, FIFO or directory.
    pub path: PathBuf,
    /// Bytes, lines (or records), events, rejected lines (or corrupt records).
    pub counters: Arc<LiveCounters>,
    /// Spans woven from this source's events (when the stage counts them per source).
    pub spans: AtomicU64,
    /// The input's length (0 for a stream or before it is opened).
    pub total_bytes: AtomicU64,
    state: AtomicU8,
}

impl SourceProgress {
    fn new(name: &str, path: &Path) -> SourceProgress {
        SourceProgress {
            name: name.to_owned(),
            path: path.to_path_buf(),
            counters: Arc::default(),
            spans: AtomicU64::new(0),
            total_bytes: AtomicU64::new(0),
            state: AtomicU8::new(0),
        }
    }

    /// What the source is doing.
    pub fn state(&self) -> SourceState {
        match self.state.load(Ordering::Relaxed) {
            0 => SourceState::Opening,
            1 => SourceState::Reading,
            _ => SourceState::Done,
        }
    }
}

/// What one source did.
#[derive(Debug, Clone)]
pub struct SourceReport {
    /// Component name.
    pub name: String,
    /// File or FIFO.
    pub path: PathBuf,
    /// Read/parse statistics (rejects with line numbers, skips per reason, order fixes) of a
    /// simulator log; empty for other sources.
    pub stats: SourceStats,
    /// Actor statistics (symbolized, dropped per reason) of a simulator log.
    pub actors: ActorStats,
    /// Spans woven from its events.
    pub spans: u64,
    /// True when it was a stream (FIFO), not a regular file.
    pub stream: bool,
    /// A failure that ended the source early (the run goes on without it).
    pub error: Option<String>,
}

/// Everything a run did; `R` is the weave stage's report ([`WeaveStats`] for simulator logs).
#[derive(Debug, Clone)]
pub struct RunReport<R = WeaveStats> {
    /// Per source, in the order given.
    pub sources: Vec<SourceReport>,
    /// The merge.
    pub merge: MergeStats,
    /// The weave (for simulator logs: events and spans per type, unmatched causes, anomalies).
    pub weave: R,
    /// Per sink.
    pub sinks: Vec<SinkReport>,
    /// Spans produced.
    pub spans: u64,
}

/// A producer of events (`T`: [`Event`]s, or what a stage takes instead, e.g. whole capture
/// files), run on its own thread: a simulator log, a CTF trace's streams, weft-probe capture
/// files, a kernel capture. Its batches are in time order when the run merges by time
/// ([`Order::Time`]).
pub trait EventSource<T = Event>: Send {
    /// Component name (progress, report).
    fn name(&self) -> &str;
    /// What it reads (progress, report).
    fn path(&self) -> &Path;
    /// True for a stream that may stall while the others go on (a FIFO): at its buffer bound
    /// the time merge may pass it over. Files and captures are not streams.
    fn is_stream(&self) -> bool {
        false
    }
    /// True for a source that follows a live input (an LTTng live session): its empty batches
    /// are passed on as ticks, so the stage can move its clock while the input is idle, and
    /// the run hands what it holds to the sinks at each of them. Meant for
    /// [`Order::Arrival`]; other sources' empty batches are not sent.
    fn ticks(&self) -> bool {
        false
    }
    /// The input's size in bytes when known before it is opened (0: unknown, or set by
    /// [`EventSource::open`]).
    fn total_bytes(&self) -> u64 {
        0
    }
    /// Opens the input (a FIFO blocks here until its writer appears); sets
    /// [`SourceProgress::total_bytes`] when the size is known. The default does nothing.
    fn open(&mut self, progress: &SourceProgress) -> Result<(), String> {
        let _ = progress;
        Ok(())
    }
    /// Appends the next events to `batch` and updates `progress`'s counters; `Ok(false)` at the
    /// end of the input. An error ends the source (the run goes on without it; its report
    /// carries the message).
    fn next_batch(&mut self, batch: &mut Vec<T>, progress: &SourceProgress) -> Result<bool, String>;
    /// At the end: fills in what the source knows of its report.
    fn finish(self: Box<Self>, report: &mut SourceReport) {
        let _ = report;
    }
}

/// Events → spans on the weave thread: the simulator weavers ([`Weave`]), BlkKin's, the kernel
/// weaver, or a caller's stage around one of them.
pub trait WeaveStage: Send {
    /// What its sources produce ([`Event`] but for stages that need another unit).
    type Item: Send + 'static;
    /// What the stage reports at the end.
    type Report: Send + 'static;
    /// Takes one batch (in the run's [`Order`]), appending the spans it finished to `out`. An
    /// error stops the run ([`WeaveError::Stage`]).
    fn push(&mut self, items: &[Self::Item], out: &mut Vec<Span>) -> Result<(), StageError>;
    /// End of input: appends every span still held.
    fn finish(&mut self, out: &mut Vec<Span>) -> Result<(), StageError>;
    /// Spans per source index so far (empty: not counted per source).
    fn spans_by_source(&self) -> &[u64] {
        &[]
    }
    /// The stage's report.
    fn into_report(self) -> Self::Report;
}

impl WeaveStage for Weave {
    type Item = Event;
    type Report = WeaveStats;
    fn push(&mut self, events: &[Event], out: &mut Vec<Span>) -> Result<(), StageError> {
        for e in events {
            Weave::push(self, e, out);
        }
        Ok(())
    }
    fn finish(&mut self, out: &mut Vec<Span>) -> Result<(), StageError> {
        Weave::finish(self, out);
        Ok(())
    }
    fn spans_by_source(&self) -> &[u64] {
        Weave::spans_by_source(self)
    }
    fn into_report(self) -> WeaveStats {
        self.stats().clone()
    }
}

/// How the merge thread passes the sources' batches on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// One timeline: the k-way merge by time ([`crate::merge`]).
    Time,
    /// As they arrive (a stage that groups by ids, or a single source).
    Arrival,
}

/// Batch sizes, queue lengths and the merge's settings of a run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Events per batch from the merge; spans per batch to the sinks.
    pub batch_events: usize,
    /// Batches a source may queue ahead of the merge (and the merge ahead of the weave).
    pub queue_batches: usize,
    /// Events the time merge buffers while waiting for a slow source.
    pub merge_buffer_events: usize,
    /// How long (ms) the time merge, at its bound, waits for a silent stream.
    pub merge_stall_ms: u64,
    /// How the merge orders batches.
    pub order: Order,
}

impl RunOptions {
    /// A topology's settings (time order).
    pub fn from_spec(run: &RunSpec) -> RunOptions {
        RunOptions {
            batch_events: run.batch_events,
            queue_batches: run.queue_batches,
            merge_buffer_events: run.merge_buffer_events,
            merge_stall_ms: run.merge_stall_ms,
            order: Order::Time,
        }
    }
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions::from_spec(&RunSpec::default())
    }
}

enum Msg<T> {
    Events(Vec<T>),
    End(Box<SourceReport>),
}

type MergeResult = (MergeStats, Vec<Option<SourceReport>>);

type WeaveResult<R> = Result<(R, Vec<u64>, u64), StageError>;

/// A running pipeline (see the module docs); `W` is its weave stage.
pub struct Run<W: WeaveStage = Weave> {
    progress: Vec<Arc<SourceProgress>>,
    sources: Vec<JoinHandle<()>>,
    merge: Option<JoinHandle<MergeResult>>,
    weave: Option<JoinHandle<WeaveResult<W::Report>>>,
    sinks: Arc<Vec<SinkHandle>>,
    spans: Arc<AtomicU64>,
}

fn spawn<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<JoinHandle<T>, WeaveError> {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(f)
        .map_err(|e| WeaveError::Thread(format!("spawn {name}: {e}")))
}

impl Run<Weave> {
    /// Starts a run of `topo` (its simulator logs, the simulator weavers), writing to its
    /// sinks plus `extra_sinks`.
    pub fn start(topo: &Topology, extra_sinks: Vec<SinkSpec>) -> Result<Run, WeaveError> {
        let cfg = topo.weave_config();
        let weave = Weave::new(&cfg).map_err(|e| WeaveError::Config(e, topo.file.clone()))?;
        // Everything that can fail up front: symbol tables, sinks.
        let mut symbols = Vec::new();
        for i in 0..topo.sources.len() {
            symbols.push(topo.load_symbols(i)?);
        }
        for (i, s) in topo.sources.iter().enumerate() {
            if !s.path.exists() {
                return Err(TopologyError {
                    file: topo.file.clone(),
                    key: format!("source[{i}].path"),
                    msg: format!("{}: no such file or named pipe", s.path.display()),
                }
                .into());
            }
        }
        let mut sources: Vec<Box<dyn EventSource>> = Vec::new();
        for (i, (s, sym)) in topo.sources.iter().zip(symbols).enumerate() {
            let nodes = match &s.role {
                crate::weaver::Role::Network { nodes } => nodes.clone(),
                _ => Default::default(),
            };
            let actors = Actors::new(&s.name, &nodes, sym.as_ref(), &topo.filter);
            sources.push(Box::new(LogSource::new(i, s.clone(), actors)));
        }
        let sinks = topo.sinks.iter().cloned().chain(extra_sinks).collect();
        Run::with(sources, weave, sinks, RunOptions::from_spec(&topo.run))
    }
}

impl<W: WeaveStage<Item = Event> + 'static> Run<W> {
    /// Starts a run of event `sources` through `stage` into `sinks`, in `opts.order`.
    pub fn with(
        sources: Vec<Box<dyn EventSource>>,
        stage: W,
        sinks: Vec<SinkSpec>,
        opts: RunOptions,
    ) -> Result<Run<W>, WeaveError> {
        let streams: Vec<bool> = sources.iter().map(|s| s.is_stream()).collect();
        let (batch, cap) = (opts.batch_events, opts.merge_buffer_events);
        let stall = std::time::Duration::from_millis(opts.merge_stall_ms.max(1));
        let order = opts.order;
        Run::launch(sources, stage, sinks, &opts, move |rxs, tx| match order {
            Order::Time => merge_thread(rxs, tx, batch, cap, streams, stall),
            Order::Arrival => arrival_thread(rxs, tx),
        })
    }
}

impl<W: WeaveStage + 'static> Run<W> {
    /// Starts a run of `sources` producing the stage's own items (whole capture files, ...)
    /// through `stage` into `sinks`; their batches are passed on as they arrive.
    pub fn with_items(
        sources: Vec<Box<dyn EventSource<W::Item>>>,
        stage: W,
        sinks: Vec<SinkSpec>,
        opts: RunOptions,
    ) -> Result<Run<W>, WeaveError> {
        Run::launch(sources, stage, sinks, &opts, arrival_thread)
    }

    fn launch(
        sources: Vec<Box<dyn EventSource<W::Item>>>,
        mut stage: W,
        sinks: Vec<SinkSpec>,
        opts: &RunOptions,
        merge: impl FnOnce(Vec<Receiver<Msg<W::Item>>>, Sender<Vec<W::Item>>) -> MergeResult + Send + 'static,
    ) -> Result<Run<W>, WeaveError> {
        let mut handles = Vec::new();
        for s in sinks {
            handles.push(SinkHandle::start(s)?);
        }
        let sinks = Arc::new(handles);
        let mut progress = Vec::new();
        let mut rxs = Vec::new();
        let mut threads = Vec::new();
        for src in sources {
            let p = Arc::new(SourceProgress::new(src.name(), src.path()));
            p.total_bytes.store(src.total_bytes(), Ordering::Relaxed);
            progress.push(p.clone());
            let (tx, rx) = bounded::<Msg<W::Item>>(opts.queue_batches);
            rxs.push(rx);
            threads.push(spawn(&format!("weft-src-{}", src.name()), move || source_thread(src, p, tx))?);
        }
        let (mtx, mrx) = bounded::<Vec<W::Item>>(opts.queue_batches);
        let batch = opts.batch_events;
        let merge = spawn("weft-merge", move || merge(rxs, mtx))?;
        let spans = Arc::new(AtomicU64::new(0));
        let (sp, prog, sk) = (spans.clone(), progress.clone(), sinks.clone());
        let weave = spawn("weft-weave", move || -> WeaveResult<W::Report> {
            let mut out = Vec::new();
            let mut total = 0u64;
            let flush = |out: &mut Vec<Span>, total: &mut u64| {
                if out.is_empty() {
                    return;
                }
                *total += out.len() as u64;
                sp.store(*total, Ordering::Relaxed);
                let b = Arc::new(std::mem::take(out));
                for s in sk.iter() {
                    s.send(&b);
                }
            };
            let per_source = |stage: &W| {
                for (p, c) in prog.iter().zip(stage.spans_by_source()) {
                    p.spans.store(*c, Ordering::Relaxed);
                }
            };
            for events in mrx {
                // On an error the receiver drops: the merge and the sources stop.
                stage.push(&events, &mut out)?;
                per_source(&stage);
                // An empty batch is a live source's tick: its input is idle, pass on what is done.
                if out.len() >= batch || events.is_empty() {
                    flush(&mut out, &mut total);
                }
            }
            stage.finish(&mut out)?;
            per_source(&stage);
            flush(&mut out, &mut total);
            let by_source = stage.spans_by_source().to_vec();
            Ok((stage.into_report(), by_source, total))
        })?;
        Ok(Run { progress, sources: threads, merge: Some(merge), weave: Some(weave), sinks, spans })
    }

    /// Live per-source counters.
    pub fn sources(&self) -> &[Arc<SourceProgress>] {
        &self.progress
    }

    /// Spans produced so far.
    pub fn spans(&self) -> u64 {
        self.spans.load(Ordering::Relaxed)
    }

    /// Spans dropped by sinks with `backpressure = "drop"` so far.
    pub fn dropped_spans(&self) -> u64 {
        self.sinks.iter().map(|s| s.dropped()).sum()
    }

    /// True once every stage has finished.
    pub fn is_finished(&self) -> bool {
        self.weave.as_ref().is_none_or(|w| w.is_finished())
    }

    /// Waits for the end and returns the report.
    pub fn wait(mut self) -> Result<RunReport<W::Report>, WeaveError> {
        for t in self.sources.drain(..) {
            t.join().map_err(|_| WeaveError::Thread("a source thread panicked".into()))?;
        }
        let (merge, reports) = self
            .merge
            .take()
            .ok_or_else(|| WeaveError::Thread("no merge thread".into()))?
            .join()
            .map_err(|_| WeaveError::Thread("the merge thread panicked".into()))?;
        let woven = self
            .weave
            .take()
            .ok_or_else(|| WeaveError::Thread("no weave thread".into()))?
            .join()
            .map_err(|_| WeaveError::Thread("the weave thread panicked".into()))?;
        let handles = Arc::try_unwrap(std::mem::take(&mut self.sinks))
            .map_err(|_| WeaveError::Thread("sink handles still shared".into()))?;
        let mut sinks = Vec::new();
        for h in handles {
            sinks.push(h.finish()?);
        }
        let (weave, by_source, spans) = woven.map_err(WeaveError::Stage)?;
        let sources = reports
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                let mut r = r.unwrap_or_else(|| SourceReport {
                    error: Some("the source thread ended without a report".into()),
                    ..empty_report(&self.progress[i])
                });
                r.spans = by_source.get(i).copied().unwrap_or(0);
                r
            })
            .collect();
        Ok(RunReport { sources, merge, weave, sinks, spans })
    }
}

fn empty_report(p: &SourceProgress) -> SourceReport {
    SourceReport {
        name: p.name.clone(),
        path: p.path.clone(),
        stats: SourceStats::default(),
        actors: ActorStats::default(),
        spans: 0,
        stream: false,
        error: None,
    }
}

fn source_thread<T>(mut src: Box<dyn EventSource<T>>, p: Arc<SourceProgress>, tx: Sender<Msg<T>>) {
    let mut report = empty_report(&p);
    match src.open(&p) {
        Err(e) => report.error = Some(e),
        Ok(()) => {
            p.state.store(1, Ordering::Relaxed);
            let ticks = src.ticks();
            loop {
                let mut batch = Vec::new();
                let more = match src.next_batch(&mut batch, &p) {
                    Ok(m) => m,
                    Err(e) => {
                        report.error = Some(e);
                        false
                    }
                };
                if (!batch.is_empty() || (ticks && more)) && tx.send(Msg::Events(batch)).is_err() {
                    report.error = Some("the merge stopped".into());
                    break;
                }
                if !more {
                    break;
                }
            }
        }
    }
    src.finish(&mut report);
    p.state.store(2, Ordering::Relaxed);
    let _ = tx.send(Msg::End(Box::new(report)));
}

/// A simulator log of a topology: read → parse → actors (filters, symbolizer).
struct LogSource {
    index: usize,
    spec: SourceSpec,
    actors: Actors,
    stream: bool,
    driver: Option<Driver<File, Box<dyn LineParser>>>,
    /// The driver's counters last published (bytes, lines, events, rejected).
    last: (u64, u64, u64, u64),
    /// Each batch starts with the room the previous one needed (no regrowing per step).
    room: usize,
    input_stream: bool,
}

impl LogSource {
    fn new(index: usize, spec: SourceSpec, actors: Actors) -> LogSource {
        // Regular files never force the merge; anything else (FIFOs) may.
        let stream = !std::fs::metadata(&spec.path).is_ok_and(|m| m.is_file());
        LogSource {
            index,
            spec,
            actors,
            stream,
            driver: None,
            last: (0, 0, 0, 0),
            room: 0,
            input_stream: false,
        }
    }
}

impl EventSource for LogSource {
    fn name(&self) -> &str {
        &self.spec.name
    }
    fn path(&self) -> &Path {
        &self.spec.path
    }
    fn is_stream(&self) -> bool {
        self.stream
    }
    fn open(&mut self, p: &SourceProgress) -> Result<(), String> {
        let input = open_input(&self.spec.path).map_err(|e| e.to_string())?;
        self.input_stream = input.kind == InputKind::Stream;
        if let InputKind::File { len } = input.kind {
            p.total_bytes.store(len, Ordering::Relaxed);
        }
        let parser = parser_for(self.spec.format, SourceId(self.index as u32), self.spec.clock);
        self.driver = Some(Driver::new(LineReader::new(input.file), parser, 5));
        Ok(())
    }
    fn next_batch(&mut self, batch: &mut Vec<Event>, p: &SourceProgress) -> Result<bool, String> {
        let Some(d) = self.driver.as_mut() else { return Ok(false) };
        batch.reserve(self.room);
        let step = d.step(batch);
        // Share the driver's counters with the progress display.
        let c = d.counters();
        let now = (
            c.bytes.load(Ordering::Relaxed),
            c.lines.load(Ordering::Relaxed),
            c.events.load(Ordering::Relaxed),
            c.rejected.load(Ordering::Relaxed),
        );
        p.counters.bytes.store(now.0, Ordering::Relaxed);
        p.counters.lines.fetch_add(now.1 - self.last.1, Ordering::Relaxed);
        p.counters.events.fetch_add(now.2 - self.last.2, Ordering::Relaxed);
        p.counters.rejected.fetch_add(now.3 - self.last.3, Ordering::Relaxed);
        self.last = now;
        self.room = self.room.max(batch.len());
        self.actors.apply(batch);
        // Filters may leave a fraction (gem5: the function entries among the instructions):
        // queued batches hold no more memory than their events need.
        if batch.capacity() > 2 * batch.len() + 64 {
            batch.shrink_to_fit();
        }
        step.map_err(|e| format!("{}: read: {e}", self.spec.path.display()))
    }
    fn finish(self: Box<Self>, report: &mut SourceReport) {
        report.stream = self.input_stream;
        if let Some(d) = self.driver {
            report.stats = d.into_stats();
        }
        report.actors = self.actors.stats().clone();
    }
}

/// Passes batches on as they arrive (no ordering across sources).
fn arrival_thread<T>(rxs: Vec<Receiver<Msg<T>>>, out_tx: Sender<Vec<T>>) -> MergeResult {
    let mut reports: Vec<Option<SourceReport>> = (0..rxs.len()).map(|_| None).collect();
    let mut open: Vec<usize> = (0..rxs.len()).collect();
    let mut stats = MergeStats::default();
    while !open.is_empty() {
        let mut sel = Select::new();
        for &i in &open {
            sel.recv(&rxs[i]);
        }
        let op = sel.select();
        let k = op.index();
        let i = open[k];
        match op.recv(&rxs[i]) {
            Ok(Msg::Events(v)) => {
                stats.events += v.len() as u64;
                if out_tx.send(v).is_err() {
                    break;
                }
            }
            Ok(Msg::End(r)) => {
                reports[i] = Some(*r);
                open.remove(k);
            }
            Err(_) => {
                open.remove(k);
            }
        }
    }
    (stats, reports)
}

fn merge_thread(
    rxs: Vec<Receiver<Msg<Event>>>,
    out_tx: Sender<Vec<Event>>,
    batch: usize,
    cap: usize,
    stream: Vec<bool>,
    stall: std::time::Duration,
) -> MergeResult {
    let n = rxs.len();
    let mut m = Merger::new(n);
    let mut reports: Vec<Option<SourceReport>> = (0..n).map(|_| None).collect();
    let mut out = Vec::with_capacity(batch);
    let send = |out: &mut Vec<Event>| -> bool {
        if out.is_empty() {
            return true;
        }
        out_tx.send(std::mem::replace(out, Vec::with_capacity(batch))).is_ok()
    };
    loop {
        let room = batch - out.len().min(batch);
        m.pop_ready(&mut out, room);
        if out.len() >= batch && !send(&mut out) {
            break;
        }
        if m.is_done() {
            break;
        }
        let blocking = m.blocking();
        if blocking.is_empty() {
            continue;
        }
        // About to wait: pass on what is ready so downstream is not starved (online latency).
        if !send(&mut out) {
            break;
        }
        // Below the bound: take from any source (a source whose simulator waits for another's
        // progress must not block on its pipe). At the bound: wait for the sources holding the
        // merge back; a pipe that stays silent for `stall` is passed over (counted).
        let at_cap = m.buffered() >= cap;
        let wait: Vec<usize> =
            if at_cap { blocking.clone() } else { (0..n).filter(|&i| !m.is_ended(i)).collect() };
        let mut sel = Select::new();
        for &i in &wait {
            sel.recv(&rxs[i]);
        }
        let op = if at_cap && blocking.iter().any(|&i| stream[i]) {
            match sel.select_timeout(stall) {
                Ok(op) => op,
                Err(_) => {
                    for _ in 0..batch {
                        if !m.force_one(&mut out) {
                            break;
                        }
                    }
                    continue;
                }
            }
        } else {
            sel.select()
        };
        let i = wait[op.index()];
        match op.recv(&rxs[i]) {
            Ok(Msg::Events(v)) => m.push(i, v),
            Ok(Msg::End(r)) => {
                reports[i] = Some(*r);
                m.end(i);
            }
            Err(_) => m.end(i),
        }
    }
    m.pop_ready(&mut out, usize::MAX);
    send(&mut out);
    (m.stats().clone(), reports)
}
