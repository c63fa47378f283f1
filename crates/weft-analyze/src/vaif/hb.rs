//! The critical path of one request over the happens-before graph of its *tracepoint records*
//! (VAIF's critical-path extractor).
//!
//! **Records.** Every span contributes an entry record (`span-name:entry`, at its start), one
//! annotation record per span event (`span-name/event-name`, at the event's time, clamped into
//! the span) and an exit record (`span-name:exit`, at `max(start, end)`). Within a span the
//! records are ordered by time (a span is one thread of execution).
//!
//! **Happens-before edges.** Besides the order within each span:
//! * *fork*: the latest record of the parent at or before the child's start precedes the
//!   child's entry (the parent's entry when the child starts before it: clock skew);
//! * *sequence*: a child's exit precedes the entry of a sibling that starts at or after its
//!   end (the parent joined the one before starting the other), when it is the latest such
//!   exit and no earlier than the fork record;
//! * *join*: the child's exit precedes the parent's first record at or after the child's end
//!   that comes after the fork record; a child that ends after its parent's exit joins nothing
//!   (asynchronous work that outlives its parent);
//! * *links*: a `caused_by` or `follows_from` link to a span of the same trace makes that
//!   span's latest record at or before this span's start precede this span's entry (other
//!   links, links to other traces, links on the root and links to spans that start later are
//!   not causal here and are ignored).
//!
//! **The walk** starts at the request's end — the latest record of the trace (the root's exit
//! when nothing finishes later) — and steps back, always to the predecessor that happened
//! last, until it reaches the root's entry. Ties go to the other span: a joining child rather
//! than the span's own previous record, a preceding sibling rather than the fork record, the
//! fork rather than a link. Fan-out/fan-in is handled by the join and sequence edges: of
//! concurrent children, the one that finished last is on the path (ties: the one that started
//! later). The path is the reversed walk; each pair of consecutive records is an *edge* whose
//! latency is the difference of their times, so the edges' latencies sum to the *response
//! time* = end − root entry. A latency is negative only where a child starts before its parent
//! (clock skew).
//!
//! **Bad traces** give a [`PathError`] naming the trace (its position in the input and its
//! id): empty, no root, several roots, a span id that repeats, a parent that is not in the
//! trace, a parent cycle, or a cycle closed by links. Nothing here panics on input.
//!
//! Tracepoint names are interned to [`TracepointId`]s per analysis run ([`Tracepoints`]); the
//! scratch space of the walk lives in a [`PathFinder`] reused across traces, so finding the
//! paths of many traces allocates only when a trace is larger than every one before it.

use std::collections::HashMap;

use weft_model::{LinkRelation, Span, SpanId, Str, TraceId};

use super::FxBuild;

/// A tracepoint, interned per analysis run: an index into [`Tracepoints`].
pub type TracepointId = u32;

const NONE: u32 = u32::MAX;

/// The names of the tracepoints seen in one analysis run, interned to [`TracepointId`]s.
#[derive(Debug, Clone, Default)]
pub struct Tracepoints {
    span_names: HashMap<Str, u32, FxBuild>,
    event_names: HashMap<Str, u32, FxBuild>,
    /// (span-name id, 0 entry / 1 exit / 2 event, event-name id) → tracepoint.
    ids: HashMap<(u32, u8, u32), TracepointId, FxBuild>,
    names: Vec<String>,
    span_of: Vec<u32>,
    span_name_text: Vec<String>,
}

impl Tracepoints {
    /// The name of a tracepoint (`span-name:entry`, `span-name:exit`, `span-name/event-name`);
    /// `""` for an id this run never gave out.
    pub fn name(&self, id: TracepointId) -> &str {
        self.names.get(id as usize).map_or("", String::as_str)
    }
    /// The span name a tracepoint belongs to; `""` for an unknown id.
    pub fn span_name(&self, id: TracepointId) -> &str {
        self.span_of
            .get(id as usize)
            .and_then(|&s| self.span_name_text.get(s as usize))
            .map_or("", String::as_str)
    }
    /// Number of distinct tracepoints.
    pub fn len(&self) -> usize {
        self.names.len()
    }
    /// True when no tracepoint was interned.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    fn intern_span_name(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.span_names.get(name) {
            return id;
        }
        let id = self.span_name_text.len() as u32;
        self.span_name_text.push(name.to_owned());
        self.span_names.insert(Str::from(name), id);
        id
    }

    fn intern_event_name(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.event_names.get(name) {
            return id;
        }
        let id = self.event_names.len() as u32;
        self.event_names.insert(Str::from(name), id);
        id
    }

    /// The tracepoint of a record: `event` None with `exit` false/true for entry/exit.
    fn intern(&mut self, span: &Span, event: Option<u32>, exit: bool) -> TracepointId {
        let s = self.intern_span_name(&span.name);
        let key = match event.and_then(|e| span.events.get(e as usize)) {
            Some(ev) => (s, 2, self.intern_event_name(&ev.name)),
            None => (s, u8::from(exit), 0),
        };
        if let Some(&id) = self.ids.get(&key) {
            return id;
        }
        let id = self.names.len() as TracepointId;
        self.names.push(match key.1 {
            0 => format!("{}:entry", span.name),
            1 => format!("{}:exit", span.name),
            _ => format!(
                "{}/{}",
                span.name,
                event.and_then(|e| span.events.get(e as usize)).map_or("", |e| &e.name)
            ),
        });
        self.span_of.push(s);
        self.ids.insert(key, id);
        id
    }
}

/// One record on a critical path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PathRecord {
    /// Its tracepoint.
    pub tracepoint: TracepointId,
    /// The span that recorded it (index into the trace's slice).
    pub span: u32,
    /// The span event, for an annotation record (index into the span's `events`).
    pub event: Option<u32>,
    /// When, ns since the epoch (clamped into the span, see the module docs).
    pub time_ns: u64,
}

/// An edge of a critical path: two consecutive records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PathEdge {
    /// Earlier tracepoint.
    pub from: TracepointId,
    /// Later tracepoint.
    pub to: TracepointId,
    /// `to`'s time − `from`'s time, ns.
    pub latency_ns: i64,
}

/// Latency of the edge from `a` to `b`, ns (wrapping, so the edges of a path always sum to its
/// response time, even on garbage timestamps).
pub fn latency_ns(a: &PathRecord, b: &PathRecord) -> i64 {
    b.time_ns.wrapping_sub(a.time_ns) as i64
}

/// Response time of a path: its last record's time − its first's, ns (0 for fewer than two).
pub fn response_ns(records: &[PathRecord]) -> i64 {
    match (records.first(), records.last()) {
        (Some(a), Some(b)) => latency_ns(a, b),
        _ => 0,
    }
}

/// The critical path of one trace.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TracepointPath {
    /// The trace.
    pub trace_id: TraceId,
    /// Index of the root span in the trace's slice.
    pub root: usize,
    /// The records from the root's entry to the request's end.
    pub records: Vec<PathRecord>,
}

impl TracepointPath {
    /// End − root entry, ns; the sum of [`TracepointPath::edges`]' latencies.
    pub fn response_ns(&self) -> i64 {
        response_ns(&self.records)
    }
    /// The edges, in path order.
    pub fn edges(&self) -> impl Iterator<Item = PathEdge> + '_ {
        self.records.windows(2).map(|w| PathEdge {
            from: w[0].tracepoint,
            to: w[1].tracepoint,
            latency_ns: latency_ns(&w[0], &w[1]),
        })
    }
}

/// Why a trace has no critical path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathErrorKind {
    /// No spans at all.
    #[error("no spans")]
    Empty,
    /// Every span has a parent id.
    #[error("no root span (every span names a parent)")]
    NoRoot,
    /// More than one span without a parent id.
    #[error("{count} root spans (spans without a parent), expected one")]
    SeveralRoots {
        /// How many.
        count: usize,
    },
    /// Two spans with one id.
    #[error("span id {span} occurs more than once")]
    DuplicateSpanId {
        /// The repeated id.
        span: SpanId,
    },
    /// A span whose parent is not in the trace.
    #[error("span {span} names parent {parent}, which is not in the trace")]
    MissingParent {
        /// The orphan.
        span: SpanId,
        /// Its missing parent.
        parent: SpanId,
    },
    /// A cycle of parents, or a cycle the walk met through links.
    #[error("span {span} is on a cycle")]
    Cycle {
        /// A span on the cycle.
        span: SpanId,
    },
    /// More spans and events than 32-bit indices hold.
    #[error("{records} records is more than one path search handles")]
    TooLarge {
        /// Spans plus span events (at least).
        records: usize,
    },
}

/// A trace without a critical path: which trace and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("trace #{index}{}: {kind}", trace_id.map(|t| format!(" ({t})")).unwrap_or_default())]
pub struct PathError {
    /// Position of the trace in the input.
    pub index: usize,
    /// Its id (that of its first span), None for an empty trace.
    pub trace_id: Option<TraceId>,
    /// Why.
    pub kind: PathErrorKind,
}

/// The critical path of one trace, interning tracepoint names in `names` (see the module
/// docs). For many traces, reuse one [`PathFinder`].
pub fn tracepoint_path(spans: &[Span], names: &mut Tracepoints) -> Result<TracepointPath, PathError> {
    let mut records = Vec::new();
    let root = PathFinder::default().find(spans, 0, names, &mut records)?;
    Ok(TracepointPath { trace_id: spans[root].trace_id, root, records })
}

/// Scratch space for critical paths, reused across traces.
#[derive(Debug, Default)]
pub struct PathFinder {
    index: HashMap<u64, u32, FxBuild>,
    parent: Vec<u32>,
    state: Vec<u32>,
    rec_off: Vec<u32>,
    rec_time: Vec<u64>,
    rec_span: Vec<u32>,
    rec_event: Vec<u32>,
    join: Vec<u32>,
    entry_pred: Vec<u32>,
    seen: Vec<u32>,
    stamp: u32,
    order: Vec<u32>,
    kids: Vec<u32>,
    walk: Vec<u32>,
}

impl PathFinder {
    /// Finds the critical path of `spans` (trace number `index` of the input, for errors),
    /// writes its records to `out` (cleared first) and returns the root's index.
    pub fn find(
        &mut self,
        spans: &[Span],
        index: usize,
        names: &mut Tracepoints,
        out: &mut Vec<PathRecord>,
    ) -> Result<usize, PathError> {
        out.clear();
        let root = self.search(spans).map_err(|kind| PathError {
            index,
            trace_id: spans.first().map(|s| s.trace_id),
            kind,
        })?;
        for &r in self.walk.iter().rev() {
            let s = self.rec_span[r as usize];
            let span = &spans[s as usize];
            let (first, last) = (self.rec_off[s as usize], self.rec_off[s as usize + 1] - 1);
            let event = (r != first && r != last).then(|| self.rec_event[r as usize]);
            out.push(PathRecord {
                tracepoint: names.intern(span, event, r == last),
                span: s,
                event,
                time_ns: self.rec_time[r as usize],
            });
        }
        Ok(root)
    }

    /// Fills `self.walk` with the path's records, end first; returns the root's index.
    fn search(&mut self, spans: &[Span]) -> Result<usize, PathErrorKind> {
        let n = spans.len();
        if n == 0 {
            return Err(PathErrorKind::Empty);
        }
        let events: usize = spans.iter().map(|s| s.events.len()).sum();
        let records = 2 * n + events;
        if records >= NONE as usize {
            return Err(PathErrorKind::TooLarge { records });
        }
        let root = self.link_parents(spans)?;
        self.build_records(spans, records);
        self.build_edges(spans, root);

        // The request's end: the latest record (the root's exit on ties).
        let mut cur = self.rec_off[root + 1] - 1;
        for (r, &t) in self.rec_time.iter().enumerate() {
            if t > self.rec_time[cur as usize] {
                cur = r as u32;
            }
        }
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == 0 {
            self.seen.iter_mut().for_each(|s| *s = 0);
            self.stamp = 1;
        }
        if self.seen.len() < records {
            self.seen.resize(records, 0);
        }
        self.walk.clear();
        while cur != NONE {
            let c = cur as usize;
            let s = self.rec_span[c] as usize;
            if self.seen[c] == self.stamp {
                return Err(PathErrorKind::Cycle { span: spans[s].span_id });
            }
            self.seen[c] = self.stamp;
            self.walk.push(cur);
            cur = if cur == self.rec_off[s] {
                self.entry_pred[s]
            } else {
                let prev = cur - 1;
                match self.join[c] {
                    NONE => prev,
                    j => {
                        let exit = self.rec_off[j as usize + 1] - 1;
                        if self.rec_time[exit as usize] >= self.rec_time[prev as usize] { exit } else { prev }
                    }
                }
            };
        }
        Ok(root)
    }

    /// Resolves parents; checks ids are unique, there is exactly one root, every parent is
    /// in the trace and parents form no cycle. Returns the root's index.
    fn link_parents(&mut self, spans: &[Span]) -> Result<usize, PathErrorKind> {
        let n = spans.len();
        self.index.clear();
        for (i, s) in spans.iter().enumerate() {
            if self.index.insert(id_key(s.span_id), i as u32).is_some() {
                return Err(PathErrorKind::DuplicateSpanId { span: s.span_id });
            }
        }
        self.parent.clear();
        let mut root = None;
        let mut roots = 0;
        for (i, s) in spans.iter().enumerate() {
            let p = match s.parent_span_id {
                None => {
                    roots += 1;
                    root = Some(i);
                    NONE
                }
                Some(p) => match self.index.get(&id_key(p)) {
                    Some(&p) => p,
                    None => return Err(PathErrorKind::MissingParent { span: s.span_id, parent: p }),
                },
            };
            self.parent.push(p);
        }
        let root = match (root, roots) {
            (Some(r), 1) => r,
            (None, _) => return Err(PathErrorKind::NoRoot),
            (Some(_), count) => return Err(PathErrorKind::SeveralRoots { count }),
        };
        // Every span must reach the root through its parents: walk up, marking the walk with
        // its start; meeting the current mark again closes a cycle.
        const DONE: u32 = NONE;
        self.state.clear();
        self.state.resize(n, 0);
        for start in 0..n {
            let mark = start as u32 + 1;
            let mut j = start as u32;
            while j != NONE && self.state[j as usize] != DONE {
                if self.state[j as usize] == mark {
                    return Err(PathErrorKind::Cycle { span: spans[j as usize].span_id });
                }
                self.state[j as usize] = mark;
                j = self.parent[j as usize];
            }
            let mut j = start as u32;
            while j != NONE && self.state[j as usize] != DONE {
                self.state[j as usize] = DONE;
                j = self.parent[j as usize];
            }
        }
        Ok(root)
    }

    /// Lays out each span's records: entry, events by time, exit.
    fn build_records(&mut self, spans: &[Span], records: usize) {
        self.rec_off.clear();
        self.rec_time.clear();
        self.rec_span.clear();
        self.rec_event.clear();
        self.rec_time.reserve(records);
        for (i, s) in spans.iter().enumerate() {
            self.rec_off.push(self.rec_time.len() as u32);
            let (start, end) = (s.start_ns, s.end_ns.max(s.start_ns));
            let mut push = |t: u64, e: u32| {
                self.rec_time.push(t);
                self.rec_span.push(i as u32);
                self.rec_event.push(e);
            };
            push(start, NONE);
            if s.events.windows(2).all(|w| w[0].time_ns <= w[1].time_ns) {
                for (e, ev) in s.events.iter().enumerate() {
                    push(ev.time_ns.clamp(start, end), e as u32);
                }
            } else {
                self.order.clear();
                self.order.extend(0..s.events.len() as u32);
                self.order.sort_by_key(|&e| s.events[e as usize].time_ns);
                for &e in &self.order {
                    push(s.events[e as usize].time_ns.clamp(start, end), e);
                }
            }
            push(end, NONE);
        }
        self.rec_off.push(self.rec_time.len() as u32);
    }

    /// Fork, sequence, join and link edges (see the module docs).
    fn build_edges(&mut self, spans: &[Span], root: usize) {
        let records = self.rec_time.len();
        self.join.clear();
        self.join.resize(records, NONE);
        self.entry_pred.clear();
        self.entry_pred.resize(spans.len(), NONE);
        for (c, span) in spans.iter().enumerate() {
            let p = self.parent[c];
            if p == NONE {
                continue;
            }
            let (lo, hi) = (self.rec_off[p as usize] as usize, self.rec_off[p as usize + 1] as usize);
            let times = &self.rec_time[lo..hi];
            let exit_time = |c: usize| self.rec_time[self.rec_off[c + 1] as usize - 1];
            let (start, end) = (span.start_ns, exit_time(c));
            let fork = times.partition_point(|&t| t <= start).saturating_sub(1);
            self.entry_pred[c] = (lo + fork) as u32;
            let join = fork + 1 + times[fork + 1..].partition_point(|&t| t < end);
            if join < times.len() {
                let slot = &mut self.join[lo + join];
                let better = *slot == NONE || {
                    let o = *slot as usize;
                    (end, span.start_ns, c) > (exit_time(o), spans[o].start_ns, o)
                };
                if better {
                    *slot = c as u32;
                }
            }
        }
        // Sequence: the latest sibling exit at or before a child's start precedes its entry
        // when it is at least as late as the fork record. Siblings sorted by (parent, exit,
        // start, index); a sibling ending exactly at the child's start precedes it only if it
        // comes first by (start, index), so zero-length siblings at one instant form a chain,
        // not a cycle.
        self.kids.clear();
        self.kids.extend((0..spans.len() as u32).filter(|&c| self.parent[c as usize] != NONE));
        let exit_time = |c: u32| self.rec_time[self.rec_off[c as usize + 1] as usize - 1];
        self.kids.sort_unstable_by_key(|&c| {
            (self.parent[c as usize], exit_time(c), spans[c as usize].start_ns, c)
        });
        for &c in &self.kids {
            let (p, start) = (self.parent[c as usize], spans[c as usize].start_ns);
            let first = self.kids.partition_point(|&k| self.parent[k as usize] < p);
            let upto = self.kids.partition_point(|&k| (self.parent[k as usize], exit_time(k)) <= (p, start));
            let before = self.kids[first..upto]
                .iter()
                .rev()
                .find(|&&k| exit_time(k) < start || (spans[k as usize].start_ns, k) < (start, c));
            if let Some(&k) = before {
                let exit = self.rec_off[k as usize + 1] - 1;
                if exit_time(k) >= self.rec_time[self.entry_pred[c as usize] as usize] {
                    self.entry_pred[c as usize] = exit;
                }
            }
        }
        for (c, span) in spans.iter().enumerate() {
            if c == root || span.links.is_empty() {
                continue;
            }
            for l in &span.links {
                if !matches!(l.relation, LinkRelation::CausedBy | LinkRelation::FollowsFrom)
                    || l.trace_id != span.trace_id
                {
                    continue;
                }
                let Some(&t) = self.index.get(&id_key(l.span_id)) else { continue };
                if t as usize == c {
                    continue;
                }
                let (lo, hi) = (self.rec_off[t as usize] as usize, self.rec_off[t as usize + 1] as usize);
                let before = self.rec_time[lo..hi].partition_point(|&x| x <= span.start_ns);
                if before == 0 {
                    continue;
                }
                let cand = (lo + before - 1) as u32;
                if self.rec_time[cand as usize] > self.rec_time[self.entry_pred[c] as usize] {
                    self.entry_pred[c] = cand;
                }
            }
        }
    }
}

fn id_key(id: SpanId) -> u64 {
    u64::from_ne_bytes(id.0)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use weft_model::{Link, SpanEvent};

    /// A span of trace 1: id `id`, parent `parent` (0: root), [start, end].
    pub(crate) fn span(id: u64, parent: u64, name: &str, start: u64, end: u64) -> Span {
        Span {
            trace_id: TraceId::from_u128(1),
            span_id: SpanId::from_u64(id),
            parent_span_id: (parent != 0).then(|| SpanId::from_u64(parent)),
            name: name.into(),
            start_ns: start,
            end_ns: end,
            ..Span::default()
        }
    }

    /// A link to span `id` of trace 1.
    fn link(id: u64, relation: LinkRelation) -> Link {
        Link { trace_id: TraceId::from_u128(1), span_id: SpanId::from_u64(id), relation, ..Link::default() }
    }

    fn names_of(path: &TracepointPath, names: &Tracepoints) -> Vec<String> {
        path.records.iter().map(|r| names.name(r.tracepoint).to_owned()).collect()
    }

    /// The path of `spans` and its tracepoint names.
    fn path_of(spans: &[Span]) -> (TracepointPath, Vec<String>) {
        let mut names = Tracepoints::default();
        let p = tracepoint_path(spans, &mut names).unwrap();
        let n = names_of(&p, &names);
        (p, n)
    }

    #[test]
    fn fan_out_fan_in_takes_the_slower_branch() {
        // root [0,100] forks a [10,40] and b [10,70] concurrently, joins both, then c [75,95].
        let spans = vec![
            span(1, 0, "root", 0, 100),
            span(2, 1, "a", 10, 40),
            span(3, 1, "b", 10, 70),
            span(4, 1, "c", 75, 95),
        ];
        let (p, names) = path_of(&spans);
        assert_eq!(names, ["root:entry", "b:entry", "b:exit", "c:entry", "c:exit", "root:exit"]);
        let lat: Vec<i64> = p.edges().map(|e| e.latency_ns).collect();
        assert_eq!(lat, [10, 60, 5, 20, 5]);
        assert_eq!(p.response_ns(), 100);
        // c starts after both branches ended: it follows the later one (sequence edge), not
        // root's entry.
        assert_eq!(p.records[3].span, 3);
        // Swap which branch is slower: the path follows.
        let mut spans = spans;
        spans[1].end_ns = 72;
        assert_eq!(path_of(&spans).1[1..3], ["a:entry", "a:exit"]);
    }

    #[test]
    fn sequential_and_zero_length_siblings() {
        // a [10,40] then b [40,70], then c and d, both zero-length at 80: one chain.
        let spans = vec![
            span(1, 0, "root", 0, 100),
            span(2, 1, "a", 10, 40),
            span(3, 1, "b", 40, 70),
            span(4, 1, "c", 80, 80),
            span(5, 1, "d", 80, 80),
        ];
        let (p, names) = path_of(&spans);
        assert_eq!(
            names,
            [
                "root:entry",
                "a:entry",
                "a:exit",
                "b:entry",
                "b:exit",
                "c:entry",
                "c:exit",
                "d:entry",
                "d:exit",
                "root:exit"
            ]
        );
        assert_eq!(p.edges().map(|e| e.latency_ns).collect::<Vec<_>>(), [10, 30, 0, 30, 10, 0, 0, 0, 20]);
    }

    #[test]
    fn annotations_order_the_parent_thread() {
        // root [0,100] with event "sent" at 50; child [20,60] starts before it, ends after it.
        // The event happens concurrently with the child, which joins at root's exit.
        let mut spans = vec![span(1, 0, "root", 0, 100), span(2, 1, "db", 20, 60)];
        spans[0].events.push(SpanEvent { time_ns: 50, name: "sent".into(), ..SpanEvent::default() });
        let mut names = Tracepoints::default();
        let p = tracepoint_path(&spans, &mut names).unwrap();
        assert_eq!(names_of(&p, &names), ["root:entry", "db:entry", "db:exit", "root:exit"]);
        // A child that starts after the event forks from it.
        spans[1].start_ns = 55;
        let p = tracepoint_path(&spans, &mut names).unwrap();
        assert_eq!(names_of(&p, &names), ["root:entry", "root/sent", "db:entry", "db:exit", "root:exit"]);
        assert_eq!(p.records[1].event, Some(0));
    }

    #[test]
    fn outliving_child_ends_the_request_and_links_cause() {
        // root [0,50] forks "nic" [40,90], which outlives it, and "net" [45,50], whose child
        // "rx" [95,130] is caused by nic (caused_by link): the end is rx's exit, reached from
        // the root through nic.
        let mut spans = vec![
            span(1, 0, "root", 0, 50),
            span(2, 1, "nic", 40, 90),
            span(3, 1, "net", 45, 50),
            span(4, 3, "rx", 95, 130),
        ];
        spans[3].links.push(link(2, LinkRelation::CausedBy));
        let mut names = Tracepoints::default();
        let p = tracepoint_path(&spans, &mut names).unwrap();
        assert_eq!(names_of(&p, &names), ["root:entry", "nic:entry", "nic:exit", "rx:entry", "rx:exit"]);
        assert_eq!(p.response_ns(), 130);
        assert_eq!(p.edges().map(|e| e.latency_ns).sum::<i64>(), 130);
        // Without the link, rx hangs off net (which ended at 50): fork from net's exit.
        spans[3].links[0].relation = LinkRelation::Unspecified;
        let p = tracepoint_path(&spans, &mut names).unwrap();
        assert_eq!(names_of(&p, &names), ["root:entry", "net:entry", "net:exit", "rx:entry", "rx:exit"]);
    }

    #[test]
    fn bad_traces_are_errors_naming_the_trace() {
        let mut f = PathFinder::default();
        let mut names = Tracepoints::default();
        let mut out = Vec::new();
        let mut err = |spans: &[Span], index: usize| f.find(spans, index, &mut names, &mut out).unwrap_err();
        let e = err(&[], 3);
        assert_eq!((e.index, e.trace_id, e.kind.clone()), (3, None, PathErrorKind::Empty));
        assert_eq!(e.to_string(), "trace #3: no spans");
        let e = err(&[span(1, 2, "a", 0, 1), span(2, 1, "b", 0, 1)], 7);
        assert_eq!(e.kind, PathErrorKind::NoRoot);
        assert!(e.to_string().starts_with("trace #7 (00000000000000000000000000000001): no root"), "{e}");
        let e = err(&[span(1, 0, "a", 0, 1), span(2, 3, "b", 0, 1), span(3, 2, "c", 0, 1)], 0);
        assert!(matches!(e.kind, PathErrorKind::Cycle { .. }), "{e}");
        let e = err(&[span(1, 0, "a", 0, 1), span(2, 2, "b", 0, 1)], 0);
        assert_eq!(e.kind, PathErrorKind::Cycle { span: SpanId::from_u64(2) });
        let e = err(&[span(1, 0, "a", 0, 1), span(1, 0, "b", 0, 1)], 0);
        assert_eq!(e.kind, PathErrorKind::DuplicateSpanId { span: SpanId::from_u64(1) });
        let e = err(&[span(1, 0, "a", 0, 1), span(2, 0, "b", 0, 1)], 0);
        assert_eq!(e.kind, PathErrorKind::SeveralRoots { count: 2 });
        let e = err(&[span(1, 0, "a", 0, 1), span(2, 9, "b", 0, 1)], 0);
        assert_eq!(
            e.kind,
            PathErrorKind::MissingParent { span: SpanId::from_u64(2), parent: SpanId::from_u64(9) }
        );
    }

    #[test]
    fn link_cycle_is_an_error() {
        // b (child of a) starts before a (skew) and a is caused by b: a.entry ← b.exit ← b.entry
        // ← a.entry.
        let mut spans = vec![span(1, 0, "r", 0, 100), span(2, 1, "a", 50, 60), span(3, 2, "b", 40, 45)];
        spans[1].links.push(link(3, LinkRelation::FollowsFrom));
        spans[1].end_ns = 200;
        let e = tracepoint_path(&spans, &mut Tracepoints::default()).unwrap_err();
        assert!(matches!(e.kind, PathErrorKind::Cycle { .. }), "{e}");
    }

    pub(crate) mod arb {
        use super::*;
        use proptest::prelude::*;

        /// A random well-formed tree: span i > 0 hangs under a random earlier span, inside it
        /// or (a tenth of the time) outliving it; some spans carry events.
        pub(crate) fn tree() -> impl Strategy<Value = Vec<Span>> {
            prop::collection::vec((any::<u32>(), 0u64..1_000, 0u64..1_000, 0usize..3, any::<bool>()), 1..40)
                .prop_map(|v| {
                    let mut spans: Vec<Span> = Vec::with_capacity(v.len());
                    for (i, (pick, off, len, events, outlive)) in v.into_iter().enumerate() {
                        let (parent, start, end) = if i == 0 {
                            (0, 1_000, 1_000 + 10 * len)
                        } else {
                            let p = pick as usize % i;
                            let (ps, pe) = (spans[p].start_ns, spans[p].end_ns);
                            let start = ps + off % (pe - ps + 1);
                            let end = if outlive && pick % 10 == 0 {
                                start + len
                            } else {
                                start + len % (pe - start + 1)
                            };
                            (p as u64 + 1, start, end)
                        };
                        let name = ["a", "b", "c", "d"][pick as usize % 4];
                        let mut s = span(i as u64 + 1, parent, name, start, end);
                        for e in 0..events {
                            let t = start + (off + 97 * e as u64) % (end - start + 1);
                            s.events.push(SpanEvent {
                                time_ns: t,
                                name: ["x", "y"][e % 2].into(),
                                ..SpanEvent::default()
                            });
                        }
                        spans.push(s);
                    }
                    spans
                })
        }
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn edges_sum_to_response_time(spans in arb::tree()) {
                let p = tracepoint_path(&spans, &mut Tracepoints::default()).unwrap();
                let sum: i64 = p.edges().map(|e| e.latency_ns).sum();
                prop_assert_eq!(sum, p.response_ns());
                let latest = spans.iter().map(|s| s.end_ns).max().unwrap();
                prop_assert_eq!(p.response_ns(), (latest - spans[0].start_ns) as i64);
                prop_assert!(p.edges().all(|e| e.latency_ns >= 0));
                prop_assert_eq!(p.records.first().map(|r| r.span), Some(0));
            }

            #[test]
            fn garbage_never_panics(
                v in prop::collection::vec(
                    (0u64..12, 0u64..12, any::<u64>(), any::<u64>(), prop::collection::vec(any::<u64>(), 0..3), 0u64..12),
                    0..20,
                )
            ) {
                let spans: Vec<Span> = v
                    .into_iter()
                    .map(|(id, parent, start, end, events, link_to)| {
                        let mut s = span(id, parent, "g", start, end);
                        s.events = events.into_iter().map(|t| SpanEvent { time_ns: t, ..SpanEvent::default() }).collect();
                        s.links.push(link(link_to, LinkRelation::CausedBy));
                        s
                    })
                    .collect();
                if let Ok(p) = tracepoint_path(&spans, &mut Tracepoints::default()) {
                    prop_assert_eq!(p.edges().fold(0i64, |a, e| a.wrapping_add(e.latency_ns)), p.response_ns());
                }
            }
        }
    }
}
