//! Capture overhead on a syscall-heavy program (examples/kernel/syscalls.c: N × getppid),
//! measured in one run against `perf record` of the same events:
//!
//! * baseline — the program alone;
//! * weft — under weft's capture engine (`weft_sources::perf::Capture`, exactly what
//!   `weft record --exec` runs: per-task raw_syscalls enter/exit + per-CPU sched_switch, rings
//!   drained into decoded events in memory);
//! * perf — under `perf record -e raw_syscalls:sys_enter,raw_syscalls:sys_exit,sched:sched_switch`.
//!
//! The program times its own loop, so start-up and post-processing are not counted. Each
//! configuration runs `ROUNDS` times interleaved; the median is reported with the slowdown
//! over the baseline. Needs root and `perf` (linux-perf). Run:
//! `cargo bench -p weft-sources --bench capture_overhead`.

use std::process::Command;
use std::time::Duration;

use weft_sources::perf::{Capture, CaptureConfig, StoppedChild, Target};

const N: u64 = 500_000;
const ROUNDS: usize = 5;

fn loop_ns(out: &[u8]) -> u64 {
    String::from_utf8_lossy(out).trim().parse().expect("the program prints its loop time")
}

fn baseline(bin: &str) -> u64 {
    let o = Command::new(bin).arg(N.to_string()).output().expect("run");
    loop_ns(&o.stdout)
}

fn weft(bin: &str, dir: &std::path::Path) -> (u64, u64, u64) {
    let out = dir.join("weft.out");
    let f = std::fs::File::create(&out).expect("create");
    // The child's stdout goes to a file we read afterwards.
    let argv = vec!["/bin/sh".to_string(), "-c".into(), format!("exec {bin} {N} > {}", out.display())];
    drop(f);
    let mut child = StoppedChild::spawn(&argv).expect("spawn");
    let cfg = CaptureConfig {
        tracepoints: vec![
            "raw_syscalls:sys_enter".into(),
            "raw_syscalls:sys_exit".into(),
            "sched:sched_switch".into(),
        ],
        target: Target::Exec(child.pid),
        ring_pages: 512,
        ..CaptureConfig::default()
    };
    let mut cap = Capture::open(&cfg).expect("capture (root?)");
    cap.enable().expect("enable");
    child.release().expect("release");
    let mut events = Vec::new();
    while child.try_wait().is_none() {
        cap.poll(Duration::from_millis(100), &mut events).expect("poll");
    }
    cap.finish(&mut events);
    let st = cap.stats();
    let text = std::fs::read(&out).expect("read output");
    (loop_ns(&text), events.len() as u64, st.lost())
}

fn perf(bin: &str, dir: &std::path::Path) -> u64 {
    let data = dir.join("perf.data");
    let o = Command::new("perf")
        .args(["record", "-q", "-e", "raw_syscalls:sys_enter,raw_syscalls:sys_exit,sched:sched_switch", "-o"])
        .arg(&data)
        .args(["--", bin, &N.to_string()])
        .output()
        .expect("perf (install linux-perf)");
    assert!(o.status.success(), "perf record failed: {}", String::from_utf8_lossy(&o.stderr));
    loop_ns(&o.stdout)
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("weft-overhead-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/kernel/syscalls.c");
    let bin = dir.join("syscalls");
    let ok = Command::new("cc").args(["-O2", "-o"]).arg(&bin).arg(src).status().expect("cc").success();
    assert!(ok, "cc failed");
    let bin = bin.display().to_string();
    let (mut b, mut w, mut p) = (Vec::new(), Vec::new(), Vec::new());
    let (mut events, mut lost) = (0, 0);
    for _ in 0..ROUNDS {
        b.push(baseline(&bin));
        let (ns, ev, l) = weft(&bin, &dir);
        w.push(ns);
        events = ev;
        lost += l;
        p.push(perf(&bin, &dir));
    }
    let (b, w, p) = (median(b), median(w), median(p));
    let per = |ns: u64| ns as f64 / N as f64;
    let slow = |ns: u64| (ns as f64 / b as f64 - 1.0) * 100.0;
    println!("capture overhead, {N} getppid calls, median of {ROUNDS} interleaved rounds:");
    println!("  baseline      {:8.1} ns/call", per(b));
    println!(
        "  weft capture  {:8.1} ns/call  (+{:.0} %)  {events} events, {lost} lost over all rounds",
        per(w),
        slow(w)
    );
    println!("  perf record   {:8.1} ns/call  (+{:.0} %)", per(p), slow(p));
    let _ = std::fs::remove_dir_all(&dir);
}
