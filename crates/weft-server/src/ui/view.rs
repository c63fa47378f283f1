//! A trace prepared for the UI: spans in tree (depth-first) order with depth, parent row and
//! subtree end per row, the critical path, and the compact columnar JSON the waterfall reads.
//!
//! Columnar layout (`GET /api/ui/trace/{id}`): one array per field, indexed by row; strings
//! (services, names, components) are interned into tables and rows hold indices. A 100,000-span
//! trace is ~40 bytes a row before gzip, and the browser never builds an object per span. Span
//! details (attributes, events, links) come per span from `GET /api/ui/span/{trace}/{span}`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{Value as J, json};
use weft_analyze::critical_path::{CriticalPath, Tree, critical_path_with_tree};
use weft_model::{LinkRelation, Span, SpanId, StatusCode, TraceId, conv};

/// A trace in depth-first order.
#[derive(Debug)]
pub struct Prepared {
    /// The trace.
    pub trace_id: TraceId,
    /// Spans, depth-first (children by start time).
    pub spans: Vec<Span>,
    /// Parent row per row.
    pub parent: Vec<Option<usize>>,
    /// Depth per row (roots 0).
    pub depth: Vec<u32>,
    /// One past the last row of each row's subtree.
    pub subtree_end: Vec<u32>,
    /// Row of each span id.
    pub by_id: HashMap<SpanId, usize>,
    /// Critical path (rows of `spans`).
    pub critical: CriticalPath,
    /// Earliest start, ns.
    pub start_ns: u64,
    /// Latest end, ns.
    pub end_ns: u64,
    /// Whether read-time clock-skew adjustment was applied.
    pub adjusted: bool,
}

impl Prepared {
    /// Orders `spans` (one trace) depth-first and computes the critical path.
    pub fn new(trace_id: TraceId, mut spans: Vec<Span>, adjusted: bool) -> Prepared {
        spans.sort_by(|a, b| a.start_ns.cmp(&b.start_ns).then(a.span_id.cmp(&b.span_id)));
        let tree = Tree::new(&spans);
        let n = spans.len();
        let mut order = Vec::with_capacity(n);
        let mut stack: Vec<usize> = tree.roots.iter().rev().copied().collect();
        while let Some(i) = stack.pop() {
            order.push(i);
            stack.extend(tree.children[i].iter().rev().copied());
        }
        let mut new_of = vec![0usize; n];
        for (new, &old) in order.iter().enumerate() {
            new_of[old] = new;
        }
        let parent: Vec<Option<usize>> =
            order.iter().map(|&old| tree.parent[old].map(|p| new_of[p])).collect();
        let mut slots: Vec<Option<Span>> = spans.into_iter().map(Some).collect();
        let spans: Vec<Span> = order.iter().filter_map(|&old| slots[old].take()).collect();
        let mut depth = vec![0u32; n];
        for i in 0..n {
            if let Some(p) = parent[i] {
                depth[i] = depth[p] + 1;
            }
        }
        let mut subtree_end: Vec<u32> = (1..=n as u32).collect();
        for i in (0..n).rev() {
            if let Some(p) = parent[i] {
                subtree_end[p] = subtree_end[p].max(subtree_end[i]);
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
        let new_tree = Tree { parent: parent.clone(), children, roots };
        let critical = critical_path_with_tree(&spans, &new_tree);
        let mut by_id = HashMap::with_capacity(n);
        for (i, s) in spans.iter().enumerate() {
            by_id.entry(s.span_id).or_insert(i);
        }
        let start_ns = spans.iter().map(|s| s.start_ns).min().unwrap_or(0);
        let end_ns = spans.iter().map(|s| s.end_ns.max(s.start_ns)).max().unwrap_or(start_ns);
        Prepared { trace_id, spans, parent, depth, subtree_end, by_id, critical, start_ns, end_ns, adjusted }
    }

    /// The columnar JSON of the waterfall. `incoming`: links from spans of other traces to
    /// spans of this one, as (to row, from trace hex, from span hex, relation).
    pub fn to_json(&self, incoming: &[(usize, String, String, String)]) -> J {
        let n = self.spans.len();
        let mut tables: [Interner; 3] = Default::default();
        let (mut id, mut parent, mut depth, mut end) = (vec![], vec![], vec![], vec![]);
        let (mut start, mut dur, mut svc, mut name, mut comp, mut kind, mut err) =
            (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
        let mut links = Vec::new();
        let mut events = Vec::new();
        const MAX_EVENTS: usize = 200_000;
        for (i, s) in self.spans.iter().enumerate() {
            id.push(J::String(s.span_id.to_string()));
            parent.push(self.parent[i].map(|p| p as i64).unwrap_or(-1));
            depth.push(self.depth[i]);
            end.push(self.subtree_end[i]);
            start.push(s.start_ns.saturating_sub(self.start_ns));
            dur.push(s.duration_ns());
            let service = s.service_name();
            svc.push(tables[0].get(service));
            name.push(tables[1].get(&s.name));
            comp.push(tables[2].get(s.attributes.get_str(conv::COMPONENT).unwrap_or(service)));
            kind.push(s.kind as u8);
            err.push(u8::from(s.status.code == StatusCode::Error));
            for l in &s.links {
                let to = if l.trace_id == self.trace_id {
                    self.by_id.get(&l.span_id).map(|&r| r as i64)
                } else {
                    None
                };
                links.push(json!([
                    i,
                    l.trace_id.to_string(),
                    l.span_id.to_string(),
                    relation(l.relation),
                    to.unwrap_or(-1)
                ]));
            }
            for e in &s.events {
                if events.len() < MAX_EVENTS {
                    events.push(json!([i, e.time_ns.saturating_sub(self.start_ns), e.name]));
                }
            }
        }
        let critical: Vec<J> = self
            .critical
            .sections
            .iter()
            .map(|c| {
                json!([
                    c.span,
                    c.start_ns.saturating_sub(self.start_ns),
                    c.end_ns.saturating_sub(self.start_ns)
                ])
            })
            .collect();
        let incoming: Vec<J> = incoming.iter().map(|(row, t, s, r)| json!([row, t, s, r])).collect();
        let [services, names, components] = tables.map(|t| t.list);
        json!({
            "traceId": self.trace_id.to_string(),
            "startNs": self.start_ns.to_string(),
            "startMs": self.start_ns as f64 / 1e6,
            "durationNs": self.end_ns - self.start_ns,
            "spanCount": n,
            "adjusted": self.adjusted,
            "services": services,
            "names": names,
            "components": components,
            "kinds": ["unspecified", "internal", "server", "client", "producer", "consumer"],
            "rows": {
                "id": id, "parent": parent, "depth": depth, "end": end, "start": start, "dur": dur,
                "svc": svc, "name": name, "comp": comp, "kind": kind, "err": err,
            },
            "critical": critical,
            "criticalNs": self.critical.total_ns(),
            "links": links,
            "incoming": incoming,
            "events": events,
        })
    }
}

/// Relation text for the UI (`link` for an unspecified relation).
pub fn relation(r: LinkRelation) -> &'static str {
    match r {
        LinkRelation::Unspecified => "link",
        other => other.as_str(),
    }
}

#[derive(Default)]
struct Interner {
    list: Vec<String>,
    index: HashMap<String, u32>,
}

impl Interner {
    fn get(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.list.len() as u32;
        self.list.push(s.to_owned());
        self.index.insert(s.to_owned(), i);
        i
    }
}

/// (trace, adjusted, when, prepared).
type CacheEntry = (TraceId, bool, Instant, Arc<Prepared>);

/// Recently prepared traces, so the span-detail requests that follow a trace view do not read
/// and order the trace again. Bounded by entries and total spans; entries expire after `ttl`
/// (spans of a trace may still be arriving).
pub struct TraceCache {
    inner: Mutex<Vec<CacheEntry>>,
    max_spans: usize,
    ttl: Duration,
}

impl std::fmt::Debug for TraceCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceCache").field("entries", &self.inner.lock().len()).finish()
    }
}

impl Default for TraceCache {
    fn default() -> Self {
        TraceCache { inner: Mutex::new(Vec::new()), max_spans: 600_000, ttl: Duration::from_secs(30) }
    }
}

impl TraceCache {
    /// A cached trace, if fresh.
    pub fn get(&self, id: TraceId, adjusted: bool) -> Option<Arc<Prepared>> {
        let mut v = self.inner.lock();
        let now = Instant::now();
        v.retain(|e| now.duration_since(e.2) < self.ttl);
        let pos = v.iter().position(|e| e.0 == id && e.1 == adjusted)?;
        let e = v.remove(pos);
        let p = e.3.clone();
        v.push(e);
        Some(p)
    }
    /// Remembers a trace (evicting the least recently used beyond the bounds).
    pub fn put(&self, p: Arc<Prepared>) {
        let mut v = self.inner.lock();
        v.retain(|e| !(e.0 == p.trace_id && e.1 == p.adjusted));
        v.push((p.trace_id, p.adjusted, Instant::now(), p));
        while v.len() > 8
            || (v.len() > 1 && v.iter().map(|e| e.3.spans.len()).sum::<usize>() > self.max_spans)
        {
            v.remove(0);
        }
    }
}
