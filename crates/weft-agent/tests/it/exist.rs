//! EXIST's capture engine on a real target: `examples/exist/requests.c` serving requests on
//! two threads, traced with the software backend (uprobes) for bounded periods. Needs root
//! (perf_event, tracefs uprobes), as `weft record`'s tests do.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use weft_agent::capture::alloc::{AllocConfig, Allocator, MIB};
use weft_agent::capture::engine::{
    Backend, CaptureError, CaptureRequest, CaptureResult, CaptureTarget, Cores, Engine,
};
use weft_model::EventKind;
use weft_model::event::KernelEvent;

/// Captures run one at a time: they count this process's perf-event fds.
static SERIAL: Mutex<()> = Mutex::new(());

struct Target {
    child: Child,
    bin: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(args: &[&str]) -> Target {
    let dir = tempfile::tempdir().unwrap();
    let bin = weft_testkit::compile_c("examples/exist/requests.c", dir.path());
    let child = Command::new(&bin).arg(dir.path().join("spans.jsonl")).args(args).spawn().unwrap();
    // Let the workers start.
    std::thread::sleep(Duration::from_millis(100));
    Target { child, bin, _dir: dir }
}

fn perf_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| l.to_string_lossy().contains("perf_event"))
        .count()
}

fn all_cores() -> Vec<u32> {
    weft_sources::perf::sys::online_cpus().unwrap()
}

fn request(pid: u32, functions: &[&str]) -> CaptureRequest {
    CaptureRequest {
        target: CaptureTarget::Pid(pid),
        period: Duration::from_millis(500),
        cores: Cores::Set(all_cores()),
        budget: Some(64 * MIB),
        backend: Backend::Software,
        functions: functions.iter().map(|s| s.to_string()).collect(),
        module: None,
        force: false,
        tracepoints: Vec::new(),
    }
}

fn engine() -> Engine {
    Engine::new(Allocator::new(AllocConfig::default()).unwrap())
}

fn function_events(r: &CaptureResult) -> Vec<(u64, u32, bool, String)> {
    r.events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Kernel(KernelEvent::UprobeEntry { tid, probe, .. }) => {
                Some((e.time_ns, *tid, true, probe.rsplit(':').next()?.to_owned()))
            }
            EventKind::Kernel(KernelEvent::UprobeReturn { tid, probe, .. }) => {
                Some((e.time_ns, *tid, false, probe.rsplit(':').next()?.to_owned()))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn function_calls_of_a_request_server_for_a_bounded_period() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t = start(&["--seconds", "4", "--threads", "2"]);
    let pid = t.child.id();
    let fds = perf_fds();
    let eng = engine();
    let req = request(pid, &["handle_request", "parse_request", "lookup", "comp*"]);
    let r = eng.run(&req, Instant::now()).unwrap();
    let c = &r.counters;
    println!(
        "exist capture: start latency {:?}, stop latency {:?} (period {:?}); {} calls, {} returns, \
         {} switches, {} control ops on {} cores, {} lost",
        c.start_latency,
        c.stop_latency,
        req.period,
        c.calls,
        c.returns,
        c.switches,
        c.control_ops,
        c.cores_enabled.len(),
        c.lost
    );
    assert_eq!(c.functions, 4);
    assert!(!c.target_exited);
    // Released: no perf fd left, the budget back.
    assert_eq!(perf_fds(), fds);
    assert_eq!(eng.in_use(), 0);
    // The period, from the recorded times: the tracers ran at least the period and every
    // record lies inside the window.
    assert!(r.end_ns - r.start_ns >= req.period.as_nanos() as u64);
    assert!(r.events.iter().all(|e| e.time_ns <= r.end_ns));
    let f = function_events(&r);
    assert!(f.len() > 40, "{} function records", f.len());
    assert!(f.iter().all(|x| x.0 >= r.start_ns));
    // Per thread the calls nest: handle_request → parse_request, then lookup → compute.
    let threads: std::collections::BTreeSet<u32> = f.iter().map(|x| x.1).collect();
    assert!(!threads.is_empty() && threads.len() <= 2, "{threads:?}");
    for tid in &threads {
        let mut stack: Vec<&str> = Vec::new();
        let mut complete = 0;
        for (_, _, entry, name) in f.iter().filter(|x| x.1 == *tid) {
            if *entry {
                if let Some(top) = stack.last() {
                    let ok = matches!(
                        (*top, name.as_str()),
                        ("handle_request", "parse_request" | "lookup") | ("lookup", "compute")
                    );
                    assert!(ok, "{name} called inside {top}");
                }
                stack.push(name);
            } else if stack.last() == Some(&name.as_str()) {
                stack.pop();
                complete += (name == "handle_request") as usize;
            } else {
                // A return whose entry came before the tracer was on: only at the start.
                assert!(stack.is_empty(), "return of {name} with {stack:?} open");
            }
        }
        assert!(complete > 5, "thread {tid}: {complete} whole requests");
    }
    // Scheduler records: the workers sleep 1 ms per request, so they switch often; the
    // controller's operations follow the cores, not the switches.
    assert!(c.switches > 20, "{} switches", c.switches);
    assert!(r.sched.iter().all(|s| s.pid == pid));
    assert!(r.sched.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
    assert!(c.control_ops <= 2 * all_cores().len() as u64);
    // A core's function records start once its tracer is on.
    for e in &r.events {
        if let (
            EventKind::Kernel(KernelEvent::UprobeEntry { cpu, .. } | KernelEvent::UprobeReturn { cpu, .. }),
            t,
        ) = (&e.kind, e.time_ns)
        {
            let on = c.cores_enabled.iter().find(|x| x.0 == *cpu).map(|x| x.1);
            assert!(on.is_some_and(|on| on <= t), "a call on core {cpu} at {t}, its tracer on at {on:?}");
        }
    }
    assert!(c.control_ops < c.switches);
    // The budget: per-core buffers within the request's budget, peak memory within them.
    assert!(c.buffer_bytes <= 64 * MIB && c.peak_bytes <= c.buffer_bytes);
    assert!(c.full_cores.is_empty() && c.dropped_full == 0);
    assert!(c.start_latency > Duration::ZERO);
    let _ = &t.bin;
}

#[test]
fn a_full_buffer_stops_its_core_and_is_counted() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t = start(&["--seconds", "3", "--threads", "1", "--hot"]);
    let fds = perf_fds();
    // A node whose per-core buffers are 256 KiB: 128 KiB of kept records per core, far less
    // than a busy loop of calls makes in the period.
    let kib = 1024;
    let cfg =
        AllocConfig { budget: 1024 * kib, min_buffer: 256 * kib, max_buffer: 256 * kib, extra_cores: 0 };
    let eng = Engine::new(Allocator::new(cfg).unwrap());
    let mut req = request(t.child.id(), &["hot_tick"]);
    req.budget = Some(256 * kib * all_cores().len() as u64);
    let r = eng.run(&req, Instant::now()).unwrap();
    let c = &r.counters;
    println!(
        "exist full buffer: {:?} full, {} kept calls, {} left out",
        c.full_cores, c.calls, c.dropped_full
    );
    assert!(!c.full_cores.is_empty());
    assert!(c.dropped_full > 0);
    assert!(c.peak_bytes <= c.buffer_bytes && c.buffer_bytes <= req.budget.unwrap());
    // What is kept is the start of the capture: the data nearest the trigger.
    let f = function_events(&r);
    assert!(f.iter().all(|x| x.0 >= r.start_ns));
    assert_eq!(perf_fds(), fds);
    assert_eq!(eng.in_use(), 0);
}

#[test]
fn a_target_that_exits_ends_the_capture_cleanly() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut t = start(&["--seconds", "0.8"]);
    let fds = perf_fds();
    let eng = engine();
    let mut req = request(t.child.id(), &["handle_request"]);
    req.period = Duration::from_secs(2);
    // Reap the child when it exits, so its /proc entry goes.
    let pid = t.child.id();
    let waiter = std::thread::spawn(move || {
        let _ = t.child.wait();
        t
    });
    let r = eng.run(&req, Instant::now()).unwrap_or_else(|e| panic!("{e}"));
    drop(waiter.join().unwrap());
    assert!(r.counters.target_exited, "pid {pid}");
    assert!(r.end_ns - r.start_ns < req.period.as_nanos() as u64);
    assert_eq!(perf_fds(), fds);
    assert_eq!(eng.in_use(), 0);
}

fn refused(eng: &Engine, req: &CaptureRequest) -> String {
    let fds = perf_fds();
    let e: CaptureError = eng.run(req, Instant::now()).unwrap_err();
    assert_eq!(perf_fds(), fds, "{e}");
    e.to_string()
}

#[test]
fn bad_requests_are_refused_with_their_reason() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t = start(&["--seconds", "6"]);
    let pid = t.child.id();
    let eng = engine();
    let ok = request(pid, &["handle_request"]);

    let m = refused(&eng, &CaptureRequest { target: CaptureTarget::Pid(999_999_999), ..ok.clone() });
    assert!(m.contains("no process 999999999"), "{m}");
    let m =
        refused(&eng, &CaptureRequest { target: CaptureTarget::Service("no-such-svc".into()), ..ok.clone() });
    assert!(m.contains("no process of service \"no-such-svc\""), "{m}");
    let m = refused(
        &eng,
        &CaptureRequest { target: CaptureTarget::Cgroup(Path::new("/nonexistent").into()), ..ok.clone() },
    );
    assert!(m.contains("/nonexistent/cgroup.procs"), "{m}");
    for ms in [50, 2500] {
        let m = refused(&eng, &CaptureRequest { period: Duration::from_millis(ms), ..ok.clone() });
        assert!(m.contains(&format!("a period of {ms} ms is outside 100-2000 ms")), "{m}");
    }
    let m = refused(&eng, &CaptureRequest { budget: Some(MIB), ..ok.clone() });
    assert!(m.contains("below one minimum per-core buffer of 4194304 bytes"), "{m}");
    let m = refused(&eng, &CaptureRequest { backend: Backend::IntelPt, ..ok.clone() });
    assert!(m.contains("use the software backend"), "{m}");
    let m = refused(&eng, &CaptureRequest { functions: vec!["no_such_fn*".into()], ..ok.clone() });
    assert!(m.contains("no function of") && m.contains("no_such_fn*"), "{m}");
    let m = refused(&eng, &CaptureRequest { cores: Cores::Set(vec![4096]), ..ok.clone() });
    assert!(m.contains("core 4096 is not an online core"), "{m}");

    // A second capture on the same cores while the first runs.
    let first = {
        let (eng, req) = (eng.clone(), CaptureRequest { period: Duration::from_millis(1500), ..ok.clone() });
        std::thread::spawn(move || eng.run(&req, Instant::now()).map(|r| r.counters.calls))
    };
    let t0 = Instant::now();
    while eng.in_use() == 0 && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let e = eng.run(&ok, Instant::now()).unwrap_err();
    assert!(e.to_string().contains("is already traced by capture"), "{e}");
    assert!(first.join().unwrap().unwrap() > 0);
    assert_eq!(eng.in_use(), 0);
    // Service name resolution finds the program.
    let name = t.bin.file_name().unwrap().to_string_lossy().into_owned();
    let r = eng
        .run(
            &CaptureRequest {
                target: CaptureTarget::Service(name),
                period: Duration::from_millis(200),
                ..ok
            },
            Instant::now(),
        )
        .unwrap();
    assert_eq!(r.pids, vec![pid]);
}

/// Counts the `tracing` events of weft-sources' kernel capture (it logs every capture it
/// opens) on the thread it is the default of.
#[derive(Default)]
struct CaptureOpens(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl tracing::Subscriber for CaptureOpens {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, e: &tracing::Event<'_>) {
        if e.metadata().target().starts_with("weft_sources::perf::capture") {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Runs `req` with [`CaptureOpens`] as the thread's subscriber: the result, and how many
/// kernel captures weft-sources opened meanwhile.
fn counting_opens(eng: &Engine, req: &CaptureRequest) -> (Result<CaptureResult, CaptureError>, usize) {
    let sub = CaptureOpens::default();
    let n = sub.0.clone();
    let r = tracing::subscriber::with_default(sub, || eng.run(req, Instant::now()));
    (r, n.load(std::sync::atomic::Ordering::SeqCst))
}

#[test]
fn a_request_naming_missing_tracepoints_is_refused_before_any_event_is_opened() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t = start(&["--seconds", "4"]);
    let dir = tempfile::tempdir().unwrap();
    let eng = engine().with_probe_dir(dir.path());
    let mut req = request(t.child.id(), &["handle_request"]);
    req.period = Duration::from_millis(200);
    // The peer: a good request opens one kernel capture (and the count sees it).
    let fds = perf_fds();
    let (r, opened) = counting_opens(&eng, &req);
    assert!(r.is_ok() && opened >= 1, "{:?}, {opened} opened", r.err());
    // The target has no weft-probe segment: refused, having opened nothing.
    req.tracepoints = vec!["all".into()];
    let (r, opened) = counting_opens(&eng, &req);
    let e = r.unwrap_err().to_string();
    assert!(e.contains("has a weft-probe segment in"), "{e}");
    assert_eq!(opened, 0, "{e}");
    assert_eq!(perf_fds(), fds);
    assert_eq!(eng.in_use(), 0);
}

#[test]
fn a_series_reads_the_modules_symbols_once_and_measures_its_cpu() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t = start(&["--seconds", "6", "--threads", "2"]);
    let fds = perf_fds();
    let eng = engine();
    let mut req = request(t.child.id(), &["handle_request", "lookup"]);
    req.period = Duration::from_millis(200);
    let first = eng.run(&req, Instant::now()).unwrap().counters;
    let second = eng.run(&req, Instant::now()).unwrap().counters;
    println!(
        "exist series: CPU setup {:?} then {:?}, window {:?} ({} wake-ups), release {:?}",
        first.cpu_setup, second.cpu_setup, second.cpu_window, second.polls, second.cpu_release
    );
    assert!(!first.functions_cached && second.functions_cached);
    assert_eq!((first.functions, second.functions), (2, 2));
    assert!(second.calls > 0);
    // Other globs are another entry.
    let other = CaptureRequest { functions: vec!["handle_request".into()], ..req.clone() };
    let c = eng.run(&other, Instant::now()).unwrap().counters;
    assert!(!c.functions_cached && c.functions == 1);
    // The module changed on disk (its modification time): read again.
    let f = std::fs::File::open(&t.bin).unwrap();
    f.set_modified(std::time::SystemTime::now() + Duration::from_secs(5)).unwrap();
    let third = eng.run(&req, Instant::now()).unwrap().counters;
    assert!(!third.functions_cached);
    // The controller's CPU and wake-ups are measured; nothing stays attached.
    assert!(second.polls > 0 && second.cpu_window > Duration::ZERO && second.cpu_setup > Duration::ZERO);
    assert_eq!(perf_fds(), fds);
    assert_eq!(eng.in_use(), 0);
}

#[test]
fn collector_requests_become_engine_requests() {
    use weft_agent::capture::remote::{MAX_TAPPED, Tap, request_from};
    use weft_control::proto::CaptureCommand;
    let cmd = CaptureCommand::parse(
        br#"{"service":"api","period_ms":300,"cores":"0-1","budget_bytes":8388608,"functions":["h*"]}"#,
    )
    .unwrap();
    let r = request_from(&cmd).unwrap();
    assert_eq!(r.target, CaptureTarget::Service("api".into()));
    assert_eq!(
        (r.period, r.cores.clone(), r.budget),
        (Duration::from_millis(300), Cores::Set(vec![0, 1]), Some(8 << 20))
    );
    assert_eq!((r.backend, r.functions.clone()), (Backend::Software, vec!["h*".to_string()]));
    let pt = CaptureCommand { backend: Some("intel_pt".into()), cores: None, ..cmd.clone() };
    assert_eq!(
        (request_from(&pt).unwrap().backend, request_from(&pt).unwrap().cores),
        (Backend::IntelPt, Cores::Auto)
    );
    let bad = CaptureCommand { cores: Some("x".into()), ..cmd };
    assert!(request_from(&bad).unwrap_err().to_string().contains("cores \"x\""));

    // The tap keeps spans with a thread id only while a capture runs, within its bound.
    let mut with_thread = weft_model::Span::default();
    with_thread.attributes.push(weft_model::conv::THREAD_ID, 7i64);
    let spans = vec![with_thread, weft_model::Span::default()];
    let mut tap = Tap::default();
    tap.offer(&spans);
    assert_eq!(tap.take(), (vec![], 0), "inactive");
    tap.start();
    tap.offer(&spans);
    let (kept, dropped) = tap.take();
    assert_eq!((kept.len(), dropped), (1, 0));
    tap.start();
    let many = vec![spans[0].clone(); MAX_TAPPED + 5];
    tap.offer(&many);
    let (kept, dropped) = tap.take();
    assert_eq!((kept.len(), dropped), (MAX_TAPPED, 5));
}

weft_probe::tracepoint!(static TP_REQ = "exist_tp.request", Info, group = "exist_tp", fields = [n: u64], flags = [span, default_on]);
weft_probe::tracepoint!(static TP_STEP = "exist_tp.step", Info, group = "exist_tp", flags = [span]);
weft_probe::tracepoint!(static TP_NOTE = "exist_tp.note", Info, group = "exist_tp", fields = [n: u64]);
weft_probe::tracepoint!(static TP_OTHER = "exist_tp.other", Info, group = "exist_tp", fields = [n: u64]);

/// The function the captures probe in the weft-probe target (an unmangled symbol).
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn exist_tp_step(n: u64) -> u64 {
    let step = weft_probe::span!(TP_STEP);
    weft_probe::event!(TP_NOTE, n = n);
    let mut x = n;
    for k in 0..20_000u64 {
        x = std::hint::black_box(x.wrapping_add(k & 1));
    }
    drop(step);
    x
}

/// The weft-probe target, when this binary is re-run as one ([`start_tp`]): requests (a span,
/// on by default) calling `exist_tp_step` (a span and an event, off by default) and an event
/// of `exist_tp.other` (off by default), every millisecond for `EXIST_TP_ROLE` seconds.
#[test]
fn exist_tp_role() {
    let Ok(secs) = std::env::var("EXIST_TP_ROLE") else { return };
    let until = Instant::now() + Duration::from_secs_f64(secs.parse().expect("seconds"));
    let mut n = 0u64;
    while Instant::now() < until {
        let req = weft_probe::span!(TP_REQ, n = n);
        std::hint::black_box(exist_tp_step(n));
        weft_probe::event!(TP_OTHER, n = n);
        drop(req);
        n += 1;
        std::thread::sleep(Duration::from_millis(1));
    }
    // leave before libtest prints anything else
    std::process::exit(0);
}

struct TpTarget {
    child: Child,
}

impl Drop for TpTarget {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the weft-probe target on `probes` and waits until its four tracepoints are there.
fn start_tp(probes: &Path, secs: f64) -> TpTarget {
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "exist::exist_tp_role", "--nocapture", "--test-threads=1"])
        .env("EXIST_TP_ROLE", secs.to_string())
        .env("WEFT_PROBE_DIR", probes)
        .env("WEFT_PROBE_MODE", "shm")
        .env("WEFT_PROBE_SERVICE", "exist-tp")
        .spawn()
        .unwrap();
    let t = TpTarget { child };
    let deadline = Instant::now() + Duration::from_secs(30);
    while tp_states(probes, t.child.id()).len() < 4 {
        assert!(Instant::now() < deadline, "the weft-probe target did not register its tracepoints");
        std::thread::sleep(Duration::from_millis(20));
    }
    t
}

/// The enabled state of process `pid`'s tracepoints, by name.
fn tp_states(probes: &Path, pid: u32) -> std::collections::BTreeMap<String, bool> {
    use weft_probe::consumer::{self, Segment};
    consumer::discover(probes)
        .unwrap_or_default()
        .iter()
        .filter_map(|p| Segment::open_shared(p).ok())
        .filter(|s| s.pid() == pid)
        .flat_map(|s| s.registry().unwrap_or_default())
        .map(|t| (t.name, t.enabled))
        .collect()
}

/// An agent draining `probes` into its spool, shipping nowhere.
fn spool_agent(dir: &Path) -> (weft_agent::Agent, PathBuf, PathBuf) {
    let (probes, spool) = (dir.join("probes"), dir.join("spool"));
    let mut cfg = weft_agent::AgentConfig::new(&probes, &spool);
    cfg.collector = None;
    cfg.control_url = None;
    cfg.metrics_addr = None;
    cfg.batch_interval = Duration::from_millis(50);
    (weft_agent::Agent::start(cfg).unwrap(), probes, spool)
}

/// Every span the agent spooled (after it stopped).
fn spooled(spool: &Path) -> Vec<weft_model::Span> {
    use weft_agent::spool::{Spool, SpoolConfig};
    let s = Spool::open(SpoolConfig::new(spool, 256 * MIB)).unwrap();
    let mut spans = Vec::new();
    while let Some(b) = s.next(Duration::from_millis(10)).unwrap() {
        spans.extend(weft_agent::agent::decode_batch(&b.payload, b.gzip).unwrap());
        s.ack(&b).unwrap();
    }
    spans
}

#[test]
fn the_targets_tracepoints_are_on_for_the_period_and_nest_with_its_calls() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (agent, probes, spool) = spool_agent(dir.path());
    let t = start_tp(&probes, 6.0);
    let pid = t.child.id();
    // exist_tp.other switched on beforehand, the way `weft probes enable` does.
    let cmd = serde_json::from_str(&format!(r#"{{"op":"enable","selector":"exist_tp.other","pid":{pid}}}"#))
        .unwrap();
    let res = weft_agent::control::execute(&probes, &cmd, Duration::from_secs(5), "it", "it");
    assert!(res.processes.iter().all(|p| p.applied) && res.processes.len() == 1, "{res:?}");
    let before = tp_states(&probes, pid);
    assert_eq!(before.values().filter(|on| **on).count(), 2, "{before:?}");
    std::thread::sleep(Duration::from_millis(300));

    let fds = perf_fds();
    let eng = engine().with_probe_dir(&probes);
    let mut req = request(pid, &["exist_tp_step"]);
    req.module = Some(std::env::current_exe().unwrap());
    req.tracepoints = vec!["exist_tp.*".into()];
    let r = eng.run(&req, Instant::now()).unwrap_or_else(|e| panic!("{e}"));
    // Exactly the two that were off went on, and the set before is back.
    assert_eq!(r.counters.tracepoints, 2);
    assert_eq!(tp_states(&probes, pid), before);
    assert_eq!(perf_fds(), fds);
    assert_eq!(eng.in_use(), 0);
    std::thread::sleep(Duration::from_millis(300));
    agent.request_stop();
    agent.join();
    drop(t);

    let spans = spooled(&spool);
    let reqs: std::collections::HashMap<_, _> =
        spans.iter().filter(|s| s.name == "exist_tp.request").map(|s| (s.span_id, s)).collect();
    let steps: Vec<&weft_model::Span> = spans.iter().filter(|s| s.name == "exist_tp.step").collect();
    println!(
        "exist tracepoints: {} requests, {} step spans in a {:.0} ms capture, {} calls",
        reqs.len(),
        steps.len(),
        (r.end_ns - r.start_ns) as f64 / 1e6,
        r.counters.calls
    );
    assert!(steps.len() > 20, "{} step spans", steps.len());
    for s in &steps {
        // Only while the capture ran; inside their request; with their event.
        assert!(
            s.start_ns >= r.start_ns && s.start_ns <= r.end_ns,
            "a step at {} outside the capture",
            s.start_ns
        );
        let parent = s.parent_span_id.and_then(|p| reqs.get(&p));
        assert!(parent.is_some_and(|p| p.trace_id == s.trace_id), "a step outside its request");
        assert!(s.events.iter().any(|e| e.name == "exist_tp.note"), "{:?}", s.events);
    }
    // exist_tp.other stayed on: its events are in requests after the capture too.
    let late = reqs
        .values()
        .filter(|q| q.start_ns > r.end_ns && q.events.iter().any(|e| e.name == "exist_tp.other"));
    assert!(late.count() > 10);
    // The probed calls go into the same requests as the tracepoints' spans.
    let fs = r.spans(&spans, "it");
    let calls: Vec<&weft_model::Span> =
        fs.spans.iter().filter(|s| s.name.contains("exist_tp_step")).collect();
    assert!(calls.len() > 20, "{} calls", calls.len());
    let traces: HashSet<_> = steps.iter().map(|s| s.trace_id).collect();
    let inside = calls.iter().filter(|c| traces.contains(&c.trace_id)).count();
    assert!(inside * 10 >= calls.len() * 8, "{inside} of {} calls inside requests with steps", calls.len());
}

#[test]
fn tracepoints_of_a_target_that_exits_mid_capture_end_cleanly() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (agent, probes, _spool) = spool_agent(dir.path());
    let mut t = start_tp(&probes, 10.0);
    let pid = t.child.id();
    let fds = perf_fds();
    let eng = engine().with_probe_dir(&probes);
    let mut req = request(pid, &["exist_tp_step"]);
    req.module = Some(std::env::current_exe().unwrap());
    req.tracepoints = vec!["all".into()];
    req.period = Duration::from_secs(2);
    // Killed once the capture switched its tracepoints on.
    let waiter = {
        let probes = probes.clone();
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(30);
            while tp_states(&probes, pid).get("exist_tp.step") != Some(&true) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            std::thread::sleep(Duration::from_millis(100));
            let _ = t.child.kill();
            let _ = t.child.wait();
            t
        })
    };
    let r = eng.run(&req, Instant::now()).unwrap_or_else(|e| panic!("{e}"));
    drop(waiter.join().unwrap());
    assert!(r.counters.target_exited && r.counters.tracepoints == 3, "{:?}", r.counters);
    assert!(r.end_ns - r.start_ns < req.period.as_nanos() as u64);
    assert_eq!(perf_fds(), fds);
    assert_eq!(eng.in_use(), 0);
    // A target without a weft-probe segment: refused.
    let other = start(&["--seconds", "3"]);
    let mut req = request(other.child.id(), &["handle_request"]);
    req.tracepoints = vec!["all".into()];
    let m = refused(&eng, &req);
    assert!(m.contains("has a weft-probe segment in"), "{m}");
    agent.request_stop();
    agent.join();
}
