//! Storage figures for the README (not a criterion benchmark: these are sizes and
//! distributions at scale, measured once per run).
//!
//! Generates `WEFT_BENCH_SPANS` (default 1,000,000) realistic spans (`weft_synth::shop`: an
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
use weft_store::{FsyncPolicy, Store, StoreConfig};
use weft_synth::shop::Shop;

mod common;
use common::{append, env, process_cpu};

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

/// The GROUP BY measured (in weft and, on the same rows, in SQLite).
const GROUP_BY: &str = "SELECT service_name, name, count(*) AS n, avg(duration_ns) AS avg_ns, max(duration_ns) AS max_ns \
                        FROM spans GROUP BY service_name, name ORDER BY n DESC";

/// The peer: SQLite (Python's sqlite3 module, an in-memory database) runs the same GROUP BY on
/// the same rows, exported from the store. Returns (load seconds, median, min query seconds);
/// None (with a note) when python3 is missing.
fn sqlite_peer(
    rt: &tokio::runtime::Runtime,
    store: &Store,
    dir: &std::path::Path,
) -> Option<(f64, f64, f64)> {
    use weft_store::datafusion::arrow::array::{AsArray, RecordBatch};
    use weft_store::datafusion::arrow::datatypes::Int64Type;
    let tsv = dir.join("sqlite-peer.tsv");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&tsv).unwrap());
    let r = rt.block_on(store.sql("SELECT service_name, name, duration_ns FROM spans", usize::MAX)).unwrap();
    let write = |out: &mut std::io::BufWriter<std::fs::File>, b: &RecordBatch| {
        let cast = |i: usize| {
            weft_store::datafusion::arrow::compute::cast(
                b.column(i),
                &weft_store::datafusion::arrow::datatypes::DataType::Utf8,
            )
            .unwrap()
        };
        let (svc, name) = (cast(0), cast(1));
        let (svc, name) = (svc.as_string::<i32>(), name.as_string::<i32>());
        let dur = b.column(2).as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            writeln!(out, "{}\t{}\t{}", svc.value(i), name.value(i), dur.value(i)).unwrap();
        }
    };
    for b in &r.batches {
        write(&mut out, b);
    }
    drop(out);
    let script = format!(
        r#"
import sqlite3, sys, time, csv
db = sqlite3.connect(":memory:")
db.execute("CREATE TABLE spans (service_name TEXT, name TEXT, duration_ns INTEGER)")
t0 = time.perf_counter()
with open(sys.argv[1], newline="") as f:
    db.executemany("INSERT INTO spans VALUES (?, ?, ?)", ((a, b, int(c)) for a, b, c in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)))
db.commit()
load = time.perf_counter() - t0
runs = []
for _ in range(3):
    t0 = time.perf_counter()
    rows = db.execute("""{GROUP_BY}""").fetchall()
    runs.append(time.perf_counter() - t0)
runs.sort()
print(load, runs[1], runs[0], len(rows))
"#
    );
    let res = std::process::Command::new("python3").arg("-c").arg(script).arg(&tsv).output();
    let _ = std::fs::remove_file(&tsv);
    match res {
        Ok(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout);
            let v: Vec<f64> = text.split_whitespace().filter_map(|x| x.parse().ok()).collect();
            (v.len() == 4).then(|| (v[0], v[1], v[2]))
        }
        Ok(o) => {
            eprintln!("SQLite peer failed: {}", String::from_utf8_lossy(&o.stderr));
            None
        }
        Err(e) => {
            eprintln!("SQLite peer not measured: python3: {e}");
            None
        }
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench -- --list` (criterion-style discovery): nothing to list.
    }
    let n: usize = env("WEFT_BENCH_SPANS", if common::measuring() { 1_000_000 } else { 100_000 });
    let keep = std::env::var_os("WEFT_BENCH_DIR");
    let tmp = tempfile::tempdir().unwrap();
    let dir = keep.map(std::path::PathBuf::from).unwrap_or_else(|| tmp.path().to_owned());
    let mut cfg = StoreConfig::new(&dir);
    cfg.fsync = FsyncPolicy::Interval(Duration::from_millis(100));
    cfg.write.zstd_level = env("WEFT_BENCH_ZSTD", cfg.write.zstd_level);
    let zstd_level = cfg.write.zstd_level;
    cfg.flush_bytes = env::<usize>("WEFT_BENCH_FLUSH_MIB", cfg.flush_bytes >> 20) << 20;
    cfg.max_buffer_bytes = cfg.flush_bytes * 4;
    let store = Store::open(cfg.clone()).unwrap();

    let mut synth = Shop::new(1, weft_model::time::now_unix_nanos() - 3_600_000_000_000, 360_000);
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
        append(&store, &batch);
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
    let mut rng = weft_synth::shop::Rng::new(99);
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
    let sql = GROUP_BY;
    let mut runs = Vec::new();
    let mut groups = 0;
    for _ in 0..5 {
        let t0 = Instant::now();
        let r = rt.block_on(store.sql(sql, 100_000)).unwrap();
        runs.push(t0.elapsed().as_secs_f64());
        groups = r.batches.iter().map(|b| b.num_rows()).sum();
    }
    runs.sort_by(f64::total_cmp);
    let sqlite = if std::env::var_os("WEFT_BENCH_NO_SQLITE").is_some() {
        None
    } else {
        sqlite_peer(&rt, &store, &dir)
    };
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
        zstd_level
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
    if let Some((load_s, med, min)) = sqlite {
        println!(
            "| peer: the same GROUP BY in SQLite (python3 sqlite3, in memory, same rows; loading took {load_s:.0} s) | median {:.0} ms (min {:.0} ms) | |",
            med * 1e3,
            min * 1e3
        );
    }
    println!();
    println!("bloom filters in memory: {} KiB; data dir: {}", st.bloom_bytes / 1024, dir.display());
}
