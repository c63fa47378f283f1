//! The OTLP/HTTP receiver's decode path on arbitrary bodies: Content-Encoding (first byte:
//! bit 0 = gzip, bit 1 = deflate), OTLP protobuf or JSON (bit 2), then what the store does
//! with accepted spans (Arrow batches, WAL record) — which must round-trip exactly.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, body)) = data.split_first() else { return };
    let enc = match flags & 3 {
        1 => "gzip",
        2 => "deflate",
        _ => "",
    };
    let Ok(b) = weft_server::ingest::decompress(enc, bytes::Bytes::copy_from_slice(body), 1 << 20) else { return };
    if let Ok((spans, _rejected)) = weft_server::otlp::decode_http(flags & 4 == 0, &b) {
        weft_fuzz_common::store_round_trip(&spans);
    }
});

#[path = "common.rs"]
mod weft_fuzz_common;
