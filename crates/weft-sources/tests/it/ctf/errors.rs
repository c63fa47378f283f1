//! Bad input: corrupt metadata, corrupt packets, truncated streams, unknown field types. Every
//! error names the file and the offset (or line:column); lenient mode counts and goes on.

use std::path::Path;
use std::sync::Arc;

use proptest::prelude::*;
use weft_sources::ctf::{CtfError, CtfReader, CtfTrace, DecodeOptions, StreamDecoder, compile_text};
use weft_synth::ctf::{Header, SynthOptions, metadata, write_trace};

fn strict() -> DecodeOptions {
    DecodeOptions { strict: true, ..Default::default() }
}

fn trace(events: u64, packet_bytes: usize) -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let opts = SynthOptions { events, streams: 1, packet_bytes, header: Header::Large, ..Default::default() };
    let sum = write_trace(tmp.path(), &opts).unwrap();
    let dir = sum.trace_dir;
    (tmp, dir)
}

fn read(dir: &Path, opts: DecodeOptions) -> Result<(u64, weft_sources::ctf::StreamStats), CtfError> {
    let mut r = CtfReader::open(dir, weft_model::SourceId(0), opts)?;
    let mut evs = Vec::new();
    while r.next_batch(&mut evs, 1000)? > 0 {}
    Ok((evs.len() as u64, r.stats()))
}

#[test]
fn truncated_stream_reports_the_packet_and_keeps_what_is_there() {
    let (_tmp, dir) = trace(2000, 4096);
    let stream = dir.join("ch_0");
    let len = std::fs::metadata(&stream).unwrap().len();
    let (all, _) = read(&dir, strict()).unwrap();
    // Cut the last packet in half.
    let f = std::fs::OpenOptions::new().write(true).open(&stream).unwrap();
    f.set_len(len - 2048).unwrap();
    let e = read(&dir, strict()).unwrap_err().to_string();
    assert!(e.contains("ch_0") && e.contains(&format!("packet at byte {}", len - 4096)), "{e}");
    assert!(e.contains("truncated packet: 4096 bytes declared, 2048 in the file"), "{e}");
    let (n, stats) = read(&dir, DecodeOptions::default()).unwrap();
    assert_eq!(stats.errors, 1);
    assert!(n < all && n > all - 200, "events of the cut packet's first half are kept: {n} of {all}");
    assert!(stats.error_samples[0].contains("truncated"));
    // Cut inside a packet header: nothing of that packet can be read.
    f.set_len(len - 4096 + 10).unwrap();
    let e = read(&dir, strict()).unwrap_err().to_string();
    assert!(e.contains("runs past the end"), "{e}");
}

#[test]
fn corrupt_magic_and_event_ids_name_their_offsets() {
    let (_tmp, dir) = trace(3000, 4096);
    let stream = dir.join("ch_0");
    let good = std::fs::read(&stream).unwrap();
    let (all, _) = read(&dir, strict()).unwrap();
    // Second packet: bad magic.
    let mut b = good.clone();
    b[4096] ^= 0xff;
    std::fs::write(&stream, &b).unwrap();
    let e = read(&dir, strict()).unwrap_err().to_string();
    assert!(e.contains("packet at byte 4096") && e.contains("bad packet magic"), "{e}");
    // Lenient: a bad packet header ends the stream (no size to skip by), counted.
    let (n, stats) = read(&dir, DecodeOptions::default()).unwrap();
    assert_eq!(stats.errors, 1);
    assert!(n > 0 && n < all);
    assert!(stats.skipped_bytes >= (good.len() - 4096) as u64);
    // An event id no event class has, in the first event of the third packet (the header
    // starts after the 84-byte packet header and context; its id is a 16-bit LE integer).
    let mut b = good.clone();
    b[8192 + 84] = 0x77;
    b[8192 + 85] = 0x77;
    std::fs::write(&stream, &b).unwrap();
    let e = read(&dir, strict()).unwrap_err();
    let CtfError::Stream { packet, offset, .. } = &e else { panic!("{e}") };
    assert_eq!((*packet, *offset), (8192, 8192 + 84));
    assert!(e.to_string().contains("event id 30583 is not declared"), "{e}");
    // Lenient: the rest of that packet is skipped, the following packets are read.
    let (n, stats) = read(&dir, DecodeOptions::default()).unwrap();
    assert_eq!(stats.errors, 1);
    assert!(n < all && n > all / 2, "{n} of {all}");
    assert!(stats.skipped_bytes > 0);
}

#[test]
fn inconsistent_packet_sizes_are_errors() {
    let (_tmp, dir) = trace(100, 4096);
    let stream = dir.join("ch_0");
    let good = std::fs::read(&stream).unwrap();
    // content_size (bits, u64 at byte 48) larger than packet_size.
    let mut b = good.clone();
    b[48..56].copy_from_slice(&(1u64 << 40).to_le_bytes());
    std::fs::write(&stream, &b).unwrap();
    let e = read(&dir, strict()).unwrap_err().to_string();
    assert!(e.contains("content size") && e.contains("exceeds packet size"), "{e}");
    // A packet larger than the limit.
    let mut b = good.clone();
    b[56..64].copy_from_slice(&(1u64 << 50).to_le_bytes());
    b[48..56].copy_from_slice(&(1u64 << 40).to_le_bytes());
    std::fs::write(&stream, &b).unwrap();
    let e = read(&dir, strict()).unwrap_err().to_string();
    assert!(e.contains("exceeds the limit"), "{e}");
}

#[test]
fn metadata_errors_name_the_file_line_and_column() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let text = metadata(&SynthOptions::default()).replace("string _s;", "strong _s;");
    std::fs::write(dir.join("metadata"), &text).unwrap();
    let e = CtfTrace::open(dir).unwrap_err();
    let CtfError::Metadata { line, col, msg, path } = &e else { panic!("{e}") };
    let want = text.lines().position(|l| l.contains("strong _s")).unwrap() as u32 + 1;
    assert_eq!(*line, want);
    assert_eq!(*col, 3);
    assert!(msg.contains("unknown type 'strong'"), "{msg}");
    assert!(path.ends_with("metadata"));
    // Unknown field type kinds (a 16-bit float) are named too.
    let text = metadata(&SynthOptions::default())
        .replace("exp_dig = 8; mant_dig = 24;", "exp_dig = 5; mant_dig = 11;");
    std::fs::write(dir.join("metadata"), &text).unwrap();
    let e = CtfTrace::open(dir).unwrap_err().to_string();
    assert!(e.contains("exp_dig = 5, mant_dig = 11 is not supported"), "{e}");
    // No trace at all.
    let empty = tempfile::tempdir().unwrap();
    let e = CtfReader::open(empty.path(), weft_model::SourceId(0), strict()).err().unwrap().to_string();
    assert!(e.contains("no CTF trace here"), "{e}");
}

#[test]
fn hostile_sequence_lengths_do_not_allocate() {
    // A sequence whose length field says 2^32 - 1, in a 100-byte stream.
    let md = r#"/* CTF 1.8 */
        typealias integer { size = 32; align = 8; signed = false; } := uint32_t;
        trace { major = 1; minor = 8; byte_order = le; };
        event { name = "e"; fields := struct { uint32_t n; uint32_t s[n]; }; };"#;
    let c = compile_text(md, "m").unwrap();
    let mut bytes = vec![0xffu8; 4];
    bytes.extend([0u8; 96]);
    let mut d = StreamDecoder::from_bytes(c, "s", Arc::from(bytes), strict());
    let e = d.next_event().unwrap_err().to_string();
    assert!(e.contains("field 's': length 4294967295 exceeds the rest"), "{e}");
}

const PROP_MD: &str = r#"/* CTF 1.8 */
    typealias integer { size = 8; align = 8; signed = false; } := uint8_t;
    typealias integer { size = 32; align = 8; signed = false; } := uint32_t;
    trace { major = 1; minor = 8; byte_order = le; packet.header := struct { uint32_t magic; uint32_t stream_id; }; };
    clock { name = c; };
    stream { id = 0;
      packet.context := struct { uint32_t content_size; uint32_t packet_size; };
      event.header := struct { enum : uint8_t { a = 0 ... 2, b = 3 } id; variant <id> { struct { integer { size = 27; align = 1; map = clock.c.value; } t; } a; struct { uint32_t id; integer { size = 64; map = clock.c.value; } t; } b; } v; } align(8);
    };
    event { name = "x"; id = 0; fields := struct { uint8_t n; string s; integer { size = 5; align = 1; signed = 1; } bits[n]; floating_point { exp_dig = 11; mant_dig = 53; } d; }; };
    event { name = "y"; id = 1; fields := struct { enum : uint8_t { z = 0, w = 1 ... 255 } k; variant <k> { uint8_t z; string w; } q; }; };
"#;

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Arbitrary stream bytes behind a valid packet header never panic; every error names a
    /// byte offset inside the stream.
    #[test]
    fn arbitrary_streams_never_panic(body in proptest::collection::vec(any::<u8>(), 0..600), size_hint in any::<u32>()) {
        let c = compile_text(PROP_MD, "m").unwrap();
        let mut bytes = Vec::new();
        bytes.extend(0xC1FC_1FC1u32.to_le_bytes());
        bytes.extend(0u32.to_le_bytes());
        let total = (16 + body.len()) as u32 * 8;
        bytes.extend(if size_hint % 3 == 0 { size_hint } else { total }.to_le_bytes());
        bytes.extend(total.to_le_bytes());
        bytes.extend(&body);
        let len = bytes.len() as u64;
        for strict in [true, false] {
            let mut d = StreamDecoder::from_bytes(c.clone(), "s", Arc::from(bytes.clone()), DecodeOptions { strict, ..Default::default() });
            let mut n = 0;
            loop {
                match d.next_event() {
                    Ok(true) => {
                        n += 1;
                        let _ = d.event().to_event(weft_model::SourceId(0));
                        prop_assert!(n <= body.len() + 1);
                    }
                    Ok(false) => break,
                    Err(e) => {
                        if let Some(off) = e.stream_offset() {
                            prop_assert!(off <= len, "{e}");
                        }
                        break;
                    }
                }
            }
        }
    }

    /// Arbitrary edits of valid TSDL never panic.
    #[test]
    fn mutated_metadata_never_panics(cut in 0usize..2000, insert in "[ -~]{0,12}") {
        let text = metadata(&SynthOptions::default());
        let at = cut.min(text.len());
        let mut t = text[..at].to_owned();
        t.push_str(&insert);
        t.push_str(&text[at..]);
        let _ = compile_text(&t, "m");
    }
}

/// A valid synthetic stream (compact headers, every field kind) and its compiled metadata.
fn valid_stream() -> &'static (Arc<weft_sources::ctf::Compiled>, Vec<u8>) {
    static S: std::sync::OnceLock<(Arc<weft_sources::ctf::Compiled>, Vec<u8>)> = std::sync::OnceLock::new();
    S.get_or_init(|| {
        let tmp = tempfile::tempdir().unwrap();
        let opts = SynthOptions {
            events: 300,
            streams: 1,
            packet_bytes: 2048,
            header: Header::Compact,
            ..Default::default()
        };
        let sum = write_trace(tmp.path(), &opts).unwrap();
        let c = compile_text(&metadata(&opts), "m").unwrap();
        (c, std::fs::read(sum.trace_dir.join("ch_0")).unwrap())
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// A valid stream with a few bytes changed never panics; errors point inside it.
    #[test]
    fn mutated_valid_streams_never_panic(edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8), cut in any::<usize>()) {
        let (c, good) = valid_stream();
        let mut b = good.clone();
        for (at, v) in edits {
            let i = at % b.len();
            b[i] = v;
        }
        if cut % 4 == 0 {
            b.truncate(cut % good.len());
        }
        let len = b.len() as u64;
        for strict in [true, false] {
            let mut d = StreamDecoder::from_bytes(c.clone(), "s", Arc::from(b.clone()), DecodeOptions { strict, ..Default::default() });
            loop {
                match d.next_event() {
                    Ok(true) => {
                        let _ = d.event().to_event(weft_model::SourceId(0));
                    }
                    Ok(false) => break,
                    Err(e) => {
                        if let Some(off) = e.stream_offset() {
                            prop_assert!(off <= len, "{e}");
                        }
                        break;
                    }
                }
            }
            // Every event of this trace takes at least its 32-bit header.
            prop_assert!(d.stats().events <= len / 4 + 1);
        }
    }
}
