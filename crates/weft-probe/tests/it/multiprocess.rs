//! An instrumented child process and this test as its agent: discovery, registry, control,
//! draining while it runs, and draining after it died.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use weft_probe::consumer::{self, FieldValue, Segment};
use weft_probe::{Op, Selector, event, tracepoint};

tracepoint!(static TICK = "mp.tick", Info, group = "mp", fields = [thread: u64, seq: u64], flags = [default_on]);
tracepoint!(static EXTRA = "mp.extra", Debug, group = "mp.late", fields = [seq: u64]);

const N: u64 = 3000;

/// The child's body (runs only when WEFT_TEST_CHILD names a directory).
#[test]
fn child_main() {
    let Some(dir) = std::env::var_os("WEFT_TEST_CHILD") else { return };
    let dir = std::path::PathBuf::from(dir);
    weft_probe::init(weft_probe::Config {
        mode: weft_probe::Mode::Shm,
        dir: Some(dir.clone()),
        rings: 8,
        ring_size: 1 << 20,
        service: Some("mp-child".into()),
        ..Default::default()
    });
    let hs: Vec<_> = (0..2u64)
        .map(|t| {
            std::thread::spawn(move || {
                for i in 0..N {
                    event!(TICK, thread = t, seq = i);
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut i = 0u64;
    while !dir.join("quit").exists() && Instant::now() < deadline {
        event!(EXTRA, seq = i);
        i += 1;
        std::thread::sleep(Duration::from_millis(1));
    }
    // die without any exit hook, like a crash
    // SAFETY: _exit ends the process immediately.
    unsafe { libc::_exit(0) };
}

#[test]
fn agent_drains_controls_and_outlives_a_child() {
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "multiprocess::child_main", "--nocapture", "--test-threads=1"])
        .env("WEFT_TEST_CHILD", d.path())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let path = loop {
        if let Some(p) = consumer::discover(d.path()).unwrap().into_iter().next() {
            break p;
        }
        assert!(Instant::now() < deadline, "the child never published a segment");
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut seg = Segment::open(&path).unwrap();
    assert_eq!(seg.pid(), child.id());
    assert_eq!(seg.service(), "mp-child");
    assert!(seg.producer_alive());
    let reg = seg.registry().unwrap();
    let tick = reg.iter().find(|t| t.name == "mp.tick").expect("mp.tick exported");
    let extra = reg.iter().find(|t| t.name == "mp.extra").expect("mp.extra exported before it ever fired");
    assert!(tick.enabled);
    assert!(!extra.enabled);
    let (tick_id, extra_id) = (tick.id, extra.id);
    let clock = seg.clock();

    let mut ticks = [Vec::new(), Vec::new()];
    let extras = std::cell::Cell::new(0u64);
    let mut tids = std::collections::HashSet::new();
    let mut pump = |seg: &mut Segment| {
        let rep = seg.drain(|r| {
            if r.tracepoint == tick_id {
                let (FieldValue::U64(t), FieldValue::U64(s)) = (r.fields[0].value, r.fields[1].value) else {
                    panic!()
                };
                ticks[t as usize].push(s);
                tids.insert(r.tid);
                assert!(clock.to_unix_ns(r.timestamp) > 1_600_000_000_000_000_000);
            } else if r.tracepoint == extra_id {
                extras.set(extras.get() + 1);
            }
        });
        assert!(rep.errors.is_empty(), "{:?}", rep.errors);
    };
    pump(&mut seg);
    // switch the disabled group on at run time through the control channel
    let (ids, seq) = seg.switch(&"group:mp.late".parse::<Selector>().unwrap(), Op::Enable).unwrap();
    assert_eq!(ids, vec![extra_id]);
    assert!(seg.wait_applied(seq, Duration::from_secs(10)), "child applied the control request");
    let deadline = Instant::now() + Duration::from_secs(30);
    while extras.get() < 20 {
        assert!(Instant::now() < deadline, "no mp.extra events after enabling");
        std::thread::sleep(Duration::from_millis(5));
        pump(&mut seg);
    }
    // kill the child (no exit hook) and drain what it left behind
    std::fs::write(d.path().join("quit"), b"").unwrap();
    let st = child.wait().unwrap();
    assert!(st.success(), "child: {st}");
    assert!(!seg.producer_alive());
    assert!(!seg.exited(), "_exit skipped the exit hook");
    pump(&mut seg);
    for (t, seqs) in ticks.iter().enumerate() {
        assert_eq!(seqs, &(0..N).collect::<Vec<_>>(), "thread {t}");
    }
    assert_eq!(tids.len(), 2);
    assert_eq!(seg.stats().dropped(), 0);
    seg.remove().unwrap();
    assert!(consumer::discover(d.path()).unwrap().is_empty());
}
