//! A small, allocation-free JSON text writer shared by the JSON encoders (they write straight
//! from [`crate::Span`]s into a byte buffer, without building a `serde_json::Value` first).

use std::io::Write;

use base64::Engine;

use crate::id::{SpanId, TraceId};

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Appends `s` as a JSON string literal (with quotes), escaping as RFC 8259 requires.
pub(crate) fn str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f => {
                out.extend_from_slice(&bytes[start..i]);
                out.extend_from_slice(b"\\u00");
                out.push(HEX[(b >> 4) as usize]);
                out.push(HEX[(b & 0xf) as usize]);
                start = i + 1;
                continue;
            }
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        out.extend_from_slice(esc);
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Appends `"key":`.
pub(crate) fn key(out: &mut Vec<u8>, k: &str) {
    str(out, k);
    out.push(b':');
}

/// Appends an unsigned integer.
pub(crate) fn u64(out: &mut Vec<u8>, v: u64) {
    let _ = write!(out, "{v}");
}

/// Appends an unsigned integer as a JSON string (proto3 JSON's 64-bit integers).
pub(crate) fn u64_str(out: &mut Vec<u8>, v: u64) {
    let _ = write!(out, "\"{v}\"");
}

/// Appends a signed integer.
pub(crate) fn i64(out: &mut Vec<u8>, v: i64) {
    let _ = write!(out, "{v}");
}

/// Appends a signed integer as a JSON string.
pub(crate) fn i64_str(out: &mut Vec<u8>, v: i64) {
    let _ = write!(out, "\"{v}\"");
}

/// Appends a double: the shortest text that reads back as the same value; NaN and the
/// infinities, which JSON numbers cannot carry, as proto3 JSON's strings `"NaN"`,
/// `"Infinity"`, `"-Infinity"`.
pub(crate) fn f64(out: &mut Vec<u8>, v: f64) {
    if v.is_nan() {
        out.extend_from_slice(b"\"NaN\"");
    } else if v.is_infinite() {
        out.extend_from_slice(if v > 0.0 { b"\"Infinity\"" } else { b"\"-Infinity\"" });
    } else {
        // `{:?}` is the shortest round-trip form and uses an exponent for very large or small
        // magnitudes ("1e-300"), both valid JSON numbers.
        let _ = write!(out, "{v:?}");
    }
}

/// Appends a bool.
pub(crate) fn bool(out: &mut Vec<u8>, v: bool) {
    out.extend_from_slice(if v { b"true" } else { b"false" });
}

pub(crate) fn hex_into(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'"');
    for b in bytes {
        out.push(HEX[(b >> 4) as usize]);
        out.push(HEX[(b & 0xf) as usize]);
    }
    out.push(b'"');
}

/// Appends a trace id as a 32-digit lower-case hex string.
pub(crate) fn trace_id(out: &mut Vec<u8>, t: &TraceId) {
    hex_into(out, &t.0);
}

/// Appends a span id as a 16-digit lower-case hex string.
pub(crate) fn span_id(out: &mut Vec<u8>, s: &SpanId) {
    hex_into(out, &s.0);
}

/// Appends bytes as a standard base64 string (proto3 JSON `bytes`).
pub(crate) fn base64(out: &mut Vec<u8>, b: &[u8]) {
    out.push(b'"');
    let s = base64::engine::general_purpose::STANDARD.encode(b);
    out.extend_from_slice(s.as_bytes());
    out.push(b'"');
}

/// Decodes base64 in the standard or URL-safe alphabet, padded or not (proto3 JSON parsers
/// must accept all four).
pub(crate) fn base64_decode(s: &str) -> Option<Vec<u8>> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    let url = s.contains(['-', '_']);
    let padded = s.ends_with('=');
    match (url, padded) {
        (false, true) => STANDARD.decode(s).ok(),
        (false, false) => STANDARD_NO_PAD.decode(s).ok(),
        (true, true) => URL_SAFE.decode(s).ok(),
        (true, false) => URL_SAFE_NO_PAD.decode(s).ok(),
    }
}

/// Removes a trailing comma (after writing a list of members or elements).
pub(crate) fn trim_comma(out: &mut Vec<u8>) {
    if out.last() == Some(&b',') {
        out.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_escape_like_serde_json() {
        for s in ["plain", "q\"b\\s", "nl\nt\tcr\r", "\u{1}\u{1f}", "ünï€😀", ""] {
            let mut out = Vec::new();
            str(&mut out, s);
            let back: String = serde_json::from_slice(&out).unwrap();
            assert_eq!(back, s);
        }
    }

    #[test]
    fn doubles_round_trip() {
        for v in [0.0, -0.0, 1.0, 0.1, 1e-300, 1e300, f64::MAX, f64::MIN_POSITIVE, -2.5] {
            let mut out = Vec::new();
            f64(&mut out, v);
            let back: f64 = serde_json::from_slice(&out).unwrap();
            assert_eq!(back.to_bits(), v.to_bits(), "{}", String::from_utf8_lossy(&out));
        }
        let mut out = Vec::new();
        f64(&mut out, f64::NEG_INFINITY);
        assert_eq!(out, b"\"-Infinity\"");
    }

    #[test]
    fn base64_variants() {
        assert_eq!(base64_decode("3q2+7w==").unwrap(), vec![0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(base64_decode("3q2-7w").unwrap(), vec![0xde, 0xad, 0xbe, 0xef]);
        assert!(base64_decode("!!").is_none());
    }
}
