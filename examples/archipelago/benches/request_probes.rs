//! What the default tracepoint set costs one archipelago request, measured alone: the probe
//! calls the four tiers make for one 4 KiB write (per tier: extract the caller's `traceparent`,
//! a server span with a key/value, a client span around the call to the next tier and the
//! `traceparent` it sends, the server span's `traceparent` in the reply; the disabled
//! tracepoints on the way), with the rings drained between timed batches. In the same run: the same path with the client spans switched off
//! (`server_spans_only`: the server spans then chain directly), and with nothing but the
//! disabled checks (`disabled_only`; `--no-default-features` leaves nothing at all).
//!
//! Time is the benchmark thread's CPU time (`weft_testkit::cpu::ThreadCpu`), comparable with
//! the tiers' CPU time per request.
//!
//! `cargo bench -p archipelago --bench request_probes`; divide by the tiers' CPU time per
//! request that `archipelago run` prints (`tier_cpu_us/op`) for the instrumentation's share.

use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use weft_probe::consumer::Segment;
use weft_probe::value::KeyedValue;
use weft_probe::{Context, SpanKind, event, tracepoint};
use weft_testkit::cpu::{ThreadCpu, thread_cpu_ns};

tracepoint!(static SERVER = "benchreq.server", Info, group = "benchreq", flags = [span, default_on]);
tracepoint!(static CLIENT = "benchreq.client", Info, group = "benchreq", flags = [span, default_on]);
tracepoint!(static OFF1 = "benchreq.off1", Debug, group = "benchreq.off", fields = [a: u64, b: u64]);
tracepoint!(static OFF2 = "benchreq.off2", Trace, group = "benchreq.off", fields = [a: str]);

/// One request through four tiers; each tier's events are the ~8 disabled tracepoints it
/// passes (as in the example's handlers).
fn request(incoming: Option<&str>, spans: bool, client_spans: bool) -> Option<String> {
    let mut carrier = incoming.map(str::to_string);
    for tier in 0..4u64 {
        for i in 0..8u64 {
            event!(OFF1, a = tier, b = i);
        }
        event!(OFF2, a = "vol1");
        if !spans {
            continue;
        }
        let remote = carrier.as_deref().and_then(|t| Context::from_traceparent(t).ok());
        let s = SERVER.span_with(SpanKind::Server, remote.as_ref());
        s.kv("volume", KeyedValue::Str("vol1"));
        if tier < 3 {
            if client_spans {
                let c = CLIENT.span_with(SpanKind::Client, None);
                carrier = c.context().map(|x| x.to_traceparent());
            } else {
                carrier = s.context().map(|x| x.to_traceparent());
            }
        }
        // every tier puts its server span's traceparent into its reply
        black_box(s.context().map(|x| x.to_traceparent()));
    }
    carrier
}

fn bench(c: &mut Criterion<ThreadCpu>) {
    let d = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(d.path(), std::os::unix::fs::PermissionsExt::from_mode(0o700)).expect("chmod");
    weft_probe::init(weft_probe::Config {
        mode: weft_probe::Mode::Shm,
        dir: Some(d.path().to_path_buf()),
        rings: 4,
        ring_size: 4 << 20,
        ..Default::default()
    });
    let mut seg = Segment::open(&weft_probe::segment::segment_path().expect("segment")).expect("attach");
    let mut timed = |iters: u64, spans: bool, client: bool| {
        let mut total = 0u64;
        let mut left = iters;
        while left > 0 {
            let n = left.min(2000);
            let t = thread_cpu_ns();
            for _ in 0..n {
                black_box(request(None, spans, client));
            }
            total += thread_cpu_ns().saturating_sub(t);
            seg.drain(|_| {});
            left -= n;
        }
        total
    };
    let mut g = c.benchmark_group("request");
    g.bench_function("default_set", |b| b.iter_custom(|n| timed(n, true, true)));
    g.bench_function("server_spans_only", |b| b.iter_custom(|n| timed(n, true, false)));
    g.bench_function("disabled_only", |b| b.iter_custom(|n| timed(n, false, false)));
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadCpu::default());
    targets = bench
}
criterion_main!(benches);
