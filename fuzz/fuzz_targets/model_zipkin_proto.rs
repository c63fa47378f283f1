//! Zipkin v2 proto3 decoding of arbitrary bytes: never panics; re-encoding reaches a fixed
//! point after one trip; the streaming reader agrees with the whole-buffer decoder.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_model::codec::stream::Format;
use weft_model::codec::zipkin;

fuzz_target!(|data: &[u8]| {
    let whole = zipkin::decode_v2_proto_lenient(data).map(|(s, r)| (s, r.count)).map_err(|e| e.to_string());
    common::stream_agrees(Format::ZipkinV2Proto, data, &whole);
    if let Ok((spans, _)) = whole {
        let once = zipkin::encode_v2_proto(&spans);
        let back = zipkin::decode_v2_proto(&once).expect("weft's own Zipkin proto3 decodes");
        assert_eq!(back.len(), spans.len());
        assert_eq!(zipkin::encode_v2_proto(&back), once, "Zipkin proto3 is not a fixed point");
        zipkin::decode_v2_json(&zipkin::encode_v2_json(&spans)).expect("weft's own Zipkin JSON decodes");
    }
});

#[path = "model_common.rs"]
mod common;
