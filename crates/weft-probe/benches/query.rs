//! The probe level of live queries against its peer, measured in one run
//! (`cargo bench -p weft-probe --bench query`), in the benchmark thread's CPU time
//! (`weft_testkit::cpu::ThreadCpu`; see `benches/probe.rs` for why not wall time):
//!
//! | bench | what one iteration is |
//! |---|---|
//! | `disabled` | `event!` with two u64 fields on a tracepoint neither enabled nor queried |
//! | `enabled-no-query` (the peer) | the same `event!` on an enabled tracepoint: a ring record, no query |
//! | `filter-groupby-count` | not enabled, one query `WHERE a = 7 GROUP BY b` with `count(*)`; the event matches (16 groups) |
//! | `filter-rejects` | not enabled, one query `WHERE a = 7`; the event has `a = 8` |
//!
//! The targets (issue 16): a matching filter + group-by count within 15 ns, a rejecting
//! filter within 2 ns of `disabled` (both queries' `a = 7` is a tracepoint pre-filter). The enabled tracepoint's ring is drained between timed
//! batches (never full); the queries' tables never fill (16 groups).

use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use weft_probe::agg::AggKind;
use weft_probe::consumer::Segment;
use weft_probe::query::{self, AggSpec, CmpOp, Const, Filter, Operand, Plan};
use weft_probe::{event, tracepoint};
use weft_testkit::cpu::{ThreadCpu, thread_cpu_ns};

tracepoint!(static OFF = "qbench.off", Debug, group = "qbench", fields = [a: u64, b: u64]);
tracepoint!(static ON = "qbench.on", Debug, group = "qbench", fields = [a: u64, b: u64], flags = [default_on]);
tracepoint!(static MATCH = "qbench.match", Debug, group = "qbench", fields = [a: u64, b: u64]);
tracepoint!(static REJECT = "qbench.reject", Debug, group = "qbench", fields = [a: u64, b: u64]);

const BATCH: u64 = 10_000;

fn plan(tp: &str) -> Plan {
    Plan {
        tracepoint: tp.into(),
        filter: Filter::Cmp(Operand::Field("a".into()), CmpOp::Eq, Const::Uint(7)),
        keys: vec![Operand::Field("b".into())],
        aggs: vec![AggSpec { kind: AggKind::Count, input: None }],
        capacity: 1024,
        carry: Vec::new(),
    }
}

fn benches(c: &mut Criterion<ThreadCpu>) {
    weft_probe::init(weft_probe::Config::default());
    let mut seg = Segment::own().expect("own segment");
    for tp in [&OFF, &ON, &MATCH, &REJECT] {
        tp.id();
    }
    let matching = query::install(&plan("qbench.match")).expect("plan");
    let rejecting = query::install(&plan("qbench.reject")).expect("plan");

    let mut g = c.benchmark_group("query");
    g.bench_function("disabled", |b| b.iter(|| event!(OFF, a = black_box(7u64), b = black_box(1u64))));
    g.bench_function("enabled-no-query", |b| {
        b.iter_custom(|iters| {
            let mut total = 0u64;
            let mut left = iters;
            while left > 0 {
                let n = left.min(BATCH);
                let t = thread_cpu_ns();
                for i in 0..n {
                    event!(ON, a = black_box(7u64), b = black_box(i & 15));
                }
                total += thread_cpu_ns().saturating_sub(t);
                seg.drain(|_| {});
                left -= n;
            }
            total
        })
    });
    let mut i = 0u64;
    g.bench_function("filter-groupby-count", |b| {
        b.iter(|| {
            i = i.wrapping_add(1);
            event!(MATCH, a = black_box(7u64), b = black_box(i & 15));
        })
    });
    g.bench_function("filter-rejects", |b| {
        b.iter(|| event!(REJECT, a = black_box(8u64), b = black_box(1u64)))
    });
    g.finish();

    let m = query::collect(matching).expect("installed");
    assert!(
        m.drops.total() == 0 && m.groups.len() <= 16,
        "the matching query must aggregate without drops: {m:?}"
    );
    let r = query::collect(rejecting).expect("installed");
    assert_eq!(r.events, 0, "the rejecting filter let events through");
    query::detach(matching);
    query::detach(rejecting);
}

criterion_group! {
    name = query_benches;
    config = Criterion::default().with_measurement(ThreadCpu::default());
    targets = benches
}
criterion_main!(query_benches);
