//! Kernel capture against the real kernel (needs root: CI and the test machine run as root;
//! a refusal fails with the kernel's reason, never skips).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use weft_model::event::KernelEvent;
use weft_model::{Event, EventKind};
use weft_sources::perf::{Capture, CaptureConfig, StoppedChild, Target, UprobeTarget, syscall_number};

fn kernel(e: &Event) -> Option<&KernelEvent> {
    match &e.kind {
        EventKind::Kernel(k) => Some(k),
        _ => None,
    }
}

/// Runs `argv` under a capture until it exits; returns the events and the capture.
fn run_captured(argv: &[String], cfg: CaptureConfig) -> (Vec<Event>, Capture, u32) {
    let mut child = StoppedChild::spawn(argv).expect("fork");
    let cfg = CaptureConfig { target: Target::Exec(child.pid), ..cfg };
    let mut cap =
        Capture::open(&cfg).unwrap_or_else(|e| panic!("kernel capture refused (run the tests as root): {e}"));
    cap.enable().expect("enable");
    child.release().expect("release");
    let mut events = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().is_none() {
        assert!(Instant::now() < deadline, "workload did not finish in 60 s");
        cap.poll(Duration::from_millis(50), &mut events).expect("poll");
    }
    assert_eq!(child.try_wait(), Some(0), "workload failed");
    cap.finish(&mut events);
    events.sort_by_key(|e| e.time_ns);
    (events, cap, child.pid)
}

#[test]
fn captures_syscalls_switches_and_uprobes_of_an_exec_target() {
    let dir = tempfile::tempdir().unwrap();
    let bin = weft_testkit::compile_c("examples/kernel/workload.c", dir.path());
    let out = dir.path().join("spans.json");
    let up = UprobeTarget::resolve(&format!("{}:work_unit", bin.display())).expect("resolve work_unit");
    let cfg = CaptureConfig {
        tracepoints: vec![
            "sched:sched_switch".into(),
            "raw_syscalls:sys_enter".into(),
            "raw_syscalls:sys_exit".into(),
        ],
        uprobes: vec![up],
        ..CaptureConfig::default()
    };
    let argv = vec![bin.display().to_string(), out.display().to_string(), "--calls".into(), "40".into()];
    let (events, cap, pid) = run_captured(&argv, cfg);
    let stats = cap.stats();
    assert_eq!(stats.lost(), 0, "records lost: {stats:?}");
    assert_eq!(stats.decode.malformed, 0, "{:?}", stats.decode.first_errors);

    // Exactly the program's 1000 getppid calls, all from its main thread (= its pid).
    let getppid = syscall_number("getppid").unwrap();
    let enters: Vec<_> = events
        .iter()
        .filter_map(kernel)
        .filter(|k| matches!(k, KernelEvent::SyscallEnter { nr, pid: p, .. } if *nr == getppid && *p == pid))
        .collect();
    assert_eq!(enters.len(), 1000);
    let exits = events
        .iter()
        .filter_map(kernel)
        .filter(|k| matches!(k, KernelEvent::SyscallExit { nr, pid: p, ret, .. } if *nr == getppid && *p == pid && *ret as u32 == std::process::id()))
        .count();
    assert_eq!(exits, 1000, "getppid returns weft's test process id");
    // Nothing from other processes (per-task events with inherit).
    assert!(events.iter().filter_map(kernel).all(|k| match k {
        KernelEvent::SyscallEnter { pid: p, .. } | KernelEvent::SyscallExit { pid: p, .. } => *p == pid,
        _ => true,
    }));
    // The helper thread (pipe writer) was followed too: its write(2) is there.
    let write = syscall_number("write").unwrap();
    assert!(events.iter().filter_map(kernel).any(
        |k| matches!(k, KernelEvent::SyscallEnter { nr, pid: p, tid, args, .. } if *nr == write && *p == pid && *tid != pid && args[2] == 1)
    ));

    // Uprobes: 40 entries with i in rdi, 40 returns with i*3+1 in rax, in pairs.
    let mut calls = Vec::new();
    let mut rets = Vec::new();
    for k in events.iter().filter_map(kernel) {
        match k {
            KernelEvent::UprobeEntry { args, tid, .. } => {
                assert_eq!(*tid, pid);
                calls.push(args[0]);
            }
            KernelEvent::UprobeReturn { ret, .. } => rets.push(*ret),
            _ => {}
        }
    }
    assert_eq!(calls, (0..40).collect::<Vec<u64>>());
    assert_eq!(rets, (0..40).map(|i| i * 3 + 1).collect::<Vec<i64>>());

    // Scheduler: the main thread leaves the CPU sleeping during nanosleep and comes back;
    // switches alternate out/in per thread (each sleep ends with a switch-in, whether the
    // tracepoint reported it or only the SWITCH record did).
    let mut last: HashMap<u32, bool> = HashMap::new();
    let (mut outs, mut ins, mut sleeping_outs) = (0, 0, 0);
    for k in events.iter().filter_map(kernel) {
        if let KernelEvent::SchedSwitch { prev_tid, prev_pid, next_tid, prev_state, .. } = k {
            if *prev_tid == pid {
                assert_eq!(*prev_pid, pid);
                outs += 1;
                if *prev_state & 0xff == 1 {
                    sleeping_outs += 1;
                }
                assert_ne!(last.insert(pid, false), Some(false), "two switch-outs in a row");
            }
            if *next_tid == pid {
                ins += 1;
                // Switch-ins the tracepoint misses (leaving idle on a tickless CPU) come from
                // the scheduler's SWITCH records; confirmed ones must not appear twice.
                assert_ne!(last.insert(pid, true), Some(true), "two switch-ins in a row");
            }
        }
    }
    assert!(sleeping_outs >= 5, "4 nanosleeps + 1 blocking read: {sleeping_outs} sleeping switch-outs");
    assert!(outs >= sleeping_outs && ins >= sleeping_outs, "outs {outs}, ins {ins}");
    assert!(stats.opened > 0);
    assert_eq!(cap.traced_threads().map(|s| s.contains(&pid)), Some(true));
}

/// `group/name` of the tracefs uprobe events on `bin`.
fn uprobe_names(bin: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(uprobe_events()).unwrap();
    text.lines()
        .filter(|l| l.contains(&*bin.to_string_lossy()))
        .filter_map(|l| l.split_whitespace().next()?.get(2..).map(str::to_owned))
        .collect()
}

fn uprobe_events() -> &'static str {
    ["/sys/kernel/tracing/uprobe_events", "/sys/kernel/debug/tracing/uprobe_events"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("tracefs uprobe_events")
}

/// The first byte of `func` in the memory of the running process `pid` (0xcc while a uprobe
/// sits there).
fn first_byte(pid: u32, up: &UprobeTarget) -> u8 {
    use std::io::{Read, Seek, SeekFrom};
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let path = up.path.to_string_lossy();
    let addr = maps
        .lines()
        .filter(|l| l.ends_with(&*path))
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (start, end) = f[0].split_once('-')?;
            let (start, end) = (u64::from_str_radix(start, 16).ok()?, u64::from_str_radix(end, 16).ok()?);
            let off = u64::from_str_radix(f[2], 16).ok()?;
            (up.offset >= off && up.offset < off + (end - start)).then(|| start + up.offset - off)
        })
        .expect("the function's mapping");
    let mut mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    mem.seek(SeekFrom::Start(addr)).unwrap();
    let mut b = [0u8; 1];
    mem.read_exact(&mut b).unwrap();
    b[0]
}

#[test]
fn detaching_takes_the_breakpoints_out_first_and_keeps_what_the_rings_hold() {
    let dir = tempfile::tempdir().unwrap();
    let bin = weft_testkit::compile_c("examples/exist/requests.c", dir.path());
    let mut child = std::process::Command::new(&bin)
        .arg(dir.path().join("spans.jsonl"))
        .args(["--seconds", "4"])
        .spawn()
        .unwrap();
    let pid = child.id();
    let up = UprobeTarget::resolve(&format!("{}:handle_request", bin.display())).expect("resolve");
    // the child has exec'd the program once it maps it (a loaded machine takes its time)
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .is_ok_and(|m| m.lines().any(|l| l.ends_with(&*up.path.to_string_lossy())))
    {
        assert!(std::time::Instant::now() < deadline, "{} never mapped", bin.display());
        std::thread::sleep(Duration::from_millis(20));
    }
    let original = first_byte(pid, &up);
    assert_ne!(original, 0xcc);
    let cfg = CaptureConfig {
        tracepoints: vec![],
        uprobes: vec![up.clone()],
        target: Target::Pids(vec![pid]),
        ..CaptureConfig::default()
    };
    let mut cap =
        Capture::open(&cfg).unwrap_or_else(|e| panic!("kernel capture refused (run the tests as root): {e}"));
    cap.enable().expect("enable");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(first_byte(pid, &up), 0xcc, "the breakpoint is in the target while attached");
    let names = uprobe_names(&bin);
    assert_eq!(names.len(), 2, "entry and return probes");

    let detached = cap.detach();
    // Out of the target at once, while the uprobes are still registered: tracefs refuses to
    // remove an event in use.
    assert_eq!(first_byte(pid, &up), original);
    let mut f = std::fs::OpenOptions::new().append(true).open(uprobe_events()).unwrap();
    use std::io::Write;
    assert!(f.write_all(format!("-:{}\n", names[0]).as_bytes()).is_err(), "{} removable: not kept", names[0]);
    drop(detached);
    assert!(uprobe_names(&bin).is_empty(), "the probes are gone from tracefs");
    // What the rings hold stays readable.
    let mut events = Vec::new();
    cap.finish(&mut events);
    let entries =
        events.iter().filter_map(kernel).filter(|k| matches!(k, KernelEvent::UprobeEntry { .. })).count();
    let returns =
        events.iter().filter_map(kernel).filter(|k| matches!(k, KernelEvent::UprobeReturn { .. })).count();
    assert!(entries > 10 && returns + 1 >= entries, "{entries} entries, {returns} returns");
    assert_eq!(cap.stats().lost(), 0);
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn generic_tracepoint_decoding() {
    // syscalls:sys_enter_clock_nanosleep has no typed decoder: every field comes from its
    // format file. (glibc's nanosleep() is clock_nanosleep(CLOCK_REALTIME, 0, ...).)
    let dir = tempfile::tempdir().unwrap();
    let bin = weft_testkit::compile_c("examples/kernel/workload.c", dir.path());
    let out = dir.path().join("spans.json");
    let cfg = CaptureConfig {
        tracepoints: vec!["syscalls:sys_enter_clock_nanosleep".into()],
        ..CaptureConfig::default()
    };
    let argv = vec![bin.display().to_string(), out.display().to_string()];
    let (events, _cap, _pid) = run_captured(&argv, cfg);
    let sleeps: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Tracepoint(t) if &*t.name == "syscalls:sys_enter_clock_nanosleep" => Some(t),
            _ => None,
        })
        .collect();
    // 4 in the sleep phase, 1 in the pipe writer thread.
    assert_eq!(sleeps.len(), 5, "{sleeps:?}");
    assert!(sleeps.iter().all(|t| t.fields.get("rqtp").and_then(|v| v.as_i64()).is_some_and(|p| p != 0)));
    assert!(sleeps.iter().all(|t| t.fields.get("which_clock").and_then(|v| v.as_i64()) == Some(0)));
    assert!(
        sleeps
            .iter()
            .all(|t| t.fields.get("__syscall_nr").and_then(|v| v.as_i64())
                == syscall_number("clock_nanosleep"))
    );
}

#[test]
fn bad_configurations_are_clear_errors() {
    let e = Capture::open(&CaptureConfig {
        tracepoints: vec!["nosuchsys:nosuchevent".into()],
        ..CaptureConfig::default()
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("no tracepoint nosuchsys:nosuchevent"), "{e}");
    let e = Capture::open(&CaptureConfig {
        tracepoints: vec!["sched_switch".into()],
        ..CaptureConfig::default()
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("SYSTEM:EVENT"), "{e}");
    let e = UprobeTarget::resolve("/bin/sh:no_such_function_xyz").unwrap_err().to_string();
    assert!(e.contains("no function"), "{e}");
}

/// The cgroup v2 hierarchy's mount point (`/sys/fs/cgroup` on pure v2 systems,
/// `/sys/fs/cgroup/unified` on hybrid ones).
fn cgroup2_root() -> std::path::PathBuf {
    let mounts = std::fs::read_to_string("/proc/self/mounts").expect("/proc/self/mounts");
    mounts
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(2) == Some(&"cgroup2")).then(|| std::path::PathBuf::from(f[1]))
        })
        .expect("no cgroup2 hierarchy mounted (the kernel capture by cgroup needs one)")
}

#[test]
fn captures_the_tasks_of_a_cgroup_only() {
    let dir = tempfile::tempdir().unwrap();
    let bin = weft_testkit::compile_c("examples/kernel/workload.c", dir.path());
    let out = dir.path().join("spans.json");
    let cg = cgroup2_root().join(format!("weft-test-{}", std::process::id()));
    std::fs::create_dir(&cg).unwrap_or_else(|e| panic!("create {}: {e}", cg.display()));
    // The workload joins the cgroup while stopped before exec; the test process stays outside.
    let argv = vec![bin.display().to_string(), out.display().to_string()];
    let mut child = StoppedChild::spawn(&argv).expect("fork");
    std::fs::write(cg.join("cgroup.procs"), child.pid.to_string())
        .expect("move the workload into the cgroup");
    let cfg = CaptureConfig { target: Target::Cgroup(cg.clone()), ..CaptureConfig::default() };
    let mut cap = Capture::open(&cfg).unwrap_or_else(|e| panic!("kernel capture refused: {e}"));
    cap.enable().expect("enable");
    child.release().expect("release");
    let mut events = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().is_none() {
        assert!(Instant::now() < deadline, "workload did not finish in 60 s");
        cap.poll(Duration::from_millis(50), &mut events).expect("poll");
        // Syscalls of this (untraced) process while the capture runs.
        let _ = std::fs::metadata("/proc/self/status");
    }
    assert_eq!(child.try_wait(), Some(0), "workload failed");
    cap.finish(&mut events);
    let _ = std::fs::remove_dir(&cg);
    let stats = cap.stats();
    assert_eq!(stats.lost(), 0, "records lost: {stats:?}");
    let pid = child.pid;
    let getppid = syscall_number("getppid").unwrap();
    let calls = events
        .iter()
        .filter_map(kernel)
        .filter(|k| matches!(k, KernelEvent::SyscallEnter { nr, pid: p, .. } if *nr == getppid && *p == pid))
        .count();
    assert_eq!(calls, 1000, "the workload's getppid calls, all of them");
    // Only tasks of the cgroup: the workload's threads, never this test process.
    let me = std::process::id();
    let mut pids: Vec<u32> = events
        .iter()
        .filter_map(kernel)
        .filter_map(|k| match k {
            KernelEvent::SyscallEnter { pid, .. } | KernelEvent::SyscallExit { pid, .. } => Some(*pid),
            _ => None,
        })
        .collect();
    pids.sort_unstable();
    pids.dedup();
    assert_eq!(pids, vec![pid], "syscalls of tasks outside the cgroup (this test is {me})");
    // Scheduler switches are kept only when the workload is on one side.
    assert!(
        events
            .iter()
            .filter_map(kernel)
            .any(|k| matches!(k, KernelEvent::SchedSwitch { next_tid, .. } if *next_tid == pid))
    );
    assert!(events.iter().filter_map(kernel).all(|k| match k {
        KernelEvent::SchedSwitch { prev_pid, next_pid, .. } => *prev_pid == pid || *next_pid == pid,
        _ => true,
    }));
}

/// Intel PT on this machine: where the kernel has no `intel_pt` PMU (this test machine is an
/// AMD EPYC), opening it is a typed error that names the CPU and points to the software
/// backend; where it has one, the PMU's type number is read.
#[test]
fn intel_pt_is_detected_or_refused_clearly() {
    use weft_sources::perf::pt::{IntelPtPmu, NoIntelPt, PMU_DEVICES};
    let dir = std::path::Path::new(PMU_DEVICES).join("intel_pt");
    match IntelPtPmu::open() {
        Ok(pmu) => {
            assert!(dir.exists());
            assert!(pmu.pmu_type > 0, "{pmu:?}");
        }
        Err(e @ NoIntelPt::Absent { .. }) => {
            assert!(!dir.exists());
            let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap();
            let model = cpuinfo
                .lines()
                .find_map(|l| l.strip_prefix("model name"))
                .unwrap()
                .trim_start_matches([' ', '\t', ':']);
            let flag = cpuinfo.split_whitespace().any(|w| w == "intel_pt");
            let why = if flag {
                format!(
                    "the CPU has the intel_pt flag but the kernel has no {} (CONFIG_PERF_EVENTS_INTEL_PT?)",
                    dir.display()
                )
            } else {
                format!("no intel_pt CPU flag, no {}", dir.display())
            };
            assert_eq!(
                e.to_string(),
                format!("this CPU has no Intel PT ({model}: {why}); use the software backend")
            );
        }
        Err(e) => panic!("{e}"),
    }
}
