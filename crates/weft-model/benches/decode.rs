//! Decode throughput per core, each next to a baseline measured in the same run:
//!
//! * OTLP protobuf → weft spans, vs prost decoding the same bytes into the generated
//!   `opentelemetry-proto` types (no conversion);
//! * Zipkin v2 JSON → weft spans, vs serde_json parsing the same bytes into a generic
//!   `serde_json::Value`;
//! * OTLP/JSON → weft spans, vs the same `serde_json::Value` baseline.
//!
//! Input: `codec::sample::spans` — realistic spans (4 services, ~15 attributes of every type,
//! 2 events, some links). Time is the benchmark thread's **CPU time**
//! (`CLOCK_THREAD_CPUTIME_ID`), so the figures are per core and do not depend on how busy
//! the (shared) machine is. The allocator is mimalloc, as in the `weft` binary. Run:
//! `cargo bench -p weft-model --bench decode`.

use criterion::measurement::{Measurement, ValueFormatter};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use prost::Message;
use std::hint::black_box;
use weft_model::codec::{otlp, sample, zipkin};

const SPANS: usize = 1024;

/// The allocator the `weft` binary uses (see its `main.rs`), so figures match what it does.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The calling thread's CPU time in ns.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux supports.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Criterion measurement: CPU time of the benchmark thread.
struct ThreadCpu;

impl Measurement for ThreadCpu {
    type Intermediate = u64;
    type Value = u64;
    fn start(&self) -> u64 {
        thread_cpu_ns()
    }
    fn end(&self, start: u64) -> u64 {
        thread_cpu_ns().saturating_sub(start)
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, v: &u64) -> f64 {
        *v as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &CpuFormatter
    }
}

struct CpuFormatter;

fn per_second(count: f64, typical_ns: f64, values: &mut [f64], units: [&'static str; 4]) -> &'static str {
    let rate = count * 1e9 / typical_ns;
    let (div, unit) = if rate < 1e3 {
        (1.0, units[0])
    } else if rate < 1e6 {
        (1e3, units[1])
    } else if rate < 1e9 {
        (1e6, units[2])
    } else {
        (1e9, units[3])
    };
    for v in values {
        *v = count * 1e9 / *v / div;
    }
    unit
}

impl ValueFormatter for CpuFormatter {
    fn scale_throughputs(&self, typical: f64, throughput: &Throughput, values: &mut [f64]) -> &'static str {
        match *throughput {
            Throughput::Bytes(b) | Throughput::BytesDecimal(b) => per_second(
                b as f64,
                typical,
                values,
                [" B/s (cpu)", "KB/s (cpu)", "MB/s (cpu)", "GB/s (cpu)"],
            ),
            Throughput::Bits(b) => per_second(b as f64, typical, values, [" b/s", "Kb/s", "Mb/s", "Gb/s"]),
            Throughput::Elements(e) | Throughput::ElementsAndBytes { elements: e, .. } => per_second(
                e as f64,
                typical,
                values,
                [" spans/s (cpu)", "K spans/s (cpu)", "M spans/s (cpu)", "G spans/s (cpu)"],
            ),
        }
    }
    fn scale_values(&self, typical_ns: f64, values: &mut [f64]) -> &'static str {
        let (factor, unit) = if typical_ns < 1e3 {
            (1.0, "ns cpu")
        } else if typical_ns < 1e6 {
            (1e-3, "µs cpu")
        } else if typical_ns < 1e9 {
            (1e-6, "ms cpu")
        } else {
            (1e-9, "s cpu")
        };
        for v in values {
            *v *= factor;
        }
        unit
    }
    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}

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
    config = Criterion::default().with_measurement(ThreadCpu);
    targets = decode
}
criterion_main!(benches);
