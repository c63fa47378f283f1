//! The tracefs `format` file parser: the bytes up to the first NUL as a format file, the rest
//! as a tracepoint's raw payload decoded with it. Neither may panic; parse errors name a line
//! of the text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_sources::perf::format::Format;

fuzz_target!(|data: &[u8]| {
    let (text, raw) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let Ok(text) = std::str::from_utf8(text) else { return };
    match Format::parse(text, "fuzz") {
        Ok(f) => {
            let _ = f.decode(raw);
            for field in &f.fields {
                let _ = (field.int(raw), field.chars(raw));
            }
        }
        Err((line, msg)) => assert!(line >= 1 && line <= text.lines().count().max(1) && !msg.is_empty()),
    }
});
