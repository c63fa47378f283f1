//! # weft-probe-c
//!
//! C ABI for weft-probe: the header `include/weft_probe.h` (checked in) and the static
//! (`libweft_probe_c.a`) and shared (`libweft_probe_c.so`) libraries built from this crate.
//! C and C++ programs get tracepoints, spans, annotations, endpoints, context propagation
//! (W3C traceparent, B3), run-time switches and the in-process capture. Example:
//! `examples/c-probe/` (built and run by this crate's tests).
//!
//! Every function tolerates NULL pointers and invalid UTF-8 (recorded lossily or ignored) and
//! never unwinds across the ABI.

#![allow(clippy::missing_safety_doc)]

use std::ffi::{CStr, c_char, c_int, c_void};
use std::path::Path;
use std::time::Duration;
use weft_probe::span::RawSpan;
use weft_probe::{Context, Endpoint, KeyedValue, Selector, Span, SpanKind, Tracepoint};

/// `weft_value` (see the header).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct WeftValue {
    pub ty: u32,
    pub len: u32,
    pub key: *const c_char,
    pub v: u64,
}

/// `weft_context`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct WeftContext {
    pub trace_hi: u64,
    pub trace_lo: u64,
    pub span_id: u64,
    pub sampled: u8,
}

/// `weft_span`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct WeftSpan {
    pub trace_hi: u64,
    pub trace_lo: u64,
    pub span_id: u64,
    pub prev_trace_hi: u64,
    pub prev_trace_lo: u64,
    pub prev_span: u64,
    pub tp_id: u32,
    pub live: u32,
}

impl WeftSpan {
    fn from_raw(r: RawSpan) -> WeftSpan {
        WeftSpan {
            trace_hi: (r.trace_id >> 64) as u64,
            trace_lo: r.trace_id as u64,
            span_id: r.span_id,
            prev_trace_hi: (r.prev_trace >> 64) as u64,
            prev_trace_lo: r.prev_trace as u64,
            prev_span: r.prev_span,
            tp_id: r.tp_id,
            live: r.live as u32,
        }
    }

    fn raw(&self) -> RawSpan {
        RawSpan {
            tp_id: self.tp_id,
            trace_id: ((self.trace_hi as u128) << 64) | self.trace_lo as u128,
            span_id: self.span_id,
            prev_trace: ((self.prev_trace_hi as u128) << 64) | self.prev_trace_lo as u128,
            prev_span: self.prev_span,
            live: self.live != 0,
        }
    }
}

fn ctx_from(c: &WeftContext) -> Context {
    Context {
        trace_id: ((c.trace_hi as u128) << 64) | c.trace_lo as u128,
        span_id: c.span_id,
        sampled: c.sampled != 0,
    }
}

fn ctx_to(c: &Context) -> WeftContext {
    WeftContext {
        trace_hi: (c.trace_id >> 64) as u64,
        trace_lo: c.trace_id as u64,
        span_id: c.span_id,
        sampled: c.sampled as u8,
    }
}

unsafe fn cstr<'a>(p: *const c_char) -> Option<&'a str> {
    if p.is_null() {
        return None;
    }
    // SAFETY: caller passes a NUL-terminated string.
    unsafe { CStr::from_ptr(p) }.to_str().ok()
}

/// Convert C values; `None` entries are values that could not be read.
unsafe fn keyed<'a>(values: *const WeftValue, n: usize) -> Vec<(&'a str, KeyedValue<'a>)> {
    if values.is_null() || n == 0 {
        return Vec::new();
    }
    // SAFETY: caller passes n values.
    let vals = unsafe { std::slice::from_raw_parts(values, n.min(255)) };
    vals.iter()
        .map(|v| {
            // SAFETY: key is NULL or NUL-terminated.
            let key = unsafe { cstr(v.key) }.unwrap_or("");
            let bytes = || -> &'a [u8] {
                if v.v == 0 || v.len == 0 {
                    &[]
                } else {
                    // SAFETY: ptr/len describe caller memory valid for the call.
                    unsafe { std::slice::from_raw_parts(v.v as usize as *const u8, v.len as usize) }
                }
            };
            let val = match v.ty {
                1 => KeyedValue::I64(v.v as i64),
                2 => KeyedValue::U64(v.v),
                3 => KeyedValue::F64(f64::from_bits(v.v)),
                4 => KeyedValue::Bool(v.v != 0),
                5 => KeyedValue::Str(std::str::from_utf8(bytes()).unwrap_or("<invalid utf-8>")),
                6 => KeyedValue::Bytes(bytes()),
                _ => KeyedValue::Str(""),
            };
            (key, val)
        })
        .collect()
}

fn guard<T>(default: T, f: impl FnOnce() -> T) -> T {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(default)
}

/// Record an event. Positional values (no key) are named by the tracepoint's field spec.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_emit(tp: *const Tracepoint, values: *const WeftValue, n: usize) {
    if tp.is_null() {
        return;
    }
    // SAFETY: tp points to a 'static descriptor (WEFT_TRACEPOINT).
    let tp: &'static Tracepoint = unsafe { &*tp };
    guard((), || {
        // SAFETY: forwarded.
        let items = unsafe { keyed(values, n) };
        weft_probe::span::emit_values(tp, &items);
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_span_begin(
    tp: *const Tracepoint,
    kind: c_int,
    parent: *const WeftContext,
) -> WeftSpan {
    if tp.is_null() {
        return WeftSpan::default();
    }
    // SAFETY: 'static descriptor.
    let tp: &'static Tracepoint = unsafe { &*tp };
    let kind = SpanKind::from_u8(kind.clamp(0, 255) as u8).unwrap_or_default();
    // SAFETY: NULL or a valid context.
    let remote = unsafe { parent.as_ref() }.map(ctx_from).filter(|c| c.trace_id != 0 && c.span_id != 0);
    guard(WeftSpan::default(), || {
        let s = if tp.enabled() {
            weft_probe::span::begin(tp, kind, remote.as_ref(), ())
        } else {
            Span::disabled()
        };
        WeftSpan::from_raw(s.into_raw())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_span_end(s: *mut WeftSpan) {
    // SAFETY: NULL or a span from weft_span_begin.
    let Some(s) = (unsafe { s.as_mut() }) else { return };
    let raw = s.raw();
    s.live = 0;
    guard((), || drop(Span::from_raw(raw)))
}

fn with_span(s: *const WeftSpan, f: impl FnOnce(&Span)) {
    // SAFETY: NULL or a span from weft_span_begin.
    let Some(s) = (unsafe { s.as_ref() }) else { return };
    if s.live == 0 {
        return;
    }
    let span = Span::from_raw(s.raw());
    guard((), || f(&span));
    let _ = span.into_raw(); // still open
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_span_annotate(s: *const WeftSpan, what: *const c_char) {
    // SAFETY: NULL or NUL-terminated.
    let what = unsafe { cstr(what) }.unwrap_or("");
    with_span(s, |sp| sp.annotate(what));
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_span_kv(s: *const WeftSpan, kvs: *const WeftValue, n: usize) {
    // SAFETY: forwarded.
    let items = unsafe { keyed(kvs, n) };
    with_span(s, |sp| sp.kvs(&items));
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_span_endpoint(
    s: *const WeftSpan,
    service: *const c_char,
    ip: *const c_char,
    port: u16,
) {
    // SAFETY: NULL or NUL-terminated.
    let (service, ip) = unsafe { (cstr(service).unwrap_or(""), cstr(ip).unwrap_or("")) };
    with_span(s, |sp| sp.endpoint(Endpoint { service, ip, port }));
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_span_context(s: *const WeftSpan, out: *mut WeftContext) -> c_int {
    // SAFETY: NULL or valid pointers.
    let (Some(s), Some(out)) = (unsafe { s.as_ref() }, unsafe { out.as_mut() }) else { return 0 };
    if s.live == 0 {
        return 0;
    }
    *out = WeftContext { trace_hi: s.trace_hi, trace_lo: s.trace_lo, span_id: s.span_id, sampled: 1 };
    1
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_current_context(out: *mut WeftContext) -> c_int {
    // SAFETY: NULL or valid.
    let Some(out) = (unsafe { out.as_mut() }) else { return 0 };
    match weft_probe::context::current() {
        Some(c) => {
            *out = ctx_to(&c);
            1
        }
        None => 0,
    }
}

unsafe fn write_out(s: &str, out: *mut c_char, cap: usize) -> c_int {
    if out.is_null() || cap < s.len() + 1 {
        return -1;
    }
    // SAFETY: out holds cap ≥ len + 1 bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), out.cast(), s.len());
        *out.add(s.len()) = 0;
    }
    s.len() as c_int
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_inject_traceparent(
    ctx: *const WeftContext,
    out: *mut c_char,
    cap: usize,
) -> c_int {
    // SAFETY: NULL or valid.
    let Some(c) = (unsafe { ctx.as_ref() }) else { return -1 };
    // SAFETY: forwarded.
    unsafe { write_out(&ctx_from(c).to_traceparent(), out, cap) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_extract_traceparent(s: *const c_char, out: *mut WeftContext) -> c_int {
    // SAFETY: NULL or valid.
    let (Some(s), Some(out)) = (unsafe { cstr(s) }, unsafe { out.as_mut() }) else { return -1 };
    match Context::from_traceparent(s) {
        Ok(c) => {
            *out = ctx_to(&c);
            0
        }
        Err(_) => -1,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_inject_b3(ctx: *const WeftContext, out: *mut c_char, cap: usize) -> c_int {
    // SAFETY: NULL or valid.
    let Some(c) = (unsafe { ctx.as_ref() }) else { return -1 };
    // SAFETY: forwarded.
    unsafe { write_out(&ctx_from(c).to_b3(), out, cap) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_extract_b3(s: *const c_char, out: *mut WeftContext) -> c_int {
    // SAFETY: NULL or valid.
    let (Some(s), Some(out)) = (unsafe { cstr(s) }, unsafe { out.as_mut() }) else { return -1 };
    match Context::from_b3(s) {
        Ok(c) => {
            *out = ctx_to(&c);
            0
        }
        Err(_) => -1,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_probe_init(service: *const c_char) -> c_int {
    // SAFETY: NULL or valid.
    let service = unsafe { cstr(service) }.map(str::to_string);
    guard(-1, || {
        let mut cfg = weft_probe::Config::from_env();
        if service.is_some() {
            cfg.service = service;
        }
        weft_probe::init(cfg);
        0
    })
}

unsafe fn switch(sel: *const c_char, op: weft_probe::Op) -> c_int {
    // SAFETY: NULL or valid.
    let Some(s) = (unsafe { cstr(sel) }) else { return -1 };
    let Ok(sel) = Selector::parse(s) else { return -1 };
    guard(-1, || weft_probe::registry::switch(&sel, op).matched.min(c_int::MAX as usize) as c_int)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_probe_enable(sel: *const c_char) -> c_int {
    // SAFETY: forwarded.
    unsafe { switch(sel, weft_probe::Op::Enable) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_probe_disable(sel: *const c_char) -> c_int {
    // SAFETY: forwarded.
    unsafe { switch(sel, weft_probe::Op::Disable) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_probe_force_disable(sel: *const c_char) -> c_int {
    // SAFETY: forwarded.
    unsafe { switch(sel, weft_probe::Op::ForceDisable) }
}

#[unsafe(no_mangle)]
pub extern "C" fn weft_probe_shutdown() {
    weft_probe::shutdown();
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_capture_start(path: *const c_char, interval_ms: u32) -> *mut c_void {
    // SAFETY: NULL or valid.
    let Some(p) = (unsafe { cstr(path) }) else { return std::ptr::null_mut() };
    guard(std::ptr::null_mut(), || {
        match weft_probe::capture::start(Path::new(p), Duration::from_millis(interval_ms.max(1) as u64)) {
            Ok(d) => Box::into_raw(Box::new(d)).cast(),
            Err(e) => {
                tracing::warn!(error = %e, "weft_capture_start");
                std::ptr::null_mut()
            }
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_capture_stop(h: *mut c_void) -> i64 {
    if h.is_null() {
        return -1;
    }
    // SAFETY: h came from weft_capture_start.
    let d = unsafe { Box::from_raw(h.cast::<weft_probe::capture::DrainThread>()) };
    guard(-1, || match d.stop() {
        Ok(n) => n as i64,
        Err(_) => -1,
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_register_section(
    start: *const *const Tracepoint,
    stop: *const *const Tracepoint,
) {
    // SAFETY: the header passes the bounds of a weft_tracepoints section.
    guard((), || unsafe { weft_probe::registry::register_section(start, stop) })
}
