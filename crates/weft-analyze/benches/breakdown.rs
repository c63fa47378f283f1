//! Criterion benchmarks of `weft_analyze::breakdown`, each next to peers measured in the same
//! run on the same spans:
//!
//! * `trace/100k`: [`trace_breakdown`] of one 100,000-span trace (what the UI asks for a big
//!   trace: total, self and timeline time per component) — next to `group_sum/100k`, a plain
//!   one-pass per-component sum of durations (the least any per-component table costs), and
//!   `decode_otlp/100k`, the OTLP protobuf decode of the same trace (what reading it costs);
//! * `directions/10k_packets`: [`breakdown`] of 10,000 packet traces of 12 network hops with
//!   two direction rules (the case study's shape) — next to `group_sum/120k` over the same
//!   spans.
//!
//! `cargo bench -p weft-analyze --bench breakdown`

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use weft_analyze::breakdown::{Classifier, GroupBy, Options, breakdown, trace_breakdown};
use weft_model::codec::otlp;
use weft_model::id::SplitMix64;
use weft_model::{Resource, Span, SpanId, TraceId, conv};

struct Rng(SplitMix64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn resources() -> Vec<Arc<Resource>> {
    ["client-host", "client-nic", "ns3", "server-nic", "server-host"]
        .iter()
        .zip(["host", "nic", "network", "nic", "host"])
        .map(|(s, k)| {
            let mut r = Resource::service(*s);
            r.attributes.push(conv::COMPONENT_KIND, k);
            Arc::new(r)
        })
        .collect()
}

/// One big trace: each span hangs under a recent span, nested inside it or (a third of the
/// time, as a caused-by hop) starting after it ends, in one of 12 components.
fn big_trace(n: usize) -> Vec<Span> {
    let res = resources();
    let mut rng = Rng(SplitMix64::new(42));
    let mut spans: Vec<Span> = Vec::with_capacity(n);
    for i in 0..n {
        let (parent, start) = if i == 0 {
            (None, 1_700_000_000_000_000_000u64)
        } else {
            let p = i - 1 - rng.below(i.min(64) as u64) as usize;
            let ps = &spans[p];
            let start = if rng.below(3) == 0 {
                ps.end_ns + rng.below(500)
            } else {
                ps.start_ns + rng.below(ps.duration_ns().max(1))
            };
            (Some(ps.span_id), start)
        };
        let comp = rng.below(12);
        let mut s = Span {
            trace_id: TraceId::from_u128(1),
            span_id: SpanId::from_u64(i as u64 + 1),
            parent_span_id: parent,
            name: format!("op{}", comp % 4).into(),
            start_ns: start,
            end_ns: start + 100 + rng.below(10_000),
            resource: res[(comp % 5) as usize].clone(),
            ..Span::default()
        };
        s.attributes.push(conv::COMPONENT, format!("c{comp}"));
        spans.push(s);
    }
    spans
}

/// 10,000 packets of 12 hops each, half requests, half responses.
fn packets(n: usize) -> Vec<Span> {
    let res = resources();
    let mut rng = Rng(SplitMix64::new(7));
    let nodes = ["client", "sw0", "sw1", "server"];
    let mut spans = Vec::with_capacity(n * 12);
    for p in 0..n {
        let response = p % 2 == 1;
        let (src, dst) = if response { ("10.0.0.2", "10.0.0.1") } else { ("10.0.0.1", "10.0.0.2") };
        let mut t = 1_700_000_000_000_000_000u64 + p as u64 * 1_000_000;
        for h in 0..12u64 {
            let node = if response { nodes[3 - (h as usize / 3)] } else { nodes[h as usize / 3] };
            let dur = if h % 3 == 0 { 0 } else { 1000 + rng.below(if response { 100_000 } else { 100 }) };
            let mut s = Span {
                trace_id: TraceId::from_u128(p as u128 + 1),
                span_id: SpanId::from_u64(h + 1),
                parent_span_id: (h > 0).then(|| SpanId::from_u64(h)),
                name: "hop".into(),
                start_ns: t,
                end_ns: t + dur,
                resource: res[2].clone(),
                ..Span::default()
            };
            s.attributes.push(conv::COMPONENT, format!("ns3/{node}"));
            s.attributes.push("ip.src", src);
            s.attributes.push("ip.dst", dst);
            spans.push(s);
            t += dur + if h % 3 == 2 { 2_000 } else { 0 };
        }
    }
    spans
}

fn group_sum(spans: &[Span]) -> HashMap<&str, u64> {
    let mut m: HashMap<&str, u64> = HashMap::new();
    for s in spans {
        let k = s.attributes.get_str(conv::COMPONENT).unwrap_or_else(|| s.service_name());
        *m.entry(k).or_default() += s.duration_ns();
    }
    m
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("breakdown");
    g.measurement_time(Duration::from_secs(8));
    g.sample_size(20);

    let big = big_trace(100_000);
    g.throughput(Throughput::Elements(big.len() as u64));
    let opts = Options::default();
    g.bench_function("trace/100k", |b| b.iter(|| trace_breakdown(&big, &opts)));
    g.bench_function("group_sum/100k", |b| b.iter(|| group_sum(&big).len()));
    let proto = otlp::encode_proto(&big);
    g.bench_function("decode_otlp/100k", |b| {
        b.iter(|| otlp::decode_proto(&proto).map(|v| v.len()).unwrap_or(0))
    });

    let pk = packets(10_000);
    g.throughput(Throughput::Elements(pk.len() as u64));
    let cls =
        Classifier::parse(&["request: ip.src=10.0.0.1", "response: ip.src=10.0.0.2"]).unwrap_or_default();
    let opts = Options { group_by: GroupBy::Component, ..Options::default() };
    g.bench_function("directions/10k_packets", |b| b.iter(|| breakdown(&pk, &cls, &opts).traces));
    g.bench_function("group_sum/120k", |b| b.iter(|| group_sum(&pk).len()));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
