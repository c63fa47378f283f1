//! Spans: begin/end records with parent/child context per thread, Dapper/Zipkin annotations,
//! key/value annotations and endpoints (as in BlkKin).

use crate::context::Context;
use crate::layout::*;
use crate::thread::{self, Ids, LOCAL};
use crate::tracepoint::{STATE_ENABLED, STATE_QUERY, Tracepoint};
use crate::value::{Fields, KeyedValue, keyed_len, put_keyed};
use std::marker::PhantomData;

/// Zipkin/OpenTelemetry span kind (recorded in SPAN_START flags bits 0..8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum SpanKind {
    #[default]
    Internal = 0,
    Server = 1,
    Client = 2,
    Producer = 3,
    Consumer = 4,
}

impl SpanKind {
    pub fn from_u8(v: u8) -> Option<SpanKind> {
        Some(match v {
            0 => SpanKind::Internal,
            1 => SpanKind::Server,
            2 => SpanKind::Client,
            3 => SpanKind::Producer,
            4 => SpanKind::Consumer,
            _ => return None,
        })
    }
}

/// Zipkin core annotations.
pub mod annotation {
    /// Client send.
    pub const CS: &str = "cs";
    /// Server receive.
    pub const SR: &str = "sr";
    /// Server send.
    pub const SS: &str = "ss";
    /// Client receive.
    pub const CR: &str = "cr";
}

/// An endpoint (BlkKin/Zipkin): service name, IP address and port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint<'a> {
    pub service: &'a str,
    pub ip: &'a str,
    pub port: u16,
}

/// An open span; ends (and restores the thread's previous context) when dropped or
/// [`Span::end`]ed. Spans must end in LIFO order on the thread that began them (it is `!Send`).
/// A span whose tracepoint was disabled at begin records nothing and changes no context.
#[must_use = "a span ends when dropped"]
pub struct Span {
    tp_id: u32,
    trace_id: u128,
    span_id: u64,
    prev: (u128, u64),
    live: bool,
    _not_send: PhantomData<*const ()>,
}

impl Span {
    /// A span that records nothing.
    pub const fn disabled() -> Span {
        Span { tp_id: 0, trace_id: 0, span_id: 0, prev: (0, 0), live: false, _not_send: PhantomData }
    }

    /// Is it recording?
    pub fn is_recording(&self) -> bool {
        self.live
    }

    /// Its context (for injection into an outgoing request); `None` when not recording.
    pub fn context(&self) -> Option<Context> {
        self.live.then_some(Context { trace_id: self.trace_id, span_id: self.span_id, sampled: true })
    }

    pub fn trace_id(&self) -> u128 {
        self.trace_id
    }

    pub fn span_id(&self) -> u64 {
        self.span_id
    }

    fn ids(&self) -> Ids {
        Ids::Explicit((self.trace_id >> 64) as u64, self.trace_id as u64, self.span_id)
    }

    /// A timestamp annotation (`cs`, `sr`, `ss`, `cr` — see [`annotation`] — or any text).
    pub fn annotate(&self, what: &str) {
        if !self.live {
            return;
        }
        let b = what.as_bytes();
        let len = crate::value::bytes_len(b);
        thread::write_record(KIND_ANNOTATION, 1, self.tp_id, 0, self.ids(), len, |p| {
            // SAFETY: write_record hands us `len` bytes.
            unsafe { crate::value::put_bytes(p, TYPE_STR, NAME_NONE, b) };
        });
    }

    /// Key/value annotations (BlkKin `keyval_string` / `keyval_integer`).
    pub fn kv(&self, key: &str, value: KeyedValue<'_>) {
        self.kvs(&[(key, value)]);
    }

    /// Several key/value annotations in one record (at most 255).
    pub fn kvs(&self, items: &[(&str, KeyedValue<'_>)]) {
        if !self.live {
            return;
        }
        let items = &items[..items.len().min(255)];
        let len: usize = items.iter().map(|(k, v)| keyed_len(k, v)).sum();
        thread::write_record(KIND_KV, items.len() as u8, self.tp_id, 0, self.ids(), len, |p| {
            let mut off = 0;
            for (k, v) in items {
                // SAFETY: the sum of keyed_len() is the reserved payload.
                off += unsafe { put_keyed(p.add(off), k, v) };
            }
        });
    }

    /// The span's endpoint.
    pub fn endpoint(&self, ep: Endpoint<'_>) {
        self.kvs_kind(
            KIND_ENDPOINT,
            &[
                ("service", KeyedValue::Str(ep.service)),
                ("ip", KeyedValue::Str(ep.ip)),
                ("port", KeyedValue::U64(ep.port as u64)),
            ],
        );
    }

    fn kvs_kind(&self, kind: u8, items: &[(&str, KeyedValue<'_>)]) {
        if !self.live {
            return;
        }
        let len: usize = items.iter().map(|(k, v)| keyed_len(k, v)).sum();
        thread::write_record(kind, items.len() as u8, self.tp_id, 0, self.ids(), len, |p| {
            let mut off = 0;
            for (k, v) in items {
                // SAFETY: as in kvs().
                off += unsafe { put_keyed(p.add(off), k, v) };
            }
        });
    }

    /// End now (same as dropping).
    pub fn end(self) {}

    /// End with fields (named by the tracepoint's field spec).
    pub fn end_with<F: Fields>(mut self, fields: F) {
        if self.live {
            self.finish(fields);
        }
    }

    fn finish<F: Fields>(&mut self, fields: F) {
        self.live = false;
        let len = fields.encoded_len();
        thread::write_record(KIND_SPAN_END, F::COUNT, self.tp_id, 0, self.ids(), len, |p| {
            // SAFETY: `len` bytes reserved.
            unsafe { fields.encode(p) };
        });
        thread::swap_ids(self.prev.0, self.prev.1);
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        if self.live {
            self.finish(());
        }
    }
}

impl std::fmt::Debug for Span {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Span")
            .field("trace_id", &format_args!("{:032x}", self.trace_id))
            .field("span_id", &format_args!("{:016x}", self.span_id))
            .field("live", &self.live)
            .finish()
    }
}

/// Begin a span at `tp` (slow path of the `span!` macro; call [`Tracepoint::enabled`] first).
/// The parent is the thread's current span, or `remote` when given (an extracted context).
#[inline(never)]
pub fn begin<F: Fields>(
    tp: &'static Tracepoint,
    kind: SpanKind,
    remote: Option<&Context>,
    fields: F,
) -> Span {
    let id = tp.id();
    let Ok((trace, parent, span_id)) = LOCAL.try_with(|l| {
        let span_id = thread::random_u64(l);
        match remote {
            Some(c) => (c.trace_id, c.span_id, span_id),
            None => {
                let cur = ((l.trace_hi.get() as u128) << 64) | l.trace_lo.get() as u128;
                if cur != 0 {
                    (cur, l.span.get(), span_id)
                } else {
                    let t = ((thread::random_u64(l) as u128) << 64) | thread::random_u64(l) as u128;
                    (t, 0, span_id)
                }
            }
        }
    }) else {
        return Span::disabled();
    };
    let flags = kind as u32 | if remote.is_some() { RFLAG_REMOTE_PARENT } else { 0 };
    let len = 8 + fields.encoded_len();
    thread::write_record(
        KIND_SPAN_START,
        F::COUNT,
        id,
        flags,
        Ids::Explicit((trace >> 64) as u64, trace as u64, span_id),
        len,
        |p| {
            // SAFETY: `len` bytes reserved: the parent id word, then the fields.
            unsafe {
                (p as *mut u64).write(parent);
                fields.encode(p.add(8));
            }
        },
    );
    let prev = thread::swap_ids(trace, span_id);
    Span { tp_id: id, trace_id: trace, span_id, prev, live: true, _not_send: PhantomData }
}

/// Make `ctx` the thread's current context until the guard drops (e.g. on a server thread that
/// handles a request but records no span of its own).
pub fn set_current(ctx: &Context) -> ContextGuard {
    let prev = thread::swap_ids(ctx.trace_id, ctx.span_id);
    ContextGuard { prev, _not_send: PhantomData }
}

/// Restores the previous context on drop.
#[must_use = "the context is restored when this guard drops"]
pub struct ContextGuard {
    prev: (u128, u64),
    _not_send: PhantomData<*const ()>,
}

impl Drop for ContextGuard {
    fn drop(&mut self) {
        thread::swap_ids(self.prev.0, self.prev.1);
    }
}

/// Emit an event at `tp` (slow path of the `event!` macro; the macro tests
/// [`Tracepoint::active`] first): run its live queries, record it if enabled.
#[cold]
#[inline(never)]
pub fn emit<F: Fields>(tp: &'static Tracepoint, fields: F) {
    let state = tp.state();
    if state & STATE_QUERY != 0 {
        crate::query::on_event(tp, &fields);
    }
    if state & STATE_ENABLED == 0 {
        return;
    }
    let id = tp.id();
    let len = fields.encoded_len();
    thread::write_record(KIND_EVENT, F::COUNT, id, 0, Ids::Current, len, |p| {
        // SAFETY: `len` bytes reserved.
        unsafe { fields.encode(p) };
    });
}

/// Emit an event with inline-keyed fields (dynamic tracepoints, e.g. `tracing` events).
pub fn emit_keyed(tp: &'static Tracepoint, items: &[(&str, KeyedValue<'_>)]) {
    let id = tp.id();
    let items = &items[..items.len().min(255)];
    let len: usize = items.iter().map(|(k, v)| keyed_len(k, v)).sum();
    thread::write_record(KIND_EVENT, items.len() as u8, id, 0, Ids::Current, len, |p| {
        let mut off = 0;
        for (k, v) in items {
            // SAFETY: the sum of keyed_len() is the reserved payload.
            off += unsafe { put_keyed(p.add(off), k, v) };
        }
    });
}

/// A timestamp annotation on the thread's current span (recorded under `tp`'s id).
pub fn annotate_current(tp: &'static Tracepoint, what: &str) {
    if !tp.enabled() {
        return;
    }
    let id = tp.id();
    let b = what.as_bytes();
    let len = crate::value::bytes_len(b);
    thread::write_record(KIND_ANNOTATION, 1, id, 0, Ids::Current, len, |p| {
        // SAFETY: `len` bytes reserved.
        unsafe { crate::value::put_bytes(p, TYPE_STR, NAME_NONE, b) };
    });
}

impl Tracepoint {
    /// Begin an internal span under the thread's current span (no fields).
    #[inline(always)]
    pub fn span(&'static self) -> Span {
        if self.enabled() { begin(self, SpanKind::Internal, None, ()) } else { Span::disabled() }
    }

    /// Begin a span of `kind`; the parent is `remote` when given, else the current span.
    #[inline(always)]
    pub fn span_with(&'static self, kind: SpanKind, remote: Option<&Context>) -> Span {
        if self.enabled() { begin(self, kind, remote, ()) } else { Span::disabled() }
    }

    /// Emit an event without fields.
    #[inline(always)]
    pub fn hit(&'static self) {
        if self.enabled() {
            emit(self, ());
        }
    }
}

#[cfg(feature = "tracing")]
/// Low-level span start with inline-keyed attributes (the `tracing` layer): writes the
/// SPAN_START record with explicit ids; does not touch the thread's context.
pub(crate) fn start_keyed(
    tp: &'static Tracepoint,
    kind: SpanKind,
    trace: u128,
    span_id: u64,
    parent: u64,
    items: &[(&str, KeyedValue<'_>)],
) {
    let id = tp.id();
    let items = &items[..items.len().min(255)];
    let len = 8 + items.iter().map(|(k, v)| keyed_len(k, v)).sum::<usize>();
    let ids = Ids::Explicit((trace >> 64) as u64, trace as u64, span_id);
    thread::write_record(KIND_SPAN_START, items.len() as u8, id, kind as u32, ids, len, |p| {
        // SAFETY: `len` bytes reserved: the parent word, then the fields.
        unsafe {
            (p as *mut u64).write(parent);
            let mut off = 8;
            for (k, v) in items {
                off += put_keyed(p.add(off), k, v);
            }
        }
    });
}

#[cfg(feature = "tracing")]
/// Low-level record for an existing span (`kind` = KIND_SPAN_END or KIND_KV) with explicit ids.
pub(crate) fn span_record_keyed(
    tp: &'static Tracepoint,
    kind: u8,
    trace: u128,
    span_id: u64,
    items: &[(&str, KeyedValue<'_>)],
) {
    let id = tp.id();
    let items = &items[..items.len().min(255)];
    let len = items.iter().map(|(k, v)| keyed_len(k, v)).sum::<usize>();
    let ids = Ids::Explicit((trace >> 64) as u64, trace as u64, span_id);
    thread::write_record(kind, items.len() as u8, id, 0, ids, len, |p| {
        let mut off = 0;
        for (k, v) in items {
            // SAFETY: the sum of keyed_len() is the reserved payload.
            off += unsafe { put_keyed(p.add(off), k, v) };
        }
    });
}

/// A span's state as plain data, for foreign-language bindings (`weft-probe-c`) that keep the
/// span in a caller-owned struct.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RawSpan {
    pub tp_id: u32,
    pub trace_id: u128,
    pub span_id: u64,
    pub prev_trace: u128,
    pub prev_span: u64,
    pub live: bool,
}

impl Span {
    /// Detach into plain data (the span stays open; end it with [`Span::from_raw`] + drop).
    #[doc(hidden)]
    pub fn into_raw(self) -> RawSpan {
        let r = RawSpan {
            tp_id: self.tp_id,
            trace_id: self.trace_id,
            span_id: self.span_id,
            prev_trace: self.prev.0,
            prev_span: self.prev.1,
            live: self.live,
        };
        std::mem::forget(self);
        r
    }

    /// Re-attach plain data produced by [`Span::into_raw`].
    #[doc(hidden)]
    pub fn from_raw(r: RawSpan) -> Span {
        Span {
            tp_id: r.tp_id,
            trace_id: r.trace_id,
            span_id: r.span_id,
            prev: (r.prev_trace, r.prev_span),
            live: r.live,
            _not_send: PhantomData,
        }
    }
}

/// Emit an event whose values may be positional (empty key: named by the field spec in order)
/// or inline-keyed (the C ABI's `weft_emit`).
pub fn emit_values(tp: &'static Tracepoint, items: &[(&str, KeyedValue<'_>)]) {
    let id = tp.id();
    let items = &items[..items.len().min(255)];
    let len: usize =
        items.iter().map(|(k, v)| if k.is_empty() { keyed_len("", v) } else { keyed_len(k, v) }).sum();
    thread::write_record(KIND_EVENT, items.len() as u8, id, 0, Ids::Current, len, |p| {
        let mut off = 0;
        for (i, (k, v)) in items.iter().enumerate() {
            // SAFETY: the sum of the lengths is the reserved payload.
            off += unsafe {
                if k.is_empty() {
                    crate::value::put_positional(p.add(off), i as u8, v)
                } else {
                    put_keyed(p.add(off), k, v)
                }
            };
        }
    });
}
