//! Jaeger JSON: the document Jaeger's query API v1 returns (`GET /api/traces/{id}`, the
//! query service's "UI JSON") and Jaeger UI's "upload JSON" opens:
//! `{"data":[{"traceID", "spans":[...], "processes":{"p1":...}, "warnings"}], "total", "limit",
//! "offset", "errors"}`. [`encode_traces`] writes the `data` array alone, for servers that wrap
//! it in their own response.
//!
//! # Mapping
//!
//! | Jaeger | weft | notes |
//! |---|---|---|
//! | `traceID`, `spanID` (hex) | ids | written as Jaeger writes them: a trace id as 16 hex digits when its high 64 bits are zero, else 32; span ids as 16 ([`trace_id_string`]); read from 1 to 32 digits |
//! | `references` `CHILD_OF` (first) | `parent_span_id` | the parent is written as the first `CHILD_OF` reference |
//! | other `references` | [`Span::links`] | `FOLLOWS_FROM` ↔ [`LinkRelation::FollowsFrom`], `CHILD_OF` ↔ `ChildOf`; `Unspecified` and `CausedBy` are written as `FOLLOWS_FROM` (loss: "link relations written as FOLLOWS_FROM"); link attributes and trace states are not carried |
//! | `operationName`, `startTime`/`duration` (µs), `flags` | name, times, flags | ns truncated to µs (loss counted); `flags` left out when 0 |
//! | `tags` (typed: string, bool, int64, float64, binary) | attributes, same types | an `int64` beyond JavaScript's safe integers (±(2⁵³−1)) is written as a decimal string, as Jaeger does; arrays and maps are written as JSON text (loss: "non-scalar attributes stringified") |
//! | tag `span.kind` | [`SpanKind`] | |
//! | tags `error`, `otel.status_code`, `otel.status_description` | [`Status`] | |
//! | tags `otel.scope.name`, `otel.scope.version` | [`Span::scope`] | scope attributes are not carried |
//! | tag `w3c.tracestate` | `trace_state` | |
//! | `logs[]` (`timestamp`, `fields`; field `event` = name) | [`Span::events`] | a log of an event without a name has no `event` field |
//! | `processes[processID]` (`serviceName`, `tags`) | [`Span::resource`] | `service.name` ↔ `serviceName` |
//! | — | dropped counts, schema URLs | not carried |

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;

use base64::Engine;
use serde::Deserialize;

use crate::codec::error::{CodecError, ErrorKind, Rejected, Sink, lenient, strict};
use crate::codec::jsonscan::{Element, ElementDecoder, ElementReader, element_error};
use crate::codec::jsonw as w;
use crate::codec::otlp::json::Num;
use crate::codec::stream::read_all;
use crate::codec::stream::{ExternalSorter, SpanWriter, WriterOptions};
use crate::codec::{Losses, zipkin};
use crate::conv;
use crate::id::{SpanId, TraceId};
use crate::span::{Link, LinkRelation, Resource, Scope, Span, SpanEvent, SpanKind, Status, StatusCode};
use crate::value::{Attributes, KeyValue, Value};

pub(crate) const FORMAT: &str = "Jaeger JSON";
const EXPECTED: &str = "a Jaeger JSON document ('{' with \"data\")";
const TRACE_STATE_TAG: &str = "w3c.tracestate";
/// The largest integer a JavaScript number holds exactly.
const JS_MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Loss: Jaeger knows only CHILD_OF and FOLLOWS_FROM.
pub const LOST_RELATION: &str = "link relations written as FOLLOWS_FROM";
/// Loss: link attributes.
pub const LOST_LINK_ATTRS: &str = "link attributes dropped";
/// Loss: arrays and maps become JSON text.
pub const LOST_NON_SCALAR: &str = "non-scalar attributes stringified";
/// Loss: sub-µs precision.
pub const LOST_PRECISION: &str = "spans with times truncated to µs";
/// Loss: scope attributes.
pub const LOST_SCOPE_ATTRS: &str = "scope attributes dropped";

/// Decodes a Jaeger JSON document; fails on the first span it cannot accept.
pub fn decode_json(bytes: &[u8]) -> Result<Vec<Span>, CodecError> {
    strict(read_all(JaegerReader::new(bytes)))
}

/// Decodes a Jaeger JSON document, skipping (and counting) spans with invalid ids.
pub fn decode_json_lenient(bytes: &[u8]) -> Result<(Vec<Span>, Rejected), CodecError> {
    lenient(read_all(JaegerReader::new(bytes)))
}

/// Encodes spans as a Jaeger JSON document (grouped by trace, traces in order of first
/// appearance, spans by start time).
pub fn encode_json(spans: &[Span]) -> Vec<u8> {
    encode_json_with(spans, &mut Losses::default())
}

/// Encodes spans as a Jaeger JSON document, counting what Jaeger cannot carry.
pub fn encode_json_with(spans: &[Span], losses: &mut Losses) -> Vec<u8> {
    let mut order: Vec<TraceId> = Vec::new();
    let mut by_trace: HashMap<TraceId, Vec<&Span>> = HashMap::new();
    for s in spans {
        by_trace
            .entry(s.trace_id)
            .or_insert_with(|| {
                order.push(s.trace_id);
                Vec::new()
            })
            .push(s);
    }
    let traces = order.iter().map(|t| by_trace.remove(t).unwrap_or_default());
    let mut out = Vec::with_capacity(spans.len() * 600);
    out.extend_from_slice(b"{\"data\":");
    write_traces(traces, &mut out, losses);
    out.extend_from_slice(b",\"total\":0,\"limit\":0,\"offset\":0,\"errors\":null}");
    out
}

/// Encodes traces (each the spans of one trace) as the JSON array of Jaeger trace objects
/// (the `data` of a query-service answer), spans of each trace by start time. What Jaeger
/// cannot carry is dropped as in [`encode_json_with`].
pub fn encode_traces(traces: &[Vec<Span>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(traces.iter().map(|t| t.len() * 600).sum::<usize>() + 2);
    write_traces(traces.iter().map(|t| t.iter().collect()), &mut out, &mut Losses::default());
    out
}

/// A trace id as Jaeger writes it: 16 hex digits when the high 64 bits are zero, else 32.
pub fn trace_id_string(t: &TraceId) -> String {
    let mut out = Vec::with_capacity(34);
    write_trace_id(&mut out, t);
    String::from_utf8_lossy(&out[1..out.len() - 1]).into_owned()
}

fn write_trace_id(out: &mut Vec<u8>, t: &TraceId) {
    match t.0.split_at(8) {
        ([0, 0, 0, 0, 0, 0, 0, 0], low) => w::hex_into(out, low),
        _ => w::trace_id(out, t),
    }
}

fn write_traces<'a>(traces: impl Iterator<Item = Vec<&'a Span>>, out: &mut Vec<u8>, losses: &mut Losses) {
    out.push(b'[');
    for (i, mut trace) in traces.filter(|t| !t.is_empty()).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        trace.sort_by_key(|s| s.start_ns);
        write_trace(&trace, out, losses);
    }
    out.push(b']');
}

fn write_trace(spans: &[&Span], out: &mut Vec<u8>, losses: &mut Losses) {
    let mut processes: Vec<&Arc<Resource>> = Vec::new();
    out.extend_from_slice(b"{\"traceID\":");
    write_trace_id(out, &spans[0].trace_id);
    out.extend_from_slice(b",\"spans\":[");
    for (i, s) in spans.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let pid = match processes.iter().position(|r| crate::codec::otlp::same(r, &s.resource)) {
            Some(p) => p,
            None => {
                processes.push(&s.resource);
                processes.len() - 1
            }
        };
        write_span(s, pid + 1, out, losses);
    }
    out.extend_from_slice(b"],\"processes\":{");
    for (i, r) in processes.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        w::key(out, &format!("p{}", i + 1));
        out.extend_from_slice(b"{\"serviceName\":");
        w::str(out, r.service_name());
        out.extend_from_slice(b",\"tags\":[");
        let mut first = true;
        for kv in r.attributes.iter().filter(|kv| kv.key != conv::SERVICE_NAME) {
            if !first {
                out.push(b',');
            }
            first = false;
            write_tag(out, &kv.key, &kv.value, losses);
        }
        out.extend_from_slice(b"]}");
    }
    out.extend_from_slice(b"},\"warnings\":null}");
}

fn write_span(s: &Span, pid: usize, out: &mut Vec<u8>, losses: &mut Losses) {
    if !s.start_ns.is_multiple_of(1000)
        || !s.end_ns.is_multiple_of(1000)
        || s.events.iter().any(|e| !e.time_ns.is_multiple_of(1000))
    {
        losses.add(LOST_PRECISION, 1);
    }
    losses.add(LOST_SCOPE_ATTRS, s.scope.attributes.len() as u64);
    out.extend_from_slice(b"{\"traceID\":");
    write_trace_id(out, &s.trace_id);
    out.extend_from_slice(b",\"spanID\":");
    w::span_id(out, &s.span_id);
    out.extend_from_slice(b",\"operationName\":");
    w::str(out, &s.name);
    out.extend_from_slice(b",\"references\":[");
    let mut first = true;
    let mut reference = |out: &mut Vec<u8>, kind: &str, t: &TraceId, id: &SpanId| {
        if !first {
            out.push(b',');
        }
        first = false;
        out.extend_from_slice(b"{\"refType\":");
        w::str(out, kind);
        out.extend_from_slice(b",\"traceID\":");
        write_trace_id(out, t);
        out.extend_from_slice(b",\"spanID\":");
        w::span_id(out, id);
        out.push(b'}');
    };
    if let Some(p) = &s.parent_span_id {
        reference(out, "CHILD_OF", &s.trace_id, p);
    }
    for l in &s.links {
        let kind = match l.relation {
            LinkRelation::ChildOf => "CHILD_OF",
            LinkRelation::FollowsFrom => "FOLLOWS_FROM",
            LinkRelation::Unspecified | LinkRelation::CausedBy => {
                losses.add(LOST_RELATION, 1);
                "FOLLOWS_FROM"
            }
        };
        losses.add(LOST_LINK_ATTRS, l.attributes.len() as u64);
        reference(out, kind, &l.trace_id, &l.span_id);
    }
    out.push(b']');
    if s.flags != 0 {
        out.extend_from_slice(b",\"flags\":");
        w::u64(out, s.flags as u64);
    }
    out.extend_from_slice(b",\"startTime\":");
    w::u64(out, s.start_ns / 1000);
    out.extend_from_slice(b",\"duration\":");
    w::u64(out, s.end_ns.saturating_sub(s.start_ns) / 1000);
    out.extend_from_slice(b",\"tags\":[");
    let mut n = 0;
    let mut tag = |out: &mut Vec<u8>, k: &str, v: &Value, losses: &mut Losses| {
        if n > 0 {
            out.push(b',');
        }
        n += 1;
        write_tag(out, k, v, losses);
    };
    for kv in s.attributes.iter() {
        tag(out, &kv.key, &kv.value, losses);
    }
    if let Some(k) = kind_name(s.kind) {
        tag(out, conv::SPAN_KIND, &Value::Str(k.into()), losses);
    }
    match s.status.code {
        StatusCode::Unset => {}
        StatusCode::Ok => tag(out, conv::OTEL_STATUS_CODE, &Value::Str("OK".into()), losses),
        StatusCode::Error => {
            tag(out, conv::ERROR, &Value::Bool(true), losses);
            tag(out, conv::OTEL_STATUS_CODE, &Value::Str("ERROR".into()), losses);
            if !s.status.message.is_empty() {
                tag(out, conv::OTEL_STATUS_DESCRIPTION, &Value::Str(s.status.message.clone().into()), losses);
            }
        }
    }
    if !s.scope.name.is_empty() {
        tag(out, conv::OTEL_SCOPE_NAME, &Value::Str(s.scope.name.clone().into()), losses);
    }
    if !s.scope.version.is_empty() {
        tag(out, conv::OTEL_SCOPE_VERSION, &Value::Str(s.scope.version.clone().into()), losses);
    }
    if !s.trace_state.is_empty() {
        tag(out, TRACE_STATE_TAG, &Value::Str(s.trace_state.clone().into()), losses);
    }
    out.extend_from_slice(b"],\"logs\":[");
    for (i, e) in s.events.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"timestamp\":");
        w::u64(out, e.time_ns / 1000);
        out.extend_from_slice(b",\"fields\":[");
        // A log without a name has no `event` field (as Jaeger writes OpenTelemetry events),
        // unless an attribute named `event` would otherwise be read back as the name.
        let named = !e.name.is_empty() || e.attributes.iter().any(|kv| kv.key == "event");
        if named {
            write_tag(out, "event", &Value::Str(e.name.clone()), losses);
        }
        for (j, kv) in e.attributes.iter().enumerate() {
            if named || j > 0 {
                out.push(b',');
            }
            write_tag(out, &kv.key, &kv.value, losses);
        }
        out.extend_from_slice(b"]}");
    }
    out.extend_from_slice(b"],\"processID\":");
    w::str(out, &format!("p{pid}"));
    out.extend_from_slice(b",\"warnings\":null}");
}

fn kind_name(k: SpanKind) -> Option<&'static str> {
    match k {
        SpanKind::Unspecified => None,
        k => Some(k.as_str()),
    }
}

fn write_tag(out: &mut Vec<u8>, key: &str, v: &Value, losses: &mut Losses) {
    out.extend_from_slice(b"{\"key\":");
    w::str(out, key);
    match v {
        Value::Str(s) => {
            out.extend_from_slice(b",\"type\":\"string\",\"value\":");
            w::str(out, s);
        }
        Value::Bool(b) => {
            out.extend_from_slice(b",\"type\":\"bool\",\"value\":");
            w::bool(out, *b);
        }
        Value::I64(i) => {
            out.extend_from_slice(b",\"type\":\"int64\",\"value\":");
            // JavaScript reads numbers as doubles: beyond ±(2^53 − 1) Jaeger writes a string.
            if i.unsigned_abs() > JS_MAX_SAFE_INTEGER {
                w::str(out, &i.to_string());
            } else {
                w::i64(out, *i);
            }
        }
        Value::F64(f) => {
            out.extend_from_slice(b",\"type\":\"float64\",\"value\":");
            if f.is_finite() {
                w::f64(out, *f);
            } else {
                losses.add(LOST_NON_SCALAR, 1);
                w::str(out, &f.to_string());
            }
        }
        Value::Bytes(b) => {
            out.extend_from_slice(b",\"type\":\"binary\",\"value\":");
            w::base64(out, b);
        }
        Value::Empty => {
            // No value: `null` (read back as empty, not as the empty string).
            out.extend_from_slice(b",\"type\":\"string\",\"value\":null");
        }
        Value::Array(_) | Value::Map(_) => {
            losses.add(LOST_NON_SCALAR, 1);
            out.extend_from_slice(b",\"type\":\"string\",\"value\":");
            w::str(out, &v.to_string());
        }
    }
    out.push(b'}');
}

// ---------------------------------------------------------------------------------------
// Reading.

/// Streaming reader: one trace (`data[]` element) at a time.
pub(crate) type JaegerReader<R> = ElementReader<R, TraceElements>;

/// Decodes one trace, handing each span it cannot accept to the sink.
#[derive(Default)]
pub(crate) struct TraceElements;

impl ElementDecoder for TraceElements {
    const FORMAT: &'static str = FORMAT;
    const KEYS: &'static [&'static str] = &["data"];
    const EXPECTED: &'static str = EXPECTED;

    fn decode(&mut self, el: Element<'_>, mut sink: Sink<'_>, out: &mut Vec<Span>) -> Result<(), CodecError> {
        let prefix = format!("data[{}]", el.index);
        let trace: JTrace<'_> = match serde_json::from_slice(el.bytes) {
            Ok(t) => t,
            Err(e) => return Err(element_error::<JTrace<'_>>(FORMAT, e, el.bytes, el.start, &prefix)),
        };
        let mut processes: HashMap<&str, Arc<Resource>> = HashMap::new();
        for (id, p) in &trace.processes {
            processes.insert(id.as_ref(), Arc::new(p.to_resource()));
        }
        let mut scopes: HashMap<(String, String), Arc<Scope>> = HashMap::new();
        for (k, s) in trace.spans.iter().enumerate() {
            match convert_span(s, &processes, &mut scopes) {
                Ok(span) => out.push(span),
                Err(e) => sink.reject(e.within(&format!("{prefix}.spans[{k}]")).at(el.start.position()))?,
            }
        }
        Ok(())
    }
}

#[derive(Deserialize)]
struct JTrace<'a> {
    #[serde(default, borrow)]
    spans: Vec<JSpan<'a>>,
    #[serde(default, borrow)]
    processes: HashMap<Cow<'a, str>, JProcess>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JSpan<'a> {
    #[serde(default, rename = "traceID", borrow)]
    trace_id: Option<Cow<'a, str>>,
    #[serde(default, rename = "spanID", borrow)]
    span_id: Option<Cow<'a, str>>,
    #[serde(default)]
    operation_name: String,
    #[serde(default, borrow)]
    references: Option<Vec<JRef<'a>>>,
    #[serde(default)]
    flags: Option<Num>,
    #[serde(default)]
    start_time: Option<Num>,
    #[serde(default)]
    duration: Option<Num>,
    #[serde(default)]
    tags: Option<Vec<JTag>>,
    #[serde(default)]
    logs: Option<Vec<JLog>>,
    #[serde(default, rename = "processID", borrow)]
    process_id: Option<Cow<'a, str>>,
    #[serde(default)]
    process: Option<JProcess>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JRef<'a> {
    #[serde(default, borrow)]
    ref_type: Cow<'a, str>,
    #[serde(default, rename = "traceID", borrow)]
    trace_id: Option<Cow<'a, str>>,
    #[serde(default, rename = "spanID", borrow)]
    span_id: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JProcess {
    #[serde(default)]
    service_name: String,
    #[serde(default)]
    tags: Option<Vec<JTag>>,
}

impl JProcess {
    fn to_resource(&self) -> Resource {
        let mut r = Resource::service(self.service_name.clone());
        for t in self.tags.iter().flatten() {
            r.attributes.push(t.key.clone(), t.value());
        }
        r
    }
}

#[derive(Deserialize)]
struct JTag {
    #[serde(default)]
    key: String,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    value: serde_json::Value,
}

impl JTag {
    fn value(&self) -> Value {
        use serde_json::Value as J;
        match (self.kind.as_deref().unwrap_or("").to_ascii_lowercase().as_str(), &self.value) {
            ("binary", J::String(s)) => base64::engine::general_purpose::STANDARD
                .decode(s)
                .map(Value::Bytes)
                .unwrap_or_else(|_| Value::Str(s.clone().into())),
            ("int64", J::String(s)) => {
                s.parse().map(Value::I64).unwrap_or_else(|_| Value::Str(s.clone().into()))
            }
            ("float64", J::String(s)) => {
                s.parse().map(Value::F64).unwrap_or_else(|_| Value::Str(s.clone().into()))
            }
            ("bool", J::String(s)) => Value::Bool(s == "true"),
            ("float64", J::Number(n)) => Value::F64(n.as_f64().unwrap_or(f64::NAN)),
            (_, v) => zipkin::json_to_value(v.clone()),
        }
    }
}

#[derive(Deserialize)]
struct JLog {
    #[serde(default)]
    timestamp: Option<Num>,
    #[serde(default)]
    fields: Option<Vec<JTag>>,
}

fn hex_trace(s: Option<&str>, field: &str) -> Result<TraceId, CodecError> {
    zipkin::trace_id_hex(FORMAT, s, field)
}

fn hex_span(s: Option<&str>, field: &str) -> Result<SpanId, CodecError> {
    zipkin::span_id_hex(FORMAT, s, field)
}

fn convert_span(
    s: &JSpan<'_>,
    processes: &HashMap<&str, Arc<Resource>>,
    scopes: &mut HashMap<(String, String), Arc<Scope>>,
) -> Result<Span, CodecError> {
    let trace_id = hex_trace(s.trace_id.as_deref(), "traceID")?;
    let span_id = hex_span(s.span_id.as_deref(), "spanID")?;
    let mut parent = None;
    let mut links = Vec::new();
    for (i, r) in s.references.iter().flatten().enumerate() {
        let f = |x: &str| format!("references[{i}].{x}");
        let t = hex_trace(r.trace_id.as_deref(), &f("traceID"))?;
        let id = hex_span(r.span_id.as_deref(), &f("spanID"))?;
        let child_of = r.ref_type.eq_ignore_ascii_case("CHILD_OF");
        if child_of && parent.is_none() && t == trace_id {
            parent = Some(id);
        } else {
            let relation = if child_of { LinkRelation::ChildOf } else { LinkRelation::FollowsFrom };
            links.push(Link { trace_id: t, span_id: id, relation, ..Link::default() });
        }
    }
    let mut attributes = Attributes::new();
    let mut kind = SpanKind::Unspecified;
    let mut status = Status::default();
    let mut error = false;
    let mut code = None;
    let mut description = None;
    let (mut scope_name, mut scope_version) = (String::new(), String::new());
    let mut trace_state = String::new();
    for t in s.tags.iter().flatten() {
        let v = t.value();
        match (t.key.as_str(), &v) {
            (conv::SPAN_KIND, Value::Str(k)) if SpanKind::parse(k).is_some() => {
                kind = SpanKind::parse(k).unwrap_or_default()
            }
            (conv::ERROR, Value::Bool(b)) => error = *b,
            (conv::OTEL_STATUS_CODE, Value::Str(c)) if c == "OK" || c == "ERROR" => code = Some(c == "OK"),
            (conv::OTEL_STATUS_DESCRIPTION, Value::Str(d)) => description = Some(d.clone()),
            (conv::OTEL_SCOPE_NAME | conv::OTEL_LIBRARY_NAME, Value::Str(n)) => scope_name = n.to_string(),
            (conv::OTEL_SCOPE_VERSION | conv::OTEL_LIBRARY_VERSION, Value::Str(n)) => {
                scope_version = n.to_string()
            }
            (TRACE_STATE_TAG, Value::Str(ts)) => trace_state = ts.to_string(),
            _ => attributes.0.push(KeyValue { key: t.key.clone().into(), value: v }),
        }
    }
    if error || code == Some(false) {
        status =
            Status { code: StatusCode::Error, message: description.take().unwrap_or_default().to_string() };
    } else if code == Some(true) {
        status.code = StatusCode::Ok;
    }
    if let Some(d) = description {
        attributes.push(conv::OTEL_STATUS_DESCRIPTION, d);
    }
    let events = s
        .logs
        .iter()
        .flatten()
        .map(|l| {
            // The first string field `event` is the name; any other field is an attribute.
            let mut name = None;
            let mut attrs = Attributes::new();
            for f in l.fields.iter().flatten() {
                match (f.key.as_str(), f.value()) {
                    ("event", Value::Str(n)) if name.is_none() => name = Some(n),
                    (_, v) => attrs.0.push(KeyValue { key: f.key.clone().into(), value: v }),
                }
            }
            let name = name.unwrap_or_default();
            SpanEvent {
                time_ns: l.timestamp.map_or(0, |n| n.0).saturating_mul(1000),
                name,
                attributes: attrs,
                dropped_attributes_count: 0,
            }
        })
        .collect();
    let resource = match (&s.process, s.process_id.as_deref()) {
        (Some(p), _) => Arc::new(p.to_resource()),
        (None, Some(id)) => processes.get(id).cloned().ok_or_else(|| {
            CodecError::new(
                FORMAT,
                ErrorKind::InvalidValue,
                format!("processID {id:?} is not in \"processes\""),
            )
            .field("processID")
        })?,
        (None, None) => Arc::new(Resource::default()),
    };
    let scope = if scope_name.is_empty() && scope_version.is_empty() {
        Arc::new(Scope::default())
    } else {
        Arc::clone(scopes.entry((scope_name.clone(), scope_version.clone())).or_insert_with(|| {
            Arc::new(Scope { name: scope_name, version: scope_version, ..Scope::default() })
        }))
    };
    let start_ns = s.start_time.map_or(0, |n| n.0).saturating_mul(1000);
    Ok(Span {
        trace_id,
        span_id,
        parent_span_id: parent,
        trace_state,
        flags: s.flags.map_or(0, |n| n.0 as u32),
        name: s.operation_name.clone().into(),
        kind,
        start_ns,
        end_ns: start_ns.saturating_add(s.duration.map_or(0, |n| n.0).saturating_mul(1000)),
        status,
        attributes,
        events,
        links,
        ..Span::with_context(resource, scope)
    })
}

// ---------------------------------------------------------------------------------------
// Streaming writer.

/// Writes Jaeger JSON from a stream: spans are grouped per trace through an external sort
/// (bounded memory: one sort run plus one trace at a time).
pub(crate) struct JaegerWriter<W, F: Fn(&Span) -> (TraceId, u64, SpanId)> {
    out: W,
    sorter: ExternalSorter<(TraceId, u64, SpanId), F>,
}

type JaegerKey = fn(&Span) -> (TraceId, u64, SpanId);

impl<W: Write> JaegerWriter<W, JaegerKey> {
    pub(crate) fn new(out: W, options: WriterOptions) -> Self {
        let key: JaegerKey = |s| (s.trace_id, s.start_ns, s.span_id);
        JaegerWriter { out, sorter: ExternalSorter::new(FORMAT, &options, key) }
    }
}

impl<W: Write> SpanWriter for JaegerWriter<W, JaegerKey> {
    fn write(&mut self, spans: &[Span]) -> Result<(), CodecError> {
        self.sorter.push(spans)
    }

    fn finish(self: Box<Self>) -> Result<Losses, CodecError> {
        let JaegerWriter { mut out, sorter } = *self;
        let io = |e: std::io::Error| CodecError::io(FORMAT, e);
        let mut losses = Losses::default();
        out.write_all(b"{\"data\":[\n").map_err(io)?;
        let mut current: Vec<Span> = Vec::new();
        let mut first = true;
        let mut buf = Vec::new();
        let mut flush = |trace: &mut Vec<Span>, out: &mut W, losses: &mut Losses| -> Result<(), CodecError> {
            if trace.is_empty() {
                return Ok(());
            }
            buf.clear();
            if !first {
                buf.extend_from_slice(b",\n");
            }
            first = false;
            let refs: Vec<&Span> = trace.iter().collect();
            write_trace(&refs, &mut buf, losses);
            trace.clear();
            out.write_all(&buf).map_err(io)
        };
        sorter.drain(|s| {
            if current.first().is_some_and(|c| c.trace_id != s.trace_id) {
                flush(&mut current, &mut out, &mut losses)?;
            }
            current.push(s);
            Ok(())
        })?;
        flush(&mut current, &mut out, &mut losses)?;
        out.write_all(b"\n],\"total\":0,\"limit\":0,\"offset\":0,\"errors\":null}\n").map_err(io)?;
        out.flush().map_err(io)?;
        Ok(losses)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_input() {
        let (ok, rej) = decode_json_lenient(
            br#"{"data":[{"traceID":"1","spans":[{"traceID":"1","spanID":"2","processID":"p1"},{"traceID":"1","spanID":"zz"}],"processes":{"p1":{"serviceName":"s"}}}]}"#,
        )
        .unwrap();
        assert_eq!((ok.len(), rej.count), (1, 1));
        assert_eq!(ok[0].service_name(), "s");
        assert_eq!(rej.first_error.unwrap().field, "data[0].spans[1].spanID");
        assert!(
            decode_json(br#"{"data":[{"spans":[{"traceID":"1","spanID":"2","processID":"nope"}]}]}"#)
                .is_err()
        );
        assert!(decode_json(b"{\"data\":[{\"spans\":[").is_err());
    }

    #[test]
    fn only_the_first_event_field_names_the_log() {
        // A log whose `event` field has no value, found by fuzzing: the names and attributes
        // must survive a write and a read (a fixed point), not lose the second `event`.
        let doc = br#"{"data":[{"traceID":"1","spans":[{"traceID":"1","spanID":"2","logs":[{"timestamp":5,"fields":[{"key":"event","type":"string"},{"key":"x","type":"int64","value":1}]}]}]}]}"#;
        let once = encode_json(&decode_json(doc).unwrap());
        let back = decode_json(&once).unwrap();
        assert_eq!(back[0].events[0].name, "");
        assert_eq!(back[0].events[0].attributes.len(), 2, "{:?}", back[0].events[0]);
        assert_eq!(encode_json(&back), once);
        // An empty value named like a tag weft writes itself stays an empty attribute.
        let doc = br#"{"data":[{"traceID":"1","spans":[{"traceID":"1","spanID":"2","processID":"p1","tags":[{"key":"otel.scope.name","type":"string"}]}],"processes":{"p1":{"serviceName":"s"}}}]}"#;
        let spans = decode_json(doc).unwrap();
        assert_eq!(spans[0].attributes.get(conv::OTEL_SCOPE_NAME), Some(&Value::Empty));
        assert_eq!(decode_json(&encode_json(&spans)).unwrap(), spans);
    }
}
