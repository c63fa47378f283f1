//! Zipkin v2 JSON decoding of arbitrary bytes: never panics; re-encoding reaches a fixed
//! point after one trip (Zipkin's form is weft's normal form); the streaming reader agrees.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_model::codec::stream::Format;
use weft_model::codec::zipkin;

fuzz_target!(|data: &[u8]| {
    let whole = zipkin::decode_v2_json_lenient(data).map(|(s, r)| (s, r.count)).map_err(|e| e.to_string());
    common::stream_agrees(Format::ZipkinV2Json, data, &whole);
    if let Ok((spans, _)) = whole {
        let once = zipkin::encode_v2_json(&spans);
        let back = zipkin::decode_v2_json(&once).expect("weft's own Zipkin JSON decodes");
        assert_eq!(back.len(), spans.len());
        assert_eq!(zipkin::encode_v2_json(&back), once, "Zipkin JSON is not a fixed point");
        zipkin::decode_v2_proto(&zipkin::encode_v2_proto(&spans)).expect("weft's own Zipkin proto3 decodes");
    }
});

#[path = "model_common.rs"]
mod common;
