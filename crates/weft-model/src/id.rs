//! Trace and span identifiers.
//!
//! * [`TraceId`] is 128 bits, [`SpanId`] 64 bits, both big-endian byte arrays exactly as
//!   OTLP carries them. The all-zero value is *invalid* (OTLP, W3C trace-context and Zipkin
//!   agree on this) and is what "no parent" looks like on the wire.
//! * On text wire formats they are lower-case hex: 32 digits for a trace id, 16 for a span id
//!   (OTLP JSON, Zipkin v2, Jaeger JSON, W3C `traceparent`). Parsing accepts upper case too,
//!   and accepts the 16-digit (64-bit) trace ids Zipkin v1 and BlkKin produced: they are
//!   left-padded with zeros to 128 bits, which is also how Zipkin itself widens them.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};

/// Error for an identifier that is not valid hex of an accepted length.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind}: {reason} (got {got:?})")]
pub struct IdError {
    /// `"trace id"` or `"span id"`.
    pub kind: &'static str,
    /// What is wrong with it.
    pub reason: &'static str,
    /// The offending text (cut to 64 characters).
    pub got: String,
}

fn id_error(kind: &'static str, reason: &'static str, got: &str) -> IdError {
    IdError { kind, reason, got: got.chars().take(64).collect() }
}

fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Decodes `s` (1..=2*N hex digits) right-aligned into N bytes.
fn parse_hex_right<const N: usize>(kind: &'static str, s: &str) -> Result<[u8; N], IdError> {
    let b = s.as_bytes();
    if b.len() == 2 * N {
        // The common case (full-width ids): two digits per byte, left to right.
        let mut out = [0u8; N];
        for (o, pair) in out.iter_mut().zip(b.chunks_exact(2)) {
            match (hex_val(pair[0]), hex_val(pair[1])) {
                (Some(hi), Some(lo)) => *o = (hi << 4) | lo,
                _ => return Err(id_error(kind, "not hex", s)),
            }
        }
        return Ok(out);
    }
    if b.is_empty() {
        return Err(id_error(kind, "empty", s));
    }
    if b.len() > 2 * N {
        return Err(id_error(kind, "too many hex digits", s));
    }
    let mut out = [0u8; N];
    // Walk from the right, two digits per byte.
    let mut i = b.len();
    let mut k = N;
    while i > 0 {
        let lo = hex_val(b[i - 1]).ok_or_else(|| id_error(kind, "not hex", s))?;
        let hi = if i >= 2 { hex_val(b[i - 2]).ok_or_else(|| id_error(kind, "not hex", s))? } else { 0 };
        k -= 1;
        out[k] = (hi << 4) | lo;
        i = i.saturating_sub(2);
    }
    Ok(out)
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn write_hex(f: &mut fmt::Formatter<'_>, bytes: &[u8]) -> fmt::Result {
    let mut buf = [0u8; 32];
    for (i, b) in bytes.iter().enumerate() {
        buf[2 * i] = HEX[(b >> 4) as usize];
        buf[2 * i + 1] = HEX[(b & 0xf) as usize];
    }
    // SAFETY-free: HEX digits are ASCII.
    f.write_str(std::str::from_utf8(&buf[..2 * bytes.len()]).unwrap_or(""))
}

/// A 128-bit trace id. All zero = invalid.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct TraceId(pub [u8; 16]);

/// A 64-bit span id. All zero = invalid / "no span".
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct SpanId(pub [u8; 8]);

impl TraceId {
    /// The invalid (all-zero) trace id.
    pub const INVALID: TraceId = TraceId([0; 16]);

    /// From a big-endian `u128`.
    pub const fn from_u128(v: u128) -> Self {
        TraceId(v.to_be_bytes())
    }
    /// As a big-endian `u128`.
    pub const fn to_u128(self) -> u128 {
        u128::from_be_bytes(self.0)
    }
    /// A 64-bit id widened to 128 bits (high half zero), as Zipkin v1 and BlkKin ids are.
    pub const fn from_u64(v: u64) -> Self {
        TraceId::from_u128(v as u128)
    }
    /// True unless all zero.
    pub fn is_valid(&self) -> bool {
        self.0 != [0; 16]
    }
    /// Parses 1..=32 hex digits (shorter ids are left-padded with zeros).
    pub fn from_hex(s: &str) -> Result<Self, IdError> {
        parse_hex_right::<16>("trace id", s).map(TraceId)
    }
    /// From exactly 16 bytes (OTLP protobuf); any other length is an error.
    pub fn from_bytes(b: &[u8]) -> Result<Self, IdError> {
        <[u8; 16]>::try_from(b)
            .map(TraceId)
            .map_err(|_| id_error("trace id", "must be 16 bytes", &hex::encode(b)))
    }
    /// A fresh random id (never invalid).
    pub fn random() -> Self {
        let hi = next_random();
        let lo = next_random() | 1;
        TraceId::from_u128(((hi as u128) << 64) | lo as u128)
    }
    /// The low 64 bits (what a 64-bit system such as BlkKin would have carried).
    pub fn low_u64(&self) -> u64 {
        self.to_u128() as u64
    }
}

impl SpanId {
    /// The invalid (all-zero) span id.
    pub const INVALID: SpanId = SpanId([0; 8]);

    /// From a big-endian `u64`.
    pub const fn from_u64(v: u64) -> Self {
        SpanId(v.to_be_bytes())
    }
    /// As a big-endian `u64`.
    pub const fn to_u64(self) -> u64 {
        u64::from_be_bytes(self.0)
    }
    /// True unless all zero.
    pub fn is_valid(&self) -> bool {
        self.0 != [0; 8]
    }
    /// Parses 1..=16 hex digits (left-padded with zeros).
    pub fn from_hex(s: &str) -> Result<Self, IdError> {
        parse_hex_right::<8>("span id", s).map(SpanId)
    }
    /// From exactly 8 bytes (OTLP protobuf); any other length is an error.
    pub fn from_bytes(b: &[u8]) -> Result<Self, IdError> {
        <[u8; 8]>::try_from(b)
            .map(SpanId)
            .map_err(|_| id_error("span id", "must be 8 bytes", &hex::encode(b)))
    }
    /// The `n`th span id of a sequence seeded by `seed` (deterministic, never invalid):
    /// spans weft derives from records or other spans get their ids this way.
    pub fn derived(seed: u64, n: u64) -> Self {
        SpanId::from_u64(mix2(seed.rotate_left(17), n))
    }
    /// A fresh random id (never invalid).
    pub fn random() -> Self {
        SpanId::from_u64(next_random() | 1)
    }
}

impl fmt::Display for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_hex(f, &self.0)
    }
}
impl fmt::Debug for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TraceId(")?;
        write_hex(f, &self.0)?;
        f.write_str(")")
    }
}
impl fmt::Display for SpanId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_hex(f, &self.0)
    }
}
impl fmt::Debug for SpanId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SpanId(")?;
        write_hex(f, &self.0)?;
        f.write_str(")")
    }
}
impl FromStr for TraceId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, IdError> {
        TraceId::from_hex(s)
    }
}
impl FromStr for SpanId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, IdError> {
        SpanId::from_hex(s)
    }
}

impl serde::Serialize for TraceId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}
impl<'de> serde::Deserialize<'de> for TraceId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        TraceId::from_hex(&s).map_err(serde::de::Error::custom)
    }
}
impl serde::Serialize for SpanId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}
impl<'de> serde::Deserialize<'de> for SpanId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        SpanId::from_hex(&s).map_err(serde::de::Error::custom)
    }
}

/// Process-wide id generator: splitmix64 over a counter seeded from time, pid and an address.
/// Ids need to be unique and well spread, not cryptographic.
fn next_random() -> u64 {
    static STATE: AtomicU64 = AtomicU64::new(0);
    let s = STATE.load(Ordering::Relaxed);
    if s == 0 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let seed = t ^ ((std::process::id() as u64) << 32) ^ (&STATE as *const _ as u64);
        let _ = STATE.compare_exchange(0, seed | 1, Ordering::Relaxed, Ordering::Relaxed);
    }
    mix64(STATE.fetch_add(SplitMix64::GAMMA, Ordering::Relaxed))
}

/// splitmix64: a fast, well-mixing bijection on u64. Every id weft derives from other ids,
/// seeds or counters (woven spans, kernel spans, probe records) goes through it, so the same
/// input gives the same ids on every run.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(SplitMix64::GAMMA);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A deterministic splitmix64 generator: the same seed gives the same sequence on every
/// platform (for sampling that must be reproducible, not for anything secret).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// The state increment (the golden ratio in 64-bit fixed point).
    pub const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

    /// A generator starting at `seed`.
    pub const fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next value.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let r = mix64(self.0);
        self.0 = self.0.wrapping_add(Self::GAMMA);
        r
    }
}

/// Two values mixed into one well-spread, non-zero u64 (`mix2(seed, n)`: the `n`th id of a
/// seeded sequence).
#[inline]
pub fn mix2(a: u64, b: u64) -> u64 {
    mix64(a ^ b.rotate_left(29)).max(1)
}

/// A hasher for maps keyed by ids weft made or read (span ids, sequential local ids): one
/// multiply, no SipHash (the ids are random or sequential, not keys an attacker picks to
/// collide).
#[derive(Debug, Default, Clone, Copy)]
pub struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(SplitMix64::GAMMA);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0 ^ v).wrapping_mul(SplitMix64::GAMMA).rotate_left(29);
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64)
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64)
    }
}

/// A `HashMap` keyed by ids, hashed with [`IdHasher`].
pub type IdMap<K, V> = std::collections::HashMap<K, V, std::hash::BuildHasherDefault<IdHasher>>;
/// A `HashSet` of ids, hashed with [`IdHasher`].
pub type IdSet<K> = std::collections::HashSet<K, std::hash::BuildHasherDefault<IdHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_and_padding() {
        let t = TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap();
        assert_eq!(t.to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        let short = TraceId::from_hex("a3ce929d0e0e4736").unwrap();
        assert_eq!(short.to_string(), "0000000000000000a3ce929d0e0e4736");
        assert_eq!(short.low_u64(), 0xa3ce929d0e0e4736);
        let odd = SpanId::from_hex("abc").unwrap();
        assert_eq!(odd.to_u64(), 0xabc);
        assert_eq!(SpanId::from_hex("00F067AA0BA902B7").unwrap().to_string(), "00f067aa0ba902b7");
    }

    #[test]
    fn bad_ids_are_errors() {
        assert!(TraceId::from_hex("").is_err());
        assert!(TraceId::from_hex("xyz").is_err());
        assert!(SpanId::from_hex("00000000000000000").is_err());
        assert!(TraceId::from_bytes(&[1, 2, 3]).is_err());
        let e = SpanId::from_hex("zz").unwrap_err();
        assert!(e.to_string().contains("span id"), "{e}");
    }

    #[test]
    fn random_ids_are_valid_and_distinct() {
        let a = SpanId::random();
        let b = SpanId::random();
        assert!(a.is_valid() && b.is_valid());
        assert_ne!(a, b);
        assert!(TraceId::random().is_valid());
    }

    proptest::proptest! {
        #[test]
        fn any_trace_id_round_trips(v: u128) {
            let t = TraceId::from_u128(v);
            proptest::prop_assert_eq!(TraceId::from_hex(&t.to_string()).unwrap(), t);
        }
        #[test]
        fn any_span_id_round_trips(v: u64) {
            let s = SpanId::from_u64(v);
            proptest::prop_assert_eq!(SpanId::from_hex(&s.to_string()).unwrap(), s);
        }
    }
}
