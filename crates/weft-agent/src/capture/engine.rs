//! The capture engine: one bounded capture of a target, from request to result.
//!
//! [`Engine::run`] checks the request, resolves the target (a pid, a service name matched
//! against `/proc/PID/comm` and the command line's program name, or a cgroup v2 directory),
//! sizes one buffer per core with the node's [`Allocator`], opens the backend, runs the
//! operation-aware controller for the period and releases everything before it returns.
//!
//! **Backends.** Intel PT is refused on a CPU without it with
//! [`weft_sources::perf::pt::NoIntelPt`]'s message. The software backend gives the same
//! product — the target's function calls and returns per thread, in order, for the period —
//! from uprobes and uretprobes on the target module's functions (all of them, or those the
//! `functions` globs match), opened through `weft_sources::perf::Capture` like `weft record`'s,
//! and/or the target's weft-probe tracepoints the request's `tracepoints` selectors match,
//! switched on for the period and back off at its end ([`super::tracepoints`]).
//!
//! **The controller.** Every core's `sched_switch` event runs for the whole period (they
//! are the scheduler records); a core's function probes are switched on once, when a target
//! thread is first seen scheduled in there (or is on that core when the capture starts), and
//! stay on until the period ends. Control operations therefore scale with the number of
//! cores, never with context switches ([`Counters::control_ops`]). Calls a target thread makes
//! on a core in the moment between its first switch-in and the controller reading that
//! record are not seen: the controller runs in user space, polling every
//! [`POLL_INTERVAL`].
//!
//! **Order and cost.** Everything that can refuse a request — the period, the backend, the
//! budget, permissions, the target, its functions and its weft-probe tracepoints — is
//! checked before the first perf event is opened, so a refusal opens nothing. The uprobes
//! exist only from [`Capture::open`] to the period's end, where [`Capture::detach`] closes
//! the target's events before the rings are read (a disabled uprobe event would still trap),
//! taking every breakpoint out of the target at once; the uprobes are unregistered after (a
//! grace period each). Between captures nothing stays attached. An engine keeps the functions it
//! resolved (per module, keyed by its device, inode, modification time and size, and the
//! globs; the last [`CACHED_MODULES`]), so a series of captures of one target reads the
//! module's symbols once ([`Counters::functions_cached`]). Each capture measures the CPU time
//! of its thread before, during and after the period ([`Counters::cpu_setup`],
//! [`Counters::cpu_window`], [`Counters::cpu_release`]) and the controller's wake-ups
//! ([`Counters::polls`]).
//!
//! **Bounds.** The period must lie in [`MIN_PERIOD`]..=[`MAX_PERIOD`] unless forced; a timer
//! in the loop stops every event at the period's end ([`Counters::stop_latency`] measures
//! how late). A core's buffer (its allocation) is split between its kernel ring (half, at
//! most [`MAX_RING`]) and the records kept from it (the rest, each accounted at
//! `size_of::<Event>()`); when the kept part is full the core's probes are switched off — the data nearest the trigger is kept — and the
//! core is listed in [`Counters::full_cores`], its later records in [`Counters::dropped_full`].
//! Records the kernel could not write into a full ring are [`Counters::lost`]. A target that
//! exits ends the capture early ([`Counters::target_exited`]).

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weft_model::event::KernelEvent;
use weft_model::{Event, EventKind, SourceId};
use weft_sources::perf::exist::{self, SchedRecord};
use weft_sources::perf::pt::{IntelPtPmu, NoIntelPt};
use weft_sources::perf::{Capture, CaptureConfig, PerfError, Target, uprobe};

use super::alloc::{self, AllocError, Allocator, CaptureId, CoreBuffer};
use super::tracepoints::{self, Planned};
use super::usage::{self, UsageError};

/// Shortest period accepted without `force`.
pub const MIN_PERIOD: Duration = Duration::from_millis(100);
/// Longest period accepted without `force`.
pub const MAX_PERIOD: Duration = Duration::from_secs(2);
/// Most functions probed in one capture (each is two events per thread and core).
pub const MAX_FUNCTIONS: usize = 128;
/// How often the controller reads the rings and checks the timer.
pub const POLL_INTERVAL: Duration = Duration::from_millis(2);
/// The largest kernel ring of a core: the rings are drained every [`POLL_INTERVAL`], so
/// a larger one would only cost start time (mapping it) and memory the kept records can use.
pub const MAX_RING: u64 = 1 << 20;
/// Modules whose resolved functions an engine keeps across captures ([`Engine::run`]).
pub const CACHED_MODULES: usize = 16;
/// How long the utilization of the cores is sampled for the allocator.
const USAGE_SAMPLE: Duration = Duration::from_millis(10);

/// What to capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaptureTarget {
    /// One process (all its threads, and the ones it creates).
    Pid(u32),
    /// Every process whose `comm` or program name (first command-line word, without its
    /// directory) is this.
    Service(String),
    /// The processes of a cgroup v2 directory.
    Cgroup(PathBuf),
}

/// Which cores to trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cores {
    /// The cores the target ran on recently plus a sample of others (a CPU-share target).
    Auto,
    /// These cores (a CPU-set target).
    Set(Vec<u32>),
}

impl Cores {
    /// `auto` or a CPU list (`0-3,6`); `None` when it is neither.
    pub fn parse(s: &str) -> Option<Cores> {
        if s == "auto" {
            return Some(Cores::Auto);
        }
        weft_sources::perf::sys::parse_cpu_list(s).filter(|c| !c.is_empty()).map(Cores::Set)
    }
}

/// The tracer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// uprobes/uretprobes on the target's functions, through perf_event.
    Software,
    /// Intel Processor Trace.
    IntelPt,
}

/// A capture request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureRequest {
    /// Whose functions.
    pub target: CaptureTarget,
    /// How long.
    pub period: Duration,
    /// Which cores.
    pub cores: Cores,
    /// This capture's memory budget in bytes (`None`: what is left of the node's).
    pub budget: Option<u64>,
    /// The tracer.
    pub backend: Backend,
    /// Globs over function names (`*`, `?`); empty = every function of the module.
    pub functions: Vec<String>,
    /// The binary or library whose functions are probed (default: the target's executable).
    pub module: Option<PathBuf>,
    /// Accept a period outside [`MIN_PERIOD`]..=[`MAX_PERIOD`].
    pub force: bool,
    /// The target's weft-probe tracepoints switched on for the period, as selectors (`all`, a
    /// name, a glob, `group:G`, `level:L`); empty = none ([`super::tracepoints`]).
    pub tracepoints: Vec<String>,
}

/// Figures of one capture.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// Functions probed.
    pub functions: usize,
    /// weft-probe tracepoints switched on for the period (and off again at its end).
    pub tracepoints: usize,
    /// Function entries recorded.
    pub calls: u64,
    /// Function returns recorded.
    pub returns: u64,
    /// Scheduler records of target threads.
    pub switches: u64,
    /// Enable/disable operations of the controller on per-core tracers.
    pub control_ops: u64,
    /// Cores whose tracer was switched on, in that order, with when (ns since the epoch).
    pub cores_enabled: Vec<(u32, u64)>,
    /// Cores whose buffer filled (their tracer stopped early).
    pub full_cores: Vec<u32>,
    /// Records of full cores left out.
    pub dropped_full: u64,
    /// Records the kernel dropped because a ring was full.
    pub lost: u64,
    /// From the request to the tracers being on.
    pub start_latency: Duration,
    /// From the period's end to every event being off.
    pub stop_latency: Duration,
    /// Bytes of buffers granted (rings and kept records).
    pub buffer_bytes: u64,
    /// Peak bytes held: the rings plus the kept records at `size_of::<Event>()` each.
    pub peak_bytes: u64,
    /// The target exited before the period's end.
    pub target_exited: bool,
    /// The functions came from the engine's cache (the module unchanged since an earlier
    /// capture with the same globs), not from reading its ELF symbols again.
    pub functions_cached: bool,
    /// Times the controller woke up during the period (ring reads and timer checks).
    pub polls: u64,
    /// CPU time of the capturing thread from the request to the tracers being on (checks,
    /// symbols, `/proc`, opening the events and mapping the rings).
    pub cpu_setup: Duration,
    /// ... during the period (the controller: reading and decoding the rings).
    pub cpu_window: Duration,
    /// ... from the tracers off to the result (the last records, closing every event).
    pub cpu_release: Duration,
}

/// What a capture produced.
#[derive(Debug, Clone)]
pub struct CaptureResult {
    /// The target's processes.
    pub pids: Vec<u32>,
    /// The probed module.
    pub module: PathBuf,
    /// Tracers switched on from here (ns since the epoch; every record is later).
    pub start_ns: u64,
    /// Every tracer off (ns since the epoch).
    pub end_ns: u64,
    /// Function entries/returns and the target's scheduler switches, in time order.
    pub events: Vec<Event>,
    /// The target threads' switches in EXIST's 24-byte form, in time order.
    pub sched: Vec<SchedRecord>,
    /// The buffers granted.
    pub buffers: Vec<CoreBuffer>,
    /// Target cores the budget could not cover.
    pub uncovered: Vec<u32>,
    /// Figures.
    pub counters: Counters,
}

/// A capture's spans ([`CaptureResult::spans`]).
#[derive(Debug, Clone, Default)]
pub struct FunctionSpans {
    /// Function calls (in their requests' traces where one contains them), on-CPU intervals
    /// and thread roots.
    pub spans: Vec<weft_model::Span>,
    /// The kernel weaver's counters.
    pub kernel: weft_weave::kernel::KernelSpanStats,
    /// Where the calls went.
    pub nest: weft_weave::kernel::NestStats,
}

impl CaptureResult {
    /// The capture as spans: `weft_weave::kernel::kernel_spans` pairs each thread's entries
    /// and returns into call spans (and its scheduler switches into on-CPU spans) within the
    /// capture window, then `nest_calls` moves every call into the request span `app` ran on
    /// that thread at that time (application spans carrying `thread.id`).
    pub fn spans(&self, app: &[weft_model::Span], host: &str) -> FunctionSpans {
        use weft_weave::kernel::{KernelSpanOptions, kernel_spans, nest_calls};
        let opts = KernelSpanOptions {
            host: host.to_owned(),
            syscall_name: weft_sources::perf::syscall_name,
            traced: None,
            seed: self.start_ns ^ u64::from(self.pids.first().copied().unwrap_or(0)).rotate_left(32),
            window: Some((self.start_ns, self.end_ns)),
        };
        let mut ks = kernel_spans(&self.events, &opts);
        let nest = nest_calls(&mut ks.spans, app);
        FunctionSpans { spans: ks.spans, kernel: ks.stats, nest }
    }
}

/// Why a capture was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The period is out of bounds.
    #[error(
        "capture refused: a period of {} ms is outside 100-2000 ms (--force allows it)",
        .0.as_millis()
    )]
    Period(Duration),
    /// The target does not exist or has nothing to probe.
    #[error("capture refused: {0}")]
    Target(String),
    /// No function to probe, or too many.
    #[error("capture refused: {0}")]
    Functions(String),
    /// Tracepoints requested that the target does not have (or no weft-probe segment).
    #[error("capture refused: {0}")]
    Tracepoints(String),
    /// The request's budget cannot hold one buffer.
    #[error(
        "capture refused: a budget of {budget} bytes is below one minimum per-core buffer of {min} bytes"
    )]
    Budget {
        /// The request's budget.
        budget: u64,
        /// The allocator's minimum buffer.
        min: u64,
    },
    /// This process may not open uprobes and scheduler events.
    #[error(
        "capture refused: no permission for perf events: the software backend needs root (uprobes are \
         created in tracefs, {0}); perf_event_paranoid is {1}"
    )]
    Permission(String, String),
    /// Intel PT requested on a CPU without it.
    #[error("capture refused: {0}")]
    NoIntelPt(#[from] NoIntelPt),
    /// Intel PT present, but its capture is not part of this engine.
    #[error(
        "capture refused: this CPU has Intel PT, but weft's PT capture is not built yet; use the software backend"
    )]
    IntelPtCapture,
    /// The allocator refused (budget left, a core already traced, an unknown core).
    #[error(transparent)]
    Alloc(#[from] AllocError),
    /// perf_event (permissions, tracefs, uprobes).
    #[error("capture failed: {0}")]
    Perf(#[from] PerfError),
    /// Reading `/proc` for the allocator.
    #[error("capture failed: {0}")]
    Usage(#[from] UsageError),
}

/// The node's capture engine: one allocator shared by every capture, so two captures never
/// trace the same core.
#[derive(Debug, Clone)]
pub struct Engine {
    alloc: Arc<Mutex<Allocator>>,
    /// Functions resolved by earlier captures (a series of captures of one target reads its
    /// module's symbols once).
    functions: Arc<Mutex<FunctionCache>>,
    /// Where the node's weft-probe segments are (for requests naming tracepoints).
    probe_dir: PathBuf,
}

/// Gives a capture's buffers back when dropped (on every path out of [`Engine::run`]).
struct Grant<'a> {
    alloc: &'a Mutex<Allocator>,
    id: CaptureId,
}

impl Drop for Grant<'_> {
    fn drop(&mut self) {
        if let Ok(mut a) = self.alloc.lock() {
            a.release(self.id);
        }
    }
}

impl Engine {
    /// An engine with this allocator, switching tracepoints in weft-probe's default segment
    /// directory.
    pub fn new(alloc: Allocator) -> Engine {
        Engine {
            alloc: Arc::new(Mutex::new(alloc)),
            functions: Arc::default(),
            probe_dir: weft_probe::layout::default_dir(),
        }
    }

    /// The same, with the weft-probe segments in `dir`.
    pub fn with_probe_dir(self, dir: impl Into<PathBuf>) -> Engine {
        Engine { probe_dir: dir.into(), ..self }
    }

    /// Bytes held by running captures.
    pub fn in_use(&self) -> u64 {
        self.alloc.lock().map(|a| a.in_use()).unwrap_or(0)
    }

    /// Runs `req` to its end; `received` is when the request arrived (for the start latency).
    pub fn run(&self, req: &CaptureRequest, received: Instant) -> Result<CaptureResult, CaptureError> {
        let cpu0 = thread_cpu();
        if !req.force && !(MIN_PERIOD..=MAX_PERIOD).contains(&req.period) {
            return Err(CaptureError::Period(req.period));
        }
        if req.backend == Backend::IntelPt {
            IntelPtPmu::open()?;
            return Err(CaptureError::IntelPtCapture);
        }
        let min = self.alloc.lock().map(|a| a.config().min_buffer).unwrap_or(4 * alloc::MIB);
        if let Some(b) = req.budget
            && b < min
        {
            return Err(CaptureError::Budget { budget: b, min });
        }
        check_permission()?;
        let (pids, cgroup) = resolve_target(&req.target)?;
        let module = match &req.module {
            Some(m) => m.clone(),
            None => std::fs::read_link(format!("/proc/{}/exe", pids[0])).map_err(|e| {
                CaptureError::Target(format!("process {}: cannot read its executable: {e}", pids[0]))
            })?,
        };
        let (functions, functions_cached) = self.functions(&module, &req.functions)?;
        // Every refusal comes before the first perf event is opened: the tracepoints too.
        let selectors = tracepoints::parse_selectors(&req.tracepoints)?;
        let planned = if selectors.is_empty() {
            None
        } else {
            Some(Planned::check(&self.probe_dir, &pids, &selectors)?)
        };

        let usage = usage::measure_utilization(USAGE_SAMPLE)?;
        let recent: BTreeSet<u32> =
            pids.iter().filter_map(|&p| usage::recent_cores(p).ok()).flatten().collect();
        let target = match &req.cores {
            Cores::Set(c) => alloc::Target::CpuSet { cores: c.clone() },
            Cores::Auto => alloc::Target::CpuShare {
                recent_cores: recent.iter().copied().collect(),
                seed: u64::from(pids[0]),
            },
        };
        let allocation = {
            let mut a = self.alloc.lock().map_err(|_| AllocError::Config("allocator poisoned".into()))?;
            a.allocate_within(&target, &usage, req.budget)?
        };
        let _grant = Grant { alloc: &self.alloc, id: allocation.id };

        let cfg = CaptureConfig {
            tracepoints: vec!["sched:sched_switch".into()],
            uprobes: functions,
            target: match cgroup {
                Some(dir) => Target::Cgroup(dir),
                None => Target::Pids(pids.clone()),
            },
            cpus: allocation
                .buffers
                .iter()
                .map(|b| (b.core, (ring_bytes(b.bytes) / 4096) as usize))
                .collect(),
            source: SourceId(0),
            ..CaptureConfig::default()
        };
        let mut counters = Counters {
            functions: cfg.uprobes.len(),
            tracepoints: 0,
            buffer_bytes: allocation.total_bytes(),
            functions_cached,
            ..Counters::default()
        };
        let mut cap = Capture::open(&cfg)?;
        let capacity: BTreeMap<u32, u64> = allocation
            .buffers
            .iter()
            .map(|b| (b.core, (b.bytes - ring_bytes(b.bytes)) / std::mem::size_of::<Event>() as u64))
            .collect();
        let rings: u64 = allocation.buffers.iter().map(|b| ring_bytes(b.bytes)).sum();

        // Tracers on: every core's switches, and the probes of the cores the target is on now.
        let start_ns = weft_model::time::now_unix_nanos();
        cap.enable_owners()?;
        let mut enabled: HashSet<u32> = HashSet::new();
        for &c in recent.iter().filter(|c| capacity.contains_key(c)) {
            let at = weft_model::time::now_unix_nanos();
            cap.enable_cpu(c)?;
            enabled.insert(c);
            counters.cores_enabled.push((c, at));
            counters.control_ops += 1;
        }
        let mut switched = match planned {
            None => None,
            Some(p) => {
                let sw = p.on()?;
                counters.tracepoints = sw.count();
                Some(sw)
            }
        };
        counters.start_latency = received.elapsed();
        let cpu_on = thread_cpu();
        counters.cpu_setup = cpu_on.saturating_sub(cpu0);
        let deadline = Instant::now() + req.period;

        let mut kept: BTreeMap<u32, u64> = BTreeMap::new();
        let mut full: HashSet<u32> = HashSet::new();
        let mut events: Vec<Event> = Vec::new();
        let mut batch: Vec<Event> = Vec::new();
        let mut last = false;
        loop {
            let now = Instant::now();
            let left = deadline.saturating_duration_since(now);
            if left.is_zero() || last {
                break;
            }
            if !pids.iter().any(|&p| Path::new(&format!("/proc/{p}")).exists()) {
                counters.target_exited = true;
                last = true;
            }
            cap.poll(left.min(POLL_INTERVAL), &mut batch)?;
            counters.polls += 1;
            self.control(&mut cap, &mut batch, &capacity, &mut enabled, &mut counters)?;
            keep(&cap, &mut batch, &mut events, &capacity, &mut kept, &mut full, &mut counters);
            counters.peak_bytes = counters.peak_bytes.max(rings + held(&kept));
        }
        // The timer: every event off (the tracepoints back as they were), the probes out of
        // the target, then what the rings still hold.
        cap.disable();
        if let Some(sw) = switched.as_mut() {
            sw.off();
        }
        let off = Instant::now();
        let cpu_off = thread_cpu();
        counters.cpu_window = cpu_off.saturating_sub(cpu_on);
        counters.stop_latency = off.saturating_duration_since(deadline);
        let end_ns = weft_model::time::now_unix_nanos();
        // Closing the probes' events takes their breakpoints out of the target at once; the
        // uprobes' unregistration (a grace period each, tens of ms) waits for `detached`.
        let detached = cap.detach();
        counters.control_ops += enabled.len() as u64;
        cap.finish(&mut batch);
        keep(&cap, &mut batch, &mut events, &capacity, &mut kept, &mut full, &mut counters);
        counters.peak_bytes = counters.peak_bytes.max(rings + held(&kept));
        let stats = cap.stats();
        counters.lost = stats.lost();
        let traced: HashSet<u32> = cap.traced_threads().cloned().unwrap_or_default();
        drop(cap);
        drop(detached);

        events.sort_by_key(|e| e.time_ns);
        let mut sched = Vec::new();
        for e in &events {
            match &e.kind {
                EventKind::Kernel(KernelEvent::UprobeEntry { .. }) => counters.calls += 1,
                EventKind::Kernel(KernelEvent::UprobeReturn { .. }) => counters.returns += 1,
                EventKind::Kernel(KernelEvent::SchedSwitch { .. }) => {
                    sched.extend(exist::from_event(e, |t| traced.contains(&t)))
                }
                _ => {}
            }
        }
        counters.switches = sched.len() as u64;
        let mut full_cores: Vec<u32> = full.into_iter().collect();
        full_cores.sort_unstable();
        counters.full_cores = full_cores;
        counters.cpu_release = thread_cpu().saturating_sub(cpu_off);
        tracing::debug!(?counters, "capture done");
        Ok(CaptureResult {
            pids,
            module,
            start_ns,
            end_ns,
            events,
            sched,
            buffers: allocation.buffers.clone(),
            uncovered: allocation.uncovered.clone(),
            counters,
        })
    }

    /// The module's functions the globs match, from the cache when the module is unchanged
    /// since a capture resolved them; whether they were cached.
    fn functions(
        &self,
        module: &Path,
        globs: &[String],
    ) -> Result<(Vec<uprobe::UprobeTarget>, bool), CaptureError> {
        let key = ModuleKey::of(module, globs);
        if let Some(k) = &key
            && let Some(found) = self.functions.lock().ok().and_then(|c| c.get(k))
        {
            return Ok((found, true));
        }
        let found = resolve_functions(module, globs)?;
        if let (Some(k), Ok(mut c)) = (key, self.functions.lock()) {
            c.put(k, found.clone());
        }
        Ok((found, false))
    }

    /// The operation-aware controller: a core's probes go on at the first switch-in of a
    /// target thread there.
    fn control(
        &self,
        cap: &mut Capture,
        batch: &mut [Event],
        capacity: &BTreeMap<u32, u64>,
        enabled: &mut HashSet<u32>,
        counters: &mut Counters,
    ) -> Result<(), CaptureError> {
        for e in batch.iter() {
            let EventKind::Kernel(KernelEvent::SchedSwitch { cpu, next_tid, .. }) = &e.kind else { continue };
            let target = cap.traced_threads().is_some_and(|t| t.contains(next_tid));
            if target && capacity.contains_key(cpu) && enabled.insert(*cpu) {
                let at = weft_model::time::now_unix_nanos();
                cap.enable_cpu(*cpu)?;
                counters.cores_enabled.push((*cpu, at));
                counters.control_ops += 1;
            }
        }
        Ok(())
    }
}

/// A module as it is on disk now, with the globs resolved in it: a module rebuilt or replaced
/// (another inode, modification time or size) is another key.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ModuleKey {
    path: PathBuf,
    dev: u64,
    ino: u64,
    mtime_ns: i128,
    size: u64,
    globs: Vec<String>,
}

impl ModuleKey {
    /// `None` when the module cannot be examined (resolving it then says why).
    fn of(module: &Path, globs: &[String]) -> Option<ModuleKey> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(module).ok()?;
        Some(ModuleKey {
            path: module.to_path_buf(),
            dev: m.dev(),
            ino: m.ino(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            size: m.size(),
            globs: globs.to_vec(),
        })
    }
}

/// The last [`CACHED_MODULES`] resolutions (each at most [`MAX_FUNCTIONS`] functions).
#[derive(Debug, Default)]
struct FunctionCache {
    entries: VecDeque<(ModuleKey, Vec<uprobe::UprobeTarget>)>,
}

impl FunctionCache {
    fn get(&self, key: &ModuleKey) -> Option<Vec<uprobe::UprobeTarget>> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, f)| f.clone())
    }

    fn put(&mut self, key: ModuleKey, functions: Vec<uprobe::UprobeTarget>) {
        self.entries.retain(|(k, _)| !(k.path == key.path && k.globs == key.globs));
        if self.entries.len() >= CACHED_MODULES {
            self.entries.pop_front();
        }
        self.entries.push_back((key, functions));
    }
}

/// CPU time of the calling thread so far.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The kernel ring's share of a core's buffer: half, at most [`MAX_RING`].
fn ring_bytes(buffer: u64) -> u64 {
    (buffer / 2).min(MAX_RING)
}

fn held(kept: &BTreeMap<u32, u64>) -> u64 {
    kept.values().sum::<u64>() * std::mem::size_of::<Event>() as u64
}

/// Moves `batch` into `events` within each core's kept half; a core that fills stops.
fn keep(
    cap: &Capture,
    batch: &mut Vec<Event>,
    events: &mut Vec<Event>,
    capacity: &BTreeMap<u32, u64>,
    kept: &mut BTreeMap<u32, u64>,
    full: &mut HashSet<u32>,
    counters: &mut Counters,
) {
    for e in batch.drain(..) {
        let cpu = e.cpu().unwrap_or(0);
        let n = kept.entry(cpu).or_default();
        if *n >= capacity.get(&cpu).copied().unwrap_or(0) {
            if full.insert(cpu) {
                cap.disable_cpu(cpu);
                counters.control_ops += 1;
            }
            counters.dropped_full += 1;
            continue;
        }
        *n += 1;
        events.push(e);
    }
}

/// Can this process create uprobes (write tracefs' `uprobe_events`)? Checked before anything
/// is opened, so the refusal says what is missing instead of where it failed.
fn check_permission() -> Result<(), CaptureError> {
    let paranoid = || {
        std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
            .map(|s| s.trim().to_owned())
            .unwrap_or_else(|_| "unknown".into())
    };
    let mut last = String::from("no tracefs mount found");
    for dir in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
        let f = Path::new(dir).join("uprobe_events");
        match std::fs::OpenOptions::new().append(true).open(&f) {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return Err(CaptureError::Permission(format!("{}: {e}", f.display()), paranoid()));
            }
            Err(e) => last = format!("{}: {e}", f.display()),
        }
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(CaptureError::Permission(last, paranoid()));
    }
    // Root without a mounted tracefs: the capture mounts it (weft_sources::perf::sys).
    Ok(())
}

/// The target's processes, and its cgroup directory for a cgroup target.
fn resolve_target(t: &CaptureTarget) -> Result<(Vec<u32>, Option<PathBuf>), CaptureError> {
    match t {
        CaptureTarget::Pid(p) => {
            if *p == 0 || !Path::new(&format!("/proc/{p}")).exists() {
                return Err(CaptureError::Target(format!("no process {p} on this node")));
            }
            Ok((vec![*p], None))
        }
        CaptureTarget::Service(name) => {
            let me = std::process::id();
            let mut pids: Vec<u32> = std::fs::read_dir("/proc")
                .map_err(|e| CaptureError::Target(format!("/proc: {e}")))?
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .filter(|&p| p != me && process_named(p, name))
                .collect();
            pids.sort_unstable();
            if pids.is_empty() {
                return Err(CaptureError::Target(format!("no process of service {name:?} on this node")));
            }
            Ok((pids, None))
        }
        CaptureTarget::Cgroup(dir) => {
            let procs = dir.join("cgroup.procs");
            let text = std::fs::read_to_string(&procs)
                .map_err(|e| CaptureError::Target(format!("{}: {e}", procs.display())))?;
            let pids: Vec<u32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
            if pids.is_empty() {
                return Err(CaptureError::Target(format!("cgroup {} has no process", dir.display())));
            }
            Ok((pids, Some(dir.clone())))
        }
    }
}

/// Does process `pid` carry the service name `name` (its comm, or its program's file name)?
fn process_named(pid: u32, name: &str) -> bool {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    if comm.trim_end() == name {
        return true;
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let argv0 = cmdline.split(|&b| b == 0).next().unwrap_or_default();
    let argv0 = String::from_utf8_lossy(argv0);
    argv0.rsplit('/').next() == Some(name)
}

/// The module's functions the globs match (all of them without globs), at most
/// [`MAX_FUNCTIONS`].
fn resolve_functions(module: &Path, globs: &[String]) -> Result<Vec<uprobe::UprobeTarget>, CaptureError> {
    let bin = module.to_string_lossy();
    let found = uprobe::resolve_matching(&bin, |name| {
        globs.is_empty() || globs.iter().any(|g| weft_probe::select::glob_match(g, name))
    })?;
    if found.is_empty() {
        return Err(CaptureError::Functions(format!(
            "no function of {bin} matches {}",
            if globs.is_empty() { "(any)".to_string() } else { globs.join(", ") }
        )));
    }
    if found.len() > MAX_FUNCTIONS {
        return Err(CaptureError::Functions(format!(
            "{} functions of {bin} match; at most {MAX_FUNCTIONS} per capture (narrow --functions)",
            found.len()
        )));
    }
    Ok(found)
}
