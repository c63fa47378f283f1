//! Zipkin: v2 JSON and v2 proto3 (read and write), v1 JSON (read; the format BlkKin and
//! Zipkin's v1 API produce).
//!
//! # Mapping (v2)
//!
//! | Zipkin v2 | weft | notes |
//! |---|---|---|
//! | `traceId` (16 or 32 hex) | [`Span::trace_id`] | 64-bit ids are widened with zeros; ids whose high half is zero are written as 16 digits, as Zipkin does |
//! | `id`, `parentId` | `span_id`, `parent_span_id` | |
//! | `name` | `name` | |
//! | `kind` `CLIENT`/`SERVER`/`PRODUCER`/`CONSUMER` | [`SpanKind`] | absent ↔ `Unspecified`; `Internal` is written without a kind (loss: "INTERNAL kinds written as absent") |
//! | `timestamp`, `duration` (µs) | `start_ns`, `end_ns` | ×1000; writing truncates ns to µs (loss counted when a time is not a whole µs); a positive duration under 1 µs is written as 1, as Zipkin requires |
//! | `localEndpoint.serviceName` | resource `service.name` | other resource attributes are not carried (loss) |
//! | `localEndpoint.ipv4`/`ipv6`, `port` | span attributes `net.host.ip`, `net.host.port` | written to the endpoint only when they are an IP address / a port 1–65535 (else they stay tags); an endpoint field replaces a tag of the same name |
//! | `remoteEndpoint.serviceName`, `ipv4`/`ipv6`, `port` | `peer.service`, `net.peer.ip`, `net.peer.port` | the same rules |
//! | `annotations[]` | [`Span::events`] | an event with attributes is written as the value `{"<name>":{<attributes>}}` (OpenTelemetry's Zipkin mapping) and read back from that form |
//! | `tags` | [`Span::attributes`] | tags are strings: other value types are written as text ([`Value`]'s `Display`) and read back as strings (loss: "non-string attributes stringified") |
//! | tag `error` | [`Status`] `Error` + message | Unset has no tag; Ok is written as `otel.status_code=OK`; `otel.status_code`/`otel.status_description` are read too |
//! | tags `otel.scope.name`, `otel.scope.version` | [`Span::scope`] | also read from `otel.library.*`; scope attributes are not carried |
//! | `shared`, `debug` | attributes `weft.zipkin.shared`, `weft.zipkin.debug` (`true`) | |
//! | — | links, trace state, flags, dropped counts | not carried (links counted as loss) |
//!
//! Spans read from Zipkin share one `Arc<Resource>` per service name.

use std::collections::HashMap;
use std::sync::Arc;

use crate::codec::Losses;
use crate::codec::error::{CodecError, ErrorKind};
use crate::conv;
use crate::id::{SpanId, TraceId};
use crate::span::{Resource, Scope, Span, SpanEvent, SpanKind, Status, StatusCode};
use crate::value::{Attributes, KeyValue, Str, Value};

pub mod proto;
mod scan;
pub mod v1;
pub mod v2;

pub use proto::{decode_v2_proto, decode_v2_proto_lenient, encode_v2_proto, encode_v2_proto_with};
pub use v1::{decode_v1_json, decode_v1_json_lenient};
pub use v2::{decode_v2_json, decode_v2_json_lenient, encode_v2_json, encode_v2_json_with};

/// Loss: links have no Zipkin counterpart.
pub const LOST_LINKS: &str = "links dropped";
/// Loss: tag values are strings.
pub const LOST_STRINGIFIED: &str = "non-string attributes stringified";
/// Loss: resource attributes other than `service.name`.
pub const LOST_RESOURCE_ATTRS: &str = "resource attributes dropped";
/// Loss: scope attributes.
pub const LOST_SCOPE_ATTRS: &str = "scope attributes dropped";
/// Loss: sub-microsecond precision.
pub const LOST_PRECISION: &str = "spans with times truncated to µs";
/// Loss: Zipkin has no INTERNAL kind.
pub const LOST_INTERNAL: &str = "INTERNAL kinds written as absent";
/// Loss: trace state.
pub const LOST_TRACE_STATE: &str = "trace states dropped";
/// Loss: event attribute values that JSON text cannot type (bytes).
pub const LOST_EVENT_BYTES: &str = "event byte values written as base64 text";

/// A Zipkin endpoint.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Endpoint {
    pub service_name: Option<Str>,
    pub ipv4: Option<Str>,
    pub ipv6: Option<Str>,
    pub port: Option<i64>,
}

impl Endpoint {
    fn is_empty(&self) -> bool {
        self.service_name.is_none() && self.ipv4.is_none() && self.ipv6.is_none() && self.port.is_none()
    }
}

/// A Zipkin v2 span with ids already parsed: what the JSON and proto3 codecs share.
#[derive(Debug, Clone, Default)]
pub(crate) struct ZSpan {
    pub trace_id: TraceId,
    pub id: SpanId,
    pub parent_id: Option<SpanId>,
    pub name: Str,
    pub kind: SpanKind,
    pub timestamp: Option<u64>,
    pub duration: Option<u64>,
    pub local: Option<Endpoint>,
    pub remote: Option<Endpoint>,
    pub annotations: Vec<(u64, Str)>,
    pub tags: Vec<(Str, Str)>,
    pub debug: bool,
    pub shared: bool,
}

pub(crate) fn kind_from_str(s: &str) -> Option<SpanKind> {
    Some(match s {
        "CLIENT" => SpanKind::Client,
        "SERVER" => SpanKind::Server,
        "PRODUCER" => SpanKind::Producer,
        "CONSUMER" => SpanKind::Consumer,
        _ => return None,
    })
}

pub(crate) fn kind_to_str(k: SpanKind) -> Option<&'static str> {
    Some(match k {
        SpanKind::Client => "CLIENT",
        SpanKind::Server => "SERVER",
        SpanKind::Producer => "PRODUCER",
        SpanKind::Consumer => "CONSUMER",
        SpanKind::Unspecified | SpanKind::Internal => return None,
    })
}

/// The element decoder of Zipkin JSON version `V` (1 or 2, in [`v1`] and [`v2`]): one span
/// object of the array at a time, resources and scopes shared across them.
#[derive(Default)]
pub(crate) struct JsonElements<const V: u8> {
    interner: Interner,
}

/// Shares resources and scopes between the spans of one input (bounded: a pathological
/// input with ever-new service names only costs sharing, not memory).
#[derive(Default)]
pub(crate) struct Interner {
    /// The first few services, searched before hashing (a handful is the usual case).
    few: Vec<(Str, Arc<Resource>)>,
    resources: HashMap<String, Arc<Resource>>,
    scopes: HashMap<(Str, Str), Arc<Scope>>,
    no_service: Arc<Resource>,
    no_scope: Arc<Scope>,
}

const INTERN_LIMIT: usize = 4096;
const FEW: usize = 8;

impl Interner {
    pub(crate) fn resource(&mut self, service: Option<&str>) -> Arc<Resource> {
        let Some(name) = service else { return Arc::clone(&self.no_service) };
        if let Some((_, r)) = self.few.iter().find(|(n, _)| n == name) {
            return Arc::clone(r);
        }
        if let Some(r) = self.resources.get(name) {
            return Arc::clone(r);
        }
        let r = Arc::new(Resource::service(name));
        if self.few.len() < FEW {
            self.few.push((Str::new(name), Arc::clone(&r)));
            return r;
        }
        if self.resources.len() >= INTERN_LIMIT {
            self.resources.clear();
        }
        self.resources.insert(name.to_owned(), Arc::clone(&r));
        r
    }

    pub(crate) fn scope(&mut self, name: Option<Str>, version: Option<Str>) -> Arc<Scope> {
        if name.is_none() && version.is_none() {
            return Arc::clone(&self.no_scope);
        }
        let key = (name.unwrap_or_default(), version.unwrap_or_default());
        if let Some(s) = self.scopes.get(&key) {
            return Arc::clone(s);
        }
        if self.scopes.len() >= INTERN_LIMIT {
            self.scopes.clear();
        }
        let s = Arc::new(Scope { name: key.0.to_string(), version: key.1.to_string(), ..Scope::default() });
        self.scopes.insert(key, Arc::clone(&s));
        s
    }
}

/// Builds a weft span from a Zipkin span.
pub(crate) fn to_span(z: ZSpan, interner: &mut Interner) -> Span {
    let mut attributes = Attributes(Vec::with_capacity(z.tags.len() + 4));
    let mut status = Status::default();
    let mut status_code: Option<StatusCode> = None;
    let mut description: Option<Str> = None;
    let mut scope_name = None;
    let mut scope_version = None;
    let mut library_name = None;
    let mut library_version = None;
    let mut error: Option<Str> = None;
    let mut endpoint_tags = false;
    for (k, v) in z.tags {
        match k.as_str() {
            conv::ERROR => error = Some(v),
            conv::OTEL_STATUS_CODE if v == "OK" || v == "ERROR" => {
                status_code = Some(if v == "OK" { StatusCode::Ok } else { StatusCode::Error })
            }
            conv::OTEL_STATUS_DESCRIPTION => description = Some(v),
            conv::OTEL_SCOPE_NAME => scope_name = Some(v),
            conv::OTEL_SCOPE_VERSION => scope_version = Some(v),
            conv::OTEL_LIBRARY_NAME => library_name = Some(v),
            conv::OTEL_LIBRARY_VERSION => library_version = Some(v),
            conv::LOCAL_IPV4 | conv::LOCAL_PORT | conv::PEER_SERVICE | conv::PEER_IP | conv::PEER_PORT => {
                endpoint_tags = true;
                attributes.0.push(KeyValue { key: k, value: Value::Str(v) })
            }
            _ => attributes.0.push(KeyValue { key: k, value: Value::Str(v) }),
        }
    }
    // Endpoint fields win over tags of the same name (keys stay unique); without such tags
    // (the usual case) they are appended without looking.
    let put = |attributes: &mut Attributes, key: &'static str, value: Value| {
        if endpoint_tags {
            attributes.set(key, value);
        } else {
            attributes.0.push(KeyValue { key: Str::const_new(key), value });
        }
    };
    if let Some(msg) = error {
        status = Status { code: StatusCode::Error, message: msg.into() };
    } else if let Some(code) = status_code {
        status = Status {
            code,
            message: if code == StatusCode::Error {
                description.take().map(String::from).unwrap_or_default()
            } else {
                String::new()
            },
        };
    }
    if let Some(d) = description.filter(|_| status.code != StatusCode::Error) {
        // A description without an error status is kept as an ordinary attribute.
        attributes.push(conv::OTEL_STATUS_DESCRIPTION, d);
    }
    let scope = interner.scope(scope_name.or(library_name), scope_version.or(library_version));
    let local = z.local.unwrap_or_default();
    let resource = interner.resource(local.service_name.as_deref());
    if let Some(ip) = local.ipv4.or(local.ipv6) {
        put(&mut attributes, conv::LOCAL_IPV4, Value::Str(ip));
    }
    if let Some(p) = local.port {
        put(&mut attributes, conv::LOCAL_PORT, Value::I64(p));
    }
    if let Some(r) = z.remote {
        if let Some(s) = r.service_name {
            put(&mut attributes, conv::PEER_SERVICE, Value::Str(s));
        }
        if let Some(ip) = r.ipv4.or(r.ipv6) {
            put(&mut attributes, conv::PEER_IP, Value::Str(ip));
        }
        if let Some(p) = r.port {
            put(&mut attributes, conv::PEER_PORT, Value::I64(p));
        }
    }
    if z.shared {
        attributes.push(conv::ZIPKIN_SHARED, true);
    }
    if z.debug {
        attributes.push(conv::ZIPKIN_DEBUG, true);
    }
    let start_ns = z.timestamp.unwrap_or(0).saturating_mul(1000);
    let end_ns = start_ns.saturating_add(z.duration.unwrap_or(0).saturating_mul(1000));
    Span {
        trace_id: z.trace_id,
        span_id: z.id,
        parent_span_id: z.parent_id,
        name: z.name,
        kind: z.kind,
        start_ns,
        end_ns,
        status,
        attributes,
        events: z.annotations.into_iter().map(|(ts, v)| annotation_to_event(ts, v)).collect(),
        ..Span::with_context(resource, scope)
    }
}

/// An annotation value of the form `{"name":{...attributes}}` becomes an event with
/// attributes; anything else is the event name.
fn annotation_to_event(ts_us: u64, value: Str) -> SpanEvent {
    let time_ns = ts_us.saturating_mul(1000);
    if value.starts_with("{\"")
        && value.ends_with("}}")
        && let Ok(JsonValue(Value::Map(mut m))) = serde_json::from_str::<JsonValue>(&value)
        && m.len() == 1
        && let Some(KeyValue { key: name, value: Value::Map(attrs) }) = m.pop()
    {
        return SpanEvent { time_ns, name, attributes: Attributes(attrs), dropped_attributes_count: 0 };
    }
    SpanEvent { time_ns, name: value, attributes: Attributes::new(), dropped_attributes_count: 0 }
}

/// A JSON text decoded straight into the [`Value`] that [`json_to_value`] makes of its
/// `serde_json::Value` (objects' keys sorted, a repeated key's last value kept), without
/// building the `serde_json::Value` and its `String`s first.
pub(crate) struct JsonValue(pub(crate) Value);

impl<'de> serde::Deserialize<'de> for JsonValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(JsonValueVisitor).map(JsonValue)
    }
}

struct JsonValueVisitor;

impl<'de> serde::de::Visitor<'de> for JsonValueVisitor {
    type Value = Value;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::I64(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(i64::try_from(v).map_or(Value::F64(v as f64), Value::I64))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // As `serde_json::Value` does: a non-finite number is null.
        Ok(if v.is_finite() { Value::F64(v) } else { Value::Empty })
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::Str(Str::new(v)))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::Str(Str::from(v)))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Empty)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Empty)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut a = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(JsonValue(v)) = seq.next_element()? {
            a.push(v);
        }
        Ok(Value::Array(a))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut m: Vec<KeyValue> = Vec::with_capacity(map.size_hint().unwrap_or(0).min(64));
        while let Some(MapKey(key)) = map.next_key()? {
            let JsonValue(value) = map.next_value()?;
            m.push(KeyValue { key, value });
        }
        Ok(Value::Map(btree_order(m)))
    }
}

/// An object's members as `serde_json::Map` (a `BTreeMap`) keeps them: sorted keys, the last
/// of a repeated key wins. The sort is stable, so the last of each run of equal keys is the
/// last in the text.
fn btree_order(m: Vec<KeyValue>) -> Vec<KeyValue> {
    if m.is_sorted_by(|a, b| a.key < b.key) {
        return m;
    }
    let mut m = m;
    m.sort_by(|a, b| a.key.cmp(&b.key));
    let mut out: Vec<KeyValue> = Vec::with_capacity(m.len());
    for kv in m {
        match out.last_mut() {
            Some(last) if last.key == kv.key => *last = kv,
            _ => out.push(kv),
        }
    }
    out
}

/// An object key or tag key, through [`crate::value::key`] (borrowed from the input when it
/// has no escapes; well-known long keys without allocating).
pub(crate) struct MapKey(pub(crate) Str);

deserialize_by_visitor!(<'de> MapKey, "a key (string)", deserialize_str, {
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<MapKey, E> {
        Ok(MapKey(crate::value::key(v)))
    }
});

/// A JSON value as an attribute value (integers that fit stay integers).
pub(crate) fn json_to_value(v: serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::Empty,
        serde_json::Value::Bool(b) => Value::Bool(b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::I64(i),
            None => Value::F64(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Value::Str(s.into()),
        serde_json::Value::Array(a) => Value::Array(a.into_iter().map(json_to_value).collect()),
        serde_json::Value::Object(m) => Value::Map(
            m.into_iter().map(|(k, v)| KeyValue { key: k.into(), value: json_to_value(v) }).collect(),
        ),
    }
}

/// An attribute value as typed JSON (bytes as base64 text).
fn value_to_json(v: &Value, losses: &mut Losses) -> serde_json::Value {
    use base64::Engine;
    match v {
        Value::Str(s) => serde_json::Value::String(s.to_string()),
        Value::Bool(b) => serde_json::Value::Bool(*b),
        Value::I64(i) => serde_json::Value::from(*i),
        Value::F64(f) => serde_json::Number::from_f64(*f)
            .map(serde_json::Value::Number)
            .unwrap_or_else(|| serde_json::Value::String(f.to_string())),
        Value::Bytes(b) => {
            losses.add(LOST_EVENT_BYTES, 1);
            serde_json::Value::String(base64::engine::general_purpose::STANDARD.encode(b))
        }
        Value::Array(a) => serde_json::Value::Array(a.iter().map(|v| value_to_json(v, losses)).collect()),
        Value::Map(m) => serde_json::Value::Object(
            m.iter().map(|kv| (kv.key.to_string(), value_to_json(&kv.value, losses))).collect(),
        ),
        Value::Empty => serde_json::Value::Null,
    }
}

fn attr_text(v: &Value, losses: &mut Losses) -> Str {
    if let Value::Str(s) = v {
        return s.clone();
    }
    losses.add(LOST_STRINGIFIED, 1);
    compact_str::ToCompactString::to_compact_string(v)
}

/// A port number (1–65535) as an endpoint carries it; anything else stays a tag.
fn port_of(v: &Value) -> Option<i64> {
    let p = match v {
        Value::I64(p) => *p,
        Value::Str(s) => s.parse().ok()?,
        _ => return None,
    };
    (1..=65535).contains(&p).then_some(p)
}

/// An IP address as an endpoint carries it (`ipv4` or `ipv6`); anything else stays a tag.
fn ip_of(v: &Value) -> Option<std::net::IpAddr> {
    v.as_str()?.parse().ok()
}

/// Builds the Zipkin form of a span, counting what it cannot carry.
pub(crate) fn from_span(s: &Span, losses: &mut Losses) -> ZSpan {
    let mut local = Endpoint::default();
    let svc = s.resource.service_name();
    if !svc.is_empty() {
        local.service_name = Some(svc.into());
    }
    losses.add(
        LOST_RESOURCE_ATTRS,
        s.resource.attributes.iter().filter(|kv| kv.key != conv::SERVICE_NAME).count() as u64,
    );
    losses.add(LOST_SCOPE_ATTRS, s.scope.attributes.len() as u64);
    losses.add(LOST_LINKS, s.links.len() as u64);
    losses.add(LOST_TRACE_STATE, (!s.trace_state.is_empty()) as u64);
    if s.kind == SpanKind::Internal {
        losses.add(LOST_INTERNAL, 1);
    }
    let mut remote = Endpoint::default();
    let mut tags = Vec::with_capacity(s.attributes.len() + 3);
    let mut shared = false;
    let mut debug = false;
    for kv in s.attributes.iter() {
        let v = &kv.value;
        match kv.key.as_str() {
            conv::LOCAL_IPV4 if local.ipv4.is_none() && local.ipv6.is_none() && ip_of(v).is_some() => {
                let ip = Str::from(v.as_str().unwrap_or_default());
                if ip.contains(':') { local.ipv6 = Some(ip) } else { local.ipv4 = Some(ip) }
            }
            conv::LOCAL_PORT if local.port.is_none() && port_of(v).is_some() => local.port = port_of(v),
            conv::PEER_SERVICE if remote.service_name.is_none() && v.as_str().is_some() => {
                remote.service_name = v.as_str().map(Str::from)
            }
            conv::PEER_IP if remote.ipv4.is_none() && remote.ipv6.is_none() && ip_of(v).is_some() => {
                let ip = Str::from(v.as_str().unwrap_or_default());
                if ip.contains(':') { remote.ipv6 = Some(ip) } else { remote.ipv4 = Some(ip) }
            }
            conv::PEER_PORT if remote.port.is_none() && port_of(v).is_some() => remote.port = port_of(v),
            conv::ZIPKIN_SHARED if v.as_bool().is_some() => shared = v.as_bool().unwrap_or(false),
            conv::ZIPKIN_DEBUG if v.as_bool().is_some() => debug = v.as_bool().unwrap_or(false),
            _ => tags.push((kv.key.clone(), attr_text(v, losses))),
        }
    }
    match s.status.code {
        StatusCode::Unset => {}
        StatusCode::Ok => tags.push((Str::const_new(conv::OTEL_STATUS_CODE), Str::const_new("OK"))),
        StatusCode::Error => tags.push((Str::const_new(conv::ERROR), Str::from(s.status.message.as_str()))),
    }
    if !s.scope.name.is_empty() {
        tags.push((Str::const_new(conv::OTEL_SCOPE_NAME), Str::from(s.scope.name.as_str())));
    }
    if !s.scope.version.is_empty() {
        tags.push((Str::const_new(conv::OTEL_SCOPE_VERSION), Str::from(s.scope.version.as_str())));
    }
    let (timestamp, duration) = micros(s.start_ns, s.end_ns);
    if !s.start_ns.is_multiple_of(1000)
        || !s.end_ns.is_multiple_of(1000)
        || s.events.iter().any(|e| !e.time_ns.is_multiple_of(1000))
    {
        losses.add(LOST_PRECISION, 1);
    }
    let annotations = s
        .events
        .iter()
        .map(|e| {
            let value = if e.attributes.is_empty() {
                e.name.clone()
            } else {
                let attrs: serde_json::Map<String, serde_json::Value> = e
                    .attributes
                    .iter()
                    .map(|kv| (kv.key.to_string(), value_to_json(&kv.value, losses)))
                    .collect();
                let mut m = serde_json::Map::new();
                m.insert(e.name.to_string(), serde_json::Value::Object(attrs));
                Str::from(serde_json::Value::Object(m).to_string())
            };
            (e.time_ns / 1000, value)
        })
        .collect();
    ZSpan {
        trace_id: s.trace_id,
        id: s.span_id,
        parent_id: s.parent_span_id,
        name: s.name.clone(),
        kind: s.kind,
        timestamp,
        duration,
        local: (!local.is_empty()).then_some(local),
        remote: (!remote.is_empty()).then_some(remote),
        annotations,
        tags,
        debug,
        shared,
    }
}

/// Start and duration in µs (None when zero).
pub(crate) fn micros(start_ns: u64, end_ns: u64) -> (Option<u64>, Option<u64>) {
    let ts = start_ns / 1000;
    let dur_ns = end_ns.saturating_sub(start_ns);
    let mut dur = end_ns / 1000 - ts.min(end_ns / 1000);
    if dur == 0 && dur_ns > 0 {
        dur = 1;
    }
    ((ts != 0).then_some(ts), (dur != 0).then_some(dur))
}

pub(crate) fn id_error(format: &'static str, field: &str, e: crate::IdError) -> CodecError {
    CodecError::new(format, ErrorKind::InvalidId, e.to_string()).field(field)
}

/// Parses a Zipkin hex trace id (16 or 32 digits; shorter ones are accepted and widened).
pub(crate) fn trace_id_hex(
    format: &'static str,
    s: Option<&str>,
    field: &str,
) -> Result<TraceId, CodecError> {
    let s = s.ok_or_else(|| CodecError::new(format, ErrorKind::InvalidId, "missing").field(field))?;
    let t = TraceId::from_hex(s).map_err(|e| id_error(format, field, e))?;
    if !t.is_valid() {
        return Err(CodecError::new(format, ErrorKind::InvalidId, "trace id is all zero").field(field));
    }
    Ok(t)
}

/// Parses a Zipkin hex span id.
pub(crate) fn span_id_hex(format: &'static str, s: Option<&str>, field: &str) -> Result<SpanId, CodecError> {
    let s = s.ok_or_else(|| CodecError::new(format, ErrorKind::InvalidId, "missing").field(field))?;
    let t = SpanId::from_hex(s).map_err(|e| id_error(format, field, e))?;
    if !t.is_valid() {
        return Err(CodecError::new(format, ErrorKind::InvalidId, "span id is all zero").field(field));
    }
    Ok(t)
}

/// Parses an optional parent id (absent, empty or all zero = none).
pub(crate) fn parent_hex(format: &'static str, s: Option<&str>) -> Result<Option<SpanId>, CodecError> {
    match s {
        None | Some("") => Ok(None),
        Some(s) => {
            let p = SpanId::from_hex(s).map_err(|e| id_error(format, "parentId", e))?;
            Ok(p.is_valid().then_some(p))
        }
    }
}

#[cfg(test)]
mod tests;
