//! CPU cost of the collector's durable ingest pipeline without HTTP: OTLP protobuf requests of
//! 512 realistic spans are decoded and appended (WAL with fsync every 100 ms, background
//! flushes to Parquet), then the store is closed; prints the process's CPU time per span.
//! Unlike `weft loadgen` against `weft serve`, no load generator shares the cores. Also prints
//! the segments' bytes per span.
//!
//! `cargo run --release -p weft-store --example ingest_cpu -- [SPANS]`

use std::time::Duration;

use weft_model::codec::otlp;
use weft_store::{FsyncPolicy, Store, StoreConfig};
use weft_synth::shop::Shop;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn cpu_seconds() -> f64 {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given.
    let u = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr());
        u.assume_init()
    };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // As `weft` does (crates/weft/src/main.rs): freed memory is returned to the OS after 10 s
    // (mimalloc's `purge_delay`, option 15), not 1 s.
    // SAFETY: an integer option, set before any other thread exists.
    unsafe { libmimalloc_sys::mi_option_set(15, 10_000) };
    let spans: usize = std::env::args().nth(1).map(|s| s.parse()).transpose()?.unwrap_or(2_000_000);
    // 256 distinct requests, reused round-robin (trace ids repeat; the store does not care).
    let mut synth = Shop::new(7, 1_700_000_000_000_000_000, 2_000_000);
    let mut pending = Vec::new();
    let mut requests = Vec::new();
    while requests.len() < 256 {
        while pending.len() < 512 {
            pending.extend(synth.trace());
        }
        let batch: Vec<_> = pending.drain(..512).collect();
        requests.push(otlp::encode_proto(&batch));
    }
    let dir = tempfile::tempdir()?;
    let mut cfg = StoreConfig::new(dir.path());
    cfg.fsync = FsyncPolicy::Interval(Duration::from_millis(100));
    let store = Store::open(cfg)?;
    let (cpu0, wall0) = (cpu_seconds(), std::time::Instant::now());
    let mut done = 0;
    let mut i = 0;
    while done < spans {
        let (batch, _rejected) = otlp::decode_proto_lenient(&requests[i % requests.len()])?;
        i += 1;
        done += batch.len();
        loop {
            match store.append(&batch) {
                Err(weft_store::StoreError::Overloaded { .. }) => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                r => break r?,
            }
        }
    }
    store.close()?;
    let cpu = cpu_seconds() - cpu0;
    let wall = wall0.elapsed().as_secs_f64();
    let segments = store.stats().segment_bytes;
    println!(
        "{done} spans: {cpu:.2} CPU-s ({:.0} spans per CPU-second, {:.2} µs/span), {wall:.2} s wall, \
         {:.1} B/span in segments",
        done as f64 / cpu,
        cpu * 1e6 / done as f64,
        segments as f64 / done as f64
    );
    Ok(())
}
