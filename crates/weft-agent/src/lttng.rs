//! `--lttng-live`: the agent follows the local `lttng-relayd`'s live sessions — every session
//! of it (`net://HOST[:PORT]`, sessions created later included) or one
//! (`net://HOST[:PORT]/host/HOSTNAME/SESSION`) — weaves their BlkKin events into spans with
//! [`weft_weave::live`] (the reader and weaver `weft import ctf --live` runs) and spools the spans like the
//! probe rings' ([`crate::spool`], then [`crate::ship`]).
//!
//! One thread per target. A session whose relay daemon goes away is re-attached with capped
//! exponential backoff; the relay daemon re-serves a re-attached session from its beginning,
//! and what was read before is skipped per stream (by time and count, see
//! [`weft_weave::live`]), so a span is built, and spooled, once. A relay daemon that restarted
//! has forgotten its sessions: they end (their open spans are spooled) and the sessions
//! created afterwards are followed. The per-session figures (state, events, spans, the
//! tracer's discarded events) go to [`Metrics`] and from there into the collector's report
//! and `GET /metrics`.
//!
//! Delivery: a span leaves the weaver once and enters the spool once; from the spool on it is
//! the agent's at-least-once shipping. What the agent reads is not persisted: an agent that
//! restarts reads the sessions again from their beginning (the relay daemon keeps them).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use weft_control::proto::LttngSessionReport;
use weft_model::{SourceId, Span};
use weft_sources::ctf::live::LiveTarget;
use weft_weave::live::{FollowOptions, Follower, SessionReport};

use crate::agent::encode_batch;
use crate::metrics::Metrics;
use crate::spool::{Appended, Spool};

/// Pause when no session had anything new (a fraction of LTTng's live timer).
const IDLE_WAIT: Duration = Duration::from_millis(20);
/// Spans held at most while the spool refuses appends (more are dropped, counted).
const MAX_HELD_SPANS: usize = 100_000;

/// What a follower thread needs.
pub struct LiveConfig {
    pub target: LiveTarget,
    pub follow: FollowOptions,
    /// Its index in the metrics' per-target list.
    pub slot: usize,
    pub batch_interval: Duration,
    pub max_batch_spans: usize,
    pub compress: bool,
}

fn report(s: SessionReport) -> LttngSessionReport {
    LttngSessionReport {
        url: s.url.to_string(),
        host: s.url.host.clone(),
        session: s.url.session.clone(),
        state: s.state.name().to_string(),
        events: s.counts.events,
        spans: s.counts.spans,
        discarded_events: s.counts.discarded_events,
        lost_packets: s.counts.lost_packets,
        replayed_events: s.counts.replayed_events,
        reconnects: s.counts.reconnects,
        decode_errors: s.counts.decode_errors,
        last_error: s.last_error,
    }
}

fn publish(f: &Follower, cfg: &LiveConfig, m: &Metrics) {
    m.set_lttng(cfg.slot, f.sessions().into_iter().map(report).collect(), f.totals());
}

/// Spools `spans` in batches; keeps them when the spool fails (bounded).
fn flush(spans: &mut Vec<Span>, cfg: &LiveConfig, spool: &Spool, m: &Metrics) {
    while !spans.is_empty() {
        let n = spans.len().min(cfg.max_batch_spans.max(1));
        let body = encode_batch(&spans[..n], cfg.compress);
        match spool.append(&body, n as u32, cfg.compress) {
            Ok(Appended::Stored { .. }) => {
                m.batches_spooled.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Appended::Dropped) => {}
            Err(e) => {
                m.spool_errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %e, "cannot append LTTng spans to the spool; keeping them");
                if spans.len() > MAX_HELD_SPANS {
                    let drop = spans.len() - MAX_HELD_SPANS;
                    spans.drain(..drop);
                    m.lttng_spans_dropped.fetch_add(drop as u64, Ordering::Relaxed);
                }
                return;
            }
        }
        spans.drain(..n);
    }
    m.set_spool(spool.stats());
}

/// Follows `cfg.target` until `stop`; then outputs every open span and spools it.
pub fn run(cfg: LiveConfig, spool: Arc<Spool>, m: Arc<Metrics>, stop: Arc<AtomicBool>) {
    let target = cfg.target.to_string();
    let mut f = match Follower::open(cfg.target.clone(), SourceId(0), cfg.follow.clone()) {
        Ok(f) => f,
        Err(e) => {
            // (with reconnecting on, opening only parses)
            tracing::error!(target = %target, "cannot follow: {e}");
            return;
        }
    };
    tracing::info!(target = %target, "following LTTng live sessions");
    let mut spans: Vec<Span> = Vec::new();
    let mut last_flush = Instant::now();
    let mut last_publish = Instant::now();
    loop {
        if stop.load(Ordering::Relaxed) {
            f.finish(&mut spans);
            flush(&mut spans, &cfg, &spool, &m);
            publish(&f, &cfg, &m);
            return;
        }
        let polled = match f.poll(&mut spans) {
            Ok(p) => p,
            Err(e) => {
                // (only without reconnecting, which the agent always does)
                tracing::error!(target = %target, "{e}");
                return;
            }
        };
        if spans.len() >= cfg.max_batch_spans
            || (!spans.is_empty() && last_flush.elapsed() >= cfg.batch_interval)
        {
            flush(&mut spans, &cfg, &spool, &m);
            last_flush = Instant::now();
        }
        if last_publish.elapsed() >= Duration::from_millis(200) || polled.ended {
            publish(&f, &cfg, &m);
            last_publish = Instant::now();
        }
        if polled.ended {
            // One session, destroyed and read: nothing more will come.
            f.finish(&mut spans);
            flush(&mut spans, &cfg, &spool, &m);
            publish(&f, &cfg, &m);
            tracing::info!(target = %target, "session ended");
            return;
        }
        if polled.events == 0 {
            std::thread::sleep(IDLE_WAIT);
        }
    }
}
