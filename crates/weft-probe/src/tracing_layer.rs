//! A `tracing-subscriber` layer that records `tracing` spans and events through weft-probe
//! (feature `tracing`).
//!
//! Each `tracing` callsite becomes a dynamic tracepoint (name `target:name`, group = target,
//! level mapped, fields = the callsite's field names), so it is listed and switchable like any
//! other — by name, glob, level or group, in-process or from the agent. Switching rebuilds
//! `tracing`'s interest cache, so a disabled callsite costs what a disabled `tracing` callsite
//! costs. Callsites at or above the layer's default level start enabled.
//!
//! Spans: creation writes SPAN_START (parent = the `tracing` parent if it is recorded by this
//! layer, else the thread's current weft span), entering makes it the thread's current context
//! (so weft tracepoints and spans nest under it), closing writes SPAN_END, `Span::record` writes
//! a KV record. Events write EVENT records with inline-keyed fields. Field values formatted with
//! `Debug` are rendered into a small heap string: this path allocates, unlike `event!`.
//!
//! The layer decides interest for the whole subscriber: use it alone, or give other layers
//! per-layer filters.

use crate::layout::{KIND_KV, KIND_SPAN_END};
use crate::registry;
use crate::span::SpanKind;
use crate::thread;
use crate::tracepoint::{FLAG_DEFAULT_ON, FLAG_SPAN, Level, Tracepoint};
use crate::value::KeyedValue;
use std::collections::HashMap;
use std::sync::{Mutex, RwLock};
use tracing_core::field::{Field, Visit};
use tracing_core::span::{Attributes, Id, Record};
use tracing_core::subscriber::Interest;
use tracing_core::{Event, Metadata, Subscriber};
use tracing_subscriber::layer::{Context as LayerContext, Layer};
use tracing_subscriber::registry::LookupSpan;

/// The layer. `WeftLayer::new()` enables callsites at `info` and more severe by default.
#[derive(Debug, Clone)]
pub struct WeftLayer {
    default_level: Level,
}

impl Default for WeftLayer {
    fn default() -> Self {
        WeftLayer::new()
    }
}

static CALLSITES: RwLock<Option<HashMap<usize, &'static Tracepoint>>> = RwLock::new(None);
static CREATE: Mutex<()> = Mutex::new(());

fn map_level(l: &tracing_core::Level) -> Level {
    match *l {
        tracing_core::Level::ERROR => Level::Error,
        tracing_core::Level::WARN => Level::Warn,
        tracing_core::Level::INFO => Level::Info,
        tracing_core::Level::DEBUG => Level::Debug,
        _ => Level::Trace,
    }
}

impl WeftLayer {
    pub fn new() -> WeftLayer {
        registry::set_dynamic_hook(tracing_core::callsite::rebuild_interest_cache);
        WeftLayer { default_level: Level::Info }
    }

    /// Callsites at this level or more severe start enabled.
    pub fn with_default_level(mut self, level: Level) -> WeftLayer {
        self.default_level = level;
        self
    }

    fn tracepoint(&self, meta: &'static Metadata<'static>) -> &'static Tracepoint {
        let key = meta as *const Metadata<'static> as usize;
        if let Some(tp) = CALLSITES.read().ok().and_then(|m| m.as_ref().and_then(|m| m.get(&key).copied())) {
            return tp;
        }
        let _g = CREATE.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tp) = CALLSITES.read().ok().and_then(|m| m.as_ref().and_then(|m| m.get(&key).copied())) {
            return tp;
        }
        let level = map_level(meta.level());
        let mut flags = if level <= self.default_level { FLAG_DEFAULT_ON } else { 0 };
        if meta.is_span() {
            flags |= FLAG_SPAN;
        }
        let fields: Vec<&str> = meta.fields().iter().map(|f| f.name()).collect();
        let name = format!("{}:{}", meta.target(), meta.name());
        let tp = registry::register_dynamic(&name, level, meta.target(), &fields.join(","), flags);
        if let Ok(mut m) = CALLSITES.write() {
            m.get_or_insert_with(HashMap::new).insert(key, tp);
        }
        tp
    }
}

/// Per-span data kept in the `tracing` registry's extensions.
struct WeftSpan {
    tp: &'static Tracepoint,
    trace: u128,
    span: u64,
    /// Contexts to restore on exit (a span may be entered re-entrantly).
    prev: Vec<(u128, u64)>,
}

/// Collects fields as owned (key, value) pairs.
#[derive(Default)]
struct Fields {
    items: Vec<(&'static str, Owned)>,
}

enum Owned {
    I64(i64),
    U64(u64),
    F64(f64),
    Bool(bool),
    Str(String),
}

impl Fields {
    fn as_keyed(&self) -> Vec<(&str, KeyedValue<'_>)> {
        self.items
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    Owned::I64(x) => KeyedValue::I64(*x),
                    Owned::U64(x) => KeyedValue::U64(*x),
                    Owned::F64(x) => KeyedValue::F64(*x),
                    Owned::Bool(x) => KeyedValue::Bool(*x),
                    Owned::Str(s) => KeyedValue::Str(s),
                };
                (*k, v)
            })
            .collect()
    }
}

impl Visit for Fields {
    fn record_i64(&mut self, f: &Field, v: i64) {
        self.items.push((f.name(), Owned::I64(v)));
    }
    fn record_u64(&mut self, f: &Field, v: u64) {
        self.items.push((f.name(), Owned::U64(v)));
    }
    fn record_f64(&mut self, f: &Field, v: f64) {
        self.items.push((f.name(), Owned::F64(v)));
    }
    fn record_bool(&mut self, f: &Field, v: bool) {
        self.items.push((f.name(), Owned::Bool(v)));
    }
    fn record_str(&mut self, f: &Field, v: &str) {
        self.items.push((f.name(), Owned::Str(v.to_string())));
    }
    fn record_debug(&mut self, f: &Field, v: &dyn std::fmt::Debug) {
        self.items.push((f.name(), Owned::Str(format!("{v:?}"))));
    }
}

impl<S> Layer<S> for WeftLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
        if self.tracepoint(meta).enabled() { Interest::always() } else { Interest::never() }
    }

    fn enabled(&self, meta: &Metadata<'_>, _ctx: LayerContext<'_, S>) -> bool {
        let key = meta as *const Metadata<'_> as usize;
        CALLSITES
            .read()
            .ok()
            .and_then(|m| m.as_ref().and_then(|m| m.get(&key).copied()))
            .is_some_and(|tp| tp.enabled())
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: LayerContext<'_, S>) {
        let tp = self.tracepoint(attrs.metadata());
        if !tp.enabled() {
            return;
        }
        let parent_ids = if let Some(pid) = attrs.parent() {
            ctx.span(pid).and_then(|s| s.extensions().get::<WeftSpan>().map(|w| (w.trace, w.span)))
        } else if attrs.is_contextual() {
            ctx.lookup_current().and_then(|s| s.extensions().get::<WeftSpan>().map(|w| (w.trace, w.span)))
        } else {
            None
        };
        let (trace, parent) = match parent_ids {
            Some(p) => p,
            None => {
                let (t, s) = thread::current_ids();
                if t != 0 {
                    (t, s)
                } else {
                    (((thread::random_id() as u128) << 64) | thread::random_id() as u128, 0)
                }
            }
        };
        let span_id = thread::random_id();
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        crate::span::start_keyed(tp, SpanKind::Internal, trace, span_id, parent, &fields.as_keyed());
        if let Some(s) = ctx.span(id) {
            s.extensions_mut().insert(WeftSpan { tp, trace, span: span_id, prev: Vec::new() });
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: LayerContext<'_, S>) {
        let Some(s) = ctx.span(id) else { return };
        let ext = s.extensions();
        let Some(w) = ext.get::<WeftSpan>() else { return };
        let mut fields = Fields::default();
        values.record(&mut fields);
        crate::span::span_record_keyed(w.tp, KIND_KV, w.trace, w.span, &fields.as_keyed());
    }

    fn on_enter(&self, id: &Id, ctx: LayerContext<'_, S>) {
        let Some(s) = ctx.span(id) else { return };
        let mut ext = s.extensions_mut();
        if let Some(w) = ext.get_mut::<WeftSpan>() {
            let prev = thread::swap_ids(w.trace, w.span);
            w.prev.push(prev);
        }
    }

    fn on_exit(&self, id: &Id, ctx: LayerContext<'_, S>) {
        let Some(s) = ctx.span(id) else { return };
        let mut ext = s.extensions_mut();
        if let Some(w) = ext.get_mut::<WeftSpan>()
            && let Some((t, sp)) = w.prev.pop()
        {
            thread::swap_ids(t, sp);
        }
    }

    fn on_close(&self, id: Id, ctx: LayerContext<'_, S>) {
        let Some(s) = ctx.span(&id) else { return };
        let ext = s.extensions();
        if let Some(w) = ext.get::<WeftSpan>() {
            crate::span::span_record_keyed(w.tp, KIND_SPAN_END, w.trace, w.span, &[]);
        }
    }

    fn on_event(&self, event: &Event<'_>, _ctx: LayerContext<'_, S>) {
        let tp = self.tracepoint(event.metadata());
        if !tp.enabled() {
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        crate::span::emit_keyed(tp, &fields.as_keyed());
    }
}
