//! Span context and its propagation across RPC boundaries: W3C `traceparent`, B3 (single
//! `b3` header and the multi-header `X-B3-*` form) and BlkKin's packed binary form.

use std::fmt;

/// A span's identity as it travels between processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Context {
    /// 128-bit trace id (non-zero).
    pub trace_id: u128,
    /// The (remote) parent span's id (non-zero).
    pub span_id: u64,
    /// Sampled flag (W3C `01`, B3 `1`).
    pub sampled: bool,
}

/// Why a carrier could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContextError {
    #[error("{format}: wrong length {len} (want {want})")]
    Length { format: &'static str, len: usize, want: &'static str },
    #[error("{format}: field {field} is not lower-case hex: {value:?}")]
    Hex { format: &'static str, field: &'static str, value: String },
    #[error("{format}: field {field} is all zeros")]
    Zero { format: &'static str, field: &'static str },
    #[error("traceparent: unsupported version {0:?}")]
    Version(String),
    #[error("{format}: bad sampling value {value:?}")]
    Sampling { format: &'static str, value: String },
    #[error("{format}: missing {field}")]
    Missing { format: &'static str, field: &'static str },
}

fn hex_field(
    format: &'static str,
    field: &'static str,
    s: &str,
    digits: usize,
) -> Result<u128, ContextError> {
    if s.len() != digits || !s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(ContextError::Hex { format, field, value: s.chars().take(64).collect() });
    }
    u128::from_str_radix(s, 16).map_err(|_| ContextError::Hex { format, field, value: s.to_string() })
}

/// The common case without allocation: version `00`, 55 bytes, lower-case hex, non-zero ids.
/// Anything else goes through the general parser (which names the problem).
fn fast_traceparent(b: &[u8]) -> Option<Context> {
    if b.len() != 55 || &b[..3] != b"00-" || b[35] != b'-' || b[52] != b'-' {
        return None;
    }
    let t = hex_digits(&b[3..35])?;
    let span_id = hex_digits(&b[36..52])? as u64;
    let flags = (hex_digit(b[53])? << 4) | hex_digit(b[54])?;
    (t != 0 && span_id != 0).then_some(Context { trace_id: t, span_id, sampled: flags & 1 != 0 })
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// Eight lower-case hex digits (exactly 8 bytes) to their value, all bytes at once (SWAR);
/// `None` when any byte is not `0-9a-f`. The per-digit loop it replaces cost ~2 ns per digit.
#[inline]
fn hex8(b: &[u8]) -> Option<u32> {
    let x = u64::from_be_bytes(b.try_into().ok()?);
    // Every byte below 0x80, so adding up to 0x50 to a byte never carries into the next one;
    // bit 7 of each byte of `x + k * ONES` then says whether that byte is ≥ 0x80 - k.
    if x & HIGH != 0 {
        return None;
    }
    let ge = |lo: u8| x.wrapping_add((0x80 - lo as u64) * ONES) & HIGH;
    let digit = ge(b'0') & !ge(b'9' + 1);
    let letter = ge(b'a') & !ge(b'f' + 1);
    if (digit | letter) != HIGH {
        return None;
    }
    // Nibble values: the low four bits, plus 9 for letters (bit 6 set: 'a' = 0x61 → 1 + 9).
    let v = (x & (0x0f * ONES)) + ((x >> 6) & ONES) * 9;
    // Bytes n0..n7 (n0 most significant, as written) packed to n0n1…n7.
    let v = (v | (v >> 4)) & 0x00ff_00ff_00ff_00ff;
    let v = (v | (v >> 8)) & 0x0000_ffff_0000_ffff;
    Some(((v | (v >> 16)) & 0xffff_ffff) as u32)
}

/// A multiple of eight lower-case hex digits (at most 32), eight at a time.
#[inline]
fn hex_digits(b: &[u8]) -> Option<u128> {
    b.chunks_exact(8).try_fold(0u128, |v, c| Some((v << 32) | hex8(c)? as u128))
}

/// The low `out.len()` hex digits of `v` (a multiple of eight, at most 32), eight at a time.
#[inline]
fn put_hex_digits(out: &mut [u8], v: u128) {
    let n = out.len() / 8;
    for (i, c) in out.chunks_exact_mut(8).enumerate() {
        put_hex8(c, (v >> (32 * (n - 1 - i))) as u32);
    }
}

/// The eight lower-case hex digits of `v` (most significant first), all at once.
#[inline]
fn put_hex8(out: &mut [u8], v: u32) {
    let x = v as u64;
    let x = ((x << 16) | x) & 0x0000_ffff_0000_ffff;
    let x = ((x << 8) | x) & 0x00ff_00ff_00ff_00ff;
    let x = ((x << 4) | x) & (0x0f * ONES);
    // '0' + n, plus 'a' - '0' - 10 = 0x27 where n ≥ 10 (n + 6 reaches bit 4).
    let letters = ((x + 6 * ONES) >> 4) & ONES;
    out[..8].copy_from_slice(&(x + b'0' as u64 * ONES + letters * 0x27).to_be_bytes());
}

/// B3 accepts upper-case hex too and 16- or 32-digit trace ids.
fn b3_hex(field: &'static str, s: &str, digits: &[usize]) -> Result<u128, ContextError> {
    if !digits.contains(&s.len()) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ContextError::Hex { format: "b3", field, value: s.chars().take(64).collect() });
    }
    u128::from_str_radix(s, 16).map_err(|_| ContextError::Hex { format: "b3", field, value: s.to_string() })
}

impl Context {
    /// W3C trace context: `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`.
    pub fn to_traceparent(&self) -> String {
        let mut b = [0u8; 55];
        let mut s = String::with_capacity(55);
        s.push_str(self.write_traceparent(&mut b));
        s
    }

    /// The `traceparent` value into a caller's buffer (no allocation); returns it as text.
    pub fn write_traceparent<'a>(&self, b: &'a mut [u8; 55]) -> &'a str {
        b[0] = b'0';
        b[1] = b'0';
        b[2] = b'-';
        put_hex_digits(&mut b[3..35], self.trace_id);
        b[35] = b'-';
        put_hex_digits(&mut b[36..52], self.span_id as u128);
        b[52] = b'-';
        b[53] = b'0';
        b[54] = if self.sampled { b'1' } else { b'0' };
        debug_assert!(b.is_ascii());
        // SAFETY: every byte was just written as an ASCII digit, letter a-f or dash (put_hex8
        // writes only 0-9a-f), so the buffer is valid UTF-8.
        unsafe { std::str::from_utf8_unchecked(&b[..]) }
    }

    /// Parse a `traceparent` header value. Version `00` must be exactly 55 characters; a higher
    /// version may carry more fields after the fourth (ignored, as the spec says); `ff` is
    /// invalid.
    pub fn from_traceparent(s: &str) -> Result<Context, ContextError> {
        let s = s.trim();
        match fast_traceparent(s.as_bytes()) {
            Some(c) => Ok(c),
            None => general_traceparent(s),
        }
    }
}

/// The general `traceparent` parser (any version, every error named).
fn general_traceparent(s: &str) -> Result<Context, ContextError> {
    {
        const F: &str = "traceparent";
        let parts: Vec<&str> = s.split('-').collect();
        if parts.len() < 4 {
            return Err(ContextError::Length { format: F, len: s.len(), want: "55" });
        }
        let ver = hex_field(F, "version", parts[0], 2)?;
        if ver == 0xff {
            return Err(ContextError::Version(parts[0].to_string()));
        }
        if ver == 0 && (parts.len() != 4 || s.len() != 55) {
            return Err(ContextError::Length { format: F, len: s.len(), want: "55" });
        }
        let trace_id = hex_field(F, "trace-id", parts[1], 32)?;
        let span_id = hex_field(F, "parent-id", parts[2], 16)? as u64;
        let flags = hex_field(F, "trace-flags", parts[3], 2)? as u8;
        if trace_id == 0 {
            return Err(ContextError::Zero { format: F, field: "trace-id" });
        }
        if span_id == 0 {
            return Err(ContextError::Zero { format: F, field: "parent-id" });
        }
        Ok(Context { trace_id, span_id, sampled: flags & 1 != 0 })
    }
}

impl Context {
    /// B3 single header: `<trace id>-<span id>-<sampled>` (trace id 32 hex digits).
    pub fn to_b3(&self) -> String {
        format!("{:032x}-{:016x}-{}", self.trace_id, self.span_id, if self.sampled { "1" } else { "0" })
    }

    /// Parse a B3 single header (`trace-span[-sampling[-parent]]`, sampling `0|1|d|true|false`;
    /// a bare sampling decision without ids is an error here: there is no context to extract).
    pub fn from_b3(s: &str) -> Result<Context, ContextError> {
        let parts: Vec<&str> = s.trim().split('-').collect();
        if parts.len() < 2 || parts.len() > 4 {
            return Err(ContextError::Missing { format: "b3", field: "trace id and span id" });
        }
        let trace_id = b3_hex("trace id", parts[0], &[16, 32])?;
        let span_id = b3_hex("span id", parts[1], &[16])? as u64;
        let sampled = match parts.get(2) {
            None => true,
            Some(v) => parse_b3_sampled(v)?,
        };
        if let Some(p) = parts.get(3) {
            b3_hex("parent span id", p, &[16])?;
        }
        if trace_id == 0 {
            return Err(ContextError::Zero { format: "b3", field: "trace id" });
        }
        if span_id == 0 {
            return Err(ContextError::Zero { format: "b3", field: "span id" });
        }
        Ok(Context { trace_id, span_id, sampled })
    }

    /// B3 multi-header form: (`X-B3-TraceId`, `X-B3-SpanId`, `X-B3-Sampled`).
    pub fn to_b3_headers(&self) -> [(&'static str, String); 3] {
        [
            ("X-B3-TraceId", format!("{:032x}", self.trace_id)),
            ("X-B3-SpanId", format!("{:016x}", self.span_id)),
            ("X-B3-Sampled", if self.sampled { "1" } else { "0" }.to_string()),
        ]
    }

    /// Extract from B3 multi-headers through a case-insensitive lookup function.
    pub fn from_b3_headers<'a>(get: impl Fn(&str) -> Option<&'a str>) -> Result<Context, ContextError> {
        let trace =
            get("x-b3-traceid").ok_or(ContextError::Missing { format: "b3", field: "X-B3-TraceId" })?;
        let span = get("x-b3-spanid").ok_or(ContextError::Missing { format: "b3", field: "X-B3-SpanId" })?;
        let trace_id = b3_hex("X-B3-TraceId", trace.trim(), &[16, 32])?;
        let span_id = b3_hex("X-B3-SpanId", span.trim(), &[16])? as u64;
        let sampled = match (get("x-b3-flags"), get("x-b3-sampled")) {
            (Some("1"), _) => true,
            (_, Some(v)) => parse_b3_sampled(v.trim())?,
            _ => true,
        };
        if trace_id == 0 || span_id == 0 {
            return Err(ContextError::Zero { format: "b3", field: "X-B3-TraceId/X-B3-SpanId" });
        }
        Ok(Context { trace_id, span_id, sampled })
    }

    /// BlkKin-style binary form: trace id (16 bytes) and span id (8 bytes), big-endian, then a
    /// flags byte (bit 0 = sampled): 25 bytes.
    pub fn to_bytes(&self) -> [u8; 25] {
        let mut b = [0u8; 25];
        b[..16].copy_from_slice(&self.trace_id.to_be_bytes());
        b[16..24].copy_from_slice(&self.span_id.to_be_bytes());
        b[24] = self.sampled as u8;
        b
    }

    /// Parse [`Context::to_bytes`].
    pub fn from_bytes(b: &[u8]) -> Result<Context, ContextError> {
        if b.len() != 25 {
            return Err(ContextError::Length { format: "binary context", len: b.len(), want: "25" });
        }
        let mut t = [0u8; 16];
        t.copy_from_slice(&b[..16]);
        let mut s = [0u8; 8];
        s.copy_from_slice(&b[16..24]);
        let (trace_id, span_id) = (u128::from_be_bytes(t), u64::from_be_bytes(s));
        if trace_id == 0 || span_id == 0 {
            return Err(ContextError::Zero { format: "binary context", field: "trace/span id" });
        }
        Ok(Context { trace_id, span_id, sampled: b[24] & 1 != 0 })
    }
}

fn parse_b3_sampled(v: &str) -> Result<bool, ContextError> {
    match v {
        "1" | "d" | "true" => Ok(true),
        "0" | "false" => Ok(false),
        _ => Err(ContextError::Sampling { format: "b3", value: v.chars().take(16).collect() }),
    }
}

impl fmt::Display for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_traceparent())
    }
}

/// The calling thread's current context (its innermost open span), if any.
pub fn current() -> Option<Context> {
    let (trace, span) = crate::thread::current_ids();
    (trace != 0 && span != 0).then_some(Context { trace_id: trace, span_id: span, sampled: true })
}

/// `traceparent` of the current context (inject into an outgoing request).
pub fn inject_traceparent() -> Option<String> {
    current().map(|c| c.to_traceparent())
}

/// `b3` single header of the current context.
pub fn inject_b3() -> Option<String> {
    current().map(|c| c.to_b3())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn w3c_examples() {
        let c = Context::from_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert_eq!(c.trace_id, 0x4bf92f3577b34da6a3ce929d0e0e4736);
        assert_eq!(c.span_id, 0x00f067aa0ba902b7);
        assert!(c.sampled);
        assert_eq!(c.to_traceparent(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        assert!(
            Context::from_traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01").is_err()
        );
        assert!(
            Context::from_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01").is_err()
        );
        assert!(
            Context::from_traceparent("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").is_err()
        );
        assert!(
            Context::from_traceparent("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01").is_err()
        );
        assert!(
            Context::from_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x").is_err()
        );
        // future version with extra fields
        let c2 = Context::from_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-what")
            .unwrap();
        assert!(!c2.sampled);
    }

    #[test]
    fn b3_examples() {
        let c =
            Context::from_b3("80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1-05e3ac9a4f6e3b90").unwrap();
        assert_eq!(c.trace_id, 0x80f198ee56343ba864fe8b2a57d3eff7);
        assert_eq!(c.span_id, 0xe457b5a2e4d86bd1);
        let short = Context::from_b3("a3ce929d0e0e4736-00f067aa0ba902b7-0").unwrap();
        assert_eq!(short.trace_id, 0xa3ce929d0e0e4736);
        assert!(!short.sampled);
        assert!(Context::from_b3("0").is_err());
        assert!(Context::from_b3("a3ce929d0e0e4736-00f067aa0ba902b7-x").is_err());
        let hs = c.to_b3_headers();
        let got = Context::from_b3_headers(|k| {
            hs.iter().find(|(n, _)| n.eq_ignore_ascii_case(k)).map(|(_, v)| v.as_str())
        })
        .unwrap();
        assert_eq!(got, c);
    }
}

#[cfg(test)]
mod fast_path {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hex8_accepts_exactly_lower_case_hex() {
        assert_eq!(hex8(b"00f067aa"), Some(0x00f067aa));
        assert_eq!(hex8(b"ffffffff"), Some(u32::MAX));
        assert_eq!(hex8(b"01234567"), Some(0x01234567));
        assert_eq!(hex8(b"89abcdef"), Some(0x89abcdef));
        // every byte value in every position: accepted exactly when it is 0-9 or a-f
        for pos in 0..8 {
            for c in 0..=255u8 {
                let mut b = *b"0a0a0a0a";
                b[pos] = c;
                let want = matches!(c, b'0'..=b'9' | b'a'..=b'f');
                assert_eq!(hex8(&b).is_some(), want, "byte {c:#04x} at {pos}");
            }
        }
        let mut out = [0u8; 8];
        put_hex8(&mut out, 0x09af_5e10);
        assert_eq!(&out, b"09af5e10");
    }

    proptest! {
        /// The allocation-free path agrees with the general parser on every 55-byte input it
        /// accepts, and on the writer's output.
        #[test]
        fn fast_and_general_agree(s in "00-[0-9a-fA-F]{32}-[0-9a-f]{16}-[0-9a-f]{2}", t in any::<u128>(), id in any::<u64>(), sampled in any::<bool>()) {
            if let Some(c) = fast_traceparent(s.as_bytes()) {
                prop_assert_eq!(general_traceparent(&s), Ok(c));
            } else {
                prop_assert!(general_traceparent(&s).is_err());
            }
            let c = Context { trace_id: t, span_id: id, sampled };
            let mut b = [0u8; 55];
            let w = c.write_traceparent(&mut b).to_string();
            prop_assert_eq!(&w, &format!("00-{:032x}-{:016x}-{:02x}", t, id, sampled as u8));
            prop_assert_eq!(fast_traceparent(w.as_bytes()), general_traceparent(&w).ok());
        }

        /// Arbitrary bytes in the hex fields (not just hex): the fast path accepts exactly what
        /// the general parser accepts in version 00, with the same result.
        #[test]
        fn fast_path_on_any_bytes(body in proptest::collection::vec(any::<u8>(), 50), swap in any::<bool>()) {
            let mut b = Vec::with_capacity(55);
            b.extend_from_slice(b"00-");
            b.extend_from_slice(&body[..32]);
            b.push(b'-');
            b.extend_from_slice(&body[32..48]);
            b.push(b'-');
            b.extend_from_slice(&body[48..50]);
            if swap {
                // mostly-valid inputs: map every byte onto a hex digit, then break one
                for (i, x) in b.iter_mut().enumerate() {
                    if !matches!(i, 0..=2 | 35 | 52) {
                        *x = b"0123456789abcdef"[(*x & 15) as usize];
                    }
                }
                b[3 + (body[0] as usize % 32)] = body[1];
            }
            let fast = fast_traceparent(&b);
            match std::str::from_utf8(&b) {
                Ok(s) if s.trim() == s => prop_assert_eq!(fast, general_traceparent(s).ok()),
                _ => prop_assert!(fast.is_none()),
            }
        }

        #[test]
        fn hex8_round_trips(v in any::<u32>()) {
            let mut out = [0u8; 8];
            put_hex8(&mut out, v);
            let want = format!("{v:08x}");
            prop_assert_eq!(std::str::from_utf8(&out).ok(), Some(want.as_str()));
            prop_assert_eq!(hex8(&out), Some(v));
        }
    }
}
