//! Live queries at the machine level: the agent installs each query the collector deploys in
//! the probe level of its node, every interval collects the per-thread (or per-CPU) partials,
//! merges them into one partial per query and window, and ships that — never raw events — to
//! the collector ([`weft_control::live::LiveSync`] on `POST /api/control/live`).
//!
//! A probe level is a [`ProbeLevel`]: install a deployed plan (all or nothing on the node),
//! collect a query's merged partial, remove it, and pick up processes that appeared. The one
//! built here is [`InProcess`] (weft-probe tracepoints, through each process's segment
//! mailbox, [`weft_probe::mailbox`]); kernel tracepoints and uprobes run in
//! [`crate::ebpf::Kernel`] (weft-bpf) beside it.
//!
//! Windows are aligned on the wall clock (`start = now - now % interval`); a partial collected
//! at a boundary is the window that just ended. Bounded: at most [`MAX_PENDING_REPORTS`]
//! partials wait for the collector (the oldest are dropped and counted), and a process that
//! dies takes its last partial with it (counted as a failure of that process).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use weft_control::client::{Collector, LIVE_ROUTE};
use weft_control::live::{LiveFailure, LiveSync, PartialReport, QueryDeploy};
use weft_probe::agg::Partial;
use weft_probe::consumer::{self, Segment};
use weft_probe::query::{Plan, QueryId};

use crate::metrics::Metrics;

/// Partials kept for the collector at most.
pub const MAX_PENDING_REPORTS: usize = 1024;
/// Failures kept for the collector at most.
const MAX_PENDING_FAILURES: usize = 256;
/// Tracepoint schemas sent at most.
const MAX_TRACEPOINTS: usize = 4096;

/// One query's merged partial on this node, and what could not contribute.
#[derive(Debug, Default)]
pub struct Collected {
    pub partial: Partial,
    /// Processes (or CPUs' maps) merged.
    pub sources: usize,
    pub failures: Vec<LiveFailure>,
}

/// The probe level of one kind of source on this node.
pub trait ProbeLevel: Send {
    /// Does this level run the plan (its source kind)?
    fn accepts(&self, q: &QueryDeploy) -> bool;
    /// Install everywhere it applies, or nowhere: on a refusal, whatever was attached is
    /// removed again and the refusal is returned.
    fn install(&mut self, q: &QueryDeploy) -> Result<(), LiveFailure>;
    /// Collect and reset the query's partials, merged.
    fn collect(&mut self, query: u64) -> Collected;
    /// Remove the query everywhere (freeing its tables or maps); failures are returned.
    fn remove(&mut self, query: u64) -> Vec<LiveFailure>;
    /// Attach sources that appeared (installing the running queries in them; refusals are
    /// returned) and forget those that are gone.
    fn refresh(&mut self) -> Vec<LiveFailure>;
    /// `(tracepoint, field spec)` the level can run queries on.
    fn schemas(&self) -> Vec<(String, String)>;
}

struct Proc {
    seg: Segment,
    pid: u32,
    service: String,
    /// Tracepoint name → field spec.
    tracepoints: BTreeMap<String, String>,
    registry_len: u64,
    /// Collector query id → the process's query id.
    installed: BTreeMap<u64, QueryId>,
}

impl Proc {
    fn fail(&self, query: u64, error: impl Into<String>) -> LiveFailure {
        LiveFailure { query, pid: self.pid, service: self.service.clone(), error: error.into() }
    }

    fn reload(&mut self) {
        if self.seg.registry_len() == self.registry_len {
            return;
        }
        self.registry_len = self.seg.registry_len();
        if let Ok(list) = self.seg.registry() {
            self.tracepoints = list.into_iter().map(|t| (t.name, t.fields)).collect();
        }
    }
}

/// weft-probe tracepoints in the node's traced processes (through their segments' mailboxes).
pub struct InProcess {
    dir: PathBuf,
    wait: Duration,
    procs: BTreeMap<PathBuf, Proc>,
    /// Query → (plan, lease).
    queries: BTreeMap<u64, (Plan, Duration)>,
}

/// A process detaches a query nobody collected for this many intervals (at least
/// [`MIN_LEASE`]): an agent killed mid-query leaves no tables behind.
pub const LEASE_INTERVALS: u32 = 5;
/// The shortest lease.
pub const MIN_LEASE: Duration = Duration::from_secs(10);

fn lease(q: &QueryDeploy) -> Duration {
    (Duration::from_millis(q.interval_ms) * LEASE_INTERVALS).max(MIN_LEASE)
}

impl InProcess {
    /// Processes of the segment directory `dir`; `wait` bounds each request to a process.
    pub fn new(dir: &Path, wait: Duration) -> InProcess {
        InProcess { dir: dir.to_path_buf(), wait, procs: BTreeMap::new(), queries: BTreeMap::new() }
    }

    fn install_in(
        p: &mut Proc,
        query: u64,
        (plan, lease): &(Plan, Duration),
        wait: Duration,
    ) -> Result<bool, LiveFailure> {
        p.reload();
        if !p.tracepoints.contains_key(&plan.tracepoint) {
            return Ok(false);
        }
        match p.seg.install_query(plan, *lease, wait) {
            Ok(Ok(id)) => {
                p.installed.insert(query, id);
                Ok(true)
            }
            Ok(Err(reason)) => Err(p.fail(query, reason)),
            Err(e) => Err(p.fail(query, e.to_string())),
        }
    }
}

impl ProbeLevel for InProcess {
    fn accepts(&self, q: &QueryDeploy) -> bool {
        // no kernel source: the plan names a weft-probe tracepoint
        q.source.is_none()
    }

    fn install(&mut self, q: &QueryDeploy) -> Result<(), LiveFailure> {
        let node = |error: String| LiveFailure { query: q.query, pid: 0, service: String::new(), error };
        let plan = (q.plan.to_plan().map_err(|e| node(e.to_string()))?, lease(q));
        self.refresh();
        let mut refused = None;
        for p in self.procs.values_mut() {
            if let Err(f) = Self::install_in(p, q.query, &plan, self.wait) {
                refused = Some(f);
                break;
            }
        }
        if let Some(f) = refused {
            self.remove(q.query);
            return Err(f);
        }
        self.queries.insert(q.query, plan);
        Ok(())
    }

    fn collect(&mut self, query: u64) -> Collected {
        let mut out = Collected::default();
        for p in self.procs.values_mut() {
            let Some(&id) = p.installed.get(&query) else { continue };
            match p.seg.collect_query(id, self.wait) {
                Ok(Ok(part)) => match out.partial.merge(&part) {
                    Ok(()) => out.sources += 1,
                    Err(e) => out.failures.push(p.fail(query, e.0)),
                },
                Ok(Err(reason)) => out.failures.push(p.fail(query, reason)),
                Err(e) => out.failures.push(p.fail(query, e.to_string())),
            }
        }
        out
    }

    fn remove(&mut self, query: u64) -> Vec<LiveFailure> {
        self.queries.remove(&query);
        let mut failures = Vec::new();
        for p in self.procs.values_mut() {
            let Some(id) = p.installed.remove(&query) else { continue };
            match p.seg.detach_query(id, self.wait) {
                Ok(Ok(())) => {}
                Ok(Err(reason)) => failures.push(p.fail(query, reason)),
                Err(e) => failures.push(p.fail(query, e.to_string())),
            }
        }
        failures
    }

    fn refresh(&mut self) -> Vec<LiveFailure> {
        let mut failures = Vec::new();
        let paths = consumer::discover(&self.dir).unwrap_or_default();
        let present: BTreeSet<&PathBuf> = paths.iter().collect();
        let mut gone: Vec<PathBuf> = self.procs.keys().filter(|p| !present.contains(p)).cloned().collect();
        for (path, p) in &self.procs {
            if !p.seg.producer_alive() {
                gone.push(path.clone());
            }
        }
        for path in gone {
            if let Some(p) = self.procs.remove(&path) {
                for q in p.installed.keys() {
                    failures.push(p.fail(*q, "the process ended; its last partial is lost"));
                }
            }
        }
        for p in self.procs.values_mut() {
            p.reload();
        }
        for path in paths {
            if self.procs.contains_key(&path) {
                continue;
            }
            let Ok(seg) = Segment::open_shared(&path) else { continue };
            if !seg.producer_alive() || !seg.has_mailbox() {
                continue;
            }
            let mut p = Proc {
                pid: seg.pid(),
                service: seg.service(),
                seg,
                tracepoints: BTreeMap::new(),
                registry_len: u64::MAX,
                installed: BTreeMap::new(),
            };
            p.reload();
            for (q, plan) in &self.queries {
                if let Err(f) = Self::install_in(&mut p, *q, plan, self.wait) {
                    failures.push(f);
                }
            }
            self.procs.insert(path, p);
        }
        failures
    }

    fn schemas(&self) -> Vec<(String, String)> {
        let all: BTreeSet<(String, String)> = self
            .procs
            .values()
            .flat_map(|p| p.tracepoints.iter().map(|(n, f)| (n.clone(), f.clone())))
            .collect();
        all.into_iter().take(MAX_TRACEPOINTS).collect()
    }
}

struct Running {
    interval_ns: u64,
    /// End of the current window (ns since the Unix epoch).
    boundary: u64,
}

fn now_ns() -> u64 {
    weft_probe::clock::realtime_ns()
}

/// The node's live queries: which run, their windows, and what waits for the collector.
pub struct LiveNode {
    agent: String,
    host: String,
    levels: Vec<Box<dyn ProbeLevel>>,
    running: BTreeMap<u64, (usize, Running)>,
    failed: BTreeMap<u64, String>,
    reports: VecDeque<PartialReport>,
    failures: VecDeque<LiveFailure>,
    sent_schemas: Option<Vec<(String, String)>>,
    schemas_at: Option<Instant>,
    metrics: Arc<Metrics>,
}

impl LiveNode {
    pub fn new(agent: &str, host: &str, levels: Vec<Box<dyn ProbeLevel>>, metrics: Arc<Metrics>) -> LiveNode {
        LiveNode {
            agent: agent.to_string(),
            host: host.to_string(),
            levels,
            running: BTreeMap::new(),
            failed: BTreeMap::new(),
            reports: VecDeque::new(),
            failures: VecDeque::new(),
            sent_schemas: None,
            schemas_at: None,
            metrics,
        }
    }

    fn fail(&mut self, f: LiveFailure) {
        tracing::warn!(query = f.query, pid = f.pid, error = %f.error, "live query failure");
        if self.failures.len() >= MAX_PENDING_FAILURES {
            self.failures.pop_front();
        }
        self.failures.push_back(f);
    }

    /// Make the running set the collector's: install what is new, remove what is gone.
    pub fn apply(&mut self, wanted: &[QueryDeploy]) {
        let ids: BTreeSet<u64> = wanted.iter().map(|q| q.query).collect();
        let stale: Vec<u64> = self.running.keys().filter(|q| !ids.contains(q)).copied().collect();
        for q in stale {
            // the window under way ends here: its partial is shipped before the tables go
            self.collect(q, now_ns());
            if let Some((level, _)) = self.running.remove(&q) {
                for f in self.levels[level].remove(q) {
                    self.fail(f);
                }
                tracing::info!(query = q, "live query removed");
            }
        }
        self.failed.retain(|q, _| ids.contains(q));
        for d in wanted {
            if self.running.contains_key(&d.query) || self.failed.contains_key(&d.query) {
                continue;
            }
            let Some(level) = self.levels.iter().position(|l| l.accepts(d)) else {
                self.failed.insert(d.query, "no probe level on this node runs this source".into());
                continue;
            };
            match self.levels[level].install(d) {
                Ok(()) => {
                    let interval_ns = d.interval_ms.max(1).saturating_mul(1_000_000);
                    let now = now_ns();
                    let boundary = now - now % interval_ns + interval_ns;
                    tracing::info!(query = d.query, "live query installed");
                    self.running.insert(d.query, (level, Running { interval_ns, boundary }));
                }
                Err(f) => {
                    self.failed.insert(d.query, f.error.clone());
                    self.fail(f);
                }
            }
        }
    }

    /// New and gone sources, then a partial for every window that ended.
    pub fn tick(&mut self) {
        for i in 0..self.levels.len() {
            for f in self.levels[i].refresh() {
                self.fail(f);
            }
        }
        let now = now_ns();
        let due: Vec<u64> =
            self.running.iter().filter(|(_, (_, r))| r.boundary <= now).map(|(q, _)| *q).collect();
        for q in due {
            self.collect(q, now);
        }
    }

    /// Collect query `q`'s partial for the window that ends at its boundary (or is under way)
    /// and queue it for the collector.
    fn collect(&mut self, q: u64, now: u64) {
        {
            let Some((level, r)) = self.running.get_mut(&q) else { return };
            let c = self.levels[*level].collect(q);
            let start = r.boundary - r.interval_ns;
            let report = PartialReport::new(q, &self.agent, start, r.interval_ns, &c.partial);
            // skip windows the agent slept through: the next boundary is after now
            r.boundary = now - now % r.interval_ns + r.interval_ns;
            self.metrics.live_partials.fetch_add(1, Ordering::Relaxed);
            if self.reports.len() >= MAX_PENDING_REPORTS {
                self.reports.pop_front();
                self.metrics.live_partials_dropped.fetch_add(1, Ordering::Relaxed);
            }
            self.reports.push_back(report);
            for f in c.failures {
                self.fail(f);
            }
        }
    }

    /// How long until the next window ends (at most `cap`).
    pub fn until_next(&self, cap: Duration) -> Duration {
        let now = now_ns();
        self.running
            .values()
            .map(|(_, r)| Duration::from_nanos(r.boundary.saturating_sub(now)))
            .min()
            .unwrap_or(cap)
            .min(cap)
    }

    /// The next exchange's request (takes the pending partials and failures).
    pub fn request(&mut self, wait: Duration) -> LiveSync {
        let schemas: Vec<(String, String)> = self.levels.iter().flat_map(|l| l.schemas()).collect();
        let resend = self.schemas_at.is_none_or(|t| t.elapsed() >= Duration::from_secs(30));
        let tracepoints = if resend || self.sent_schemas.as_ref() != Some(&schemas) {
            self.schemas_at = Some(Instant::now());
            self.sent_schemas = Some(schemas.clone());
            Some(schemas)
        } else {
            None
        };
        LiveSync {
            agent: self.agent.clone(),
            host: self.host.clone(),
            running: self.running.keys().copied().collect(),
            failed: self.failed.keys().copied().collect(),
            reports: self.reports.drain(..).collect(),
            failures: self.failures.drain(..).collect(),
            tracepoints,
            wait_ms: wait.as_millis() as u64,
        }
    }

    /// Put back what an exchange that failed carried (bounded as before).
    pub fn requeue(&mut self, req: LiveSync) {
        for r in req.reports.into_iter().rev() {
            if self.reports.len() >= MAX_PENDING_REPORTS {
                self.metrics.live_partials_dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            self.reports.push_front(r);
        }
        for f in req.failures.into_iter().rev() {
            if self.failures.len() < MAX_PENDING_FAILURES {
                self.failures.push_front(f);
            }
        }
        if req.tracepoints.is_some() {
            self.sent_schemas = None;
        }
    }

    /// Remove every running query (agent shutdown).
    pub fn shutdown(&mut self) {
        self.apply(&[]);
    }
}

/// The live-query loop: exchange with the collector, install/remove, collect at window ends;
/// until `stop`.
pub fn run(collector: Collector, mut node: LiveNode, stop: Arc<AtomicBool>) {
    let mut backoff = Duration::from_millis(200);
    let mut last_complaint = String::new();
    while !stop.load(Ordering::Relaxed) {
        node.tick();
        let wait = node.until_next(Duration::from_secs(5));
        let req = node.request(wait);
        match collector.live_sync(&req) {
            Ok(answer) => {
                node.apply(&answer.queries);
                backoff = Duration::from_millis(200);
                last_complaint.clear();
            }
            Err(e) => {
                let complaint = e.to_string();
                if complaint != last_complaint {
                    tracing::warn!(url = %collector.url(LIVE_ROUTE), "{complaint}");
                    last_complaint = complaint;
                }
                node.requeue(req);
                let until = Instant::now() + backoff.min(node.until_next(backoff));
                while !stop.load(Ordering::Relaxed) && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(20));
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
    node.shutdown();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use weft_control::live::WirePlan;
    use weft_probe::agg::AggKind;
    use weft_probe::query::{AggSpec, Filter};

    /// A level whose every source saw one event; records what was asked of it.
    #[derive(Clone, Default)]
    struct Counting {
        log: Arc<Mutex<Vec<String>>>,
        refuse: bool,
    }

    impl ProbeLevel for Counting {
        fn accepts(&self, _q: &QueryDeploy) -> bool {
            true
        }
        fn install(&mut self, q: &QueryDeploy) -> Result<(), LiveFailure> {
            self.log.lock().unwrap().push(format!("install {}", q.query));
            if self.refuse {
                return Err(LiveFailure {
                    query: q.query,
                    pid: 7,
                    service: "s".into(),
                    error: "no field".into(),
                });
            }
            Ok(())
        }
        fn collect(&mut self, query: u64) -> Collected {
            self.log.lock().unwrap().push(format!("collect {query}"));
            Collected {
                partial: Partial { events: 1, ..Partial::default() },
                sources: 1,
                failures: Vec::new(),
            }
        }
        fn remove(&mut self, query: u64) -> Vec<LiveFailure> {
            self.log.lock().unwrap().push(format!("remove {query}"));
            Vec::new()
        }
        fn refresh(&mut self) -> Vec<LiveFailure> {
            Vec::new()
        }
        fn schemas(&self) -> Vec<(String, String)> {
            vec![("t".into(), "a:u64".into())]
        }
    }

    fn deploy(query: u64) -> QueryDeploy {
        let plan = Plan {
            tracepoint: "t".into(),
            filter: Filter::True,
            keys: Vec::new(),
            aggs: vec![AggSpec { kind: AggKind::Count, input: None }],
            capacity: 16,
            carry: Vec::new(),
        };
        QueryDeploy {
            query,
            plan: WirePlan::from(&plan),
            interval_ms: 60_000,
            duration_ms: None,
            source: None,
        }
    }

    fn node(level: &Counting) -> LiveNode {
        LiveNode::new("n1", "h", vec![Box::new(level.clone())], Arc::new(Metrics::default()))
    }

    #[test]
    fn the_node_follows_the_collectors_set_and_ships_a_last_partial() {
        let level = Counting::default();
        let mut n = node(&level);
        n.apply(&[deploy(1), deploy(2)]);
        n.apply(&[deploy(1), deploy(2)]);
        let req = n.request(Duration::ZERO);
        assert_eq!(req.running, [1, 2]);
        assert_eq!(req.tracepoints, Some(vec![("t".into(), "a:u64".into())]));
        assert!(n.request(Duration::ZERO).tracepoints.is_none(), "unchanged schemas are not resent");
        n.apply(&[deploy(2)]);
        let req = n.request(Duration::ZERO);
        assert_eq!(req.running, [2]);
        assert_eq!(req.reports.len(), 1, "the removed query's window under way is shipped");
        assert_eq!(req.reports[0].query, 1);
        assert_eq!(req.reports[0].partial().unwrap().events, 1);
        assert_eq!(*level.log.lock().unwrap(), ["install 1", "install 2", "collect 1", "remove 1"]);
    }

    #[test]
    fn a_refusal_is_reported_once_and_not_retried() {
        let level = Counting { refuse: true, ..Counting::default() };
        let mut n = node(&level);
        n.apply(&[deploy(3)]);
        n.apply(&[deploy(3)]);
        let req = n.request(Duration::ZERO);
        assert!(req.running.is_empty());
        assert_eq!(req.failed, [3]);
        assert_eq!(req.failures.len(), 1);
        assert_eq!(req.failures[0].error, "no field");
        assert_eq!(level.log.lock().unwrap().len(), 1, "installed once");
        n.apply(&[]);
        assert!(n.request(Duration::ZERO).failed.is_empty(), "forgotten once withdrawn");
    }

    #[test]
    fn partials_waiting_for_the_collector_are_bounded() {
        let level = Counting::default();
        let mut n = node(&level);
        let r = PartialReport::new(1, "n1", 0, 1, &Partial::default());
        let req = LiveSync { reports: vec![r; MAX_PENDING_REPORTS + 10], ..LiveSync::default() };
        n.requeue(req);
        assert_eq!(n.request(Duration::ZERO).reports.len(), MAX_PENDING_REPORTS);
        assert_eq!(n.metrics.live_partials_dropped.load(Ordering::Relaxed), 10);
    }
}
