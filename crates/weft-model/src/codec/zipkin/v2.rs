//! Zipkin v2 JSON: a JSON array of span objects (`POST /api/v2/spans`, `GET /api/v2/trace/{id}`).
//! Several arrays in one file (one per line, or concatenated) are read one after the other.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, MapAccess, Visitor};

use super::{Endpoint, Interner, JsonElements, ZSpan};
use crate::codec::Losses;
use crate::codec::error::{CodecError, ErrorKind, Rejected, Sink, lenient, strict};
use crate::codec::jsonscan::{Element, ElementDecoder, ElementReader, element_error};
use crate::codec::jsonw as w;
use crate::codec::otlp::json::Num;
use crate::codec::stream::read_all;
use crate::span::{Span, SpanKind};
use crate::value::Str;

pub(crate) const FORMAT: &str = "Zipkin v2 JSON";
const EXPECTED: &str = "a Zipkin JSON array of spans ('[')";

/// Decodes Zipkin v2 JSON; fails on the first span it cannot accept.
pub fn decode_v2_json(bytes: &[u8]) -> Result<Vec<Span>, CodecError> {
    if let Some(spans) = super::scan::decode(bytes).or_else(|| decode_fast(bytes)) {
        return Ok(spans);
    }
    strict(read_all(V2JsonReader::new(bytes)))
}

/// Decodes Zipkin v2 JSON, skipping (and counting) spans it cannot accept — invalid ids, or
/// a span object that does not decode — as long as the array itself is well-formed.
pub fn decode_v2_json_lenient(bytes: &[u8]) -> Result<(Vec<Span>, Rejected), CodecError> {
    if let Some(spans) = super::scan::decode(bytes).or_else(|| decode_fast(bytes)) {
        return Ok((spans, Rejected::default()));
    }
    lenient(read_all(V2JsonReader::new(bytes)))
}

/// The serde path for a whole document in memory (after [`super::scan`], the fastest) that is one well-formed array of valid spans
/// (the common case): a single serde pass, no element scanning and copying. `None` for
/// anything else — several arrays, a bad span, malformed JSON — which the element-by-element
/// reader then decodes, with its positions in errors and its lenient skipping.
pub(crate) fn decode_fast(bytes: &[u8]) -> Option<Vec<Span>> {
    struct Spans;
    impl<'de> Visitor<'de> for Spans {
        type Value = Vec<Span>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an array of Zipkin spans")
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Span>, A::Error> {
            let mut interner = Interner::default();
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(64));
            while let Some(j) = seq.next_element::<JSpan<'de>>()? {
                let z = j.into_zipkin().map_err(|e| de::Error::custom(e.message.clone()))?;
                out.push(super::to_span(z, &mut interner));
            }
            Ok(out)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let spans = serde::Deserializer::deserialize_seq(&mut de, Spans).ok()?;
    de.end().ok()?;
    Some(spans)
}

/// Encodes spans as a Zipkin v2 JSON array.
pub fn encode_v2_json(spans: &[Span]) -> Vec<u8> {
    encode_v2_json_with(spans, &mut Losses::default())
}

/// Encodes spans as a Zipkin v2 JSON array, counting what Zipkin cannot carry.
pub fn encode_v2_json_with(spans: &[Span], losses: &mut Losses) -> Vec<u8> {
    let mut out = Vec::with_capacity(spans.len() * 512);
    out.push(b'[');
    for s in spans {
        write_span(s, &mut out, losses);
        out.push(b',');
    }
    w::trim_comma(&mut out);
    out.push(b']');
    out
}

/// Streaming reader: one span at a time.
pub(crate) type V2JsonReader<R> = ElementReader<R, JsonElements<2>>;

/// Decodes one span, or hands it to the sink as rejected.
impl ElementDecoder for JsonElements<2> {
    const FORMAT: &'static str = FORMAT;
    const KEYS: &'static [&'static str] = &[];
    const EXPECTED: &'static str = EXPECTED;

    fn decode(&mut self, el: Element<'_>, mut sink: Sink<'_>, out: &mut Vec<Span>) -> Result<(), CodecError> {
        let index = el.index;
        // The scanner takes the usual span; serde anything else (and names what is wrong).
        let parsed = match super::scan::element(el.bytes) {
            Some(j) => Ok(j),
            None => serde_json::from_slice::<JSpan<'_>>(el.bytes),
        };
        let result = match parsed {
            Ok(j) => j.into_zipkin().map_err(|e| e.within(&format!("[{index}]")).at(el.start.position())),
            Err(e) => Err(element_error::<JSpan<'_>>(FORMAT, e, el.bytes, el.start, &format!("[{index}]"))),
        };
        match result {
            Ok(z) => out.push(super::to_span(z, &mut self.interner)),
            Err(e) => sink.reject(e)?,
        }
        Ok(())
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(crate) struct JSpan<'a> {
    #[serde(default, borrow)]
    pub(crate) trace_id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub(crate) id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub(crate) parent_id: Option<Cow<'a, str>>,
    #[serde(default)]
    pub(crate) name: Option<Str>,
    #[serde(default, borrow)]
    pub(crate) kind: Option<Cow<'a, str>>,
    #[serde(default)]
    pub(crate) timestamp: Option<Num>,
    #[serde(default)]
    pub(crate) duration: Option<Num>,
    #[serde(default)]
    pub(crate) local_endpoint: Option<JEndpoint>,
    #[serde(default)]
    pub(crate) remote_endpoint: Option<JEndpoint>,
    #[serde(default)]
    pub(crate) annotations: Option<Vec<JAnnotation>>,
    #[serde(default)]
    pub(crate) tags: Option<Tags>,
    #[serde(default)]
    pub(crate) debug: Option<bool>,
    #[serde(default)]
    pub(crate) shared: Option<bool>,
}

impl JSpan<'_> {
    pub(crate) fn into_zipkin(self) -> Result<ZSpan, CodecError> {
        let kind = match self.kind.as_deref() {
            None => SpanKind::Unspecified,
            Some(k) => super::kind_from_str(k).ok_or_else(|| {
                CodecError::new(FORMAT, ErrorKind::InvalidValue, format!("unknown kind {k:?}")).field("kind")
            })?,
        };
        Ok(ZSpan {
            trace_id: super::trace_id_hex(FORMAT, self.trace_id.as_deref(), "traceId")?,
            id: super::span_id_hex(FORMAT, self.id.as_deref(), "id")?,
            parent_id: super::parent_hex(FORMAT, self.parent_id.as_deref())?,
            name: self.name.unwrap_or_default(),
            kind,
            timestamp: self.timestamp.map(|n| n.0),
            duration: self.duration.map(|n| n.0),
            local: self.local_endpoint.map(JEndpoint::into_endpoint),
            remote: self.remote_endpoint.map(JEndpoint::into_endpoint),
            annotations: self
                .annotations
                .unwrap_or_default()
                .into_iter()
                .map(|a| (a.timestamp.map_or(0, |n| n.0), a.value.unwrap_or_default()))
                .collect(),
            tags: self.tags.map(|t| t.0).unwrap_or_default(),
            debug: self.debug.unwrap_or(false),
            shared: self.shared.unwrap_or(false),
        })
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(crate) struct JEndpoint {
    #[serde(default)]
    pub(crate) service_name: Option<Str>,
    #[serde(default)]
    pub(crate) ipv4: Option<Str>,
    #[serde(default)]
    pub(crate) ipv6: Option<Str>,
    #[serde(default)]
    pub(crate) port: Option<i64>,
}

impl JEndpoint {
    pub(crate) fn into_endpoint(self) -> Endpoint {
        Endpoint {
            service_name: self.service_name.filter(|s| !s.is_empty()),
            ipv4: self.ipv4.filter(|s| !s.is_empty()),
            ipv6: self.ipv6.filter(|s| !s.is_empty()),
            port: self.port.filter(|p| *p != 0),
        }
    }
}

#[derive(Deserialize)]
pub(crate) struct JAnnotation {
    #[serde(default)]
    pub(crate) timestamp: Option<Num>,
    #[serde(default)]
    pub(crate) value: Option<Str>,
}

/// The `tags` object in document order; non-string values (which some producers send) are
/// kept as their JSON text.
pub(crate) struct Tags(pub(crate) Vec<(Str, Str)>);

deserialize_by_visitor!(<'de> Tags, "an object of string tags", deserialize_map, {
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Tags, A::Error> {
        let mut out = Vec::with_capacity(m.size_hint().unwrap_or(8));
        while let Some(k) = m.next_key::<super::MapKey>()? {
            let v = m.next_value::<TagValue>()?;
            out.push((k.0, v.0));
        }
        Ok(Tags(out))
    }
});

struct TagValue(Str);

deserialize_by_visitor!(<'de> TagValue, "a tag value (string)", deserialize_any, {
    fn visit_str<E: de::Error>(self, v: &str) -> Result<TagValue, E> {
        Ok(TagValue(Str::new(v)))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<TagValue, E> {
        Ok(TagValue(Str::from(v)))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<TagValue, E> {
        Ok(TagValue(Str::const_new(if v { "true" } else { "false" })))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<TagValue, E> {
        Ok(TagValue(compact_str::format_compact!("{v}")))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<TagValue, E> {
        Ok(TagValue(compact_str::format_compact!("{v}")))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<TagValue, E> {
        Ok(TagValue(compact_str::format_compact!("{v}")))
    }
    fn visit_unit<E: de::Error>(self) -> Result<TagValue, E> {
        Ok(TagValue(Str::default()))
    }
});

/// Writes one span as a Zipkin v2 JSON object.
pub(crate) fn write_span(s: &Span, out: &mut Vec<u8>, losses: &mut Losses) {
    let z = super::from_span(s, losses);
    write_zspan(&z, out);
}

fn write_zspan(z: &ZSpan, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"traceId\":");
    write_trace_id(out, &z.trace_id);
    if let Some(p) = &z.parent_id {
        out.extend_from_slice(b",\"parentId\":");
        w::span_id(out, p);
    }
    out.extend_from_slice(b",\"id\":");
    w::span_id(out, &z.id);
    if let Some(k) = super::kind_to_str(z.kind) {
        out.extend_from_slice(b",\"kind\":");
        w::str(out, k);
    }
    if !z.name.is_empty() {
        out.extend_from_slice(b",\"name\":");
        w::str(out, &z.name);
    }
    if let Some(t) = z.timestamp {
        out.extend_from_slice(b",\"timestamp\":");
        w::u64(out, t);
    }
    if let Some(d) = z.duration {
        out.extend_from_slice(b",\"duration\":");
        w::u64(out, d);
    }
    if let Some(e) = &z.local {
        out.extend_from_slice(b",\"localEndpoint\":");
        write_endpoint(out, e);
    }
    if let Some(e) = &z.remote {
        out.extend_from_slice(b",\"remoteEndpoint\":");
        write_endpoint(out, e);
    }
    if !z.annotations.is_empty() {
        out.extend_from_slice(b",\"annotations\":[");
        for (ts, v) in &z.annotations {
            out.extend_from_slice(b"{\"timestamp\":");
            w::u64(out, *ts);
            out.extend_from_slice(b",\"value\":");
            w::str(out, v);
            out.extend_from_slice(b"},");
        }
        w::trim_comma(out);
        out.push(b']');
    }
    if !z.tags.is_empty() {
        out.extend_from_slice(b",\"tags\":{");
        for (k, v) in &z.tags {
            w::key(out, k);
            w::str(out, v);
            out.push(b',');
        }
        w::trim_comma(out);
        out.push(b'}');
    }
    if z.debug {
        out.extend_from_slice(b",\"debug\":true");
    }
    if z.shared {
        out.extend_from_slice(b",\"shared\":true");
    }
    out.push(b'}');
}

/// 16 hex digits when the high half is zero (Zipkin's own convention), else 32.
pub(crate) fn write_trace_id(out: &mut Vec<u8>, t: &crate::TraceId) {
    if t.0[..8] == [0; 8] {
        w::span_id(out, &crate::SpanId(t.0[8..].try_into().unwrap_or([0; 8])));
    } else {
        w::trace_id(out, t);
    }
}

fn write_endpoint(out: &mut Vec<u8>, e: &Endpoint) {
    out.push(b'{');
    if let Some(s) = &e.service_name {
        w::key(out, "serviceName");
        w::str(out, s);
        out.push(b',');
    }
    if let Some(s) = &e.ipv4 {
        w::key(out, "ipv4");
        w::str(out, s);
        out.push(b',');
    }
    if let Some(s) = &e.ipv6 {
        w::key(out, "ipv6");
        w::str(out, s);
        out.push(b',');
    }
    if let Some(p) = e.port {
        w::key(out, "port");
        w::i64(out, p);
        out.push(b',');
    }
    w::trim_comma(out);
    out.push(b'}');
}
