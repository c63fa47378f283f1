//! Critical path of one trace: the chain of span sections that determined its end-to-end
//! latency — shorten a section on it and the trace gets shorter.
//!
//! The rule is Jaeger UI's ("last-finishing child"), restated and made iterative so a
//! 100,000-span trace with deep chains needs no recursion:
//!
//! 1. Start at the root span with the latest end (a trace with several roots — orphans whose
//!    parent never arrived count as roots — is judged by the root that finished last), with the
//!    *current point* = that span's end.
//! 2. Among the current span's children, take the one that finishes last **at or before** the
//!    current point. If there is one, the section (child end, current point] of the current
//!    span is on the critical path (the span itself was running, not waiting on a child); move
//!    into that child with the current point = the child's end.
//! 3. If no child finishes before the current point, the section [span start, current point] is
//!    on the path; return to the parent with the current point = this span's start and repeat
//!    step 2 there (children that finished after that point are no longer eligible).
//! 4. Stop when the walk returns past the root.
//!
//! **Synchronous and asynchronous children.** An RPC server span (kind `Server`), any child of a
//! `Client` span, and spans of unspecified kind (Jaeger's assumption for everything) are
//! *synchronous*: the parent waits for them, so one that reaches outside its parent can only be
//! clock skew. Every other child — internal work, messaging (`Producer`/`Consumer`), and all the
//! spans weft weaves from simulator logs, where a host's MMIO write causes NIC work that causes
//! network hops that outlive it — is *asynchronous*: when it outlives its parent, the work it
//! caused is still part of the trace's latency. So before the walk each span gets an *effective
//! end*: its own end, extended (bottom-up) by the effective ends of its asynchronous children.
//! The walk runs on `[start, effective end]`; the sections it books on a span are cut to the
//! span's own interval, so time where a span waits for asynchronous work it handed off is on the
//! path only through the spans that do that work (gaps where none runs are on no span). For a
//! trace without asynchronous children that outlive their parents, this is exactly the rule
//! above.
//!
//! **Clock skew**: before the walk, each synchronous child's interval is clipped to its parent's
//! (recursively, from the root down): a child that starts before its parent or ends after it
//! (clocks on different hosts disagree) counts only inside the parent; a child wholly outside
//! its parent is ignored by the walk. This is Jaeger's sanitising step. Asynchronous children
//! are clipped only at their parent's start.
//!
//! **Differences from Jaeger UI**, on purpose: a child ending exactly at the current point is
//! eligible (Jaeger requires strictly before, which drops back-to-back sequential children and
//! books their time to the parent); ties between children ending at the same time go to the
//! one that started later (the shorter one, the one that really finished last); links
//! (`follows_from`, `caused_by`) are not followed: the walk uses the parent tree only.
//!
//! The result lists sections in time order; sections of one span may appear several times
//! (a parent's self time between children). [`CriticalPath::on_path_ns`] sums per span.

use std::collections::HashMap;

use weft_model::{Span, SpanId, SpanKind};

/// One section of the critical path: span `span` (an index into the input slice) was on the
/// path during `[start_ns, end_ns]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Section {
    /// Index of the span in the slice given to [`critical_path`].
    pub span: usize,
    /// Section start, ns since the epoch.
    pub start_ns: u64,
    /// Section end, ns since the epoch.
    pub end_ns: u64,
}

/// The critical path of a trace.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct CriticalPath {
    /// Sections in time order (earliest first); consecutive sections do not overlap.
    pub sections: Vec<Section>,
}

impl CriticalPath {
    /// Time each span spends on the path, ns, indexed like the input slice.
    pub fn on_path_ns(&self, spans: usize) -> Vec<u64> {
        let mut v = vec![0u64; spans];
        for s in &self.sections {
            if let Some(x) = v.get_mut(s.span) {
                *x += s.end_ns.saturating_sub(s.start_ns);
            }
        }
        v
    }
    /// Total length of the path, ns.
    pub fn total_ns(&self) -> u64 {
        self.sections.iter().map(|s| s.end_ns.saturating_sub(s.start_ns)).sum()
    }
}

/// The parent tree of a trace: parent index and children (indices) of every span. Spans whose
/// parent is absent are roots; a span id seen twice (Zipkin shared spans) resolves to its first
/// occurrence; cycles (corrupt input) are broken so every span is reachable from one root.
#[derive(Debug, Clone)]
pub struct Tree {
    /// Parent index per span.
    pub parent: Vec<Option<usize>>,
    /// Children per span, in input order.
    pub children: Vec<Vec<usize>>,
    /// Roots, in input order.
    pub roots: Vec<usize>,
}

impl Tree {
    /// Builds the tree of `spans` (one trace).
    pub fn new(spans: &[Span]) -> Tree {
        let mut first: HashMap<SpanId, usize> = HashMap::with_capacity(spans.len());
        for (i, s) in spans.iter().enumerate() {
            first.entry(s.span_id).or_insert(i);
        }
        let n = spans.len();
        let mut parent: Vec<Option<usize>> = spans
            .iter()
            .enumerate()
            .map(|(i, s)| s.parent_span_id.and_then(|p| first.get(&p).copied()).filter(|&p| p != i))
            .collect();
        // Break cycles: walk up from each span with a colour per walk; a span met twice in
        // one walk closes a cycle, so cut its parent edge.
        let mut mark = vec![usize::MAX; n];
        let mut done = vec![false; n];
        for start in 0..n {
            let mut i = start;
            loop {
                if done[i] {
                    break;
                }
                if mark[i] == start {
                    parent[i] = None;
                    break;
                }
                mark[i] = start;
                match parent[i] {
                    Some(p) => i = p,
                    None => break,
                }
            }
            let mut j = start;
            while !done[j] {
                done[j] = true;
                match parent[j] {
                    Some(p) => j = p,
                    None => break,
                }
            }
        }
        let mut children = vec![Vec::new(); n];
        let mut roots = Vec::new();
        for (i, p) in parent.iter().enumerate() {
            match p {
                Some(p) => children[*p].push(i),
                None => roots.push(i),
            }
        }
        Tree { parent, children, roots }
    }
}

/// Computes the critical path of one trace (see the module docs for the rule).
pub fn critical_path(spans: &[Span]) -> CriticalPath {
    let tree = Tree::new(spans);
    critical_path_with_tree(spans, &tree)
}

/// Whether `child` runs synchronously inside `parent` (see the module docs).
pub fn synchronous(parent: &Span, child: &Span) -> bool {
    matches!(child.kind, SpanKind::Server | SpanKind::Unspecified) || parent.kind == SpanKind::Client
}

/// As [`critical_path`], with a tree the caller already built.
pub fn critical_path_with_tree(spans: &[Span], tree: &Tree) -> CriticalPath {
    let n = spans.len();
    let own_end = |i: usize| spans[i].end_ns.max(spans[i].start_ns);
    // Effective ends, bottom-up: reverse pre-order visits children before their parents.
    let mut order = Vec::with_capacity(n);
    let mut stack: Vec<usize> = tree.roots.clone();
    while let Some(i) = stack.pop() {
        order.push(i);
        stack.extend(&tree.children[i]);
    }
    let mut eff: Vec<u64> = (0..n).map(own_end).collect();
    for &i in order.iter().rev() {
        if let Some(p) = tree.parent[i]
            && !synchronous(&spans[p], &spans[i])
        {
            eff[p] = eff[p].max(eff[i]);
        }
    }
    let Some(&root) = tree.roots.iter().max_by_key(|&&r| (eff[r], std::cmp::Reverse(r))) else {
        return CriticalPath::default();
    };
    // Clipped intervals, top-down (None: the span lies wholly outside its parent).
    let mut clip: Vec<Option<(u64, u64)>> = vec![None; n];
    clip[root] = Some((spans[root].start_ns, eff[root]));
    let mut stack = vec![root];
    while let Some(i) = stack.pop() {
        let Some((ps, pe)) = clip[i] else { continue };
        for &c in &tree.children[i] {
            let (cs, ce) = (spans[c].start_ns, eff[c]);
            let bound = if synchronous(&spans[i], &spans[c]) { pe.min(own_end(i)) } else { pe };
            clip[c] = if ce < ps || cs > bound { None } else { Some((cs.max(ps), ce.min(bound))) };
            stack.push(c);
        }
    }
    // A section of span `i` over [a, b], cut to the span's own (clipped) interval.
    let own = |i: usize, a: u64, b: u64| -> Option<Section> {
        let (lo, hi) = clip[i]?;
        let (a, b) = (a.max(lo), b.min(hi.min(own_end(i))));
        (a <= b).then_some(Section { span: i, start_ns: a, end_ns: b })
    };
    // Eligible children per span sorted by (end, start) descending, with a cursor: as the
    // current point only moves backwards within a span, each child is passed over once.
    let mut sorted: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut cursor = vec![0usize; n];
    let mut sections = Vec::new();
    // (span, current point)
    let mut cur = root;
    let mut point = clip[root].map(|c| c.1).unwrap_or(0);
    let mut prepared = vec![false; n];
    while let Some((start, _)) = clip[cur] {
        if !std::mem::replace(&mut prepared[cur], true) {
            let mut v: Vec<usize> =
                tree.children[cur].iter().copied().filter(|&c| clip[c].is_some()).collect();
            v.sort_by_key(|&c| {
                let (s, e) = clip[c].unwrap_or((0, 0));
                std::cmp::Reverse((e, s))
            });
            sorted[cur] = v;
        }
        // Last-finishing child ending at or before `point`.
        let list = &sorted[cur];
        let mut k = cursor[cur];
        while k < list.len() && clip[list[k]].is_some_and(|(_, e)| e > point) {
            k += 1;
        }
        cursor[cur] = k;
        if let Some(&child) = list.get(k) {
            cursor[cur] = k + 1;
            let (_, ce) = clip[child].unwrap_or((0, 0));
            if ce < point
                && let Some(sec) = own(cur, ce, point).filter(|s| s.start_ns < s.end_ns)
            {
                sections.push(sec);
            }
            cur = child;
            point = ce;
        } else {
            if let Some(sec) = own(cur, start, point).filter(|s| s.start_ns < s.end_ns || sections.is_empty())
            {
                sections.push(sec);
            }
            match tree.parent[cur] {
                Some(p) => {
                    point = start;
                    cur = p;
                }
                None => break,
            }
        }
    }
    sections.reverse();
    CriticalPath { sections }
}

#[cfg(test)]
mod tests {
    use weft_model::TraceId;

    use super::*;

    fn span(id: u64, parent: Option<u64>, start: u64, end: u64) -> Span {
        Span {
            trace_id: TraceId::from_u128(7),
            span_id: SpanId::from_u64(id),
            parent_span_id: parent.map(SpanId::from_u64),
            name: format!("s{id}").into(),
            start_ns: start,
            end_ns: end,
            ..Span::default()
        }
    }

    /// (span id, start, end) of each section.
    fn path(spans: &[Span]) -> Vec<(u64, u64, u64)> {
        critical_path(spans)
            .sections
            .iter()
            .map(|s| (u64::from_be_bytes(spans[s.span].span_id.0), s.start_ns, s.end_ns))
            .collect()
    }

    #[test]
    fn single_span_is_its_own_path() {
        assert_eq!(path(&[span(1, None, 10, 50)]), vec![(1, 10, 50)]);
        assert_eq!(critical_path(&[]), CriticalPath::default());
    }

    #[test]
    fn sequential_children_and_parent_self_time() {
        // root 0..100; a 10..40, b 40..90 (back to back).
        let t = [span(1, None, 0, 100), span(2, Some(1), 10, 40), span(3, Some(1), 40, 90)];
        assert_eq!(path(&t), vec![(1, 0, 10), (2, 10, 40), (3, 40, 90), (1, 90, 100)]);
        let cp = critical_path(&t);
        assert_eq!(cp.total_ns(), 100);
        assert_eq!(cp.on_path_ns(3), vec![20, 30, 50]);
    }

    #[test]
    fn overlapping_children_take_the_last_finishing() {
        // a 10..60 and b 20..80 overlap; c 5..30 finishes before b starts? no: b starts at 20,
        // c ends at 30 > 20, so c is not eligible once we are at b's start; a ends 60 > 20 too.
        // Path: root 80..100, b 20..80, then back at root with point 20: children ending ≤ 20:
        // none (a ends 60, c ends 30) → root 0..20.
        let t = [
            span(1, None, 0, 100),
            span(2, Some(1), 10, 60),
            span(3, Some(1), 20, 80),
            span(4, Some(1), 5, 30),
        ];
        assert_eq!(path(&t), vec![(1, 0, 20), (3, 20, 80), (1, 80, 100)]);
    }

    #[test]
    fn walks_into_grandchildren_and_back_out() {
        // root 0..100 → a 10..90 → (x 20..50, y 55..85); root also has z 0..5.
        let t = [
            span(1, None, 0, 100),
            span(2, Some(1), 10, 90),
            span(5, Some(2), 20, 50),
            span(6, Some(2), 55, 85),
            span(7, Some(1), 0, 5),
        ];
        assert_eq!(
            path(&t),
            vec![
                (7, 0, 5),
                (1, 5, 10),
                (2, 10, 20),
                (5, 20, 50),
                (2, 50, 55),
                (6, 55, 85),
                (2, 85, 90),
                (1, 90, 100)
            ]
        );
        assert_eq!(critical_path(&t).total_ns(), 100);
    }

    #[test]
    fn clock_skewed_children_are_clipped_to_their_parent() {
        // Child on a host whose clock runs ahead: 30..130 under a parent 0..100 → counts as
        // 30..100. Another child 150..170 lies wholly outside → ignored. Grandchild 120..125
        // lies outside its clipped parent → ignored.
        let t = [
            span(1, None, 0, 100),
            span(2, Some(1), 30, 130),
            span(3, Some(1), 150, 170),
            span(4, Some(2), 120, 125),
        ];
        assert_eq!(path(&t), vec![(1, 0, 30), (2, 30, 100)]);
        // A child starting before its parent (clock behind): -20..40 under 10..100 → 10..40.
        let t = [span(1, None, 10, 100), span(2, Some(1), 0, 40)];
        assert_eq!(path(&t), vec![(2, 10, 40), (1, 40, 100)]);
    }

    #[test]
    fn asynchronous_children_that_outlive_their_parent_extend_the_path() {
        // A woven request: host MMIO 0..10 causes NIC work 8..30, which causes a DMA 12..20 and
        // a network hop 25..60 that outlives it; all Internal. The path runs host → NIC (with
        // its DMA) → network, to the hop's end.
        let internal = |mut s: Span| {
            s.kind = weft_model::SpanKind::Internal;
            s
        };
        let t = [
            internal(span(1, None, 0, 10)),
            internal(span(2, Some(1), 8, 30)),
            internal(span(3, Some(2), 25, 60)),
            internal(span(4, Some(2), 12, 20)),
        ];
        assert_eq!(path(&t), vec![(1, 0, 8), (2, 8, 12), (4, 12, 20), (2, 20, 25), (3, 25, 60)]);
        assert_eq!(critical_path(&t).total_ns(), 60);
        // The same shape as RPC spans (client → server) is clock skew: clipped, as before.
        let mut rpc = t.clone();
        rpc[0].kind = weft_model::SpanKind::Client;
        rpc[1].kind = weft_model::SpanKind::Server;
        assert_eq!(path(&rpc), vec![(1, 0, 8), (2, 8, 10)]);
    }

    #[test]
    fn several_roots_use_the_latest_finishing_and_ignore_missing_parents() {
        // Span 9's parent (99) never arrived: it is a root; the latest-ending root wins.
        let t = [span(1, None, 0, 50), span(9, Some(99), 10, 70), span(10, Some(9), 20, 60)];
        assert_eq!(path(&t), vec![(9, 10, 20), (10, 20, 60), (9, 60, 70)]);
    }

    #[test]
    fn cycles_and_zero_length_spans_terminate() {
        // 1 → 2 → 1 (corrupt parents): broken, still one path.
        let t = [span(1, Some(2), 0, 10), span(2, Some(1), 2, 8)];
        let p = path(&t);
        assert!(!p.is_empty());
        let t = [span(1, None, 5, 5), span(2, Some(1), 5, 5)];
        assert_eq!(path(&t), vec![(2, 5, 5)]);
    }

    #[test]
    fn deep_chain_needs_no_recursion() {
        let n = 200_000u64;
        let t: Vec<Span> =
            (1..=n).map(|i| span(i, if i == 1 { None } else { Some(i - 1) }, i, 10 * n - i)).collect();
        let cp = critical_path(&t);
        assert_eq!(cp.total_ns(), 10 * n - 1 - 1);
        assert_eq!(cp.sections.len() as u64, 2 * n - 1);
    }

    #[test]
    fn path_sections_are_ordered_and_disjoint() {
        let mut t = vec![span(1, None, 0, 1000)];
        let mut x = 12345u64;
        for i in 2..300u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let p = 1 + (x >> 33) % (i - 1);
            let s = (x >> 20) % 900;
            t.push(span(i, Some(p), s, s + (x >> 40) % 200));
        }
        let cp = critical_path(&t);
        for w in cp.sections.windows(2) {
            assert!(w[0].end_ns <= w[1].start_ns, "{w:?}");
        }
        assert!(cp.total_ns() <= 1000);
    }
}

#[cfg(test)]
mod props {
    use proptest::prelude::*;
    use weft_model::{Span, SpanId, TraceId};

    use super::critical_path;

    /// Random trees (each span's parent is an earlier span, or none), random — possibly
    /// skewed — intervals.
    fn trees() -> impl Strategy<Value = Vec<Span>> {
        prop::collection::vec((any::<u16>(), 0u64..2_000, 0u64..600, any::<bool>()), 1..120).prop_map(|v| {
            v.into_iter()
                .enumerate()
                .map(|(i, (p, start, len, orphan))| Span {
                    trace_id: TraceId::from_u128(1),
                    span_id: SpanId::from_u64(i as u64 + 1),
                    parent_span_id: if i == 0 {
                        None
                    } else if orphan && p % 7 == 0 {
                        Some(SpanId::from_u64(10_000 + p as u64))
                    } else {
                        Some(SpanId::from_u64(p as u64 % i as u64 + 1))
                    },
                    start_ns: start,
                    end_ns: start + len,
                    ..Span::default()
                })
                .collect()
        })
    }

    proptest! {
        #[test]
        fn sections_are_ordered_disjoint_and_inside_the_root(t in trees()) {
            let cp = critical_path(&t);
            prop_assert!(!cp.sections.is_empty());
            for w in cp.sections.windows(2) {
                prop_assert!(w[0].end_ns <= w[1].start_ns);
            }
            let last = cp.sections[cp.sections.len() - 1];
            prop_assert!(cp.sections.iter().all(|s| s.start_ns <= s.end_ns && s.span < t.len()));
            // The path ends where the latest-ending root ends, and never exceeds its span.
            let roots_end = t.iter().filter(|s| s.parent_span_id.is_none_or(|p| !t.iter().any(|x| x.span_id == p))).map(|s| s.end_ns).max();
            prop_assert_eq!(Some(last.end_ns), roots_end);
            // Disjoint sections inside [earliest start, end]: the path is never longer.
            let min_start = t.iter().map(|s| s.start_ns).min().unwrap_or(0);
            prop_assert!(cp.total_ns() <= last.end_ns - min_start);
        }
    }
}
