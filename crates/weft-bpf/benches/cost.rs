//! Cost per hit of a kernel probe, weft-bpf against bpftrace in the same run: the thread CPU
//! time (`weft_testkit::cpu`) of N hits with the probe attached, minus the same N hits with
//! nothing attached, divided by N. Root and bpftrace are needed; prints a Markdown table.
//!
//! Hits: `write(2)` of 0-4095 bytes to /dev/null (the `raw_syscalls:sys_enter` tracepoint,
//! filtered by thread and syscall id), and calls of a function of this binary (uprobe).

use std::os::fd::AsRawFd;

#[path = "../tests/it/bpftrace.rs"]
mod bpftrace;

use bpftrace::Bpftrace;
use weft_bpf::{Agg, Cmp, Filter, Location, Probe, Query, Source, Value};
use weft_testkit::cpu::thread_cpu_ns;

const N: u64 = 200_000;
const ROUNDS: usize = 5;

#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn weft_bench_hit(n: i64) -> i64 {
    std::hint::black_box(n) + 1
}

fn writes() {
    let null = std::fs::OpenOptions::new().write(true).open("/dev/null").expect("/dev/null");
    let buf = [0u8; 4096];
    for i in 0..N {
        // SAFETY: a write of at most 4096 bytes of `buf` to an open fd.
        unsafe { libc::write(null.as_raw_fd(), buf.as_ptr().cast(), (i % 4096) as usize) };
    }
}

fn calls() {
    for i in 0..N as i64 {
        std::hint::black_box(weft_bench_hit(i));
    }
}

/// Least thread CPU time of `ROUNDS` runs of `work`, in ns.
fn cpu(work: fn()) -> u64 {
    (0..ROUNDS)
        .map(|_| {
            let t = thread_cpu_ns();
            work();
            thread_cpu_ns() - t
        })
        .min()
        .unwrap_or(0)
}

/// The sentinel's function: bpftrace prints `ready` when it is called (then its other probes
/// are attached). The measured work never calls it: the sentinel adds nothing to the figures.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn weft_bench_ready() {
    std::hint::black_box(());
}

/// Name, the hits, weft-bpf's query, bpftrace's script.
type Case = (&'static str, fn(), Query, String);

fn main() {
    // SAFETY: gettid(2) cannot fail.
    let tid = unsafe { libc::gettid() } as i64;
    let exe = std::env::current_exe().expect("current_exe");
    let tp = || Source::Tracepoint("raw_syscalls:sys_enter".into());
    let filter = Filter::cmp(Value::Tid, Cmp::Eq, tid).and(Filter::cmp(
        Value::Field("id".into()),
        Cmp::Eq,
        libc::SYS_write,
    ));
    let size = || Value::Field("args[2]".into());
    let fn_entry = || Source::Uprobe { binary: exe.clone(), at: Location::Symbol("weft_bench_hit".into()) };
    let bt_tp =
        format!("tracepoint:raw_syscalls:sys_enter /tid == {tid} && args->id == {}/", libc::SYS_write);
    let bt_fn = format!("uprobe:{}:weft_bench_hit /tid == {tid}/", exe.display());
    let cases: Vec<Case> = vec![
        (
            "tracepoint, filter + count",
            writes,
            Query::new(tp()).filter(filter.clone()).agg(Agg::Count),
            format!("{bt_tp} {{ @c = count(); }}"),
        ),
        (
            "tracepoint, filter + hist",
            writes,
            Query::new(tp()).filter(filter.clone()).agg(Agg::Hist(size())),
            format!("{bt_tp} {{ @h = hist(args->args[2]); }}"),
        ),
        (
            "uprobe, filter + count",
            calls,
            Query::new(fn_entry()).filter(Filter::cmp(Value::Tid, Cmp::Eq, tid)).agg(Agg::Count),
            format!("{bt_fn} {{ @c = count(); }}"),
        ),
        (
            "uprobe, filter + hist(arg0)",
            calls,
            Query::new(fn_entry())
                .filter(Filter::cmp(Value::Tid, Cmp::Eq, tid))
                .agg(Agg::Hist(Value::Arg(0))),
            format!("{bt_fn} {{ @h = hist(arg0); }}"),
        ),
    ];
    println!("| probe | bare ns/hit | weft-bpf ns/hit added | bpftrace ns/hit added |");
    println!("|---|---|---|---|");
    for (name, work, q, script) in cases {
        let bare = cpu(work);
        let probe = Probe::start(&q).expect("attach");
        let with_weft = cpu(work);
        let hits = probe.read().expect("read");
        drop(probe);
        let sentinel = format!("uprobe:{}:weft_bench_ready {{ printf(\"ready\\n\"); }}", exe.display());
        let bt = Bpftrace::start(&script, &sentinel, || weft_bench_ready());
        let with_bt = cpu(work);
        bt.finish();
        let per = |t: u64| t as f64 / N as f64;
        println!(
            "| {name} | {:.0} | {:.0} | {:.0} |",
            per(bare),
            per(with_weft) - per(bare),
            per(with_bt) - per(bare)
        );
        check_hits(&hits);
    }
}

/// The weft-bpf probe saw every hit of its rounds (a figure from a probe that missed hits
/// would flatter it).
fn check_hits(p: &weft_bpf::Partial) {
    let n = match p.groups.get(&Vec::new()).and_then(|s| s.first()) {
        Some(weft_bpf::State::Count(n)) => *n,
        Some(weft_bpf::State::Buckets(b)) => b.values().sum(),
        other => panic!("unexpected state {other:?}"),
    };
    assert_eq!(n, N * ROUNDS as u64, "weft-bpf counted {n} hits");
}
