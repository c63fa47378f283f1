//! OTLP — OpenTelemetry's protocol, in its protobuf and JSON encodings.
//!
//! The protobuf types are the `opentelemetry-proto` crate's generated ones, re-exported as
//! [`proto`]. A protobuf payload is an `ExportTraceServiceRequest` (the body of an OTLP/HTTP
//! `POST /v1/traces`, the gRPC `Export` argument; `TracesData` has the same wire layout).
//! The JSON encoding is the OTLP/JSON one ([`decode_json`], [`encode_json`]).
//!
//! # Mapping
//!
//! OTLP is weft's native model, so both directions are lossless except where noted.
//!
//! | OTLP | weft | notes |
//! |---|---|---|
//! | `ResourceSpans.resource` + `schema_url` | [`Span::resource`] (shared `Arc`) | `entity_refs` (development) is not carried |
//! | `ScopeSpans.scope` + `schema_url` | [`Span::scope`] (shared `Arc`) | |
//! | `trace_id`, `span_id` (16 / 8 bytes) | [`Span::trace_id`], [`Span::span_id`] | wrong length or all zero: the span is rejected |
//! | `parent_span_id` | [`Span::parent_span_id`] | empty or all zero = `None`; another length rejects the span |
//! | `trace_state`, `flags`, `name`, `kind`, times | same fields | unknown kind numbers read as `Unspecified` |
//! | `attributes`, `dropped_*_count` | same | `AnyValue` ↔ [`Value`] one to one; an `AnyValue` without a value is [`Value::Empty`]; `string_value_strindex` (profiles only) reads as `Empty` |
//! | `events` | [`Span::events`] | |
//! | `links` | [`Span::links`] | the link attribute `weft.link.relation` carries [`LinkRelation`]; invalid link ids reject the span |
//! | `status` | [`Span::status`] | unknown codes read as `Unset` |
//!
//! Decoding goes from the wire straight into weft's spans (no intermediate generated
//! messages; see `direct.rs`), following prost's rules exactly — [`from_request`] over the
//! generated types is the reference it is tested against.
//!
//! Encoding likewise writes the wire bytes straight from the spans (`encode.rs`, the one OTLP
//! protobuf encoder; [`to_request`] is its output decoded by prost). It groups *consecutive* spans that share a resource and scope into one
//! `ResourceSpans` / `ScopeSpans`, so decode → encode keeps the grouping of the input.
//!
//! # Partial success
//!
//! The strict decoders ([`decode_proto`], [`decode_json`], [`from_request`]) fail on the first
//! span they cannot accept; the lenient ones ([`decode_proto_lenient`],
//! [`decode_json_lenient`], [`from_request_lenient`]) skip such spans and count them in
//! [`Rejected`], which is what an OTLP receiver answers as `partial_success`. Malformed
//! protobuf or JSON fails the whole payload in both modes.

use std::sync::Arc;

use prost::Message;

use super::error::{CodecError, ErrorKind, Mode, Rejected, Sink, lenient, strict};
use crate::conv;
use crate::id::{SpanId, TraceId};
use crate::span::{Link, LinkRelation, Resource, Scope, Span, SpanEvent, SpanKind, Status, StatusCode};
use crate::value::{Attributes, KeyValue, Value};

mod direct;
mod encode;
pub mod json;
pub(crate) mod wire;

pub use json::{decode_json, decode_json_lenient, encode_json, encode_json_to};

/// The `opentelemetry-proto` generated types weft uses.
pub mod proto {
    pub use opentelemetry_proto::tonic::collector::trace::v1::{
        ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
    };
    pub use opentelemetry_proto::tonic::common::v1::{
        AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList, any_value,
    };
    pub use opentelemetry_proto::tonic::resource::v1::Resource;
    pub use opentelemetry_proto::tonic::trace::v1::{
        ResourceSpans, ScopeSpans, Span, Status, TracesData, span, status,
    };
}

pub(crate) const PROTO: &str = "OTLP protobuf";

/// `google.rpc.Status`: the body of an OTLP/HTTP error answer in protobuf and the details a
/// gRPC status carries (receivers write it, exporters read its message).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RpcStatus {
    /// The gRPC status code.
    #[prost(int32, tag = "1")]
    pub code: i32,
    /// What went wrong.
    #[prost(string, tag = "2")]
    pub message: String,
    /// Typed details, e.g. a `google.rpc.RetryInfo`.
    #[prost(message, repeated, tag = "3")]
    pub details: Vec<RpcAny>,
}

/// `google.protobuf.Any`: one detail of an [`RpcStatus`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct RpcAny {
    /// `type.googleapis.com/<message name>`.
    #[prost(string, tag = "1")]
    pub type_url: String,
    /// The encoded message.
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

impl RpcStatus {
    /// What an error answer's body says: its `RpcStatus` message when it decodes as one with a
    /// message, else its first 512 bytes as text (a proxy's HTML, a JSON receiver's answer).
    pub fn message_of(body: &[u8]) -> String {
        match RpcStatus::decode(body) {
            Ok(s) if !s.message.is_empty() => s.message,
            _ => String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned(),
        }
    }
}

/// Decodes an `ExportTraceServiceRequest` (or `TracesData`) protobuf; fails on the first
/// invalid span.
pub fn decode_proto(bytes: &[u8]) -> Result<Vec<Span>, CodecError> {
    strict(|mode, out, rejected| decode_proto_into(bytes, mode, out, rejected))
}

/// Decodes an `ExportTraceServiceRequest` protobuf, skipping (and counting) spans with
/// invalid ids. Malformed protobuf still fails the whole payload.
pub fn decode_proto_lenient(bytes: &[u8]) -> Result<(Vec<Span>, Rejected), CodecError> {
    lenient(|mode, out, rejected| decode_proto_into(bytes, mode, out, rejected))
}

fn decode_proto_into(
    bytes: &[u8],
    mode: Mode,
    out: &mut Vec<Span>,
    rejected: &mut Rejected,
) -> Result<(), CodecError> {
    let mut seen = direct::Seen::default();
    for (index, item) in wire::TopLevel::new(bytes, PROTO, "resource_spans").enumerate() {
        let (offset, element) = item?;
        let mut sink = Sink { mode, rejected };
        direct::resource_spans(element, offset, index, &mut sink, &mut seen, out)?;
    }
    Ok(())
}

/// Decodes the `index`-th `ResourceSpans` element (at byte `offset`) straight into `out`.
pub(crate) fn decode_resource_spans_into(
    element: &[u8],
    offset: u64,
    index: usize,
    sink: &mut Sink<'_>,
    out: &mut Vec<Span>,
) -> Result<(), CodecError> {
    direct::resource_spans(element, offset, index, sink, &mut direct::Seen::default(), out)
}

/// Encodes spans as an `ExportTraceServiceRequest` protobuf (straight from the spans, see
/// `encode.rs`; the one OTLP protobuf encoder of weft).
pub fn encode_proto(spans: &[Span]) -> Vec<u8> {
    encode::encode(spans)
}

/// Converts a decoded request; fails on the first invalid span (the error names the field,
/// e.g. `resource_spans[0].scope_spans[1].spans[4].trace_id`).
pub fn from_request(req: proto::ExportTraceServiceRequest) -> Result<Vec<Span>, CodecError> {
    let mut rejected = Rejected::default();
    let mut out = Vec::new();
    for (i, rs) in req.resource_spans.into_iter().enumerate() {
        convert_resource_spans(rs, i, &mut Sink { mode: Mode::Strict, rejected: &mut rejected }, &mut out)?;
    }
    Ok(out)
}

/// Converts a decoded request, skipping (and counting) invalid spans.
pub fn from_request_lenient(req: proto::ExportTraceServiceRequest) -> (Vec<Span>, Rejected) {
    let mut rejected = Rejected::default();
    let mut out = Vec::new();
    for (i, rs) in req.resource_spans.into_iter().enumerate() {
        // Lenient mode never returns an error from conversion.
        let _ = convert_resource_spans(
            rs,
            i,
            &mut Sink { mode: Mode::Lenient, rejected: &mut rejected },
            &mut out,
        );
    }
    (out, rejected)
}

/// Converts one `ResourceSpans` (the `index`-th of its request) into `out`.
pub(crate) fn convert_resource_spans(
    rs: proto::ResourceSpans,
    index: usize,
    sink: &mut Sink<'_>,
    out: &mut Vec<Span>,
) -> Result<(), CodecError> {
    let resource = Arc::new(match rs.resource {
        Some(r) => Resource {
            attributes: attrs_from_proto(r.attributes),
            dropped_attributes_count: r.dropped_attributes_count,
            schema_url: rs.schema_url,
        },
        None => Resource { schema_url: rs.schema_url, ..Resource::default() },
    });
    for (j, ss) in rs.scope_spans.into_iter().enumerate() {
        let scope = Arc::new(match ss.scope {
            Some(s) => Scope {
                name: s.name,
                version: s.version,
                attributes: attrs_from_proto(s.attributes),
                dropped_attributes_count: s.dropped_attributes_count,
                schema_url: ss.schema_url,
            },
            None => Scope { schema_url: ss.schema_url, ..Scope::default() },
        });
        out.reserve(ss.spans.len());
        for (k, span) in ss.spans.into_iter().enumerate() {
            match span_from_proto(span, &resource, &scope) {
                Ok(s) => out.push(s),
                Err(e) => {
                    sink.reject(e.within(&format!("resource_spans[{index}].scope_spans[{j}].spans[{k}]")))?
                }
            }
        }
    }
    Ok(())
}

fn id_err(field: &str, e: crate::IdError) -> CodecError {
    CodecError::new(PROTO, ErrorKind::InvalidId, e.to_string()).field(field)
}

pub(crate) fn trace_id_from_bytes(b: &[u8], field: &str) -> Result<TraceId, CodecError> {
    let t = TraceId::from_bytes(b).map_err(|e| id_err(field, e))?;
    if !t.is_valid() {
        return Err(CodecError::new(PROTO, ErrorKind::InvalidId, "trace id is all zero").field(field));
    }
    Ok(t)
}

pub(crate) fn span_id_from_bytes(b: &[u8], field: &str) -> Result<SpanId, CodecError> {
    let s = SpanId::from_bytes(b).map_err(|e| id_err(field, e))?;
    if !s.is_valid() {
        return Err(CodecError::new(PROTO, ErrorKind::InvalidId, "span id is all zero").field(field));
    }
    Ok(s)
}

pub(crate) fn parent_from_bytes(b: &[u8]) -> Result<Option<SpanId>, CodecError> {
    if b.is_empty() {
        return Ok(None);
    }
    let s = SpanId::from_bytes(b).map_err(|e| id_err("parent_span_id", e))?;
    Ok(s.is_valid().then_some(s))
}

fn span_from_proto(s: proto::Span, resource: &Arc<Resource>, scope: &Arc<Scope>) -> Result<Span, CodecError> {
    let trace_id = trace_id_from_bytes(&s.trace_id, "trace_id")?;
    let span_id = span_id_from_bytes(&s.span_id, "span_id")?;
    let parent_span_id = parent_from_bytes(&s.parent_span_id)?;
    let mut links = Vec::with_capacity(s.links.len());
    for (i, l) in s.links.into_iter().enumerate() {
        let trace_id =
            trace_id_from_bytes(&l.trace_id, "trace_id").map_err(|e| e.within(&format!("links[{i}]")))?;
        let span_id =
            span_id_from_bytes(&l.span_id, "span_id").map_err(|e| e.within(&format!("links[{i}]")))?;
        links.push(link(
            trace_id,
            span_id,
            l.trace_state,
            attrs_from_proto(l.attributes),
            l.dropped_attributes_count,
            l.flags,
        ));
    }
    let status = s
        .status
        .map(|st| Status { code: StatusCode::from_i32(st.code), message: st.message })
        .unwrap_or_default();
    Ok(Span {
        trace_id,
        span_id,
        parent_span_id,
        trace_state: s.trace_state,
        flags: s.flags,
        name: s.name.into(),
        kind: SpanKind::from_i32(s.kind),
        start_ns: s.start_time_unix_nano,
        end_ns: s.end_time_unix_nano,
        status,
        attributes: attrs_from_proto(s.attributes),
        events: s
            .events
            .into_iter()
            .map(|e| SpanEvent {
                time_ns: e.time_unix_nano,
                name: e.name.into(),
                attributes: attrs_from_proto(e.attributes),
                dropped_attributes_count: e.dropped_attributes_count,
            })
            .collect(),
        links,
        resource: Arc::clone(resource),
        scope: Arc::clone(scope),
        dropped_attributes_count: s.dropped_attributes_count,
        dropped_events_count: s.dropped_events_count,
        dropped_links_count: s.dropped_links_count,
    })
}

/// A decoded link, its relation taken out of its attributes ([`split_relation`]).
#[inline]
pub(crate) fn link(
    trace_id: TraceId,
    span_id: SpanId,
    trace_state: String,
    attributes: Attributes,
    dropped_attributes_count: u32,
    flags: u32,
) -> Link {
    let (relation, attributes) = split_relation(attributes);
    Link { trace_id, span_id, trace_state, relation, attributes, dropped_attributes_count, flags }
}

/// Takes the `weft.link.relation` attribute out of a link's attributes when it names a
/// known relation (unknown text stays an ordinary attribute).
pub(crate) fn split_relation(mut attributes: Attributes) -> (LinkRelation, Attributes) {
    let Some(pos) = attributes.0.iter().position(|kv| kv.key == conv::LINK_RELATION) else {
        return (LinkRelation::Unspecified, attributes);
    };
    let rel = match &attributes.0[pos].value {
        Value::Str(s) => LinkRelation::parse(s),
        _ => LinkRelation::Unspecified,
    };
    if rel != LinkRelation::Unspecified {
        attributes.0.remove(pos);
    }
    (rel, attributes)
}

/// A link's attributes as they go on the wire: its own plus the relation.
pub(crate) fn link_wire_attributes(l: &Link) -> impl Iterator<Item = (&str, Option<&Value>, Option<&str>)> {
    let rel = (l.relation != LinkRelation::Unspecified)
        .then(|| (conv::LINK_RELATION, None, Some(l.relation.as_str())));
    l.attributes.iter().map(|kv| (kv.key.as_str(), Some(&kv.value), None)).chain(rel)
}

pub(crate) fn attrs_from_proto(kvs: Vec<proto::KeyValue>) -> Attributes {
    Attributes(
        kvs.into_iter()
            .map(|kv| KeyValue { key: kv.key.into(), value: value_from_proto(kv.value) })
            .collect(),
    )
}

pub(crate) fn value_from_proto(v: Option<proto::AnyValue>) -> Value {
    use proto::any_value::Value as V;
    match v.and_then(|v| v.value) {
        None => Value::Empty,
        Some(V::StringValue(s)) => Value::Str(s.into()),
        Some(V::BoolValue(b)) => Value::Bool(b),
        Some(V::IntValue(i)) => Value::I64(i),
        Some(V::DoubleValue(d)) => Value::F64(d),
        Some(V::BytesValue(b)) => Value::Bytes(b),
        Some(V::ArrayValue(a)) => {
            Value::Array(a.values.into_iter().map(|v| value_from_proto(Some(v))).collect())
        }
        Some(V::KvlistValue(l)) => Value::Map(attrs_from_proto(l.values).0),
        Some(V::StringValueStrindex(_)) => Value::Empty,
    }
}

/// Converts spans to the generated request type (for gRPC clients and tests): the bytes of
/// [`encode_proto`] decoded by prost, so both carry exactly the same message.
pub fn to_request(spans: &[Span]) -> proto::ExportTraceServiceRequest {
    // The encoder's output always decodes (`tests/it/otlp.rs` checks it against prost).
    proto::ExportTraceServiceRequest::decode(&encode_proto(spans)[..]).unwrap_or_default()
}

pub(crate) fn same<T: PartialEq>(a: &Arc<T>, b: &Arc<T>) -> bool {
    Arc::ptr_eq(a, b) || **a == **b
}

#[cfg(test)]
mod tests;
