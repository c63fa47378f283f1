//! The CTF stream decoder: arbitrary bytes as a stream file of a fixed trace (the first byte
//! picks one of three metadata: LTTng-UST-like with compact headers, big-endian with large
//! headers, and one with unaligned bit fields, variants and sequences). Decoding, lenient
//! and strict, and the conversion to weft events must never panic, never loop, and report
//! every error at an offset inside the input.
#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use weft_synth::ctf::{Header, SynthOptions, metadata};
use weft_sources::ctf::{Compiled, DecodeOptions, StreamDecoder, compile_text};

const BITS: &str = r#"/* CTF 1.8 */
    typealias integer { size = 8; align = 8; signed = false; } := uint8_t;
    typealias integer { size = 32; align = 8; signed = false; } := uint32_t;
    trace { major = 1; minor = 8; byte_order = le; packet.header := struct { uint32_t magic; uint32_t stream_id; }; };
    clock { name = c; };
    stream { id = 0;
      packet.context := struct { uint32_t content_size; uint32_t packet_size; };
      event.header := struct { enum : uint8_t { a = 0 ... 2, b = 3 } id; variant <id> { struct { integer { size = 27; align = 1; map = clock.c.value; } t; } a; struct { uint32_t id; integer { size = 64; map = clock.c.value; } t; } b; } v; } align(8);
    };
    event { name = "x"; id = 0; fields := struct { uint8_t n; string s; integer { size = 5; align = 1; signed = 1; } bits[n]; floating_point { exp_dig = 11; mant_dig = 53; } d; }; };
    event { name = "y"; id = 1; fields := struct { enum : uint8_t { z = 0, w = 1 ... 255 } k; variant <k> { uint8_t z; string w; } q; struct { uint8_t m; uint32_t a[m]; } nest; }; };
"#;

fn traces() -> &'static [Arc<Compiled>; 3] {
    static T: OnceLock<[Arc<Compiled>; 3]> = OnceLock::new();
    T.get_or_init(|| {
        let compact = SynthOptions { header: Header::Compact, ..SynthOptions::default() };
        let large_be = SynthOptions { header: Header::Large, big_endian: true, ..SynthOptions::default() };
        [
            compile_text(&metadata(&compact), "compact").expect("synth metadata compiles"),
            compile_text(&metadata(&large_be), "large-be").expect("synth metadata compiles"),
            compile_text(BITS, "bits").expect("bits metadata compiles"),
        ]
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else { return };
    let trace = traces()[pick as usize % 3].clone();
    let bytes: Arc<[u8]> = Arc::from(body);
    for strict in [false, true] {
        let opts = DecodeOptions { strict, max_packet_bytes: 1 << 20, ..DecodeOptions::default() };
        let mut d = StreamDecoder::from_bytes(trace.clone(), "fuzz/stream", bytes.clone(), opts);
        let mut n = 0usize;
        loop {
            match d.next_event() {
                Ok(true) => {
                    let _ = d.event().to_event(weft_model::SourceId(0));
                    n += 1;
                    // Every event takes at least one bit.
                    assert!(n <= body.len() * 8 + 1);
                }
                Ok(false) => break,
                Err(e) => {
                    if let Some(off) = e.stream_offset() {
                        assert!(off <= body.len() as u64, "{e}");
                    }
                    break;
                }
            }
        }
    }
});
