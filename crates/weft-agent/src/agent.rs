//! The agent: discovery, the drain loop, and the threads around it.
//!
//! ```text
//!  segments (/dev/shm/weft-<uid>/*.weft)          collector (weft serve)
//!     │ read_ring (nothing released yet)             ▲ POST /v1/traces (OTLP protobuf, gzip)
//!     ▼                                              │
//!  drain loop ── spans ──▶ batch ──▶ spool (disk) ──▶ sender ── ack ──▶ spool releases the batch
//!     │  after the append: commit(tail = oldest record an open span needs, mark = cursor)
//!     ▼
//!  rings' tail/mark in the segment (a restarted agent resumes there)
//!
//!  control socket (weft probes) ─┐
//!  collector poll (control API) ─┴─▶ control::execute ──▶ segments' control areas
//!  live queries (POST /api/control/live) ◀─▶ live::LiveNode ──▶ segments' query mailboxes
//!  reporter ──▶ POST /api/agents/report        metrics server ──▶ GET /metrics
//! ```
//!
//! Delivery: at least once. A span's records are released in the ring only after the batch
//! holding the span is in the spool, and a batch leaves the spool only when the collector
//! acknowledged it. The one window for a duplicate is an agent crash between a spool append
//! and the commit of the positions that follow it (two system calls).

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use weft_model::Span;
use weft_probe::consumer::{self, ConsumerError, Segment};

use crate::control;
use crate::metrics::Metrics;
use crate::spool::{Appended, Spool, SpoolConfig, SpoolError};
use weft_control::proto::{CaptureCommand, CaptureOutcome, CommandResult, ProbeCommand, ProcessReport};
use weft_weave::probe::{Assembler, AssemblerConfig, ProcessIdentity, TpTable};

/// Agent settings.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Segment directory (created with mode 0700 when missing, so processes started later use
    /// shared memory).
    pub probe_dir: PathBuf,
    /// Collector's OTLP/HTTP base URL (`http://127.0.0.1:4318`); `None` = spool only.
    pub collector: Option<String>,
    /// Base URL of the collector's control API, on its query listener
    /// (`http://127.0.0.1:16686`); `None` = no reports, no commands from the collector.
    pub control_url: Option<String>,
    /// Bearer token for the collector's control API.
    pub control_token: Option<String>,
    pub spool: SpoolConfig,
    /// Agent name (reports, control results); default the host name.
    pub name: String,
    pub host: String,
    /// Pause between drain cycles.
    pub poll_interval: Duration,
    /// Longest a span waits in the agent before its batch is spooled.
    pub batch_interval: Duration,
    /// Spans per batch at most.
    pub max_batch_spans: usize,
    /// `GET /metrics` listener (`None` = off).
    pub metrics_addr: Option<SocketAddr>,
    /// Serve the local control socket.
    pub socket: bool,
    pub report_interval: Duration,
    pub assembler: AssemblerConfig,
    /// How long a switch waits for the processes' acknowledgements.
    pub control_wait: Duration,
    /// At shutdown, how long the sender keeps sending what is spooled.
    pub linger: Duration,
    /// Sender timeout per request.
    pub send_timeout: Duration,
    /// gzip batches (less disk and network, more agent CPU).
    pub compress: bool,
    /// LTTng live targets to follow (`--lttng-live`): every session of a relay daemon, or one.
    pub lttng_live: Vec<weft_sources::ctf::live::LiveTarget>,
    /// How the LTTng live sessions are followed (span idle time, backoff, ...).
    pub lttng_follow: weft_weave::live::FollowOptions,
}

/// The host name (`gethostname`), or `"localhost"`.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its length.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if r != 0 {
        return "localhost".into();
    }
    let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

impl AgentConfig {
    /// Defaults: the probe directory weft-probe uses, spool under `spool_dir` (256 MiB).
    pub fn new(probe_dir: impl Into<PathBuf>, spool_dir: impl Into<PathBuf>) -> AgentConfig {
        let host = hostname();
        AgentConfig {
            probe_dir: probe_dir.into(),
            collector: None,
            control_url: None,
            control_token: None,
            spool: SpoolConfig::new(spool_dir, 256 << 20),
            name: host.clone(),
            host,
            poll_interval: Duration::from_millis(50),
            batch_interval: Duration::from_millis(200),
            max_batch_spans: 2000,
            metrics_addr: None,
            socket: true,
            report_interval: Duration::from_secs(2),
            assembler: AssemblerConfig::default(),
            control_wait: Duration::from_secs(2),
            linger: Duration::from_secs(2),
            send_timeout: Duration::from_secs(10),
            compress: true,
            lttng_live: Vec::new(),
            lttng_follow: weft_weave::live::FollowOptions {
                reconnect: true,
                live: weft_sources::ctf::live::LiveOptions {
                    timeout: Duration::from_secs(5),
                    ..weft_sources::ctf::live::LiveOptions::default()
                },
                ..weft_weave::live::FollowOptions::default()
            },
        }
    }
}

/// Errors starting the agent.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("probe directory {path}: {detail}")]
    ProbeDir { path: PathBuf, detail: String },
    #[error(transparent)]
    Spool(#[from] SpoolError),
    #[error(transparent)]
    Socket(#[from] control::SocketError),
    #[error("metrics listener {addr}: {source}")]
    Metrics { addr: SocketAddr, source: std::io::Error },
    #[error(transparent)]
    Capture(#[from] crate::capture::alloc::AllocError),
}

/// A running agent.
pub struct Agent {
    stop: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
    spool: Arc<Spool>,
    metrics_addr: Option<SocketAddr>,
    socket: Option<PathBuf>,
    drain: Option<JoinHandle<()>>,
    /// The LTTng live followers (joined with the drain loop, before the sender lingers).
    lttng: Vec<JoinHandle<()>>,
    sender: Option<JoinHandle<()>>,
    others: Vec<JoinHandle<()>>,
}

/// Make sure the probe directory exists, is ours and closed to others.
pub fn prepare_probe_dir(dir: &Path) -> Result<(), AgentError> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let err = |detail: String| AgentError::ProbeDir { path: dir.to_path_buf(), detail };
    if !dir.exists() {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|e| err(e.to_string()))?;
    }
    let md = std::fs::symlink_metadata(dir).map_err(|e| err(e.to_string()))?;
    if !md.file_type().is_dir() {
        return Err(err("not a directory (symlinks are refused)".into()));
    }
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    if md.uid() != uid {
        return Err(err(format!("owned by uid {}, not {uid}", md.uid())));
    }
    if md.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| err(e.to_string()))?;
    }
    Ok(())
}

impl Agent {
    /// Start every thread. Returns once the directory, spool, socket and listeners are ready.
    pub fn start(cfg: AgentConfig) -> Result<Agent, AgentError> {
        prepare_probe_dir(&cfg.probe_dir)?;
        let spool = Arc::new(Spool::open(cfg.spool.clone())?);
        let metrics = Arc::new(Metrics::default());
        metrics.set_spool(spool.stats());
        let stop = Arc::new(AtomicBool::new(false));
        let mut others = Vec::new();
        let tap = Arc::new(std::sync::Mutex::new(crate::capture::remote::Tap::default()));
        let exec: Arc<dyn Fn(&ProbeCommand) -> CommandResult + Send + Sync> = {
            let (dir, wait, name, host, m) = (
                cfg.probe_dir.clone(),
                cfg.control_wait,
                cfg.name.clone(),
                cfg.host.clone(),
                metrics.clone(),
            );
            Arc::new(move |cmd: &ProbeCommand| {
                m.control_requests.fetch_add(1, Ordering::Relaxed);
                let r = control::execute(&dir, cmd, wait, &name, &host);
                if r.error.is_some() {
                    m.control_errors.fetch_add(1, Ordering::Relaxed);
                }
                r
            })
        };
        let socket = if cfg.socket {
            let path = control::socket_path(&cfg.probe_dir);
            let l = control::bind(&path)?;
            let (s, e, r) = (stop.clone(), exec.clone(), metrics.control_errors.clone());
            others.push(spawn("weft-agent-socket", move || control::serve(l, s, 16, e, r)));
            Some(path)
        } else {
            None
        };
        let metrics_addr = match cfg.metrics_addr {
            Some(addr) => {
                let l = TcpListener::bind(addr).map_err(|source| AgentError::Metrics { addr, source })?;
                let local = l.local_addr().map_err(|source| AgentError::Metrics { addr, source })?;
                l.set_nonblocking(true).map_err(|source| AgentError::Metrics { addr, source })?;
                let (s, m) = (stop.clone(), metrics.clone());
                others.push(spawn("weft-agent-metrics", move || serve_metrics(l, m, s)));
                Some(local)
            }
            None => None,
        };
        let sender = cfg.collector.as_ref().map(|url| {
            let mut sc = crate::ship::SenderConfig::new(url.clone());
            sc.timeout = cfg.send_timeout;
            let (sp, m, s, linger) = (spool.clone(), metrics.clone(), stop.clone(), cfg.linger);
            spawn("weft-agent-send", move || crate::ship::run(sp, sc, m, s, linger))
        });
        if let Some(url) = &cfg.control_url {
            let link = crate::collector::Link {
                collector: weft_control::client::Collector::new(url, cfg.control_token.clone()),
                agent: cfg.name.clone(),
                host: cfg.host.clone(),
            };
            // Reports and commands both need the control token (a report registers the agent).
            if cfg.control_token.is_some() {
                let (l2, m, s, every, dir) =
                    (link.clone(), metrics.clone(), stop.clone(), cfg.report_interval, cfg.probe_dir.clone());
                others.push(spawn("weft-agent-report", move || {
                    crate::collector::run_reporter(l2, m, s, every, dir)
                }));
                let node = crate::live::LiveNode::new(
                    &cfg.name,
                    &cfg.host,
                    vec![
                        Box::new(crate::live::InProcess::new(&cfg.probe_dir, cfg.control_wait)),
                        Box::new(crate::ebpf::Kernel::new()),
                    ],
                    metrics.clone(),
                );
                let (s, c) = (stop.clone(), link.collector.clone());
                // not joined at shutdown either: its exchange may be in flight
                let _ = spawn("weft-agent-live", move || crate::live::run(c, node, s));
                let (s, e) = (stop.clone(), exec.clone());
                let executor = crate::capture::remote::Executor {
                    engine: crate::capture::engine::Engine::new(crate::capture::alloc::Allocator::new(
                        crate::capture::alloc::AllocConfig::default(),
                    )?)
                    .with_probe_dir(&cfg.probe_dir),
                    tap: tap.clone(),
                    spool: spool.clone(),
                    agent: cfg.name.clone(),
                    host: cfg.host.clone(),
                    compress: cfg.compress,
                    batch: cfg.max_batch_spans,
                    settle: cfg.batch_interval + cfg.poll_interval * 2,
                };
                let capture: Arc<dyn Fn(&CaptureCommand) -> CaptureOutcome + Send + Sync> =
                    Arc::new(move |c: &CaptureCommand| executor.run(c));
                // not joined at shutdown: a long poll (or a capture) may be in flight
                let _ = spawn("weft-agent-poll", move || crate::collector::run_poller(link, s, e, capture));
            }
        }
        let lttng = cfg
            .lttng_live
            .iter()
            .enumerate()
            .map(|(slot, target)| {
                let lc = crate::lttng::LiveConfig {
                    target: target.clone(),
                    follow: cfg.lttng_follow.clone(),
                    slot,
                    batch_interval: cfg.batch_interval,
                    max_batch_spans: cfg.max_batch_spans,
                    compress: cfg.compress,
                };
                let (sp, m, s) = (spool.clone(), metrics.clone(), stop.clone());
                spawn("weft-agent-lttng", move || crate::lttng::run(lc, sp, m, s))
            })
            .collect();
        let drain = {
            let (sp, m, s) = (spool.clone(), metrics.clone(), stop.clone());
            spawn("weft-agent-drain", move || DrainLoop::new(cfg, sp, m, tap).run(&s))
        };
        Ok(Agent { stop, metrics, spool, metrics_addr, socket, drain: Some(drain), lttng, sender, others })
    }

    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// The bound `GET /metrics` address.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Ask every thread to stop (returns at once; [`Agent::join`] waits).
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Stop: a last drain cycle (spooled and committed), then the sender gets `linger` to send
    /// what is spooled; the rest stays in the spool for the next start.
    pub fn join(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(d) = self.drain.take() {
            let _ = d.join();
        }
        for h in self.lttng.drain(..) {
            let _ = h.join();
        }
        if let Some(s) = self.sender.take() {
            let _ = s.join();
        }
        self.spool.close();
        self.metrics.set_spool(self.spool.stats());
        for h in self.others.drain(..) {
            let _ = h.join();
        }
        if let Some(p) = self.socket.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
    std::thread::Builder::new().name(name.into()).spawn(f).unwrap_or_else(|e| {
        tracing::error!(thread = name, error = %e, "cannot start a thread");
        std::thread::spawn(|| {})
    })
}

/// One attached process.
struct Source {
    path: PathBuf,
    seg: Segment,
    tps: TpTable,
    registry_len: u64,
    asm: Assembler,
    cursors: Vec<u64>,
    /// Per ring: the tail last committed.
    tails: Vec<u64>,
    /// Per ring: records before this were delivered before a restart (replayed silently).
    replay_until: Vec<u64>,
    replaying: bool,
    records: u64,
    enabled: u32,
    enabled_at: Option<Instant>,
}

struct DrainLoop {
    cfg: AgentConfig,
    spool: Arc<Spool>,
    metrics: Arc<Metrics>,
    sources: Vec<Source>,
    /// Segments another consumer holds, or that failed to attach (retried on change).
    skipped: HashMap<PathBuf, (u64, String)>,
    pending: Vec<Span>,
    last_flush: Instant,
    last_scan: Option<Instant>,
    last_sweep: Instant,
    dirty: bool,
    logged: HashSet<String>,
    /// Assembler counters of sources already removed.
    removed: weft_weave::probe::AsmStats,
    /// Records the removed processes dropped (full rings, no ring).
    removed_drops: u64,
    /// The running capture's copy of the request spans.
    tap: Arc<std::sync::Mutex<crate::capture::remote::Tap>>,
}

fn file_stamp(p: &Path) -> u64 {
    std::fs::metadata(p)
        .ok()
        .and_then(|m| m.modified().ok())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl DrainLoop {
    fn new(
        cfg: AgentConfig,
        spool: Arc<Spool>,
        metrics: Arc<Metrics>,
        tap: Arc<std::sync::Mutex<crate::capture::remote::Tap>>,
    ) -> DrainLoop {
        DrainLoop {
            cfg,
            spool,
            metrics,
            sources: Vec::new(),
            skipped: HashMap::new(),
            pending: Vec::new(),
            last_flush: Instant::now(),
            last_scan: None,
            last_sweep: Instant::now(),
            dirty: false,
            logged: HashSet::new(),
            removed: weft_weave::probe::AsmStats::default(),
            removed_drops: 0,
            tap,
        }
    }

    fn run(mut self, stop: &AtomicBool) {
        loop {
            let stopping = stop.load(Ordering::Relaxed);
            let t0 = Instant::now();
            self.cycle(stopping);
            if stopping {
                return;
            }
            let busy = t0.elapsed();
            std::thread::sleep(self.cfg.poll_interval.saturating_sub(busy));
        }
    }

    fn warn_once(&mut self, key: String, msg: &str) {
        if self.logged.len() < 10_000 && self.logged.insert(key.clone()) {
            tracing::warn!(what = %key, "{msg}");
        }
    }

    fn scan(&mut self) {
        let paths = match consumer::discover(&self.cfg.probe_dir) {
            Ok(p) => p,
            Err(e) => {
                self.warn_once(format!("discover:{e}"), "cannot list the probe directory");
                return;
            }
        };
        let present: HashSet<&PathBuf> = paths.iter().collect();
        self.skipped.retain(|p, _| present.contains(p));
        for path in &paths {
            if self.sources.iter().any(|s| &s.path == path) {
                continue;
            }
            let stamp = file_stamp(path);
            if let Some((st, why)) = self.skipped.get(path)
                && *st == stamp
                && why != "busy"
            {
                continue;
            }
            match Segment::open(path) {
                Ok(seg) => {
                    self.skipped.remove(path);
                    self.attach(path.clone(), seg);
                }
                Err(ConsumerError::Busy { .. }) => {
                    if self.skipped.insert(path.clone(), (stamp, "busy".into())).is_none() {
                        tracing::info!(path = %path.display(), "segment held by another consumer; will retry");
                    }
                }
                Err(e) => {
                    self.metrics.attach_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %e, "cannot attach a probe segment");
                    self.skipped.insert(path.clone(), (stamp, e.to_string()));
                }
            }
        }
    }

    fn attach(&mut self, path: PathBuf, seg: Segment) {
        let list = seg.registry().unwrap_or_else(|e| {
            tracing::warn!(error = %e, "probe registry unreadable; names will be placeholders");
            Vec::new()
        });
        let pos = seg.positions();
        let instance = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let id = ProcessIdentity {
            pid: seg.pid(),
            service: seg.service(),
            exe: seg.exe(),
            instance,
            host: self.cfg.host.clone(),
        };
        let replaying = pos.iter().any(|p| p.mark != p.tail);
        tracing::info!(
            pid = id.pid,
            service = %id.service,
            tracepoints = list.len(),
            replay_bytes = pos.iter().map(|p| p.mark - p.tail).sum::<u64>(),
            "attached"
        );
        let asm = Assembler::new(id, self.cfg.assembler, &seg.clock());
        self.metrics.segments_attached.fetch_add(1, Ordering::Relaxed);
        self.sources.push(Source {
            path,
            registry_len: seg.registry_len(),
            tps: TpTable::new(&list),
            enabled: list.iter().filter(|t| t.enabled).count() as u32,
            enabled_at: Some(Instant::now()),
            seg,
            asm,
            cursors: pos.iter().map(|p| p.tail).collect(),
            tails: pos.iter().map(|p| p.tail).collect(),
            replay_until: pos.iter().map(|p| p.mark).collect(),
            replaying,
            records: 0,
        });
    }

    fn cycle(&mut self, stopping: bool) {
        if self.last_scan.is_none_or(|t| t.elapsed() >= Duration::from_millis(250)) {
            self.scan();
            self.last_scan = Some(Instant::now());
        }
        let now_ns = weft_probe::clock::realtime_ns();
        let sweep = self.last_sweep.elapsed() >= Duration::from_secs(1);
        if sweep {
            self.last_sweep = Instant::now();
        }
        let mut pressure = false;
        let mut dead = Vec::new();
        for i in 0..self.sources.len() {
            let alive = self.sources[i].seg.producer_alive();
            pressure |= self.read_source(i, now_ns);
            let src = &mut self.sources[i];
            if sweep {
                src.asm.sweep(now_ns, &mut self.pending);
            }
            if !alive {
                // everything it ever wrote is read now: emit what is open, then clean up
                src.asm.flush_all(&mut self.pending);
                dead.push(i);
            }
            if self.pending.len() >= self.cfg.max_batch_spans {
                self.flush();
            }
        }
        let due = self.last_flush.elapsed() >= self.cfg.batch_interval;
        if !dead.is_empty() || stopping || pressure || (due && (self.dirty || !self.pending.is_empty())) {
            self.flush();
        }
        for &i in dead.iter().rev() {
            let src = self.sources.remove(i);
            let Source { seg, path, asm, .. } = src;
            self.removed.add(&asm.stats());
            self.removed_drops += seg.stats().dropped();
            match seg.remove() {
                Ok(()) => {
                    self.metrics.segments_removed.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(path = %path.display(), pid = asm.identity().pid, "process gone: drained and removed its segment");
                }
                Err(e) => tracing::warn!(error = %e, "cannot remove a drained segment"),
            }
        }
        self.publish();
    }

    /// Read every ring of source `i`; returns true when a ring holds more than a quarter of its
    /// capacity that could be released (flush early, so the producer gets its space back).
    fn read_source(&mut self, i: usize, now_ns: u64) -> bool {
        let src = &mut self.sources[i];
        if src.seg.registry_len() != src.registry_len {
            src.registry_len = src.seg.registry_len();
            if let Ok(list) = src.seg.registry() {
                src.tps = TpTable::new(&list);
            }
        }
        let clock = src.seg.clock();
        let cap = src.seg.ring_capacity();
        let mut pressure = false;
        let mut unknown_retry = false;
        for r in 0..src.cursors.len() {
            let from = src.cursors[r];
            let until = src.replay_until[r];
            let (tps, asm, pending) = (&src.tps, &mut src.asm, &mut self.pending);
            let mut stop_at: Option<u64> = None;
            let res = src.seg.read_ring(r, from, |pos, rec| {
                if stop_at.is_some() {
                    return;
                }
                if tps.get(rec.tracepoint).is_none() && !unknown_retry {
                    // a descriptor may be published just after the record: look again first
                    stop_at = Some(pos);
                    return;
                }
                asm.record(r, pos, rec, pos < until, tps, &clock, now_ns, pending);
            });
            let rr = match res {
                Ok(rr) => rr,
                Err(e) => {
                    tracing::error!(error = %e, "ring read refused");
                    continue;
                }
            };
            src.records += rr.records;
            self.metrics.records.fetch_add(rr.records, Ordering::Relaxed);
            if let Some(e) = rr.error {
                self.metrics.record_errors.fetch_add(1, Ordering::Relaxed);
                self.metrics.skipped_bytes.fetch_add(rr.skipped_bytes, Ordering::Relaxed);
                tracing::warn!(error = %e, "corrupt probe data skipped");
            }
            let next = match stop_at {
                Some(p) => {
                    unknown_retry = true;
                    if let Ok(list) = src.seg.registry() {
                        src.registry_len = src.seg.registry_len();
                        src.tps = TpTable::new(&list);
                    }
                    p
                }
                None => rr.next,
            };
            if next != src.cursors[r] {
                self.dirty = true;
            }
            src.cursors[r] = next;
            // the producer's free space is what lies before the committed tail: give it back
            // early when a quarter of the ring is held
            if next.wrapping_sub(src.tails[r]) > cap / 4 {
                pressure = true;
            }
        }
        if src.replaying && src.cursors.iter().zip(&src.replay_until).all(|(c, u)| c >= u) {
            src.replaying = false;
            src.asm.end_replay();
        }
        pressure
    }

    /// Spool the pending spans, then commit every source's positions.
    fn flush(&mut self) {
        self.last_flush = Instant::now();
        self.dirty = false;
        let spans = std::mem::take(&mut self.pending);
        if let Ok(mut t) = self.tap.lock() {
            t.offer(&spans);
        }
        for chunk in spans.chunks(self.cfg.max_batch_spans.max(1)) {
            let body = encode_batch(chunk, self.cfg.compress);
            match self.spool.append(&body, chunk.len() as u32, self.cfg.compress) {
                Ok(Appended::Stored { .. }) => {
                    self.metrics.batches_spooled.fetch_add(1, Ordering::Relaxed);
                }
                Ok(Appended::Dropped) => {}
                Err(e) => {
                    // Not committing keeps the records in the rings: the next flush retries
                    // (after a restart they are replayed). Spans already built are re-built.
                    self.metrics.spool_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(error = %e, "cannot append to the spool; positions not committed");
                    return;
                }
            }
        }
        for src in &mut self.sources {
            let cap = src.seg.ring_capacity();
            for r in 0..src.cursors.len() {
                let cursor = src.cursors[r];
                let tail = src.asm.release_point(r, cursor, cap);
                // while replaying, the stored mark is still ahead of the cursor: keep it
                let mark = cursor.max(src.replay_until[r]);
                match src.seg.commit(r, tail, mark) {
                    Ok(()) => src.tails[r] = tail,
                    Err(e) => tracing::warn!(error = %e, "cannot commit ring positions"),
                }
            }
        }
        self.metrics.set_spool(self.spool.stats());
    }

    fn publish(&mut self) {
        let mut reports = Vec::with_capacity(self.sources.len());
        let mut open = 0u64;
        let mut totals = self.removed;
        let mut drops = self.removed_drops;
        for src in &mut self.sources {
            let st = src.seg.stats();
            drops += st.dropped();
            let a = src.asm.stats();
            open += src.asm.open_spans() as u64;
            totals.add(&a);
            if src.enabled_at.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                if let Ok(list) = src.seg.registry() {
                    src.enabled = list.iter().filter(|t| t.enabled).count() as u32;
                }
                src.enabled_at = Some(Instant::now());
            }
            let id = src.asm.identity();
            reports.push(ProcessReport {
                pid: id.pid,
                service: id.service.clone(),
                segment: src.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
                alive: true,
                rings_in_use: st.rings.iter().filter(|r| r.state == weft_probe::layout::RING_OWNED).count()
                    as u32,
                rings: st.rings.len() as u32,
                pending_bytes: st.rings.iter().map(|r| r.pending).sum(),
                capacity_bytes: st.rings.iter().map(|r| r.capacity).sum(),
                max_occupancy: st.max_occupancy(),
                dropped_ring_full: st.rings.iter().map(|r| r.dropped).sum(),
                dropped_no_ring: st.no_ring_drops,
                records: src.records,
                spans: a.spans,
                tracepoints: src.tps.len() as u32,
                tracepoints_enabled: src.enabled,
                ctl_rejected: st.ctl_rejected,
                ctl_protected: st.ctl_protected,
            });
        }
        let m = &self.metrics;
        m.open_spans.store(open, Ordering::Relaxed);
        m.set_processes(reports);
        m.set_spool(self.spool.stats());
        m.records_dropped.store(drops, Ordering::Relaxed);
        m.spans_built.store(totals.spans, Ordering::Relaxed);
        m.event_spans.store(totals.event_spans, Ordering::Relaxed);
        m.spans_incomplete.store(totals.incomplete, Ordering::Relaxed);
        m.spans_evicted.store(totals.evicted, Ordering::Relaxed);
        m.endpoint_resources_full.store(totals.endpoint_resources_full, Ordering::Relaxed);
        m.orphans_dropped.store(totals.orphans_dropped, Ordering::Relaxed);
        m.pins_released.store(totals.pins_released, Ordering::Relaxed);
    }
}

/// OTLP `ExportTraceServiceRequest` protobuf, gzip-compressed when `gzip` (what the sender
/// posts).
pub fn encode_batch(spans: &[Span], gzip: bool) -> Vec<u8> {
    let raw = weft_model::codec::otlp::encode_proto(spans);
    if gzip { weft_weave::export::gzip(&raw) } else { raw }
}

/// Decode what [`encode_batch`] made (tests, tools).
pub fn decode_batch(body: &[u8], gzip: bool) -> Result<Vec<Span>, String> {
    if !gzip {
        return weft_model::codec::otlp::decode_proto(body).map_err(|e| e.to_string());
    }
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(body).read_to_end(&mut raw).map_err(|e| format!("gzip: {e}"))?;
    weft_model::codec::otlp::decode_proto(&raw).map_err(|e| e.to_string())
}

fn serve_metrics(l: TcpListener, m: Arc<Metrics>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        match l.accept() {
            Ok((mut s, _)) => {
                let _ = s.set_nonblocking(false);
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
                let mut req = Vec::new();
                let mut buf = [0u8; 1024];
                while req.len() < 8192 && !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let line = req.split(|&b| b == b'\r').next().unwrap_or(&[]);
                let line = String::from_utf8_lossy(line);
                let mut parts = line.split_whitespace();
                let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
                let path = target.split('?').next().unwrap_or("");
                let (status, ctype, body) = match (method, path) {
                    ("GET", "/metrics") => ("200 OK", "text/plain; version=0.0.4; charset=utf-8", m.render()),
                    ("GET", "/status") | ("GET", "/api/status") => (
                        "200 OK",
                        "application/json",
                        serde_json::to_string(&m.report(&hostname(), &hostname())).unwrap_or_default(),
                    ),
                    ("GET", _) => ("404 Not Found", "text/plain", "GET /metrics or /status\n".to_string()),
                    _ => ("405 Method Not Allowed", "text/plain", "GET only\n".to_string()),
                };
                let _ = write!(
                    s,
                    "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}
