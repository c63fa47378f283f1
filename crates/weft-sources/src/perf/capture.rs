//! A bounded kernel capture: opening the events, one ring per CPU, draining it into
//! [`Event`]s, and counting what was lost.
//!
//! ## How events are opened
//!
//! | event | target `--pid`/`--tid`/`--exec` | target `--cgroup` | no target |
//! |---|---|---|---|
//! | `sched:sched_switch` | per CPU, every task; kept when either side is a traced thread | same (traced = listed in `cgroup.threads` or seen in a cgroup sample) | per CPU, every task |
//! | other tracepoints, uprobes (tracefs dynamic events) | per traced thread × CPU, `inherit` (not for `--tid`) | per CPU with `PERF_FLAG_PID_CGROUP` | per CPU, filter `common_pid != <weft's threads>` |
//! | side records (FORK/EXIT/COMM) | a per-task dummy event with `inherit` | — | — |
//!
//! `sched_switch` fires in the context of the task being switched *out*, so a per-task (or
//! cgroup) event would see a thread leave the CPU but never arrive; EXIST's scheduler records
//! need both, hence the per-CPU event and the user-space filter (switches of threads that are
//! not (yet) known are held for one drain round, so a thread whose FORK record sits in another
//! CPU's ring is not lost). Everything else is per task, which also keeps weft's own syscalls
//! out of the capture (the feedback loop of system-wide syscall tracing).
//!
//! Every event of a CPU writes into that CPU's ring (`PERF_EVENT_IOC_SET_OUTPUT`); records
//! carry `PERF_SAMPLE_IDENTIFIER` so the decoder knows which event each came from. All events
//! use `CLOCK_MONOTONIC`; the capture maps it to the epoch with one paired reading of
//! `CLOCK_REALTIME` taken at open.
//!
//! With `--exec`, per-task events are opened on the stopped child with `enable_on_exec`, so
//! counting starts exactly at `exec`.

use std::collections::HashSet;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::Duration;

use weft_model::event::KernelEvent;
use weft_model::{Clock, Event, EventKind, SourceId, TimeUnit};

use super::decode::{DecodeStats, Decoded, Decoder, Probe, Side};
use super::error::PerfError;
use super::format::Format;
use super::record::{Layout, SAMPLE_CPU, SAMPLE_IDENTIFIER, SAMPLE_RAW, SAMPLE_TID, SAMPLE_TIME};
use super::ring::Ring;
use super::sys::{self, EventOptions, EventSpec, PerfFd};
use super::uprobe::{DynamicUprobes, UprobeTarget};

/// Whose activity to capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Every task (syscalls of weft itself are filtered out in the kernel).
    All,
    /// These processes: every thread they have now, and (inherit) every one they create.
    Pids(Vec<u32>),
    /// Exactly these threads.
    Tids(Vec<u32>),
    /// The tasks of a cgroup (v2 directory, e.g. `/sys/fs/cgroup/system.slice/x.service`).
    Cgroup(PathBuf),
    /// A child stopped before `exec` (see `weft record --exec`): per-task events are enabled
    /// by its `exec`.
    Exec(u32),
}

/// What to capture.
#[derive(Debug, Clone)]
pub struct CaptureConfig {
    /// Tracepoints by `system:name` (`sched:sched_switch`, `raw_syscalls:sys_enter`, ...).
    pub tracepoints: Vec<String>,
    /// Uprobes; each gets an entry and a return probe.
    pub uprobes: Vec<UprobeTarget>,
    /// Whose activity.
    pub target: Target,
    /// Data pages per CPU ring (a power of two; 256 pages = 1 MiB).
    pub ring_pages: usize,
    /// Only these CPUs, each with its own ring size in data pages (a power of two); empty =
    /// every online CPU with `ring_pages`.
    pub cpus: Vec<(u32, usize)>,
    /// Source id stamped on the events.
    pub source: SourceId,
}

impl Default for CaptureConfig {
    fn default() -> Self {
        CaptureConfig {
            tracepoints: vec![
                "sched:sched_switch".into(),
                "raw_syscalls:sys_enter".into(),
                "raw_syscalls:sys_exit".into(),
            ],
            uprobes: Vec::new(),
            target: Target::All,
            ring_pages: 256,
            cpus: Vec::new(),
            source: SourceId(0),
        }
    }
}

/// Counters of one CPU's ring.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuStats {
    /// CPU number.
    pub cpu: u32,
    /// Records read.
    pub records: u64,
    /// Bytes of the records read (headers included).
    pub bytes: u64,
    /// Records the kernel dropped because the ring was full (`PERF_RECORD_LOST`).
    pub lost: u64,
    /// Reads cut short by an impossible record header.
    pub corrupt: u64,
}

/// Counters of a capture.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CaptureStats {
    /// Per CPU.
    pub cpus: Vec<CpuStats>,
    /// Events handed out.
    pub events: u64,
    /// Scheduler switches dropped because neither side was a traced thread.
    pub sched_filtered: u64,
    /// Decoder counters (malformed records with the first messages; lost totals).
    pub decode: DecodeStats,
    /// Events opened (fds).
    pub opened: usize,
}

impl CaptureStats {
    /// Records lost over all CPUs.
    pub fn lost(&self) -> u64 {
        self.cpus.iter().map(|c| c.lost).sum::<u64>() + self.decode.lost_samples
    }
}

struct CpuRing {
    cpu: u32,
    ring: Ring,
    stats: CpuStats,
}

/// An event that [`Capture::enable`] starts, with its CPU; the ring owners (the per-CPU
/// `sched_switch` or dummy event) are what [`Capture::enable_owners`] starts alone.
struct CpuFd {
    cpu: u32,
    owner: bool,
    fd: PerfFd,
}

/// An open capture.
pub struct Capture {
    rings: Vec<CpuRing>,
    /// Events enabled by [`Capture::enable`] (per-task events of an `Exec` target wait for exec).
    enable_now: Vec<CpuFd>,
    /// Events that enable themselves at exec.
    on_exec: Vec<PerfFd>,
    /// One never-enabled event per uprobe on weft's own process ([`keepers`]): closing the
    /// target's events then only takes the breakpoints out of the target, and the kernel's
    /// unregistration (a grace period per uprobe) waits until these close.
    keepers: Vec<PerfFd>,
    decoder: Decoder,
    /// Kept alive (and removed from tracefs on drop) until the capture is dropped or
    /// [`Capture::detach`]ed.
    uprobes: Option<DynamicUprobes>,
    /// Traced threads (`None` = everything).
    traced: Option<HashSet<u32>>,
    cgroup_threads: Option<PathBuf>,
    pending: Vec<Event>,
    epoll: std::os::fd::OwnedFd,
    stats: CaptureStats,
    clock: Clock,
}

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capture").field("cpus", &self.rings.len()).field("stats", &self.stats).finish()
    }
}

/// CLOCK_REALTIME − CLOCK_MONOTONIC, from the closest of a few paired readings, as a clock
/// mapping perf's CLOCK_MONOTONIC timestamps to ns since the epoch.
pub fn monotonic_to_unix() -> Clock {
    fn now(id: libc::clockid_t) -> u64 {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: writes one timespec.
        unsafe { libc::clock_gettime(id, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }
    let mut best = (u64::MAX, 0u64, 0u64);
    for _ in 0..5 {
        let m0 = now(libc::CLOCK_MONOTONIC);
        let r = now(libc::CLOCK_REALTIME);
        let m1 = now(libc::CLOCK_MONOTONIC);
        if m1.wrapping_sub(m0) < best.0 {
            best = (m1.wrapping_sub(m0), m0 + (m1 - m0) / 2, r);
        }
    }
    // Origin well before any event of this capture so no timestamp saturates.
    let back = best.1.min(1_000_000_000_000);
    Clock { unit: TimeUnit::Nanos, epoch_ns: best.2 - back, raw_origin: best.1 - back }
}

fn threads_of(pid: u32) -> Vec<u32> {
    let mut v: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default();
    v.sort_unstable();
    if v.is_empty() {
        v.push(pid);
    }
    v
}

fn read_cgroup_threads(dir: &std::path::Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.threads"))
        .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

const BASE: u64 = SAMPLE_IDENTIFIER | SAMPLE_TID | SAMPLE_TIME | SAMPLE_CPU;

impl Capture {
    /// Opens every event (disabled) and maps the rings.
    pub fn open(cfg: &CaptureConfig) -> Result<Capture, PerfError> {
        let cpus: Vec<(u32, usize)> = if cfg.cpus.is_empty() {
            sys::online_cpus()?.into_iter().map(|c| (c, cfg.ring_pages)).collect()
        } else {
            let online = sys::online_cpus()?;
            if let Some((c, _)) = cfg.cpus.iter().find(|(c, _)| !online.contains(c)) {
                return Err(PerfError::Config(format!("CPU {c} is not online (online: {online:?})")));
            }
            cfg.cpus.clone()
        };
        if let Some((_, pages)) = cpus.iter().find(|(_, p)| !p.is_power_of_two()) {
            return Err(PerfError::Config(format!("ring size {pages} pages is not a power of two")));
        }
        if cfg.tracepoints.is_empty() && cfg.uprobes.is_empty() {
            return Err(PerfError::Config(
                "nothing to capture: give tracepoints (-e) or uprobes (--uprobe)".into(),
            ));
        }
        let clock = monotonic_to_unix();
        let mut decoder = Decoder::new(clock, cfg.source).with_proc_lookups(true);
        let page = 4096u32;

        // Resolve tracepoints.
        let mut formats: Vec<Format> = Vec::new();
        if !cfg.tracepoints.is_empty() {
            let events = sys::tracefs_events()?;
            for t in &cfg.tracepoints {
                let f = sys::tracepoint(&events, t)?;
                if !formats.iter().any(|x| x.full_name == f.full_name) {
                    formats.push(f);
                }
            }
        }
        let (switch, others): (Vec<Format>, Vec<Format>) =
            formats.into_iter().partition(|f| &*f.full_name == "sched:sched_switch");

        let tp_layout = Layout { sample_type: BASE | SAMPLE_RAW, regs_user: 0, sample_id_all: true };
        let dummy_layout = Layout { sample_type: BASE, regs_user: 0, sample_id_all: true };

        // Per-task (or per-cgroup/global) specs: (spec, layout, probe, name).
        let mut specs: Vec<(EventSpec, Layout, Probe, String)> = Vec::new();
        for f in others {
            let name = f.full_name.to_string();
            specs.push((EventSpec::Tracepoint { id: f.id }, tp_layout, Probe::for_tracepoint(f), name));
        }
        let mut uprobes = None;
        if !cfg.uprobes.is_empty() {
            let events = sys::tracefs_events()?;
            let dyn_probes = uprobes.insert(DynamicUprobes::new(&events));
            for u in &cfg.uprobes {
                let (entry, ret) = dyn_probes.add(u)?;
                for (tp, is_ret) in [(entry, false), (ret, true)] {
                    let f = sys::tracepoint(&events, &tp)?;
                    let probe = Probe::for_uprobe(u.name.clone(), is_ret, &f)
                        .ok_or_else(|| PerfError::Config(format!("{tp}: unexpected uprobe event layout")))?;
                    specs.push((
                        EventSpec::Tracepoint { id: f.id },
                        tp_layout,
                        probe,
                        format!("{}uprobe {}", if is_ret { "ret" } else { "" }, u.name),
                    ));
                }
            }
        }

        let keepers = match (&cfg.target, &uprobes) {
            (Target::All, _) | (_, None) => Vec::new(),
            _ => keepers(&specs, &cfg.uprobes, tp_layout)?,
        };

        // Targets of per-task events.
        let (task_pids, inherit, exec): (Vec<u32>, bool, bool) = match &cfg.target {
            Target::Pids(p) => (p.iter().flat_map(|&p| threads_of(p)).collect(), true, false),
            Target::Tids(t) => (t.clone(), false, false),
            Target::Exec(p) => (vec![*p], true, true),
            Target::All | Target::Cgroup(_) => (Vec::new(), false, false),
        };
        let traced: Option<HashSet<u32>> = match &cfg.target {
            Target::All => None,
            Target::Pids(_) | Target::Tids(_) | Target::Exec(_) => Some(task_pids.iter().copied().collect()),
            Target::Cgroup(dir) => Some(read_cgroup_threads(dir).into_iter().collect()),
        };
        if let Target::Pids(pids) = &cfg.target {
            for &p in pids {
                for t in threads_of(p) {
                    decoder.learn(p, t);
                }
            }
        }
        let cgroup_fd = match &cfg.target {
            Target::Cgroup(dir) => {
                let f =
                    std::fs::File::open(dir).map_err(|e| PerfError::io(dir, "open cgroup directory", e))?;
                Some(f)
            }
            _ => None,
        };
        let self_filter = if cfg.target == Target::All {
            let me = std::process::id();
            Some(threads_of(me).iter().map(|t| format!("common_pid != {t}")).collect::<Vec<_>>().join(" && "))
        } else {
            None
        };

        let epoll = {
            // SAFETY: plain syscall.
            let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
            if fd < 0 {
                return Err(PerfError::Sys {
                    op: "epoll_create1",
                    what: "capture".into(),
                    source: std::io::Error::last_os_error(),
                });
            }
            // SAFETY: fresh fd owned by nobody else.
            unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) }
        };

        let mut rings = Vec::new();
        let mut enable_now = Vec::new();
        let mut on_exec = Vec::new();
        let opt = |layout: Layout, context_switch: bool, wakeup: u32| EventOptions {
            layout,
            inherit: false,
            enable_on_exec: false,
            task_comm: false,
            wakeup_bytes: wakeup,
            context_switch,
        };
        for &(cpu, ring_pages) in &cpus {
            let c = cpu as i32;
            let wakeup = (ring_pages.min(1 << 20) as u32 * page / 4).max(page);
            // The ring owner: sched_switch for every task, or a dummy event.
            let owner = match switch.first() {
                Some(f) => {
                    let fd = PerfFd::open(
                        &EventSpec::Tracepoint { id: f.id },
                        &opt(tp_layout, true, wakeup),
                        -1,
                        c,
                        false,
                        "sched:sched_switch",
                    )?;
                    decoder
                        .add(fd.id, tp_layout, Probe::for_tracepoint(f.clone()))
                        .map_err(PerfError::Config)?;
                    fd
                }
                None => {
                    let fd = PerfFd::open(
                        &EventSpec::Dummy,
                        &opt(dummy_layout, false, wakeup),
                        -1,
                        c,
                        false,
                        "ring owner (dummy)",
                    )?;
                    decoder.add(fd.id, dummy_layout, Probe::Dummy).map_err(PerfError::Config)?;
                    fd
                }
            };
            let ring = Ring::map(&owner, ring_pages, &owner.what)?;
            let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: rings.len() as u64 };
            // SAFETY: registering an open fd with our epoll instance.
            if unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, owner.as_raw_fd(), &mut ev) }
                < 0
            {
                return Err(PerfError::Sys {
                    op: "epoll_ctl",
                    what: owner.what.clone(),
                    source: std::io::Error::last_os_error(),
                });
            }
            rings.push(CpuRing { cpu, ring, stats: CpuStats { cpu, ..Default::default() } });

            let mut attach = |spec: &EventSpec,
                              layout: Layout,
                              probe: Probe,
                              what: &str,
                              pid: i32,
                              task: bool,
                              task_comm: bool|
             -> Result<(), PerfError> {
                let o = EventOptions {
                    layout,
                    inherit: task && inherit,
                    enable_on_exec: task && exec,
                    task_comm,
                    wakeup_bytes: wakeup,
                    context_switch: false,
                };
                let fd = PerfFd::open(spec, &o, pid, c, cgroup_fd.is_some(), what)?;
                fd.set_output(&owner)?;
                if let (Some(f), EventSpec::Tracepoint { .. }) = (&self_filter, spec) {
                    fd.set_filter(f)?;
                }
                decoder.add(fd.id, layout, probe).map_err(PerfError::Config)?;
                if o.enable_on_exec {
                    on_exec.push(fd);
                } else {
                    enable_now.push(CpuFd { cpu, owner: false, fd });
                }
                Ok(())
            };
            match (&cfg.target, &cgroup_fd) {
                (Target::All, _) => {
                    for (spec, layout, probe, what) in &specs {
                        attach(spec, *layout, probe.clone(), what, -1, false, false)?;
                    }
                }
                (Target::Cgroup(_), Some(cg)) => {
                    for (spec, layout, probe, what) in &specs {
                        attach(spec, *layout, probe.clone(), what, cg.as_raw_fd(), false, false)?;
                    }
                }
                _ => {
                    for &tid in &task_pids {
                        for (spec, layout, probe, what) in &specs {
                            attach(
                                spec,
                                *layout,
                                probe.clone(),
                                &format!("{what} (tid {tid})"),
                                tid as i32,
                                true,
                                false,
                            )?;
                        }
                        // FORK/EXIT/COMM of the traced tasks (inherit follows their children).
                        attach(
                            &EventSpec::Dummy,
                            dummy_layout,
                            Probe::Dummy,
                            &format!("task tracker (tid {tid})"),
                            tid as i32,
                            true,
                            true,
                        )?;
                    }
                }
            }
            enable_now.push(CpuFd { cpu, owner: true, fd: owner });
        }
        let opened = enable_now.len() + on_exec.len() + keepers.len();
        tracing::debug!(opened, cpus = cpus.len(), "kernel capture opened");
        Ok(Capture {
            rings,
            enable_now,
            on_exec,
            keepers,
            decoder,
            uprobes,
            traced,
            cgroup_threads: match &cfg.target {
                Target::Cgroup(d) => Some(d.clone()),
                _ => None,
            },
            pending: Vec::new(),
            epoll,
            stats: CaptureStats { opened, ..Default::default() },
            clock,
        })
    }

    /// Starts the events (per-task events of an `Exec` target start at the child's exec).
    pub fn enable(&self) -> Result<(), PerfError> {
        for e in &self.enable_now {
            e.fd.enable()?;
        }
        Ok(())
    }

    /// Starts only the ring owners: the per-CPU `sched_switch` events (or the dummy events
    /// when the capture has no `sched_switch`). The other events wait for
    /// [`Capture::enable_cpu`] — EXIST's controller switches a CPU's tracer on when the target
    /// first runs there.
    pub fn enable_owners(&self) -> Result<(), PerfError> {
        for e in self.enable_now.iter().filter(|e| e.owner) {
            e.fd.enable()?;
        }
        Ok(())
    }

    /// Starts the events of `cpu` other than its ring owner; the number of events started.
    pub fn enable_cpu(&self, cpu: u32) -> Result<usize, PerfError> {
        let mut n = 0;
        for e in self.enable_now.iter().filter(|e| e.cpu == cpu && !e.owner) {
            e.fd.enable()?;
            n += 1;
        }
        Ok(n)
    }

    /// Stops the events of `cpu` other than its ring owner (a CPU whose buffer is full).
    pub fn disable_cpu(&self, cpu: u32) {
        for e in self.enable_now.iter().filter(|e| e.cpu == cpu && !e.owner) {
            e.fd.disable();
        }
    }

    /// Closes every event but the ring owners and removes the uprobes from tracefs. An open
    /// uprobe event keeps its breakpoint in the target even while disabled (every hit still
    /// traps), so a bounded capture detaches at its end, before it reads what the rings still
    /// hold: records already written stay readable ([`Capture::finish`]).
    ///
    /// The target's events close here, which takes every breakpoint out of the target at
    /// once; the uprobes stay registered (by the keepers) and in tracefs until the returned
    /// [`Detached`] is dropped, which unregisters them, a grace period each.
    pub fn detach(&mut self) -> Detached {
        self.enable_now.retain(|e| e.owner);
        self.on_exec.clear();
        Detached { keepers: std::mem::take(&mut self.keepers), uprobes: self.uprobes.take() }
    }

    /// The CPUs the capture has a ring on.
    pub fn cpus(&self) -> Vec<u32> {
        self.rings.iter().map(|r| r.cpu).collect()
    }

    /// Stops every event.
    pub fn disable(&self) {
        for fd in self.enable_now.iter().map(|e| &e.fd).chain(&self.on_exec) {
            fd.disable();
        }
    }

    /// The clock mapping raw (CLOCK_MONOTONIC) times to the epoch.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// Counters so far.
    pub fn stats(&self) -> CaptureStats {
        let mut s = self.stats.clone();
        s.cpus = self.rings.iter().map(|r| CpuStats { corrupt: r.ring.corrupt, ..r.stats.clone() }).collect();
        s.decode = self.decoder.stats.clone();
        s
    }

    /// Waits up to `timeout` for data, then drains every ring into `out`.
    pub fn poll(&mut self, timeout: Duration, out: &mut Vec<Event>) -> Result<usize, PerfError> {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 16];
        // SAFETY: epoll_wait writes at most `evs.len()` entries.
        let n = unsafe {
            libc::epoll_wait(
                self.epoll.as_raw_fd(),
                evs.as_mut_ptr(),
                evs.len() as i32,
                timeout.as_millis().min(i32::MAX as u128) as i32,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(PerfError::Sys { op: "epoll_wait", what: "capture".into(), source: e });
            }
        }
        Ok(self.drain(out, false))
    }

    /// Drains every ring; `last` decides every held switch record now.
    pub fn drain(&mut self, out: &mut Vec<Event>, last: bool) -> usize {
        let before = out.len();
        let mut fresh = Vec::new();
        let Capture { rings, decoder, traced, .. } = self;
        for r in rings.iter_mut() {
            let cpu = r.cpu;
            let stats = &mut r.stats;
            let lost_before = decoder.stats.lost;
            r.ring.drain(|rec| {
                stats.records += 1;
                stats.bytes += rec.len() as u64;
                match decoder.decode(rec, cpu) {
                    Decoded::Event(e) => {
                        // Per-CPU events of every task: kept for traced threads only.
                        let global = matches!(e.kind, EventKind::Kernel(KernelEvent::SchedSwitch { .. }));
                        if global && traced.is_some() {
                            fresh.push(e);
                        } else {
                            // With a target, every non-switch event comes from a per-task or
                            // cgroup event: its thread is traced.
                            if let (Some(set), Some(tid)) = (traced.as_mut(), event_tid(&e)) {
                                set.insert(tid);
                            }
                            out.push(e);
                        }
                    }
                    Decoded::Side(Side::Fork { tid, .. }) => {
                        if let Some(set) = traced.as_mut() {
                            set.insert(tid);
                        }
                    }
                    Decoded::Side(Side::Exit { .. }) | Decoded::Nothing => {}
                }
            });
            stats.lost += decoder.stats.lost - lost_before;
        }
        if let (Some(dir), Some(set)) = (&self.cgroup_threads, self.traced.as_mut()) {
            set.extend(read_cgroup_threads(dir));
        }
        let Some(set) = &self.traced else {
            self.stats.events += (out.len() - before) as u64;
            return out.len() - before;
        };
        let member = |e: &Event| match &e.kind {
            EventKind::Kernel(KernelEvent::SchedSwitch { prev_tid, next_tid, .. }) => {
                set.contains(prev_tid) || set.contains(next_tid)
            }
            _ => true,
        };
        for e in self.pending.drain(..) {
            if member(&e) {
                out.push(e);
            } else {
                self.stats.sched_filtered += 1;
            }
        }
        for e in fresh {
            if member(&e) {
                out.push(e);
            } else if last {
                self.stats.sched_filtered += 1;
            } else {
                self.pending.push(e);
            }
        }
        self.stats.events += (out.len() - before) as u64;
        out.len() - before
    }

    /// Stops the events and drains what is left.
    pub fn finish(&mut self, out: &mut Vec<Event>) -> usize {
        self.disable();
        self.drain(out, true)
    }

    /// Threads known to be traced so far (`None` = every task).
    pub fn traced_threads(&self) -> Option<&HashSet<u32>> {
        self.traced.as_ref()
    }

    /// The decoder's thread → process map entry for `tid`.
    pub fn process_of(&mut self, tid: u32) -> u32 {
        self.decoder.process_of(tid)
    }
}

impl Drop for Capture {
    /// In [`Capture::detach`]'s order: the target's events, the keepers, the tracefs events,
    /// then the rings.
    fn drop(&mut self) {
        drop(self.detach());
    }
}

/// What [`Capture::detach`] leaves of a capture's uprobes: their keepers and tracefs events,
/// released in that order when dropped (the kernel waits a grace period per uprobe).
#[must_use = "dropping it unregisters the uprobes"]
pub struct Detached {
    keepers: Vec<PerfFd>,
    uprobes: Option<DynamicUprobes>,
}

impl Drop for Detached {
    fn drop(&mut self) {
        self.keepers.clear();
        self.uprobes = None;
    }
}

/// A never-enabled event on each uprobe of `specs`, on this process, which does not map the
/// probed binaries (none when it does: the breakpoints would be in weft itself). The kernel
/// unregisters a uprobe event — waiting a grace period, some 75 ms each on the test machine —
/// when its last perf event closes, under a lock all such closes share; without keepers that
/// is the close of the target's last event on it, so the closes of 8 probes one after another
/// kept the last breakpoints in the target for half a second after the capture's end.
fn keepers(
    specs: &[(EventSpec, Layout, Probe, String)],
    uprobes: &[UprobeTarget],
    layout: Layout,
) -> Result<Vec<PerfFd>, PerfError> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    if uprobes.iter().any(|u| maps.lines().any(|l| l.ends_with(&*u.path.to_string_lossy()))) {
        tracing::debug!("weft maps a probed binary itself: no uprobe keepers");
        return Ok(Vec::new());
    }
    let opts = EventOptions {
        layout,
        inherit: false,
        enable_on_exec: false,
        task_comm: false,
        wakeup_bytes: 1,
        context_switch: false,
    };
    let me = std::process::id() as i32;
    specs
        .iter()
        .filter(|(_, _, probe, _)| matches!(probe, Probe::Uprobe { .. }))
        .map(|(spec, _, _, what)| PerfFd::open(spec, &opts, me, -1, false, &format!("{what} (keeper)")))
        .collect()
}

/// The thread an event belongs to (for per-task samples).
fn event_tid(e: &Event) -> Option<u32> {
    match &e.kind {
        EventKind::Kernel(
            KernelEvent::SyscallEnter { tid, .. }
            | KernelEvent::SyscallExit { tid, .. }
            | KernelEvent::UprobeEntry { tid, .. }
            | KernelEvent::UprobeReturn { tid, .. },
        ) => Some(*tid),
        EventKind::Tracepoint(t) => t.tid,
        _ => None,
    }
}
