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

    #[test]
    fn json_round_trip(spans in strategies::spans()) {
        let text = otlp::encode_json(&spans);
        let back = otlp::decode_json(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{}", String::from_utf8_lossy(&text))))?;
        prop_assert_eq!(back, spans);
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
