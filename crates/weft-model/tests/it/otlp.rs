//! OTLP: property tests (round trips through protobuf and JSON).

use proptest::prelude::*;
use weft_model::codec::otlp;

use crate::strategies;

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn proto_round_trip(spans in strategies::spans()) {
        let bytes = otlp::encode_proto(&spans);
        prop_assert_eq!(otlp::decode_proto(&bytes).unwrap(), spans);
    }

    /// The encoder writes prost's canonical bytes for the message it means: prost decodes them
    /// into a request that converts back to the same spans and re-encodes to the same bytes.
    #[test]
    fn proto_encoding_is_prosts(spans in strategies::spans()) {
        use prost::Message;
        let bytes = otlp::encode_proto(&spans);
        let req = otlp::proto::ExportTraceServiceRequest::decode(&bytes[..]).unwrap();
        prop_assert_eq!(&req.encode_to_vec(), &bytes);
        prop_assert_eq!(otlp::from_request(req).unwrap(), spans);
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
