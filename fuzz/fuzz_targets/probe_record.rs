//! What an agent reads from an instrumented process's segment or a capture file: arbitrary
//! bytes must decode to an error, never a panic; a record that decodes re-encodes to bytes that
//! decode to the same record (compared through a second encoding: NaN ≠ NaN).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;
use weft_probe::capture::{Capture, encode_record};
use weft_probe::consumer::{decode_record, decode_registry};

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = decode_record(data) {
        let (mut once, mut twice) = (Vec::new(), Vec::new());
        encode_record(&r, &mut once);
        let again = decode_record(&once).expect("a re-encoded record decodes");
        encode_record(&again, &mut twice);
        assert_eq!(once, twice);
    }
    let _ = decode_registry(data);
    if let Ok(c) = Capture::parse(data, Path::new("<fuzz>")) {
        for r in c.records() {
            let _ = r;
        }
    }
});
