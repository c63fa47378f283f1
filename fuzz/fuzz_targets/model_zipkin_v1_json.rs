//! Zipkin v1 JSON (BlkKin) decoding of arbitrary bytes: never panics; what decodes survives
//! OTLP losslessly; the streaming reader agrees with the whole-buffer decoder.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_model::codec::stream::Format;
use weft_model::codec::{otlp, zipkin};

fuzz_target!(|data: &[u8]| {
    let whole = zipkin::decode_v1_json_lenient(data).map(|(s, r)| (s, r.count)).map_err(|e| e.to_string());
    common::stream_agrees(Format::ZipkinV1Json, data, &whole);
    if let Ok((spans, _)) = whole {
        let back = otlp::decode_proto(&otlp::encode_proto(&spans)).expect("weft's own protobuf decodes");
        assert!(common::same(&spans, &back), "OTLP round trip changed v1 spans");
    }
});

#[path = "model_common.rs"]
mod common;
