//! Grouping requests by critical path: requests of one type (root span name) whose critical
//! paths are the same sequence of tracepoints form a group (pythia's group key: a hash of the
//! tracepoint-id sequence; sequences are compared on a hash match).
//!
//! Per group: the shared path, a representative trace (the group's first in input order), the
//! members, their response times and, per edge of the path, the latency vector across members
//! (one column per edge, member order) — what [`super::stats`] decomposes.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

use weft_model::{Span, TraceId};

use super::FxBuild;
use super::hb::{PathError, PathFinder, PathRecord, TracepointId, Tracepoints, latency_ns, response_ns};

/// Requests of one type with one critical path.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Group {
    /// The request type: the root span's name.
    pub request_type: String,
    /// The critical path shared by the members, root entry first.
    pub path: Vec<TracepointId>,
    /// The first member's trace id.
    pub representative: TraceId,
    /// The members: positions in the input.
    pub members: Vec<usize>,
    /// Response time per member, ns.
    pub response_ns: Vec<i64>,
    /// Per edge of `path` (edge `i` = `path[i]` → `path[i + 1]`): its latency per member, ns.
    pub edge_latency_ns: Vec<Vec<i64>>,
}

impl Group {
    /// Number of requests in the group.
    pub fn count(&self) -> usize {
        self.members.len()
    }
    /// The tracepoints bounding edge `i`.
    pub fn edge(&self, i: usize) -> Option<(TracepointId, TracepointId)> {
        Some((*self.path.get(i)?, *self.path.get(i + 1)?))
    }
}

/// Traces grouped by critical path.
#[derive(Debug, Clone, Default)]
pub struct Grouping {
    /// The tracepoint names the groups' ids refer to.
    pub tracepoints: Tracepoints,
    /// The groups, in order of their first member.
    pub groups: Vec<Group>,
    /// Traces without a critical path, with the reason.
    pub rejected: Vec<PathError>,
}

/// Groups `traces` (each the spans of one trace) by critical path; traces without one are
/// listed in [`Grouping::rejected`].
pub fn group<T: AsRef<[Span]>>(traces: &[T]) -> Grouping {
    let mut out = Grouping::default();
    let mut finder = PathFinder::default();
    let mut records: Vec<PathRecord> = Vec::new();
    // Sequence hash → first group with it; `next` chains groups sharing a hash.
    let mut first: HashMap<u64, u32, FxBuild> = HashMap::default();
    let mut next: Vec<u32> = Vec::new();
    for (index, trace) in traces.iter().enumerate() {
        let spans = trace.as_ref();
        let root = match finder.find(spans, index, &mut out.tracepoints, &mut records) {
            Ok(root) => root,
            Err(e) => {
                out.rejected.push(e);
                continue;
            }
        };
        let mut h = FxBuild::default().build_hasher();
        h.write_usize(records.len());
        for r in &records {
            h.write_u32(r.tracepoint);
        }
        let h = h.finish();
        let mut g = first.get(&h).copied().unwrap_or(u32::MAX);
        while g != u32::MAX && !same_path(&out.groups[g as usize].path, &records) {
            g = next[g as usize];
        }
        if g == u32::MAX {
            g = out.groups.len() as u32;
            next.push(first.insert(h, g).unwrap_or(u32::MAX));
            out.groups.push(Group {
                request_type: spans[root].name.to_string(),
                path: records.iter().map(|r| r.tracepoint).collect(),
                representative: spans[root].trace_id,
                members: Vec::new(),
                response_ns: Vec::new(),
                edge_latency_ns: vec![Vec::new(); records.len() - 1],
            });
        }
        let group = &mut out.groups[g as usize];
        group.members.push(index);
        group.response_ns.push(response_ns(&records));
        for (column, w) in group.edge_latency_ns.iter_mut().zip(records.windows(2)) {
            column.push(latency_ns(&w[0], &w[1]));
        }
    }
    out
}

fn same_path(path: &[TracepointId], records: &[PathRecord]) -> bool {
    path.len() == records.len() && path.iter().zip(records).all(|(&t, r)| t == r.tracepoint)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vaif::hb::tests::span;

    /// root [0, 100] with children a [10, a_end] and b [10, b_end] running concurrently.
    fn fan(trace: u128, a_end: u64, b_end: u64) -> Vec<Span> {
        let mut v = vec![span(1, 0, "get", 0, 100), span(2, 1, "a", 10, a_end), span(3, 1, "b", 10, b_end)];
        v.iter_mut().for_each(|s| s.trace_id = TraceId::from_u128(trace));
        v
    }

    #[test]
    fn same_path_same_group() {
        let mut other_type = fan(5, 30, 40);
        other_type[0].name = "put".into();
        let traces = vec![fan(1, 50, 40), fan(2, 30, 60), fan(3, 55, 20), vec![], other_type, fan(6, 30, 61)];
        let g = group(&traces);
        assert_eq!(g.groups.len(), 3);
        assert_eq!(g.rejected.len(), 1);
        assert_eq!(g.rejected[0].index, 3);
        let a = &g.groups[0];
        assert_eq!(
            (a.request_type.as_str(), a.representative, a.members.clone()),
            ("get", TraceId::from_u128(1), vec![0, 2])
        );
        let names: Vec<&str> = a.path.iter().map(|&t| g.tracepoints.name(t)).collect();
        assert_eq!(names, ["get:entry", "a:entry", "a:exit", "get:exit"]);
        assert_eq!(a.response_ns, [100, 100]);
        assert_eq!(a.edge_latency_ns, [vec![10, 10], vec![40, 45], vec![50, 45]]);
        assert_eq!(g.groups[1].members, [1, 5]);
        assert_eq!(g.groups[2].request_type, "put");
        assert_eq!(
            a.edge(2).map(|(f, t)| (g.tracepoints.name(f), g.tracepoints.name(t))),
            Some(("a:exit", "get:exit"))
        );
        assert_eq!(a.edge(3), None);
    }
}
