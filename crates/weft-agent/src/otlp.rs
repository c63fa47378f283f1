//! A direct OTLP protobuf encoder for the spans the agent builds: one size pass and one write
//! pass over `weft_model::Span`s, no intermediate `prost` structures. It writes the same
//! `ExportTraceServiceRequest` as `weft_model::codec::otlp::encode_proto` (consecutive spans
//! with an equal resource and scope share a `ResourceSpans`/`ScopeSpans`) for spans without
//! links, array or map values; for anything else [`encode`] falls back to that encoder.
//! `tests/it/otlp.rs` checks both decode to the same spans.

use std::sync::Arc;

use weft_model::{Attributes, Span, Value};

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

/// Length of a length-delimited field (tag + length + body), tags are one byte here.
fn ld(body: usize) -> usize {
    1 + varint_len(body as u64) + body
}

fn put_ld(out: &mut Vec<u8>, field: u32, body: usize) {
    key(out, field, 2);
    put_varint(out, body as u64);
}

fn put_bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    if !b.is_empty() {
        put_ld(out, field, b.len());
        out.extend_from_slice(b);
    }
}

fn bytes_len(b: &[u8]) -> usize {
    if b.is_empty() { 0 } else { ld(b.len()) }
}

fn put_u32(out: &mut Vec<u8>, field: u32, v: u32) {
    if v != 0 {
        key(out, field, 0);
        put_varint(out, v as u64);
    }
}

fn u32_len(v: u32) -> usize {
    if v == 0 { 0 } else { 1 + varint_len(v as u64) }
}

fn value_len(v: &Value) -> Option<usize> {
    Some(match v {
        Value::Str(s) => ld(s.len()),
        Value::Bool(_) => 2,
        Value::I64(i) => 1 + varint_len(*i as u64),
        Value::F64(_) => 9,
        Value::Bytes(b) => ld(b.len()),
        Value::Empty => 0,
        Value::Array(_) | Value::Map(_) => return None,
    })
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Str(s) => {
            put_ld(out, 1, s.len());
            out.extend_from_slice(s.as_bytes());
        }
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
        Value::Bytes(b) => {
            put_ld(out, 7, b.len());
            out.extend_from_slice(b);
        }
        Value::Empty | Value::Array(_) | Value::Map(_) => {}
    }
}

fn kv_body(k: &str, v: &Value) -> Option<usize> {
    Some(bytes_len(k.as_bytes()) + ld(value_len(v)?))
}

fn attrs_len(field_tag_len: usize, a: &Attributes) -> Option<usize> {
    let mut n = 0;
    for kv in a.iter() {
        let b = kv_body(&kv.key, &kv.value)?;
        n += field_tag_len + varint_len(b as u64) + b;
    }
    Some(n)
}

fn put_attrs(out: &mut Vec<u8>, field: u32, a: &Attributes) {
    for kv in a.iter() {
        let vl = value_len(&kv.value).unwrap_or(0);
        let body = bytes_len(kv.key.as_bytes()) + ld(vl);
        put_ld(out, field, body);
        put_bytes(out, 1, kv.key.as_bytes());
        put_ld(out, 2, vl);
        put_value(out, &kv.value);
    }
}

/// Body length of a Span message; `None` when the span needs the general encoder.
fn span_len(s: &Span) -> Option<usize> {
    if !s.links.is_empty() || s.dropped_links_count != 0 || s.status != Default::default() {
        return None;
    }
    let mut n = ld(16) + ld(8) + bytes_len(s.trace_state.as_bytes());
    if s.parent_span_id.is_some() {
        n += ld(8);
    }
    n += bytes_len(s.name.as_bytes());
    if s.kind as i32 != 0 {
        n += 1 + varint_len(s.kind as u64);
    }
    if s.start_ns != 0 {
        n += 9;
    }
    if s.end_ns != 0 {
        n += 9;
    }
    n += attrs_len(1, &s.attributes)?;
    n += u32_len(s.dropped_attributes_count);
    for e in &s.events {
        let b = event_len(e)?;
        n += ld(b);
    }
    n += u32_len(s.dropped_events_count);
    if s.flags != 0 {
        n += 2 + 4; // field 16: a two-byte tag
    }
    Some(n)
}

fn event_len(e: &weft_model::SpanEvent) -> Option<usize> {
    Some(
        if e.time_ns != 0 { 9 } else { 0 }
            + bytes_len(e.name.as_bytes())
            + attrs_len(1, &e.attributes)?
            + u32_len(e.dropped_attributes_count),
    )
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
    if s.kind as i32 != 0 {
        key(out, 6, 0);
        put_varint(out, s.kind as u64);
    }
    if s.start_ns != 0 {
        key(out, 7, 1);
        out.extend_from_slice(&s.start_ns.to_le_bytes());
    }
    if s.end_ns != 0 {
        key(out, 8, 1);
        out.extend_from_slice(&s.end_ns.to_le_bytes());
    }
    put_attrs(out, 9, &s.attributes);
    put_u32(out, 10, s.dropped_attributes_count);
    for e in &s.events {
        put_ld(out, 11, event_len(e).unwrap_or(0));
        if e.time_ns != 0 {
            key(out, 1, 1);
            out.extend_from_slice(&e.time_ns.to_le_bytes());
        }
        put_bytes(out, 2, e.name.as_bytes());
        put_attrs(out, 3, &e.attributes);
        put_u32(out, 4, e.dropped_attributes_count);
    }
    put_u32(out, 12, s.dropped_events_count);
    if s.flags != 0 {
        key(out, 16, 5);
        out.extend_from_slice(&s.flags.to_le_bytes());
    }
}

fn resource_len(r: &weft_model::Resource) -> Option<usize> {
    Some(attrs_len(1, &r.attributes)? + u32_len(r.dropped_attributes_count))
}

fn scope_len(s: &weft_model::Scope) -> Option<usize> {
    Some(
        bytes_len(s.name.as_bytes())
            + bytes_len(s.version.as_bytes())
            + attrs_len(1, &s.attributes)?
            + u32_len(s.dropped_attributes_count),
    )
}

fn same<T: PartialEq>(a: &Arc<T>, b: &Arc<T>) -> bool {
    Arc::ptr_eq(a, b) || **a == **b
}

/// `spans` as an OTLP `ExportTraceServiceRequest` protobuf.
pub fn encode(spans: &[Span]) -> Vec<u8> {
    match encode_direct(spans) {
        Some(v) => v,
        None => weft_model::codec::otlp::encode_proto(spans),
    }
}

/// The direct encoder; `None` when a span needs the general one.
pub fn encode_direct(spans: &[Span]) -> Option<Vec<u8>> {
    // group: [resource group [scope group [spans]]], with body sizes
    struct Scope {
        start: usize,
        end: usize,
        body: usize,
    }
    struct Res {
        scopes: Vec<Scope>,
        body: usize,
    }
    let mut span_lens = Vec::with_capacity(spans.len());
    let mut groups: Vec<Res> = Vec::new();
    for (i, s) in spans.iter().enumerate() {
        let sl = span_len(s)?;
        span_lens.push(sl);
        let new_res = i == 0 || !same(&spans[i - 1].resource, &s.resource);
        let new_scope = new_res || !same(&spans[i - 1].scope, &s.scope);
        if new_res {
            groups.push(Res { scopes: Vec::new(), body: 0 });
        }
        let g = groups.last_mut()?;
        if new_scope {
            g.scopes.push(Scope { start: i, end: i, body: 0 });
        }
        let sc = g.scopes.last_mut()?;
        sc.end = i + 1;
        sc.body += ld(sl);
    }
    let mut total = 0;
    for g in &mut groups {
        let first = &spans[g.scopes.first()?.start];
        g.body = ld(resource_len(&first.resource)?) + bytes_len(first.resource.schema_url.as_bytes());
        for sc in &mut g.scopes {
            let s0 = &spans[sc.start];
            sc.body += ld(scope_len(&s0.scope)?) + bytes_len(s0.scope.schema_url.as_bytes());
            g.body += ld(sc.body);
        }
        total += ld(g.body);
    }
    let mut out = Vec::with_capacity(total);
    for g in &groups {
        put_ld(&mut out, 1, g.body);
        let r = &spans[g.scopes.first()?.start].resource;
        put_ld(&mut out, 1, resource_len(r)?);
        put_attrs(&mut out, 1, &r.attributes);
        put_u32(&mut out, 2, r.dropped_attributes_count);
        for sc in &g.scopes {
            put_ld(&mut out, 2, sc.body);
            let scope = &spans[sc.start].scope;
            put_ld(&mut out, 1, scope_len(scope)?);
            put_bytes(&mut out, 1, scope.name.as_bytes());
            put_bytes(&mut out, 2, scope.version.as_bytes());
            put_attrs(&mut out, 3, &scope.attributes);
            put_u32(&mut out, 4, scope.dropped_attributes_count);
            for i in sc.start..sc.end {
                put_span(&mut out, &spans[i], span_lens[i]);
            }
            put_bytes(&mut out, 3, spans[sc.start].scope.schema_url.as_bytes());
        }
        put_bytes(&mut out, 3, r.schema_url.as_bytes());
    }
    debug_assert_eq!(out.len(), total);
    Some(out)
}
