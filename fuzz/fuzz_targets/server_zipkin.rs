//! The Zipkin receiver's decode path on arbitrary bodies: gzip (first byte bit 0), JSON or
//! proto3 (bit 1), then the store round trip.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, body)) = data.split_first() else { return };
    let enc = if flags & 1 == 1 { "gzip" } else { "" };
    let Ok(b) = weft_server::ingest::decompress(enc, bytes::Bytes::copy_from_slice(body), 1 << 20) else { return };
    if let Ok((spans, _)) = weft_server::zipkin::decode_body(flags & 2 == 2, &b) {
        weft_fuzz_common::store_round_trip(&spans);
    }
});

#[path = "common.rs"]
mod weft_fuzz_common;
