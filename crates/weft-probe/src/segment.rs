//! The producer's segment: creation (shared file or private memory), registry export, ring
//! allocation and the control thread. Layout: [`crate::layout`].

use crate::clock::{self, Calibration};
use crate::layout::*;
use crate::mem::{Map, futex_wait, futex_wake};
use crate::tracepoint::Tracepoint;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Where the rings live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Shared file when the segment directory exists, else private memory.
    Auto,
    /// Shared file; the directory is created (mode 0700) when missing.
    Shm,
    /// Private memory (in-process drain only).
    Private,
}

/// Process-wide probe configuration ([`crate::init`]); every field has an environment default.
#[derive(Debug, Clone)]
pub struct Config {
    /// Service name (`WEFT_PROBE_SERVICE`, else the executable's file name).
    pub service: Option<String>,
    /// `WEFT_PROBE_MODE` = `auto` (default) | `shm` | `private`.
    pub mode: Mode,
    /// Segment directory (`WEFT_PROBE_DIR`, else `/dev/shm/weft-<uid>`).
    pub dir: Option<PathBuf>,
    /// Rings, i.e. threads that can record at once (`WEFT_PROBE_RINGS`, default 64).
    pub rings: usize,
    /// Data bytes per ring, rounded up to a power of two ≥ 4096 (`WEFT_PROBE_RING_SIZE`, bytes,
    /// default 262144).
    pub ring_size: usize,
    /// Tracepoints the state/control arrays can address (default 16384).
    pub tracepoint_capacity: usize,
    /// Bytes for the exported registry (default 262144).
    pub registry_capacity: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            service: None,
            mode: Mode::Auto,
            dir: None,
            rings: 64,
            ring_size: 256 * 1024,
            tracepoint_capacity: 16384,
            registry_capacity: 256 * 1024,
        }
    }
}

impl Config {
    /// Defaults overridden by the `WEFT_PROBE_*` environment variables (bad values are reported
    /// through `tracing` and ignored).
    pub fn from_env() -> Config {
        let mut c = Config::default();
        if let Ok(s) = std::env::var("WEFT_PROBE_SERVICE") {
            c.service = Some(s);
        }
        match std::env::var("WEFT_PROBE_MODE").as_deref() {
            Ok("shm") => c.mode = Mode::Shm,
            Ok("private") => c.mode = Mode::Private,
            Ok("auto") | Err(_) => {}
            Ok(other) => {
                tracing::warn!(value = other, "WEFT_PROBE_MODE: expected auto|shm|private; using auto")
            }
        }
        if let Some(d) = std::env::var_os("WEFT_PROBE_DIR") {
            c.dir = Some(PathBuf::from(d));
        }
        for (var, slot) in [("WEFT_PROBE_RINGS", &mut c.rings), ("WEFT_PROBE_RING_SIZE", &mut c.ring_size)] {
            if let Ok(v) = std::env::var(var) {
                match v.parse::<usize>() {
                    Ok(n) if n > 0 => *slot = n,
                    _ => tracing::warn!(var, value = %v, "expected a positive integer; using the default"),
                }
            }
        }
        c
    }
}

/// Errors creating a segment.
#[derive(Debug, thiserror::Error)]
pub enum SegmentError {
    #[error("segment directory {path}: {source}")]
    Dir { path: PathBuf, source: io::Error },
    #[error("segment directory {path} is unsafe: {reason}")]
    UnsafeDir { path: PathBuf, reason: String },
    #[error("segment file {path}: {source}")]
    File { path: PathBuf, source: io::Error },
    #[error("mapping {len} bytes: {source}")]
    Map { len: usize, source: io::Error },
}

/// The producer side of a segment.
pub(crate) struct Segment {
    pub(crate) map: Map,
    /// Published file name (shared mode).
    pub(crate) path: Option<PathBuf>,
    /// Name while being initialised.
    tmp_path: Option<PathBuf>,
    pub(crate) ring_count: usize,
    pub(crate) ring_capacity: usize,
    pub(crate) ring_stride: usize,
    pub(crate) rings_offset: usize,
    pub(crate) tp_capacity: usize,
    pub(crate) state_offset: usize,
    pub(crate) control_offset: usize,
    /// The live-query mailbox ([`crate::mailbox`]).
    query_offset: usize,
    registry_offset: usize,
    registry_capacity: usize,
    /// Producer-side registry writer position (bytes used).
    registry_used: Mutex<usize>,
    clock: Mutex<Calibration>,
}

static SEGMENT: AtomicPtr<Segment> = AtomicPtr::new(std::ptr::null_mut());
static CREATE: Mutex<()> = Mutex::new(());
static CONFIG: OnceLock<Config> = OnceLock::new();

/// Set the configuration before the segment exists; `false` when it was already fixed.
pub(crate) fn configure(c: Config) -> bool {
    CONFIG.set(c).is_ok()
}

fn config() -> &'static Config {
    CONFIG.get_or_init(Config::from_env)
}

/// The process's segment, if created.
#[inline]
pub(crate) fn get() -> Option<&'static Segment> {
    let p = SEGMENT.load(Ordering::Acquire);
    // SAFETY: a non-null pointer was leaked from a Box and is never freed.
    if p.is_null() { None } else { Some(unsafe { &*p }) }
}

/// The process's segment, created on first use. `None` (logged once) when creation failed even
/// in private memory.
pub(crate) fn get_or_create() -> Option<&'static Segment> {
    if let Some(s) = get() {
        return Some(s);
    }
    let _g = CREATE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(s) = get() {
        return Some(s);
    }
    let cfg = config();
    let seg = match Segment::create(cfg) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "weft-probe: shared segment unavailable; recording in private memory");
            match Segment::create(&Config { mode: Mode::Private, ..cfg.clone() }) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(error = %e, "weft-probe: cannot allocate rings; records are dropped");
                    return None;
                }
            }
        }
    };
    let shared = seg.path.is_some();
    let leaked: &'static Segment = Box::leak(Box::new(seg));
    SEGMENT.store(leaked as *const Segment as *mut Segment, Ordering::Release);
    crate::registry::export_pending();
    if let (Some(tmp), Some(path)) = (&leaked.tmp_path, &leaked.path) {
        // Publish the fully initialised file under its final name.
        if let Err(e) = std::fs::rename(tmp, path) {
            tracing::warn!(error = %e, path = %path.display(), "weft-probe: cannot publish the segment");
        }
    }
    if shared {
        let _ = std::thread::Builder::new().name("weft-probe-ctl".into()).spawn(move || control_loop(leaked));
    }
    Some(leaked)
}

impl Segment {
    fn create(cfg: &Config) -> Result<Segment, SegmentError> {
        let ring_capacity = cfg.ring_size.clamp(4096, 1 << 30).next_power_of_two();
        let ring_count = cfg.rings.clamp(1, 4096);
        let tp_capacity = cfg.tracepoint_capacity.clamp(64, 1 << 20);
        let registry_capacity = pad8(cfg.registry_capacity.clamp(4096, 64 << 20));
        let registry_offset = HEADER_SIZE;
        let state_offset = registry_offset + registry_capacity;
        let control_offset = state_offset + pad8(tp_capacity);
        let query_offset = (control_offset + pad8(tp_capacity)).next_multiple_of(4096);
        let rings_offset = query_offset + crate::mailbox::AREA_SIZE;
        let ring_stride = RING_HEADER_SIZE + ring_capacity;
        let total = rings_offset + ring_count * ring_stride;

        let dir = cfg.dir.clone().unwrap_or_else(default_dir);
        let use_shm = match cfg.mode {
            Mode::Private => false,
            Mode::Shm => true,
            Mode::Auto => dir.is_dir(),
        };
        let (map, tmp_path, path) = if use_shm {
            let (map, tmp, path) = create_file(&dir, cfg.mode == Mode::Shm, total)?;
            (map, Some(tmp), Some(path))
        } else {
            (Map::anonymous(total).map_err(|source| SegmentError::Map { len: total, source })?, None, None)
        };
        let cal = clock::calibrate(Duration::from_millis(5));
        let seg = Segment {
            map,
            path,
            tmp_path,
            ring_count,
            ring_capacity,
            ring_stride,
            rings_offset,
            tp_capacity,
            state_offset,
            control_offset,
            query_offset,
            registry_offset,
            registry_capacity,
            registry_used: Mutex::new(0),
            clock: Mutex::new(cal),
        };
        seg.init_header(total, cfg, cal);
        Ok(seg)
    }

    fn init_header(&self, total: usize, cfg: &Config, cal: Calibration) {
        let m = &self.map;
        let _ = m.write(OFF_MAGIC, &MAGIC);
        let _ = m.write(OFF_VERSION, &VERSION.to_ne_bytes());
        let _ = m.write(OFF_HEADER_SIZE, &(HEADER_SIZE as u32).to_ne_bytes());
        let _ = m.write(OFF_TOTAL_SIZE, &(total as u64).to_ne_bytes());
        let _ = m.write(OFF_PID, &std::process::id().to_ne_bytes());
        let flags = if self.path.is_none() { FLAG_PRIVATE } else { 0 };
        let _ = m.write(OFF_FLAGS, &flags.to_ne_bytes());
        let _ = m.write(OFF_PROC_START, &proc_start_ticks(std::process::id()).unwrap_or(0).to_ne_bytes());
        let now = clock::realtime_ns();
        let _ = m.write(OFF_CREATED, &now.to_ne_bytes());
        let _ = m.write(OFF_HEARTBEAT, &now.to_ne_bytes());
        self.publish_clock(&cal);
        for (off, v) in [
            (OFF_REGISTRY_OFFSET, self.registry_offset as u64),
            (OFF_REGISTRY_CAPACITY, self.registry_capacity as u64),
            (OFF_STATE_OFFSET, self.state_offset as u64),
            (OFF_CONTROL_OFFSET, self.control_offset as u64),
            (OFF_RINGS_OFFSET, self.rings_offset as u64),
            (OFF_RING_STRIDE, self.ring_stride as u64),
            (OFF_RING_CAPACITY, self.ring_capacity as u64),
            (OFF_QUERY_OFFSET, self.query_offset as u64),
            (OFF_QUERY_CAPACITY, crate::mailbox::AREA_SIZE as u64),
        ] {
            let _ = m.write(off, &v.to_ne_bytes());
        }
        let _ = m.write(OFF_TP_CAPACITY, &(self.tp_capacity as u32).to_ne_bytes());
        let _ = m.write(OFF_RING_COUNT, &(self.ring_count as u32).to_ne_bytes());
        let exe = std::env::current_exe().ok();
        let service = cfg.service.clone().unwrap_or_else(|| {
            exe.as_ref()
                .and_then(|p| p.file_name())
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        });
        let sb = truncate_utf8(&service, SERVICE_MAX);
        let _ = m.write(OFF_SERVICE_LEN, &(sb.len() as u32).to_ne_bytes());
        let _ = m.write(OFF_SERVICE, sb.as_bytes());
        let exe_s = exe.map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
        let eb = truncate_utf8(&exe_s, EXE_MAX);
        let _ = m.write(OFF_EXE_LEN, &(eb.len() as u32).to_ne_bytes());
        let _ = m.write(OFF_EXE, eb.as_bytes());
        for i in 0..self.ring_count {
            let base = self.rings_offset + i * self.ring_stride;
            let _ = m.write(base + RING_OFF_CAPACITY, &(self.ring_capacity as u64).to_ne_bytes());
        }
    }

    /// Publish a calibration under the header's seqlock.
    pub(crate) fn publish_clock(&self, cal: &Calibration) {
        let (Some(seq), Some(kind)) = (self.map.u32_at(OFF_CLOCK_SEQ), self.map.u32_at(OFF_CLOCK_KIND))
        else {
            return;
        };
        let s = seq.load(Ordering::Relaxed);
        seq.store(s.wrapping_add(1) | 1, Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::Release);
        kind.store(cal.kind, Ordering::Relaxed);
        for (off, v) in [
            (OFF_CLOCK_TSC_BASE, cal.tsc_base),
            (OFF_CLOCK_UNIX_BASE, cal.unix_base_ns),
            (OFF_CLOCK_MULT, cal.mult),
            (OFF_CLOCK_HZ, cal.tsc_hz),
        ] {
            if let Some(a) = self.map.u64_at(off) {
                a.store(v, Ordering::Relaxed);
            }
        }
        seq.store((s | 1).wrapping_add(1), Ordering::Release);
        if let Ok(mut c) = self.clock.lock() {
            *c = *cal;
        }
    }

    pub(crate) fn calibration(&self) -> Calibration {
        self.clock.lock().map(|c| *c).unwrap_or(Calibration::REALTIME)
    }

    /// Append a tracepoint descriptor to the exported registry and mirror its state. Called
    /// under the registry lock, in id order.
    pub(crate) fn export(&self, tp: &Tracepoint, id: u32) {
        let name = tp.name().as_bytes();
        let group = tp.group().as_bytes();
        let fields = tp.fields_spec().as_bytes();
        let file = tp.file().as_bytes();
        let clip = |b: &[u8]| b.len().min(u16::MAX as usize);
        let (nl, gl, fl, il) = (clip(name), clip(group), clip(fields), clip(file));
        let len = pad8(DESC_HEADER_SIZE + nl + gl + fl + il);
        let mut used = self.registry_used.lock().unwrap_or_else(|e| e.into_inner());
        if *used + len > self.registry_capacity || id as usize >= self.tp_capacity {
            if let Some(o) = self.map.u32_at(OFF_REGISTRY_OVERFLOW) {
                o.fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
        let mut d = Vec::with_capacity(len);
        d.extend_from_slice(&(len as u32).to_ne_bytes());
        d.extend_from_slice(&id.to_ne_bytes());
        d.push(tp.level() as u8);
        d.push(tp.flags());
        for l in [nl, gl, fl, il] {
            d.extend_from_slice(&(l as u16).to_ne_bytes());
        }
        d.extend_from_slice(&0u16.to_ne_bytes());
        d.extend_from_slice(&tp.line().to_ne_bytes());
        d.extend_from_slice(&name[..nl]);
        d.extend_from_slice(&group[..gl]);
        d.extend_from_slice(&fields[..fl]);
        d.extend_from_slice(&file[..il]);
        d.resize(len, 0);
        let _ = self.map.write(self.registry_offset + *used, &d);
        *used += len;
        self.mirror_state(id, tp.enabled());
        if let (Some(l), Some(c)) = (self.map.u64_at(OFF_REGISTRY_LEN), self.map.u32_at(OFF_REGISTRY_COUNT)) {
            c.fetch_add(1, Ordering::Relaxed);
            l.store(*used as u64, Ordering::Release);
        }
    }

    /// Mirror a tracepoint's state into `state[id]`.
    pub(crate) fn mirror_state(&self, id: u32, on: bool) {
        if (id as usize) < self.tp_capacity
            && let Some(b) = self.map.u8_at(self.state_offset + id as usize)
        {
            b.store(on as u8, Ordering::Relaxed);
        }
    }

    /// Count a record dropped because no ring was available.
    pub(crate) fn count_no_ring(&self) {
        if let Some(a) = self.map.u64_at(OFF_NO_RING_DROPS) {
            a.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Claim a free or released ring for thread `tid`; returns its index.
    pub(crate) fn acquire_ring(&self, tid: u32) -> Option<usize> {
        for pass in [RING_FREE, RING_RELEASED] {
            for i in 0..self.ring_count {
                let base = self.rings_offset + i * self.ring_stride;
                let st = self.map.u32_at(base + RING_OFF_STATE)?;
                if st.compare_exchange(pass, RING_OWNED, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                    self.map.u32_at(base + RING_OFF_TID)?.store(tid, Ordering::Relaxed);
                    self.map.u64_at(base + RING_OFF_OWNERS)?.fetch_add(1, Ordering::Relaxed);
                    return Some(i);
                }
            }
        }
        None
    }

    /// Release ring `i` (its thread is exiting); the data stays for the consumer.
    pub(crate) fn release_ring(&self, i: usize) {
        let base = self.rings_offset + i * self.ring_stride;
        if let Some(st) = self.map.u32_at(base + RING_OFF_STATE) {
            st.store(RING_RELEASED, Ordering::Release);
        }
    }

    /// Apply pending control bytes; returns how many tracepoints changed.
    pub(crate) fn apply_control(&self) -> usize {
        let mut changed = 0;
        let count = self.map.u32_at(OFF_REGISTRY_COUNT).map(|c| c.load(Ordering::Acquire)).unwrap_or(0);
        let n = (crate::registry::len()).min(self.tp_capacity).max(count as usize);
        for id in 0..n.min(self.tp_capacity) {
            let Some(b) = self.map.u8_at(self.control_offset + id) else { break };
            if b.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let req = b.swap(0, Ordering::AcqRel);
            let op = match req {
                0 => continue,
                CTL_ENABLE => crate::registry::Op::Enable,
                CTL_DISABLE => crate::registry::Op::Disable,
                CTL_FORCE_DISABLE => crate::registry::Op::ForceDisable,
                _ => {
                    if let Some(r) = self.map.u32_at(OFF_CTL_REJECTED) {
                        r.fetch_add(1, Ordering::Relaxed);
                    }
                    continue;
                }
            };
            match crate::registry::apply_id(id as u32, op) {
                crate::registry::Applied::Changed => changed += 1,
                crate::registry::Applied::Protected => {
                    if let Some(r) = self.map.u32_at(OFF_CTL_PROTECTED) {
                        r.fetch_add(1, Ordering::Relaxed);
                    }
                }
                crate::registry::Applied::Unchanged => {}
                crate::registry::Applied::Unknown => {
                    if let Some(r) = self.map.u32_at(OFF_CTL_REJECTED) {
                        r.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        changed
    }

    /// Mark the process as exited normally (the consumer may then drain and remove it).
    pub(crate) fn mark_exited(&self) {
        if let Some(f) = self.map.u32_at(OFF_FLAGS) {
            f.fetch_or(FLAG_EXITED, Ordering::Release);
        }
    }
}

/// The control thread: applies control requests (woken through the `ctl_seq` futex), answers
/// the live-query mailbox ([`crate::mailbox`]), refreshes the heartbeat and refines the TSC calibration.
fn control_loop(seg: &'static Segment) {
    let (Some(seq), Some(ack), Some(hb)) =
        (seg.map.u32_at(OFF_CTL_SEQ), seg.map.u32_at(OFF_CTL_ACK), seg.map.u64_at(OFF_HEARTBEAT))
    else {
        return;
    };
    let start = Instant::now();
    let mut refine_at =
        [Duration::from_secs(1), Duration::from_secs(10), Duration::from_secs(60)].into_iter();
    let mut next_refine = refine_at.next();
    let mut last_refine = Instant::now();
    loop {
        let s = seq.load(Ordering::Acquire);
        if s != ack.load(Ordering::Relaxed) {
            let n = seg.apply_control();
            tracing::debug!(changed = n, seq = s, "weft-probe: control applied");
            ack.store(s, Ordering::Release);
            futex_wake(ack);
        }
        crate::mailbox::serve(&seg.map, seg.query_offset, crate::mailbox::AREA_SIZE);
        crate::mailbox::expire();
        hb.store(clock::realtime_ns(), Ordering::Relaxed);
        let up = start.elapsed();
        match next_refine {
            Some(at) if up >= at => {
                seg.publish_clock(&clock::refine(&seg.calibration()));
                next_refine = refine_at.next();
                last_refine = Instant::now();
            }
            None if last_refine.elapsed() >= Duration::from_secs(600) => {
                seg.publish_clock(&clock::refine(&seg.calibration()));
                last_refine = Instant::now();
            }
            _ => {}
        }
        futex_wait(seq, s, Duration::from_millis(500));
    }
}

fn create_file(dir: &Path, create_dir: bool, total: usize) -> Result<(Map, PathBuf, PathBuf), SegmentError> {
    let derr = |source| SegmentError::Dir { path: dir.to_path_buf(), source };
    if create_dir && !dir.exists() {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(derr)?;
    }
    check_dir(dir)?;
    let pid = std::process::id();
    let nonce = (clock::realtime_ns() ^ (clock::now_raw().rotate_left(17))) & 0xffff_ffff;
    let tmp = dir.join(format!(".{pid}-{nonce:08x}.tmp"));
    let path = dir.join(format!("{pid}-{nonce:08x}{SEGMENT_SUFFIX}"));
    let ferr = |source| SegmentError::File { path: tmp.clone(), source };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .map_err(ferr)?;
    file.set_len(total as u64).map_err(ferr)?;
    use std::os::fd::AsRawFd;
    let map =
        Map::shared(file.as_raw_fd(), total).map_err(|source| SegmentError::Map { len: total, source })?;
    Ok((map, tmp, path))
}

/// The directory must be ours, a real directory, and closed to others (mode 0700 or stricter).
pub(crate) fn check_dir(dir: &Path) -> Result<(), SegmentError> {
    let md = std::fs::symlink_metadata(dir)
        .map_err(|source| SegmentError::Dir { path: dir.to_path_buf(), source })?;
    let bad = |reason: String| SegmentError::UnsafeDir { path: dir.to_path_buf(), reason };
    if !md.file_type().is_dir() {
        return Err(bad("not a directory (symlinks are refused)".into()));
    }
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    if md.uid() != uid {
        return Err(bad(format!("owned by uid {} (we are {uid})", md.uid())));
    }
    if md.permissions().mode() & 0o077 != 0 {
        return Err(bad(format!("mode {:o} lets others in (want 0700)", md.permissions().mode() & 0o777)));
    }
    Ok(())
}

/// Field 22 (starttime, clock ticks since boot) of `/proc/<pid>/stat`.
pub fn proc_start_ticks(pid: u32) -> Option<u64> {
    let s = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    let close = s.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&s[close + 1..]).ok()?;
    // after ")" come field 3 (state) onwards; starttime is field 22 → index 19.
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The published file of the process's segment (for diagnostics and tests).
pub fn segment_path() -> Option<PathBuf> {
    get().and_then(|s| s.path.clone())
}
