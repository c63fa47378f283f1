//! Storage figures for the README (not a criterion benchmark: these are sizes and
//! distributions at scale, measured once per run).
//!
//! Generates `WEFT_BENCH_SPANS` (default 1,000,000) realistic spans (`weft_store::synth`: an
//! online shop, 8–40 spans per trace, OTel semantic-convention attributes, resources with SDK
//! and host attributes, gRPC message and exception events), appends them durably in batches
//! of 512 (fsync every 100 ms), flushes, and reports:
//!
//! * bytes on disk per span (all Parquet files) next to the same spans as OTLP protobuf and as
//!   gzipped OTLP protobuf (the wire format), measured in this run;
//! * append cost in spans per CPU-second (the whole process: conversion, WAL, background
//!   flushes and fsyncs; the generator's own CPU time is subtracted);
//! * trace-by-id latency (p50 / p99 / max over 1,000 random stored traces);
//! * a GROUP BY over all spans (median of 5 runs).
//!
//! `WEFT_BENCH_SPANS=10000000 cargo bench -p weft-store --bench storage`
//! Optional: `WEFT_BENCH_DIR` (keep the data there), `WEFT_BENCH_ZSTD` (level),
//! `WEFT_BENCH_FLUSH_MIB` (buffer size per segment).

use std::io::Write;
use std::time::{Duration, Instant};

use weft_model::codec::otlp;
use weft_store::synth::Synth;
use weft_store::{FsyncPolicy, Store, StoreConfig};

fn env<T: std::str::FromStr>(k: &str, d: T) -> T {
    std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d)
}

fn process_cpu() -> f64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct we own.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn thread_cpu() -> f64 {
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: clock_gettime fills the struct we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

fn gzip_len(b: &[u8]) -> usize {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(b).unwrap();
    e.finish().unwrap().len()
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench -- --list` (criterion-style discovery): nothing to list.
    }
    let n: usize = env("WEFT_BENCH_SPANS", 1_000_000);
    let keep = std::env::var_os("WEFT_BENCH_DIR");
    let tmp = tempfile::tempdir().unwrap();
    let dir = keep.map(std::path::PathBuf::from).unwrap_or_else(|| tmp.path().to_owned());
    let mut cfg = StoreConfig::new(&dir);
    cfg.fsync = FsyncPolicy::Interval(Duration::from_millis(100));
    cfg.write.zstd_level = env("WEFT_BENCH_ZSTD", cfg.write.zstd_level);
    cfg.flush_bytes = env::<usize>("WEFT_BENCH_FLUSH_MIB", cfg.flush_bytes >> 20) << 20;
    cfg.max_buffer_bytes = cfg.flush_bytes * 4;
    let store = Store::open(cfg.clone()).unwrap();

    let mut synth = Synth::new(1, weft_model::time::now_unix_nanos() - 3_600_000_000_000, 360_000);
    let mut pending = Vec::new();
    let mut appended = 0usize;
    let mut gen_cpu = 0.0;
    let mut proto = (0usize, 0usize, 0usize); // (bytes, gzip bytes, spans) over sampled batches
    let mut sample_ids = Vec::new();
    let cpu0 = process_cpu();
    let wall0 = Instant::now();
    let mut batch_no = 0u64;
    while appended < n {
        let g0 = thread_cpu();
        while pending.len() < 512 {
            let t = synth.trace();
            if sample_ids.len() < 100_000 && batch_no.is_multiple_of(7) {
                sample_ids.push(t[0].trace_id);
            }
            pending.extend(t);
        }
        let batch: Vec<_> = pending.drain(..512).collect();
        if batch_no.is_multiple_of(64) {
            let p = otlp::encode_proto(&batch);
            proto.0 += p.len();
            proto.1 += gzip_len(&p);
            proto.2 += batch.len();
        }
        gen_cpu += thread_cpu() - g0;
        loop {
            match store.append(&batch) {
                Ok(()) => break,
                Err(weft_store::StoreError::Overloaded { .. }) => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                Err(e) => panic!("{e}"),
            }
        }
        appended += batch.len();
        batch_no += 1;
    }
    store.flush().unwrap();
    let wall = wall0.elapsed().as_secs_f64();
    let cpu = process_cpu() - cpu0 - gen_cpu;
    let st = store.stats();
    let segs = store.segments();
    let by_table = |t: &str| segs.iter().filter_map(|s| s.file(t)).map(|f| f.bytes).sum::<u64>();

    // Reopen (cold metadata) and look traces up.
    store.close().unwrap();
    drop(store);
    let store = Store::open(cfg).unwrap();
    let mut rng = weft_store::synth::Rng::new(99);
    let mut lat = Vec::new();
    let mut found = 0usize;
    for _ in 0..1000 {
        let id = sample_ids[rng.below(sample_ids.len() as u64) as usize];
        let t0 = Instant::now();
        let t = store.trace(id).unwrap();
        lat.push(t0.elapsed());
        found += !t.is_empty() as usize;
    }
    lat.sort();
    let p = |q: f64| lat[((lat.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e3;

    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let sql = "SELECT service_name, name, count(*) AS n, avg(duration_ns) AS avg_ns, max(duration_ns) AS max_ns \
               FROM spans GROUP BY service_name, name ORDER BY n DESC";
    let mut runs = Vec::new();
    let mut groups = 0;
    for _ in 0..5 {
        let t0 = Instant::now();
        let r = rt.block_on(store.sql(sql, 100_000)).unwrap();
        runs.push(t0.elapsed().as_secs_f64());
        groups = r.batches.iter().map(|b| b.num_rows()).sum();
    }
    runs.sort_by(f64::total_cmp);
    let search = weft_store::TraceQuery {
        service: Some("payment".into()),
        attributes: vec![("error".into(), None)],
        limit: 20,
        ..Default::default()
    };
    let t0 = Instant::now();
    let hits = rt.block_on(store.search(&search)).unwrap().len();
    let search_ms = t0.elapsed().as_secs_f64() * 1e3;

    let total: u64 = st.segment_bytes;
    println!(
        "\n## weft-store storage benchmark: {n} realistic spans, {} segments, zstd {}",
        segs.len(),
        env("WEFT_BENCH_ZSTD", 3)
    );
    println!();
    println!("| figure | weft | baseline (same run) |");
    println!("|---|---|---|");
    println!(
        "| bytes on disk per span | **{:.1} B** (spans {:.1} + events {:.1} + links {:.1}) | OTLP protobuf {:.1} B, gzipped {:.1} B |",
        total as f64 / n as f64,
        by_table("spans") as f64 / n as f64,
        by_table("span_events") as f64 / n as f64,
        by_table("span_links") as f64 / n as f64,
        proto.0 as f64 / proto.2 as f64,
        proto.1 as f64 / proto.2 as f64
    );
    println!(
        "| durable append (fsync 100 ms) | **{:.0} spans per CPU-second** ({:.0} spans/s wall, 1 appender) | — |",
        n as f64 / cpu.max(1e-9),
        n as f64 / wall
    );
    println!(
        "| trace by id ({found}/1000 found) | p50 {:.2} ms, **p99 {:.2} ms**, max {:.2} ms | — |",
        p(0.5),
        p(0.99),
        p(1.0)
    );
    println!(
        "| GROUP BY service, name over {n} spans ({groups} groups) | **median {:.0} ms** (min {:.0} ms) | — |",
        runs[2] * 1e3,
        runs[0] * 1e3
    );
    println!("| search: payment errors, 20 newest traces ({hits}) | {search_ms:.0} ms | — |");
    println!();
    println!("bloom filters in memory: {} KiB; data dir: {}", st.bloom_bytes / 1024, dir.display());
}
