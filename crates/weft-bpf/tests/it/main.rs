//! weft-bpf's integration tests. They load and attach eBPF programs (root) and compare with
//! bpftrace (installed from .ci/apt-packages). The tests take one lock: the fd checks count
//! this process's eBPF and perf fds.

#[path = "bpftrace.rs"]
mod bt;
mod failure;
mod redis;
mod tracepoint;
mod uprobe;
mod windows;

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

pub use bt::Bpftrace;
use weft_bpf::State;

static LOCK: Mutex<()> = Mutex::new(());

/// One test at a time (fd counts, CPU-time figures).
pub fn serial() -> MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// This process's fds that are eBPF maps/programs or perf events.
pub fn bpf_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| {
            let l = l.to_string_lossy();
            l.starts_with("anon_inode:bpf") || l.contains("perf_event")
        })
        .count()
}

/// bpftrace running `script` with a sentinel on this thread's next system call.
pub fn bpftrace(script: &str) -> Bpftrace {
    // SAFETY: gettid(2) has no arguments and cannot fail.
    let me = unsafe { libc::gettid() };
    let sentinel = format!(
        "tracepoint:raw_syscalls:sys_exit /tid == {me} && @ready == 0/ {{ @ready = 1; printf(\"ready\\n\"); }}"
    );
    // SAFETY: getppid(2) cannot fail; it is the system call the sentinel waits for.
    Bpftrace::start(script, &sentinel, || unsafe {
        libc::getppid();
    })
}

/// A bpftrace `hist()` / `lhist()` printed as JSON → bucket index → count, in weft-bpf's
/// indices (see `weft_bpf::Agg`). `lhist` is `Some((min, step, buckets))`.
pub fn buckets(v: &serde_json::Value, lhist: Option<(i64, i64, i64)>) -> State {
    let mut out = BTreeMap::new();
    for b in v.as_array().expect("a histogram is an array") {
        let n = b["count"].as_u64().unwrap();
        if n == 0 {
            continue;
        }
        let (lo, hi) = (b.get("min").and_then(|m| m.as_i64()), b.get("max").and_then(|m| m.as_i64()));
        let idx = match (lhist, lo, hi) {
            (Some(_), None, _) => 0,
            (Some((_, _, n)), Some(_), None) => n - 1,
            (Some((min, step, _)), Some(lo), Some(_)) => 1 + (lo - min) / step,
            (None, None, _) => 0,
            (None, Some(lo), _) if lo < 0 => 0,
            (None, Some(0), _) => 1,
            (None, Some(lo), _) => 2 + (63 - lo.leading_zeros() as i64),
        };
        out.insert(idx as i32, n);
    }
    State::Buckets(out)
}

/// bpftrace's `hist()` bucket of `v`, for the expected figures.
pub fn log2_bucket(v: i64) -> i32 {
    match v {
        i64::MIN..=-1 => 0,
        0 => 1,
        v => 2 + (63 - v.leading_zeros() as i32),
    }
}
