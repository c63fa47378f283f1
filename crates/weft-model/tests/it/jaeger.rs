//! Jaeger JSON: property tests — round trips of everything Jaeger carries (whole buffer, and
//! streaming through the external sort with spilled runs), decoders that never panic,
//! truncated documents that always fail.

use proptest::prelude::*;
use weft_model::Span;
use weft_model::codec::stream::Format;
use weft_model::codec::{Losses, jaeger};

use crate::strategies;
use crate::zipkin::{read_stream, write_stream};

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
