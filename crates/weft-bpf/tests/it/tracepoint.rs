//! A kernel tracepoint (`raw_syscalls:sys_enter`) filtered by thread and syscall id: weft-bpf
//! and bpftrace watch the same writes of known sizes and must agree with each other and with
//! what the workload did.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};

use weft_bpf::{Agg, Cmp, Const, Filter, KeyPart, Probe, Query, Source, State, Value};

use crate::{bpftrace, buckets, log2_bucket, serial};

/// The sizes written (0 included: bucket `[0]`), each `REPEAT` times.
const SIZES: [usize; 9] = [0, 1, 3, 8, 100, 1000, 4095, 4096, 70000];
const REPEAT: usize = 7;

/// `getppid` calls after the writes.
const GETPPID: usize = 11;

/// A thread that reports its tid, waits for the go, writes `SIZES` to /dev/null and calls
/// `getppid` `GETPPID` times. It waits spinning: a blocking wait would be a system call made
/// while one tool is attached and the other not yet.
fn workload() -> (i64, Arc<AtomicBool>, std::thread::JoinHandle<()>) {
    let (tid_tx, tid_rx) = mpsc::channel();
    let go = Arc::new(AtomicBool::new(false));
    let go_rx = go.clone();
    let h = std::thread::Builder::new().name("weft-bpf-work".into()).spawn(move || {
        // SAFETY: gettid(2) has no arguments and cannot fail.
        tid_tx.send(unsafe { libc::gettid() } as i64).unwrap();
        while !go_rx.load(Ordering::Acquire) {
            std::hint::spin_loop();
        }
        let mut null = std::fs::OpenOptions::new().write(true).open("/dev/null").unwrap();
        let buf = vec![7u8; 70000];
        for _ in 0..REPEAT {
            for s in SIZES {
                null.write_all(&buf[..s]).unwrap_or(());
                // write_all skips empty writes: make the zero-byte one by hand.
                if s == 0 {
                    // SAFETY: a zero-length write of a valid buffer to an open fd.
                    unsafe { libc::write(std::os::fd::AsRawFd::as_raw_fd(&null), buf.as_ptr().cast(), 0) };
                }
            }
        }
        for _ in 0..GETPPID {
            // SAFETY: getppid(2) cannot fail.
            unsafe { libc::getppid() };
        }
    });
    (tid_rx.recv().unwrap(), go, h.unwrap())
}

#[test]
fn sys_enter_filtered_count_sum_and_histograms_match_bpftrace() {
    let _g = serial();
    let (tid, go, h) = workload();
    let arg = || Value::Field("args[2]".into());
    let q = Query::new(Source::Tracepoint("raw_syscalls:sys_enter".into()))
        .filter(Filter::cmp(Value::Tid, Cmp::Eq, tid).and(Filter::cmp(
            Value::Field("id".into()),
            Cmp::Eq,
            libc::SYS_write,
        )))
        .agg(Agg::Count)
        .agg(Agg::Sum(arg()))
        .agg(Agg::Hist(arg()))
        .agg(Agg::Lhist { value: arg(), min: 0, max: 5000, step: 500 })
        .agg(Agg::Min(arg()))
        .agg(Agg::Max(arg()));
    let probe = Probe::start(&q).unwrap();
    // Per syscall id, for the same thread: a keyed (per-CPU hash) probe.
    let by_id = Query::new(Source::Tracepoint("raw_syscalls:sys_enter".into()))
        .filter(Filter::cmp(Value::Tid, Cmp::Eq, tid))
        .key(Value::Field("id".into()))
        .agg(Agg::Count);
    let by_id = Probe::start(&by_id).unwrap();
    // Filtered and keyed by comm (the thread's name) and tid.
    let by_comm = Query::new(Source::Tracepoint("raw_syscalls:sys_enter".into()))
        .filter(Filter::Cmp(Value::Comm, Cmp::Eq, Const::Str("weft-bpf-work".into())).and(Filter::cmp(
            Value::Field("id".into()),
            Cmp::Eq,
            libc::SYS_write,
        )))
        .key(Value::Comm)
        .key(Value::Tid)
        .agg(Agg::Count);
    let by_comm = Probe::start(&by_comm).unwrap();
    let bt = bpftrace(&format!(
        "tracepoint:raw_syscalls:sys_enter /tid == {tid} && args->id == {w}/ {{ @c = count(); \
         @s = sum(args->args[2]); @h = hist(args->args[2]); @l = lhist(args->args[2], 0, 5000, 500); \
         @mn = min(args->args[2]); @mx = max(args->args[2]); }} \
         tracepoint:raw_syscalls:sys_enter /tid == {tid}/ {{ @k[args->id] = count(); }}",
        w = libc::SYS_write
    ));
    go.store(true, Ordering::Release);
    h.join().unwrap();
    let got = probe.read().unwrap();
    let got_by_id = by_id.read().unwrap();
    let got_by_comm = by_comm.read().unwrap();
    let bt = bt.finish();
    probe.detach();
    by_id.detach();

    let n = (SIZES.len() * REPEAT) as u64;
    let sum: i64 = SIZES.iter().map(|s| (*s * REPEAT) as i64).sum();
    let mut hist = BTreeMap::new();
    let mut lhist = BTreeMap::new();
    for s in SIZES {
        *hist.entry(log2_bucket(s as i64)).or_insert(0) += REPEAT as u64;
        *lhist.entry(if s >= 5000 { 11 } else { 1 + s as i32 / 500 }).or_insert(0) += REPEAT as u64;
    }
    let expected = vec![
        State::Count(n),
        State::Sum(sum),
        State::Buckets(hist),
        State::Buckets(lhist),
        State::Min(Some(0)),
        State::Max(Some(70000)),
    ];
    assert_eq!(got.groups.get(&Vec::new()), Some(&expected), "weft-bpf");
    assert_eq!(got.drops, 0);
    let from_bt = vec![
        State::Count(bt["@c"].as_u64().unwrap()),
        State::Sum(bt["@s"].as_i64().unwrap()),
        buckets(&bt["@h"], None),
        buckets(&bt["@l"], Some((0, 500, 12))),
        State::Min(bt["@mn"].as_i64()),
        State::Max(bt["@mx"].as_i64()),
    ];
    assert_eq!(from_bt, expected, "bpftrace");

    // Per syscall id: the same counts as bpftrace's @k[args->id], writes and getppid included.
    let bt_k: BTreeMap<Vec<KeyPart>, Vec<State>> = bt["@k"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (vec![KeyPart::Int(k.parse().unwrap())], vec![State::Count(v.as_u64().unwrap())]))
        .collect();
    assert_eq!(got_by_id.groups, bt_k);
    assert_eq!(got_by_id.groups[&vec![KeyPart::Int(libc::SYS_write)]], vec![State::Count(n)]);
    assert_eq!(got_by_id.groups[&vec![KeyPart::Int(libc::SYS_getppid)]], vec![State::Count(GETPPID as u64)]);
    let key = vec![KeyPart::Str("weft-bpf-work".into()), KeyPart::Int(tid)];
    assert_eq!(got_by_comm.groups, BTreeMap::from([(key, vec![State::Count(n)])]));
}
