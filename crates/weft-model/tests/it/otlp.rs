//! OTLP: round trips of sample spans, bad ids and truncation, property tests (round trips
//! through protobuf and JSON).

use proptest::prelude::*;
use prost::Message;
use weft_model::codec::otlp::{
    self, decode_json, decode_proto, decode_proto_lenient, encode_json, encode_proto, from_request,
    from_request_lenient, proto, to_request,
};
use weft_model::codec::{ErrorKind, Position};
use weft_model::{Attributes, Link, LinkRelation, SpanId, Value, conv};
use weft_synth::sample;

use crate::strategies;

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn proto_round_trip(spans in strategies::spans()) {
        let bytes = otlp::encode_proto(&spans);
        prop_assert_eq!(otlp::decode_proto(&bytes).unwrap(), spans);
    }

    #[test]
    fn json_round_trip(spans in strategies::spans()) {
        let text = otlp::encode_json(&spans);
        let back = otlp::decode_json(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{}", String::from_utf8_lossy(&text))))?;
        prop_assert_eq!(back, spans);
    }

    #[test]
    fn truncated_json_always_fails(spans in strategies::spans(), cut in any::<prop::sample::Index>()) {
        let text = otlp::encode_json(&spans);
        let cut = cut.index(text.len());
        prop_assert!(otlp::decode_json(&text[..cut]).is_err() || cut == 0);
    }

    /// Protobuf cannot tell a cut between two top-level records from the end of the input;
    /// anything else must fail, and nothing may ever decode to spans that were not there.
    #[test]
    fn truncated_proto_fails_or_yields_a_prefix(spans in strategies::spans(), cut in any::<prop::sample::Index>()) {
        let bytes = otlp::encode_proto(&spans);
        let cut = cut.index(bytes.len() + 1);
        if let Ok(got) = otlp::decode_proto(&bytes[..cut]) {
            prop_assert!(got.len() <= spans.len());
            prop_assert_eq!(&got[..], &spans[..got.len()]);
        }
    }

    #[test]
    fn proto_decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = otlp::decode_proto(&bytes);
        let _ = otlp::decode_proto_lenient(&bytes);
    }

    #[test]
    fn json_decoder_never_panics(text in "[{}\\[\\]\":,a-zA-Z0-9 ]{0,128}") {
        let _ = otlp::decode_json(text.as_bytes());
    }
}

#[test]
fn proto_round_trip_is_lossless() {
    let spans = sample::spans(300, 7);
    let bytes = encode_proto(&spans);
    assert_eq!(decode_proto(&bytes).unwrap(), spans);
    // Resources are shared again after decoding: one Arc per ResourceSpans.
    let back = decode_proto(&bytes).unwrap();
    let req = to_request(&back);
    assert_eq!(req.resource_spans.len(), to_request(&spans).resource_spans.len());
}

#[test]
fn json_round_trip_is_lossless() {
    let spans = sample::spans(300, 8);
    let text = encode_json(&spans);
    assert_eq!(decode_json(&text).unwrap(), spans);
}

#[test]
fn json_and_proto_agree() {
    let spans = sample::spans(50, 9);
    assert_eq!(decode_json(&encode_json(&spans)).unwrap(), decode_proto(&encode_proto(&spans)).unwrap());
}

#[test]
fn link_relation_travels_as_attribute() {
    let mut spans = sample::spans(1, 1);
    spans[0].links = vec![Link {
        trace_id: spans[0].trace_id,
        span_id: SpanId::from_u64(5),
        relation: LinkRelation::CausedBy,
        ..Link::default()
    }];
    let req = to_request(&spans);
    let l = &req.resource_spans[0].scope_spans[0].spans[0].links[0];
    assert_eq!(l.attributes[0].key, conv::LINK_RELATION);
    assert_eq!(from_request(req).unwrap(), spans);
}

#[test]
fn json_lines_and_snake_case() {
    let a = encode_json(&sample::spans(3, 1));
    let b = br#"{"resource_spans":[{"scope_spans":[{"spans":[{"trace_id":"0102030405060708090a0b0c0d0e0f10","span_id":"0102030405060708","name":"snake","start_time_unix_nano":5}]}]}]}"#;
    let mut doc = a.clone();
    doc.push(b'\n');
    doc.extend_from_slice(b);
    doc.push(b'\n');
    let spans = decode_json(&doc).unwrap();
    assert_eq!(spans.len(), 4);
    assert_eq!(spans[3].name, "snake");
    assert_eq!(spans[3].start_ns, 5);
}

#[test]
fn truncated_and_garbage_json_fail_with_position() {
    let full = encode_json(&sample::spans(5, 2));
    for cut in [1, 20, full.len() / 2, full.len() - 1] {
        let e = decode_json(&full[..cut]).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Truncated | ErrorKind::Syntax), "cut {cut}: {e}");
        assert!(matches!(e.position, Position::Line { .. }), "cut {cut}: {e}");
    }
    let e = decode_json(b"[{\"traceId\":\"ab\"}]").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Mismatch);
    assert!(decode_json(b"\x00\x01garbage").is_err());
    assert_eq!(decode_json(b"{}").unwrap(), vec![]);
}

#[test]
fn lenient_proto_rejects_bad_ids() {
    let spans = sample::spans(4, 3);
    let mut req = to_request(&spans);
    req.resource_spans[0].scope_spans[0].spans[0].span_id = vec![1, 2, 3];
    let bytes = req.encode_to_vec();
    let (got, rej) = decode_proto_lenient(&bytes).unwrap();
    assert_eq!(got.len(), 3);
    assert_eq!(rej.count, 1);
    let e = rej.first_error.unwrap();
    assert_eq!(e.field, "resource_spans[0].scope_spans[0].spans[0].span_id");
    assert!(e.to_string().contains("must be 8 bytes"), "{e}");
    assert!(decode_proto(&bytes).is_err());
    let (ok, rej) = from_request_lenient(req);
    assert_eq!((ok.len(), rej.count), (3, 1));
}

#[test]
fn truncated_and_garbage_proto_fail_with_offset() {
    let full = encode_proto(&sample::spans(20, 4));
    for cut in [1, 2, 10, full.len() / 2, full.len() - 1] {
        let e = decode_proto(&full[..cut]).unwrap_err();
        assert!(matches!(e.position, Position::Offset(_)), "cut {cut}: {e}");
    }
    let e = decode_proto(br#"{"resourceSpans":[]}"#).unwrap_err();
    assert!(matches!(e.position, Position::Offset(0)), "{e}");
    // Empty input is an empty request (protobuf semantics).
    assert_eq!(decode_proto(&[]).unwrap(), vec![]);
}

#[test]
fn encodes_spec_conform_json() {
    let mut spans = sample::spans(1, 5);
    spans[0].attributes.push("nan", f64::NAN);
    let text = String::from_utf8(encode_json(&spans)).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let span = &v["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
    assert_eq!(span["traceId"].as_str().unwrap(), spans[0].trace_id.to_string());
    assert_eq!(span["spanId"].as_str().unwrap(), spans[0].span_id.to_string());
    assert!(span["kind"].is_u64(), "enums are integers");
    assert_eq!(span["startTimeUnixNano"].as_str().unwrap(), spans[0].start_ns.to_string());
    assert!(text.contains("\"doubleValue\":\"NaN\""));
}

/// Strings: ASCII (the fast check), other UTF-8 of every length and at every position, and
/// bytes that are not UTF-8, which fail the payload at the string.
#[test]
fn proto_strings_are_checked_utf8() {
    let mut spans = sample::spans(1, 5);
    for text in ["", "a", "é", "naïve café ☕ — long enough to be on the heap", "ascii then 😀", "😀"]
    {
        spans[0].name = text.into();
        spans[0].attributes.set(format!("k{text}"), text);
        let bytes = encode_proto(&spans);
        assert_eq!(decode_proto(&bytes).unwrap(), spans, "{text}");
    }
    let mut req = to_request(&spans);
    req.resource_spans[0].scope_spans[0].spans[0].name = "ok".into();
    let mut bytes = req.encode_to_vec();
    let at = bytes.windows(2).position(|w| w == b"ok").unwrap();
    bytes[at + 1] = 0xff;
    let e = decode_proto(&bytes).unwrap_err();
    assert!(e.to_string().contains("not UTF-8"), "{e}");
    // The offset is the string field's (its length prefix, just before the text).
    assert!(matches!(e.position, Position::Offset(o) if o < at as u64 && o + 8 > at as u64), "{e}");
}

/// Attributes of every scalar kind and size (the decoder's shortcut for plain ones) decode as
/// the prost path decodes them, and so do hand-made `KeyValue`s in unusual field orders.
#[test]
fn plain_and_unusual_attributes_agree_with_prost() {
    let mut spans = sample::spans(1, 11);
    let long = "x".repeat(200);
    let values = [
        Value::I64(0),
        Value::I64(127),
        Value::I64(128),
        Value::I64(-1),
        Value::I64(i64::MIN),
        Value::Bool(true),
        Value::Bool(false),
        Value::F64(-0.5),
        Value::Str("".into()),
        Value::Str("é".into()),
        Value::Str(long.as_str().into()),
        Value::Empty,
        Value::Bytes(vec![]),
    ];
    spans[0].attributes = Attributes::new();
    for (i, v) in values.iter().enumerate() {
        spans[0].attributes.push(format!("k{i}"), v.clone());
    }
    spans[0].attributes.push(long.as_str(), 1i64);
    let bytes = encode_proto(&spans);
    let direct = decode_proto(&bytes).unwrap();
    let req = proto::ExportTraceServiceRequest::decode(bytes.as_slice()).unwrap();
    assert_eq!(direct, from_request(req).unwrap());
    assert_eq!(direct, spans);
}
