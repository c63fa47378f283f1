//! Decode throughput per core, each next to a baseline measured in the same run:
//!
//! * OTLP protobuf → weft spans, vs prost decoding the same bytes into the generated
//!   `opentelemetry-proto` types (no conversion);
//! * Zipkin v2 JSON → weft spans, vs serde_json parsing the same bytes into a generic
//!   `serde_json::Value`;
//! * OTLP/JSON → weft spans, vs the same `serde_json::Value` baseline.
//!
//! Input: `weft_synth::sample::spans` — realistic spans (4 services, ~15 attributes of every type,
//! 2 events, some links). Time is the benchmark thread's **CPU time**
//! (`CLOCK_THREAD_CPUTIME_ID`), so the figures are per core and do not depend on how busy
//! the (shared) machine is. The allocator is mimalloc, as in the `weft` binary. Run:
//! `cargo bench -p weft-model --bench decode`.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use prost::Message;
use std::hint::black_box;
use weft_model::codec::{otlp, zipkin};
use weft_synth::sample;
use weft_testkit::cpu::ThreadCpu;

const SPANS: usize = 1024;

/// The allocator the `weft` binary uses (see its `main.rs`), so figures match what it does.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn group(
    c: &mut Criterion<ThreadCpu>,
    name: &str,
    bytes: &[u8],
    weft: impl Fn(&[u8]) -> usize,
    baseline: (&str, fn(&[u8]) -> usize),
) {
    eprintln!(
        "{name}: {SPANS} spans, {} bytes ({:.0} bytes/span)",
        bytes.len(),
        bytes.len() as f64 / SPANS as f64
    );
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::ElementsAndBytes { elements: SPANS as u64, bytes: bytes.len() as u64 });
    g.sample_size(20);
    g.bench_with_input(BenchmarkId::new("weft", SPANS), bytes, |b, bytes| b.iter(|| weft(black_box(bytes))));
    g.bench_with_input(BenchmarkId::new(baseline.0, SPANS), bytes, |b, bytes| {
        b.iter(|| baseline.1(black_box(bytes)))
    });
    g.finish();
}

fn decode(c: &mut Criterion<ThreadCpu>) {
    let spans = sample::spans(SPANS, 1);

    let pb = otlp::encode_proto(&spans);
    group(
        c,
        "otlp_proto_decode",
        &pb,
        |b| otlp::decode_proto(b).map(|s| s.len()).unwrap_or(0),
        ("prost_generated_types", |b| {
            otlp::proto::ExportTraceServiceRequest::decode(b).map(|r| r.resource_spans.len()).unwrap_or(0)
        }),
    );

    let zj = zipkin::encode_v2_json(&spans);
    group(
        c,
        "zipkin_v2_json_decode",
        &zj,
        |b| zipkin::decode_v2_json(b).map(|s| s.len()).unwrap_or(0),
        ("serde_json_value", |b| {
            serde_json::from_slice::<serde_json::Value>(b)
                .map(|v| v.as_array().map_or(0, Vec::len))
                .unwrap_or(0)
        }),
    );

    let oj = otlp::encode_json(&spans);
    group(
        c,
        "otlp_json_decode",
        &oj,
        |b| otlp::decode_json(b).map(|s| s.len()).unwrap_or(0),
        ("serde_json_value", |b| {
            serde_json::from_slice::<serde_json::Value>(b).map(|v| v.is_object() as usize).unwrap_or(0)
        }),
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadCpu::spans());
    targets = decode
}
criterion_main!(benches);
