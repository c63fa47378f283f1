//! weft-probe records → [`weft_model::Span`]s.
//!
//! One [`Assembler`] per process: the agent keeps one per attached segment and feeds it the
//! records it drains; [`assemble_capture`] feeds it a whole in-process capture file
//! (`weft_probe::capture`), and on the pipeline ([`crate::pipeline`]) [`CaptureFiles`] reads
//! capture files for [`ProbeStage`], which assembles them on the weave thread. A span is built from its records — `SPAN_START`,
//! annotations, key/value annotations, the endpoint, events recorded while it was current, and
//! `SPAN_END` — and emitted when both ends are seen.
//!
//! | probe record | span |
//! |---|---|
//! | `SPAN_START` | trace id, span id, parent id (0 → root), name = tracepoint name, start, kind (span kind byte), fields → attributes, `thread.id`; a remote parent sets OTLP flags `0x300` |
//! | `SPAN_END` | end; fields → attributes |
//! | `ANNOTATION` | a [`SpanEvent`] named by the text (`cs`, `sr`, `ss`, `cr`, or custom); an internal span with `cs`/`cr` becomes a client span, with `sr`/`ss` a server span |
//! | `KV` | attributes (inline keys) |
//! | `ENDPOINT` | `net.host.ip`, `net.host.port`; a service other than the process's becomes the span's resource `service.name` |
//! | `EVENT` inside an open local span | a [`SpanEvent`] named by the tracepoint, fields → attributes |
//! | `EVENT` elsewhere (no span, or the current context is a remote span) | a zero-length span named by the tracepoint, child of the current context (if any), attribute `weft.probe.event = true` |
//!
//! Resource (per process): `service.name` (the segment's service), `service.instance.id` (the
//! segment file stem, `<pid>-<nonce>`), `host.name`, `process.pid`, `process.executable.path`,
//! `weft.component.kind = app`, `weft.source.tool = weft-probe`. With
//! [`AssemblerConfig::raw_times`], raw TSC times are kept in `weft.raw.start` / `weft.raw.end`
//! when the process records TSC ticks.
//!
//! Values: `u64` fields above `i64::MAX` become decimal strings (OTLP has no unsigned integer).
//!
//! # Bounds and restarts
//!
//! Open spans are bounded ([`AssemblerConfig::max_open`]): past it the oldest is emitted
//! marked `weft.incomplete = true` and counted. Records of a span whose start was never seen
//! (its thread's ring overflowed, or it was recorded on another thread and is still in flight)
//! wait [`AssemblerConfig::orphan_timeout`] before being emitted incomplete.
//!
//! The assembler *pins* the ring position of the first record of every open span in each ring
//! ([`Assembler::release_point`]), so the agent never releases records it would need to rebuild
//! an open span after its own restart; records before the consumer bookmark are replayed with
//! `replay = true`, which rebuilds state but emits nothing that was emitted before. A pin that
//! holds more than a quarter of a ring is released (counted in [`AsmStats::pins_released`]) so a
//! long-running span never makes the producer drop records.

use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use std::path::{Path, PathBuf};

use weft_model::event::TracepointEvent;
use weft_model::id::{IdHasher, IdMap, IdSet, mix2};
use weft_model::{
    Attributes, Event, EventKind, Resource, Scope, SourceId, Span, SpanEvent, SpanId, SpanKind, Str, TraceId,
    Value, conv,
};
use weft_probe::capture::Capture;
use weft_probe::clock::Calibration;
use weft_probe::consumer::{Field, FieldName, FieldValue, Record, RecordKind};
use weft_probe::layout::CLOCK_TSC;

use crate::pipeline::{EventSource, SourceProgress, StageError, WeaveStage};

/// Attribute set on spans built from a standalone tracepoint event.
pub const PROBE_EVENT: &str = "weft.probe.event";
/// OTLP span flags: has-is-remote and is-remote (the parent came from another process).
const FLAGS_REMOTE_PARENT: u32 = 0x300;

/// A tracepoint as the assembler needs it.
#[derive(Debug, Clone)]
pub struct TpMeta {
    /// Tracepoint name (the span or event name).
    pub name: Arc<str>,
    /// Names of its positional fields.
    pub fields: Vec<String>,
}

/// Tracepoint metadata by id (from the segment's registry).
#[derive(Debug, Default, Clone)]
pub struct TpTable {
    by_id: Vec<Option<TpMeta>>,
}

impl TpTable {
    /// The table of a registry snapshot (ids past 2^20 are ignored).
    pub fn new(list: &[weft_probe::TracepointInfo]) -> TpTable {
        let mut t = TpTable::default();
        for tp in list {
            let i = tp.id as usize;
            if i >= 1 << 20 {
                continue;
            }
            if t.by_id.len() <= i {
                t.by_id.resize(i + 1, None);
            }
            t.by_id[i] = Some(TpMeta { name: tp.name.as_str().into(), fields: tp.field_names() });
        }
        t
    }

    /// The tracepoint with this id.
    pub fn get(&self, id: u32) -> Option<&TpMeta> {
        self.by_id.get(id as usize).and_then(Option::as_ref)
    }

    /// Tracepoints known.
    pub fn len(&self) -> usize {
        self.by_id.iter().filter(|t| t.is_some()).count()
    }

    /// True when no tracepoint is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Who produced the records.
#[derive(Debug, Clone, Default)]
pub struct ProcessIdentity {
    /// Process id.
    pub pid: u32,
    /// `service.name`.
    pub service: String,
    /// Executable path (empty: unknown).
    pub exe: String,
    /// Segment file stem (`<pid>-<nonce>`).
    pub instance: String,
    /// `host.name` (empty: none).
    pub host: String,
}

impl ProcessIdentity {
    /// The process's resource; `service` overrides `service.name` (an endpoint's service).
    pub fn resource(&self, service: Option<&str>) -> Resource {
        let mut r = Resource::service(service.unwrap_or(&self.service));
        let a = &mut r.attributes;
        a.push(conv::SERVICE_INSTANCE_ID, self.instance.clone());
        if !self.host.is_empty() {
            a.push(conv::HOST_NAME, self.host.clone());
        }
        a.push(conv::PROCESS_PID, self.pid as i64);
        if !self.exe.is_empty() {
            a.push("process.executable.path", self.exe.clone());
        }
        a.push(conv::COMPONENT_KIND, "app");
        a.push(conv::SOURCE_TOOL, "weft-probe");
        r
    }
}

/// Bounds of an [`Assembler`].
#[derive(Debug, Clone, Copy)]
pub struct AssemblerConfig {
    /// Open spans kept at most (per process).
    pub max_open: usize,
    /// How long records of a span whose start is unknown wait for it (agent wall time, ns).
    pub orphan_timeout_ns: u64,
    /// Span events kept per span at most (more are counted in `dropped_events_count`).
    pub max_events: usize,
    /// Attributes kept per span at most.
    pub max_attributes: usize,
    /// Keep the raw TSC start/end in `weft.raw.start` / `weft.raw.end` (the calibration the
    /// process publishes already gives exact UNIX times; off by default: two attributes per span).
    pub raw_times: bool,
}

impl Default for AssemblerConfig {
    fn default() -> Self {
        AssemblerConfig {
            max_open: 65_536,
            orphan_timeout_ns: 2_000_000_000,
            max_events: 1024,
            max_attributes: 256,
            raw_times: false,
        }
    }
}

/// Counters of an [`Assembler`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AsmStats {
    /// Spans emitted (including incomplete ones and event spans).
    pub spans: u64,
    /// Of which: zero-length spans built from standalone events.
    pub event_spans: u64,
    /// Events attached to spans.
    pub span_events: u64,
    /// Spans emitted without their start or end.
    pub incomplete: u64,
    /// Open spans emitted early because of `max_open`.
    pub evicted: u64,
    /// Pins released because they held more than a quarter of a ring.
    pub pins_released: u64,
    /// Records whose tracepoint id was not in the registry.
    pub unknown_tracepoint: u64,
    /// Spans known only from annotations or events (neither start nor end seen, e.g. a remote
    /// context made current with `set_current`): dropped after the orphan timeout, counted.
    pub orphans_dropped: u64,
    /// Events and attributes past the per-span limits.
    pub truncated: u64,
    /// Spans whose endpoint named a service past the [`MAX_ENDPOINT_RESOURCES`] distinct ones
    /// kept: they keep the process's resource.
    pub endpoint_resources_full: u64,
}

/// Distinct endpoint services (each with its resource) one process's assembler keeps.
pub const MAX_ENDPOINT_RESOURCES: usize = 64;

impl AsmStats {
    /// Adds `other`'s counters to these (totals over processes).
    pub fn add(&mut self, other: &AsmStats) {
        self.spans += other.spans;
        self.event_spans += other.event_spans;
        self.span_events += other.span_events;
        self.incomplete += other.incomplete;
        self.evicted += other.evicted;
        self.pins_released += other.pins_released;
        self.unknown_tracepoint += other.unknown_tracepoint;
        self.orphans_dropped += other.orphans_dropped;
        self.truncated += other.truncated;
        self.endpoint_resources_full += other.endpoint_resources_full;
    }
}

struct Open {
    span: Span,
    has_start: bool,
    has_end: bool,
    /// Kind given at start (not internal): annotations do not override it.
    explicit_kind: bool,
    pins: Vec<(u32, u64)>,
    /// Agent wall time when first seen (orphan timeout).
    seen_ns: u64,
    raw_start: u64,
    raw_end: u64,
}

/// Builds spans from one process's records.
pub struct Assembler {
    id: ProcessIdentity,
    cfg: AssemblerConfig,
    resource: Arc<Resource>,
    scope: Arc<Scope>,
    endpoint_resources: HashMap<String, Arc<Resource>>,
    open: IdMap<u64, Open>,
    order: VecDeque<u64>,
    /// Per ring: (position, span) of pins in position order; entries of spans that ended are
    /// dropped lazily when they reach the front.
    pins: Vec<VecDeque<(u64, u64)>>,
    replay_closed: IdSet<u64>,
    seed: u64,
    tsc: bool,
    stats: AsmStats,
}

fn hash64(parts: &[u64]) -> u64 {
    // Deterministic across runs: the ids of synthesized spans stay the same when records are
    // replayed.
    parts.iter().fold(0, |h, &p| mix2(h, p))
}

fn value(v: &FieldValue<'_>) -> Value {
    match *v {
        FieldValue::I64(x) => Value::I64(x),
        FieldValue::U64(x) => match i64::try_from(x) {
            Ok(i) => Value::I64(i),
            Err(_) => Value::Str(x.to_string().into()),
        },
        FieldValue::F64(x) => Value::F64(x),
        FieldValue::Bool(b) => Value::Bool(b),
        FieldValue::Str(s) => Value::Str(s.into()),
        FieldValue::Bytes(b) => Value::Bytes(b.to_vec()),
    }
}

fn field_name(f: &Field<'_>, names: &[String], i: usize) -> String {
    match f.name {
        FieldName::Key(k) => k.to_string(),
        FieldName::Index(n) => names.get(n as usize).cloned().unwrap_or_else(|| format!("field{n}")),
        FieldName::None => format!("field{i}"),
    }
}

fn kind_of(k: weft_probe::SpanKind) -> SpanKind {
    match k {
        weft_probe::SpanKind::Internal => SpanKind::Internal,
        weft_probe::SpanKind::Server => SpanKind::Server,
        weft_probe::SpanKind::Client => SpanKind::Client,
        weft_probe::SpanKind::Producer => SpanKind::Producer,
        weft_probe::SpanKind::Consumer => SpanKind::Consumer,
    }
}

impl Assembler {
    /// An assembler for the process `id` whose records are timed by `clock`.
    pub fn new(id: ProcessIdentity, cfg: AssemblerConfig, clock: &Calibration) -> Assembler {
        let resource = Arc::new(id.resource(None));
        let seed = hash64(&[id.pid as u64, id.instance.len() as u64, {
            let mut h = IdHasher::default();
            id.instance.hash(&mut h);
            h.finish()
        }]);
        Assembler {
            id,
            cfg,
            resource,
            scope: Arc::new(Scope {
                name: "weft-probe".into(),
                version: env!("CARGO_PKG_VERSION").into(),
                ..Scope::default()
            }),
            endpoint_resources: HashMap::new(),
            open: IdMap::default(),
            order: VecDeque::new(),
            pins: Vec::new(),
            replay_closed: IdSet::default(),
            seed,
            tsc: cfg.raw_times && clock.kind == CLOCK_TSC,
            stats: AsmStats::default(),
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> AsmStats {
        self.stats
    }

    /// Who produces the records.
    pub fn identity(&self) -> &ProcessIdentity {
        &self.id
    }

    /// Spans currently open.
    pub fn open_spans(&self) -> usize {
        self.open.len()
    }

    /// Replay is over: forget the spans it saw end.
    pub fn end_replay(&mut self) {
        self.replay_closed = IdSet::default();
    }

    fn pin(&mut self, span_id: u64, ring: usize, pos: u64) {
        let Some(o) = self.open.get_mut(&span_id) else { return };
        if o.pins.iter().any(|&(r, _)| r as usize == ring) {
            return;
        }
        o.pins.push((ring as u32, pos));
        if self.pins.len() <= ring {
            self.pins.resize_with(ring + 1, VecDeque::new);
        }
        let q = &mut self.pins[ring];
        if q.back().is_none_or(|&(p, _)| p <= pos) {
            q.push_back((pos, span_id));
        } else {
            // (records are read in order; keep the queue sorted anyway)
            let i = q.partition_point(|&(p, _)| p <= pos);
            q.insert(i, (pos, span_id));
        }
    }

    /// Is the pin `(ring, pos)` of `span` still held?
    fn pinned(&self, ring: usize, pos: u64, span: u64) -> bool {
        self.open.get(&span).is_some_and(|o| o.pins.iter().any(|&(r, p)| r as usize == ring && p == pos))
    }

    /// Where ring `ring`'s tail may move, given that everything before `cursor` was processed:
    /// the first record of the oldest open span in that ring, but never more than a quarter of
    /// the ring (`capacity / 4`) behind `cursor` (older pins are released and counted).
    pub fn release_point(&mut self, ring: usize, cursor: u64, capacity: u64) -> u64 {
        loop {
            let Some(&(pos, span)) = self.pins.get(ring).and_then(VecDeque::front) else { return cursor };
            if !self.pinned(ring, pos, span) {
                self.pins[ring].pop_front();
                continue;
            }
            if cursor.wrapping_sub(pos) <= capacity / 4 {
                return pos.min(cursor);
            }
            self.pins[ring].pop_front();
            if let Some(o) = self.open.get_mut(&span) {
                o.pins.retain(|&(r, p)| !(r as usize == ring && p == pos));
            }
            self.stats.pins_released += 1;
        }
    }

    fn open_entry(&mut self, span_id: u64, trace_id: u128, now_ns: u64, out: &mut Vec<Span>) -> &mut Open {
        if !self.open.contains_key(&span_id) {
            if self.open.len() >= self.cfg.max_open {
                self.evict_oldest(out);
            }
            self.order.push_back(span_id);
            if self.order.len() > 2 * self.open.len() + 1024 {
                let open = &self.open;
                self.order.retain(|id| open.contains_key(id));
            }
            let span = Span {
                trace_id: TraceId::from_u128(trace_id),
                span_id: SpanId::from_u64(span_id),
                resource: self.resource.clone(),
                scope: self.scope.clone(),
                kind: SpanKind::Internal,
                ..Span::default()
            };
            self.open.insert(
                span_id,
                Open {
                    span,
                    has_start: false,
                    has_end: false,
                    explicit_kind: false,
                    pins: Vec::new(),
                    seen_ns: now_ns,
                    raw_start: 0,
                    raw_end: 0,
                },
            );
        }
        let o = self.open.get_mut(&span_id).expect("inserted above");
        if !o.span.trace_id.is_valid() && trace_id != 0 {
            o.span.trace_id = TraceId::from_u128(trace_id);
        }
        o
    }

    fn evict_oldest(&mut self, out: &mut Vec<Span>) {
        while let Some(id) = self.order.pop_front() {
            if let Some(o) = self.open.remove(&id) {
                self.stats.evicted += 1;
                self.finish(o, true, out);
                return;
            }
        }
    }

    fn set_attrs(&mut self, span_id: u64, rec: &Record<'_>, names: &[String]) {
        let max = self.cfg.max_attributes;
        let Some(o) = self.open.get_mut(&span_id) else { return };
        for (i, f) in rec.fields.iter().enumerate() {
            if o.span.attributes.len() >= max {
                o.span.dropped_attributes_count += 1;
                self.stats.truncated += 1;
                continue;
            }
            o.span.attributes.set(field_name(f, names, i), value(&f.value));
        }
    }

    /// Process one record read at `pos` of `ring`. `replay` = the record lies before the stored
    /// bookmark: rebuild state, emit nothing new. `now_ns` is the agent's wall clock.
    #[allow(clippy::too_many_arguments)]
    pub fn record(
        &mut self,
        ring: usize,
        pos: u64,
        rec: &Record<'_>,
        replay: bool,
        tps: &TpTable,
        clock: &Calibration,
        now_ns: u64,
        out: &mut Vec<Span>,
    ) {
        let ts = clock.to_unix_ns(rec.timestamp);
        let meta = tps.get(rec.tracepoint);
        if meta.is_none() {
            self.stats.unknown_tracepoint += 1;
        }
        let tp_name: Arc<str> = match meta {
            Some(m) => m.name.clone(),
            None => format!("tracepoint#{}", rec.tracepoint).into(),
        };
        let no_names: &[String] = &[];
        let names = meta.map(|m| m.fields.as_slice()).unwrap_or(no_names);
        let sid = rec.span_id;
        match rec.kind {
            RecordKind::SpanStart => {
                if sid == 0 {
                    return;
                }
                if replay && self.replay_closed.remove(&sid) {
                    return;
                }
                let tsc = self.tsc;
                let o = self.open_entry(sid, rec.trace_id, now_ns, out);
                o.has_start = true;
                o.span.name = Str::from(&*tp_name);
                o.span.start_ns = ts;
                if tsc {
                    o.raw_start = rec.timestamp;
                }
                o.span.parent_span_id =
                    (rec.parent_span_id != 0).then(|| SpanId::from_u64(rec.parent_span_id));
                let k = rec.span_kind();
                o.explicit_kind = k != weft_probe::SpanKind::Internal;
                o.span.kind = kind_of(k);
                if rec.remote_parent() {
                    o.span.flags |= FLAGS_REMOTE_PARENT;
                }
                o.span.attributes.set(conv::THREAD_ID, rec.tid as i64);
                self.set_attrs(sid, rec, names);
                self.pin(sid, ring, pos);
                self.maybe_finish(sid, replay, out);
            }
            RecordKind::SpanEnd => {
                if sid == 0 {
                    return;
                }
                if !self.open.contains_key(&sid) && replay {
                    self.replay_closed.insert(sid);
                    return;
                }
                let tsc = self.tsc;
                let o = self.open_entry(sid, rec.trace_id, now_ns, out);
                o.has_end = true;
                o.span.end_ns = ts;
                if tsc {
                    o.raw_end = rec.timestamp;
                }
                if o.span.name.is_empty() {
                    o.span.name = Str::from(&*tp_name);
                }
                self.set_attrs(sid, rec, names);
                self.pin(sid, ring, pos);
                self.maybe_finish(sid, replay, out);
            }
            RecordKind::Annotation | RecordKind::KeyValue | RecordKind::Endpoint => {
                if sid == 0 {
                    return;
                }
                if !self.open.contains_key(&sid) && replay {
                    // already emitted before the restart, or its start was released
                    return;
                }
                self.open_entry(sid, rec.trace_id, now_ns, out);
                self.pin(sid, ring, pos);
                match rec.kind {
                    RecordKind::Annotation => {
                        let text = match rec.fields.first().map(|f| f.value) {
                            Some(FieldValue::Str(s)) => Str::from(s),
                            Some(other) => value(&other).to_string().into(),
                            None => Str::default(),
                        };
                        self.add_event(sid, SpanEvent { time_ns: ts, name: text, ..SpanEvent::default() });
                    }
                    RecordKind::KeyValue => self.set_attrs(sid, rec, names),
                    _ => self.endpoint(sid, rec),
                }
            }
            RecordKind::Event => {
                if sid != 0 && self.open.contains_key(&sid) {
                    let mut attributes = Attributes::new();
                    for (i, f) in rec.fields.iter().enumerate() {
                        attributes.push(field_name(f, names, i), value(&f.value));
                    }
                    attributes.push(conv::THREAD_ID, rec.tid as i64);
                    self.add_event(
                        sid,
                        SpanEvent {
                            time_ns: ts,
                            name: Str::from(&*tp_name),
                            attributes,
                            ..SpanEvent::default()
                        },
                    );
                    self.pin(sid, ring, pos);
                    return;
                }
                if replay {
                    return;
                }
                let span_id = hash64(&[self.seed, ring as u64, pos, rec.timestamp]);
                let trace = if rec.trace_id != 0 {
                    rec.trace_id
                } else {
                    ((hash64(&[self.seed, pos, ring as u64, 1]) as u128) << 64)
                        | hash64(&[self.seed, rec.timestamp, 2]) as u128
                };
                let mut span = Span {
                    trace_id: TraceId::from_u128(trace),
                    span_id: SpanId::from_u64(span_id),
                    parent_span_id: (sid != 0).then(|| SpanId::from_u64(sid)),
                    name: Str::from(&*tp_name),
                    kind: SpanKind::Internal,
                    start_ns: ts,
                    end_ns: ts,
                    resource: self.resource.clone(),
                    scope: self.scope.clone(),
                    ..Span::default()
                };
                for (i, f) in rec.fields.iter().enumerate() {
                    span.attributes.set(field_name(f, names, i), value(&f.value));
                }
                span.attributes.set(conv::THREAD_ID, rec.tid as i64);
                span.attributes.set(PROBE_EVENT, true);
                if self.tsc {
                    span.attributes.set(conv::RAW_START, rec.timestamp as i64);
                }
                self.stats.spans += 1;
                self.stats.event_spans += 1;
                out.push(span);
            }
        }
    }

    fn add_event(&mut self, sid: u64, ev: SpanEvent) {
        let max = self.cfg.max_events;
        let Some(o) = self.open.get_mut(&sid) else { return };
        if o.span.events.len() >= max {
            o.span.dropped_events_count += 1;
            self.stats.truncated += 1;
            return;
        }
        o.span.events.push(ev);
        self.stats.span_events += 1;
    }

    fn endpoint(&mut self, sid: u64, rec: &Record<'_>) {
        let mut service = None;
        let mut attrs = Vec::new();
        for f in &rec.fields {
            match (f.name, f.value) {
                (FieldName::Key("service"), FieldValue::Str(s)) => service = Some(s.to_string()),
                (FieldName::Key("ip"), FieldValue::Str(s)) if !s.is_empty() => {
                    attrs.push((conv::LOCAL_IPV4, Value::Str(s.into())))
                }
                (FieldName::Key("port"), v) => attrs.push((conv::LOCAL_PORT, value(&v))),
                _ => {}
            }
        }
        let res = match service {
            Some(s) if !s.is_empty() && s != self.id.service => {
                if let Some(r) = self.endpoint_resources.get(&s) {
                    Some(r.clone())
                } else if self.endpoint_resources.len() < MAX_ENDPOINT_RESOURCES {
                    let r = Arc::new(self.id.resource(Some(&s)));
                    self.endpoint_resources.insert(s, r.clone());
                    Some(r)
                } else {
                    self.stats.endpoint_resources_full += 1;
                    None
                }
            }
            _ => None,
        };
        let Some(o) = self.open.get_mut(&sid) else { return };
        for (k, v) in attrs {
            o.span.attributes.set(k, v);
        }
        if let Some(r) = res {
            o.span.resource = r;
        }
    }

    fn maybe_finish(&mut self, sid: u64, replay: bool, out: &mut Vec<Span>) {
        let done = self.open.get(&sid).is_some_and(|o| o.has_start && o.has_end);
        if !done {
            return;
        }
        let Some(o) = self.open.remove(&sid) else { return };
        if replay {
            // emitted before the restart (its pins go lazily)
            return;
        }
        self.finish(o, false, out);
    }

    fn finish(&mut self, mut o: Open, forced: bool, out: &mut Vec<Span>) {
        if !o.has_start && !o.has_end {
            // Its id may be another process's span: emitting it would duplicate that span.
            self.stats.orphans_dropped += 1;
            return;
        }
        let s = &mut o.span;
        if !o.explicit_kind && s.kind == SpanKind::Internal {
            let has = |n: &str| s.events.iter().any(|e| e.name == n);
            if has("sr") || has("ss") {
                s.kind = SpanKind::Server;
            } else if has("cs") || has("cr") {
                s.kind = SpanKind::Client;
            }
        }
        let last_event = s.events.iter().map(|e| e.time_ns).max();
        let first_event = s.events.iter().map(|e| e.time_ns).min();
        if !o.has_start {
            s.start_ns = first_event.unwrap_or(s.end_ns).min(if o.has_end { s.end_ns } else { u64::MAX });
            if s.name.is_empty() {
                s.name = "unknown".into();
            }
        }
        if !o.has_end {
            s.end_ns = last_event.unwrap_or(s.start_ns).max(s.start_ns);
        }
        if !o.has_start || !o.has_end || forced {
            s.attributes.set(conv::INCOMPLETE, true);
            self.stats.incomplete += 1;
        }
        if self.tsc {
            if o.raw_start != 0 {
                s.attributes.set(conv::RAW_START, o.raw_start as i64);
            }
            if o.raw_end != 0 {
                s.attributes.set(conv::RAW_END, o.raw_end as i64);
            }
        }
        if !s.trace_id.is_valid() {
            s.trace_id = TraceId::from_u128(((self.seed as u128) << 64) | s.span_id.to_u64() as u128);
        }
        self.stats.spans += 1;
        out.push(o.span);
    }

    /// Emit (incomplete) the spans whose start has not arrived within the orphan timeout.
    pub fn sweep(&mut self, now_ns: u64, out: &mut Vec<Span>) {
        let limit = self.cfg.orphan_timeout_ns;
        let stale: Vec<u64> = self
            .open
            .iter()
            .filter(|(_, o)| !o.has_start && now_ns.saturating_sub(o.seen_ns) > limit)
            .map(|(&id, _)| id)
            .collect();
        for id in stale {
            if let Some(o) = self.open.remove(&id) {
                self.finish(o, false, out);
            }
        }
    }

    /// Emit every open span (the process is gone and its rings are drained).
    pub fn flush_all(&mut self, out: &mut Vec<Span>) {
        let mut ids: Vec<u64> = self.order.drain(..).filter(|id| self.open.contains_key(id)).collect();
        ids.dedup();
        for id in ids {
            if let Some(o) = self.open.remove(&id) {
                self.finish(o, false, out);
            }
        }
        for (_, o) in std::mem::take(&mut self.open) {
            self.finish(o, false, out);
        }
    }
}

/// A weft-probe capture file could not be turned into spans.
#[derive(Debug, thiserror::Error)]
pub enum CaptureImportError {
    /// The file is not a readable capture.
    #[error(transparent)]
    Capture(#[from] weft_probe::capture::CaptureError),
    /// A record does not decode (strict mode; lenient mode counts it).
    #[error("{path}: records chunk {chunk}, byte {offset}: {error}")]
    Record {
        /// The capture.
        path: PathBuf,
        /// Index of the RECORDS chunk.
        chunk: usize,
        /// Byte offset of the record inside the chunk.
        offset: usize,
        /// Why it does not decode.
        error: weft_probe::consumer::RecordError,
    },
    /// The capture has no INFO chunk: its times cannot be converted.
    #[error("{path}: no INFO chunk (process and clock calibration)")]
    NoInfo {
        /// The capture.
        path: PathBuf,
    },
}

/// Options of [`assemble_capture`].
#[derive(Debug, Clone, Default)]
pub struct CaptureOptions {
    /// Stop at the first record that does not decode (default: skip it and count it).
    pub strict: bool,
    /// Also hand every record over as a raw [`Event`] (a tracepoint event).
    pub events: bool,
    /// Source id stamped on those events.
    pub source: SourceId,
    /// `host.name` of the process's resource (empty: none).
    pub host: String,
    /// Bounds of the assembler.
    pub assembler: AssemblerConfig,
}

/// What [`assemble_capture`] did with one capture.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CaptureStats {
    /// Records decoded.
    pub records: u64,
    /// Records that did not decode (skipped; the rest of their chunk too, as the record
    /// lengths chain).
    pub bad_records: u64,
    /// The first few decoding errors.
    pub error_samples: Vec<String>,
    /// Records the process dropped before they reached the file (its rings were full).
    pub producer_dropped: u64,
    /// The assembler's counters.
    pub assembler: AsmStats,
    /// First and last record time (ns since the epoch); `first > last` when there were none.
    pub first_ns: u64,
    /// See `first_ns`.
    pub last_ns: u64,
}

/// Records per batch handed to the caller.
const CAPTURE_BATCH: usize = 4096;

/// Assembles the spans of a capture that weft-probe wrote in in-process mode
/// ([`weft_probe::capture`]: one process, no agent): the process identity comes from the INFO
/// chunk (`service.instance.id` is `<pid>-<file stem>`), tracepoint names from the last
/// REGISTRY chunk, times from the last INFO chunk's calibration. Every [`CAPTURE_BATCH`]
/// records, `emit` gets the records as events (with [`CaptureOptions::events`]) and the spans
/// finished so far; open spans are emitted (marked incomplete) at the end.
///
/// With `events`, each record becomes a tracepoint [`Event`] named by its tracepoint, with its
/// fields and `weft.probe.record` (`event`, `span_start`, `span_end`, `annotation`, `kv`,
/// `endpoint`), `weft.probe.trace_id` and `weft.probe.span_id` (hex, when set).
pub fn assemble_capture<E: From<CaptureImportError>>(
    cap: &Capture,
    path: &Path,
    opts: &CaptureOptions,
    mut emit: impl FnMut(&[Event], &mut Vec<Span>) -> Result<(), E>,
) -> Result<CaptureStats, E> {
    let clock = cap.clock.ok_or_else(|| CaptureImportError::NoInfo { path: path.to_path_buf() })?;
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let id = ProcessIdentity {
        pid: cap.pid,
        service: cap.service.clone(),
        exe: String::new(),
        instance: format!("{}-{stem}", cap.pid),
        host: opts.host.clone(),
    };
    let tps = TpTable::new(&cap.tracepoints);
    let mut asm = Assembler::new(id, opts.assembler, &clock);
    let mut stats =
        CaptureStats { producer_dropped: cap.dropped, first_ns: u64::MAX, ..CaptureStats::default() };
    let mut events = Vec::new();
    let mut spans = Vec::new();
    for (pos, r) in cap.records().enumerate() {
        let rec = match r {
            Ok(rec) => rec,
            Err((chunk, offset, error)) => {
                if opts.strict {
                    return Err(CaptureImportError::Record {
                        path: path.to_path_buf(),
                        chunk,
                        offset,
                        error,
                    }
                    .into());
                }
                stats.bad_records += 1;
                if stats.error_samples.len() < 5 {
                    stats.error_samples.push(format!("records chunk {chunk}, byte {offset}: {error}"));
                }
                continue;
            }
        };
        stats.records += 1;
        let t = clock.to_unix_ns(rec.timestamp);
        stats.first_ns = stats.first_ns.min(t);
        stats.last_ns = stats.last_ns.max(t);
        // One ring, positions in file order: replay and pins are an agent's concern.
        asm.record(0, pos as u64, &rec, false, &tps, &clock, 0, &mut spans);
        if opts.events {
            events.push(record_event(&rec, t, &tps, cap.pid, opts.source));
        }
        if stats.records.is_multiple_of(CAPTURE_BATCH as u64) {
            asm.release_point(0, pos as u64, u64::MAX);
            emit(&events, &mut spans)?;
            events.clear();
            spans.clear();
        }
    }
    asm.flush_all(&mut spans);
    emit(&events, &mut spans)?;
    stats.assembler = asm.stats();
    Ok(stats)
}

fn record_event(rec: &Record<'_>, time_ns: u64, tps: &TpTable, pid: u32, source: SourceId) -> Event {
    let meta = tps.get(rec.tracepoint);
    let names = meta.map(|m| m.fields.as_slice()).unwrap_or(&[]);
    let mut fields = Attributes::new();
    fields.push(
        "weft.probe.record",
        match rec.kind {
            RecordKind::Event => "event",
            RecordKind::SpanStart => "span_start",
            RecordKind::SpanEnd => "span_end",
            RecordKind::Annotation => "annotation",
            RecordKind::KeyValue => "kv",
            RecordKind::Endpoint => "endpoint",
        },
    );
    if rec.trace_id != 0 {
        fields.push("weft.probe.trace_id", TraceId::from_u128(rec.trace_id).to_string());
    }
    if rec.span_id != 0 {
        fields.push("weft.probe.span_id", SpanId::from_u64(rec.span_id).to_string());
    }
    for (i, f) in rec.fields.iter().enumerate() {
        fields.push(field_name(f, names, i), value(&f.value));
    }
    Event {
        time_ns,
        raw_time: rec.timestamp,
        source,
        kind: EventKind::Tracepoint(TracepointEvent {
            name: meta
                .map(|m| m.name.clone())
                .unwrap_or_else(|| format!("tracepoint#{}", rec.tracepoint).into()),
            cpu: None,
            pid: Some(pid),
            tid: Some(rec.tid),
            fields,
        }),
    }
}

/// A weft-probe capture file, read whole: what [`CaptureFiles`] produces and [`ProbeStage`]
/// assembles.
#[derive(Debug)]
pub struct CaptureFile {
    /// Where it was read from.
    pub path: PathBuf,
    /// Its chunks.
    pub capture: Capture,
}

/// A pipeline source of capture files, read one at a time (a batch is one file: with a queue
/// of one batch, at most a few captures are in memory at once).
#[derive(Debug)]
pub struct CaptureFiles {
    name: String,
    path: PathBuf,
    files: VecDeque<PathBuf>,
}

impl CaptureFiles {
    /// The captures `files`, found at `path` (a file or directory, for progress), named `name`.
    pub fn new(name: &str, path: &Path, files: Vec<PathBuf>) -> CaptureFiles {
        CaptureFiles { name: name.to_owned(), path: path.to_path_buf(), files: files.into() }
    }
}

impl EventSource<CaptureFile> for CaptureFiles {
    fn name(&self) -> &str {
        &self.name
    }
    fn path(&self) -> &Path {
        &self.path
    }
    fn open(&mut self, progress: &SourceProgress) -> Result<(), String> {
        let total = self.files.iter().filter_map(|f| std::fs::metadata(f).ok()).map(|m| m.len()).sum();
        progress.total_bytes.store(total, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
    fn next_batch(
        &mut self,
        batch: &mut Vec<CaptureFile>,
        progress: &SourceProgress,
    ) -> Result<bool, String> {
        let Some(path) = self.files.pop_front() else { return Ok(false) };
        let capture = Capture::read(&path).map_err(|e| e.to_string())?;
        let len = std::fs::metadata(&path).map_or(0, |m| m.len());
        progress.counters.bytes.fetch_add(len, std::sync::atomic::Ordering::Relaxed);
        batch.push(CaptureFile { path, capture });
        Ok(!self.files.is_empty())
    }
}

/// What [`ProbeStage`] did with one capture file.
#[derive(Debug, Clone)]
pub struct CaptureReport {
    /// The file.
    pub path: PathBuf,
    /// The process's service.
    pub service: String,
    /// The process's pid.
    pub pid: u32,
    /// Tracepoints registered.
    pub tracepoints: usize,
    /// Records, errors, the assembler's counters.
    pub stats: CaptureStats,
}

/// Where [`ProbeStage`] hands the records as events ([`CaptureOptions::events`]).
pub type EventTap = Box<dyn FnMut(&[Event]) -> Result<(), StageError> + Send>;

/// The weave stage of `weft import probe`: assembles every capture file it gets
/// ([`assemble_capture`]); the records as events go to the tap, if any.
pub struct ProbeStage {
    opts: CaptureOptions,
    tap: Option<EventTap>,
    reports: Vec<CaptureReport>,
}

impl ProbeStage {
    /// A stage assembling with `opts`; with `tap` (and [`CaptureOptions::events`]) the records
    /// as events go to it.
    pub fn new(opts: CaptureOptions, tap: Option<EventTap>) -> ProbeStage {
        ProbeStage { opts, tap, reports: Vec::new() }
    }
}

impl WeaveStage for ProbeStage {
    type Item = CaptureFile;
    type Report = Vec<CaptureReport>;
    fn push(&mut self, files: &[CaptureFile], out: &mut Vec<Span>) -> Result<(), StageError> {
        for f in files {
            let tap = &mut self.tap;
            let stats = assemble_capture(
                &f.capture,
                &f.path,
                &self.opts,
                |events, spans| -> Result<(), StageError> {
                    if let Some(tap) = tap.as_mut() {
                        tap(events)?;
                    }
                    out.append(spans);
                    Ok(())
                },
            )?;
            self.reports.push(CaptureReport {
                path: f.path.clone(),
                service: f.capture.service.clone(),
                pid: f.capture.pid,
                tracepoints: f.capture.tracepoints.len(),
                stats,
            });
        }
        Ok(())
    }
    fn finish(&mut self, _out: &mut Vec<Span>) -> Result<(), StageError> {
        Ok(())
    }
    fn into_report(self) -> Vec<CaptureReport> {
        self.reports
    }
}
