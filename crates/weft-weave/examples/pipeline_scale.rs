//! Does the threaded pipeline scale with sources? Runs it over 1 and then 2 gem5 logs (the
//! `weave` bench's input, read in parallel; no sink unless `sink` is given: then OTLP protobuf
//! to /dev/null) and prints, per run, wall time, MiB/s, and the process's CPU time — CPU
//! seconds per GiB of logs tell whether the machine's cores are the limit (CPU/wall ≈ the
//! core count) or a single stage is (CPU/wall well below it).
//!
//! ```text
//! cargo run --release -p weft-weave --example pipeline_scale -- [MiB per log, default 48] [sink]
//! ```

use std::path::Path;
use std::time::Instant;

use weft_synth::simlog::{Log, Scenario};

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mib: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(48);
    let sink = args.iter().any(|a| a == "sink");
    let sc = Scenario { rounds: 0, noise: 20, ..Scenario::default() };
    let mut data = Vec::with_capacity((mib << 20) + (1 << 20));
    let mut i = 0;
    while data.len() < mib << 20 {
        sc.write_round(Log::ClientGem5, i, &mut data);
        i += 1;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("kernel.syms"), weft_synth::simlog::kernel_syms()).expect("write");
    std::fs::write(dir.path().join("i40e.syms"), weft_synth::simlog::i40e_syms()).expect("write");
    for k in 0..2 {
        std::fs::write(dir.path().join(format!("h{k}.gem5.log")), &data).expect("write");
    }
    for n in [1usize, 2, 1, 2] {
        let mut toml = String::new();
        for k in 0..n {
            toml += &format!(
                "[[source]]\nname = \"h{k}\"\nkind = \"gem5\"\npath = \"h{k}.gem5.log\"\nsymbols = [{{ path = \"kernel.syms\" }}, {{ path = \"i40e.syms\", offset = \"{:#x}\" }}]\n",
                weft_synth::simlog::I40E_BASE
            );
        }
        if sink {
            toml += "[[sink]]\nkind = \"file\"\npath = \"/dev/null\"\nformat = \"otlp-proto\"\n";
        }
        let topo = weft_weave::Topology::parse(&toml, Path::new("scale.toml"), dir.path()).expect("topology");
        let (c0, t0) = (cpu_seconds(), Instant::now());
        let runs = 5;
        let mut spans = 0;
        for _ in 0..runs {
            spans = weft_weave::Run::start(&topo, vec![]).expect("start").wait().expect("run").spans;
        }
        let (cpu, wall) = (cpu_seconds() - c0, t0.elapsed().as_secs_f64());
        let gib = (data.len() * n * runs) as f64 / (1u64 << 30) as f64;
        println!(
            "{n} source(s){}: {:.0} MiB/s total, CPU/wall {:.2}, {:.2} CPU-s per GiB, {spans} spans per run",
            if sink { " + sink" } else { "" },
            gib * 1024.0 / wall,
            cpu / wall,
            cpu / gib
        );
    }
}
