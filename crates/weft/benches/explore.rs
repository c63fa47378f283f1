//! VAIF's analysis over 100,000 requests of 49 spans each (4.9 M spans): [`group`] (each
//! request's critical path over its tracepoint records, grouped by path) followed by
//! [`analyze`] (per group: CV, variance decomposition, edges ranked by share; per request type:
//! the consistently-slow percentile). The goal: ≤ 2 s on one core.
//!
//! Peers measured in the same run, over the same spans:
//! * `iterate_spans`: one pass reading every span's times, name length and event count — the
//!   least any analysis of these spans costs;
//! * `clone_spans`: cloning each trace's spans into a reused buffer — what materialising them
//!   costs.
//!
//! The peer, *reading those traces from the store*, needs weft-store, which
//! weft-analyze does not link (it stays free of DataFusion); it is not in this run.
//!
//! Time is the benchmark thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), so the figures are per
//! core. The allocator is mimalloc, as in the `weft` binary. Run:
//! `cargo bench -p weft-analyze --bench variance`.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use weft_analyze::vaif::Config;
use weft_analyze::vaif::group::group;
use weft_analyze::vaif::stats::analyze;
use weft_model::{Span, SpanEvent, SpanId, TraceId};
use weft_testkit::cpu::{ThreadCpu, thread_cpu_ns};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const TRACES: usize = 100_000;

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
    let mut spans: Vec<Span> = Vec::with_capacity(49);
    let mk = |spans: &mut Vec<Span>, parent: Option<usize>, name: &'static str, start: u64, end: u64| {
        let i = spans.len();
        spans.push(Span {
            trace_id,
            span_id: SpanId::from_u64(i as u64 + 1),
            parent_span_id: parent.map(|p| SpanId::from_u64(p as u64 + 1)),
            name: name.into(),
            start_ns: start,
            end_ns: end,
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
            spans[server].end_ns = u + 10;
            if rng.below(3) == 0 {
                spans[server].events.push(SpanEvent {
                    time_ns: ss + 10,
                    name: "locked".into(),
                    ..SpanEvent::default()
                });
            }
            spans[client].end_ns = u + 60;
            stage_end = stage_end.max(u + 60);
        }
        t = stage_end + 100 + rng.below(100);
    }
    spans[root].end_ns = t + 50;
    spans
}

fn bench(c: &mut Criterion<ThreadCpu>) {
    let mut rng = Rng(15);
    let traces: Vec<Vec<Span>> = (0..TRACES as u64).map(|i| trace(i, &mut rng)).collect();
    let spans: usize = traces.iter().map(Vec::len).sum();
    let config = Config::default();
    // One timed pass first, for the summary line.
    let t0 = thread_cpu_ns();
    let grouping = group(&traces);
    let t1 = thread_cpu_ns();
    let analysis = analyze(&grouping, &config).expect("default config is valid");
    let t2 = thread_cpu_ns();
    let problems = analysis.groups.iter().filter(|g| g.high_variance).count();
    let slow = analysis.groups.iter().filter(|g| g.consistently_slow).count();
    eprintln!(
        "variance: {TRACES} traces, {spans} spans; {} groups ({} with ≥ {} traces: {problems} high-variance, \
         {slow} consistently slow), {} rejected; one pass: group {:.3} s + analyze {:.3} s thread CPU",
        grouping.groups.len(),
        analysis.groups.len(),
        config.min_traces,
        grouping.rejected.len(),
        (t1 - t0) as f64 / 1e9,
        (t2 - t1) as f64 / 1e9,
    );
    drop((grouping, analysis));

    let mut g = c.benchmark_group("vaif_100k_traces");
    g.sample_size(10);
    g.throughput(Throughput::Elements(spans as u64));
    g.bench_function("group_decompose_rank", |b| {
        b.iter(|| {
            let grouping = group(black_box(&traces));
            let analysis = analyze(&grouping, &config).map(|a| a.groups.len());
            black_box((grouping.groups.len(), analysis))
        })
    });
    g.bench_function("iterate_spans", |b| {
        b.iter(|| {
            let mut acc = 0u64;
            for s in traces.iter().flatten() {
                acc = acc.wrapping_add(
                    s.end_ns.wrapping_sub(s.start_ns) ^ s.name.len() as u64 ^ s.events.len() as u64,
                );
            }
            black_box(acc)
        })
    });
    g.bench_function("clone_spans", |b| {
        let mut buf: Vec<Span> = Vec::new();
        b.iter(|| {
            for t in &traces {
                buf.clone_from(black_box(t));
            }
            black_box(buf.len())
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadCpu::spans());
    targets = bench
}
criterion_main!(benches);
