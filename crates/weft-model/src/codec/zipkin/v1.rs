//! Zipkin v1 JSON (read): the model of Zipkin's v1 API and of the tracers of its time —
//! BlkKin among them — where a span carries endpoint-stamped annotations (`cs` client send,
//! `sr` server receive, `ss` server send, `cr` client receive, custom text) and
//! `binaryAnnotations` (key/value pairs, also stamped with an endpoint).
//!
//! # Mapping to weft (the same rules Zipkin uses to turn v1 spans into v2 ones)
//!
//! * A v1 span with client annotations (`cs`/`cr`) **and** server annotations (`sr`/`ss`) was
//!   shared by both hosts: it becomes two spans with the same ids — a `Client` span
//!   (start `cs`, end `cr`, local endpoint of `cs`/`cr`) and a `Server` span (start `sr`, end
//!   `ss`, local endpoint of `sr`/`ss`, marked `weft.zipkin.shared`).
//! * Only one side present: one span of that kind. `ms`/`mr` make `Producer`/`Consumer`
//!   spans. No core annotation: a local span (its service from the `lc` binary annotation's
//!   endpoint or the first annotation's).
//! * The span's own `timestamp`/`duration` win for the client (or only) side, as in v1.
//! * Every annotation — the core ones too, so the cs/sr/ss/cr timeline stays visible — is an
//!   event of the side whose service logged it (by endpoint service name).
//! * `binaryAnnotations`: `ca`/`sa`/`ma` (address annotations) become the remote endpoint of
//!   the server / client / messaging side; others become attributes of the side that logged
//!   them, **typed**: `BOOL` → bool, `I16`/`I32`/`I64` → int, `DOUBLE` → double, `BYTES`
//!   (base64) → bytes, strings stay strings (BlkKin's integer key/values stay integers).
//! * Ids: 16 (or 32) hex digits; ids given as JSON integers (some BlkKin exporters) are read
//!   as 64-bit numbers. `ipv4` as dotted text or as the 32-bit integer of the Thrift model.

use std::borrow::Cow;
use std::net::Ipv4Addr;

use serde::Deserialize;
use serde::de;

use super::{Endpoint, Interner, JsonElements, ZSpan};
use crate::codec::error::{CodecError, ErrorKind, Rejected, Sink, lenient, strict};
use crate::codec::jsonscan::{Element, ElementDecoder, ElementReader, element_error};
use crate::codec::otlp::json::Num;
use crate::codec::stream::read_all;
use crate::id::{SpanId, TraceId};
use crate::span::{Span, SpanKind};
use crate::value::{Str, Value};

pub(crate) const FORMAT: &str = "Zipkin v1 JSON";
const EXPECTED: &str = "a Zipkin v1 JSON array of spans ('[')";

/// Decodes Zipkin v1 JSON; fails on the first span it cannot accept.
pub fn decode_v1_json(bytes: &[u8]) -> Result<Vec<Span>, CodecError> {
    strict(read_all(V1JsonReader::new(bytes)))
}

/// Decodes Zipkin v1 JSON, skipping (and counting) spans it cannot accept.
pub fn decode_v1_json_lenient(bytes: &[u8]) -> Result<(Vec<Span>, Rejected), CodecError> {
    lenient(read_all(V1JsonReader::new(bytes)))
}

/// Streaming reader: one v1 span (one or two weft spans) at a time.
pub(crate) type V1JsonReader<R> = ElementReader<R, JsonElements<1>>;

/// Decodes one v1 span (one or two weft spans), or hands it to the sink as rejected.
impl ElementDecoder for JsonElements<1> {
    const FORMAT: &'static str = FORMAT;
    const KEYS: &'static [&'static str] = &[];
    const EXPECTED: &'static str = EXPECTED;

    fn decode(&mut self, el: Element<'_>, mut sink: Sink<'_>, out: &mut Vec<Span>) -> Result<(), CodecError> {
        let prefix = format!("[{}]", el.index);
        let result = match serde_json::from_slice::<JSpan<'_>>(el.bytes) {
            Ok(j) => convert(j, &mut self.interner).map_err(|e| e.within(&prefix).at(el.start.position())),
            Err(e) => Err(element_error::<JSpan<'_>>(FORMAT, e, el.bytes, el.start, &prefix)),
        };
        match result {
            Ok(spans) => out.extend(spans),
            Err(e) => sink.reject(e)?,
        }
        Ok(())
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JSpan<'a> {
    #[serde(default, borrow)]
    trace_id: Option<JId<'a>>,
    #[serde(default, borrow)]
    id: Option<JId<'a>>,
    #[serde(default, borrow)]
    parent_id: Option<JId<'a>>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    timestamp: Option<Num>,
    #[serde(default)]
    duration: Option<Num>,
    #[serde(default)]
    annotations: Option<Vec<JAnnotation>>,
    #[serde(default)]
    binary_annotations: Option<Vec<JBinary>>,
    #[serde(default)]
    debug: Option<bool>,
}

#[derive(Deserialize)]
struct JAnnotation {
    #[serde(default)]
    timestamp: Option<Num>,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    endpoint: Option<JEndpoint>,
}

#[derive(Deserialize)]
struct JBinary {
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    value: Option<serde_json::Value>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    endpoint: Option<JEndpoint>,
}

#[derive(Deserialize, Clone)]
#[serde(rename_all = "camelCase")]
struct JEndpoint {
    #[serde(default)]
    service_name: Option<String>,
    #[serde(default)]
    ipv4: Option<Ipv4Text>,
    #[serde(default)]
    ipv6: Option<String>,
    #[serde(default)]
    port: Option<i64>,
}

impl JEndpoint {
    fn endpoint(&self) -> Endpoint {
        Endpoint {
            service_name: self.service_name.as_deref().filter(|s| !s.is_empty()).map(Str::from),
            ipv4: self.ipv4.as_ref().map(|i| i.0.as_str()).filter(|s| !s.is_empty()).map(Str::from),
            ipv6: self.ipv6.as_deref().filter(|s| !s.is_empty()).map(Str::from),
            port: self.port.filter(|p| *p != 0),
        }
    }
    fn service(&self) -> Option<&str> {
        self.service_name.as_deref()
    }
}

/// An IPv4 address as dotted text or as the Thrift model's signed 32-bit integer.
#[derive(Clone)]
struct Ipv4Text(String);

deserialize_by_visitor!(<'de> Ipv4Text, "an IPv4 address (text or 32-bit integer)", deserialize_any, {
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Ipv4Text, E> {
        Ok(Ipv4Text(v.to_owned()))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Ipv4Text, E> {
        Ok(Ipv4Text(Ipv4Addr::from(v as u32).to_string()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Ipv4Text, E> {
        Ok(Ipv4Text(Ipv4Addr::from(v as u32).to_string()))
    }
});

/// An id as hex text or as a JSON integer.
enum JId<'a> {
    Hex(Cow<'a, str>),
    Num(u64),
}

deserialize_by_visitor!([<'de: 'a, 'a>] JId<'a> => JId<'de>, "an id (hex text or integer)", deserialize_any, {
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<JId<'de>, E> {
        Ok(JId::Hex(Cow::Borrowed(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<JId<'de>, E> {
        Ok(JId::Hex(Cow::Owned(v.to_owned())))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<JId<'de>, E> {
        Ok(JId::Num(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<JId<'de>, E> {
        Ok(JId::Num(v as u64))
    }
});

fn trace_id(id: Option<&JId<'_>>) -> Result<TraceId, CodecError> {
    match id {
        Some(JId::Num(n)) if *n != 0 => Ok(TraceId::from_u64(*n)),
        Some(JId::Num(_)) => {
            Err(CodecError::new(FORMAT, ErrorKind::InvalidId, "trace id is zero").field("traceId"))
        }
        Some(JId::Hex(s)) => super::trace_id_hex(FORMAT, Some(s), "traceId"),
        None => super::trace_id_hex(FORMAT, None, "traceId"),
    }
}

fn span_id(id: Option<&JId<'_>>, field: &str) -> Result<SpanId, CodecError> {
    match id {
        Some(JId::Num(n)) if *n != 0 => Ok(SpanId::from_u64(*n)),
        Some(JId::Num(_)) => {
            Err(CodecError::new(FORMAT, ErrorKind::InvalidId, "span id is zero").field(field))
        }
        Some(JId::Hex(s)) => super::span_id_hex(FORMAT, Some(s), field),
        None => super::span_id_hex(FORMAT, None, field),
    }
}

/// One side (client, server, producer, consumer, local) being assembled.
struct Side {
    kind: SpanKind,
    start: Option<u64>,
    end: Option<u64>,
    endpoint: Option<JEndpoint>,
    remote: Option<Endpoint>,
    annotations: Vec<(u64, Str)>,
    tags: Vec<(Str, Str)>,
    typed: Vec<(Str, Value)>,
}

impl Side {
    fn new(kind: SpanKind) -> Side {
        Side {
            kind,
            start: None,
            end: None,
            endpoint: None,
            remote: None,
            annotations: Vec::new(),
            tags: Vec::new(),
            typed: Vec::new(),
        }
    }
    fn service(&self) -> Option<&str> {
        self.endpoint.as_ref().and_then(JEndpoint::service)
    }
}

fn convert(j: JSpan<'_>, interner: &mut Interner) -> Result<Vec<Span>, CodecError> {
    let trace = trace_id(j.trace_id.as_ref())?;
    let id = span_id(j.id.as_ref(), "id")?;
    let parent = match &j.parent_id {
        None => None,
        Some(JId::Hex(s)) if s.is_empty() => None,
        Some(p) => {
            let p = span_id(Some(p), "parentId")
                .or_else(|e| if e.message.contains("zero") { Ok(SpanId::INVALID) } else { Err(e) })?;
            p.is_valid().then_some(p)
        }
    };
    let annotations = j.annotations.unwrap_or_default();
    let binaries = j.binary_annotations.unwrap_or_default();

    let mut client = Side::new(SpanKind::Client);
    let mut server = Side::new(SpanKind::Server);
    let mut messaging: Option<Side> = None;
    for a in &annotations {
        let ts = a.timestamp.map_or(0, |n| n.0);
        let ep = a.endpoint.clone();
        match a.value.as_deref() {
            Some("cs") => {
                client.start = Some(ts);
                client.endpoint = client.endpoint.take().or(ep);
            }
            Some("cr") => {
                client.end = Some(ts);
                client.endpoint = client.endpoint.take().or(ep);
            }
            Some("sr") => {
                server.start = Some(ts);
                server.endpoint = server.endpoint.take().or(ep);
            }
            Some("ss") => {
                server.end = Some(ts);
                server.endpoint = server.endpoint.take().or(ep);
            }
            Some("ms") => {
                let m = messaging.get_or_insert_with(|| Side::new(SpanKind::Producer));
                m.start = Some(ts);
                m.endpoint = m.endpoint.take().or(ep);
            }
            Some("mr") => {
                let m = messaging.get_or_insert_with(|| Side::new(SpanKind::Consumer));
                m.kind = SpanKind::Consumer;
                m.start = Some(ts);
                m.endpoint = m.endpoint.take().or(ep);
            }
            _ => {}
        }
    }
    let has_client = client.start.is_some() || client.end.is_some();
    let has_server = server.start.is_some() || server.end.is_some();
    let mut sides: Vec<Side> = Vec::with_capacity(2);
    if has_client {
        sides.push(client);
    }
    if has_server {
        sides.push(server);
    }
    if let Some(m) = messaging {
        sides.push(m);
    }
    if sides.is_empty() {
        let mut local = Side::new(SpanKind::Unspecified);
        local.endpoint = binaries
            .iter()
            .find(|b| b.key.as_deref() == Some("lc"))
            .and_then(|b| b.endpoint.clone())
            .or_else(|| annotations.iter().find_map(|a| a.endpoint.clone()))
            .or_else(|| binaries.iter().find_map(|b| b.endpoint.clone()));
        sides.push(local);
    }
    // The span's own timestamp/duration belong to the first (client or only) side.
    if let Some(ts) = j.timestamp.map(|n| n.0) {
        sides[0].start = Some(ts);
        if let Some(d) = j.duration.map(|n| n.0) {
            sides[0].end = Some(ts.saturating_add(d));
        }
    }
    // Which side a service's annotations belong to: the side with that local service, else
    // the first side.
    let side_of = |sides: &[Side], svc: Option<&str>| -> usize {
        svc.and_then(|s| sides.iter().position(|side| side.service() == Some(s))).unwrap_or(0)
    };
    for a in &annotations {
        let i = side_of(&sides, a.endpoint.as_ref().and_then(JEndpoint::service));
        let ts = a.timestamp.map_or(0, |n| n.0);
        sides[i].annotations.push((ts, a.value.as_deref().map(Str::from).unwrap_or_default()));
    }
    for b in &binaries {
        let key = b.key.as_deref().map(crate::value::key).unwrap_or_default();
        let ep = b.endpoint.as_ref().map(JEndpoint::endpoint);
        let is_true = matches!(b.value, Some(serde_json::Value::Bool(true)))
            || matches!(&b.value, Some(serde_json::Value::String(s)) if s == "true");
        let address_of = match key.as_str() {
            "ca" if is_true => sides.iter().position(|s| s.kind == SpanKind::Server),
            "sa" if is_true => sides.iter().position(|s| s.kind == SpanKind::Client),
            "ma" if is_true => {
                sides.iter().position(|s| matches!(s.kind, SpanKind::Producer | SpanKind::Consumer))
            }
            _ => None,
        };
        if let (Some(i), Some(ep)) = (address_of, ep.clone()) {
            sides[i].remote = Some(ep);
            continue;
        }
        if matches!(key.as_str(), "ca" | "sa" | "ma") && is_true {
            // An address for a side this span does not have: nothing to attach it to.
            continue;
        }
        let i = side_of(&sides, b.endpoint.as_ref().and_then(JEndpoint::service));
        let value = binary_value(b.value.clone(), b.kind.as_deref()).map_err(|m| {
            CodecError::new(FORMAT, ErrorKind::InvalidValue, m)
                .field(format!("binaryAnnotations[{key}].value"))
        })?;
        let text = match &value {
            Value::Str(s) => s.clone(),
            v => compact_str::ToCompactString::to_compact_string(v),
        };
        if !matches!(value, Value::Str(_)) {
            sides[i].typed.push((key.clone(), value));
        }
        sides[i].tags.push((key, text));
    }

    let shared =
        sides.iter().any(|s| s.kind == SpanKind::Client) && sides.iter().any(|s| s.kind == SpanKind::Server);
    let mut out = Vec::with_capacity(sides.len());
    for side in sides {
        let start = side.start.or_else(|| side.annotations.iter().map(|a| a.0).min());
        let end = side.end.or_else(|| side.annotations.iter().map(|a| a.0).max());
        let z = ZSpan {
            trace_id: trace,
            id,
            parent_id: parent,
            name: j.name.as_deref().map(Str::from).unwrap_or_default(),
            kind: side.kind,
            timestamp: start,
            duration: match (start, end) {
                (Some(s), Some(e)) if e > s => Some(e - s),
                _ => None,
            },
            local: side.endpoint.as_ref().map(JEndpoint::endpoint),
            remote: side.remote,
            annotations: side.annotations,
            tags: side.tags,
            debug: j.debug.unwrap_or(false),
            shared: shared && side.kind == SpanKind::Server,
        };
        let mut span = super::to_span(z, interner);
        for (k, v) in side.typed {
            if let Some(kv) = span.attributes.0.iter_mut().find(|kv| kv.key == k) {
                kv.value = v;
            }
        }
        out.push(span);
    }
    Ok(out)
}

/// A binary annotation's value, typed by its `type` (or by its JSON type when absent).
fn binary_value(v: Option<serde_json::Value>, kind: Option<&str>) -> Result<Value, String> {
    use serde_json::Value as J;
    let v = v.unwrap_or(J::Null);
    Ok(match (kind.unwrap_or(""), v) {
        ("BOOL", J::Bool(b)) => Value::Bool(b),
        ("BOOL", J::String(s)) => Value::Bool(s == "true"),
        ("I16" | "I32" | "I64", J::Number(n)) => {
            Value::I64(n.as_i64().ok_or(format!("{n} is not an integer"))?)
        }
        ("I16" | "I32" | "I64", J::String(s)) => {
            Value::I64(s.parse().map_err(|_| format!("{s:?} is not an integer"))?)
        }
        ("DOUBLE", J::Number(n)) => Value::F64(n.as_f64().unwrap_or(f64::NAN)),
        ("DOUBLE", J::String(s)) => Value::F64(s.parse().map_err(|_| format!("{s:?} is not a double"))?),
        ("BYTES", J::String(s)) => {
            Value::Bytes(crate::codec::jsonw::base64_decode(&s).ok_or(format!("{s:?} is not base64"))?)
        }
        (_, J::String(s)) => Value::Str(s.into()),
        (_, J::Bool(b)) => Value::Bool(b),
        (_, J::Number(n)) => match n.as_i64() {
            Some(i) => Value::I64(i),
            None => Value::F64(n.as_f64().unwrap_or(f64::NAN)),
        },
        (_, J::Null) => Value::Str(Str::default()),
        (_, other) => Value::Str(other.to_string().into()),
    })
}
