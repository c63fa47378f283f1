//! The allocator's live inputs, read from `/proc`: per-core utilization (two samples of
//! `/proc/stat`) and the cores a process's threads ran on last (`/proc/PID/task/*/stat`); and
//! the processes that declare this agent theirs ([`declared_targets`], EXIST's replicas).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::alloc::NodeUsage;

/// Why `/proc` could not be read.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// A line or field is not what the kernel writes.
    #[error("{path}: line {line}: {what}")]
    Malformed {
        /// The file.
        path: String,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        what: String,
    },
}

/// One core's time counters from `/proc/stat` (clock ticks since boot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CoreTimes {
    /// Ticks idle or waiting for I/O.
    pub idle: u64,
    /// All ticks (user, nice, system, idle, iowait, irq, softirq, steal; guest time is already
    /// inside user and nice).
    pub total: u64,
}

/// One sample of `/proc/stat`: core id → counters.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StatSample {
    /// Online cores' counters.
    pub cores: BTreeMap<u32, CoreTimes>,
}

/// Parse `/proc/stat` text (`path` only names it in errors): the `cpuN` lines.
pub fn parse_stat(text: &str, path: &str) -> Result<StatSample, UsageError> {
    let mut cores = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let bad = |what: String| UsageError::Malformed { path: path.to_owned(), line: i + 1, what };
        let mut fields = line.split_ascii_whitespace();
        let Some(name) = fields.next() else { continue };
        let Some(id) = name.strip_prefix("cpu").filter(|s| !s.is_empty()) else { continue };
        let core: u32 = id.parse().map_err(|_| bad(format!("bad cpu name {name:?}")))?;
        let mut ticks = [0u64; 8];
        for (k, slot) in ticks.iter_mut().enumerate() {
            // user nice system idle iowait irq softirq steal (kernels before 2.6.11 stop early)
            match fields.next() {
                Some(f) => {
                    *slot = f
                        .parse()
                        .map_err(|_| bad(format!("field {} of {name} is not a number: {f:?}", k + 1)))?
                }
                None if k >= 4 => break,
                None => return Err(bad(format!("{name} has {k} counters, expected at least 4"))),
            }
        }
        let total = ticks.iter().fold(0u64, |a, &t| a.saturating_add(t));
        cores.insert(core, CoreTimes { idle: ticks[3].saturating_add(ticks[4]), total });
    }
    Ok(StatSample { cores })
}

/// Read `/proc/stat` now.
pub fn sample_stat() -> Result<StatSample, UsageError> {
    let path = "/proc/stat";
    let text =
        std::fs::read_to_string(path).map_err(|source| UsageError::Io { path: path.into(), source })?;
    parse_stat(&text, path)
}

/// Per-core utilization between two samples: busy ticks / all ticks, in `[0, 1]`; a core
/// with no tick in between (or only in one sample) counts as idle (0).
pub fn utilization(before: &StatSample, after: &StatSample) -> NodeUsage {
    let utilization = after
        .cores
        .iter()
        .map(|(&core, a)| {
            let b = before.cores.get(&core).copied().unwrap_or(*a);
            let total = a.total.saturating_sub(b.total);
            let idle = a.idle.saturating_sub(b.idle).min(total);
            let u = if total == 0 { 0.0 } else { (total - idle) as f64 / total as f64 };
            (core, u)
        })
        .collect();
    NodeUsage { utilization }
}

/// Sample `/proc/stat` twice, `interval` apart, and return the cores' utilization.
pub fn measure_utilization(interval: std::time::Duration) -> Result<NodeUsage, UsageError> {
    let before = sample_stat()?;
    std::thread::sleep(interval);
    Ok(utilization(&before, &sample_stat()?))
}

/// The `processor` field (39th) of a `/proc/PID/task/TID/stat` line: the core the thread last
/// ran on. Fields are counted after the command name's closing parenthesis (the name may hold
/// spaces and parentheses).
pub fn parse_task_processor(line: &str, path: &str) -> Result<u32, UsageError> {
    let bad = |what: &str| UsageError::Malformed { path: path.to_owned(), line: 1, what: what.to_owned() };
    let rest = line.rfind(')').map(|i| &line[i + 1..]).ok_or_else(|| bad("no ')' after the command name"))?;
    // `rest` starts at field 3 (state); processor is field 39
    let field = rest.split_ascii_whitespace().nth(39 - 3).ok_or_else(|| bad("fewer than 39 fields"))?;
    field.parse().map_err(|_| bad("field 39 (processor) is not a number"))
}

/// The cores the threads of process `pid` last ran on (one per thread, deduplicated): a
/// CPU-share target's recent cores. Threads that exit while being read are skipped.
pub fn recent_cores(pid: u32) -> Result<BTreeSet<u32>, UsageError> {
    recent_cores_in(Path::new(&format!("/proc/{pid}/task")))
}

fn recent_cores_in(dir: &Path) -> Result<BTreeSet<u32>, UsageError> {
    let io = |source| UsageError::Io { path: dir.display().to_string(), source };
    let mut cores = BTreeSet::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path().join("stat");
        match std::fs::read_to_string(&path) {
            Ok(line) => {
                cores.insert(parse_task_processor(&line, &path.display().to_string())?);
            }
            // the thread exited between the listing and the read
            Err(e) if e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(source) => return Err(UsageError::Io { path: path.display().to_string(), source }),
        }
    }
    Ok(cores)
}

/// The processes that declare this agent theirs: live processes whose environment sets
/// `WEFT_PROBE_DIR` to `probe_dir` (instrumented processes record there; uninstrumented ones
/// declare their agent the same way), each with its service (`WEFT_PROBE_SERVICE`, else its
/// comm) and the size of its executable. Processes whose environment cannot be read (another
/// user's, without root) are left out. Sorted by pid; at most `max`.
pub fn declared_targets(probe_dir: &Path, max: usize) -> Vec<weft_control::proto::TargetReport> {
    let want = probe_dir.as_os_str().as_encoded_bytes();
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut pids: Vec<u32> =
        entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok()).collect();
    pids.sort_unstable();
    let mut out = Vec::new();
    let me = std::process::id();
    for pid in pids.into_iter().filter(|&p| p != me) {
        if out.len() >= max {
            break;
        }
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else { continue };
        let var = |name: &[u8]| {
            env.split(|&b| b == 0)
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix(b"="))
                .map(<[u8]>::to_vec)
        };
        if var(b"WEFT_PROBE_DIR").as_deref() != Some(want) {
            continue;
        }
        let service = match var(b"WEFT_PROBE_SERVICE").filter(|s| !s.is_empty()) {
            Some(s) => String::from_utf8_lossy(&s).into_owned(),
            None => {
                std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default().trim_end().to_owned()
            }
        };
        let binary_bytes = std::fs::metadata(format!("/proc/{pid}/exe")).map_or(0, |m| m.len());
        out.push(weft_control::proto::TargetReport { pid, service, binary_bytes });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processes_declaring_the_probe_dir_are_targets() {
        let dir = tempfile::tempdir().unwrap();
        let spawn = |service: Option<&str>| {
            let mut c = std::process::Command::new("sleep");
            c.arg("30").env("WEFT_PROBE_DIR", dir.path());
            if let Some(s) = service {
                c.env("WEFT_PROBE_SERVICE", s);
            }
            c.spawn().unwrap()
        };
        let mut named = spawn(Some("api"));
        let mut plain = spawn(None);
        let mut other = std::process::Command::new("sleep")
            .arg("30")
            .env("WEFT_PROBE_DIR", "/elsewhere")
            .spawn()
            .unwrap();
        // `spawn` can return while the child is still inside execve: its name is already
        // "sleep" but the kernel has not yet published the new environment, and
        // /proc/PID/environ reads empty until it has. Wait for the environment itself.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        for c in [&named, &plain, &other] {
            let environ = format!("/proc/{}/environ", c.id());
            while std::fs::read(&environ).map_or(true, |e| !e.windows(14).any(|w| w == b"WEFT_PROBE_DIR"))
                && std::time::Instant::now() < deadline
            {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
        let mut t = declared_targets(dir.path(), 100);
        let capped = declared_targets(dir.path(), 1).len();
        for c in [&mut named, &mut plain, &mut other] {
            let _ = c.kill();
            let _ = c.wait();
        }
        t.sort_by_key(|t| t.pid);
        let got: Vec<(u32, &str)> = t.iter().map(|t| (t.pid, &*t.service)).collect();
        assert_eq!(got, [(named.id(), "api"), (plain.id(), "sleep")]);
        assert!(t.iter().all(|t| t.binary_bytes > 0));
        assert_eq!(capped, 1);
    }

    #[test]
    fn stat_lines_and_utilization() {
        let a =
            "cpu  10 0 10 80 0 0 0 0 0 0\ncpu0 5 0 5 40 0 0 0 0 0 0\ncpu1 5 0 5 40 0 0 0 0 0 0\nintr 1 2\n";
        let b = "cpu  10 0 10 80 0 0 0 0 0 0\ncpu0 35 0 35 70 0 0 0 0 0 0\ncpu1 5 0 5 130 10 0 0 0 0 0\n";
        let (a, b) = (parse_stat(a, "a").unwrap(), parse_stat(b, "b").unwrap());
        assert_eq!(a.cores.len(), 2);
        let u = utilization(&a, &b);
        assert_eq!(u.utilization[&0], 0.6666666666666666);
        assert_eq!(u.utilization[&1], 0.0);
        let e = parse_stat("cpu0 1 2 x 4\n", "/proc/stat").unwrap_err();
        assert_eq!(e.to_string(), "/proc/stat: line 1: field 3 of cpu0 is not a number: \"x\"");
        assert!(parse_stat("cpu3 1 2\n", "s").is_err());
    }

    #[test]
    fn task_processor_survives_odd_names() {
        let mut line = String::from("42 (a) b (c) S");
        for i in 4..=52 {
            line.push_str(&format!(" {}", if i == 39 { 7 } else { i }));
        }
        assert_eq!(parse_task_processor(&line, "t").unwrap(), 7);
        assert!(parse_task_processor("42 (x) S 1 2", "t").is_err());
        assert!(parse_task_processor("no paren", "t").is_err());
    }
}
