use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use weft_probe::consumer::{FieldName, FieldValue, RecordKind};
use weft_probe::{Selector, event, tracepoint};

tracepoint!(static MT = "rectest.mt", Debug, group = "rectest", fields = [thread: u64, seq: u64]);
tracepoint!(static FULL = "rectest.full", Debug, group = "rectest", fields = [seq: u64, pad: str]);
tracepoint!(static STRESS = "rectest.stress", Debug, group = "rectest", fields = [thread: u64, seq: u64, s: str]);
tracepoint!(static OFF = "rectest.off", Debug, group = "rectest", fields = [x: u64]);
tracepoint!(static TYPES = "rectest.types", Debug, group = "rectest",
    fields = [i: i64, u: u64, f: f64, b: bool, s: str, raw: bytes]);

fn u(v: &FieldValue<'_>) -> u64 {
    match v {
        FieldValue::U64(x) => *x,
        other => panic!("expected u64, got {other:?}"),
    }
}

#[test]
fn disabled_tracepoint_records_nothing_and_skips_arguments() {
    let _g = crate::lock();
    let mut seg = crate::own_segment();
    crate::drain_all(&mut seg);
    let mut evaluated = 0;
    for _ in 0..100 {
        event!(
            OFF,
            x = {
                evaluated += 1;
                1u64
            }
        );
    }
    assert_eq!(evaluated, 0, "arguments of a disabled tracepoint must not be evaluated");
    let id = OFF.id();
    let mut n = 0;
    seg.drain(|r| n += (r.tracepoint == id) as usize);
    assert_eq!(n, 0);
}

#[test]
fn typed_fields_round_trip() {
    let _g = crate::lock();
    let mut seg = crate::own_segment();
    crate::drain_all(&mut seg);
    weft_probe::enable(&"rectest.types".parse::<Selector>().unwrap());
    let before = weft_probe::clock::realtime_ns();
    event!(TYPES, i = -5i64, u = 7u32, f = 2.5f64, b = true, s = "héllo", raw = &b"\x00\x01\x02"[..]);
    let after = weft_probe::clock::realtime_ns();
    let clock = seg.clock();
    let id = TYPES.id();
    let mut got = Vec::new();
    seg.drain(|r| {
        if r.tracepoint == id {
            got.push((
                r.kind,
                r.tid,
                clock.to_unix_ns(r.timestamp),
                r.fields
                    .iter()
                    .map(|f| (f.name, f.value))
                    .collect::<Vec<_>>()
                    .iter()
                    .map(|(n, v)| format!("{n:?}={v:?}"))
                    .collect::<Vec<_>>(),
            ));
        }
    });
    assert_eq!(got.len(), 1);
    let (kind, tid, ts, fields) = &got[0];
    assert_eq!(*kind, RecordKind::Event);
    assert_eq!(*tid, weft_probe::tid());
    assert!(
        *ts + 1_000_000 >= before && *ts <= after + 1_000_000,
        "timestamp {ts} outside [{before}, {after}]"
    );
    assert_eq!(
        fields,
        &vec![
            "Index(0)=I64(-5)".to_string(),
            "Index(1)=U64(7)".into(),
            "Index(2)=F64(2.5)".into(),
            "Index(3)=Bool(true)".into(),
            "Index(4)=Str(\"héllo\")".into(),
            "Index(5)=Bytes([0, 1, 2])".into()
        ]
    );
    weft_probe::disable(&"rectest.types".parse::<Selector>().unwrap());
}

#[test]
fn many_threads_record_into_their_own_rings() {
    let _g = crate::lock();
    let mut seg = crate::own_segment();
    crate::drain_all(&mut seg);
    weft_probe::enable(&"rectest.mt".parse::<Selector>().unwrap());
    const THREADS: u64 = 4;
    const N: u64 = 5000;
    let tids: Vec<u32> = (0..THREADS)
        .map(|t| {
            std::thread::spawn(move || {
                for i in 0..N {
                    event!(MT, thread = t, seq = i);
                }
                weft_probe::tid()
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    let id = MT.id();
    let mut per: HashMap<u64, Vec<(u32, u64)>> = HashMap::new();
    let rep = seg.drain(|r| {
        if r.tracepoint == id {
            assert_eq!(r.fields[0].name, FieldName::Index(0));
            per.entry(u(&r.fields[0].value)).or_default().push((r.tid, u(&r.fields[1].value)));
        }
    });
    assert!(rep.errors.is_empty(), "{:?}", rep.errors);
    assert_eq!(per.len(), THREADS as usize);
    for (t, recs) in &per {
        assert_eq!(recs.len() as u64, N, "thread {t}");
        let seqs: Vec<u64> = recs.iter().map(|r| r.1).collect();
        assert_eq!(seqs, (0..N).collect::<Vec<_>>(), "thread {t} out of order");
        let tid = recs[0].0;
        assert!(recs.iter().all(|r| r.0 == tid), "one tid per thread");
        assert_eq!(tid, tids[*t as usize]);
    }
    // the threads exited: their rings are released (reusable) but were drained
    let st = seg.stats();
    assert!(
        st.rings.iter().filter(|r| r.state == weft_probe::layout::RING_RELEASED).count() >= THREADS as usize
    );
    weft_probe::disable(&"rectest.mt".parse::<Selector>().unwrap());
}

#[test]
fn full_ring_drops_and_counts() {
    let _g = crate::lock();
    let mut seg = crate::own_segment();
    crate::drain_all(&mut seg);
    weft_probe::enable(&"rectest.full".parse::<Selector>().unwrap());
    let drops_before = seg.stats().dropped();
    const N: u64 = 40_000; // ~40000 × 96 bytes ≫ 1 MiB
    std::thread::spawn(|| {
        for i in 0..N {
            event!(FULL, seq = i, pad = "0123456789abcdef");
        }
    })
    .join()
    .unwrap();
    let id = FULL.id();
    let mut seqs = Vec::new();
    seg.drain(|r| {
        if r.tracepoint == id {
            seqs.push(u(&r.fields[0].value));
        }
    });
    let dropped = seg.stats().dropped() - drops_before;
    assert!(dropped > 0, "a 1 MiB ring cannot hold {N} records");
    assert_eq!(seqs.len() as u64 + dropped, N, "every record is either kept or counted");
    // drop-newest: what was kept is the prefix
    assert_eq!(seqs, (0..seqs.len() as u64).collect::<Vec<_>>());
    weft_probe::disable(&"rectest.full".parse::<Selector>().unwrap());
}

#[test]
fn consumer_drains_while_producers_write() {
    let _g = crate::lock();
    let mut seg = crate::own_segment();
    crate::drain_all(&mut seg);
    weft_probe::enable(&"rectest.stress".parse::<Selector>().unwrap());
    const THREADS: u64 = 3;
    const N: u64 = 150_000;
    let done = Arc::new(AtomicBool::new(false));
    let drops_before = seg.stats().dropped();
    let producers: Vec<_> = (0..THREADS)
        .map(|t| {
            std::thread::spawn(move || {
                let s = "x".repeat((t as usize * 7) % 23);
                for i in 0..N {
                    event!(STRESS, thread = t, seq = i, s = s.as_str());
                }
            })
        })
        .collect();
    let id = STRESS.id();
    let mut last: HashMap<u64, i64> = HashMap::new();
    let mut got = 0u64;
    let mut check = |r: &weft_probe::consumer::Record<'_>| {
        if r.tracepoint != id {
            return;
        }
        let t = u(&r.fields[0].value);
        let i = u(&r.fields[1].value) as i64;
        let FieldValue::Str(s) = r.fields[2].value else { panic!("field 2 is not a str") };
        assert_eq!(s.len(), (t as usize * 7) % 23, "payload intact");
        let prev = last.entry(t).or_insert(-1);
        assert!(i > *prev, "thread {t}: seq {i} after {prev}");
        *prev = i;
        got += 1;
    };
    loop {
        let finished = producers.iter().all(|h| h.is_finished());
        let rep = seg.drain(&mut check);
        assert!(rep.errors.is_empty(), "{:?}", rep.errors);
        if finished && done.load(Ordering::Relaxed) {
            break;
        }
        if finished {
            done.store(true, Ordering::Relaxed); // one more pass after the producers ended
        }
    }
    for h in producers {
        h.join().unwrap();
    }
    let dropped = seg.stats().dropped() - drops_before;
    assert_eq!(got + dropped, THREADS * N, "got {got}, dropped {dropped}");
    assert!(got > 0);
    weft_probe::disable(&"rectest.stress".parse::<Selector>().unwrap());
}
