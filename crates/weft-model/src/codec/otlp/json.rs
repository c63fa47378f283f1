//! OTLP/JSON: the JSON encoding of OTLP as the OTLP specification defines it.
//!
//! Written:
//! * `traceId`, `spanId`, `parentSpanId` (and link ids) as lower-case **hex**, not base64;
//! * enums (`kind`, `status.code`) as **integers**;
//! * keys in lowerCamelCase; fields with default values are left out;
//! * 64-bit integers (`startTimeUnixNano`, `intValue`, ...) as decimal **strings** (proto3
//!   JSON); `bytesValue` as base64; NaN and ±infinity doubles as `"NaN"`, `"Infinity"`,
//!   `"-Infinity"`.
//!
//! Read, beyond that:
//! * unknown fields are ignored, `null` arrays are empty;
//! * 64-bit integers as numbers or strings; 32-bit ones too;
//! * enums as integers or as their proto names (`"SPAN_KIND_SERVER"`, `"STATUS_CODE_ERROR"`);
//! * snake_case keys (`resource_spans`, `start_time_unix_nano`, ...);
//! * ids as hex (case-insensitive, exactly 32 / 16 digits) **or** as base64 (24 / 12
//!   characters): protobuf's generic JSON mapping — e.g. Python's
//!   `google.protobuf.json_format.MessageToJson` — writes `bytes` fields, and so ids, as
//!   base64. The lengths never collide, so both are accepted; weft writes hex only.
//!
//! A document is one `ExportTraceServiceRequest` / `TracesData` object, or several of them
//! (JSON Lines, as the OpenTelemetry file exporter writes, or simply concatenated).

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use serde::Deserialize;
use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::codec::error::{CodecError, ErrorKind, Mode, Rejected, Sink, lenient, strict};
use crate::codec::jsonscan::{Element, ElementDecoder, ElementReader, Start, element_error};
use crate::codec::jsonw as w;
use crate::codec::stream::read_all;
use crate::id::{SpanId, TraceId};
use crate::span::{LinkRelation, Resource, Scope, Span, SpanEvent, SpanKind, Status, StatusCode};
use crate::value::{Attributes, KeyValue, Str, Value};

pub(crate) const FORMAT: &str = "OTLP JSON";
pub(crate) const KEYS: &[&str] = &["resourceSpans", "resource_spans"];
const EXPECTED: &str = "an OTLP/JSON request object ('{' with \"resourceSpans\")";

/// Decodes an OTLP/JSON document (one request object, or JSON Lines of them); fails on the
/// first invalid span.
pub fn decode_json(bytes: &[u8]) -> Result<Vec<Span>, CodecError> {
    if let Some(spans) = decode_fast(bytes) {
        return Ok(spans);
    }
    strict(read_all(JsonReader::new(bytes)))
}

/// Decodes an OTLP/JSON document, skipping (and counting) spans with invalid ids.
pub fn decode_json_lenient(bytes: &[u8]) -> Result<(Vec<Span>, Rejected), CodecError> {
    if let Some(spans) = decode_fast(bytes) {
        return Ok((spans, Rejected::default()));
    }
    lenient(read_all(JsonReader::new(bytes)))
}

/// The fast path for a whole document in memory that is one request object of valid spans
/// (the common case, e.g. an OTLP/HTTP body): a single serde pass, no element scanning and
/// copying. `None` for anything else (JSON Lines, a bad span, malformed JSON), which the
/// element-by-element reader then decodes, with its positions in errors and its lenient
/// skipping.
fn decode_fast(bytes: &[u8]) -> Option<Vec<Span>> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct JRequest<'a> {
        #[serde(default, alias = "resource_spans", borrow, deserialize_with = "null_vec")]
        resource_spans: Vec<JResourceSpans<'a>>,
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let req = JRequest::deserialize(&mut de).ok()?;
    de.end().ok()?;
    let mut out = Vec::new();
    let mut rejected = Rejected::default();
    let start = Start { line: 1, column: 1, offset: 0 };
    for (i, rs) in req.resource_spans.into_iter().enumerate() {
        let mut sink = Sink { mode: Mode::Strict, rejected: &mut rejected };
        convert(rs, &format!("resourceSpans[{i}]"), start, &mut sink, &mut out).ok()?;
    }
    Some(out)
}

/// Streaming OTLP/JSON reader: one `ResourceSpans` at a time.
pub(crate) type JsonReader<R> = ElementReader<R, ResourceSpansElements>;

/// Decodes one `ResourceSpans`.
#[derive(Default)]
pub(crate) struct ResourceSpansElements;

impl ElementDecoder for ResourceSpansElements {
    const FORMAT: &'static str = FORMAT;
    const KEYS: &'static [&'static str] = KEYS;
    const EXPECTED: &'static str = EXPECTED;

    fn decode(&mut self, el: Element<'_>, mut sink: Sink<'_>, out: &mut Vec<Span>) -> Result<(), CodecError> {
        let prefix = format!("resourceSpans[{}]", el.index);
        let rs: JResourceSpans<'_> = match serde_json::from_slice(el.bytes) {
            Ok(v) => v,
            Err(e) => {
                return Err(element_error::<JResourceSpans<'_>>(FORMAT, e, el.bytes, el.start, &prefix));
            }
        };
        convert(rs, &prefix, el.start, &mut sink, out)
    }
}

fn convert(
    rs: JResourceSpans<'_>,
    prefix: &str,
    start: Start,
    sink: &mut Sink<'_>,
    out: &mut Vec<Span>,
) -> Result<(), CodecError> {
    let res = rs.resource.unwrap_or_default();
    let resource = Arc::new(Resource {
        attributes: res.attributes.into(),
        dropped_attributes_count: res.dropped_attributes_count.0 as u32,
        schema_url: rs.schema_url,
    });
    for (j, ss) in rs.scope_spans.into_iter().enumerate() {
        let sc = ss.scope.unwrap_or_default();
        let scope = Arc::new(Scope {
            name: sc.name,
            version: sc.version,
            attributes: sc.attributes.into(),
            dropped_attributes_count: sc.dropped_attributes_count.0 as u32,
            schema_url: ss.schema_url,
        });
        out.reserve(ss.spans.len());
        for (k, span) in ss.spans.into_iter().enumerate() {
            match span_from_json(span, &resource, &scope) {
                Ok(s) => out.push(s),
                Err(e) => {
                    let e = e.within(&format!("{prefix}.scopeSpans[{j}].spans[{k}]")).at(start.position());
                    sink.reject(e)?
                }
            }
        }
    }
    Ok(())
}

fn id_error(field: &str, msg: String) -> CodecError {
    CodecError::new(FORMAT, ErrorKind::InvalidId, msg).field(field)
}

/// Hex (exactly `2*N` digits) or base64 (protobuf JSON's `bytes`) into N bytes.
fn id_bytes<const N: usize>(s: &str, field: &str) -> Result<[u8; N], CodecError> {
    let b64_len = N.div_ceil(3) * 4;
    if s.len() == 2 * N {
        let mut out = [0u8; N];
        hex::decode_to_slice(s, &mut out).map_err(|e| id_error(field, format!("not hex ({e}): {s:?}")))?;
        Ok(out)
    } else if s.len() == b64_len || s.len() == b64_len - (3 - N % 3) % 3 {
        let v =
            w::base64_decode(s).ok_or_else(|| id_error(field, format!("neither hex nor base64: {s:?}")))?;
        <[u8; N]>::try_from(v.as_slice())
            .map_err(|_| id_error(field, format!("base64 id decodes to {} bytes, not {N}: {s:?}", v.len())))
    } else if s.is_empty() {
        Err(id_error(field, "missing (empty)".into()))
    } else {
        Err(id_error(field, format!("must be {} hex digits, got {} characters: {s:?}", 2 * N, s.len())))
    }
}

fn trace_id(s: Option<&str>, field: &str) -> Result<TraceId, CodecError> {
    let t = TraceId(id_bytes::<16>(s.unwrap_or(""), field)?);
    if !t.is_valid() {
        return Err(id_error(field, "trace id is all zero".into()));
    }
    Ok(t)
}

fn span_id(s: Option<&str>, field: &str) -> Result<SpanId, CodecError> {
    let t = SpanId(id_bytes::<8>(s.unwrap_or(""), field)?);
    if !t.is_valid() {
        return Err(id_error(field, "span id is all zero".into()));
    }
    Ok(t)
}

fn span_from_json(s: JSpan<'_>, resource: &Arc<Resource>, scope: &Arc<Scope>) -> Result<Span, CodecError> {
    let trace = trace_id(s.trace_id.as_deref(), "traceId")?;
    let id = span_id(s.span_id.as_deref(), "spanId")?;
    let parent = match s.parent_span_id.as_deref() {
        None | Some("") => None,
        Some(p) => {
            let p = SpanId(id_bytes::<8>(p, "parentSpanId")?);
            p.is_valid().then_some(p)
        }
    };
    let mut links = Vec::with_capacity(s.links.len());
    for (i, l) in s.links.into_iter().enumerate() {
        let field = |f: &str| format!("links[{i}].{f}");
        let trace_id = trace_id(l.trace_id.as_deref(), &field("traceId"))?;
        let span_id = span_id(l.span_id.as_deref(), &field("spanId"))?;
        links.push(super::link(
            trace_id,
            span_id,
            l.trace_state,
            l.attributes.into(),
            l.dropped_attributes_count.0 as u32,
            l.flags.0 as u32,
        ));
    }
    let status = s
        .status
        .map(|st| Status { code: StatusCode::from_i32(st.code.0), message: st.message })
        .unwrap_or_default();
    Ok(Span {
        trace_id: trace,
        span_id: id,
        parent_span_id: parent,
        trace_state: s.trace_state,
        flags: s.flags.0 as u32,
        name: s.name,
        kind: SpanKind::from_i32(s.kind.0),
        start_ns: s.start_time_unix_nano.0,
        end_ns: s.end_time_unix_nano.0,
        status,
        attributes: s.attributes.into(),
        events: s
            .events
            .into_iter()
            .map(|e| SpanEvent {
                time_ns: e.time_unix_nano.0,
                name: e.name,
                attributes: e.attributes.into(),
                dropped_attributes_count: e.dropped_attributes_count.0 as u32,
            })
            .collect(),
        links,
        resource: Arc::clone(resource),
        scope: Arc::clone(scope),
        dropped_attributes_count: s.dropped_attributes_count.0 as u32,
        dropped_events_count: s.dropped_events_count.0 as u32,
        dropped_links_count: s.dropped_links_count.0 as u32,
    })
}

// ---------------------------------------------------------------------------------------
// Deserialization types (private; they mirror the OTLP messages).

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JResourceSpans<'a> {
    #[serde(default)]
    resource: Option<JResource>,
    #[serde(default, alias = "scope_spans", borrow, deserialize_with = "null_vec")]
    scope_spans: Vec<JScopeSpans<'a>>,
    #[serde(default, alias = "schema_url")]
    schema_url: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct JResource {
    #[serde(default)]
    attributes: JAttrs,
    #[serde(default, alias = "dropped_attributes_count")]
    dropped_attributes_count: Num,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JScopeSpans<'a> {
    #[serde(default)]
    scope: Option<JScope>,
    #[serde(default, borrow, deserialize_with = "null_vec")]
    spans: Vec<JSpan<'a>>,
    #[serde(default, alias = "schema_url")]
    schema_url: String,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct JScope {
    #[serde(default)]
    name: String,
    #[serde(default)]
    version: String,
    #[serde(default)]
    attributes: JAttrs,
    #[serde(default, alias = "dropped_attributes_count")]
    dropped_attributes_count: Num,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JSpan<'a> {
    #[serde(default, alias = "trace_id", borrow)]
    trace_id: Option<Cow<'a, str>>,
    #[serde(default, alias = "span_id", borrow)]
    span_id: Option<Cow<'a, str>>,
    #[serde(default, alias = "trace_state")]
    trace_state: String,
    #[serde(default, alias = "parent_span_id", borrow)]
    parent_span_id: Option<Cow<'a, str>>,
    #[serde(default)]
    flags: Num,
    #[serde(default)]
    name: Str,
    #[serde(default)]
    kind: Enum<KindNames>,
    #[serde(default, alias = "start_time_unix_nano")]
    start_time_unix_nano: Num,
    #[serde(default, alias = "end_time_unix_nano")]
    end_time_unix_nano: Num,
    #[serde(default)]
    attributes: JAttrs,
    #[serde(default, alias = "dropped_attributes_count")]
    dropped_attributes_count: Num,
    #[serde(default, deserialize_with = "null_vec")]
    events: Vec<JEvent>,
    #[serde(default, alias = "dropped_events_count")]
    dropped_events_count: Num,
    #[serde(default, borrow, deserialize_with = "null_vec")]
    links: Vec<JLink<'a>>,
    #[serde(default, alias = "dropped_links_count")]
    dropped_links_count: Num,
    #[serde(default)]
    status: Option<JStatus>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JEvent {
    #[serde(default, alias = "time_unix_nano")]
    time_unix_nano: Num,
    #[serde(default)]
    name: Str,
    #[serde(default)]
    attributes: JAttrs,
    #[serde(default, alias = "dropped_attributes_count")]
    dropped_attributes_count: Num,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JLink<'a> {
    #[serde(default, alias = "trace_id", borrow)]
    trace_id: Option<Cow<'a, str>>,
    #[serde(default, alias = "span_id", borrow)]
    span_id: Option<Cow<'a, str>>,
    #[serde(default, alias = "trace_state")]
    trace_state: String,
    #[serde(default)]
    attributes: JAttrs,
    #[serde(default, alias = "dropped_attributes_count")]
    dropped_attributes_count: Num,
    #[serde(default)]
    flags: Num,
}

#[derive(Deserialize)]
struct JStatus {
    #[serde(default)]
    message: String,
    #[serde(default)]
    code: Enum<StatusNames>,
}

fn null_vec<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: de::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

/// An unsigned integer given as a JSON number or a decimal string (proto3 JSON), `null` = 0.
#[derive(Default, Clone, Copy)]
pub(crate) struct Num(pub(crate) u64);

deserialize_by_visitor!(<'de> Num, "an unsigned integer (number or decimal string)", deserialize_any, {
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Num, E> {
        Ok(Num(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Num, E> {
        u64::try_from(v).map(Num).map_err(|_| E::custom(format!("negative value {v}")))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Num, E> {
        if v.fract() == 0.0 && (0.0..1.8446744073709552e19).contains(&v) {
            Ok(Num(v as u64))
        } else {
            Err(E::custom(format!("{v} is not an unsigned integer")))
        }
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Num, E> {
        v.trim()
            .parse::<u64>()
            .map(Num)
            .map_err(|_| E::custom(format!("{v:?} is not an unsigned integer")))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Num, E> {
        Ok(Num(0))
    }
});

/// Signed 64-bit integer as a number or a decimal string.
struct Int(i64);

deserialize_by_visitor!(<'de> Int, "a 64-bit integer (number or decimal string)", deserialize_any, {
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Int, E> {
        i64::try_from(v).map(Int).map_err(|_| E::custom(format!("{v} does not fit in int64")))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Int, E> {
        Ok(Int(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Int, E> {
        if v.fract() == 0.0 && (-9.223372036854776e18..9.223372036854776e18).contains(&v) {
            Ok(Int(v as i64))
        } else {
            Err(E::custom(format!("{v} is not an integer")))
        }
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Int, E> {
        v.trim().parse::<i64>().map(Int).map_err(|_| E::custom(format!("{v:?} is not an integer")))
    }
});

/// A double as a number or a string (`"NaN"`, `"Infinity"`, `"-Infinity"`, or decimal text).
struct Double(f64);

deserialize_by_visitor!(<'de> Double, "a double (number, or \"NaN\"/\"Infinity\"/\"-Infinity\")", deserialize_any, {
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Double, E> {
        Ok(Double(v as f64))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Double, E> {
        Ok(Double(v as f64))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Double, E> {
        Ok(Double(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Double, E> {
        match v {
            "NaN" => Ok(Double(f64::NAN)),
            "Infinity" => Ok(Double(f64::INFINITY)),
            "-Infinity" => Ok(Double(f64::NEG_INFINITY)),
            _ => v
                .trim()
                .parse::<f64>()
                .map(Double)
                .map_err(|_| E::custom(format!("{v:?} is not a double"))),
        }
    }
});

trait EnumNames {
    const WHAT: &'static str;
    fn by_name(s: &str) -> Option<i32>;
}
struct KindNames;
impl EnumNames for KindNames {
    const WHAT: &'static str = "a span kind (integer or SPAN_KIND_* name)";
    fn by_name(s: &str) -> Option<i32> {
        s.starts_with("SPAN_KIND_").then(|| SpanKind::parse(s)).flatten().map(|k| k as i32)
    }
}
struct StatusNames;
impl EnumNames for StatusNames {
    const WHAT: &'static str = "a status code (integer or STATUS_CODE_* name)";
    fn by_name(s: &str) -> Option<i32> {
        Some(match s {
            "STATUS_CODE_UNSET" => 0,
            "STATUS_CODE_OK" => 1,
            "STATUS_CODE_ERROR" => 2,
            _ => return None,
        })
    }
}

/// An enum as an integer (the OTLP/JSON rule) or its proto name (generic protobuf JSON).
struct Enum<N>(i32, std::marker::PhantomData<N>);

impl<N> Default for Enum<N> {
    fn default() -> Self {
        Enum(0, std::marker::PhantomData)
    }
}

impl<'de, N: EnumNames> Deserialize<'de> for Enum<N> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<N>(std::marker::PhantomData<N>);
        impl<'de, N: EnumNames> Visitor<'de> for V<N> {
            type Value = Enum<N>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(N::WHAT)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Enum<N>, E> {
                i32::try_from(v)
                    .map(|v| Enum(v, self.0))
                    .map_err(|_| E::custom(format!("enum value {v} out of range")))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Enum<N>, E> {
                i32::try_from(v)
                    .map(|v| Enum(v, self.0))
                    .map_err(|_| E::custom(format!("enum value {v} out of range")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Enum<N>, E> {
                N::by_name(v)
                    .map(|v| Enum(v, self.0))
                    .ok_or_else(|| E::custom(format!("unknown enum name {v:?}")))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Enum<N>, E> {
                Ok(Enum(0, self.0))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// A list of `{"key": ..., "value": {...}}` objects, read straight into [`KeyValue`]s.
#[derive(Default)]
struct JAttrs(Vec<KeyValue>);

impl From<JAttrs> for Attributes {
    fn from(a: JAttrs) -> Self {
        Attributes(a.0)
    }
}

impl<'de> Deserialize<'de> for JAttrs {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v: Option<Vec<JKeyValue>> = Option::deserialize(d)?;
        Ok(JAttrs(v.unwrap_or_default().into_iter().map(|kv| kv.0).collect()))
    }
}

struct JKeyValue(KeyValue);

/// A string borrowed from the input when it has no escapes (serde's own `Cow<str>` always
/// allocates): map keys and base64 text.
struct BStr<'de>(Cow<'de, str>);

deserialize_by_visitor!(<'de> BStr<'de>, "a string", deserialize_str, {
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<BStr<'de>, E> {
        Ok(BStr(Cow::Borrowed(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<BStr<'de>, E> {
        Ok(BStr(Cow::Owned(v.to_owned())))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<BStr<'de>, E> {
        Ok(BStr(Cow::Owned(v)))
    }
});

/// An attribute key, through [`crate::value::key`].
struct JKey(Str);

deserialize_by_visitor!(<'de> JKey, "an attribute key (string)", deserialize_str, {
    fn visit_str<E: de::Error>(self, v: &str) -> Result<JKey, E> {
        Ok(JKey(crate::value::key(v)))
    }
});

deserialize_by_visitor!(<'de> JKeyValue, "a key/value object", deserialize_map, {
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<JKeyValue, A::Error> {
        let mut key = None;
        let mut value = Value::Empty;
        while let Some(k) = m.next_key::<BStr<'de>>()? {
            match k.0.as_ref() {
                "key" => key = Some(m.next_value::<JKey>()?.0),
                "value" => {
                    value = m.next_value::<Option<JValue>>()?.map(|v| v.0).unwrap_or(Value::Empty)
                }
                _ => {
                    m.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(JKeyValue(KeyValue { key: key.unwrap_or_default(), value }))
    }
});

/// An `AnyValue` object, read straight into a [`Value`].
struct JValue(Value);

deserialize_by_visitor!(<'de> JValue, "an AnyValue object", deserialize_map, {
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<JValue, A::Error> {
        let mut v = Value::Empty;
        while let Some(k) = m.next_key::<BStr<'de>>()? {
            v = match k.0.as_ref() {
                "stringValue" | "string_value" => {
                    Value::Str(m.next_value::<Option<Str>>()?.unwrap_or_default())
                }
                "boolValue" | "bool_value" => {
                    Value::Bool(m.next_value::<Option<bool>>()?.unwrap_or_default())
                }
                "intValue" | "int_value" => {
                    Value::I64(m.next_value::<Option<Int>>()?.map_or(0, |i| i.0))
                }
                "doubleValue" | "double_value" => {
                    Value::F64(m.next_value::<Option<Double>>()?.map_or(0.0, |d| d.0))
                }
                "bytesValue" | "bytes_value" => {
                    let s = m.next_value::<Option<BStr<'de>>>()?.map(|b| b.0).unwrap_or_default();
                    Value::Bytes(w::base64_decode(&s).ok_or_else(|| {
                        de::Error::custom(format!("bytesValue is not base64: {s:?}"))
                    })?)
                }
                "arrayValue" | "array_value" => Value::Array(
                    m.next_value::<Option<JArray>>()?.map(|a| a.values).unwrap_or_default(),
                ),
                "kvlistValue" | "kvlist_value" => Value::Map(
                    m.next_value::<Option<JKvList>>()?.map(|a| a.values.0).unwrap_or_default(),
                ),
                _ => {
                    m.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
        }
        Ok(JValue(v))
    }
});

struct JArray {
    values: Vec<Value>,
}

deserialize_by_visitor!(<'de> JArray, "an ArrayValue object", deserialize_map, {
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<JArray, A::Error> {
        let mut values = Vec::new();
        while let Some(k) = m.next_key::<BStr<'de>>()? {
            if k.0 == "values" {
                values = m.next_value::<Option<ValueSeq>>()?.map(|s| s.0).unwrap_or_default();
            } else {
                m.next_value::<IgnoredAny>()?;
            }
        }
        Ok(JArray { values })
    }
});

struct ValueSeq(Vec<Value>);

deserialize_by_visitor!(<'de> ValueSeq, "an array of AnyValue objects", deserialize_seq, {
    fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<ValueSeq, A::Error> {
        let mut out = Vec::with_capacity(s.size_hint().unwrap_or(0));
        while let Some(v) = s.next_element::<Option<JValue>>()? {
            out.push(v.map(|v| v.0).unwrap_or(Value::Empty));
        }
        Ok(ValueSeq(out))
    }
});

#[derive(Deserialize)]
struct JKvList {
    #[serde(default)]
    values: JAttrs,
}

// ---------------------------------------------------------------------------------------
// Encoding.

/// Encodes spans as one OTLP/JSON `ExportTraceServiceRequest` object (no trailing newline).
pub fn encode_json(spans: &[Span]) -> Vec<u8> {
    let mut out = Vec::with_capacity(spans.len() * 512);
    encode_json_to(spans, &mut out);
    out
}

/// Appends the OTLP/JSON request for `spans` to `out` (one line: the JSON Lines writer calls
/// this once per batch).
pub fn encode_json_to(spans: &[Span], out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"resourceSpans\":[");
    let mut i = 0;
    while i < spans.len() {
        let res = &spans[i].resource;
        let mut j = i;
        while j < spans.len() && super::same(&spans[j].resource, res) {
            j += 1;
        }
        write_resource_spans(&spans[i..j], out);
        out.push(b',');
        i = j;
    }
    w::trim_comma(out);
    out.extend_from_slice(b"]}");
}

fn write_resource_spans(spans: &[Span], out: &mut Vec<u8>) {
    let res = &spans[0].resource;
    out.extend_from_slice(b"{\"resource\":{");
    w::key(out, "attributes");
    write_attrs(&res.attributes, out);
    if res.dropped_attributes_count != 0 {
        out.push(b',');
        w::key(out, "droppedAttributesCount");
        w::u64(out, res.dropped_attributes_count as u64);
    }
    out.extend_from_slice(b"},\"scopeSpans\":[");
    let mut i = 0;
    while i < spans.len() {
        let sc = &spans[i].scope;
        let mut j = i;
        while j < spans.len() && super::same(&spans[j].scope, sc) {
            j += 1;
        }
        out.extend_from_slice(b"{\"scope\":{");
        w::key(out, "name");
        w::str(out, &sc.name);
        if !sc.version.is_empty() {
            out.push(b',');
            w::key(out, "version");
            w::str(out, &sc.version);
        }
        if !sc.attributes.is_empty() {
            out.push(b',');
            w::key(out, "attributes");
            write_attrs(&sc.attributes, out);
        }
        if sc.dropped_attributes_count != 0 {
            out.push(b',');
            w::key(out, "droppedAttributesCount");
            w::u64(out, sc.dropped_attributes_count as u64);
        }
        out.extend_from_slice(b"},\"spans\":[");
        for s in &spans[i..j] {
            write_span(s, out);
            out.push(b',');
        }
        w::trim_comma(out);
        out.push(b']');
        if !sc.schema_url.is_empty() {
            out.push(b',');
            w::key(out, "schemaUrl");
            w::str(out, &sc.schema_url);
        }
        out.extend_from_slice(b"},");
        i = j;
    }
    w::trim_comma(out);
    out.push(b']');
    if !res.schema_url.is_empty() {
        out.push(b',');
        w::key(out, "schemaUrl");
        w::str(out, &res.schema_url);
    }
    out.push(b'}');
}

fn write_span(s: &Span, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"traceId\":");
    w::trace_id(out, &s.trace_id);
    out.extend_from_slice(b",\"spanId\":");
    w::span_id(out, &s.span_id);
    if !s.trace_state.is_empty() {
        out.extend_from_slice(b",\"traceState\":");
        w::str(out, &s.trace_state);
    }
    if let Some(p) = &s.parent_span_id {
        out.extend_from_slice(b",\"parentSpanId\":");
        w::span_id(out, p);
    }
    if s.flags != 0 {
        out.extend_from_slice(b",\"flags\":");
        w::u64(out, s.flags as u64);
    }
    out.extend_from_slice(b",\"name\":");
    w::str(out, &s.name);
    out.extend_from_slice(b",\"kind\":");
    w::u64(out, s.kind as u64);
    out.extend_from_slice(b",\"startTimeUnixNano\":");
    w::u64_str(out, s.start_ns);
    out.extend_from_slice(b",\"endTimeUnixNano\":");
    w::u64_str(out, s.end_ns);
    if !s.attributes.is_empty() {
        out.extend_from_slice(b",\"attributes\":");
        write_attrs(&s.attributes, out);
    }
    if s.dropped_attributes_count != 0 {
        out.extend_from_slice(b",\"droppedAttributesCount\":");
        w::u64(out, s.dropped_attributes_count as u64);
    }
    if !s.events.is_empty() {
        out.extend_from_slice(b",\"events\":[");
        for e in &s.events {
            out.extend_from_slice(b"{\"timeUnixNano\":");
            w::u64_str(out, e.time_ns);
            out.extend_from_slice(b",\"name\":");
            w::str(out, &e.name);
            if !e.attributes.is_empty() {
                out.extend_from_slice(b",\"attributes\":");
                write_attrs(&e.attributes, out);
            }
            if e.dropped_attributes_count != 0 {
                out.extend_from_slice(b",\"droppedAttributesCount\":");
                w::u64(out, e.dropped_attributes_count as u64);
            }
            out.extend_from_slice(b"},");
        }
        w::trim_comma(out);
        out.push(b']');
    }
    if s.dropped_events_count != 0 {
        out.extend_from_slice(b",\"droppedEventsCount\":");
        w::u64(out, s.dropped_events_count as u64);
    }
    if !s.links.is_empty() {
        out.extend_from_slice(b",\"links\":[");
        for l in &s.links {
            out.extend_from_slice(b"{\"traceId\":");
            w::trace_id(out, &l.trace_id);
            out.extend_from_slice(b",\"spanId\":");
            w::span_id(out, &l.span_id);
            if !l.trace_state.is_empty() {
                out.extend_from_slice(b",\"traceState\":");
                w::str(out, &l.trace_state);
            }
            if !l.attributes.is_empty() || l.relation != LinkRelation::Unspecified {
                out.extend_from_slice(b",\"attributes\":[");
                for (k, v, rel) in super::link_wire_attributes(l) {
                    out.extend_from_slice(b"{\"key\":");
                    w::str(out, k);
                    out.extend_from_slice(b",\"value\":");
                    match (v, rel) {
                        (Some(v), _) => write_value(v, out),
                        (None, rel) => {
                            out.extend_from_slice(b"{\"stringValue\":");
                            w::str(out, rel.unwrap_or(""));
                            out.push(b'}');
                        }
                    }
                    out.extend_from_slice(b"},");
                }
                w::trim_comma(out);
                out.push(b']');
            }
            if l.dropped_attributes_count != 0 {
                out.extend_from_slice(b",\"droppedAttributesCount\":");
                w::u64(out, l.dropped_attributes_count as u64);
            }
            if l.flags != 0 {
                out.extend_from_slice(b",\"flags\":");
                w::u64(out, l.flags as u64);
            }
            out.extend_from_slice(b"},");
        }
        w::trim_comma(out);
        out.push(b']');
    }
    if s.dropped_links_count != 0 {
        out.extend_from_slice(b",\"droppedLinksCount\":");
        w::u64(out, s.dropped_links_count as u64);
    }
    if s.status != Status::default() {
        out.extend_from_slice(b",\"status\":{");
        if !s.status.message.is_empty() {
            w::key(out, "message");
            w::str(out, &s.status.message);
            out.push(b',');
        }
        w::key(out, "code");
        w::u64(out, s.status.code as u64);
        out.push(b'}');
    }
    out.push(b'}');
}

fn write_attrs(a: &Attributes, out: &mut Vec<u8>) {
    write_kvs(&a.0, out);
}

fn write_kvs(a: &[KeyValue], out: &mut Vec<u8>) {
    out.push(b'[');
    for kv in a {
        out.extend_from_slice(b"{\"key\":");
        w::str(out, &kv.key);
        out.extend_from_slice(b",\"value\":");
        write_value(&kv.value, out);
        out.extend_from_slice(b"},");
    }
    w::trim_comma(out);
    out.push(b']');
}

fn write_value(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Str(s) => {
            out.extend_from_slice(b"{\"stringValue\":");
            w::str(out, s);
        }
        Value::Bool(b) => {
            out.extend_from_slice(b"{\"boolValue\":");
            w::bool(out, *b);
        }
        Value::I64(i) => {
            out.extend_from_slice(b"{\"intValue\":");
            w::i64_str(out, *i);
        }
        Value::F64(d) => {
            out.extend_from_slice(b"{\"doubleValue\":");
            w::f64(out, *d);
        }
        Value::Bytes(b) => {
            out.extend_from_slice(b"{\"bytesValue\":");
            w::base64(out, b);
        }
        Value::Array(a) => {
            out.extend_from_slice(b"{\"arrayValue\":{\"values\":[");
            for v in a {
                write_value(v, out);
                out.push(b',');
            }
            w::trim_comma(out);
            out.extend_from_slice(b"]}");
        }
        Value::Map(m) => {
            out.extend_from_slice(b"{\"kvlistValue\":{\"values\":");
            write_kvs(m, out);
            out.push(b'}');
        }
        Value::Empty => out.push(b'{'),
    }
    out.push(b'}');
}
