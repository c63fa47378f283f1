//! `weft import ctf --live URL`: follows an LTTng live session through `lttng-relayd`
//! ([`weft_sources::ctf::live`]) and streams its BlkKin spans and events to the outputs of
//! `weft import ctf DIR`, through the same decoder and the same weaver, so a session gives the
//! same spans read live or afterwards. It runs on the pipeline runtime like every import: the
//! live reader is a ticking source (its idle rounds move the weaver's clock), BlkKin's weaver
//! behind the event tap is the stage.
//!
//! Spans are output once no event touched them for `--span-idle-ms` of trace time, measured
//! against the live merge's watermark (which inactivity beacons move forward while nothing is
//! traced); everything still open is output when the session ends, on Ctrl-C, or when the
//! relay daemon goes away (then the import fails after writing what it received).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use weft_model::{Event, SourceId, Span};
use weft_sources::ctf::live::Poll;
use weft_sources::ctf::{DecodeOptions, LiveOptions, LiveReader, LiveUrl};
use weft_weave::Run;
use weft_weave::blkin::{BlkkinOptions, BlkkinStats, BlkkinWeaver};
use weft_weave::pipeline::{EventSource, SourceProgress, SourceReport, StageError, WeaveStage};

use super::{
    BATCH, CtfArgs, EventTap, finish_events, print_sinks, run_options, summary_events, summary_wrote,
    tap_events,
};
use crate::cmd::pipeline::watch;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Waiting between rounds when nothing could be released (the live timer is usually 100 ms
/// or more, so this is a fraction of it).
const IDLE_WAIT: Duration = Duration::from_millis(20);

/// Delays from an event's time (a span's end) to the span being output, ns.
#[derive(Default)]
struct Delays {
    samples: Vec<u64>,
    n: u64,
    max: u64,
}

impl Delays {
    const KEEP: usize = 100_000;

    fn add(&mut self, d: u64) {
        self.n += 1;
        self.max = self.max.max(d);
        if self.samples.len() < Self::KEEP {
            self.samples.push(d);
        }
    }

    fn median(&mut self) -> Option<u64> {
        self.samples.sort_unstable();
        self.samples.get(self.samples.len() / 2).copied()
    }
}

fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

/// Watermarks per batch, from the source to the stage (as many as batches in flight).
type Marks = Arc<Mutex<std::collections::VecDeque<u64>>>;

/// What the source leaves for the summary when it ends: the reader (its statistics and
/// traces) and whether Ctrl-C ended it.
#[derive(Default)]
struct Ended {
    reader: Option<LiveReader>,
    stopped: bool,
}

/// The live session as a ticking pipeline source: each round polls the relay daemon; an idle
/// round sleeps a little and ends as an empty batch (a tick).
struct LiveSource {
    url: PathBuf,
    reader: LiveReader,
    /// The reader's merge watermark as of each batch passed on, in order, for the stage's
    /// clock (read when the stage takes that batch, not later: a later watermark could close
    /// a span whose next events are still queued).
    marks: Marks,
    ended: Arc<Mutex<Ended>>,
    stopped: bool,
}

impl EventSource for LiveSource {
    fn name(&self) -> &str {
        "live"
    }
    fn path(&self) -> &Path {
        &self.url
    }
    fn is_stream(&self) -> bool {
        true
    }
    fn ticks(&self) -> bool {
        true
    }
    fn next_batch(&mut self, batch: &mut Vec<Event>, p: &SourceProgress) -> Result<bool, String> {
        if STOP.load(Ordering::SeqCst) {
            self.stopped = true;
            self.reader.detach().map_err(|e| e.to_string())?;
            return Ok(false);
        }
        let polled = self.reader.poll(batch, BATCH).map_err(|e| e.to_string())?;
        p.counters.events.fetch_add(batch.len() as u64, Ordering::Relaxed);
        p.counters.bytes.store(self.reader.stats().bytes, Ordering::Relaxed);
        let more = match polled {
            Poll::End => false,
            Poll::Idle => {
                std::thread::sleep(IDLE_WAIT);
                true
            }
            Poll::Events(_) => true,
        };
        // A ticking source's batch reaches the stage unless it is empty and the last.
        if (!batch.is_empty() || more)
            && let Ok(mut m) = self.marks.lock()
        {
            m.push_back(self.reader.watermark());
        }
        Ok(more)
    }
    fn finish(self: Box<Self>, _: &mut SourceReport) {
        if let Ok(mut e) = self.ended.lock() {
            e.stopped = self.stopped;
            e.reader = Some(self.reader);
        }
    }
}

/// BlkKin's weaver behind the event tap, its clock moved by the live merge's watermark; spans
/// idle for `--span-idle-ms` come out while the session goes on.
struct LiveStage {
    weaver: BlkkinWeaver,
    tap: Arc<Mutex<EventTap>>,
    marks: Marks,
    delays: Delays,
    /// Spans still open when the input ended (output then, however short their silence).
    open_at_end: usize,
}

/// The live stage's report: BlkKin's, the spans still open at the end, the output delays.
struct LiveReport {
    blkin: BlkkinStats,
    open_at_end: usize,
    delays: Delays,
}

impl WeaveStage for LiveStage {
    type Item = Event;
    type Report = LiveReport;
    fn push(&mut self, events: &[Event], out: &mut Vec<Span>) -> Result<(), StageError> {
        tap_events(&self.tap, events)?;
        for e in events {
            self.weaver.push(e);
        }
        if let Some(w) = self.marks.lock().ok().and_then(|mut m| m.pop_front()) {
            self.weaver.advance(w);
        }
        let before = out.len();
        self.weaver.drain(out);
        if out.len() > before {
            let now = now_ns();
            for s in &out[before..] {
                self.delays.add(now.saturating_sub(s.end_ns));
            }
        }
        Ok(())
    }
    fn finish(&mut self, out: &mut Vec<Span>) -> Result<(), StageError> {
        self.open_at_end = self.weaver.open_spans();
        WeaveStage::finish(&mut self.weaver, out)
    }
    fn into_report(self) -> LiveReport {
        LiveReport { blkin: self.weaver.into_report(), open_at_end: self.open_at_end, delays: self.delays }
    }
}

/// Runs `weft import ctf --live URL`.
pub(super) fn run(args: &CtfArgs, url: &str) -> anyhow::Result<()> {
    let url = LiveUrl::parse(url)?;
    let started = Instant::now();
    let opts = LiveOptions {
        decode: DecodeOptions { strict: args.out.strict, ..DecodeOptions::default() },
        ..LiveOptions::default()
    };
    let reader = LiveReader::open(&url, SourceId(args.out.source_id), opts)
        .with_context(|| format!("following {url}"))?;
    // SAFETY: installing an async-signal-safe handler that only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    let out = args.out.open()?;
    let marks = Marks::default();
    let ended = Arc::new(Mutex::new(Ended::default()));
    let source = LiveSource {
        url: PathBuf::from(url.to_string()),
        reader,
        marks: marks.clone(),
        ended: ended.clone(),
        stopped: false,
    };
    let stage = LiveStage {
        weaver: BlkkinWeaver::new(BlkkinOptions {
            idle_ns: Some(args.span_idle_ms.saturating_mul(1_000_000)),
            ..BlkkinOptions::default()
        }),
        tap: out.tap.clone(),
        marks,
        delays: Delays::default(),
        open_at_end: 0,
    };
    let run = Run::with(vec![Box::new(source)], stage, out.sinks, run_options(2))?;
    watch(&run);
    let report = run.wait()?;
    // Whatever ended the read, what was received is written: the summary, then the error.
    let c = finish_events(&out.tap)?;
    if let Some(s) = &out.store {
        s.close().context("flushing the data directory")?;
    }
    let mut ended = ended.lock().map_err(|_| anyhow::anyhow!("the live source's state is poisoned"))?;
    let stopped = ended.stopped;
    let reader = ended.reader.take().context("the live source did not end")?;
    let LiveReport { blkin: bstats, open_at_end: open, mut delays } = report.weave;
    let spans = report.spans;
    let st = reader.stats().clone();
    let dec = reader.decode_stats();
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    println!(
        "followed {url}{}: {} events, {} stream(s), {} packets ({} bytes) in {secs:.2} s ({:.0} events/s)",
        if stopped { " until interrupted" } else { "" },
        c.events,
        st.streams,
        st.packets,
        st.bytes,
        c.events as f64 / secs,
    );
    for t in reader.traces() {
        let env = |k: &str| t.meta.env(k).map(|v| v.to_string()).unwrap_or_default();
        println!(
            "  trace: {} {}, host {}, {} event classes ({} metadata version(s))",
            env("domain"),
            env("tracer_name"),
            env("hostname"),
            t.events.len(),
            st.metadata_versions
        );
    }
    summary_events(&c);
    println!(
        "  BlkKin: {} events → {spans} spans ({open} of them closed at the end){}",
        bstats.events,
        if bstats.malformed > 0 {
            format!(", {} malformed events not used", bstats.malformed)
        } else {
            String::new()
        }
    );
    if let Some(m) = delays.median() {
        println!(
            "  delay from a span's end to its output: median {:.3} s, max {:.3} s over {} spans closed while live",
            m as f64 / 1e9,
            delays.max as f64 / 1e9,
            delays.n
        );
    }
    let discarded = st.discarded_events.max(dec.discarded_events);
    if discarded > 0 || dec.lost_packets > 0 {
        println!(
            "  tracer losses: {discarded} events discarded by the tracer, {} packets missing (the tracer's buffers filled: use bigger or more sub-buffers)",
            dec.lost_packets
        );
    }
    if dec.errors > 0 {
        println!("  decoding errors: {} ({} bytes skipped)", dec.errors, dec.skipped_bytes);
        for s in &dec.error_samples {
            println!("    {s}");
        }
    }
    summary_wrote(&args.out, spans, &c);
    print_sinks(&report.sinks);
    if let Some(e) = report.sources.iter().find_map(|s| s.error.as_ref()) {
        anyhow::bail!("following {url} (what was received is written): {e}");
    }
    if dec.errors > 0 && args.out.strict {
        anyhow::bail!("decoding errors");
    }
    Ok(())
}
