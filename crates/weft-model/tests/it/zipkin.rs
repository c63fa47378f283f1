//! Zipkin: property tests — v2 JSON and proto3 round trips of everything Zipkin carries (whole
//! buffer and streaming), decoders that never panic, truncated documents that always fail.

use proptest::prelude::*;
use weft_model::Span;
use weft_model::codec::stream::{self, Format, WriterOptions};
use weft_model::codec::{Losses, zipkin};

use crate::strategies;

/// Streams `bytes` through the reader of `format` in small batches.
pub fn read_stream(format: Format, bytes: &[u8]) -> Result<Vec<Span>, weft_model::codec::CodecError> {
    let mut r = stream::reader(format, bytes, false)?;
    let mut out = Vec::new();
    while r.next_batch(&mut out, 2)? {}
    Ok(out)
}

/// Streams spans through the writer of `format` in small batches.
pub fn write_stream(format: Format, spans: &[Span]) -> (Vec<u8>, Losses) {
    let mut out = Vec::new();
    let options = WriterOptions { sort_run_spans: 3, ..WriterOptions::default() };
    let mut w = stream::writer(format, &mut out, options).unwrap();
    for c in spans.chunks(2) {
        w.write(c).unwrap();
    }
    let losses = w.finish().unwrap();
    (out, losses)
}

/// Zipkin tags are a map (the proto3 form sorts them): compare attributes by key.
fn by_key(spans: &[Span]) -> Vec<Span> {
    spans
        .iter()
        .cloned()
        .map(|mut s| {
            s.attributes.0.sort_by(|a, b| a.key.cmp(&b.key));
            s
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn v2_json_round_trip(spans in strategies::zipkin_spans()) {
        let mut losses = Losses::default();
        let text = zipkin::encode_v2_json_with(&spans, &mut losses);
        prop_assert!(losses.is_empty(), "{}", losses);
        let back = zipkin::decode_v2_json(&text)
            .map_err(|e| TestCaseError::fail(format!("{e}\n{}", String::from_utf8_lossy(&text))))?;
        prop_assert_eq!(&back, &spans);
        let (streamed, losses) = write_stream(Format::ZipkinV2Json, &spans);
        prop_assert!(losses.is_empty());
        prop_assert_eq!(read_stream(Format::ZipkinV2Json, &streamed).unwrap(), spans);
    }

    #[test]
    fn v2_proto_round_trip(spans in strategies::zipkin_spans()) {
        let mut losses = Losses::default();
        let bytes = zipkin::encode_v2_proto_with(&spans, &mut losses);
        prop_assert!(losses.is_empty(), "{}", losses);
        prop_assert_eq!(by_key(&zipkin::decode_v2_proto(&bytes).unwrap()), by_key(&spans));
        let (streamed, _) = write_stream(Format::ZipkinV2Proto, &spans);
        prop_assert_eq!(by_key(&read_stream(Format::ZipkinV2Proto, &streamed).unwrap()), by_key(&spans));
    }

    #[test]
    fn truncated_v2_json_always_fails(spans in strategies::zipkin_spans(), cut in any::<prop::sample::Index>()) {
        let text = zipkin::encode_v2_json(&spans);
        let cut = cut.index(text.len());
        prop_assert!(zipkin::decode_v2_json(&text[..cut]).is_err() || text[..cut].iter().all(u8::is_ascii_whitespace));
        prop_assert!(zipkin::decode_v2_json_lenient(&text[..cut]).is_err() || cut == 0);
    }

    #[test]
    fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = zipkin::decode_v2_json_lenient(&bytes);
        let _ = zipkin::decode_v2_proto_lenient(&bytes);
        let _ = zipkin::decode_v1_json_lenient(&bytes);
    }

    #[test]
    fn json_decoders_never_panic_on_json_like_text(text in "[\\[\\]{}\":,0-9a-fA-FtrueslnIdpk \\\\-]{0,160}") {
        let _ = zipkin::decode_v2_json(text.as_bytes());
        let _ = zipkin::decode_v1_json(text.as_bytes());
    }
}
