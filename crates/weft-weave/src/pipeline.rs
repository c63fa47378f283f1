//! The running pipeline: one thread per source (read → parse → actors), the merge thread, the
//! weave thread, one thread per sink, connected by bounded channels of batches.
//!
//! ```text
//! source 0 ──(bounded: queue_batches × Vec<Event>)──┐
//! source 1 ──────────────────────────────────────────┼─▶ merge ──(bounded)──▶ weave ──▶ sink queues ──▶ sinks
//! source 2 ──────────────────────────────────────────┘
//! ```
//!
//! Memory is bounded by the batch sizes and queue lengths, the merge's buffer bound, the
//! weavers' bounds and the assembler's bounds — never by the input's size. Sources may be
//! named pipes that simulators write while they run (online mode): nothing is persisted, a
//! FIFO is opened when its writer opens it, and backpressure reaches the writers.
//!
//! [`Run::start`] starts everything and returns at once; its per-source [`SourceProgress`]
//! counters can be read while it runs; [`Run::wait`] returns the [`RunReport`].

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Select, Sender, bounded};
use weft_model::{Event, SourceId, Span};
use weft_sources::drive::{Driver, LiveCounters, SourceStats};
use weft_sources::reader::{InputKind, LineReader, open_input};
use weft_sources::sim::parser_for;

use crate::actor::{ActorStats, Actors};
use crate::merge::{MergeStats, Merger};
use crate::sink::{SinkError, SinkHandle, SinkReport, SinkSpec};
use crate::topology::{Topology, TopologyError};
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
    /// A pipeline thread could not be started or died.
    #[error("pipeline: {0}")]
    Thread(String),
}

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
    /// File or FIFO.
    pub path: PathBuf,
    /// Bytes, lines, events, rejected lines.
    pub counters: Arc<LiveCounters>,
    /// Spans woven from this source's events.
    pub spans: AtomicU64,
    /// The file's length (0 for a stream or before it is opened).
    pub total_bytes: AtomicU64,
    state: AtomicU8,
}

impl SourceProgress {
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
    /// Read/parse statistics (rejects with line numbers, skips per reason, order fixes).
    pub stats: SourceStats,
    /// Actor statistics (symbolized, dropped per reason).
    pub actors: ActorStats,
    /// Spans woven from its events.
    pub spans: u64,
    /// True when it was a stream (FIFO), not a regular file.
    pub stream: bool,
    /// A failure that ended the source early (the run goes on without it).
    pub error: Option<String>,
}

/// Everything a run did.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// Per source, in topology order.
    pub sources: Vec<SourceReport>,
    /// The merge.
    pub merge: MergeStats,
    /// The weave (events and spans per type, unmatched causes, anomalies).
    pub weave: WeaveStats,
    /// Per sink.
    pub sinks: Vec<SinkReport>,
    /// Spans produced.
    pub spans: u64,
}

enum Msg {
    Events(Vec<Event>),
    End(Box<SourceReport>),
}

/// A running pipeline (see the module docs).
pub struct Run {
    progress: Vec<Arc<SourceProgress>>,
    sources: Vec<JoinHandle<()>>,
    merge: Option<JoinHandle<(MergeStats, Vec<Option<SourceReport>>)>>,
    weave: Option<JoinHandle<(WeaveStats, u64)>>,
    sinks: Arc<Vec<SinkHandle>>,
    spans: Arc<AtomicU64>,
}

/// Events per message from a source, at most (a driver step is ~256 KiB of input).
fn spawn<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<JoinHandle<T>, WeaveError> {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(f)
        .map_err(|e| WeaveError::Thread(format!("spawn {name}: {e}")))
}

impl Run {
    /// Starts a run of `topo`, writing to its sinks plus `extra_sinks`.
    pub fn start(topo: &Topology, extra_sinks: Vec<SinkSpec>) -> Result<Run, WeaveError> {
        let cfg = topo.weave_config();
        let mut weave = Weave::new(&cfg).map_err(|e| WeaveError::Config(e, topo.file.clone()))?;
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
        let mut sinks = Vec::new();
        for s in topo.sinks.iter().cloned().chain(extra_sinks) {
            sinks.push(SinkHandle::start(s)?);
        }
        let sinks = Arc::new(sinks);
        let n = topo.sources.len();
        let run = topo.run.clone();
        let mut progress = Vec::new();
        let mut rxs = Vec::new();
        let mut threads = Vec::new();
        for (i, (s, sym)) in topo.sources.iter().zip(symbols).enumerate() {
            let p = Arc::new(SourceProgress {
                name: s.name.clone(),
                path: s.path.clone(),
                counters: Arc::default(),
                spans: AtomicU64::new(0),
                total_bytes: AtomicU64::new(0),
                state: AtomicU8::new(0),
            });
            progress.push(p.clone());
            let (tx, rx) = bounded::<Msg>(run.queue_batches);
            rxs.push(rx);
            let nodes = match &s.role {
                crate::weaver::Role::Network { nodes } => nodes.clone(),
                _ => Default::default(),
            };
            let actors = Actors::new(&s.name, &nodes, sym.as_ref(), &topo.filter);
            let spec = s.clone();
            threads.push(spawn(&format!("weft-src-{}", s.name), move || {
                source_thread(i, spec, actors, p, tx);
            })?);
        }
        let (mtx, mrx) = bounded::<Vec<Event>>(run.queue_batches);
        // Regular files never force the merge; anything else (FIFOs) may.
        let streams: Vec<bool> =
            topo.sources.iter().map(|s| !std::fs::metadata(&s.path).is_ok_and(|m| m.is_file())).collect();
        let batch = run.batch_events;
        let cap = run.merge_buffer_events;
        let stall = std::time::Duration::from_millis(run.merge_stall_ms.max(1));
        let merge = spawn("weft-merge", move || merge_thread(n, rxs, mtx, batch, cap, streams, stall))?;
        let spans = Arc::new(AtomicU64::new(0));
        let (sp, prog, sk) = (spans.clone(), progress.clone(), sinks.clone());
        let weave = spawn("weft-weave", move || {
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
            for events in mrx {
                for e in &events {
                    weave.push(e, &mut out);
                }
                for (p, c) in prog.iter().zip(weave.spans_by_source()) {
                    p.spans.store(*c, Ordering::Relaxed);
                }
                if out.len() >= batch {
                    flush(&mut out, &mut total);
                }
            }
            weave.finish(&mut out);
            for (p, c) in prog.iter().zip(weave.spans_by_source()) {
                p.spans.store(*c, Ordering::Relaxed);
            }
            flush(&mut out, &mut total);
            (weave.stats().clone(), total)
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
    pub fn wait(mut self) -> Result<RunReport, WeaveError> {
        for t in self.sources.drain(..) {
            t.join().map_err(|_| WeaveError::Thread("a source thread panicked".into()))?;
        }
        let (merge, reports) = self
            .merge
            .take()
            .ok_or_else(|| WeaveError::Thread("no merge thread".into()))?
            .join()
            .map_err(|_| WeaveError::Thread("the merge thread panicked".into()))?;
        let (weave, spans) = self
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
        let sources = reports
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                let mut r = r.unwrap_or_else(|| SourceReport {
                    name: self.progress[i].name.clone(),
                    path: self.progress[i].path.clone(),
                    stats: SourceStats::default(),
                    actors: ActorStats::default(),
                    spans: 0,
                    stream: false,
                    error: Some("the source thread ended without a report".into()),
                });
                r.spans = weave.spans_by_source.get(i).copied().unwrap_or(0);
                r
            })
            .collect();
        Ok(RunReport { sources, merge, weave, sinks, spans })
    }
}

fn source_thread(
    i: usize,
    spec: crate::topology::SourceSpec,
    mut actors: Actors,
    p: Arc<SourceProgress>,
    tx: Sender<Msg>,
) {
    let mut report = SourceReport {
        name: spec.name.clone(),
        path: spec.path.clone(),
        stats: SourceStats::default(),
        actors: ActorStats::default(),
        spans: 0,
        stream: false,
        error: None,
    };
    match open_input(&spec.path) {
        Err(e) => report.error = Some(e.to_string()),
        Ok(input) => {
            report.stream = input.kind == InputKind::Stream;
            if let InputKind::File { len } = input.kind {
                p.total_bytes.store(len, Ordering::Relaxed);
            }
            p.state.store(1, Ordering::Relaxed);
            let parser = parser_for(spec.format, SourceId(i as u32), spec.clock);
            let mut d = Driver::new(LineReader::new(input.file), parser, 5);
            // Share the driver's counters with the progress display.
            let counters = d.counters().clone();
            let mut last = (0u64, 0u64, 0u64, 0u64);
            // Each batch starts with the room the previous one needed (no regrowing per step).
            let mut room = 0usize;
            loop {
                let mut batch = Vec::with_capacity(room);
                let more = match d.step(&mut batch) {
                    Ok(m) => m,
                    Err(e) => {
                        report.error = Some(format!("{}: read: {e}", spec.path.display()));
                        false
                    }
                };
                let now = (
                    counters.bytes.load(Ordering::Relaxed),
                    counters.lines.load(Ordering::Relaxed),
                    counters.events.load(Ordering::Relaxed),
                    counters.rejected.load(Ordering::Relaxed),
                );
                p.counters.bytes.store(now.0, Ordering::Relaxed);
                p.counters.lines.fetch_add(now.1 - last.1, Ordering::Relaxed);
                p.counters.events.fetch_add(now.2 - last.2, Ordering::Relaxed);
                p.counters.rejected.fetch_add(now.3 - last.3, Ordering::Relaxed);
                last = now;
                room = room.max(batch.len());
                actors.apply(&mut batch);
                // Filters may leave a fraction (gem5: the function entries among the
                // instructions): queued batches hold no more memory than their events need.
                if batch.capacity() > 2 * batch.len() + 64 {
                    batch.shrink_to_fit();
                }
                if !batch.is_empty() && tx.send(Msg::Events(batch)).is_err() {
                    report.error = Some("the merge stopped".into());
                    break;
                }
                if !more {
                    break;
                }
            }
            report.stats = d.into_stats();
        }
    }
    report.actors = actors.stats().clone();
    p.state.store(2, Ordering::Relaxed);
    let _ = tx.send(Msg::End(Box::new(report)));
}

fn merge_thread(
    n: usize,
    rxs: Vec<Receiver<Msg>>,
    out_tx: Sender<Vec<Event>>,
    batch: usize,
    cap: usize,
    stream: Vec<bool>,
    stall: std::time::Duration,
) -> (MergeStats, Vec<Option<SourceReport>>) {
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
