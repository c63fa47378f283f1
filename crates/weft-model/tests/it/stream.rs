//! Streaming readers and writers: OTLP and Zipkin in small batches, format detection.

use std::path::Path;

use weft_model::codec::stream::{Format, WriterOptions, reader, writer};
use weft_model::codec::{Losses, otlp, zipkin};
use weft_synth::sample;

fn convert(from: Format, to: Format, input: &[u8], options: WriterOptions) -> (Vec<u8>, Losses, usize) {
    let mut r = reader(from, input, false).unwrap();
    let mut out = Vec::new();
    let mut w = writer(to, &mut out, options).unwrap();
    let mut n = 0;
    let mut batch = Vec::new();
    while r.next_batch(&mut batch, 7).unwrap() {
        n += batch.len();
        w.write(&batch).unwrap();
        batch.clear();
    }
    let losses = w.finish().unwrap();
    (out, losses, n)
}

#[test]
fn otlp_streams_losslessly_in_small_batches() {
    let spans = sample::spans(100, 21);
    let (json, losses, n) =
        convert(Format::OtlpProto, Format::OtlpJson, &otlp::encode_proto(&spans), WriterOptions::default());
    assert_eq!(n, 100);
    assert!(losses.is_empty());
    assert_eq!(otlp::decode_json(&json).unwrap(), spans);
    let (proto, _, _) = convert(Format::OtlpJson, Format::OtlpProto, &json, WriterOptions::default());
    assert_eq!(otlp::decode_proto(&proto).unwrap(), spans);
    let (z, _, _) = convert(Format::OtlpProto, Format::ZipkinV2Json, &proto, WriterOptions::default());
    assert_eq!(zipkin::decode_v2_json(&z).unwrap().len(), 100);
    let (zp, _, _) = convert(Format::ZipkinV2Json, Format::ZipkinV2Proto, &z, WriterOptions::default());
    assert_eq!(Format::detect(&zp), Some(Format::ZipkinV2Proto));
    let (z2, _, _) = convert(Format::ZipkinV2Proto, Format::ZipkinV2Json, &zp, WriterOptions::default());
    assert_eq!(zipkin::decode_v2_json(&z2).unwrap().len(), 100);
}

#[test]
fn detection() {
    let spans = sample::spans(3, 1);
    assert_eq!(Format::detect(&otlp::encode_proto(&spans)), Some(Format::OtlpProto));
    assert_eq!(Format::detect(&zipkin::encode_v2_proto(&spans)), Some(Format::ZipkinV2Proto));
    assert_eq!(Format::detect(&otlp::encode_json(&spans)), Some(Format::OtlpJson));
    assert_eq!(Format::detect(&zipkin::encode_v2_json(&spans)), Some(Format::ZipkinV2Json));
    assert_eq!(
        Format::detect(b" [{\"traceId\":\"1\",\"binaryAnnotations\":[]}]"),
        Some(Format::ZipkinV1Json)
    );
    assert_eq!(Format::detect(b"{\"data\":[{\"traceID\":\"1\"}]}"), Some(Format::JaegerJson));
    assert_eq!(Format::detect(b"garbage"), None);
    assert_eq!(Format::from_path(Path::new("a/x.zipkin.json")), Some(Format::ZipkinV2Json));
    assert_eq!(Format::from_path(Path::new("x.jsonl")), Some(Format::OtlpJson));
    assert_eq!(Format::from_path(Path::new("x.pb")), Some(Format::OtlpProto));
    assert_eq!(Format::from_path(Path::new("x.json")), None);
    for f in Format::ALL {
        assert_eq!(Format::parse(f.cli_name()), Some(f));
    }
}
