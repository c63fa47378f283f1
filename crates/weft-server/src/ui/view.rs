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

    /// The columnar JSON of the waterfall, written straight into bytes (no JSON tree: a
    /// 100,000-span trace is ~7 MB of arrays). `incoming`: links from spans of other traces to
    /// spans of this one, as (to row, from trace hex, from span hex, relation).
    pub fn to_json(&self, incoming: &[(usize, String, String, String)]) -> Vec<u8> {
        use std::fmt::Write;
        let n = self.spans.len();
        let mut tables: [Interner; 3] = Default::default();
        let mut svc = Vec::with_capacity(n);
        let mut name = Vec::with_capacity(n);
        let mut comp = Vec::with_capacity(n);
        for s in &self.spans {
            let service = s.service_name();
            svc.push(tables[0].get(service));
            name.push(tables[1].get(&s.name));
            comp.push(tables[2].get(s.attributes.get_str(conv::COMPONENT).unwrap_or(service)));
        }
        let mut o = String::with_capacity(n * 80 + 4096);
        let str_json = |o: &mut String, v: &str| {
            o.push_str(&serde_json::to_string(v).unwrap_or_else(|_| "\"\"".into()));
        };
        // `key: [f(0), f(1), ...]` over rows.
        fn col(o: &mut String, key: &str, n: usize, mut f: impl FnMut(&mut String, usize)) {
            let _ = write!(o, "\"{key}\":[");
            for i in 0..n {
                if i > 0 {
                    o.push(',');
                }
                f(o, i);
            }
            o.push(']');
        }
        let _ = write!(
            o,
            "{{\"traceId\":\"{}\",\"startNs\":\"{}\",\"startMs\":{},\"durationNs\":{},\"spanCount\":{n},\"adjusted\":{},\"criticalNs\":{},",
            self.trace_id,
            self.start_ns,
            self.start_ns as f64 / 1e6,
            self.end_ns - self.start_ns,
            self.adjusted,
            self.critical.total_ns()
        );
        for (key, t) in ["services", "names", "components"].iter().zip(&tables) {
            let _ = write!(o, "\"{key}\":[");
            for (i, v) in t.list.iter().enumerate() {
                if i > 0 {
                    o.push(',');
                }
                str_json(&mut o, v);
            }
            o.push_str("],");
        }
        o.push_str("\"kinds\":[\"unspecified\",\"internal\",\"server\",\"client\",\"producer\",\"consumer\"],\"rows\":{");
        col(&mut o, "id", n, |o, i| {
            let _ = write!(o, "\"{}\"", self.spans[i].span_id);
        });
        o.push(',');
        col(&mut o, "parent", n, |o, i| match self.parent[i] {
            Some(p) => {
                let _ = write!(o, "{p}");
            }
            None => o.push_str("-1"),
        });
        o.push(',');
        col(&mut o, "depth", n, |o, i| {
            let _ = write!(o, "{}", self.depth[i]);
        });
        o.push(',');
        col(&mut o, "end", n, |o, i| {
            let _ = write!(o, "{}", self.subtree_end[i]);
        });
        o.push(',');
        col(&mut o, "start", n, |o, i| {
            let _ = write!(o, "{}", self.spans[i].start_ns.saturating_sub(self.start_ns));
        });
        o.push(',');
        col(&mut o, "dur", n, |o, i| {
            let _ = write!(o, "{}", self.spans[i].duration_ns());
        });
        o.push(',');
        col(&mut o, "svc", n, |o, i| {
            let _ = write!(o, "{}", svc[i]);
        });
        o.push(',');
        col(&mut o, "name", n, |o, i| {
            let _ = write!(o, "{}", name[i]);
        });
        o.push(',');
        col(&mut o, "comp", n, |o, i| {
            let _ = write!(o, "{}", comp[i]);
        });
        o.push(',');
        col(&mut o, "kind", n, |o, i| {
            let _ = write!(o, "{}", self.spans[i].kind as u8);
        });
        o.push(',');
        col(&mut o, "err", n, |o, i| {
            o.push(if self.spans[i].status.code == StatusCode::Error { '1' } else { '0' });
        });
        o.push_str("},\"critical\":[");
        for (k, c) in self.critical.sections.iter().enumerate() {
            if k > 0 {
                o.push(',');
            }
            let _ = write!(
                o,
                "[{},{},{}]",
                c.span,
                c.start_ns.saturating_sub(self.start_ns),
                c.end_ns.saturating_sub(self.start_ns)
            );
        }
        o.push_str("],\"links\":[");
        let mut first = true;
        for (i, s) in self.spans.iter().enumerate() {
            for l in &s.links {
                let to = if l.trace_id == self.trace_id {
                    self.by_id.get(&l.span_id).map(|&r| r as i64)
                } else {
                    None
                };
                if !std::mem::take(&mut first) {
                    o.push(',');
                }
                let _ = write!(
                    o,
                    "[{i},\"{}\",\"{}\",\"{}\",{}]",
                    l.trace_id,
                    l.span_id,
                    relation(l.relation),
                    to.unwrap_or(-1)
                );
            }
        }
        o.push_str("],\"incoming\":[");
        for (k, (row, t, sp, rel)) in incoming.iter().enumerate() {
            if k > 0 {
                o.push(',');
            }
            let _ = write!(o, "[{row},");
            str_json(&mut o, t);
            o.push(',');
            str_json(&mut o, sp);
            o.push(',');
            str_json(&mut o, rel);
            o.push(']');
        }
        o.push_str("],\"events\":[");
        const MAX_EVENTS: usize = 200_000;
        let mut k = 0usize;
        'ev: for (i, s) in self.spans.iter().enumerate() {
            for e in &s.events {
                if k == MAX_EVENTS {
                    break 'ev;
                }
                if k > 0 {
                    o.push(',');
                }
                let _ = write!(o, "[{i},{},", e.time_ns.saturating_sub(self.start_ns));
                str_json(&mut o, &e.name);
                o.push(']');
                k += 1;
            }
        }
        o.push_str("]}");
        o.into_bytes()
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
