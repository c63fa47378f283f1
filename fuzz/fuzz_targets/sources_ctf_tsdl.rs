//! The CTF metadata path: bytes as a metadata file (packetized, magic 0x75D11D57, or TSDL
//! text) → text → lexer → parser → compiler. Must never panic, whatever the input; errors
//! carry a line:column or a byte offset.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::path::Path::new("fuzz/metadata");
    if let Ok(text) = weft_sources::ctf::meta::metadata_text(data, path) {
        match weft_sources::ctf::compile_text(&text, "fuzz") {
            Ok(c) => {
                // A compiled trace has consistent tables.
                for e in &c.events {
                    assert!(e.stream < c.streams.len());
                }
            }
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
});
