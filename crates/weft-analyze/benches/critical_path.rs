//! Critical path and comparison on a 100,000-span trace (the UI computes both per request).
//!
//! Peer, measured in the same run: a straightforward recursive implementation of the same
//! last-finishing-child rule as Jaeger UI writes it (children re-filtered and re-sorted at each
//! step), so the figure shows what the iterative walk with per-span cursors buys.

use std::collections::HashMap;
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use weft_analyze::compare::{CompareOptions, compare};
use weft_analyze::critical_path::critical_path;
use weft_model::{Span, SpanId, TraceId};

/// A batch-job-shaped trace: root → shards (overlapping) → steps → 4 calls each.
fn trace(n: usize, seed: u64) -> Vec<Span> {
    let mut x = seed | 1;
    let mut rnd = move |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m.max(1)
    };
    let mut spans = Vec::with_capacity(n);
    let mk = |spans: &mut Vec<Span>, parent: Option<usize>, name: &str, start: u64, end: u64| {
        let i = spans.len();
        spans.push(Span {
            trace_id: TraceId::from_u128(9),
            span_id: SpanId::from_u64(i as u64 + 1),
            parent_span_id: parent.map(|p| SpanId::from_u64(p as u64 + 1)),
            name: name.into(),
            start_ns: start,
            end_ns: end,
            ..Span::default()
        });
        i
    };
    let root = mk(&mut spans, None, "job", 0, 0);
    let mut t = 1_000;
    while spans.len() < n {
        let sh = mk(&mut spans, Some(root), "shard", t, t);
        let mut u = t + 100;
        for _ in 0..200 {
            if spans.len() >= n {
                break;
            }
            let st = mk(&mut spans, Some(sh), "step", u, u);
            let mut v = u + 10;
            for _ in 0..4 {
                if spans.len() >= n {
                    break;
                }
                let d = 1_000 + rnd(50_000);
                mk(&mut spans, Some(st), "call", v, v + d);
                v += d + rnd(3_000);
            }
            spans[st].end_ns = v + 5;
            u = v + 20;
        }
        spans[sh].end_ns = u;
        t += (u - t) / 3;
    }
    spans[root].end_ns = spans.iter().map(|s| s.end_ns).max().unwrap_or(0) + 10;
    spans
}

/// The peer: recursive, re-sorting children at every visit.
fn recursive(spans: &[Span]) -> u64 {
    let mut by_id = HashMap::new();
    for (i, s) in spans.iter().enumerate() {
        by_id.insert(s.span_id, i);
    }
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); spans.len()];
    let mut root = 0;
    for (i, s) in spans.iter().enumerate() {
        match s.parent_span_id.and_then(|p| by_id.get(&p)) {
            Some(&p) => children[p].push(i),
            None => root = i,
        }
    }
    fn walk(spans: &[Span], children: &[Vec<usize>], cur: usize, point: u64, out: &mut u64) {
        let mut kids: Vec<usize> =
            children[cur].iter().copied().filter(|&c| spans[c].end_ns <= point).collect();
        kids.sort_by_key(|&c| std::cmp::Reverse(spans[c].end_ns));
        if let Some(&c) = kids.first() {
            *out += point - spans[c].end_ns;
            walk(spans, children, c, spans[c].end_ns, out);
            walk(spans, children, cur, spans[c].start_ns, out);
        } else {
            *out += point.saturating_sub(spans[cur].start_ns);
        }
    }
    let mut total = 0;
    walk(spans, &children, root, spans[root].end_ns, &mut total);
    total
}

fn bench(c: &mut Criterion) {
    let t = trace(100_000, 7);
    let u = trace(100_000, 8);
    assert_eq!(critical_path(&t).total_ns(), recursive(&t), "peer computes the same length");
    let mut g = c.benchmark_group("critical_path_100k");
    g.sample_size(10);
    g.bench_function("weft_iterative", |b| b.iter(|| black_box(critical_path(black_box(&t))).sections.len()));
    g.bench_function("peer_recursive_resorting", |b| b.iter(|| black_box(recursive(black_box(&t)))));
    g.finish();
    let mut g = c.benchmark_group("compare_100k");
    g.sample_size(10);
    g.bench_function("weft_compare", |b| {
        b.iter(|| black_box(compare(&t, &u, &CompareOptions::default())).nodes.len())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
