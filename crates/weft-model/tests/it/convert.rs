//! Whole-input conversion (what `weft convert` runs): reports, hints on mismatched input,
//! empty, rejected and truncated input, format resolution.

use std::path::Path;

use weft_model::codec::convert::{ConvertOptions, ConvertReport, convert, resolve_input};
use weft_model::codec::stream::Format;
use weft_model::codec::{CodecError, ErrorKind, Position, Rejected, otlp, zipkin};
use weft_synth::sample;

fn run(
    from: Format,
    to: Format,
    input: &[u8],
    options: &ConvertOptions,
) -> Result<(Vec<u8>, ConvertReport), CodecError> {
    let mut out = Vec::new();
    let mut calls = 0;
    let r = convert(from, to, input, &mut out, options, &input[..input.len().min(4096)], |_| calls += 1)?;
    assert!(calls > 0 || r.spans_read == 0);
    Ok((out, r))
}

#[test]
fn converts_and_reports() {
    let spans = sample::spans(300, 4);
    let input = otlp::encode_proto(&spans);
    let options = ConvertOptions { batch_spans: 50, ..ConvertOptions::default() };
    let (out, r) = run(Format::OtlpProto, Format::ZipkinV2Json, &input, &options).unwrap();
    assert_eq!((r.spans_read, r.spans_written, r.rejected.count), (300, 300, 0));
    assert!(r.losses.get(zipkin::LOST_RESOURCE_ATTRS) > 0, "{}", r.losses);
    assert_eq!(zipkin::decode_v2_json(&out).unwrap().len(), 300);
    let (back, r) = run(Format::OtlpProto, Format::OtlpJson, &input, &options).unwrap();
    assert!(r.losses.is_empty());
    assert_eq!(otlp::decode_json(&back).unwrap(), spans);
}

#[test]
fn mismatched_input_fails_with_a_hint() {
    let z = zipkin::encode_v2_json(&sample::spans(3, 1));
    let e = run(Format::OtlpProto, Format::OtlpJson, &z, &ConvertOptions::default()).unwrap_err();
    let text = e.to_string();
    assert!(text.contains("byte 0"), "{text}");
    assert!(text.contains("field resource_spans"), "{text}");
    assert!(text.contains("try --from zipkin"), "{text}");
    let e = run(Format::OtlpJson, Format::OtlpProto, &z, &ConvertOptions::default()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Mismatch);
    assert!(e.to_string().contains("line 1, column 1"), "{e}");
    assert!(e.to_string().contains("try --from zipkin"), "{e}");
}

#[test]
fn empty_and_all_rejected_inputs_fail() {
    let e = run(Format::ZipkinV2Json, Format::OtlpJson, b"", &ConvertOptions::default()).unwrap_err();
    assert!(e.to_string().contains("empty"), "{e}");
    let e = run(Format::ZipkinV2Json, Format::OtlpJson, b"[]", &ConvertOptions::default()).unwrap_err();
    assert!(e.to_string().contains("holds no spans"), "{e}");
    let allow = ConvertOptions { allow_empty: true, ..ConvertOptions::default() };
    let (out, r) = run(Format::ZipkinV2Json, Format::OtlpJson, b"[]", &allow).unwrap();
    assert_eq!(r.spans_read, 0);
    assert!(otlp::decode_json(&out).unwrap().is_empty());
    let bad = br#"[{"traceId":"zz","id":"1"},{"traceId":"1","id":"0"}]"#;
    let e = run(Format::ZipkinV2Json, Format::OtlpJson, bad, &ConvertOptions::default()).unwrap_err();
    assert!(e.to_string().contains("2 refused"), "{e}");
    assert_eq!(e.field, "[0].traceId");
}

#[test]
fn lenient_keeps_good_spans_and_strict_fails() {
    let bad = br#"[{"traceId":"1","id":"1","name":"a"},{"traceId":"zz","id":"2"},{"traceId":"1","id":"3"}]"#;
    let (_, r) = run(Format::ZipkinV2Json, Format::OtlpProto, bad, &ConvertOptions::default()).unwrap();
    assert_eq!((r.spans_read, r.rejected.count), (2, 1));
    assert_eq!(r.rejected.errors().count(), 1);
    let strict = ConvertOptions { lenient: false, ..ConvertOptions::default() };
    let e = run(Format::ZipkinV2Json, Format::OtlpProto, bad, &strict).unwrap_err();
    assert_eq!(e.field, "[1].traceId");
    assert_eq!(e.kind, ErrorKind::InvalidId);
}

#[test]
fn truncated_input_fails_with_offset() {
    let input = otlp::encode_proto(&sample::spans(40, 2));
    let cut = &input[..input.len() - 10];
    let e = run(Format::OtlpProto, Format::OtlpJson, cut, &ConvertOptions::default()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Truncated);
    assert!(matches!(e.position, Position::Offset(_)), "{e}");
}

#[test]
fn resolves_formats() {
    let z = zipkin::encode_v2_json(&sample::spans(2, 1));
    assert_eq!(resolve_input(None, Some(Path::new("x.pb")), &z), Some(Format::ZipkinV2Json));
    assert_eq!(resolve_input(Some(Format::OtlpJson), None, &z), Some(Format::OtlpJson));
    assert_eq!(resolve_input(None, Some(Path::new("x.jsonl")), b""), Some(Format::OtlpJson));
    assert_eq!(resolve_input(None, None, b"garbage"), None);
}

#[test]
fn rejected_keeps_a_few_errors() {
    let mut r = Rejected::default();
    for i in 0..20 {
        r.add(CodecError::new("t", ErrorKind::InvalidId, format!("e{i}")));
    }
    assert_eq!(r.count, 20);
    assert_eq!(r.errors().count(), Rejected::KEPT_ERRORS);
    assert_eq!(r.errors().next().map(|e| e.message.clone()), Some("e0".into()));
}
