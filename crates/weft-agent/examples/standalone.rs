//! The agent as a small standalone program (no collector code linked: no DataFusion), for
//! measurements on a node: `cargo run --release -p weft-agent --example standalone -- \
//! --probe-dir DIR --spool-dir DIR [--collector http://127.0.0.1:4318] [--seconds N]`.
//! Runs until SIGTERM/SIGINT (or `--seconds`), then prints the agent's counters.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use weft_agent::{Agent, AgentConfig};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let get = |k: &str| args.iter().position(|a| a == k).and_then(|i| args.get(i + 1)).cloned();
    let probe_dir = get("--probe-dir")
        .unwrap_or_else(|| weft_probe::layout::default_dir().to_string_lossy().into_owned());
    let spool_dir = get("--spool-dir").unwrap_or_else(|| "/tmp/weft-agent-spool".into());
    let mut cfg = AgentConfig::new(&probe_dir, &spool_dir);
    cfg.collector = get("--collector");
    cfg.metrics_addr = None;
    if let Some(mb) = get("--spool-mib").and_then(|v| v.parse::<u64>().ok()) {
        cfg.spool.limit_bytes = mb << 20;
        cfg.spool.chunk_bytes = (cfg.spool.limit_bytes / 8).clamp(1024, 8 << 20);
    }
    let seconds = get("--seconds").and_then(|v| v.parse::<f64>().ok());
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
    }
    let agent = match Agent::start(cfg) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("agent: {e}");
            std::process::exit(1);
        }
    };
    println!("READY");
    let t0 = Instant::now();
    while !STOP.load(Ordering::Relaxed) && seconds.is_none_or(|s| t0.elapsed().as_secs_f64() < s) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let m = agent.metrics();
    agent.join();
    let g = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    println!(
        "records {} spans {} incomplete {} batches_spooled {} spans_sent {} spool_dropped_spans {} records_dropped {}",
        g(&m.records),
        g(&m.spans_built),
        g(&m.spans_incomplete),
        g(&m.batches_spooled),
        g(&m.spans_sent),
        m.spool().dropped_spans,
        g(&m.records_dropped)
    );
}
