//! CTF decoding throughput on a 1M-event LTTng-layout trace, with babeltrace2 (the reference
//! reader, `-c sink.utils.dummy`: decode only) measured on the same trace in the same run.
//!
//!     cargo bench -p weft-sources --bench ctf
//!
//! The trace is written by `weft_synth::ctf` (LTTng-UST layout: `large` event
//! headers, a `vtid` context, one `int32` payload field — LTTng's "small events"; 4 MiB
//! packets) and checked to read back identically in babeltrace2 before timing. Reported per
//! core: one decoding thread.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use weft_sources::ctf::{DecodeOptions, StreamDecoder, open_traces};
use weft_synth::ctf::{Header, SynthOptions, write_trace};

/// Events per trace: 1M under `cargo bench`; a small trace when `cargo test` runs the bench
/// once as a smoke test.
fn events() -> u64 {
    if std::env::args().any(|a| a == "--bench") { 1_000_000 } else { 20_000 }
}

fn decoders(dir: &Path) -> Vec<StreamDecoder> {
    let mut out = Vec::new();
    for t in open_traces(dir).expect("open trace") {
        out.extend(t.decoders(&DecodeOptions::default()).expect("open streams"));
    }
    out
}

fn decode_all(dir: &Path) -> u64 {
    let mut n = 0;
    for mut d in decoders(dir) {
        while d.next_event().expect("decode") {
            n += 1;
        }
    }
    n
}

fn convert_all(dir: &Path) -> u64 {
    let mut n = 0;
    for mut d in decoders(dir) {
        while d.next_event().expect("decode") {
            let e = d.event().to_event(weft_model::SourceId(0));
            n += std::hint::black_box(&e).raw_time & 1;
            n += 1 - (e.raw_time & 1);
        }
    }
    n
}

fn babeltrace2_dummy(dir: &Path) -> Duration {
    let t0 = Instant::now();
    let st = Command::new("babeltrace2")
        .arg(dir)
        .args(["-c", "sink.utils.dummy"])
        .status()
        .expect("run babeltrace2");
    assert!(st.success(), "babeltrace2 failed");
    t0.elapsed()
}

fn babeltrace2_count(dir: &Path) -> u64 {
    let out = Command::new("babeltrace2").arg(dir).output().expect("run babeltrace2");
    assert!(out.status.success(), "babeltrace2 failed: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout.iter().filter(|b| **b == b'\n').count() as u64
}

/// CPU time (user + system) of this process or of its waited-for children.
fn cpu_time(who: libc::c_int) -> Duration {
    // SAFETY: getrusage only writes the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(who, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Events per CPU-second of weft's decoder and of babeltrace2 on `dir` (the machine is shared:
/// wall time includes waiting for a core, CPU time does not).
fn per_core(label: &str, dir: &Path) {
    if events() < 1_000_000 {
        return; // a smoke test under `cargo test`: no figures
    }
    const RUNS: u32 = 5;
    let t0 = cpu_time(libc::RUSAGE_SELF);
    for _ in 0..RUNS {
        assert_eq!(decode_all(dir), events());
    }
    let weft = (cpu_time(libc::RUSAGE_SELF) - t0) / RUNS;
    let t0 = cpu_time(libc::RUSAGE_CHILDREN);
    for _ in 0..RUNS {
        babeltrace2_dummy(dir);
    }
    let bt2 = (cpu_time(libc::RUSAGE_CHILDREN) - t0) / RUNS;
    let rate = |d: Duration| events() as f64 / d.as_secs_f64() / 1e6;
    eprintln!(
        "{label}: CPU time per {} events: weft {:.1} ms ({:.1} M events/s per core), babeltrace2 {:.1} ms ({:.1} M events/s per core): {:.1}x",
        events(),
        weft.as_secs_f64() * 1e3,
        rate(weft),
        bt2.as_secs_f64() * 1e3,
        rate(bt2),
        bt2.as_secs_f64() / weft.as_secs_f64()
    );
}

fn bench(c: &mut Criterion) {
    let have_bt2 =
        Command::new("babeltrace2").arg("--version").output().map(|o| o.status.success()).unwrap_or(false);
    assert!(have_bt2, "babeltrace2 is missing: run .ci/test (it installs .ci/apt-packages)");
    let tmp = tempfile::tempdir().expect("temp dir");
    let opts = SynthOptions {
        events: events(),
        streams: 1,
        packet_bytes: 4 << 20,
        header: Header::Large,
        small_only: true,
        ..SynthOptions::default()
    };
    let sum = write_trace(tmp.path(), &opts).expect("write trace");
    let dir = tmp.path();
    assert_eq!(decode_all(dir), events());
    assert_eq!(babeltrace2_count(dir), events(), "babeltrace2 reads the generated trace");
    eprintln!(
        "trace: {} events, {} packets, {} extended headers, {} timestamp wraps",
        sum.events, sum.packets, sum.extended, sum.wraps
    );

    per_core("small events", dir);

    let mut g = c.benchmark_group("ctf_1M_small_events");
    g.throughput(Throughput::Elements(events()));
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(8));
    g.bench_function("weft_decode", |b| b.iter(|| decode_all(dir)));
    g.bench_function("weft_decode_to_events", |b| b.iter(|| convert_all(dir)));
    g.bench_function("babeltrace2_dummy", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| babeltrace2_dummy(dir)).sum())
    });
    g.finish();

    // A mixed trace: every field kind, both headers' extended forms, bit fields.
    let tmp2 = tempfile::tempdir().expect("temp dir");
    let mixed = SynthOptions {
        events: events(),
        streams: 1,
        packet_bytes: 4 << 20,
        header: Header::Compact,
        ..SynthOptions::default()
    };
    write_trace(tmp2.path(), &mixed).expect("write trace");
    per_core("mixed events", tmp2.path());
    let mut g = c.benchmark_group("ctf_1M_mixed_events");
    g.throughput(Throughput::Elements(events()));
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(8));
    g.bench_function("weft_decode", |b| b.iter(|| decode_all(tmp2.path())));
    g.bench_function("weft_decode_to_events", |b| b.iter(|| convert_all(tmp2.path())));
    g.bench_function("babeltrace2_dummy", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| babeltrace2_dummy(tmp2.path())).sum())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
