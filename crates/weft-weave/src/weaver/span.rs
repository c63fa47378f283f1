//! Spans under construction ([`Building`]), the per-component identity they are closed
//! with ([`Ident`]) and what every weaver shares while handling one event ([`Cx`]), including
//! closing a span: header attributes, span events, counters, then the assembler.

use std::sync::Arc;

use weft_model::event::EventKind;
use weft_model::{Attributes, Event, Resource, Scope, Span, SpanEvent, SpanKind, Value, conv};

use super::links::Links;
use super::{SpanEvents, WeaveStats, attr};
use crate::assemble::{Assembler, LocalId};

/// A span being built.
#[derive(Debug)]
pub(crate) struct Building {
    pub id: LocalId,
    pub name: Option<String>,
    pub stype: &'static str,
    pub start_ns: u64,
    pub end_ns: u64,
    pub start_raw: u64,
    pub end_raw: u64,
    /// The opening event (kept inline: most spans group one or two events, and a `Vec`
    /// holding just it would cost an allocation per span).
    pub first: Event,
    /// The events after the first, up to the span-event limit.
    pub more: Vec<Event>,
    pub dropped_events: u32,
    pub attrs: Attributes,
    pub causes: Vec<LocalId>,
    pub incomplete: bool,
}

/// Attributes [`Cx::close`] puts before a span's own: type, component, raw start and end,
/// and `weft.incomplete` when set.
const HEADER_ATTRS: usize = 5;

impl Building {
    /// A span opened by `ev`, with room for 6 attributes of its own (more than most host
    /// and NIC spans have).
    pub fn new(id: LocalId, stype: &'static str, ev: &Event) -> Self {
        Self::with_capacity(id, stype, ev, 6)
    }

    /// A span opened by `ev`, with room for `attrs` attributes of its own (and the header
    /// [`Cx::close`] adds, so that closing does not reallocate unless it marks the span
    /// incomplete).
    pub fn with_capacity(id: LocalId, stype: &'static str, ev: &Event, attrs: usize) -> Self {
        Building {
            id,
            name: None,
            stype,
            start_ns: ev.time_ns,
            end_ns: ev.time_ns,
            start_raw: ev.raw_time,
            end_raw: ev.raw_time,
            first: ev.clone(),
            more: Vec::new(),
            dropped_events: 0,
            attrs: Attributes(Vec::with_capacity(attrs + header_len())),
            causes: Vec::new(),
            incomplete: false,
        }
    }

    pub fn add(&mut self, ev: &Event, max_events: usize) {
        self.end_ns = self.end_ns.max(ev.time_ns);
        self.end_raw = self.end_raw.max(ev.raw_time);
        if 1 + self.more.len() < max_events {
            self.more.push(ev.clone());
        } else {
            self.dropped_events += 1;
        }
    }

    pub fn attr(&mut self, key: &'static str, v: impl Into<Value>) {
        self.attrs.push(key, v);
    }
}

/// The header attributes always present (see [`HEADER_ATTRS`]).
const fn header_len() -> usize {
    HEADER_ATTRS - 1
}

/// A u64 as an OTLP int (two's complement above i64::MAX, as every OTLP exporter does).
pub(crate) fn int(v: u64) -> Value {
    Value::I64(v as i64)
}

fn span_event(e: &Event, detail: SpanEvents) -> SpanEvent {
    let attributes = match (detail, &e.kind) {
        (SpanEvents::Full, _) => {
            let mut f = e.fields();
            f.push(attr::RAW_TIME, int(e.raw_time));
            f
        }
        (_, EventKind::Host(weft_model::event::HostEvent::Call { func, .. })) => {
            let mut f = Attributes(Vec::with_capacity(2));
            f.push("func", func.as_ref());
            f.push(attr::RAW_TIME, int(e.raw_time));
            f
        }
        _ => {
            let mut f = Attributes(Vec::with_capacity(1));
            f.push(attr::RAW_TIME, int(e.raw_time));
            f
        }
    };
    SpanEvent {
        time_ns: e.time_ns,
        name: e.type_name().to_owned().into(),
        attributes,
        ..SpanEvent::default()
    }
}

/// Per-component output identity.
#[derive(Debug, Clone)]
pub(crate) struct Ident {
    pub source: usize,
    pub component: Arc<str>,
    pub resource: Arc<Resource>,
    pub scope: Arc<Scope>,
}

impl Ident {
    pub(super) fn new(
        source: usize,
        name: &str,
        instance: &str,
        kind: &str,
        tool: &str,
        scope: &str,
    ) -> Self {
        let mut a = Attributes::new();
        a.push(conv::SERVICE_NAME, name);
        a.push(conv::SERVICE_INSTANCE_ID, instance);
        a.push(conv::COMPONENT_KIND, kind);
        a.push(conv::SOURCE_TOOL, tool);
        Ident {
            source,
            component: Arc::from(name),
            resource: Arc::new(Resource { attributes: a, ..Resource::default() }),
            scope: Arc::new(Scope {
                name: scope.to_owned(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
                ..Scope::default()
            }),
        }
    }
}

/// What weavers share while handling one event.
pub(crate) struct Cx<'a> {
    pub asm: &'a mut Assembler,
    pub links: &'a mut Links,
    pub stats: &'a mut WeaveStats,
    pub out: &'a mut Vec<Span>,
    pub max_events: usize,
    pub max_open: usize,
    pub detail: SpanEvents,
}

impl Cx<'_> {
    /// Finishes `b` as a span of `who` (component `comp`) and hands it to the assembler.
    pub fn close(&mut self, b: Building, who: &Ident, comp: &Arc<str>) {
        let Building {
            id,
            name,
            stype,
            start_ns,
            end_ns,
            start_raw,
            end_raw,
            first,
            more,
            dropped_events,
            attrs,
            causes,
            incomplete,
        } = b;
        // The header goes in front of the span's own attributes, in the vector they are in
        // (built with room for it).
        let mut a = attrs;
        let header = [
            weft_model::KeyValue::new(conv::SPAN_TYPE, stype),
            weft_model::KeyValue::new(conv::COMPONENT, comp.as_ref()),
            weft_model::KeyValue::new(conv::RAW_START, int(start_raw)),
            weft_model::KeyValue::new(conv::RAW_END, int(end_raw)),
        ];
        a.0.splice(0..0, header);
        if incomplete {
            a.0.insert(header_len(), weft_model::KeyValue::new(conv::INCOMPLETE, true));
            self.stats.incomplete += 1;
        }
        let detail = self.detail;
        let span_events = match detail {
            SpanEvents::None => Vec::new(),
            _ => {
                let mut v = Vec::with_capacity(1 + more.len());
                v.push(span_event(&first, detail));
                v.extend(more.iter().map(|e| span_event(e, detail)));
                v
            }
        };
        let span = Span {
            name: name.unwrap_or_else(|| stype.to_owned()).into(),
            kind: SpanKind::Internal,
            start_ns,
            end_ns,
            attributes: a,
            events: span_events,
            dropped_events_count: dropped_events,
            ..Span::with_context(who.resource.clone(), who.scope.clone())
        };
        *self.stats.spans_by_type.entry(stype).or_default() += 1;
        if let Some(c) = self.stats.spans_by_source.get_mut(who.source) {
            *c += 1;
        }
        self.asm.close(id, span, causes, self.out);
    }

    pub fn anomaly(&mut self, what: &'static str) {
        self.stats.anomalies.add(what, 1);
    }
}
