//! Read-and-reset ([`Probe::take`]) while a thread makes system calls: the windows' counts add
//! up to a one-shot probe's count and to the number of calls — nothing lost or counted twice
//! across the generation switches — and every fd is closed afterwards.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};

use weft_bpf::{Agg, Cmp, Filter, KeyPart, Partial, Probe, Query, Source, State, Value};

use crate::{bpf_fds, serial};

const CALLS: u64 = 300_000;

fn count(p: &Partial, key: &[KeyPart]) -> u64 {
    match p.groups.get(key).map(|s| &s[0]) {
        Some(State::Count(n)) => *n,
        None => 0,
        other => panic!("{other:?}"),
    }
}

#[test]
fn windows_taken_while_hits_arrive_sum_to_the_one_shot_count() {
    let _g = serial();
    let fds = bpf_fds();
    let (tid_tx, tid_rx) = mpsc::channel();
    let go = Arc::new(AtomicBool::new(false));
    let go_rx = go.clone();
    let worker = std::thread::spawn(move || {
        // SAFETY: gettid(2) has no arguments and cannot fail.
        tid_tx.send(unsafe { libc::gettid() } as i64).unwrap();
        while !go_rx.load(Ordering::Acquire) {
            std::hint::spin_loop();
        }
        for _ in 0..CALLS {
            // SAFETY: getppid(2) cannot fail.
            unsafe { libc::getppid() };
        }
    });
    let tid = tid_rx.recv().unwrap();
    let q = Query::new(Source::Tracepoint("raw_syscalls:sys_enter".into()))
        .filter(Filter::cmp(Value::Tid, Cmp::Eq, tid).and(Filter::cmp(
            Value::Field("id".into()),
            Cmp::Eq,
            libc::SYS_getppid,
        )))
        .agg(Agg::Count)
        .agg(Agg::Hist(Value::Field("id".into())));
    let one_shot = Probe::start(&q).unwrap();
    let mut unkeyed = Probe::start(&q).unwrap();
    let mut keyed = Probe::start(&q.clone().key(Value::Tid)).unwrap();
    go.store(true, Ordering::Release);
    let (mut sum_u, mut sum_k, mut windows, mut split) = (0, 0, 0, 0);
    let key = [KeyPart::Int(tid)];
    loop {
        let done = worker.is_finished();
        let (u, k) = (unkeyed.take().unwrap(), keyed.take().unwrap());
        let (nu, nk) = (count(&u, &[]), count(&k, &key));
        assert!(u.drops == 0 && k.drops == 0);
        if nu > 0 && nu < CALLS {
            split += 1;
        }
        sum_u += nu;
        sum_k += nk;
        windows += 1;
        if done {
            break;
        }
    }
    worker.join().unwrap();
    let total = one_shot.read().unwrap();
    assert_eq!(count(&total, &[]), CALLS, "one-shot probe");
    assert_eq!(sum_u, CALLS, "unkeyed windows over {windows} takes");
    assert_eq!(sum_k, CALLS, "keyed windows over {windows} takes");
    assert!(split >= 2, "the calls spread over at least two windows ({split} of {windows})");
    // Taken windows are reset: nothing left, and a read after the takes sees nothing either.
    assert_eq!(count(&unkeyed.take().unwrap(), &[]), 0);
    assert!(keyed.read().unwrap().groups.is_empty());
    drop((one_shot, unkeyed, keyed));
    assert_eq!(bpf_fds(), fds, "every map, program and perf fd closed");
}
