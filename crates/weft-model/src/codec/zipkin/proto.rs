//! Zipkin v2 proto3 (`zipkin.proto3.ListOfSpans`, `POST /api/v2/spans` with
//! `Content-Type: application/x-protobuf`). The few message types are declared here with
//! prost's derive (no protoc needed); field numbers follow openzipkin's `zipkin.proto`.
//!
//! Same mapping as the JSON form; IP addresses travel as 4 / 16 raw bytes and are shown as
//! text in weft (`net.host.ip`, `net.peer.ip`). Tags are a protobuf map, so their order is
//! not kept (written sorted by key).

use std::net::{Ipv4Addr, Ipv6Addr};

use prost::Message;

use super::{Endpoint, Interner, ZSpan};
use crate::codec::Losses;
use crate::codec::error::{CodecError, ErrorKind, Mode, Position, Rejected, Sink, lenient, strict};
use crate::codec::otlp::wire;
use crate::id::{SpanId, TraceId};
use crate::span::{Span, SpanKind};

pub(crate) const FORMAT: &str = "Zipkin v2 protobuf";

/// `zipkin.proto3.Span`.
#[derive(Clone, PartialEq, Message)]
pub struct ProtoSpan {
    /// 8 or 16 bytes, big-endian.
    #[prost(bytes = "vec", tag = "1")]
    pub trace_id: Vec<u8>,
    /// 8 bytes or empty.
    #[prost(bytes = "vec", tag = "2")]
    pub parent_id: Vec<u8>,
    /// 8 bytes.
    #[prost(bytes = "vec", tag = "3")]
    pub id: Vec<u8>,
    /// `Kind`: 0 unspecified, 1 CLIENT, 2 SERVER, 3 PRODUCER, 4 CONSUMER.
    #[prost(int32, tag = "4")]
    pub kind: i32,
    /// Operation name.
    #[prost(string, tag = "5")]
    pub name: String,
    /// Epoch µs.
    #[prost(fixed64, tag = "6")]
    pub timestamp: u64,
    /// µs.
    #[prost(uint64, tag = "7")]
    pub duration: u64,
    /// Local endpoint.
    #[prost(message, optional, tag = "8")]
    pub local_endpoint: Option<ProtoEndpoint>,
    /// Remote endpoint.
    #[prost(message, optional, tag = "9")]
    pub remote_endpoint: Option<ProtoEndpoint>,
    /// Annotations.
    #[prost(message, repeated, tag = "10")]
    pub annotations: Vec<ProtoAnnotation>,
    /// Tags.
    #[prost(btree_map = "string, string", tag = "11")]
    pub tags: std::collections::BTreeMap<String, String>,
    /// Debug flag.
    #[prost(bool, tag = "12")]
    pub debug: bool,
    /// Shared flag.
    #[prost(bool, tag = "13")]
    pub shared: bool,
}

/// `zipkin.proto3.Endpoint`.
#[derive(Clone, PartialEq, Message)]
pub struct ProtoEndpoint {
    /// Service name.
    #[prost(string, tag = "1")]
    pub service_name: String,
    /// 4 bytes.
    #[prost(bytes = "vec", tag = "2")]
    pub ipv4: Vec<u8>,
    /// 16 bytes.
    #[prost(bytes = "vec", tag = "3")]
    pub ipv6: Vec<u8>,
    /// Port.
    #[prost(int32, tag = "4")]
    pub port: i32,
}

/// `zipkin.proto3.Annotation`.
#[derive(Clone, PartialEq, Message)]
pub struct ProtoAnnotation {
    /// Epoch µs.
    #[prost(fixed64, tag = "1")]
    pub timestamp: u64,
    /// Value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `zipkin.proto3.ListOfSpans`.
#[derive(Clone, PartialEq, Message)]
pub struct ListOfSpans {
    /// Spans.
    #[prost(message, repeated, tag = "1")]
    pub spans: Vec<ProtoSpan>,
}

/// Decodes a `ListOfSpans`; fails on the first span it cannot accept.
pub fn decode_v2_proto(bytes: &[u8]) -> Result<Vec<Span>, CodecError> {
    strict(|mode, out, rejected| decode_into(bytes, mode, out, rejected))
}

/// Decodes a `ListOfSpans`, skipping (and counting) spans it cannot accept.
pub fn decode_v2_proto_lenient(bytes: &[u8]) -> Result<(Vec<Span>, Rejected), CodecError> {
    lenient(|mode, out, rejected| decode_into(bytes, mode, out, rejected))
}

fn decode_into(
    bytes: &[u8],
    mode: Mode,
    out: &mut Vec<Span>,
    rejected: &mut Rejected,
) -> Result<(), CodecError> {
    let mut interner = Interner::default();
    for (i, item) in wire::TopLevel::new(bytes, FORMAT, "spans").enumerate() {
        let (offset, element) = item?;
        decode_one(element, offset, i, &mut interner, &mut Sink { mode, rejected }, out)?;
    }
    Ok(())
}

/// Decodes the `index`-th span element found at `offset`.
pub(crate) fn decode_one(
    element: &[u8],
    offset: u64,
    index: usize,
    interner: &mut Interner,
    sink: &mut Sink<'_>,
    out: &mut Vec<Span>,
) -> Result<(), CodecError> {
    let result = ProtoSpan::decode(element)
        .map_err(|e| CodecError::new(FORMAT, ErrorKind::Syntax, format!("cannot decode Span: {e}")).source(e))
        .and_then(into_zipkin)
        .map_err(|e| e.within(&format!("spans[{index}]")).at(Position::Offset(offset)));
    match result {
        Ok(z) => out.push(super::to_span(z, interner)),
        Err(e) => sink.reject(e)?,
    }
    Ok(())
}

fn bad_id(field: &str, msg: &str) -> CodecError {
    CodecError::new(FORMAT, ErrorKind::InvalidId, msg.to_owned()).field(field)
}

fn into_zipkin(p: ProtoSpan) -> Result<ZSpan, CodecError> {
    let trace_id = match p.trace_id.len() {
        16 => TraceId(p.trace_id.as_slice().try_into().map_err(|_| bad_id("trace_id", "bad length"))?),
        8 => TraceId::from_u64(u64::from_be_bytes(
            p.trace_id.as_slice().try_into().map_err(|_| bad_id("trace_id", "bad length"))?,
        )),
        n => return Err(bad_id("trace_id", &format!("must be 8 or 16 bytes, got {n}"))),
    };
    if !trace_id.is_valid() {
        return Err(bad_id("trace_id", "trace id is all zero"));
    }
    let id = SpanId::from_bytes(&p.id).map_err(|e| super::id_error(FORMAT, "id", e))?;
    if !id.is_valid() {
        return Err(bad_id("id", "span id is all zero"));
    }
    let parent_id = if p.parent_id.is_empty() {
        None
    } else {
        let s = SpanId::from_bytes(&p.parent_id).map_err(|e| super::id_error(FORMAT, "parent_id", e))?;
        s.is_valid().then_some(s)
    };
    let kind = match p.kind {
        0 => SpanKind::Unspecified,
        1 => SpanKind::Client,
        2 => SpanKind::Server,
        3 => SpanKind::Producer,
        4 => SpanKind::Consumer,
        k => {
            return Err(
                CodecError::new(FORMAT, ErrorKind::InvalidValue, format!("unknown kind {k}")).field("kind")
            );
        }
    };
    Ok(ZSpan {
        trace_id,
        id,
        parent_id,
        name: p.name.into(),
        kind,
        timestamp: (p.timestamp != 0).then_some(p.timestamp),
        duration: (p.duration != 0).then_some(p.duration),
        local: p
            .local_endpoint
            .map(endpoint_from_proto)
            .transpose()
            .map_err(|e| e.within("local_endpoint"))?,
        remote: p
            .remote_endpoint
            .map(endpoint_from_proto)
            .transpose()
            .map_err(|e| e.within("remote_endpoint"))?,
        annotations: p.annotations.into_iter().map(|a| (a.timestamp, a.value.into())).collect(),
        tags: p.tags.into_iter().map(|(k, v)| (crate::value::key(&k), v.into())).collect(),
        debug: p.debug,
        shared: p.shared,
    })
}

fn endpoint_from_proto(e: ProtoEndpoint) -> Result<Endpoint, CodecError> {
    let ipv4 = match e.ipv4.len() {
        0 => None,
        4 => Some(compact_str::format_compact!(
            "{}",
            Ipv4Addr::new(e.ipv4[0], e.ipv4[1], e.ipv4[2], e.ipv4[3])
        )),
        n => {
            return Err(CodecError::new(
                FORMAT,
                ErrorKind::InvalidValue,
                format!("ipv4 must be 4 bytes, got {n}"),
            )
            .field("ipv4"));
        }
    };
    let ipv6 = match <[u8; 16]>::try_from(e.ipv6.as_slice()) {
        _ if e.ipv6.is_empty() => None,
        Ok(b) => Some(compact_str::format_compact!("{}", Ipv6Addr::from(b))),
        Err(_) => {
            return Err(CodecError::new(
                FORMAT,
                ErrorKind::InvalidValue,
                format!("ipv6 must be 16 bytes, got {}", e.ipv6.len()),
            )
            .field("ipv6"));
        }
    };
    Ok(Endpoint {
        service_name: (!e.service_name.is_empty()).then(|| e.service_name.into()),
        ipv4,
        ipv6,
        port: (e.port != 0).then_some(e.port as i64),
    })
}

/// Encodes spans as a `ListOfSpans`.
pub fn encode_v2_proto(spans: &[Span]) -> Vec<u8> {
    encode_v2_proto_with(spans, &mut Losses::default())
}

/// Encodes spans as a `ListOfSpans`, counting what Zipkin cannot carry.
pub fn encode_v2_proto_with(spans: &[Span], losses: &mut Losses) -> Vec<u8> {
    ListOfSpans { spans: spans.iter().map(|s| to_proto(s, losses)).collect() }.encode_to_vec()
}

/// Loss: an IP text that is not an address cannot travel as bytes.
pub const LOST_BAD_IP: &str = "endpoint IPs that are not addresses dropped";

/// The proto form of one span.
pub(crate) fn to_proto(s: &Span, losses: &mut Losses) -> ProtoSpan {
    let z = super::from_span(s, losses);
    let high_zero = z.trace_id.0[..8] == [0; 8];
    ProtoSpan {
        trace_id: if high_zero { z.trace_id.0[8..].to_vec() } else { z.trace_id.0.to_vec() },
        parent_id: z.parent_id.map(|p| p.0.to_vec()).unwrap_or_default(),
        id: z.id.0.to_vec(),
        kind: match z.kind {
            SpanKind::Client => 1,
            SpanKind::Server => 2,
            SpanKind::Producer => 3,
            SpanKind::Consumer => 4,
            SpanKind::Unspecified | SpanKind::Internal => 0,
        },
        name: z.name.into(),
        timestamp: z.timestamp.unwrap_or(0),
        duration: z.duration.unwrap_or(0),
        local_endpoint: z.local.map(|e| endpoint_to_proto(e, losses)),
        remote_endpoint: z.remote.map(|e| endpoint_to_proto(e, losses)),
        annotations: z
            .annotations
            .into_iter()
            .map(|(timestamp, value)| ProtoAnnotation { timestamp, value: value.into() })
            .collect(),
        tags: z.tags.into_iter().map(|(k, v)| (k.into(), v.into())).collect(),
        debug: z.debug,
        shared: z.shared,
    }
}

fn endpoint_to_proto(e: Endpoint, losses: &mut Losses) -> ProtoEndpoint {
    let ipv4 = e.ipv4.and_then(|s| {
        let ip = s.parse::<Ipv4Addr>().ok();
        if ip.is_none() {
            losses.add(LOST_BAD_IP, 1);
        }
        ip
    });
    let ipv6 = e.ipv6.and_then(|s| {
        let ip = s.parse::<Ipv6Addr>().ok();
        if ip.is_none() {
            losses.add(LOST_BAD_IP, 1);
        }
        ip
    });
    ProtoEndpoint {
        service_name: e.service_name.map(String::from).unwrap_or_default(),
        ipv4: ipv4.map(|ip| ip.octets().to_vec()).unwrap_or_default(),
        ipv6: ipv6.map(|ip| ip.octets().to_vec()).unwrap_or_default(),
        port: e.port.and_then(|p| i32::try_from(p).ok()).unwrap_or(0),
    }
}
