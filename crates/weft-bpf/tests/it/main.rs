//! weft-bpf's integration tests. They load and attach eBPF programs (root) and compare with
//! bpftrace (installed from .ci/apt-packages). The tests take one lock: the fd checks count
//! this process's eBPF and perf fds.

mod failure;
mod tracepoint;
mod uprobe;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

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

/// A running bpftrace (`-f json`), attached.
pub struct Bpftrace {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Bpftrace {
    /// Starts `script` and waits until its probes fire. bpftrace 0.17 reports
    /// `attached_probes` before it has attached them, so a sentinel probe goes last — this
    /// thread's next system call prints `ready` — and the thread makes system calls until
    /// bpftrace has printed it.
    pub fn start(script: &str) -> Bpftrace {
        // SAFETY: gettid(2) has no arguments and cannot fail.
        let me = unsafe { libc::gettid() };
        let script = format!(
            "{script} tracepoint:raw_syscalls:sys_exit /tid == {me} && @ready == 0/ {{ @ready = 1; printf(\"ready\\n\"); }}"
        );
        let mut child = Command::new("bpftrace")
            .args(["-f", "json", "-e", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("bpftrace 0.17 (listed in .ci/apt-packages) must be installed");
        let out = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in out.lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let bt = Bpftrace { child, lines };
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            assert!(Instant::now() < deadline, "bpftrace did not attach: {script}");
            // SAFETY: getppid(2) cannot fail; it is the system call the sentinel waits for.
            unsafe { libc::getppid() };
            match bt.lines.recv_timeout(Duration::from_millis(50)) {
                Ok(l) if l.contains("ready") => return bt,
                Ok(_) | Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => panic!("bpftrace exited: {script}"),
            }
        }
    }

    /// Stops it (SIGINT: it prints its maps) and returns `@name → JSON value`.
    pub fn finish(self) -> BTreeMap<String, serde_json::Value> {
        // SAFETY: plain kill(2) on our child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let mut maps = BTreeMap::new();
        loop {
            let l = match self.lines.recv_timeout(Duration::from_secs(60)) {
                Ok(l) => l,
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => panic!("bpftrace did not stop on SIGINT"),
            };
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&l) else { continue };
            if let Some(data) = v.get("data").and_then(|d| d.as_object()) {
                for (k, v) in data {
                    maps.insert(k.clone(), v.clone());
                }
            }
        }
        maps
    }
}

impl Drop for Bpftrace {
    fn drop(&mut self) {
        // A failed test must not leave bpftrace attached (after `finish` it has exited).
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
