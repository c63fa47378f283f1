//! Several collectors, one store (feature `s3`): three `weft serve` collectors write into one
//! SeaweedFS bucket, each under its own prefix of `s3://weft/fleet/`, behind two round-robin
//! senders — `weft loadgen` with three endpoints, and the OpenTelemetry Python SDK with one
//! BatchSpanProcessor + OTLPSpanExporter per collector and a span processor that hands each
//! span to the next (`tests/peers/otel_roundrobin.py`). Collector 2 is SIGKILLed mid-run and
//! restarted on the same data directory (its WAL replays and uploads); the senders go on with
//! the others meanwhile. After a graceful stop of the collectors, a fourth process,
//! `weft serve --read-only --segments s3://weft/fleet`, reads the union: every acknowledged span
//! in SQL (which shows what is stored: twice only what was in flight to the killed collector),
//! and through the Jaeger and Zipkin trace-by-id APIs exactly once, the traces whose spans went
//! to two or more collectors whole.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value as J;
use weft_store::{BucketConfig, Store, StoreConfig};
use weft_testkit::seaweed::{KEY, SECRET, Seaweed};

use crate::{WeftServe, weft_bin};

/// The prefix the collectors write under, one sub-prefix each.
const ROOT: &str = "s3://weft/fleet";
/// Spans `weft loadgen` sends, all distinct (`--pool` × `--batch` covers them).
const LOAD_SPANS: u64 = 24_000;
const LOAD_BATCH: u64 = 100;
/// The collector killed and restarted (0-based).
const VICTIM: usize = 1;

/// An acknowledged span: (trace id, span id), lowercase hex.
type Id = (String, String);

/// Polls `cond` every 200 ms until it holds; fails the test naming `what` after `secs`.
fn wait_for(what: &str, secs: u64, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn collector(dir: &Path, i: usize, credentials: &Path, on: Option<[std::net::SocketAddr; 4]>) -> WeftServe {
    let segments = format!("{ROOT}/collector-{i}");
    let credentials = credentials.to_string_lossy();
    let flags = [
        "--segments",
        &segments,
        "--segments-credentials",
        &credentials,
        "--flush-size",
        "256KiB",
        "--flush-interval",
        "500ms",
        "--maintenance-interval",
        "1s",
    ];
    match on {
        Some(listeners) => WeftServe::start_on(dir, listeners, &flags),
        None => WeftServe::start(dir, &flags),
    }
}

fn accepted(c: &WeftServe) -> f64 {
    c.metric("weft_spans_accepted_total{")
}

/// `weft loadgen` round-robin over `endpoints`, writing its acknowledged spans to `ack_log`.
fn start_loadgen(endpoints: &[String], ack_log: &Path, stderr: &Path) -> Child {
    Command::new(weft_bin())
        .args(["--quiet", "loadgen", "--endpoint", &endpoints.join(",")])
        .args(["--spans", &LOAD_SPANS.to_string(), "--batch", &LOAD_BATCH.to_string()])
        .args(["--pool", &(LOAD_SPANS / LOAD_BATCH).to_string(), "--rate", "2000", "--connections", "2"])
        .arg("--ack-log")
        .arg(ack_log)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(stderr).expect("create loadgen's stderr file"))
        .spawn()
        .expect("spawn weft loadgen")
}

/// The OpenTelemetry SDK sender: runs until its stdin is closed.
fn start_sdk(endpoints: &[String], stderr: &Path) -> Child {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/otel_roundrobin.py");
    Command::new(weft_testkit::python())
        .arg(script)
        .arg("20000")
        .args(endpoints.iter().map(|e| format!("{e}/v1/traces")))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        // A file, not a pipe nobody reads while it runs: the exporters log every retry.
        .stderr(std::fs::File::create(stderr).expect("create the SDK sender's stderr file"))
        .spawn()
        .expect("spawn otel_roundrobin.py (the peers' Python)")
}

/// Waits for a sender; its stdout on success.
fn finish(child: Child, what: &str, stderr: &Path) -> String {
    let out = child.wait_with_output().unwrap_or_else(|e| panic!("wait for {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}): {}{}",
        out.status,
        std::fs::read_to_string(stderr).unwrap_or_default(),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every id the reader's SQL holds, with how often, a page of 10,000 rows at a time.
fn stored_ids(reader: &WeftServe) -> BTreeMap<Id, u64> {
    let mut stored = BTreeMap::new();
    for page in 0.. {
        let rows = reader.query(&format!(
            "SELECT encode(trace_id, 'hex'), encode(span_id, 'hex') FROM spans ORDER BY 1, 2 LIMIT 10000 OFFSET {}",
            page * 10_000
        ));
        for r in &rows {
            let id =
                (r[0].as_str().expect("trace id").to_owned(), r[1].as_str().expect("span id").to_owned());
            *stored.entry(id).or_insert(0) += 1;
        }
        if rows.len() < 10_000 {
            break;
        }
    }
    stored
}

/// Span ids of one trace through the Jaeger query API and the Zipkin v2 API, in the order
/// returned (repeats kept).
fn read_trace(reader: &WeftServe, trace: &str) -> [(&'static str, Vec<String>); 2] {
    let ids = |v: &J, key: &str| -> Vec<String> {
        v.as_array()
            .unwrap_or_else(|| panic!("trace {trace}: no span list in {v}"))
            .iter()
            .map(|s| s[key].as_str().expect("span id").to_owned())
            .collect()
    };
    let jaeger = reader.get_json(reader.http, &format!("/api/traces/{trace}"));
    let zipkin = reader.get_json(reader.http, &format!("/api/v2/trace/{trace}"));
    [("Jaeger", ids(&jaeger["data"][0]["spans"], "spanID")), ("Zipkin", ids(&zipkin, "id"))]
}

#[test]
fn three_collectors_one_bucket_a_reader_sees_every_acknowledged_span_once_and_traces_whole() {
    let s3 = Seaweed::start();
    let credentials = s3.credentials(KEY, SECRET);
    let ready = tempfile::tempdir().unwrap();
    s3.wait_writable(|| {
        let mut c = StoreConfig::new(ready.path());
        c.bucket =
            Some(BucketConfig { url: "s3://weft/ready".into(), credentials_file: Some(credentials.clone()) });
        let tried = Store::open(c).and_then(|store| {
            store.append(&weft_synth::shop::Shop::new(1, 1_700_000_000_000_000_000, 1_000_000).spans(10))?;
            store.close()
        });
        tried.map_err(|e| e.to_string())
    });

    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut collectors: Vec<Option<WeftServe>> =
        dirs.iter().enumerate().map(|(i, d)| Some(collector(d.path(), i, &credentials, None))).collect();
    let endpoints: Vec<String> =
        collectors.iter().flatten().map(|c| format!("http://{}", c.otlp_http)).collect();
    let work = tempfile::tempdir().unwrap();
    let ack_log = work.path().join("loadgen-acked.txt");
    let (sdk_err, loadgen_err) = (work.path().join("sdk.stderr"), work.path().join("loadgen.stderr"));
    let mut sdk = start_sdk(&endpoints, &sdk_err);
    let loadgen = start_loadgen(&endpoints, &ack_log, &loadgen_err);
    let c = |collectors: &Vec<Option<WeftServe>>, i: usize| -> f64 {
        collectors[i].as_ref().map_or(0.0, accepted)
    };

    // Collector 2 dies once it holds a share of both senders' spans (acknowledged, in its WAL,
    // partly uploaded).
    // ... and holds spans not yet flushed (in its WAL): the kill must leave it something to replay.
    let buffered = |c: &WeftServe| c.metric("weft_buffer_spans ");
    wait_for("collector 2 took 3,000 spans, some not flushed yet", 300, || {
        c(&collectors, VICTIM) >= 3000.0 && collectors[VICTIM].as_ref().is_some_and(|c| buffered(c) >= 20.0)
    });
    let listeners = collectors[VICTIM].as_ref().expect("running").listeners();
    let before_kill = c(&collectors, VICTIM);
    collectors[VICTIM].take().expect("running").kill9();
    // The senders go on with the two others while it is down.
    let others = |collectors: &Vec<Option<WeftServe>>| c(collectors, 0) + c(collectors, 2);
    let at_kill = others(&collectors);
    wait_for("the other collectors took 1,500 more spans", 300, || others(&collectors) >= at_kill + 1500.0);
    let restarted = collector(dirs[VICTIM].path(), VICTIM, &credentials, Some(listeners));
    let replayed = restarted.metric("weft_wal_records_replayed_total");
    collectors[VICTIM] = Some(restarted);
    wait_for("the restarted collector 2 took 500 spans", 300, || c(&collectors, VICTIM) >= 500.0);
    let after_restart = c(&collectors, VICTIM);

    // The senders finish: the SDK when its stdin closes, loadgen after its spans.
    drop(sdk.stdin.take());
    let sdk_out: J =
        serde_json::from_str(&finish(sdk, "otel_roundrobin.py", &sdk_err)).expect("the SDK sender's JSON");
    let loadgen_out = finish(loadgen, "weft loadgen", &loadgen_err);
    // Graceful stops: each collector flushes and uploads what it buffered.
    for c in collectors.iter_mut() {
        let out = c.take().expect("running").stop();
        assert!(out.iter().any(|l| l.starts_with("stopped:")), "{out:?}");
    }

    // What was acknowledged, and by which collector.
    let mut acked: BTreeMap<Id, usize> = BTreeMap::new();
    let log = std::fs::read_to_string(&ack_log).expect("loadgen's --ack-log");
    for line in log.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let collector = endpoints.iter().position(|e| f.get(2) == Some(&e.as_str()));
        let (Some(collector), [trace, span, _]) = (collector, f.as_slice()) else {
            panic!("--ack-log line {line:?}: expected TRACE SPAN ENDPOINT")
        };
        acked.insert((trace.to_string(), span.to_string()), collector);
    }
    let from_loadgen = acked.len();
    assert_eq!(from_loadgen as u64, LOAD_SPANS, "loadgen's spans, each acknowledged once: {loadgen_out}");
    for row in sdk_out["exported"].as_array().expect("exported") {
        let s = |i: usize| row[i].as_str().expect("hex id").to_owned();
        acked.insert((s(0), s(1)), row[2].as_u64().expect("collector") as usize);
    }
    let from_sdk = acked.len() - from_loadgen;
    assert!(from_sdk > 0, "the SDK exported nothing: {sdk_out}");
    let mut traces: BTreeMap<&str, (BTreeSet<&str>, BTreeSet<usize>)> = BTreeMap::new();
    for ((t, s), c) in &acked {
        let e = traces.entry(t).or_default();
        e.0.insert(s);
        e.1.insert(*c);
    }
    let spread: Vec<&str> = traces.iter().filter(|(_, (_, cs))| cs.len() >= 2).map(|(t, _)| *t).collect();
    let through_victim = traces.values().filter(|(_, cs)| cs.len() >= 2 && cs.contains(&VICTIM)).count();
    assert!(
        spread.len() * 2 > traces.len(),
        "most traces reach two or more collectors ({} of {})",
        spread.len(),
        traces.len()
    );

    // The fourth process reads the union of the three prefixes.
    let reader_dir = tempfile::tempdir().unwrap();
    let reader = WeftServe::start(
        reader_dir.path(),
        &["--read-only", "--segments", ROOT, "--segments-credentials", &credentials.to_string_lossy()],
    );
    let mut stored = BTreeMap::new();
    wait_for("the reader holds every acknowledged span", 180, || {
        stored = stored_ids(&reader);
        acked.keys().all(|id| stored.contains_key(id))
    });
    // SQL shows what is stored: a request in flight to collector 2 when it was killed may be
    // in its WAL and, retried, in another collector (or in collector 2 again) — at most the
    // requests then in flight: one per loadgen connection and the SDK's exporter.
    let twice: Vec<&str> = stored.iter().filter(|(_, n)| **n > 1).map(|((t, _), _)| t.as_str()).collect();
    let in_flight = 2 * LOAD_BATCH as usize + 64;
    assert!(
        twice.len() <= in_flight,
        "{} spans stored twice (at most {in_flight} were in flight)",
        twice.len()
    );
    let unacked_stored = stored.keys().filter(|id| !acked.contains_key(*id)).count();

    // Traces split across collectors come back whole, each span once, through both trace-by-id
    // APIs: those with a span stored twice, then a sample, those that reached collector 2 first.
    let mut sample: BTreeSet<&str> = twice.iter().copied().collect();
    let stored_twice = sample.len();
    sample.extend(spread.iter().copied().filter(|t| traces[t].1.contains(&VICTIM)).take(150));
    sample.extend(spread.iter().copied().filter(|t| !traces[t].1.contains(&VICTIM)).take(50));
    let stored_of = |t: &str| -> BTreeSet<&str> {
        stored
            .range((t.to_owned(), String::new())..)
            .take_while(|((st, _), _)| st == t)
            .map(|((_, s), _)| s.as_str())
            .collect()
    };
    let mut read_spans = 0;
    for t in &sample {
        let want = traces.get(t).map(|(spans, _)| spans.clone()).unwrap_or_default();
        let in_sql = stored_of(t);
        for (api, got) in read_trace(&reader, t) {
            let ids: BTreeSet<&str> = got.iter().map(String::as_str).collect();
            assert_eq!(ids.len(), got.len(), "{api}: trace {t} has a span twice: {got:?}");
            let missing: Vec<_> = want.difference(&ids).collect();
            assert!(missing.is_empty(), "{api}: trace {t} misses acknowledged spans {missing:?}");
            assert_eq!(ids, in_sql, "{api}: trace {t} is not what SQL holds");
            read_spans += got.len();
        }
    }
    eprintln!(
        "three collectors: {} spans acknowledged ({from_loadgen} by loadgen, {from_sdk} by the OTel SDK; \
         the SDK's exports that failed: {}), {} traces, {} of them over two or more collectors ({through_victim} \
         through collector 2); collector 2 killed at {before_kill} spans taken, {replayed} WAL records replayed on \
         restart, {after_restart} spans taken after it; the reader holds {} spans ({unacked_stored} stored but not \
         acknowledged, {} stored twice in {stored_twice} traces); {} traces ({read_spans} spans) read whole, each \
         span once, through Jaeger and Zipkin",
        acked.len(),
        sdk_out["failed"],
        traces.len(),
        spread.len(),
        stored.len(),
        twice.len(),
        sample.len(),
    );
    assert!(replayed > 0.0, "collector 2 replayed no WAL record after its SIGKILL");
}
