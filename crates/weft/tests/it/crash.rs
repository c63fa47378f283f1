//! Reliability of the real binary: SIGKILL mid-stream loses no acknowledged span and stores
//! none twice; under a load above capacity the server refuses (503/429 with Retry-After),
//! counts what it refused, and its buffer stays within its bound.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use weft_model::codec::otlp;
use weft_model::{Resource, Span, SpanId, SpanKind, TraceId};

use crate::WeftServe;

const BATCH: usize = 100;

/// Batch `b` of the stream: `BATCH` spans in one trace.
fn batch(b: u64) -> Vec<Span> {
    batch_of(b, BATCH)
}

/// Batch `b` of a stream: `n` spans in one trace, every span carrying its batch number, ids
/// derived from (b, i) so that a duplicate or a missing span is visible.
pub(crate) fn batch_of(b: u64, n: usize) -> Vec<Span> {
    let mut r = Resource::default();
    r.attributes.push("service.name", "crash-test");
    let resource = Arc::new(r);
    let mut t = [0u8; 16];
    t[..8].copy_from_slice(&0x5eed_0000_0000_0000u64.to_be_bytes());
    t[8..].copy_from_slice(&b.to_be_bytes());
    let start = weft_model::time::now_unix_nanos() - 60_000_000_000;
    (0..n as u64)
        .map(|i| {
            let mut s = Span {
                trace_id: TraceId(t),
                span_id: SpanId(((b << 20) | (i + 1)).to_be_bytes()),
                parent_span_id: (i > 0).then(|| SpanId(((b << 20) | 1).to_be_bytes())),
                name: format!("op-{}", i % 7).into(),
                kind: if i == 0 { SpanKind::Server } else { SpanKind::Internal },
                start_ns: start + i * 1_000,
                end_ns: start + i * 1_000 + 500_000,
                resource: resource.clone(),
                ..Span::default()
            };
            s.attributes.push("batch", b as i64);
            s.attributes.push("seq", i as i64);
            s.attributes.push("payload", "x".repeat(40));
            s
        })
        .collect()
}

/// Sends batches `first..` from `threads` connections until `stop` is set or the server goes
/// away; returns the batches answered 200 (acknowledged) and those sent without an answer.
fn stream(srv: &WeftServe, first: u64, threads: usize, stop: &AtomicBool) -> (BTreeSet<u64>, BTreeSet<u64>) {
    let url = format!("http://{}/v1/traces", srv.otlp_http);
    let next = AtomicU64::new(first);
    let acked = Mutex::new(BTreeSet::new());
    let unknown = Mutex::new(BTreeSet::new());
    std::thread::scope(|sc| {
        for _ in 0..threads {
            sc.spawn(|| {
                let agent: ureq::Agent = ureq::Agent::config_builder()
                    .http_status_as_error(false)
                    .timeout_global(Some(Duration::from_secs(30)))
                    .build()
                    .into();
                while !stop.load(Ordering::Relaxed) {
                    let b = next.fetch_add(1, Ordering::Relaxed);
                    let body = otlp::encode_proto(&batch(b));
                    match agent.post(&url).header("Content-Type", "application/x-protobuf").send(&body[..]) {
                        Ok(r) if r.status().as_u16() == 200 => {
                            acked.lock().insert(b);
                        }
                        Ok(r) => panic!("batch {b}: unexpected status {}", r.status()),
                        Err(_) => {
                            // The server died with this request in flight: it may or may not
                            // have stored it.
                            unknown.lock().insert(b);
                            return;
                        }
                    }
                }
            });
        }
    });
    (acked.into_inner(), unknown.into_inner())
}

/// Batch → (span rows, distinct span ids) as the store has them.
fn stored(srv: &WeftServe) -> BTreeMap<u64, (u64, u64)> {
    let rows = srv.query(
        "SELECT CAST(attributes['batch'] AS BIGINT) AS b, count(*) AS n, count(DISTINCT span_id) AS d \
         FROM spans WHERE service_name = 'crash-test' GROUP BY 1 ORDER BY 1",
    );
    rows.iter()
        .map(|r| (r[0].as_u64().expect("batch"), (r[1].as_u64().expect("n"), r[2].as_u64().expect("d"))))
        .collect()
}

fn check_exactly_once(srv: &WeftServe, acked: &BTreeSet<u64>, maybe: &BTreeSet<u64>) {
    let got = stored(srv);
    eprintln!(
        "after restart: {} batches acknowledged, {} in flight at the kill, {} stored ({} of those in flight); {} WAL records replayed, {} torn",
        acked.len(),
        maybe.len(),
        got.len(),
        got.keys().filter(|b| maybe.contains(b)).count(),
        srv.metric("weft_wal_records_replayed_total"),
        srv.metric("weft_wal_records_torn_total"),
    );
    for b in acked {
        assert_eq!(
            got.get(b),
            Some(&(BATCH as u64, BATCH as u64)),
            "acknowledged batch {b}: (rows, distinct spans)"
        );
    }
    for (b, (n, d)) in &got {
        assert!(acked.contains(b) || maybe.contains(b), "batch {b} stored but never sent");
        assert_eq!((*n, *d), (BATCH as u64, BATCH as u64), "batch {b}: every span once, no partial batch");
    }
}

/// Streams until at least `min_acked` batches are acknowledged and `min_flushes` segments were
/// written (the server's own counters), then SIGKILLs the server with requests in flight.
fn stream_and_kill(
    srv: WeftServe,
    first: u64,
    min_acked: u64,
    min_flushes: f64,
) -> (BTreeSet<u64>, BTreeSet<u64>) {
    let stop = AtomicBool::new(false);
    let pid = srv.pid();
    let metrics_url = format!("http://{}/metrics", srv.http);
    let out = std::thread::scope(|sc| {
        sc.spawn(|| {
            let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
            let deadline = Instant::now() + Duration::from_secs(300);
            loop {
                std::thread::sleep(Duration::from_millis(20));
                let text = agent
                    .get(&metrics_url)
                    .call()
                    .ok()
                    .and_then(|mut r| r.body_mut().read_to_string().ok())
                    .unwrap_or_default();
                let metric = |p: &str| -> f64 {
                    text.lines()
                        .filter(|l| l.starts_with(p))
                        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                        .sum()
                };
                let spans = metric("weft_spans_accepted_total");
                let flushes = metric("weft_store_flushes_total");
                if (spans >= (min_acked * BATCH as u64) as f64 && flushes >= min_flushes)
                    || Instant::now() > deadline
                {
                    break;
                }
            }
            // SAFETY: kill(2) on our own child's pid, while the senders are mid-request.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        });
        stream(&srv, first, 4, &stop)
    });
    srv.kill9(); // reaps the killed child
    out
}

#[test]
fn sigkill_mid_stream_loses_no_acknowledged_span_and_duplicates_none() {
    let dir = tempfile::tempdir().unwrap();
    // Small buffers: segments are flushed (and the WAL rotated and trimmed) all through the
    // stream, so the kill can land anywhere in that cycle.
    let flags = ["--flush-size", "256KiB", "--flush-interval", "1s"];
    let srv = WeftServe::start(dir.path(), &flags);
    let (acked1, maybe1) = stream_and_kill(srv, 0, 60, 2.0);
    assert!(acked1.len() >= 60, "{} batches acknowledged", acked1.len());

    let srv = WeftServe::start(dir.path(), &flags);
    check_exactly_once(&srv, &acked1, &maybe1);

    // Again, on top of the recovered data: the second kill lands while the replayed WAL is
    // being flushed or right after.
    let (acked2, maybe2) = stream_and_kill(srv, 1_000_000, 30, 0.0);
    let srv = WeftServe::start(dir.path(), &flags);
    let acked: BTreeSet<u64> = acked1.union(&acked2).copied().collect();
    let maybe: BTreeSet<u64> = maybe1.union(&maybe2).copied().collect();
    check_exactly_once(&srv, &acked, &maybe);

    // A clean stop flushes everything to segments; the data stays the same.
    let out = srv.stop();
    assert!(out.iter().any(|l| l.starts_with("stopped:")), "{out:?}");
    let srv = WeftServe::start(dir.path(), &flags);
    check_exactly_once(&srv, &acked, &maybe);
}

#[test]
fn load_above_capacity_is_refused_counted_and_bounded() {
    let dir = tempfile::tempdir().unwrap();
    // A buffer far smaller than what the senders push, flushed only past 1 MiB: the server
    // must refuse (503) rather than grow.
    let max_buffer: u64 = 2 << 20;
    let srv = WeftServe::start(
        dir.path(),
        &["--flush-size", "1MiB", "--max-buffer", "2MiB", "--max-inflight", "2MiB", "--fsync", "always"],
    );
    // The server opts out of transparent huge pages (each first touch zeroed 2 MiB); kernels
    // older than 5.0 do not show the flag.
    let status = std::fs::read_to_string(format!("/proc/{}/status", srv.pid())).unwrap();
    if let Some(thp) = status.lines().find(|l| l.starts_with("THP_enabled:")) {
        assert!(thp.ends_with('0'), "{thp}");
    }
    let url = format!("http://{}/v1/traces", srv.otlp_http);
    let status_url = format!("http://{}/api/status", srv.http);
    let stop = AtomicBool::new(false);
    let codes = Mutex::new(BTreeMap::<u16, u64>::new());
    let refused_spans = AtomicU64::new(0);
    let peak_buffer = AtomicU64::new(0);
    let body = otlp::encode_proto(&(0..10).flat_map(|k| batch(5_000 + k)).collect::<Vec<_>>()); // 1000 spans per request
    std::thread::scope(|sc| {
        for _ in 0..6 {
            sc.spawn(|| {
                let agent: ureq::Agent =
                    ureq::Agent::config_builder().http_status_as_error(false).build().into();
                let deadline = Instant::now() + Duration::from_secs(20);
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    let r = agent.post(&url).header("Content-Type", "application/x-protobuf").send(&body[..]);
                    let Ok(r) = r else { continue };
                    let code = r.status().as_u16();
                    if code == 503 || code == 429 {
                        let retry =
                            r.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_owned);
                        assert!(retry.is_some(), "{code} without Retry-After");
                        if code == 503 {
                            refused_spans.fetch_add(1000, Ordering::Relaxed);
                        }
                    } else {
                        assert_eq!(code, 200);
                    }
                    *codes.lock().entry(code).or_default() += 1;
                }
            });
        }
        sc.spawn(|| {
            let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
            for _ in 0..400 {
                if let Ok(mut r) = agent.get(&status_url).call() {
                    let v: serde_json::Value =
                        serde_json::from_str(&r.body_mut().read_to_string().unwrap_or_default())
                            .unwrap_or_default();
                    if let Some(b) = v["store"]["buffer_bytes"].as_u64() {
                        peak_buffer.fetch_max(b, Ordering::Relaxed);
                    }
                }
                if codes.lock().get(&503).copied().unwrap_or(0) >= 5 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(25));
            }
            stop.store(true, Ordering::Relaxed);
        });
    });
    let codes = codes.into_inner();
    assert!(
        codes.get(&503).copied().unwrap_or(0) + codes.get(&429).copied().unwrap_or(0) > 0,
        "never refused: {codes:?}"
    );
    assert!(codes.get(&200).copied().unwrap_or(0) > 0, "nothing accepted: {codes:?}");
    // Every refusal is counted, by reason.
    assert_eq!(
        srv.metric("weft_spans_dropped_total{receiver=\"otlp_http\",reason=\"overloaded\"}"),
        refused_spans.load(Ordering::Relaxed) as f64
    );
    assert_eq!(
        srv.metric("weft_requests_throttled_total{receiver=\"otlp_http\"}"),
        codes.get(&429).copied().unwrap_or(0) as f64
    );
    // Accepted = what was answered 200; nothing accepted was lost.
    let accepted = codes.get(&200).copied().unwrap_or(0) * 1000;
    assert_eq!(srv.metric("weft_spans_accepted_total{receiver=\"otlp_http\"}"), accepted as f64);
    // The buffer never passed its bound by more than one in-flight append per sender.
    let peak = peak_buffer.load(Ordering::Relaxed);
    assert!(peak <= max_buffer + 6 * (2 << 20), "buffer peaked at {peak} bytes (bound {max_buffer})");
}
