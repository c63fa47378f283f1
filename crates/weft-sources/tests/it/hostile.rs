//! Arbitrary bytes into the parsers of untrusted files that have fuzz targets in `fuzz/`: CTF
//! streams (with text sequences and arrays), symbol tables in every format, tracefs `format`
//! files and QEMU logs. None may panic. The fuzz targets search deeper (they need nightly);
//! these run with the tests.

use std::sync::Arc;

use proptest::prelude::*;
use weft_model::SourceId;
use weft_sources::ctf::{DecodeOptions, StreamDecoder, compile_text};
use weft_sources::drive::Driver;
use weft_sources::reader::LineReader;
use weft_sources::sim::qemu::{QEMU_CLOCK, QemuParser};
use weft_sources::symbols::{LoadOptions, SymbolFormat, SymbolTable};

/// Events of text sequences, text arrays and strings, read straight from the stream (no
/// packet header: the file is one packet) or inside packets whose sizes come from the input.
const CTF_TEXT: [&str; 2] = [
    r#"/* CTF 1.8 */
    typealias integer { size = 8; align = 8; signed = false; } := uint8_t;
    typealias integer { size = 8; align = 8; signed = false; encoding = UTF8; } := char_t;
    trace { major = 1; minor = 8; byte_order = le; };
    event { name = "t"; fields := struct { uint8_t n; char_t s[n]; char_t a[4]; string z; }; };
"#,
    r#"/* CTF 1.8 */
    typealias integer { size = 8; align = 8; signed = false; } := uint8_t;
    typealias integer { size = 16; align = 8; signed = false; } := uint16_t;
    typealias integer { size = 8; align = 8; signed = false; encoding = ASCII; } := char_t;
    trace { major = 1; minor = 8; byte_order = be; };
    stream { packet.context := struct { uint16_t content_size; uint16_t packet_size; }; };
    event { name = "t"; fields := struct { uint16_t n; char_t s[n]; uint8_t m; char_t r[m]; }; };
"#,
];

/// Text made of the tokens symbol tables, format files and QEMU logs are made of.
fn tokens() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        "[0-9a-fA-F]{1,17}",
        "0x[0-9a-f]{0,17}",
        "[a-zA-Z_.]{1,8}",
        "[ \t:;@<>/\\[\\]*,+.-]{1,3}",
        Just("\n".to_owned()),
        Just("field:".to_owned()),
        Just("offset:".to_owned()),
        Just("size:".to_owned()),
        Just("__data_loc char[] ".to_owned()),
        Just("Trace 0: ".to_owned()),
        Just("e1000e_core_write ".to_owned()),
        Just("SYMBOL TABLE:\n".to_owned()),
        Just("Symbol table '".to_owned()),
    ];
    proptest::collection::vec(token, 0..60).prop_map(|t| t.concat())
}

fn decode_all(md: &str, bytes: Vec<u8>) {
    let c = compile_text(md, "m").unwrap();
    let bytes: Arc<[u8]> = Arc::from(bytes);
    for strict in [true, false] {
        let opts = DecodeOptions { strict, ..Default::default() };
        let mut d = StreamDecoder::from_bytes(c.clone(), "s", bytes.clone(), opts);
        let mut n = 0;
        loop {
            match d.next_event() {
                Ok(true) => {
                    n += 1;
                    let _ = d.event().to_event(SourceId(0));
                    assert!(n <= bytes.len(), "every event takes at least a byte");
                }
                Ok(false) => break,
                Err(e) => {
                    let off = e.stream_offset().unwrap_or(0);
                    assert!(off <= bytes.len() as u64, "{e}");
                    break;
                }
            }
        }
    }
}

fn symbols(bytes: &[u8], pick: u8) {
    let opts = LoadOptions {
        format: SymbolFormat::ALL[pick as usize % SymbolFormat::ALL.len()],
        offset: u64::from(pick) << 56,
        section: (pick & 0x80 != 0).then(|| ".text".to_owned()),
    };
    if let Ok(t) = SymbolTable::from_bytes(bytes, "p", &opts) {
        assert!(t.symbols().windows(2).all(|w| w[0].addr < w[1].addr));
        for s in t.symbols() {
            assert_eq!(t.exact(s.addr), Some(s));
        }
    }
}

#[cfg(target_os = "linux")]
fn tracefs_format(text: &[u8], raw: &[u8]) {
    use weft_sources::perf::format::Format;
    let text = String::from_utf8_lossy(text);
    match Format::parse(&text, "p") {
        Ok(f) => {
            let _ = f.decode(raw);
            for field in &f.fields {
                let _ = (field.int(raw), field.chars(raw));
            }
        }
        Err((line, msg)) => assert!(line >= 1 && !msg.is_empty()),
    }
}

fn qemu(bytes: &[u8], chunk: usize) {
    let parser = QemuParser::new(SourceId(0), QEMU_CLOCK);
    let mut d = Driver::new(LineReader::with_limits(bytes, chunk, 256), parser, 2);
    let mut out = Vec::new();
    while d.step(&mut out).unwrap() {}
    assert!(out.len() as u64 <= d.stats().lines, "one event per line at most");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn ctf_streams_with_text_never_panic(body in proptest::collection::vec(any::<u8>(), 0..300), which in 0usize..2) {
        decode_all(CTF_TEXT[which], body);
    }

    #[test]
    fn symbol_tables_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400), text in tokens(), pick in any::<u8>()) {
        symbols(&bytes, pick);
        symbols(text.as_bytes(), pick);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn tracefs_formats_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300), text in tokens(), raw in proptest::collection::vec(any::<u8>(), 0..80)) {
        tracefs_format(&bytes, &raw);
        tracefs_format(format!("name: x\nID: 1\nformat:\n{text}").as_bytes(), &raw);
    }

    #[test]
    fn qemu_logs_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600), text in tokens(), chunk in 1usize..64) {
        qemu(&bytes, chunk);
        qemu(text.as_bytes(), chunk);
        let timed = format!("8087@1795303214.725341:{text}\n{text}");
        qemu(timed.as_bytes(), chunk);
    }
}
