//! The fault suite (in the spirit of Jepsen): writers send continuously to the real `weft
//! serve` over OTLP/HTTP, retrying whatever was not acknowledged, while the server is SIGKILLed
//! at seeded random points and restarted on the same data directory. Small flush and
//! maintenance settings make kills land mid-append, mid-flush, mid-compaction and in the
//! retention pass. At the end every acknowledged span must read back exactly once.
//!
//! `WEFT_FAULT_SEED` replays a run; `WEFT_FAULT_CYCLES` sets the number of kills.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use weft_model::TraceId;
use weft_model::codec::otlp;
use weft_synth::sample::Rng;

use crate::WeftServe;
use crate::crash::batch_of;

/// Spans per request.
const SPANS: usize = 20;
const WRITERS: usize = 3;

const FLAGS: &[&str] = &[
    "--flush-size",
    "64KiB",
    "--flush-interval",
    "300ms",
    "--maintenance-interval",
    "200ms",
    // Retention runs every maintenance pass; by age, so it deletes nothing acknowledged here.
    "--retention",
    "30d",
];

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// What the writers share with the test: where the server is now, and what was acknowledged.
#[derive(Default)]
struct Writers {
    url: Mutex<Option<String>>,
    stop: AtomicBool,
    next: AtomicU64,
    acked: Mutex<BTreeSet<u64>>,
    /// Requests sent again after an error, a refusal or no answer.
    retries: AtomicU64,
}

impl Writers {
    /// Sends batches until `stop`; each batch is retried until it is acknowledged (the server
    /// comes back), so when the writers return every batch they sent was acknowledged.
    fn run(&self) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(20)))
            .max_idle_connections(0)
            .build()
            .into();
        while !self.stop.load(Ordering::Relaxed) {
            let b = self.next.fetch_add(1, Ordering::Relaxed);
            let body = otlp::encode_proto(&batch_of(b, SPANS));
            let deadline = Instant::now() + Duration::from_secs(120);
            loop {
                assert!(Instant::now() < deadline, "batch {b} never acknowledged");
                let url = self.url.lock().clone();
                let Some(url) = url else {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                };
                match agent.post(&url).header("Content-Type", "application/x-protobuf").send(&body[..]) {
                    Ok(r) if r.status().as_u16() == 200 => {
                        self.acked.lock().insert(b);
                        break;
                    }
                    Ok(r) if matches!(r.status().as_u16(), 429 | 503) => {}
                    Ok(r) => panic!("batch {b}: unexpected status {}", r.status()),
                    // Killed with this request in flight, or not up yet: it may have been stored.
                    Err(_) => {}
                }
                self.retries.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(30));
            }
            std::thread::sleep(Duration::from_millis(15));
        }
    }
}

/// Segment files the manifest does not name: the kill landed in a flush or a compaction
/// (written, not yet published); the next open deletes them.
fn unpublished_segment_files(dir: &std::path::Path) -> usize {
    let named: BTreeSet<String> = weft_store::manifest::load(dir)
        .expect("manifest")
        .map(|m| m.segments.iter().flat_map(|s| s.files.iter().map(|f| f.file.clone())).collect())
        .unwrap_or_default();
    std::fs::read_dir(dir.join("segments"))
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| !named.contains(&e.file_name().to_string_lossy().into_owned()))
                .count()
        })
        .unwrap_or(0)
}

/// The trace id of batch `b` (as `batch_of` makes it).
fn trace_of(b: u64) -> TraceId {
    batch_of(b, 1)[0].trace_id
}

#[test]
fn sigkill_at_random_points_loses_and_duplicates_no_acknowledged_span() {
    let seed = env_u64("WEFT_FAULT_SEED", 0x018f_4017);
    let cycles = env_u64("WEFT_FAULT_CYCLES", 14);
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let w = Writers::default();
    let (mut flushes, mut compactions, mut replayed, mut torn) = (0.0, 0.0, 0.0, 0.0);
    let (mut kills_after_flush, mut kills_after_compaction, mut kills_mid_write) = (0, 0, 0);
    let srv = std::thread::scope(|sc| {
        for _ in 0..WRITERS {
            sc.spawn(|| w.run());
        }
        for _ in 0..cycles {
            let srv = WeftServe::start(dir.path(), FLAGS);
            replayed += srv.metric("weft_wal_records_replayed_total");
            torn += srv.metric("weft_wal_records_torn_total");
            *w.url.lock() = Some(format!("http://{}/v1/traces", srv.otlp_http));
            // From right after start-up (replayed data being flushed) to a few flushes and
            // compactions in.
            std::thread::sleep(Duration::from_millis(100 + rng.below(2400)));
            let (f, c) = (srv.metric("weft_store_flushes_total"), srv.metric("weft_store_compactions_total"));
            flushes += f;
            compactions += c;
            kills_after_flush += usize::from(f > 0.0);
            kills_after_compaction += usize::from(c > 0.0);
            srv.kill9();
            kills_mid_write += usize::from(unpublished_segment_files(dir.path()) > 0);
            *w.url.lock() = None;
            std::thread::sleep(Duration::from_millis(rng.below(200)));
        }
        let srv = WeftServe::start(dir.path(), FLAGS);
        *w.url.lock() = Some(format!("http://{}/v1/traces", srv.otlp_http));
        std::thread::sleep(Duration::from_millis(500));
        w.stop.store(true, Ordering::Relaxed);
        srv
    });
    let acked = w.acked.into_inner();
    let sent = w.next.load(Ordering::Relaxed);
    assert_eq!(acked.len() as u64, sent, "every batch sent was acknowledged in the end");

    // SQL shows what is stored: a batch a retry sent again after the server had written it is
    // stored twice until compaction merges the copies.
    let rows = srv.query(
        "SELECT CAST(attributes['batch'] AS BIGINT) AS b, count(*) AS n, count(DISTINCT span_id) AS d \
         FROM spans WHERE service_name = 'crash-test' GROUP BY 1 ORDER BY 1",
    );
    let stored: BTreeMap<u64, (u64, u64)> = rows
        .iter()
        .map(|r| (r[0].as_u64().expect("batch"), (r[1].as_u64().expect("n"), r[2].as_u64().expect("d"))))
        .collect();
    let mut lost = 0u64;
    let mut stored_twice = 0u64;
    let mut to_read = Vec::new();
    for b in &acked {
        match stored.get(b) {
            Some(&(n, d)) if d == SPANS as u64 => {
                if n != d {
                    stored_twice += 1;
                    to_read.push(*b);
                }
            }
            Some(&(_, d)) => lost += SPANS as u64 - d,
            None => lost += SPANS as u64,
        }
    }
    assert!(stored.keys().all(|b| acked.contains(b)), "a batch stored that was never sent");
    // The trace API (and search, the UI) reads each span once: every batch SQL holds more than
    // once, and a sample of the others.
    let step = (acked.len() / 200).max(1);
    to_read.extend(acked.iter().step_by(step));
    let mut duplicated = 0u64;
    let mut verified = 0u64;
    for b in &to_read {
        let v = srv.get_json(srv.http, &format!("/api/v3/traces/{}", trace_of(*b)));
        let spans = otlp::decode_json(v["result"].to_string().as_bytes()).unwrap();
        let ids: BTreeSet<_> = spans.iter().map(|s| s.span_id).collect();
        duplicated += (spans.len() - ids.len()) as u64;
        let want: BTreeSet<_> = batch_of(*b, SPANS).iter().map(|s| s.span_id).collect();
        lost += want.difference(&ids).count() as u64;
        verified += ids.len() as u64;
    }
    let spans_acked = acked.len() as u64 * SPANS as u64;
    eprintln!(
        "fault suite (seed {seed:#x}): {cycles} cycles, {cycles} SIGKILLs ({kills_mid_write} mid-flush or \
         mid-compaction, {kills_after_flush} after a flush and {kills_after_compaction} after a compaction in the \
         same life; {flushes} flushes, {compactions} compactions, \
         {replayed} WAL records replayed, {torn} torn tails cut); {} requests retried; {spans_acked} spans \
         acknowledged, all {spans_acked} stored (SQL), {verified} read back through the trace API \
         ({} batches stored twice by retries, read once); lost {lost}, duplicated {duplicated}",
        w.retries.load(Ordering::Relaxed),
        stored_twice,
    );
    assert_eq!(lost, 0, "acknowledged spans lost");
    assert_eq!(duplicated, 0, "spans read back twice");
    assert!(kills_after_flush > 0, "no kill followed a flush");
}
