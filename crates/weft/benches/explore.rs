//! VAIF's analysis over 100,000 requests of 49 spans each (4.9 M spans) next to the time of
//! reading those requests from a weft store, in the same run (issue 15's goal: grouping +
//! decomposition + ranking ≤ 2 s on one core).
//!
//! 1. The requests are written into a real `weft_store::Store` in a temporary directory and
//!    flushed to Parquet segments.
//! 2. **read**: they are read back the way `weft explore run`'s live loop gets them through the
//!    collector's api_v3 search — `Store::search` by root span name (the request type) and start
//!    window, at most 10,000 traces per search (the route's cap): 10 epochs of 10 s × 3 request
//!    types. The search's SQL runs on the store's DataFusion threads and the trace loads on a
//!    blocking thread, so this is timed in **process** CPU time (`getrusage`; nothing else runs
//!    in the process then) and wall time. The collector's JSON encoding and the loop's decoding
//!    of the HTTP answer are not included.
//! 3. **group + decompose + rank**: [`group`] (each request's critical path over its
//!    tracepoint records, grouped by path) then [`analyze`] (per group: CV, variance
//!    decomposition, edges ranked by share; per request type: the consistently-slow
//!    percentile) over the traces read back, timed in the bench thread's CPU time
//!    (`weft_testkit::cpu::thread_cpu_ns`), median of 5 passes.
//!
//! The allocator is mimalloc, as in the `weft` binary. Run:
//! `cargo bench -p weft --bench explore` (`WEFT_BENCH_TRACES` changes the 100,000).

use std::hint::black_box;
use std::time::Instant;

use weft_analyze::vaif::Config;
use weft_analyze::vaif::group::group;
use weft_analyze::vaif::stats::analyze;
use weft_model::{Span, SpanEvent, SpanId, TraceId};
use weft_store::{Store, StoreConfig, TraceQuery};
use weft_testkit::cpu::thread_cpu_ns;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// 2026-01-01T00:00:00Z, ns: the first request's start.
const BASE_NS: u64 = 1_767_225_600_000_000_000;
/// One epoch of the loop: 10 s, 10,000 requests at one per ms.
const EPOCH_NS: u64 = 10_000_000_000;

/// A 64-bit linear congruential generator (Knuth's MMIX constants), high bits out.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 32) % n
    }
}

const TYPES: [&str; 3] = ["vm.create", "vm.list", "vm.delete"];
const CLIENTS: [[&str; 3]; 4] = [
    ["identity.call", "image.call", "quota.call"],
    ["scheduler.call", "placement.call", "network.call"],
    ["compute.call", "volume.call", "port.call"],
    ["notify.call", "audit.call", "metrics.call"],
];
const SERVERS: [&str; 3] = ["server.handle", "worker.handle", "agent.handle"];
const CALLS: [&str; 2] = ["db.query", "cache.get"];

/// One request: root → 4 sequential stages, each fanning out to 3 concurrent client calls
/// whose server span makes 2 sequential calls (1 + 4·3·4 = 49 spans); a third of the servers
/// record a `locked` annotation. Which branch of each stage is slowest varies, so requests
/// of one type spread over many critical paths.
fn trace(id: u64, rng: &mut Rng) -> Vec<Span> {
    let trace_id = TraceId::from_u128(u128::from(id) + 1);
    // requests start 1 ms apart from a fixed instant, so epochs are time windows of the store
    let base = BASE_NS + id * 1_000_000;
    let mut spans: Vec<Span> = Vec::with_capacity(49);
    let mk = |spans: &mut Vec<Span>, parent: Option<usize>, name: &'static str, start: u64, end: u64| {
        let i = spans.len();
        spans.push(Span {
            trace_id,
            span_id: SpanId::from_u64(i as u64 + 1),
            parent_span_id: parent.map(|p| SpanId::from_u64(p as u64 + 1)),
            name: name.into(),
            start_ns: base + start,
            end_ns: base + end,
            ..Span::default()
        });
        i
    };
    let kind = rng.below(3) as usize;
    let root = mk(&mut spans, None, TYPES[kind], 0, 0);
    let mut t = 1_000;
    for stage in CLIENTS {
        let mut stage_end = t;
        for (b, client_name) in stage.iter().enumerate() {
            let cs = t + rng.below(200);
            let client = mk(&mut spans, Some(root), client_name, cs, 0);
            let ss = cs + 50 + rng.below(50);
            let server = mk(&mut spans, Some(client), SERVERS[b], ss, 0);
            let mut u = ss + 20;
            for call in CALLS {
                let spread = if rng.below(10) == 0 { 40_000 } else { 4_000 };
                let d = 1_000 + rng.below(spread);
                mk(&mut spans, Some(server), call, u, u + d);
                u += d + rng.below(100);
            }
            spans[server].end_ns = base + u + 10;
            if rng.below(3) == 0 {
                spans[server].events.push(SpanEvent {
                    time_ns: base + ss + 10,
                    name: "locked".into(),
                    ..SpanEvent::default()
                });
            }
            spans[client].end_ns = base + u + 60;
            stage_end = stage_end.max(u + 60);
        }
        t = stage_end + 100 + rng.below(100);
    }
    spans[root].end_ns = base + t + 50;
    spans
}

fn process_cpu_ns() -> u64 {
    // SAFETY: an all-zero rusage is a valid value for getrusage to overwrite.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct we own.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    ns(ru.ru_utime) + ns(ru.ru_stime)
}

fn main() {
    // `cargo bench` passes --bench; under `cargo test --all-targets` a smoke run of 500.
    let default = if std::env::args().any(|a| a == "--bench") { 100_000 } else { 500 };
    let traces: u64 = std::env::var("WEFT_BENCH_TRACES").ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = Store::open(StoreConfig::new(dir.path())).expect("store opens");
    let mut rng = Rng(15);
    let mut spans = 0usize;
    let mut batch: Vec<Span> = Vec::new();
    for i in 0..traces {
        batch.extend(trace(i, &mut rng));
        if batch.len() >= 49 * 512 || i + 1 == traces {
            spans += batch.len();
            // Waits while flushes catch up (the store refuses past its buffer limit).
            loop {
                match store.append(&batch) {
                    Ok(()) => break,
                    Err(weft_store::StoreError::Overloaded { .. }) => {
                        std::thread::sleep(std::time::Duration::from_millis(5))
                    }
                    Err(e) => panic!("append: {e}"),
                }
            }
            batch.clear();
        }
    }
    store.flush().expect("flush");
    let segments = store.segments().len();

    // 2. read, as the live loop's epochs do
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let span_ns = traces * 1_000_000;
    let epochs = span_ns.div_ceil(EPOCH_NS);
    let (c0, w0) = (process_cpu_ns(), Instant::now());
    let mut read: Vec<Vec<Span>> = Vec::with_capacity(traces as usize);
    for e in 0..epochs {
        for ty in TYPES {
            let q = TraceQuery {
                span_name: Some(ty.to_string()),
                start_min_ns: Some(BASE_NS + e * EPOCH_NS),
                start_max_ns: Some(BASE_NS + (e + 1) * EPOCH_NS - 1),
                limit: 10_000,
                ..TraceQuery::default()
            };
            read.extend(rt.block_on(store.search(&q)).expect("search"));
        }
    }
    let (read_cpu, read_wall) = (process_cpu_ns() - c0, w0.elapsed());
    let read_spans: usize = read.iter().map(Vec::len).sum();
    assert_eq!(read.len() as u64, traces, "every trace read back");
    assert_eq!(read_spans, spans, "every span read back");

    // 3. group + decompose + rank, thread CPU, median of 5
    let config = Config::default();
    let mut passes = Vec::new();
    let mut summary = String::new();
    for _ in 0..5 {
        let t0 = thread_cpu_ns();
        let grouping = group(black_box(&read));
        let analysis = analyze(&grouping, &config).expect("default config is valid");
        passes.push(thread_cpu_ns() - t0);
        let problems = analysis.groups.iter().filter(|g| g.high_variance).count();
        let slow = analysis.groups.iter().filter(|g| g.consistently_slow).count();
        summary = format!(
            "{} groups ({} with ≥ {} traces: {problems} high-variance, {slow} consistently slow), {} rejected",
            grouping.groups.len(),
            analysis.groups.len(),
            config.min_traces,
            grouping.rejected.len()
        );
    }
    passes.sort_unstable();
    let s = |ns: u64| ns as f64 / 1e9;
    println!("explore bench: {traces} traces, {spans} spans, {segments} store segments; {summary}");
    println!("| what | CPU | wall |");
    println!("|---|---|---|");
    println!(
        "| read from the store ({} searches, as the live loop) | {:.3} s process | {:.3} s |",
        epochs * TYPES.len() as u64,
        s(read_cpu),
        read_wall.as_secs_f64()
    );
    println!(
        "| group + decompose + rank | {:.3} s thread (median of 5; min {:.3}, max {:.3}) | — |",
        s(passes[2]),
        s(passes[0]),
        s(passes[4])
    );
}
