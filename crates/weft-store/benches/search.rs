//! Search latency for the README: Jaeger-style searches (service, operation, attribute values,
//! duration range, a one-day time window, newest 20) by the indexed plan and, in the same
//! run on the same store, by the full scan it replaces (`SearchPlan::Scan`).
//!
//! Builds a store of `WEFT_BENCH_SPANS` (default 10,000,000) spans of `weft_synth::shop`
//! traffic spread over a week (default flush size, so ~64 MiB segments), reopens it read-only
//! (no background threads: the process's CPU time is the searches'), then runs
//! `WEFT_BENCH_QUERIES` (default 120) searches from a fixed mix, each by both plans (order
//! alternating), checks that both return the same traces, and reports p50 / p99 of wall time
//! and CPU time (all threads: DataFusion runs a query on several), the cost of fetching the
//! found traces, and the index's size.
//!
//! `cargo bench -p weft-store --bench search`; `WEFT_BENCH_DIR` keeps the data there;
//! `WEFT_BENCH_SHOW_SLOW_MS` prints the indexed searches slower than that.

use std::time::{Duration, Instant};

use weft_store::{FsyncPolicy, SearchPlan, Store, StoreConfig, TraceQuery};
use weft_synth::shop::{Rng, Shop};

mod common;
use common::{append, env, process_cpu};

const DAY_NS: u64 = 86_400_000_000_000;

/// One kind of search: how many, wall times by each plan, and the indexed plan's segments
/// read and row groups skipped (summed).
#[derive(Default)]
struct Kind {
    n: usize,
    indexed: Vec<f64>,
    scan: Vec<f64>,
    read: [u64; 2],
}

/// Values the searches look for, sampled from the generated spans.
#[derive(Default)]
struct Samples {
    client_addresses: Vec<String>,
    durations: Vec<u64>,
}

fn build(dir: &std::path::Path, n: usize, start_ns: u64) -> Samples {
    let mut cfg = StoreConfig::new(dir);
    cfg.fsync = FsyncPolicy::Interval(Duration::from_millis(100));
    let store = Store::open(cfg).unwrap();
    // ~20 spans per trace: one request every week / (n / 20).
    let interval = (7 * DAY_NS) / (n as u64 / 20).max(1);
    let mut shop = Shop::new(7, start_ns, interval);
    let mut rng = Rng::new(5);
    let mut samples = Samples::default();
    let (mut appended, mut pending) = (0usize, Vec::new());
    while appended < n {
        while pending.len() < 512 {
            pending.extend(shop.trace());
        }
        let batch: Vec<_> = pending.drain(..512).collect();
        if rng.chance(0.01) || samples.durations.len() < 8 {
            let s = &batch[rng.below(batch.len() as u64) as usize];
            samples.durations.push(s.duration_ns());
            if let Some(kv) = batch.iter().flat_map(|s| &s.attributes.0).find(|kv| kv.key == "client.address")
            {
                samples.client_addresses.push(kv.value.to_string());
            }
        }
        append(&store, &batch);
        appended += batch.len();
    }
    store.close().unwrap();
    samples.durations.sort_unstable();
    samples
}

/// The mix: what a user of Jaeger's search form asks, over one day of the week.
fn query(
    rng: &mut Rng,
    ops: &[(String, String, String)],
    s: &Samples,
    start_ns: u64,
) -> (&'static str, TraceQuery) {
    let until = start_ns + DAY_NS + rng.below(6 * DAY_NS);
    let mut q = TraceQuery {
        start_min_ns: Some(until - DAY_NS),
        start_max_ns: Some(until),
        limit: 20,
        ..TraceQuery::default()
    };
    let (svc, op, _) = &ops[rng.below(ops.len() as u64) as usize];
    let slow = s.durations[s.durations.len() * 95 / 100];
    let kind = match rng.below(7) {
        0 => {
            q.service = Some(svc.clone());
            "service"
        }
        1 => {
            (q.service, q.span_name) = (Some(svc.clone()), Some(op.clone()));
            "service + operation"
        }
        2 => {
            q.service = Some(svc.clone());
            q.attributes.push(("error".into(), Some("true".into())));
            "service + error=true"
        }
        3 => {
            q.attributes.push(("http.response.status_code".into(), Some("500".into())));
            "http.response.status_code=500"
        }
        4 => {
            (q.service, q.min_duration_ns) = (Some(svc.clone()), Some(slow));
            "service + duration ≥ p95"
        }
        5 => {
            (q.service, q.span_name) = (Some(svc.clone()), Some(op.clone()));
            (q.min_duration_ns, q.max_duration_ns) = (Some(slow / 4), Some(slow));
            "service + operation + duration range"
        }
        _ => {
            let a = &s.client_addresses[rng.below(s.client_addresses.len() as u64) as usize];
            q.attributes.push(("client.address".into(), Some(a.clone())));
            "client.address=<one value>"
        }
    };
    (kind, q)
}

fn pct(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize] * 1e3
}

fn p50_p99(v: &mut [f64]) -> String {
    format!("p50 {:.1} ms, **p99 {:.1} ms**", pct(v, 0.5), pct(v, 0.99))
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    // Under `cargo test` a smoke run: both plans still agree on a small store.
    let (n, queries) = if common::measuring() { (10_000_000, 120) } else { (40_000, 7) };
    let n: usize = env("WEFT_BENCH_SPANS", n);
    let queries: usize = env("WEFT_BENCH_QUERIES", queries);
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::env::var_os("WEFT_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| tmp.path().to_owned());
    let start_ns = weft_model::time::now_unix_nanos() - 7 * DAY_NS;
    let t0 = Instant::now();
    let samples = build(&dir, n, start_ns);
    let build_s = t0.elapsed().as_secs_f64();

    let mut cfg = StoreConfig::new(&dir);
    cfg.read_only = true;
    let store = Store::open(cfg).unwrap();
    let st = store.stats();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let ops = rt.block_on(store.operations_all()).unwrap();
    let mut rng = Rng::new(42);
    let (mut wall, mut cpu) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
    let (mut fetch, mut total) = (Vec::new(), Vec::new());
    let mut kinds: std::collections::BTreeMap<&str, Kind> = Default::default();
    let m = store.metrics();
    let counters = || {
        use std::sync::atomic::Ordering::Relaxed;
        [m.search_segments_read.load(Relaxed), m.search_row_groups_skipped.load(Relaxed)]
    };
    let mut found = 0usize;
    // Searches slower than this by the indexed plan are printed (to stderr), with their criteria.
    let show_slow_ms: f64 = env("WEFT_BENCH_SHOW_SLOW_MS", f64::INFINITY);
    for i in 0..queries {
        let (kind, q) = query(&mut rng, &ops, &samples, start_ns);
        let mut ids = [Vec::new(), Vec::new()];
        let mut ix_read = [0u64; 2];
        let plans = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        for p in plans {
            let plan = [SearchPlan::Indexed, SearchPlan::Scan][p];
            let (c0, t0, n0) = (process_cpu(), Instant::now(), counters());
            ids[p] = rt.block_on(store.search_trace_ids_with(&q, plan)).unwrap();
            wall[p].push(t0.elapsed().as_secs_f64());
            cpu[p].push(process_cpu() - c0);
            let k = kinds.entry(kind).or_default();
            let n1 = counters();
            for (sum, (now, then)) in k.read.iter_mut().zip(n1.into_iter().zip(n0)) {
                *sum += now - then;
            }
            if p == 0 {
                ix_read = [n1[0] - n0[0], n1[1] - n0[1]];
            }
        }
        assert_eq!(ids[0], ids[1], "{q:?}");
        if wall[0][i] * 1e3 > show_slow_ms {
            eprintln!(
                "slow indexed search ({:.1} ms, {} traces, {} segments read, {} row groups skipped): {q:?}",
                wall[0][i] * 1e3,
                ids[0].len(),
                ix_read[0],
                ix_read[1]
            );
        }
        found += ids[0].len();
        let t0 = Instant::now();
        for id in &ids[0] {
            store.trace(*id).unwrap();
        }
        fetch.push(t0.elapsed().as_secs_f64());
        total.push(wall[0][i] + fetch[i]);
        let k = kinds.entry(kind).or_default();
        k.n += 1;
        k.indexed.push(wall[0][i]);
        k.scan.push(wall[1][i]);
    }

    println!(
        "\n## weft-store search benchmark: {n} spans over 7 days, {} segments, {queries} searches (one-day window, newest 20; {:.1} traces found on average), built in {build_s:.0} s",
        st.segments,
        found as f64 / queries as f64
    );
    println!();
    println!("| figure | indexed search | full scan (same run, same store) |");
    println!("|---|---|---|");
    println!("| wall, trace ids | {} | {} |", p50_p99(&mut wall[0]), p50_p99(&mut wall[1]));
    println!("| CPU time (all threads), trace ids | {} | {} |", p50_p99(&mut cpu[0]), p50_p99(&mut cpu[1]));
    println!(
        "| wall, ids + fetching the found traces | {} (fetch alone {}) | — |",
        p50_p99(&mut total),
        p50_p99(&mut fetch)
    );
    println!(
        "| search index size | {:.2} B/span ({} bytes, {:.2} % of the segments' {} bytes) | — |",
        st.search_index_bytes as f64 / st.segment_spans.max(1) as f64,
        st.search_index_bytes,
        st.search_index_bytes as f64 * 100.0 / st.segment_bytes.max(1) as f64,
        st.segment_bytes
    );
    let (r, s) = (
        m.search_segments_read.load(std::sync::atomic::Ordering::Relaxed),
        m.search_segments_skipped.load(std::sync::atomic::Ordering::Relaxed),
    );
    println!(
        "| segments read per indexed search | {:.1} of {} | all in the window |",
        r as f64 / queries as f64,
        (r + s) / queries as u64
    );
    println!();
    println!(
        "| search (wall, trace ids) | n | indexed p50 / max | segments read, row groups of them skipped (per search) | scan p50 / max |"
    );
    println!("|---|---|---|---|---|");
    for (kind, mut k) in kinds {
        println!(
            "| {kind} | {} | {:.1} / {:.1} ms | {:.1}, {:.1} | {:.1} / {:.1} ms |",
            k.n,
            pct(&mut k.indexed, 0.5),
            pct(&mut k.indexed, 1.0),
            k.read[0] as f64 / k.n.max(1) as f64,
            k.read[1] as f64 / k.n.max(1) as f64,
            pct(&mut k.scan, 0.5),
            pct(&mut k.scan, 1.0)
        );
    }
}
