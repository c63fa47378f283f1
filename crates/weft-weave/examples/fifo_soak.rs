//! Online-mode soak: the synthetic client/server ping (5 logs: 2× gem5, 2× nicbm, ns-3)
//! streamed through named pipes by writer threads — nothing stored on disk — and woven, spans
//! encoded as OTLP protobuf to /dev/null. Reports throughput, CPU time and peak memory.
//!
//! ```sh
//! cargo run --release -p weft-weave --example fifo_soak -- 10      # GiB of log text
//! ```

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use weft_synth::simlog::{Log, Scenario};
use weft_weave::{Run, Topology};

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:")).map(|l| l.to_owned()))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct we pass; no other preconditions.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

fn main() {
    let gib: f64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1.0);
    let target = (gib * (1u64 << 30) as f64) as u64;
    let sc = Scenario { rounds: 0, noise: 20, ..Scenario::default() };
    let per_round: u64 = Log::ALL
        .iter()
        .map(|l| {
            let mut v = Vec::new();
            sc.write_round(*l, 0, &mut v);
            v.len() as u64
        })
        .sum();
    let rounds = target / per_round + 1;
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("kernel.syms"), weft_synth::simlog::kernel_syms()).expect("syms");
    std::fs::write(dir.path().join("i40e.syms"), weft_synth::simlog::i40e_syms()).expect("syms");
    for l in Log::ALL {
        let p = dir.path().join(l.file_name());
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    }
    let mut toml = sc.topology(dir.path().to_str().expect("utf-8 path"));
    toml += "\n[[sink]]\nkind = \"file\"\npath = \"/dev/null\"\nformat = \"otlp-proto\"\n";
    let topo = Topology::parse(&toml, Path::new("soak.toml"), dir.path()).expect("topology");
    let written = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = Log::ALL
        .iter()
        .map(|l| {
            let (l, sc, path, written) = (*l, sc.clone(), dir.path().join(l.file_name()), written.clone());
            std::thread::spawn(move || {
                let mut f = std::fs::OpenOptions::new().write(true).open(path).expect("open fifo");
                let mut buf = Vec::with_capacity(1 << 20);
                for i in 0..rounds {
                    sc.write_round(l, i, &mut buf);
                    if buf.len() >= 1 << 20 {
                        f.write_all(&buf).expect("write fifo");
                        written.fetch_add(buf.len() as u64, Ordering::Relaxed);
                        buf.clear();
                    }
                }
                f.write_all(&buf).expect("write fifo");
                written.fetch_add(buf.len() as u64, Ordering::Relaxed);
            })
        })
        .collect();
    let done = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (done, peak) = (done.clone(), peak.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(rss_kib(), Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        })
    };
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    let rep = Run::start(&topo, vec![]).expect("start").wait().expect("run");
    let secs = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    for w in writers {
        w.join().expect("writer");
    }
    done.store(true, Ordering::Relaxed);
    sampler.join().expect("sampler");
    let bytes: u64 = rep.sources.iter().map(|s| s.stats.bytes).sum();
    let mb = bytes as f64 / 1e6;
    println!(
        "{:.2} GiB through 5 FIFOs ({} rounds): {} events, {} spans in {secs:.1} s = {:.0} MB/s; CPU {cpu:.1} s (incl. the writer threads generating the text); peak RSS {} MiB; merge forced {}",
        bytes as f64 / (1u64 << 30) as f64,
        rounds,
        rep.weave.events_by_type.values().sum::<u64>(),
        rep.spans,
        mb / secs,
        peak.load(Ordering::Relaxed) / 1024,
        rep.merge.forced,
    );
    for s in &rep.sources {
        println!(
            "  {}: {} lines, {} rejected, stream={}",
            s.name,
            s.stats.lines,
            s.stats.rejected.count(),
            s.stream
        );
    }
    for l in &rep.weave.links {
        println!("  {} {}: {:?}", l.link, l.kind, l.stats);
    }
}
