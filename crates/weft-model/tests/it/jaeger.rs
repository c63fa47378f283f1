//! Jaeger JSON: sample spans round trip within what Jaeger carries, the streaming writer
//! groups traces; property tests — round trips of everything Jaeger carries (whole buffer, and
//! streaming through the external sort with spilled runs), decoders that never panic,
//! truncated documents that always fail.

use std::sync::Arc;

use proptest::prelude::*;
use weft_model::codec::stream::Format;
use weft_model::codec::{Losses, jaeger};
use weft_model::{Attributes, LinkRelation, Resource, Scope, Span, Value};
use weft_synth::sample;

use crate::strategies;
use crate::zipkin::{read_stream, write_chunked, write_stream};

/// Jaeger groups spans by trace and orders them by start time.
fn ordered(spans: &[Span]) -> Vec<Span> {
    let mut v = spans.to_vec();
    v.sort_by_key(|s| (s.trace_id, s.start_ns, s.span_id));
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn json_round_trip(spans in strategies::jaeger_spans()) {
        let mut losses = Losses::default();
        let text = jaeger::encode_json_with(&spans, &mut losses);
        prop_assert!(losses.is_empty(), "{}", losses);
        let back = jaeger::decode_json(&text)
            .map_err(|e| TestCaseError::fail(format!("{e}\n{}", String::from_utf8_lossy(&text))))?;
        prop_assert_eq!(ordered(&back), ordered(&spans));
        let (streamed, losses) = write_stream(Format::JaegerJson, &spans);
        prop_assert!(losses.is_empty());
        prop_assert_eq!(ordered(&read_stream(Format::JaegerJson, &streamed).unwrap()), ordered(&spans));
    }

    #[test]
    fn truncated_json_always_fails(spans in strategies::jaeger_spans(), cut in any::<prop::sample::Index>()) {
        let text = jaeger::encode_json(&spans);
        let cut = cut.index(text.len());
        prop_assert!(jaeger::decode_json(&text[..cut]).is_err() || cut == 0);
    }

    #[test]
    fn decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = jaeger::decode_json_lenient(&bytes);
    }

    #[test]
    fn decoder_never_panics_on_json_like_text(text in "[\\[\\]{}\":,0-9a-fA-FdatspnID \\\\-]{0,160}") {
        let _ = jaeger::decode_json(text.as_bytes());
    }
}

#[test]
fn round_trip_keeps_what_jaeger_carries() {
    let spans: Vec<Span> = sample::spans(120, 13)
        .into_iter()
        .map(|mut s| {
            s.start_ns -= s.start_ns % 1000;
            s.end_ns -= s.end_ns % 1000;
            for e in &mut s.events {
                e.time_ns -= e.time_ns % 1000;
            }
            for l in &mut s.links {
                l.attributes = Attributes::new();
                if matches!(l.relation, LinkRelation::Unspecified | LinkRelation::CausedBy) {
                    l.relation = LinkRelation::FollowsFrom;
                }
            }
            s
        })
        .collect();
    let mut losses = Losses::default();
    let text = jaeger::encode_json_with(&spans, &mut losses);
    let back = jaeger::decode_json(&text).unwrap();
    assert_eq!(back.len(), spans.len());
    let mut want = spans.clone();
    want.sort_by_key(|s| (s.trace_id, s.start_ns, s.span_id));
    let mut got = back;
    got.sort_by_key(|s| (s.trace_id, s.start_ns, s.span_id));
    for (a, b) in want.iter().zip(&got) {
        let mut a = a.clone();
        // Jaeger keeps types of scalars; arrays/maps come back as JSON text.
        for kv in &mut a.attributes.0 {
            if matches!(kv.value, Value::Array(_) | Value::Map(_)) {
                kv.value = Value::Str(kv.value.to_string().into());
            }
        }
        let mut b = b.clone();
        b.resource =
            Arc::new(Resource { schema_url: a.resource.schema_url.clone(), ..(*b.resource).clone() });
        b.scope = Arc::new(Scope { attributes: a.scope.attributes.clone(), ..(*b.scope).clone() });
        assert_eq!(a, b);
    }
    assert!(losses.get(jaeger::LOST_NON_SCALAR) > 0, "{losses}");
}

#[test]
fn streaming_writer_groups_traces() {
    let spans = sample::spans(300, 17);
    let (out, _) = write_chunked(Format::JaegerJson, &spans, 10, 16);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let data = v["data"].as_array().unwrap();
    let mut traces: Vec<&str> = data.iter().map(|t| t["traceID"].as_str().unwrap()).collect();
    let n = traces.len();
    traces.dedup();
    assert_eq!(traces.len(), n, "each trace appears once");
    assert_eq!(jaeger::decode_json(&out).unwrap().len(), 300);
}

#[test]
fn ids_integers_flags_and_unnamed_logs_are_written_as_jaeger_writes_them() {
    use weft_model::{SpanEvent, SpanId, TraceId};
    let mut attrs = Attributes::new();
    attrs.push("small", Value::I64(-(1 << 53) + 1));
    attrs.push("big", Value::I64(1 << 53));
    let mut xy = Attributes::new();
    xy.push("x", "y");
    let span = |trace: u128| Span {
        trace_id: TraceId::from_u128(trace),
        span_id: SpanId([0, 0, 0, 0, 0, 0, 0, 2]),
        start_ns: 1_000_000,
        end_ns: 2_000_000,
        attributes: attrs.clone(),
        events: vec![SpanEvent {
            time_ns: 1_000_000,
            name: "".into(),
            attributes: xy.clone(),
            dropped_attributes_count: 0,
        }],
        ..Span::with_context(Arc::new(Resource::service("s")), Arc::new(Scope::default()))
    };
    let spans = vec![span(1), span(1 << 64)];
    let text = jaeger::encode_json(&spans);
    let v: serde_json::Value = serde_json::from_slice(&text).unwrap();
    // A trace id whose high half is zero has 16 digits, else 32; span ids always 16.
    assert_eq!(v["data"][0]["traceID"], "0000000000000001");
    assert_eq!(v["data"][1]["traceID"], "00000000000000010000000000000000");
    assert_eq!(jaeger::trace_id_string(&TraceId::from_u128(1)), "0000000000000001");
    let s = &v["data"][0]["spans"][0];
    assert_eq!(s["spanID"], "0000000000000002");
    // Integers beyond JavaScript's safe range are strings; flags 0 are left out.
    assert_eq!(s["tags"][0]["value"], serde_json::json!(-(1i64 << 53) + 1));
    assert_eq!(s["tags"][1]["value"], "9007199254740992");
    assert!(s.get("flags").is_none(), "{s}");
    // A log without a name has no `event` field.
    assert_eq!(s["logs"][0]["fields"], serde_json::json!([{"key": "x", "type": "string", "value": "y"}]));
    // All of it reads back.
    assert_eq!(ordered(&jaeger::decode_json(&text).unwrap()), ordered(&spans));
    // `encode_traces` is the `data` array alone.
    let data = jaeger::encode_traces(&[spans[..1].to_vec()]);
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&data).unwrap(),
        serde_json::json!([v["data"][0]])
    );
}
