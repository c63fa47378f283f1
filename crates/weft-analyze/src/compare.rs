//! Structural comparison of two traces (the UI's "compare" view).
//!
//! Spans are matched by their **path**: the sequence of `(service, span name)` pairs from the
//! root down to the span. All spans of one trace on the same path are aggregated (count, total
//! and max duration, earliest start and latest end relative to the trace start, errors), so ten
//! database calls under one handler form one node whose count and time can be compared with the
//! other trace's. The result is the union of both trees in depth-first order (children ordered
//! by their earliest start in either trace), each node classified as
//!
//! * `added` — only in trace B, `removed` — only in trace A;
//! * `slower` / `faster` — in both, and the total time changed by more than
//!   [`CompareOptions::min_ratio`] *and* [`CompareOptions::min_delta_ns`];
//! * `count` — same time within the thresholds but a different number of spans;
//! * `same` — otherwise.
//!
//! Roots are matched the same way (a root's path is just itself), so comparing two requests of
//! one endpoint lines up their trees even when span ids, hosts and timings differ.

use std::collections::HashMap;

use weft_model::{Span, StatusCode};

use crate::critical_path::Tree;

/// Thresholds for calling a node slower or faster.
#[derive(Debug, Clone, Copy)]
pub struct CompareOptions {
    /// Relative change of total time needed (0.1 = 10 %).
    pub min_ratio: f64,
    /// Absolute change of total time needed, ns.
    pub min_delta_ns: u64,
}

impl Default for CompareOptions {
    fn default() -> Self {
        CompareOptions { min_ratio: 0.1, min_delta_ns: 1_000 }
    }
}

/// Aggregate of one trace's spans on one path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Side {
    /// Spans on the path.
    pub count: u64,
    /// Sum of their durations, ns.
    pub total_ns: u64,
    /// Longest of them, ns.
    pub max_ns: u64,
    /// Earliest start, ns after the trace start.
    pub start_off_ns: u64,
    /// Latest end, ns after the trace start.
    pub end_off_ns: u64,
    /// Spans with error status.
    pub errors: u64,
    /// Index (in the input slice) of the first span on the path.
    pub first: usize,
}

/// Classification of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// Only in B.
    Added,
    /// Only in A.
    Removed,
    /// More total time in B.
    Slower,
    /// Less total time in B.
    Faster,
    /// Same time, different span count.
    Count,
    /// No significant change.
    Same,
}

/// One node of the merged tree.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Node {
    /// Depth (roots 0).
    pub depth: usize,
    /// Service of the spans.
    pub service: String,
    /// Span name.
    pub name: String,
    /// Trace A's aggregate (None: not in A).
    pub a: Option<Side>,
    /// Trace B's aggregate (None: not in B).
    pub b: Option<Side>,
    /// Classification.
    pub change: Change,
    /// B total − A total, ns (missing side counts as 0).
    pub delta_ns: i64,
}

/// The comparison.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Comparison {
    /// Nodes in depth-first order.
    pub nodes: Vec<Node>,
    /// Trace A's duration (earliest start to latest end), ns.
    pub a_duration_ns: u64,
    /// Trace B's duration, ns.
    pub b_duration_ns: u64,
    /// Spans in A and B.
    pub a_spans: usize,
    /// Spans in B.
    pub b_spans: usize,
}

#[derive(Default)]
struct TrieNode {
    key: (String, String),
    depth: usize,
    a: Option<Side>,
    b: Option<Side>,
    children: Vec<usize>,
    index: HashMap<(String, String), usize>,
}

fn bounds(spans: &[Span]) -> (u64, u64) {
    let start = spans.iter().map(|s| s.start_ns).min().unwrap_or(0);
    let end = spans.iter().map(|s| s.end_ns.max(s.start_ns)).max().unwrap_or(start);
    (start, end)
}

fn insert(trie: &mut Vec<TrieNode>, spans: &[Span], which_b: bool) {
    let tree = Tree::new(spans);
    let (t0, _) = bounds(spans);
    // (span index, trie parent)
    let mut stack: Vec<(usize, usize)> = tree.roots.iter().rev().map(|&r| (r, 0)).collect();
    while let Some((i, parent)) = stack.pop() {
        let s = &spans[i];
        let key = (s.service_name().to_owned(), s.name.to_string());
        let depth = trie[parent].depth + usize::from(parent != 0);
        let node = match trie[parent].index.get(&key) {
            Some(&n) => n,
            None => {
                let n = trie.len();
                trie.push(TrieNode { key: key.clone(), depth, ..TrieNode::default() });
                trie[parent].index.insert(key, n);
                trie[parent].children.push(n);
                n
            }
        };
        let dur = s.duration_ns();
        let so = s.start_ns.saturating_sub(t0);
        let eo = s.end_ns.max(s.start_ns).saturating_sub(t0);
        let err = u64::from(s.status.code == StatusCode::Error);
        let side = if which_b { &mut trie[node].b } else { &mut trie[node].a };
        match side {
            Some(x) => {
                x.count += 1;
                x.total_ns = x.total_ns.saturating_add(dur);
                x.max_ns = x.max_ns.max(dur);
                x.start_off_ns = x.start_off_ns.min(so);
                x.end_off_ns = x.end_off_ns.max(eo);
                x.errors += err;
            }
            None => {
                *side = Some(Side {
                    count: 1,
                    total_ns: dur,
                    max_ns: dur,
                    start_off_ns: so,
                    end_off_ns: eo,
                    errors: err,
                    first: i,
                })
            }
        }
        for &c in tree.children[i].iter().rev() {
            stack.push((c, node));
        }
    }
}

fn classify(a: Option<Side>, b: Option<Side>, o: &CompareOptions) -> Change {
    match (a, b) {
        (None, _) => Change::Added,
        (_, None) => Change::Removed,
        (Some(a), Some(b)) => {
            let d = b.total_ns.abs_diff(a.total_ns);
            let base = a.total_ns.max(1) as f64;
            if d >= o.min_delta_ns && d as f64 / base > o.min_ratio {
                if b.total_ns > a.total_ns { Change::Slower } else { Change::Faster }
            } else if a.count != b.count {
                Change::Count
            } else {
                Change::Same
            }
        }
    }
}

/// Compares trace `a` with trace `b`.
pub fn compare(a: &[Span], b: &[Span], opts: &CompareOptions) -> Comparison {
    // trie[0] is a virtual root above the traces' roots.
    let mut trie = vec![TrieNode::default()];
    insert(&mut trie, a, false);
    insert(&mut trie, b, true);
    let mut nodes = Vec::with_capacity(trie.len());
    let first_start = |n: &TrieNode| {
        let x = n.a.map(|s| s.start_off_ns).unwrap_or(u64::MAX);
        let y = n.b.map(|s| s.start_off_ns).unwrap_or(u64::MAX);
        x.min(y)
    };
    let mut stack: Vec<usize> = Vec::new();
    let push_children = |stack: &mut Vec<usize>, trie: &[TrieNode], n: usize| {
        let mut ch = trie[n].children.clone();
        ch.sort_by_key(|&c| (first_start(&trie[c]), c));
        stack.extend(ch.into_iter().rev());
    };
    push_children(&mut stack, &trie, 0);
    while let Some(n) = stack.pop() {
        let t = &trie[n];
        let delta = t.b.map(|s| s.total_ns as i64).unwrap_or(0) - t.a.map(|s| s.total_ns as i64).unwrap_or(0);
        nodes.push(Node {
            depth: t.depth,
            service: t.key.0.clone(),
            name: t.key.1.clone(),
            a: t.a,
            b: t.b,
            change: classify(t.a, t.b, opts),
            delta_ns: delta,
        });
        push_children(&mut stack, &trie, n);
    }
    let (a0, a1) = bounds(a);
    let (b0, b1) = bounds(b);
    Comparison { nodes, a_duration_ns: a1 - a0, b_duration_ns: b1 - b0, a_spans: a.len(), b_spans: b.len() }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use weft_model::{Resource, SpanId, TraceId};

    use super::*;

    fn span(id: u64, parent: Option<u64>, svc: &str, name: &str, start: u64, end: u64) -> Span {
        Span {
            trace_id: TraceId::from_u128(1),
            span_id: SpanId::from_u64(id),
            parent_span_id: parent.map(SpanId::from_u64),
            name: name.into(),
            start_ns: start,
            end_ns: end,
            resource: Arc::new(Resource::service(svc)),
            ..Span::default()
        }
    }

    fn summary(c: &Comparison) -> Vec<(usize, String, Change, u64, u64)> {
        c.nodes
            .iter()
            .map(|n| {
                (
                    n.depth,
                    format!("{}:{}", n.service, n.name),
                    n.change,
                    n.a.map(|s| s.count).unwrap_or(0),
                    n.b.map(|s| s.count).unwrap_or(0),
                )
            })
            .collect()
    }

    #[test]
    fn matches_by_path_and_classifies() {
        let a = vec![
            span(1, None, "web", "GET /", 1000, 2000),
            span(2, Some(1), "db", "query", 1100, 1200),
            span(3, Some(1), "db", "query", 1300, 1400),
            span(4, Some(1), "cache", "get", 1050, 1060),
            span(5, Some(1), "auth", "check", 1500, 1900),
        ];
        // B: ids and absolute times differ; one more query, cache gone, auth much slower,
        // new payment span.
        let b = vec![
            span(11, None, "web", "GET /", 9000, 12000),
            span(12, Some(11), "db", "query", 9100, 9200),
            span(13, Some(11), "db", "query", 9300, 9400),
            span(14, Some(11), "db", "query", 9500, 9600),
            span(15, Some(11), "auth", "check", 9700, 11500),
            span(16, Some(15), "pay", "charge", 9800, 11000),
        ];
        let opts = CompareOptions { min_ratio: 0.1, min_delta_ns: 50 };
        let c = compare(&a, &b, &opts);
        assert_eq!(
            summary(&c),
            vec![
                (0, "web:GET /".into(), Change::Slower, 1, 1),
                (1, "cache:get".into(), Change::Removed, 1, 0),
                (1, "db:query".into(), Change::Slower, 2, 3),
                (1, "auth:check".into(), Change::Slower, 1, 1),
                (2, "pay:charge".into(), Change::Added, 0, 1),
            ]
        );
        assert_eq!(c.a_duration_ns, 1000);
        assert_eq!(c.b_duration_ns, 3000);
        let db = &c.nodes[2];
        assert_eq!(db.delta_ns, 100);
        assert_eq!(db.a.map(|s| (s.start_off_ns, s.end_off_ns)), Some((100, 400)));
        // Same trace against itself: all same.
        let c = compare(&a, &a, &opts);
        assert!(c.nodes.iter().all(|n| n.change == Change::Same && n.delta_ns == 0));
    }

    #[test]
    fn count_change_without_time_change() {
        let a = vec![span(1, None, "s", "r", 0, 100), span(2, Some(1), "s", "x", 0, 10)];
        let b = vec![
            span(1, None, "s", "r", 0, 100),
            span(2, Some(1), "s", "x", 0, 5),
            span(3, Some(1), "s", "x", 5, 10),
        ];
        let c = compare(&a, &b, &CompareOptions::default());
        assert_eq!(c.nodes[1].change, Change::Count);
        assert_eq!(c.nodes[0].change, Change::Same);
        let c = compare(&a, &b, &CompareOptions::default());
        assert_eq!(c.nodes.len(), 2);
    }

    #[test]
    fn faster_and_empty() {
        let a = vec![span(1, None, "s", "r", 0, 100_000)];
        let b = vec![span(1, None, "s", "r", 0, 10_000)];
        assert_eq!(compare(&a, &b, &CompareOptions::default()).nodes[0].change, Change::Faster);
        let c = compare(&[], &b, &CompareOptions::default());
        assert_eq!(c.nodes[0].change, Change::Added);
        assert_eq!(c.a_duration_ns, 0);
    }
}
