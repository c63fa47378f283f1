//! `weft import ctf --live URL`: follows an LTTng live session through `lttng-relayd`
//! ([`weft_sources::ctf::live`]) and streams its BlkKin spans and events to the outputs of
//! `weft import ctf DIR`, through the same decoder and the same weaver, so a session gives the
//! same spans read live or afterwards.
//!
//! Spans are output once no event touched them for `--span-idle-ms` of trace time, measured
//! against the live merge's watermark (which inactivity beacons move forward while nothing is
//! traced); everything still open is output when the session ends, on Ctrl-C, or when the
//! relay daemon goes away (then the import fails after writing what it received).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use weft_model::SourceId;
use weft_sources::ctf::live::Poll;
use weft_sources::ctf::{DecodeOptions, LiveOptions, LiveReader, LiveUrl};
use weft_weave::blkin::{BlkkinOptions, BlkkinWeaver};

use super::{BATCH, CtfArgs, Importer, SPAN_BATCH, imp_counts, summary_events, summary_wrote};

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

/// Runs `weft import ctf --live URL`.
pub(super) fn run(args: &CtfArgs, url: &str) -> anyhow::Result<()> {
    let url = LiveUrl::parse(url)?;
    let started = Instant::now();
    let opts = LiveOptions {
        decode: DecodeOptions { strict: args.out.strict, ..DecodeOptions::default() },
        ..LiveOptions::default()
    };
    let mut reader = LiveReader::open(&url, SourceId(args.out.source_id), opts)
        .with_context(|| format!("following {url}"))?;
    // SAFETY: installing an async-signal-safe handler that only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    let (span_files, store, mut events_file) = args.out.open()?;
    let keep_events = !args.out.no_events && (store.is_some() || events_file.is_some());
    let mut imp = Importer::new(span_files, store.as_ref(), events_file.as_mut(), keep_events);
    imp.weaver = BlkkinWeaver::new(BlkkinOptions {
        idle_ns: Some(args.span_idle_ms.saturating_mul(1_000_000)),
        ..BlkkinOptions::default()
    });
    let bar = weft_cli::progress::spinner("live");
    let mut delays = Delays::default();
    let mut batch = Vec::with_capacity(BATCH);
    let mut stopped = false;
    let read: anyhow::Result<()> = (|| loop {
        if STOP.load(Ordering::SeqCst) {
            stopped = true;
            reader.detach()?;
            return Ok(());
        }
        batch.clear();
        let polled = reader.poll(&mut batch, BATCH)?;
        if !batch.is_empty() {
            imp.events(&batch)?;
            for e in &batch {
                imp.weaver.push(e);
            }
        }
        imp.weaver.advance(reader.watermark());
        let before = imp.pending_spans.len();
        imp.weaver.drain(&mut imp.pending_spans);
        if imp.pending_spans.len() > before {
            let now = now_ns();
            for s in &imp.pending_spans[before..] {
                delays.add(now.saturating_sub(s.end_ns));
            }
        }
        let idle = polled == Poll::Idle;
        if idle || imp.pending_spans.len() >= SPAN_BATCH {
            imp.flush_spans()?;
        }
        let st = reader.stats();
        bar.set_message(format!(
            "{} events, {} spans, {} packets, {}/{} streams open",
            imp.events,
            imp.spans_out,
            st.packets,
            reader.active_streams(),
            st.streams
        ));
        match polled {
            Poll::End => return Ok(()),
            Poll::Idle => std::thread::sleep(IDLE_WAIT),
            Poll::Events(_) => {}
        }
    })();
    bar.finish_and_clear();
    // Whatever ended the read, output what was received.
    let open = imp.weaver.open_spans();
    let (spans, bstats) = imp.finish()?;
    if let Some(s) = &store {
        s.close().context("flushing the data directory")?;
    }
    let st = reader.stats().clone();
    let dec = reader.decode_stats();
    let c = imp_counts(&imp);
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
    read.with_context(|| format!("following {url} (what was received is written)"))?;
    if dec.errors > 0 && args.out.strict {
        anyhow::bail!("decoding errors");
    }
    Ok(())
}
