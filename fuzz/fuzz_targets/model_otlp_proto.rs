//! OTLP protobuf decoding of arbitrary bytes: never panics; agrees with the reference path
//! (prost into the generated types, then `from_request_lenient`) — whatever weft's direct
//! decoder accepts prost accepts too, with the same spans and refusals; what decodes
//! re-encodes to the same spans; the streaming reader agrees with the whole-buffer decoder.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use weft_model::codec::otlp;
use weft_model::codec::stream::Format;

fuzz_target!(|data: &[u8]| {
    let whole = otlp::decode_proto_lenient(data).map(|(s, r)| (s, r.count)).map_err(|e| e.to_string());
    common::stream_agrees(Format::OtlpProto, data, &whole);
    if let Ok((spans, rejected)) = &whole {
        // weft's top-level walker is stricter than prost about (deprecated) groups only, so
        // the reference must accept whatever weft accepted.
        let req = otlp::proto::ExportTraceServiceRequest::decode(data).expect("prost accepts what weft accepted");
        let (reference, ref_rejected) = otlp::from_request_lenient(req);
        assert!(common::same(spans, &reference), "direct and prost decoders disagree");
        assert_eq!(*rejected, ref_rejected.count, "refused counts differ");
        let again = otlp::decode_proto(&otlp::encode_proto(spans)).expect("weft's own protobuf decodes");
        assert!(common::same(spans, &again), "protobuf round trip changed the spans");
        let json = otlp::decode_json(&otlp::encode_json(spans)).expect("weft's own OTLP/JSON decodes");
        assert!(common::same(spans, &json), "OTLP/JSON round trip changed the spans");
    }
});

#[path = "model_common.rs"]
mod common;
