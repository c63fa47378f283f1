//! Jaeger JSON decoding of arbitrary bytes: never panics; re-encoding reaches a fixed point
//! after one trip; the streaming reader agrees with the whole-buffer decoder.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_model::codec::jaeger;
use weft_model::codec::stream::Format;

fuzz_target!(|data: &[u8]| {
    let whole = jaeger::decode_json_lenient(data).map(|(s, r)| (s, r.count)).map_err(|e| e.to_string());
    common::stream_agrees(Format::JaegerJson, data, &whole);
    if let Ok((spans, _)) = whole {
        let once = jaeger::encode_json(&spans);
        let back = jaeger::decode_json(&once).expect("weft's own Jaeger JSON decodes");
        assert_eq!(back.len(), spans.len());
        assert_eq!(jaeger::encode_json(&back), once, "Jaeger JSON is not a fixed point");
    }
});

#[path = "model_common.rs"]
mod common;
