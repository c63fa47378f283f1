//! The thin safe layer over `perf_event_open(2)`, its ioctls, tracefs and sysfs lookups.
//!
//! Everything unsafe about opening events lives here: attribute structs are built zeroed with
//! the size the bindings know, paths handed to the kernel (uprobe binaries) outlive the call,
//! and every fd is an [`OwnedFd`] closed on drop.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use perf_event_open_sys as sys;
use sys::bindings::perf_event_attr;

use super::error::PerfError;
use super::format::Format;
use super::record::Layout;

/// What an event is, for `perf_event_attr.type`/`config*`.
#[derive(Debug, Clone)]
pub enum EventSpec {
    /// A tracefs tracepoint (`PERF_TYPE_TRACEPOINT`, config = its id).
    Tracepoint {
        /// The tracepoint id.
        id: u64,
    },
    /// A uprobe through the dynamic `uprobe` PMU.
    Uprobe {
        /// The PMU's type number (`/sys/bus/event_source/devices/uprobe/type`).
        pmu_type: u32,
        /// The binary.
        path: PathBuf,
        /// File offset of the probed instruction.
        offset: u64,
        /// `Some(bit)` for a return probe: the `config` bit from `format/retprobe`.
        retprobe_bit: Option<u32>,
    },
    /// `PERF_COUNT_SW_DUMMY`: carries task/comm side records only.
    Dummy,
}

/// Options of one event.
#[derive(Debug, Clone, Copy)]
pub struct EventOptions {
    /// What each record carries.
    pub layout: Layout,
    /// Follow children created after opening (per-task events).
    pub inherit: bool,
    /// Start disabled; enable at the target's next exec.
    pub enable_on_exec: bool,
    /// Emit FORK/EXIT and COMM side records.
    pub task_comm: bool,
    /// Wake the reader after this many bytes in the ring (0 = every record).
    pub wakeup_bytes: u32,
    /// Emit `PERF_RECORD_SWITCH(_CPU_WIDE)` records on every context switch.
    pub context_switch: bool,
}

/// Builds the attribute struct for `spec`.
fn attr(spec: &EventSpec, opt: &EventOptions, path: Option<&CString>) -> perf_event_attr {
    let mut a = perf_event_attr { size: std::mem::size_of::<perf_event_attr>() as u32, ..Default::default() };
    match spec {
        EventSpec::Tracepoint { id } => {
            a.type_ = sys::bindings::PERF_TYPE_TRACEPOINT;
            a.config = *id;
        }
        EventSpec::Uprobe { pmu_type, offset, retprobe_bit, .. } => {
            a.type_ = *pmu_type;
            a.config = retprobe_bit.map(|b| 1u64 << b).unwrap_or(0);
            a.__bindgen_anon_3.uprobe_path = path.map(|p| p.as_ptr() as u64).unwrap_or(0);
            a.__bindgen_anon_4.probe_offset = *offset;
        }
        EventSpec::Dummy => {
            a.type_ = sys::bindings::PERF_TYPE_SOFTWARE;
            a.config = sys::bindings::PERF_COUNT_SW_DUMMY as u64;
        }
    }
    // Every occurrence is a sample.
    a.__bindgen_anon_1.sample_period = 1;
    a.sample_type = opt.layout.sample_type;
    a.sample_regs_user = opt.layout.regs_user;
    a.set_sample_id_all(opt.layout.sample_id_all as u64);
    a.set_disabled(1);
    a.set_inherit(opt.inherit as u64);
    a.set_enable_on_exec(opt.enable_on_exec as u64);
    a.set_task(opt.task_comm as u64);
    a.set_comm(opt.task_comm as u64);
    a.set_comm_exec(opt.task_comm as u64);
    a.set_context_switch(opt.context_switch as u64);
    // CLOCK_MONOTONIC: NMI-safe, allowed for every PMU, and mapped to the epoch once per capture.
    a.set_use_clockid(1);
    a.clockid = libc::CLOCK_MONOTONIC;
    if opt.wakeup_bytes > 0 {
        a.set_watermark(1);
        a.__bindgen_anon_2.wakeup_watermark = opt.wakeup_bytes;
    } else {
        a.__bindgen_anon_2.wakeup_events = 1;
    }
    a
}

/// An open perf event.
#[derive(Debug)]
pub struct PerfFd {
    fd: OwnedFd,
    /// The kernel's id of the event (`PERF_EVENT_IOC_ID`).
    pub id: u64,
    /// Human name for messages.
    pub what: String,
}

impl AsRawFd for PerfFd {
    fn as_raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }
}

fn paranoid_hint(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => {
            let level = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
                .map(|s| s.trim().to_owned())
                .unwrap_or_else(|_| "?".into());
            format!(
                " — kernel tracing needs root (or CAP_PERFMON + CAP_SYS_ADMIN for tracepoints, or \
                 /proc/sys/kernel/perf_event_paranoid = -1; it is {level} now)"
            )
        }
        Some(libc::ENOENT) | Some(libc::EINVAL) => " — the kernel does not support this event here".into(),
        Some(libc::EMFILE) => " — too many open files (raise `ulimit -n`)".into(),
        Some(libc::ESRCH) => " — no such process or thread".into(),
        _ => String::new(),
    }
}

impl PerfFd {
    /// Opens an event. `pid`/`cpu` as in `perf_event_open(2)`; `cgroup` makes `pid` a cgroup fd.
    pub fn open(
        spec: &EventSpec,
        opt: &EventOptions,
        pid: i32,
        cpu: i32,
        cgroup: bool,
        what: &str,
    ) -> Result<PerfFd, PerfError> {
        let path = match spec {
            EventSpec::Uprobe { path, .. } => {
                Some(CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| {
                    PerfError::Config(format!("{}: path contains a NUL byte", path.display()))
                })?)
            }
            _ => None,
        };
        let mut a = attr(spec, opt, path.as_ref());
        let mut flags = sys::bindings::PERF_FLAG_FD_CLOEXEC as u64;
        if cgroup {
            flags |= sys::bindings::PERF_FLAG_PID_CGROUP as u64;
        }
        // SAFETY: `a` is a fully initialised attribute struct whose `size` matches its type;
        // the uprobe path pointer (if any) points into `path`, alive until after the call.
        let fd = unsafe { sys::perf_event_open(&mut a, pid, cpu, -1, flags as _) };
        drop(path);
        if fd < 0 {
            let source = io::Error::last_os_error();
            let hint = paranoid_hint(&source);
            return Err(PerfError::Open { what: what.to_owned(), pid, cpu, source, hint });
        }
        // SAFETY: the kernel returned a fresh fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut id = 0u64;
        // SAFETY: PERF_EVENT_IOC_ID writes one u64 through the pointer.
        let r = unsafe { sys::ioctls::ID(fd.as_raw_fd(), &mut id) };
        if r < 0 {
            return Err(PerfError::Sys {
                op: "PERF_EVENT_IOC_ID",
                what: what.to_owned(),
                source: io::Error::last_os_error(),
            });
        }
        Ok(PerfFd { fd, id, what: what.to_owned() })
    }

    /// Sends this event's records to `target`'s ring (same CPU, same clock).
    pub fn set_output(&self, target: &PerfFd) -> Result<(), PerfError> {
        // SAFETY: both fds are open perf events.
        let r = unsafe { sys::ioctls::SET_OUTPUT(self.fd.as_raw_fd(), target.fd.as_raw_fd()) };
        if r < 0 {
            return Err(PerfError::Sys {
                op: "PERF_EVENT_IOC_SET_OUTPUT",
                what: self.what.clone(),
                source: io::Error::last_os_error(),
            });
        }
        Ok(())
    }

    /// Installs a tracepoint filter (tracefs filter syntax, e.g. `common_pid != 42`).
    pub fn set_filter(&self, filter: &str) -> Result<(), PerfError> {
        let c = CString::new(filter)
            .map_err(|_| PerfError::Config(format!("filter {filter:?} contains a NUL")))?;
        // SAFETY: the kernel copies the NUL-terminated string during the call.
        let r = unsafe { sys::ioctls::SET_FILTER(self.fd.as_raw_fd(), c.as_ptr() as *mut _) };
        if r < 0 {
            return Err(PerfError::Sys {
                op: "PERF_EVENT_IOC_SET_FILTER",
                what: format!("{} ({filter})", self.what),
                source: io::Error::last_os_error(),
            });
        }
        Ok(())
    }

    /// Starts counting.
    pub fn enable(&self) -> Result<(), PerfError> {
        // SAFETY: plain ioctl on an owned perf fd.
        let r = unsafe { sys::ioctls::ENABLE(self.fd.as_raw_fd(), 0) };
        if r < 0 {
            return Err(PerfError::Sys {
                op: "PERF_EVENT_IOC_ENABLE",
                what: self.what.clone(),
                source: io::Error::last_os_error(),
            });
        }
        Ok(())
    }

    /// Stops counting (errors are ignored: the event may belong to a task that exited).
    pub fn disable(&self) {
        // SAFETY: plain ioctl on an owned perf fd.
        unsafe { sys::ioctls::DISABLE(self.fd.as_raw_fd(), 0) };
    }
}

/// The CPUs that are online (`/sys/devices/system/cpu/online`, e.g. `0-3,6`).
pub fn online_cpus() -> Result<Vec<u32>, PerfError> {
    let path = Path::new("/sys/devices/system/cpu/online");
    let text = std::fs::read_to_string(path).map_err(|e| PerfError::io(path, "read", e))?;
    parse_cpu_list(&text)
        .ok_or_else(|| PerfError::Config(format!("{}: cannot parse {:?}", path.display(), text.trim())))
}

/// Parses a CPU list like `0-3,6`.
pub fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 65536 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

/// The tracefs `events` directory: `/sys/kernel/tracing/events`, else the debugfs path; when
/// neither is there and we are root, tracefs is mounted at `/sys/kernel/tracing`.
pub fn tracefs_events() -> Result<PathBuf, PerfError> {
    let candidates = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];
    for c in candidates {
        let p = Path::new(c).join("events");
        if p.join("header_page").exists() || p.join("sched").is_dir() {
            return Ok(p);
        }
    }
    let root = Path::new("/sys/kernel/tracing");
    if root.is_dir() {
        let src = c"nodev";
        let target = CString::new("/sys/kernel/tracing").map_err(|_| PerfError::Config("bad path".into()))?;
        let fstype = c"tracefs";
        // SAFETY: all pointers are NUL-terminated strings alive during the call.
        let r = unsafe { libc::mount(src.as_ptr(), target.as_ptr(), fstype.as_ptr(), 0, std::ptr::null()) };
        if r == 0 {
            tracing::info!("mounted tracefs at /sys/kernel/tracing");
            return Ok(root.join("events"));
        }
        let e = io::Error::last_os_error();
        return Err(PerfError::Tracefs {
            path: root.to_owned(),
            msg: format!(
                "tracefs is not mounted and mounting it failed ({e}); run `mount -t tracefs nodev /sys/kernel/tracing` as root"
            ),
        });
    }
    Err(PerfError::Tracefs {
        path: root.to_owned(),
        msg: "no tracefs (kernel without CONFIG_TRACING?)".into(),
    })
}

/// A tracepoint's layout by `system:name`.
pub fn tracepoint(events: &Path, full: &str) -> Result<Format, PerfError> {
    let (system, name) = full
        .split_once(':')
        .filter(|(s, n)| {
            !s.is_empty() && !n.is_empty() && !s.contains('/') && !n.contains('/') && !s.contains("..")
        })
        .ok_or_else(|| {
            PerfError::Config(format!(
                "{full:?}: a tracepoint is named SYSTEM:EVENT, e.g. sched:sched_switch"
            ))
        })?;
    let dir = events.join(system).join(name);
    if !dir.is_dir() {
        return Err(PerfError::Tracefs {
            path: dir,
            msg: format!(
                "no tracepoint {full} (see {}/available_events)",
                events.parent().unwrap_or(events).display()
            ),
        });
    }
    Format::load(&dir, system)
}

/// The uprobe PMU: its type number and the `config` bit of return probes.
pub fn uprobe_pmu() -> Result<(u32, u32), PerfError> {
    let dir = Path::new("/sys/bus/event_source/devices/uprobe");
    let t = dir.join("type");
    let ty = std::fs::read_to_string(&t)
        .map_err(|e| PerfError::io(&t, "read (is CONFIG_UPROBE_EVENTS on?)", e))?;
    let ty: u32 =
        ty.trim().parse().map_err(|_| PerfError::Config(format!("{}: not a number: {ty:?}", t.display())))?;
    let r = dir.join("format/retprobe");
    let bit = std::fs::read_to_string(&r).map_err(|e| PerfError::io(&r, "read", e))?;
    // `config:0`
    let bit: u32 = bit
        .trim()
        .strip_prefix("config:")
        .and_then(|b| b.parse().ok())
        .ok_or_else(|| PerfError::Config(format!("{}: expected config:N, got {bit:?}", r.display())))?;
    Ok((ty, bit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,6\n"), Some(vec![0, 1, 2, 3, 6]));
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }
}
