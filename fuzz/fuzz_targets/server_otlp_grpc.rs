//! The OTLP/gRPC receiver's path on arbitrary messages: protobuf decode of an
//! `ExportTraceServiceRequest` (what tonic does), lenient conversion, then the store round trip.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use weft_model::codec::otlp::{from_request_lenient, proto::ExportTraceServiceRequest};

fuzz_target!(|data: &[u8]| {
    if let Ok(req) = ExportTraceServiceRequest::decode(data) {
        let (spans, _rejected) = from_request_lenient(req);
        weft_fuzz_common::store_round_trip(&spans);
    }
});

#[path = "common.rs"]
mod weft_fuzz_common;
