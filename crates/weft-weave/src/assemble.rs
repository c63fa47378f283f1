//! Span ids, parent-first export and trace-id resolution.
//!
//! Weavers allocate a [`LocalId`] when a span opens and hand the finished [`Span`] over when
//! it closes. The [`Assembler`] exports a span only after its parent: a closed span whose
//! parent is still open waits. That is what lets a span change trace after its children
//! exist — the receiving host's HostCall joins the sender's trace when it closes (spec §7
//! rule 7) and everything under it follows, because children take their trace id from their
//! parent at export time.
//!
//! Ids are deterministic: span ids and trace ids are a keyed mix (splitmix64) of the run's
//! seed and the local id, so the same logs give byte-identical traces on every run, from files
//! or from pipes.
//!
//! Memory is bounded: the trace ids of exported spans are remembered for the last
//! [`Limits::exported_memory`] spans (a child whose parent was forgotten becomes a root and is
//! counted in [`AssembleStats::orphans`]); closed spans waiting for a parent are capped at
//! [`Limits::waiting`] (past it the oldest waiting group is exported early under its parent's
//! provisional trace, counted in [`AssembleStats::forced`]).

use std::collections::VecDeque;

use weft_model::id::{IdMap, mix64};
use weft_model::{Link, LinkRelation, Span, SpanId, TraceId};

/// A span's id inside one run (1, 2, ...; 0 is never used).
pub type LocalId = u64;

/// Bounds of the assembler.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Exported spans whose trace id is remembered for late children.
    pub exported_memory: usize,
    /// Closed spans that may wait for their parent's export.
    pub waiting: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { exported_memory: 1 << 19, waiting: 1 << 18 }
    }
}

/// What the assembler did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AssembleStats {
    /// Spans exported.
    pub exported: u64,
    /// Spans whose parent was unknown (forgotten or never opened): exported as roots.
    pub orphans: u64,
    /// Spans exported before their parent because the waiting bound was hit.
    pub forced: u64,
    /// Spans discarded by their weaver (e.g. bare HostCall spans).
    pub discarded: u64,
}

#[derive(Debug)]
struct Waiting {
    id: LocalId,
    span: Box<Span>,
    causes: Vec<LocalId>,
}

/// Parent-first export (see the module docs).
#[derive(Debug)]
pub struct Assembler {
    seed: u64,
    next: LocalId,
    /// Open or closed-but-unexported spans → their parent.
    live: IdMap<LocalId, Option<LocalId>>,
    /// Closed spans waiting for the export of the key (their parent).
    waiting: IdMap<LocalId, Vec<Waiting>>,
    waiting_count: usize,
    /// Parents with waiting children, in the order they started waiting (for forcing).
    waiting_order: VecDeque<LocalId>,
    /// Trace ids of the latest exported spans: a ring indexed by local id (ids are sequential).
    exported: Vec<(LocalId, TraceId)>,
    limits: Limits,
    stats: AssembleStats,
    pending_out: Vec<Span>,
}

impl Assembler {
    /// An assembler whose ids derive from `seed`.
    pub fn new(seed: u64, limits: Limits) -> Self {
        Assembler {
            seed,
            next: 1,
            live: IdMap::default(),
            waiting: IdMap::default(),
            waiting_count: 0,
            waiting_order: VecDeque::new(),
            exported: vec![(0, TraceId::INVALID); limits.exported_memory.max(1)],
            limits,
            stats: AssembleStats::default(),
            pending_out: Vec::new(),
        }
    }

    /// The span id of local span `id`.
    pub fn span_id(&self, id: LocalId) -> SpanId {
        SpanId::from_u64(mix64(self.seed ^ mix64(id)) | 1)
    }

    /// The trace id a root span `id` gives its trace.
    pub fn root_trace_id(&self, id: LocalId) -> TraceId {
        let a = mix64(self.seed.wrapping_add(0x5eed) ^ mix64(id));
        let b = mix64(a ^ id.rotate_left(17)) | 1;
        TraceId::from_u128(((a as u128) << 64) | b as u128)
    }

    /// Opens a span under `parent`.
    pub fn open(&mut self, parent: Option<LocalId>) -> LocalId {
        let id = self.next;
        self.next += 1;
        self.live.insert(id, parent);
        id
    }

    /// Changes the parent of a span that has not been closed yet.
    pub fn set_parent(&mut self, id: LocalId, parent: Option<LocalId>) {
        if let Some(p) = self.live.get_mut(&id) {
            *p = parent;
        }
    }

    /// The parent recorded for an open span.
    pub fn parent_of(&self, id: LocalId) -> Option<LocalId> {
        self.live.get(&id).copied().flatten()
    }

    /// Forgets an open span that will never be exported (it must have no children).
    pub fn discard(&mut self, id: LocalId) {
        self.live.remove(&id);
        self.stats.discarded += 1;
        // A child that closed under it (should not happen) is released as an orphan.
        if let Some(ws) = self.waiting.remove(&id) {
            self.waiting_count -= ws.len();
            for w in ws {
                self.stats.orphans += 1;
                let trace = self.root_trace_id(w.id);
                let mut out = Vec::new();
                self.export(w, trace, &mut out);
                // Discarding happens inside a weaver step; the caller collects via `drain`.
                self.pending_out.extend(out);
            }
        }
    }

    /// The trace `id` belongs to now (final once `id` is exported).
    pub fn trace_of(&self, mut id: LocalId) -> TraceId {
        for _ in 0..10_000 {
            if let Some(t) = self.exported_trace(id) {
                return t;
            }
            match self.live.get(&id) {
                Some(Some(p)) => id = *p,
                _ => return self.root_trace_id(id),
            }
        }
        self.root_trace_id(id)
    }

    /// Closes span `id` (its ids, parent and links are filled in here) and appends whatever
    /// became exportable to `out`. `causes` become `caused_by` links.
    pub fn close(&mut self, id: LocalId, mut span: Span, causes: Vec<LocalId>, out: &mut Vec<Span>) {
        out.append(&mut self.pending_out);
        let parent = self.live.get(&id).copied().flatten();
        span.span_id = self.span_id(id);
        span.parent_span_id = parent.map(|p| self.span_id(p));
        match parent {
            None => {
                let t = self.root_trace_id(id);
                self.export_now(id, span, causes, t, out);
            }
            Some(p) => {
                if let Some(t) = self.exported_trace(p) {
                    self.export_now(id, span, causes, t, out);
                } else if self.live.contains_key(&p) {
                    let list = self.waiting.entry(p).or_default();
                    if list.is_empty() {
                        self.waiting_order.push_back(p);
                    }
                    list.push(Waiting { id, span: Box::new(span), causes });
                    self.waiting_count += 1;
                    while self.waiting_count > self.limits.waiting {
                        self.force_oldest(out);
                    }
                } else {
                    self.stats.orphans += 1;
                    span.parent_span_id = None;
                    let t = self.root_trace_id(id);
                    self.export_now(id, span, causes, t, out);
                }
            }
        }
    }

    /// Exports a span whose trace is known, then whatever waited for it (no boxing on the
    /// common path).
    fn export_now(
        &mut self,
        id: LocalId,
        mut span: Span,
        causes: Vec<LocalId>,
        trace: TraceId,
        out: &mut Vec<Span>,
    ) {
        span.trace_id = trace;
        for c in causes {
            span.links.push(Link {
                trace_id: self.trace_of(c),
                span_id: self.span_id(c),
                relation: LinkRelation::CausedBy,
                ..Link::default()
            });
        }
        self.live.remove(&id);
        self.remember(id, trace);
        self.stats.exported += 1;
        out.push(span);
        if let Some(children) = self.waiting.remove(&id) {
            self.waiting_count -= children.len();
            for c in children {
                self.export(c, trace, out);
            }
        }
    }

    fn force_oldest(&mut self, out: &mut Vec<Span>) {
        while let Some(p) = self.waiting_order.pop_front() {
            if let Some(ws) = self.waiting.remove(&p) {
                self.waiting_count -= ws.len();
                let t = self.trace_of(p);
                for w in ws {
                    self.stats.forced += 1;
                    self.export(w, t, out);
                }
                return;
            }
        }
    }

    fn export(&mut self, first: Waiting, trace: TraceId, out: &mut Vec<Span>) {
        let mut stack = vec![(first, trace)];
        while let Some((w, trace)) = stack.pop() {
            let Waiting { id, mut span, causes } = w;
            span.trace_id = trace;
            for c in causes {
                span.links.push(Link {
                    trace_id: self.trace_of(c),
                    span_id: self.span_id(c),
                    relation: LinkRelation::CausedBy,
                    ..Link::default()
                });
            }
            self.live.remove(&id);
            self.remember(id, trace);
            self.stats.exported += 1;
            out.push(*span);
            if let Some(children) = self.waiting.remove(&id) {
                self.waiting_count -= children.len();
                // Reverse so that children come out in the order they closed.
                for c in children.into_iter().rev() {
                    stack.push((c, trace));
                }
            }
        }
    }

    fn remember(&mut self, id: LocalId, trace: TraceId) {
        let n = self.exported.len() as u64;
        self.exported[(id % n) as usize] = (id, trace);
    }

    fn exported_trace(&self, id: LocalId) -> Option<TraceId> {
        let n = self.exported.len() as u64;
        let (k, t) = self.exported[(id % n) as usize];
        (k == id && id != 0).then_some(t)
    }

    /// End of input: exports every span still waiting (under its parent's provisional trace;
    /// the parent was never closed — weavers close their open spans before this).
    pub fn finish(&mut self, out: &mut Vec<Span>) {
        out.append(&mut self.pending_out);
        while self.waiting_count > 0 {
            let before = self.waiting_count;
            self.force_oldest(out);
            if self.waiting_count == before {
                break;
            }
        }
    }

    /// Spans released outside [`Assembler::close`] (by [`Assembler::discard`]).
    pub fn drain(&mut self, out: &mut Vec<Span>) {
        out.append(&mut self.pending_out);
    }

    /// Spans still open (opened, not closed or discarded).
    pub fn live(&self) -> usize {
        self.live.len()
    }

    /// The statistics so far.
    pub fn stats(&self) -> &AssembleStats {
        &self.stats
    }
}
