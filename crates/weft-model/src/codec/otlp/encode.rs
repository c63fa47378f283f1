//! The OTLP protobuf encoder: spans straight to `ExportTraceServiceRequest` bytes in two
//! passes (sizes, then bytes), with no intermediate generated messages. It writes what prost
//! writes for the same message — fields in number order, default scalars left out, every
//! element of a repeated field and every set `oneof` written — so the bytes are the canonical
//! encoding (`tests/it/otlp.rs` checks them against prost's re-encoding of its own decode).
//!
//! Consecutive spans with an equal resource and scope share one `ResourceSpans` /
//! `ScopeSpans`.

use crate::span::{Link, Resource, Scope, Span, SpanEvent, Status};
use crate::value::{Attributes, KeyValue, Value};

use super::{link_wire_attributes, same};

fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn key(out: &mut Vec<u8>, field: u32, wire: u8) {
    put_varint(out, ((field as u64) << 3) | wire as u64);
}

/// Length of a length-delimited field of number 1..=15 (one-byte tag + length + body).
fn ld(body: usize) -> usize {
    1 + varint_len(body as u64) + body
}

fn put_ld(out: &mut Vec<u8>, field: u32, body: usize) {
    key(out, field, 2);
    put_varint(out, body as u64);
}

/// A `string`/`bytes` field: left out when empty.
fn put_bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    if !b.is_empty() {
        put_ld(out, field, b.len());
        out.extend_from_slice(b);
    }
}

fn bytes_len(b: &[u8]) -> usize {
    if b.is_empty() { 0 } else { ld(b.len()) }
}

/// A `uint32` field: left out when zero.
fn put_u32(out: &mut Vec<u8>, field: u32, v: u32) {
    if v != 0 {
        key(out, field, 0);
        put_varint(out, v as u64);
    }
}

fn u32_len(v: u32) -> usize {
    if v == 0 { 0 } else { 1 + varint_len(v as u64) }
}

/// A `fixed64` field: left out when zero.
fn put_fixed64(out: &mut Vec<u8>, field: u32, v: u64) {
    if v != 0 {
        key(out, field, 1);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

fn fixed64_len(v: u64) -> usize {
    if v == 0 { 0 } else { 9 }
}

/// A `fixed32` field: left out when zero.
fn put_fixed32(out: &mut Vec<u8>, field: u32, v: u32) {
    if v != 0 {
        key(out, field, 5);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// A `string` inside a `oneof` (written even when empty).
fn put_str_value(out: &mut Vec<u8>, s: &str) {
    put_ld(out, 1, s.len());
    out.extend_from_slice(s.as_bytes());
}

/// Body length of an `AnyValue`.
fn value_len(v: &Value) -> usize {
    match v {
        Value::Str(s) => ld(s.len()),
        Value::Bool(_) => 2,
        Value::I64(i) => 1 + varint_len(*i as u64),
        Value::F64(_) => 9,
        Value::Bytes(b) => ld(b.len()),
        Value::Array(a) => ld(array_len(a)),
        Value::Map(m) => ld(kvs_len(m)),
        Value::Empty => 0,
    }
}

/// Body length of an `ArrayValue`.
fn array_len(a: &[Value]) -> usize {
    a.iter().map(|v| ld(value_len(v))).sum()
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Str(s) => put_str_value(out, s),
        Value::Bool(b) => {
            key(out, 2, 0);
            out.push(*b as u8);
        }
        Value::I64(i) => {
            key(out, 3, 0);
            put_varint(out, *i as u64);
        }
        Value::F64(f) => {
            key(out, 4, 1);
            out.extend_from_slice(&f.to_le_bytes());
        }
        Value::Array(a) => {
            put_ld(out, 5, array_len(a));
            for e in a {
                put_ld(out, 1, value_len(e));
                put_value(out, e);
            }
        }
        Value::Map(m) => {
            put_ld(out, 6, kvs_len(m));
            for kv in m {
                put_kv(out, 1, &kv.key, &kv.value);
            }
        }
        Value::Bytes(b) => {
            put_ld(out, 7, b.len());
            out.extend_from_slice(b);
        }
        Value::Empty => {}
    }
}

/// Body length of a `KeyValue` whose value's body is `value` bytes long.
fn kv_len(k: &str, value: usize) -> usize {
    bytes_len(k.as_bytes()) + ld(value)
}

fn put_kv(out: &mut Vec<u8>, field: u32, k: &str, v: &Value) {
    let vl = value_len(v);
    put_ld(out, field, kv_len(k, vl));
    put_bytes(out, 1, k.as_bytes());
    put_ld(out, 2, vl);
    put_value(out, v);
}

/// Length of a repeated `KeyValue` field (number 1..=15).
fn kvs_len(kvs: &[KeyValue]) -> usize {
    kvs.iter().map(|kv| ld(kv_len(&kv.key, value_len(&kv.value)))).sum()
}

fn attrs_len(a: &Attributes) -> usize {
    kvs_len(&a.0)
}

fn put_attrs(out: &mut Vec<u8>, field: u32, a: &Attributes) {
    for kv in a.iter() {
        put_kv(out, field, &kv.key, &kv.value);
    }
}

fn event_len(e: &SpanEvent) -> usize {
    fixed64_len(e.time_ns)
        + bytes_len(e.name.as_bytes())
        + attrs_len(&e.attributes)
        + u32_len(e.dropped_attributes_count)
}

fn put_event(out: &mut Vec<u8>, e: &SpanEvent) {
    put_ld(out, 11, event_len(e));
    put_fixed64(out, 1, e.time_ns);
    put_bytes(out, 2, e.name.as_bytes());
    put_attrs(out, 3, &e.attributes);
    put_u32(out, 4, e.dropped_attributes_count);
}

/// Body lengths of a link's wire attributes (its own plus the relation).
fn link_attr_lens(l: &Link) -> impl Iterator<Item = usize> + '_ {
    link_wire_attributes(l).map(|(k, v, rel)| {
        let vl = match v {
            Some(v) => value_len(v),
            None => ld(rel.unwrap_or("").len()),
        };
        kv_len(k, vl)
    })
}

fn link_len(l: &Link) -> usize {
    ld(16)
        + ld(8)
        + bytes_len(l.trace_state.as_bytes())
        + link_attr_lens(l).map(ld).sum::<usize>()
        + u32_len(l.dropped_attributes_count)
        + if l.flags == 0 { 0 } else { 5 }
}

fn put_link(out: &mut Vec<u8>, l: &Link) {
    put_ld(out, 13, link_len(l));
    put_bytes(out, 1, &l.trace_id.0);
    put_bytes(out, 2, &l.span_id.0);
    put_bytes(out, 3, l.trace_state.as_bytes());
    for ((k, v, rel), body) in link_wire_attributes(l).zip(link_attr_lens(l)) {
        put_ld(out, 4, body);
        put_bytes(out, 1, k.as_bytes());
        match v {
            Some(v) => {
                put_ld(out, 2, value_len(v));
                put_value(out, v);
            }
            None => {
                let rel = rel.unwrap_or("");
                put_ld(out, 2, ld(rel.len()));
                put_str_value(out, rel);
            }
        }
    }
    put_u32(out, 5, l.dropped_attributes_count);
    put_fixed32(out, 6, l.flags);
}

/// Body length of a `Status`, `None` when the span has the default one (not written).
fn status_len(s: &Status) -> Option<usize> {
    (*s != Status::default()).then(|| bytes_len(s.message.as_bytes()) + enum_len(s.code as i32))
}

/// An `enum` field: varint of the sign-extended value, left out when zero.
fn enum_len(v: i32) -> usize {
    if v == 0 { 0 } else { 1 + varint_len(v as i64 as u64) }
}

fn put_enum(out: &mut Vec<u8>, field: u32, v: i32) {
    if v != 0 {
        key(out, field, 0);
        put_varint(out, v as i64 as u64);
    }
}

/// Body length of a `Span`.
fn span_len(s: &Span) -> usize {
    let mut n = ld(16) + ld(8) + bytes_len(s.trace_state.as_bytes());
    if s.parent_span_id.is_some() {
        n += ld(8);
    }
    n += bytes_len(s.name.as_bytes())
        + enum_len(s.kind as i32)
        + fixed64_len(s.start_ns)
        + fixed64_len(s.end_ns)
        + attrs_len(&s.attributes)
        + u32_len(s.dropped_attributes_count)
        + s.events.iter().map(|e| ld(event_len(e))).sum::<usize>()
        + u32_len(s.dropped_events_count)
        + s.links.iter().map(|l| ld(link_len(l))).sum::<usize>()
        + u32_len(s.dropped_links_count);
    if let Some(b) = status_len(&s.status) {
        n += ld(b);
    }
    if s.flags != 0 {
        n += 2 + 4; // field 16: a two-byte tag
    }
    n
}

fn put_span(out: &mut Vec<u8>, s: &Span, body: usize) {
    put_ld(out, 2, body);
    put_bytes(out, 1, &s.trace_id.0);
    put_bytes(out, 2, &s.span_id.0);
    put_bytes(out, 3, s.trace_state.as_bytes());
    if let Some(p) = s.parent_span_id {
        put_bytes(out, 4, &p.0);
    }
    put_bytes(out, 5, s.name.as_bytes());
    put_enum(out, 6, s.kind as i32);
    put_fixed64(out, 7, s.start_ns);
    put_fixed64(out, 8, s.end_ns);
    put_attrs(out, 9, &s.attributes);
    put_u32(out, 10, s.dropped_attributes_count);
    for e in &s.events {
        put_event(out, e);
    }
    put_u32(out, 12, s.dropped_events_count);
    for l in &s.links {
        put_link(out, l);
    }
    put_u32(out, 14, s.dropped_links_count);
    if let Some(b) = status_len(&s.status) {
        put_ld(out, 15, b);
        put_bytes(out, 2, s.status.message.as_bytes());
        put_enum(out, 3, s.status.code as i32);
    }
    put_fixed32(out, 16, s.flags);
}

fn resource_len(r: &Resource) -> usize {
    attrs_len(&r.attributes) + u32_len(r.dropped_attributes_count)
}

fn scope_len(s: &Scope) -> usize {
    bytes_len(s.name.as_bytes())
        + bytes_len(s.version.as_bytes())
        + attrs_len(&s.attributes)
        + u32_len(s.dropped_attributes_count)
}

/// `spans` as an OTLP `ExportTraceServiceRequest` protobuf.
pub(crate) fn encode(spans: &[Span]) -> Vec<u8> {
    // [resource group [scope group [spans]]], with body sizes
    struct ScopeGroup {
        start: usize,
        end: usize,
        body: usize,
    }
    struct ResourceGroup {
        scopes: Vec<ScopeGroup>,
        body: usize,
    }
    let mut span_lens = Vec::with_capacity(spans.len());
    let mut groups: Vec<ResourceGroup> = Vec::new();
    for (i, s) in spans.iter().enumerate() {
        let sl = span_len(s);
        span_lens.push(sl);
        let new_res = i == 0 || !same(&spans[i - 1].resource, &s.resource);
        let new_scope = new_res || !same(&spans[i - 1].scope, &s.scope);
        if new_res {
            groups.push(ResourceGroup { scopes: Vec::new(), body: 0 });
        }
        let Some(g) = groups.last_mut() else { continue };
        if new_scope {
            g.scopes.push(ScopeGroup { start: i, end: i, body: 0 });
        }
        let Some(sc) = g.scopes.last_mut() else { continue };
        sc.end = i + 1;
        sc.body += ld(sl);
    }
    let mut total = 0;
    for g in &mut groups {
        let first = &spans[g.scopes.first().map_or(0, |s| s.start)];
        g.body = ld(resource_len(&first.resource)) + bytes_len(first.resource.schema_url.as_bytes());
        for sc in &mut g.scopes {
            let s0 = &spans[sc.start];
            sc.body += ld(scope_len(&s0.scope)) + bytes_len(s0.scope.schema_url.as_bytes());
            g.body += ld(sc.body);
        }
        total += ld(g.body);
    }
    let mut out = Vec::with_capacity(total);
    for g in &groups {
        let Some(first) = g.scopes.first() else { continue };
        put_ld(&mut out, 1, g.body);
        let r = &spans[first.start].resource;
        put_ld(&mut out, 1, resource_len(r));
        put_attrs(&mut out, 1, &r.attributes);
        put_u32(&mut out, 2, r.dropped_attributes_count);
        for sc in &g.scopes {
            put_ld(&mut out, 2, sc.body);
            let scope = &spans[sc.start].scope;
            put_ld(&mut out, 1, scope_len(scope));
            put_bytes(&mut out, 1, scope.name.as_bytes());
            put_bytes(&mut out, 2, scope.version.as_bytes());
            put_attrs(&mut out, 3, &scope.attributes);
            put_u32(&mut out, 4, scope.dropped_attributes_count);
            for i in sc.start..sc.end {
                put_span(&mut out, &spans[i], span_lens[i]);
            }
            put_bytes(&mut out, 3, scope.schema_url.as_bytes());
        }
        put_bytes(&mut out, 3, r.schema_url.as_bytes());
    }
    debug_assert_eq!(out.len(), total);
    out
}
