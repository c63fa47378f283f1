//! The agent's hot path, per span, against the collector's side of the same batch, in one run
//! (`cargo bench -p weft-agent --bench agent`):
//!
//! | bench | what |
//! |---|---|
//! | `agent/drain_assemble` | read the records of 1000 archipelago-shaped requests from a real segment (`read_ring`) and assemble them into spans (server + client span per request, kv, 4 annotations, one event) |
//! | `agent/encode_otlp` | encode those spans as an OTLP `ExportTraceServiceRequest` (`weft_model::codec::otlp::encode_proto`, what is spooled and sent) |
//! | `agent/encode_otlp_gzip` | the same, gzip (the default) |
//! | `collector/decode_otlp` (peer) | `weft serve`'s decode of that request (`weft_model::codec::otlp::decode_proto`) |
//!
//! Records are written by this process's own probes into a shared-memory segment in a
//! temporary directory before each timed batch (not timed), then released.

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use weft_agent::agent::encode_batch;
use weft_probe::consumer::Segment;
use weft_probe::{Context, SpanKind, event, tracepoint};
use weft_weave::probe::{Assembler, AssemblerConfig, ProcessIdentity, TpTable};

tracepoint!(static SERVER = "bench.server", Info, group = "bench", flags = [span, default_on]);
tracepoint!(static CLIENT = "bench.client", Info, group = "bench", flags = [span, default_on]);
tracepoint!(static EV = "bench.io", Debug, group = "bench", fields = [offset: u64, len: u64], flags = [default_on]);

const REQUESTS: u64 = 1000;

fn record_requests() {
    let remote = Context { trace_id: 0x1234_5678_9abc_def0_1234_5678_9abc_def0, span_id: 42, sampled: true };
    for i in 0..REQUESTS {
        let s = SERVER.span_with(SpanKind::Server, Some(&remote));
        s.annotate("sr");
        s.kv("volume", weft_probe::value::KeyedValue::Str("vol1"));
        {
            let c = CLIENT.span_with(SpanKind::Client, None);
            c.annotate("cs");
            event!(EV, offset = i * 4096, len = 4096u64);
            c.annotate("cr");
        }
        s.annotate("ss");
    }
}

fn segment() -> (tempfile::TempDir, Segment) {
    let d = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(d.path(), std::os::unix::fs::PermissionsExt::from_mode(0o700)).expect("chmod");
    weft_probe::init(weft_probe::Config {
        mode: weft_probe::Mode::Shm,
        dir: Some(d.path().to_path_buf()),
        rings: 4,
        ring_size: 4 << 20,
        service: Some("bench".into()),
        ..Default::default()
    });
    let path = weft_probe::segment::segment_path().expect("shared segment");
    let seg = Segment::open(&path).expect("attach");
    (d, seg)
}

fn drain(seg: &mut Segment, tps: &TpTable, asm: &mut Assembler, out: &mut Vec<weft_model::Span>) {
    let clock = seg.clock();
    for r in 0..seg.ring_count() {
        let p = seg.positions()[r];
        if p.head == p.tail {
            continue;
        }
        let rr = seg
            .read_ring(r, p.tail, |pos, rec| asm.record(r, pos, rec, false, tps, &clock, 0, out))
            .expect("read");
        seg.commit(r, rr.next, rr.next).expect("commit");
    }
}

fn bench(c: &mut Criterion) {
    let (_dir, mut seg) = segment();
    let tps = TpTable::new(&seg.registry().expect("registry"));
    let id =
        ProcessIdentity { pid: 1, service: "bench".into(), instance: "1-0".into(), ..Default::default() };
    let mut asm = Assembler::new(id, AssemblerConfig::default(), &seg.clock());
    // one batch to size the throughput figures and to encode
    record_requests();
    let mut spans = Vec::new();
    drain(&mut seg, &tps, &mut asm, &mut spans);
    assert_eq!(spans.len() as u64, 2 * REQUESTS, "server + client span per request");
    let n = spans.len() as u64;
    let raw = encode_batch(&spans, false);
    let gz = encode_batch(&spans, true);
    eprintln!(
        "batch of {n} spans: OTLP {} bytes ({:.0} B/span), gzip {} bytes ({:.0} B/span)",
        raw.len(),
        raw.len() as f64 / n as f64,
        gz.len(),
        gz.len() as f64 / n as f64
    );

    let mut g = c.benchmark_group("agent");
    g.throughput(Throughput::Elements(n));
    g.bench_function("drain_assemble", |b| {
        b.iter_batched(
            record_requests,
            |()| {
                let mut out = Vec::with_capacity(n as usize);
                drain(&mut seg, &tps, &mut asm, &mut out);
                black_box(out)
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("encode_otlp", |b| b.iter(|| black_box(encode_batch(black_box(&spans), false))));
    g.bench_function("encode_otlp_gzip", |b| b.iter(|| black_box(encode_batch(black_box(&spans), true))));
    g.finish();
    let mut g = c.benchmark_group("collector");
    g.throughput(Throughput::Elements(n));
    g.bench_function("decode_otlp", |b| {
        b.iter(|| black_box(weft_model::codec::otlp::decode_proto(black_box(&raw)).expect("decode")))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
