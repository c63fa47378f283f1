//! weft-probe against its peers, measured in one run (`cargo bench -p weft-probe --bench probe`):
//!
//! | group | weft-probe | peers |
//! |---|---|---|
//! | disabled | `event!` on a disabled tracepoint | `tracing::debug!` under an INFO subscriber; an LTTng-UST tracepoint not enabled in the session |
//! | event_2ints | `event!` with two u64 fields | `tracing::info!` into a no-op subscriber; fastrace `LocalSpan::add_event` with two properties; LTTng-UST tracepoint with two integer fields recorded by a running `lttng-sessiond --no-kernel` session |
//! | clock | the TSC read every record makes | `clock_gettime(CLOCK_REALTIME)` (what LTTng-UST's clock costs) |
//! | span | span begin + end | fastrace `LocalSpan` enter + drop; `tracing` span new + enter + exit + close into a no-op subscriber |
//!
//! Time is the benchmark thread's CPU time (`weft_testkit::cpu::ThreadCpu`), not wall time: on
//! the shared 2-vCPU machine, wall-clock figures grow with the other jobs' load (about 3× at a
//! load average of 5), CPU time does not. LTTng-UST's figure is likewise the calling thread's
//! cost (its consumer daemon's work is not counted, as weft's agent's is not).
//!
//! weft's rings are drained between timed batches (never full, so the drop path is not what is
//! measured); LTTng's consumer daemon drains concurrently. The LTTng-UST shim
//! (`benches/lttng/`) is compiled with gcc at bench time and loaded with `dlopen`, so LTTng is
//! never part of a normal build. In `cargo test` (criterion's test mode) the LTTng peer is not
//! started (say so on stderr); under `cargo bench` a missing LTTng (`.ci/test` installs
//! `lttng-tools` and `liblttng-ust-dev`) fails the run.

use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use weft_probe::consumer::Segment;
use weft_probe::{event, span, tracepoint};
use weft_testkit::cpu::{ThreadCpu, thread_cpu_ns};

tracepoint!(static OFF = "bench.off", Debug, group = "bench", fields = [a: u64, b: u64]);
tracepoint!(static EV2 = "bench.ev2", Debug, group = "bench", fields = [a: u64, b: u64], flags = [default_on]);
tracepoint!(static SPAN = "bench.span", Debug, group = "bench", flags = [span, default_on]);

const BATCH: u64 = 10_000;

/// Time `iters` calls of `f` in batches, draining weft's rings (untimed) between batches.
fn batched(seg: &mut Segment, iters: u64, mut f: impl FnMut(u64)) -> u64 {
    let mut total = 0u64;
    let mut left = iters;
    while left > 0 {
        let n = left.min(BATCH);
        let t = thread_cpu_ns();
        for i in 0..n {
            f(i);
        }
        total += thread_cpu_ns().saturating_sub(t);
        seg.drain(|_| {});
        left -= n;
    }
    total
}

mod noop {
    use tracing::level_filters::LevelFilter;
    use tracing::span::{Attributes, Id, Record};
    use tracing::subscriber::Interest;
    use tracing::{Event, Level, Metadata, Subscriber};

    /// Accepts INFO and more severe, records nothing.
    pub struct Noop;

    impl Subscriber for Noop {
        fn register_callsite(&self, m: &'static Metadata<'static>) -> Interest {
            if *m.level() <= Level::INFO { Interest::always() } else { Interest::never() }
        }
        fn enabled(&self, m: &Metadata<'_>) -> bool {
            *m.level() <= Level::INFO
        }
        fn max_level_hint(&self) -> Option<LevelFilter> {
            Some(LevelFilter::INFO)
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, _: &Event<'_>) {}
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }
}

struct NoopReporter;
impl fastrace::collector::Reporter for NoopReporter {
    fn report(&mut self, _spans: Vec<fastrace::collector::SpanRecord>) {}
}

/// The LTTng-UST peer: a recording session and the dlopen'ed shim.
struct Lttng {
    session: String,
    enabled: unsafe extern "C" fn(u64),
    disabled: unsafe extern "C" fn(u64),
    /// We started the session daemon (and stop it again at the end).
    started_daemon: bool,
    _dir: tempfile::TempDir,
}

/// The session daemon's pid file (root: /var/run/lttng; others: ~/.lttng).
fn sessiond_pid() -> Option<i32> {
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from).unwrap_or_default();
    ["/var/run/lttng/lttng-sessiond.pid".into(), home.join(".lttng/lttng-sessiond.pid")]
        .iter()
        .find_map(|p: &std::path::PathBuf| std::fs::read_to_string(p).ok()?.trim().parse().ok())
}

fn run(cmd: &str, args: &[&str]) -> Result<String, String> {
    let o = Command::new(cmd).args(args).output().map_err(|e| format!("{cmd}: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "{cmd} {args:?}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

impl Lttng {
    fn start() -> Result<Lttng, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/lttng");
        let so = dir.path().join("libweftbench_lttng.so");
        run(
            "gcc",
            &[
                "-O2",
                "-fPIC",
                "-shared",
                "-I",
                src.to_str().unwrap_or("."),
                src.join("shim.c").to_str().unwrap_or("shim.c"),
                "-o",
                so.to_str().unwrap_or("x.so"),
                "-llttng-ust",
                "-ldl",
            ],
        )?;
        let started_daemon = run("lttng", &["list"]).is_err();
        if started_daemon {
            run("lttng-sessiond", &["--daemonize", "--no-kernel"])?;
            std::thread::sleep(Duration::from_millis(500));
        }
        let session = format!("weftbench-{}", std::process::id());
        let out = dir.path().join("trace");
        run("lttng", &["create", &session, &format!("--output={}", out.display())])?;
        run("lttng", &["enable-channel", "-u", "ch", "-s", &session, "--subbuf-size=8M", "--num-subbuf=8"])?;
        run("lttng", &["enable-event", "-u", "-c", "ch", "-s", &session, "weftbench:ev2"])?;
        run("lttng", &["start", &session])?;
        let cpath = std::ffi::CString::new(so.to_string_lossy().as_bytes()).map_err(|e| e.to_string())?;
        // SAFETY: loading our own shim; its constructors register with the session daemon.
        let h = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW) };
        if h.is_null() {
            return Err(format!("dlopen {}", so.display()));
        }
        let sym = |name: &str| -> Result<unsafe extern "C" fn(u64), String> {
            let c = std::ffi::CString::new(name).map_err(|e| e.to_string())?;
            // SAFETY: h is a live handle; the symbol has this signature (shim.c).
            let p = unsafe { libc::dlsym(h, c.as_ptr()) };
            if p.is_null() {
                return Err(format!("dlsym {name}"));
            }
            // SAFETY: as above.
            Ok(unsafe { std::mem::transmute::<*mut libc::c_void, unsafe extern "C" fn(u64)>(p) })
        };
        Ok(Lttng {
            session,
            enabled: sym("weftbench_enabled")?,
            disabled: sym("weftbench_disabled")?,
            started_daemon,
            _dir: dir,
        })
    }
}

impl Drop for Lttng {
    fn drop(&mut self) {
        match run("lttng", &["stop", &self.session]) {
            Ok(out) => eprintln!("lttng stop: {}", out.trim()),
            Err(e) => eprintln!("{e}"),
        }
        let _ = run("lttng", &["destroy", &self.session]);
        if self.started_daemon
            && let Some(pid) = sessiond_pid()
        {
            // SAFETY: signalling the daemon this benchmark started.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
    }
}

fn benches(c: &mut Criterion<ThreadCpu>) {
    let bench_mode = std::env::args().any(|a| a == "--bench");
    weft_probe::init(weft_probe::Config {
        mode: weft_probe::Mode::Private,
        rings: 8,
        ring_size: 4 << 20,
        ..Default::default()
    });
    let mut seg = Segment::own().expect("own segment");
    tracing::subscriber::set_global_default(noop::Noop).expect("global subscriber");
    fastrace::set_reporter(NoopReporter, fastrace::collector::Config::default());
    let lttng = if bench_mode {
        Some(Lttng::start().unwrap_or_else(|e| {
            panic!("the LTTng-UST peer is missing or failed ({e}); run .ci/test, which installs lttng-tools and liblttng-ust-dev")
        }))
    } else {
        eprintln!("criterion test mode: the LTTng-UST peer is measured only under `cargo bench`");
        None
    };

    // The timestamp sources themselves: an enabled weft record reads the TSC once (a span twice).
    let mut g = c.benchmark_group("clock");
    g.bench_function("rdtsc", |b| b.iter(|| black_box(weft_probe::clock::now_raw())));
    g.bench_function("clock_gettime-realtime", |b| b.iter(|| black_box(weft_probe::clock::realtime_ns())));
    g.finish();

    let mut g = c.benchmark_group("disabled");
    g.bench_function("weft-probe", |b| b.iter(|| event!(OFF, a = black_box(1u64), b = black_box(2u64))));
    g.bench_function("tracing", |b| b.iter(|| tracing::debug!(a = black_box(1u64), b = black_box(2u64))));
    if let Some(l) = &lttng {
        g.bench_function("lttng-ust", |b| {
            b.iter_custom(|iters| {
                let t = thread_cpu_ns();
                // SAFETY: shim function.
                unsafe { (l.disabled)(iters) };
                thread_cpu_ns().saturating_sub(t)
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("event_2ints");
    let drops0 = seg.stats().dropped();
    g.bench_function("weft-probe", |b| {
        b.iter_custom(|iters| {
            batched(&mut seg, iters, |i| event!(EV2, a = black_box(i), b = black_box(7u64)))
        })
    });
    g.bench_function("tracing-noop-subscriber", |b| {
        b.iter(|| tracing::info!(a = black_box(1u64), b = black_box(2u64)))
    });
    g.bench_function("fastrace", |b| {
        b.iter_custom(|iters| {
            let mut total = 0u64;
            let mut left = iters;
            while left > 0 {
                let n = left.min(1000);
                let root = fastrace::Span::root("root", fastrace::collector::SpanContext::random());
                let guard = root.set_local_parent();
                let _outer = fastrace::local::LocalSpan::enter_with_local_parent("outer");
                let t = thread_cpu_ns();
                for i in 0..n {
                    fastrace::local::LocalSpan::add_event(fastrace::Event::new("ev2").with_properties(
                        || [("a", black_box(i).to_string()), ("b", black_box(7u64).to_string())],
                    ));
                }
                total += thread_cpu_ns().saturating_sub(t);
                drop(_outer);
                drop(guard);
                drop(root);
                left -= n;
            }
            total
        })
    });
    if let Some(l) = &lttng {
        g.bench_function("lttng-ust", |b| {
            b.iter_custom(|iters| {
                let t = thread_cpu_ns();
                // SAFETY: shim function.
                unsafe { (l.enabled)(iters) };
                thread_cpu_ns().saturating_sub(t)
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("span_begin_end");
    g.bench_function("weft-probe", |b| {
        b.iter_custom(|iters| {
            batched(&mut seg, iters, |_| {
                let s = span!(SPAN);
                black_box(&s);
            })
        })
    });
    g.bench_function("fastrace", |b| {
        b.iter_custom(|iters| {
            let mut total = 0u64;
            let mut left = iters;
            while left > 0 {
                let n = left.min(1000);
                let root = fastrace::Span::root("root", fastrace::collector::SpanContext::random());
                let guard = root.set_local_parent();
                let t = thread_cpu_ns();
                for _ in 0..n {
                    let s = fastrace::local::LocalSpan::enter_with_local_parent("s");
                    black_box(&s);
                }
                total += thread_cpu_ns().saturating_sub(t);
                drop(guard);
                drop(root);
                left -= n;
            }
            total
        })
    });
    g.bench_function("tracing-noop-subscriber", |b| {
        b.iter(|| {
            let s = tracing::info_span!("s");
            let _e = s.enter();
        })
    });
    g.finish();
    fastrace::flush();

    let st = seg.stats();
    assert_eq!(
        st.dropped(),
        drops0,
        "weft rings overflowed during the benchmark: the drop path was measured"
    );
    drop(lttng);
}

criterion_group! {
    name = probe;
    config = Criterion::default().with_measurement(ThreadCpu::default());
    targets = benches
}
criterion_main!(probe);
