//! Criterion benchmarks of the store's hot paths, each next to its baseline in the same run:
//!
//! * `append/512`: durable append of a 512-span batch of realistic spans (Arrow conversion,
//!   WAL write, buffer; fsync every 100 ms; flushes run on the background thread) — next to
//!   `decode_otlp/512`, the OTLP protobuf decode of the same batch, which every receiver pays
//!   before the store sees the spans;
//! * `to_arrow/512`: the span → Arrow conversion alone;
//! * `trace_by_id`: a trace lookup in a store of 100k spans in segments.
//!
//! `cargo bench -p weft-store --bench ingest`

use std::time::Duration;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use weft_model::codec::otlp;
use weft_store::{FsyncPolicy, Store, StoreConfig};
use weft_synth::shop::Shop;

fn batches(n_batches: usize) -> Vec<Vec<weft_model::Span>> {
    let mut s = Shop::new(7, 1_700_000_000_000_000_000, 2_000_000);
    let mut pending = Vec::new();
    let mut out = Vec::new();
    while out.len() < n_batches {
        while pending.len() < 512 {
            pending.extend(s.trace());
        }
        out.push(pending.drain(..512).collect());
    }
    out
}

fn bench(c: &mut Criterion) {
    let data = batches(64);
    let mut g = c.benchmark_group("store");
    g.throughput(Throughput::Elements(512));
    g.measurement_time(Duration::from_secs(10));

    let protos: Vec<Vec<u8>> = data.iter().map(|b| otlp::encode_proto(b)).collect();
    let mut i = 0;
    g.bench_function("decode_otlp/512", |b| {
        b.iter(|| {
            i += 1;
            otlp::decode_proto(&protos[i % protos.len()]).unwrap()
        })
    });

    let mut i = 0;
    g.bench_function("to_arrow/512", |b| {
        b.iter(|| {
            i += 1;
            weft_store::spans_to_batches(&data[i % data.len()]).unwrap()
        })
    });

    let dir = tempfile::tempdir().unwrap();
    let mut cfg = StoreConfig::new(dir.path());
    cfg.fsync = FsyncPolicy::Interval(Duration::from_millis(100));
    let store = Store::open(cfg).unwrap();
    let mut i = 0;
    g.bench_function("append/512", |b| {
        b.iter(|| {
            i += 1;
            store.append(&data[i % data.len()]).unwrap()
        })
    });
    store.close().unwrap();
    drop(store);

    // Trace lookups over segments.
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = StoreConfig::new(dir.path());
    cfg.flush_bytes = 16 << 20;
    let store = Store::open(cfg).unwrap();
    let mut s = Shop::new(9, 1_700_000_000_000_000_000, 2_000_000);
    let mut ids = Vec::new();
    for _ in 0..50 {
        let b = s.spans(2000);
        ids.push(b[0].trace_id);
        store.append(&b).unwrap();
    }
    store.flush().unwrap();
    g.throughput(Throughput::Elements(1));
    let mut i = 0;
    g.bench_function("trace_by_id", |b| {
        b.iter_batched(
            || {
                i += 1;
                ids[i % ids.len()]
            },
            |id| store.trace(id).unwrap(),
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
