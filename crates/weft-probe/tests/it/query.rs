//! Live queries at the probe level: plans installed on tracepoints, per-thread partials,
//! checked plans, bounded tables; mergeable states and their serialized form.

use proptest::prelude::*;
use std::collections::BTreeMap;
use weft_probe::agg::{AggKind, KeyValue, Linear, Output, Partial, State, log2_bucket};
use weft_probe::query::{self, AggSpec, CmpOp, Const, Ctx, Filter, Operand, Plan, PlanError};
use weft_probe::{Selector, event, tracepoint};

tracepoint!(static W = "qtest.write", Debug, group = "qtest", fields = [fd: u64, len: u64, path: str, lat: f64]);
tracepoint!(static MT = "qtest.mt", Debug, group = "qtest", fields = [thread: u64]);
tracepoint!(static FULL = "qtest.full", Debug, group = "qtest", fields = [k: u64]);
tracepoint!(static UNTYPED = "qtest.untyped", Debug, group = "qtest", fields = [v]);
tracepoint!(static RACE = "qtest.race", Debug, group = "qtest", fields = [thread: u64]);
tracepoint!(static PF = "qtest.pf", Debug, group = "qtest", fields = [a: u64, b: u64]);
tracepoint!(static UP = "qtest.up", Debug, group = "qtest", fields = [client: str, n: u64]);
tracepoint!(static DOWN = "qtest.down", Debug, group = "qtest", fields = [bytes: u64]);
tracepoint!(static GRID = "qtest.grid", Debug, group = "qtest", fields = [x: u64, y: i64, v: u64]);

fn field(n: &str) -> Operand {
    Operand::Field(n.into())
}

fn agg(kind: AggKind, input: Option<&str>) -> AggSpec {
    AggSpec { kind, input: input.map(field) }
}

fn plan(tp: &str, filter: Filter, keys: Vec<Operand>, aggs: Vec<AggSpec>) -> Plan {
    Plan { tracepoint: tp.into(), filter, keys, aggs, capacity: 1024, carry: Vec::new() }
}

fn s(x: &str) -> KeyValue {
    KeyValue::Str(x.as_bytes().to_vec())
}

#[test]
fn filter_group_and_aggregate_without_recording() {
    let _g = crate::lock();
    let mut seg = crate::own_segment();
    crate::drain_all(&mut seg);
    W.id();
    let filter = Filter::And(
        Box::new(Filter::Cmp(field("len"), CmpOp::Ge, Const::Uint(100))),
        Box::new(Filter::Not(Box::new(Filter::Cmp(field("fd"), CmpOp::Eq, Const::Int(2))))),
    );
    let p = plan(
        "qtest.write",
        filter,
        vec![field("path")],
        vec![
            agg(AggKind::Count, None),
            agg(AggKind::Sum, Some("len")),
            agg(AggKind::Min, Some("len")),
            agg(AggKind::Max, Some("len")),
            agg(AggKind::Avg, Some("len")),
            agg(AggKind::Hist, Some("len")),
            agg(AggKind::Quantile(0.5), Some("lat")),
        ],
    );
    let q = query::install(&p).unwrap();
    assert!(!W.enabled() && W.active(), "a query activates the tracepoint without enabling recording");
    for (fd, len, path, lat) in [
        (1u64, 100u64, "/a", 1.0f64),
        (1, 300, "/a", 2.0),
        (2, 500, "/a", 3.0),
        (1, 50, "/b", 4.0),
        (3, 1024, "/b", 5.0),
    ] {
        event!(W, fd = fd, len = len, path = path, lat = lat);
    }
    let part = query::collect(q).unwrap();
    assert_eq!(part.events, 3);
    assert_eq!(part.drops.total(), 0);
    let a = &part.groups[&vec![s("/a")]];
    assert_eq!(a[0], State::Count(2));
    assert_eq!(a[1], State::Sum(400));
    assert_eq!(a[2], State::Min(Some(100)));
    assert_eq!(a[3], State::Max(Some(300)));
    assert_eq!(a[4].finish(&AggKind::Avg), Output::Float(200.0));
    assert_eq!(a[5], State::Buckets(BTreeMap::from([(log2_bucket(100), 1), (log2_bucket(300), 1)])));
    let b = &part.groups[&vec![s("/b")]];
    assert_eq!(b[0], State::Count(1));
    assert_eq!(
        b[6].finish(&AggKind::Quantile(0.5)),
        Output::Float(weft_probe::agg::sketch_value(weft_probe::agg::sketch_bucket(5.0)))
    );
    assert_eq!(part.groups.len(), 2);

    // collect resets; nothing was recorded in the ring
    assert_eq!(query::collect(q).unwrap().events, 0);
    let id = W.id();
    let mut n = 0;
    seg.drain(|r| n += (r.tracepoint == id) as usize);
    assert_eq!(n, 0, "a query alone ships no raw events");

    // enabled too: recorded and aggregated
    weft_probe::enable(&"qtest.write".parse::<Selector>().unwrap());
    event!(W, fd = 1u64, len = 200u64, path = "/c", lat = 1.0f64);
    seg.drain(|r| n += (r.tracepoint == id) as usize);
    assert_eq!(n, 1);
    assert_eq!(query::collect(q).unwrap().events, 1);
    weft_probe::disable(&"qtest.write".parse::<Selector>().unwrap());

    assert!(query::detach(q));
    assert!(!query::detach(q));
    assert!(!W.active(), "detaching the last query clears the query bit");
    assert!(query::collect(q).is_none());
}

#[test]
fn context_keys_and_filters() {
    let _g = crate::lock();
    W.id();
    let pid = std::process::id() as u64;
    let p = plan(
        "qtest.write",
        Filter::Or(
            Box::new(Filter::Cmp(Operand::Ctx(Ctx::Pid), CmpOp::Eq, Const::Uint(pid))),
            Box::new(Filter::Cmp(field("path"), CmpOp::Eq, Const::Str("never".into()))),
        ),
        vec![Operand::Ctx(Ctx::Comm), Operand::Ctx(Ctx::Tid)],
        vec![agg(AggKind::Count, None)],
    );
    let q = query::install(&p).unwrap();
    let name = "qtest-ctx".to_string();
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(|| {
            for _ in 0..3 {
                event!(W, fd = 1u64, len = 1u64, path = "/x", lat = 0.0f64);
            }
            weft_probe::tid()
        })
        .unwrap()
        .join()
        .map(|tid| {
            let part = query::collect(q).unwrap();
            let key = vec![s(&name), KeyValue::Uint(tid as u64)];
            assert_eq!(part.groups.get(&key), Some(&vec![State::Count(3)]), "{part:?}");
        })
        .unwrap();
    query::detach(q);
}

/// The two halves of a happened-before join in one process: the upstream plan packs `client`
/// into the request's baggage, the downstream plan groups by it; a request whose baggage
/// lacks it does not join, and no baggage appears while no carrying plan is installed.
#[test]
fn happened_before_join_through_baggage() {
    let _g = crate::lock();
    UP.id();
    DOWN.id();
    // nothing installed: the upstream event adds nothing to the context
    {
        let _b = weft_probe::baggage::enter(None);
        event!(UP, client = "alice", n = 1u64);
        assert_eq!(weft_probe::baggage::header(), None);
    }
    let key = "qtest.up.client".to_string();
    let up = Plan {
        carry: vec![(key.clone(), field("client"))],
        ..plan(
            "qtest.up",
            Filter::Cmp(field("n"), CmpOp::Gt, Const::Uint(0)),
            vec![],
            vec![agg(AggKind::Count, None)],
        )
    };
    let down = plan(
        "qtest.down",
        Filter::True,
        vec![Operand::Baggage(key.clone())],
        vec![agg(AggKind::Sum, Some("bytes")), agg(AggKind::Count, None)],
    );
    let qu = query::install(&up).unwrap();
    let qd = query::install(&down).unwrap();
    let request = |client: &str, n: u64, bytes: &[u64]| {
        // the upstream process: the request arrives without baggage and leaves with it
        let header = {
            let _b = weft_probe::baggage::enter(None);
            event!(UP, client = client, n = n);
            weft_probe::baggage::header()
        };
        // the downstream process (another thread): the baggage arrives with the request
        let header = header.clone();
        let bytes = bytes.to_vec();
        std::thread::spawn(move || {
            let _b = weft_probe::baggage::enter(header.as_deref());
            for b in bytes {
                event!(DOWN, bytes = b);
            }
        })
        .join()
        .unwrap();
    };
    request("alice", 1, &[100, 200]);
    request("bob, the second", 1, &[7]);
    request("alice", 1, &[50]);
    request("carol", 0, &[1000]); // filtered upstream: not carried, so not joined
    let part = query::collect(qd).unwrap();
    let got: BTreeMap<Vec<KeyValue>, Vec<State>> = part.groups;
    let want: BTreeMap<Vec<KeyValue>, Vec<State>> = [
        (vec![s("alice")], vec![State::Sum(350), State::Count(3)]),
        (vec![s("bob, the second")], vec![State::Sum(7), State::Count(1)]),
    ]
    .into_iter()
    .collect();
    assert_eq!(got, want);
    assert_eq!(query::collect(qu).unwrap().events, 3, "the upstream plan counts what it carried");
    query::detach(qu);
    query::detach(qd);
    // detached: nothing is carried any more
    let _b = weft_probe::baggage::enter(None);
    event!(UP, client = "alice", n = 1u64);
    assert_eq!(weft_probe::baggage::header(), None);
}

/// A query whose filter is one comparison of a `u64` field with a small constant sets the
/// tracepoint's pre-filter (what `event!` checks inline); a second query on the tracepoint,
/// a constant too large, or enabling the tracepoint for recording turns it off.
#[test]
fn one_small_comparison_becomes_the_tracepoints_prefilter() {
    let _g = crate::lock();
    PF.id();
    let count = || vec![agg(AggKind::Count, None)];
    let q = query::install(&plan(
        "qtest.pf",
        Filter::Cmp(field("a"), CmpOp::Ge, Const::Uint(10)),
        vec![],
        count(),
    ))
    .unwrap();
    assert!(PF.has_prefilter());
    assert!(!PF.prefilter_pass(&(3u64, 1u64)) && PF.prefilter_pass(&(10u64, 1u64)));
    for a in 0..20u64 {
        event!(PF, a = a, b = 1u64);
    }
    assert_eq!(query::collect(q).unwrap().events, 10);
    let q2 = query::install(&plan(
        "qtest.pf",
        Filter::Cmp(field("a"), CmpOp::Lt, Const::Uint(3)),
        vec![],
        count(),
    ))
    .unwrap();
    assert!(!PF.has_prefilter(), "two queries: either may want the event");
    for a in 0..20u64 {
        event!(PF, a = a, b = 1u64);
    }
    assert_eq!(query::collect(q).unwrap().events, 10);
    assert_eq!(query::collect(q2).unwrap().events, 3);
    query::detach(q2);
    assert!(PF.has_prefilter());
    weft_probe::enable(&"qtest.pf".parse().unwrap());
    assert!(PF.prefilter_pass(&(3u64, 1u64)), "an enabled tracepoint records every event");
    weft_probe::disable(&"qtest.pf".parse().unwrap());
    query::detach(q);
    assert!(!PF.has_prefilter());
    let big = Filter::Cmp(field("a"), CmpOp::Ge, Const::Uint(1 << 40));
    let q3 = query::install(&plan("qtest.pf", big, vec![], count())).unwrap();
    assert!(!PF.has_prefilter(), "the constant does not fit the pre-filter word");
    query::detach(q3);
}

#[test]
fn plans_are_checked_at_install() {
    let _g = crate::lock();
    W.id();
    let missing = plan("qtest.write", Filter::True, vec![field("size")], vec![agg(AggKind::Count, None)]);
    let e = query::install(&missing).unwrap_err();
    assert!(matches!(&e, PlanError::NoField { field, .. } if field == "size"), "{e}");
    assert!(e.to_string().contains("fd, len, path, lat"), "{e}");

    let wrong = plan(
        "qtest.write",
        Filter::Cmp(field("path"), CmpOp::Gt, Const::Int(3)),
        vec![],
        vec![agg(AggKind::Count, None)],
    );
    let e = query::install(&wrong).unwrap_err();
    assert!(matches!(&e, PlanError::WrongType { field, ty, .. } if field == "path" && ty == "str"), "{e}");

    let sum_str = plan("qtest.write", Filter::True, vec![], vec![agg(AggKind::Sum, Some("path"))]);
    assert!(matches!(query::install(&sum_str), Err(PlanError::WrongType { field, .. }) if field == "path"));
    let sum_f64 = plan("qtest.write", Filter::True, vec![], vec![agg(AggKind::Sum, Some("lat"))]);
    assert!(matches!(query::install(&sum_f64), Err(PlanError::WrongType { field, .. }) if field == "lat"));

    let nope = plan("qtest.nope", Filter::True, vec![], vec![agg(AggKind::Count, None)]);
    assert_eq!(query::install(&nope).unwrap_err(), PlanError::NoTracepoint("qtest.nope".into()));

    let keys = vec![field("path"), field("path"), field("path")];
    let big = plan("qtest.write", Filter::True, keys, vec![agg(AggKind::Count, None)]);
    assert!(matches!(query::install(&big), Err(PlanError::TooLarge(_))));
    assert!(query::installed().is_empty());
}

#[test]
fn untyped_fields_are_checked_per_event() {
    let _g = crate::lock();
    UNTYPED.id();
    let q = query::install(&plan("qtest.untyped", Filter::True, vec![], vec![agg(AggKind::Sum, Some("v"))]))
        .unwrap();
    event!(UNTYPED, v = 5u64);
    event!(UNTYPED, v = "five");
    let part = query::collect(q).unwrap();
    assert_eq!(part.events, 1);
    assert_eq!(part.drops.type_mismatch, 1);
    assert_eq!(part.groups[&vec![]], vec![State::Sum(5)]);
    query::detach(q);
}

#[test]
fn full_tables_drop_and_count() {
    let _g = crate::lock();
    FULL.id();
    let mut p = plan("qtest.full", Filter::True, vec![field("k")], vec![agg(AggKind::Count, None)]);
    p.capacity = 16;
    let q = query::install(&p).unwrap();
    for k in 0..100u64 {
        event!(FULL, k = k);
    }
    let part = query::collect(q).unwrap();
    assert_eq!(part.groups.len(), 14, "7/8 of 16 entries");
    assert_eq!(part.events, 14);
    assert_eq!(part.drops.table_full, 86);
    query::detach(q);
}

#[test]
fn scalar_keys_in_a_crowded_table_keep_their_groups() {
    let _g = crate::lock();
    GRID.id();
    let mut p = plan(
        "qtest.grid",
        Filter::True,
        vec![field("x"), field("y")],
        vec![
            agg(AggKind::Count, None),
            agg(AggKind::Sum, Some("v")),
            agg(AggKind::Min, Some("v")),
            agg(AggKind::Max, Some("v")),
            agg(AggKind::Avg, Some("v")),
        ],
    );
    p.capacity = 16;
    let q = query::install(&p).unwrap();
    // 14 groups fill 7/8 of 16 entries (collisions are certain); negative `y` takes the
    // other key tag
    let group = |g: u64| (g * 1_000_003, if g.is_multiple_of(2) { -(g as i64) } else { g as i64 });
    for round in 0..3u64 {
        for g in 0..14u64 {
            let (x, y) = group(g);
            event!(GRID, x = x, y = y, v = g * 10 + round);
        }
    }
    // a 15th group finds the table full; the 14 keep counting
    event!(GRID, x = 99u64, y = 99i64, v = 1u64);
    let (x0, y0) = group(0);
    event!(GRID, x = x0, y = y0, v = 7u64);
    let part = query::collect(q).unwrap();
    assert_eq!(part.drops.table_full, 1);
    assert_eq!(part.events, 43);
    assert_eq!(part.groups.len(), 14);
    for g in 0..14u64 {
        let (x, y) = group(g);
        let key = vec![KeyValue::Uint(x), if y < 0 { KeyValue::Int(y) } else { KeyValue::Uint(y as u64) }];
        let base = (g * 10) as i128;
        let (n, sum, min) = if g == 0 { (4, 3 * base + 3 + 7, 0) } else { (3, 3 * base + 3, base) };
        let max = if g == 0 { 7 } else { base + 2 };
        assert_eq!(
            part.groups[&key],
            vec![
                State::Count(n),
                State::Sum(sum),
                State::Min(Some(min)),
                State::Max(Some(max)),
                State::Avg { sum, count: n },
            ],
            "group {g}"
        );
    }
    query::detach(q);
}

#[test]
fn text_in_a_numeric_key_field_groups_as_text() {
    let _g = crate::lock();
    FULL.id();
    let q =
        query::install(&plan("qtest.full", Filter::True, vec![field("k")], vec![agg(AggKind::Count, None)]))
            .unwrap();
    event!(FULL, k = 3u64);
    event!(FULL, k = "short");
    event!(FULL, k = "longer than one key word of eight bytes");
    event!(FULL, k = "short");
    let part = query::collect(q).unwrap();
    assert_eq!(part.events, 4);
    assert_eq!(part.groups[&vec![KeyValue::Uint(3)]], vec![State::Count(1)]);
    assert_eq!(part.groups[&vec![s("short")]], vec![State::Count(2)]);
    assert_eq!(part.groups[&vec![s("longer than one key word of eight bytes")]], vec![State::Count(1)]);
    query::detach(q);
}

#[test]
fn threads_merge_and_exited_threads_are_collected_once() {
    let _g = crate::lock();
    MT.id();
    let p = plan(
        "qtest.mt",
        Filter::Cmp(field("thread"), CmpOp::Lt, Const::Uint(100)),
        vec![field("thread")],
        vec![agg(AggKind::Count, None)],
    );
    let q = query::install(&p).unwrap();
    let deferred0 = query::refresh_deferred();
    let handles: Vec<_> = (0..4u64)
        .map(|t| {
            std::thread::spawn(move || {
                for _ in 0..1000 {
                    event!(MT, thread = t);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let part = query::collect(q).unwrap();
    // threads joining the query at the same moment hold each other up in nothing: every event
    // after the install is counted, the first ones included (no install or detach runs meanwhile)
    assert_eq!(query::refresh_deferred() - deferred0, 0);
    assert_eq!(part.events, 4000);
    for t in 0..4u64 {
        assert_eq!(part.groups[&vec![KeyValue::Uint(t)]], vec![State::Count(1000)], "thread {t}");
    }
    let again = query::collect(q).unwrap();
    assert_eq!(again, Partial::default());
    query::detach(q);
}

#[test]
fn collecting_while_threads_record_loses_nothing_uncounted() {
    let _g = crate::lock();
    RACE.id();
    let q = query::install(&plan(
        "qtest.race",
        Filter::True,
        vec![field("thread")],
        vec![agg(AggKind::Count, None)],
    ))
    .unwrap();
    const PER: u64 = 50_000;
    let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let handles: Vec<_> = (0..4u64)
        .map(|t| {
            let done = done.clone();
            std::thread::spawn(move || {
                for _ in 0..PER {
                    event!(RACE, thread = t);
                }
                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            })
        })
        .collect();
    let deferred0 = query::refresh_deferred();
    let mut total = Partial::default();
    let mut collects = 0;
    while done.load(std::sync::atomic::Ordering::SeqCst) < 4 {
        total.merge(&query::collect(q).unwrap()).unwrap();
        collects += 1;
    }
    for h in handles {
        h.join().unwrap();
    }
    total.merge(&query::collect(q).unwrap()).unwrap();
    query::detach(q);
    let counted: u64 = total
        .groups
        .values()
        .map(|s| match s[0] {
            State::Count(n) => n,
            _ => 0,
        })
        .sum();
    assert_eq!(counted, total.events);
    assert_eq!(query::refresh_deferred() - deferred0, 0, "collecting holds no thread up");
    assert_eq!(
        total.events + total.drops.busy,
        4 * PER,
        "every event is aggregated or counted as dropped ({collects} collects, protocol asymmetric: {})",
        query::asymmetric()
    );
    assert_eq!(total.drops.table_full + total.drops.type_mismatch, 0);
}

// ---- mergeable states

fn kinds() -> Vec<AggKind> {
    vec![
        AggKind::Count,
        AggKind::Sum,
        AggKind::Min,
        AggKind::Max,
        AggKind::Avg,
        AggKind::Hist,
        AggKind::Lhist(Linear::new(-100, 1000, 50).unwrap()),
        AggKind::Quantile(0.9),
    ]
}

fn one_pass(events: &[(u8, i64)]) -> Partial {
    let ks = kinds();
    let mut p = Partial::default();
    for (k, v) in events {
        let states = p
            .groups
            .entry(vec![KeyValue::Uint(*k as u64 % 5)])
            .or_insert_with(|| ks.iter().map(|k| k.empty()).collect());
        for (s, kind) in states.iter_mut().zip(&ks) {
            s.add_int(kind, *v as i128);
        }
        p.events += 1;
    }
    p
}

fn merged(a: &Partial, b: &Partial) -> Partial {
    let mut m = a.clone();
    m.merge(b).unwrap();
    m
}

proptest! {
    #[test]
    fn merge_is_associative_and_commutative(
        a in proptest::collection::vec((any::<u8>(), any::<i64>()), 0..40),
        b in proptest::collection::vec((any::<u8>(), any::<i64>()), 0..40),
        c in proptest::collection::vec((any::<u8>(), any::<i64>()), 0..40),
    ) {
        let (pa, pb, pc) = (one_pass(&a), one_pass(&b), one_pass(&c));
        prop_assert_eq!(merged(&pa, &merged(&pb, &pc)), merged(&merged(&pa, &pb), &pc));
        prop_assert_eq!(merged(&pa, &pb), merged(&pb, &pa));
    }

    #[test]
    fn any_partition_merges_to_the_one_pass_result(
        events in proptest::collection::vec((any::<u8>(), -5000i64..5000), 0..200),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..6),
    ) {
        let mut idx: Vec<usize> = cuts.iter().map(|c| c.index(events.len() + 1)).collect();
        idx.push(0);
        idx.push(events.len());
        idx.sort_unstable();
        let mut total = Partial::default();
        for w in idx.windows(2) {
            total.merge(&one_pass(&events[w[0]..w[1]])).unwrap();
        }
        prop_assert_eq!(total, one_pass(&events));
    }

    #[test]
    fn encoding_round_trips(events in proptest::collection::vec((any::<u8>(), any::<i64>()), 0..60)) {
        let mut p = one_pass(&events);
        p.groups.insert(vec![s("k"), KeyValue::Int(-3), KeyValue::Float(2.5f64.to_bits()), KeyValue::Bool(true)], vec![State::Min(None)]);
        p.drops.table_full = 7;
        let bytes = p.encode();
        prop_assert_eq!(Partial::decode(&bytes).unwrap(), p);
    }

    #[test]
    fn decoding_garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = Partial::decode(&bytes);
        let mut framed = b"WQP1".to_vec();
        framed.extend_from_slice(&bytes);
        let _ = Partial::decode(&framed);
    }

    #[test]
    fn decoding_mutated_partials_never_panics(
        events in proptest::collection::vec((any::<u8>(), any::<i64>()), 1..30),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let good = one_pass(&events).encode();
        // a strict prefix of a valid encoding is always an error (the full decode needs its bytes)
        let n = cut.index(good.len());
        prop_assert!(Partial::decode(&good[..n]).is_err());
        let mut bytes = good;
        for (i, b) in flips {
            let i = i.index(bytes.len());
            bytes[i] ^= b;
        }
        let _ = Partial::decode(&bytes);
    }
}

#[test]
fn shapes_that_differ_do_not_merge() {
    let mut a = Partial::default();
    a.groups.insert(vec![], vec![State::Count(1)]);
    let mut b = Partial::default();
    b.groups.insert(vec![], vec![State::Sum(1)]);
    assert!(a.merge(&b).is_err());
}
