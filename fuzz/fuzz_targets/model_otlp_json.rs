//! OTLP/JSON decoding of arbitrary bytes: never panics; what decodes re-encodes (JSON and
//! protobuf) to the same spans; the streaming reader agrees with the whole-buffer decoder.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_model::codec::otlp;
use weft_model::codec::stream::Format;

fuzz_target!(|data: &[u8]| {
    let whole = otlp::decode_json_lenient(data).map(|(s, r)| (s, r.count)).map_err(|e| e.to_string());
    common::stream_agrees(Format::OtlpJson, data, &whole);
    if let Ok((spans, _)) = whole {
        let again = otlp::decode_json(&otlp::encode_json(&spans)).expect("weft's own OTLP/JSON decodes");
        assert!(common::same(&spans, &again), "OTLP/JSON round trip changed the spans");
        let pb = otlp::decode_proto(&otlp::encode_proto(&spans)).expect("weft's own protobuf decodes");
        assert!(common::same(&spans, &pb), "protobuf round trip changed the spans");
    }
});

#[path = "model_common.rs"]
mod common;
