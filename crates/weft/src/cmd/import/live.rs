//! `weft import ctf --live URL`: follows an LTTng live session through `lttng-relayd`
//! ([`weft_weave::live`], the code the agent's `--lttng-live` runs too) and streams its BlkKin
//! spans and events to the outputs of `weft import ctf DIR`, through the same decoder and the
//! same weaver, so a session gives the same spans read live or afterwards.
//!
//! Spans are output once no event touched them for `--span-idle-ms` of trace time, measured
//! against the live merge's watermark (which inactivity beacons move forward while nothing is
//! traced); everything still open is output when the session ends, on Ctrl-C, or when the
//! relay daemon goes away (then the import fails after writing what it received).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use weft_model::{Event, SourceId, Span};
use weft_sources::ctf::{DecodeOptions, LiveOptions, LiveTarget, LiveUrl};
use weft_weave::live::{FollowOptions, Follower};
use weft_weave::sink::{SinkHandle, SinkReport};

use super::{BATCH, CtfArgs, SPAN_BATCH, finish_events, print_sinks, summary_events, summary_wrote};

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

/// Hands `spans` to every sink (and empties it).
fn send(sinks: &[SinkHandle], spans: &mut Vec<Span>, written: &mut u64) {
    if spans.is_empty() {
        return;
    }
    *written += spans.len() as u64;
    let batch = Arc::new(std::mem::take(spans));
    for s in sinks {
        s.send(&batch);
    }
}

/// Runs `weft import ctf --live URL`.
pub(super) fn run(args: &CtfArgs, url: &str) -> anyhow::Result<()> {
    let url = LiveUrl::parse(url)?;
    let started = Instant::now();
    let opts = FollowOptions {
        live: LiveOptions {
            decode: DecodeOptions { strict: args.out.strict, ..DecodeOptions::default() },
            ..LiveOptions::default()
        },
        span_idle_ns: args.span_idle_ms.saturating_mul(1_000_000),
        batch_events: BATCH,
        ..FollowOptions::default()
    };
    let mut follower = Follower::open(LiveTarget::Session(url.clone()), SourceId(args.out.source_id), opts)
        .with_context(|| format!("following {url}"))?;
    // SAFETY: installing an async-signal-safe handler that only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    let out = args.out.open()?;
    let sinks = out.sinks.into_iter().map(SinkHandle::start).collect::<Result<Vec<_>, _>>()?;
    let bar = weft_cli::progress::spinner("live");
    let mut delays = Delays::default();
    let (mut events, mut spans) = (Vec::<Event>::with_capacity(BATCH), Vec::<Span>::new());
    let (mut written, mut read_events) = (0u64, 0u64);
    let mut stopped = false;
    let read: anyhow::Result<()> = (|| loop {
        if STOP.load(Ordering::SeqCst) {
            stopped = true;
            return Ok(());
        }
        events.clear();
        let before = spans.len();
        let polled = follower.poll(Some(&mut events), &mut spans);
        read_events += events.len() as u64;
        if !events.is_empty() {
            super::tap_events(&out.tap, &events).map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        if spans.len() > before {
            let now = now_ns();
            for s in &spans[before..] {
                delays.add(now.saturating_sub(s.end_ns));
            }
        }
        let polled = polled?;
        if polled.events == 0 || spans.len() >= SPAN_BATCH {
            send(&sinks, &mut spans, &mut written);
        }
        let (st, _) = follower.live_stats();
        bar.set_message(format!(
            "{read_events} events, {written} spans, {} packets, {}/{} streams open",
            st.packets,
            st.streams.saturating_sub(st.streams_ended),
            st.streams
        ));
        if polled.ended {
            return Ok(());
        }
        if polled.events == 0 {
            std::thread::sleep(IDLE_WAIT);
        }
    })();
    bar.finish_and_clear();
    // Whatever ended the read, output what was received.
    let (_, open) = follower.blkin();
    follower.finish(&mut spans);
    send(&sinks, &mut spans, &mut written);
    let mut reports: Vec<SinkReport> = Vec::new();
    for s in sinks {
        reports.push(s.finish()?);
    }
    let c = finish_events(&out.tap)?;
    if let Some(s) = &out.store {
        s.close().context("flushing the data directory")?;
    }
    let (st, dec) = follower.live_stats();
    let (bstats, _) = follower.blkin();
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
    for t in follower.traces() {
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
        "  BlkKin: {} events → {written} spans ({open} of them closed at the end){}",
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
    summary_wrote(&args.out, written, &c);
    print_sinks(&reports);
    read.with_context(|| format!("following {url} (what was received is written)"))?;
    if dec.errors > 0 && args.out.strict {
        anyhow::bail!("decoding errors");
    }
    Ok(())
}
