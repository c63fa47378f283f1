//! What every line parser implements, and the byte-level helpers they share.
//!
//! Parsers are hand-written over `&[u8]`: no regex, no allocation per line (names are interned
//! into `Arc<str>` once), `memchr`/`memmem` for searching. A parser owns its state (e.g. the
//! last timestamp for QEMU's untimed lines) and its [`Stamp`] (source id + clock), so the
//! events it emits already carry both the raw timestamp and the converted `time_ns`.

use std::collections::HashMap;
use std::sync::Arc;

use weft_model::{Clock, Event, EventKind, SourceId};

/// The outcome of one line (see [`crate::reject`] for the three buckets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineOutcome {
    /// The line produced events (zero is allowed when events were held back for later).
    Parsed,
    /// The line was recognised and carries no event, for this reason.
    Skipped(&'static str),
    /// The line did not parse, for this reason. Events appended before the rejection (e.g.
    /// a good record glued to a bad one on one physical line) are kept.
    Rejected(&'static str),
}

/// A line-oriented log parser.
pub trait LineParser: Send {
    /// Short format name (`gem5`, `nicbm`, `ns3`, `qemu`).
    fn format(&self) -> &'static str;
    /// Parses one line (without its newline), appending events to `out`.
    fn parse_line(&mut self, line: &[u8], out: &mut Vec<Event>) -> LineOutcome;
    /// End of input: append any events held back. The default holds nothing back.
    fn finish(&mut self, _out: &mut Vec<Event>) {}
}

/// Stamps events with their source and converts raw time through the source's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// The source the events come from.
    pub source: SourceId,
    /// Raw time → ns since the epoch.
    pub clock: Clock,
}

impl Stamp {
    /// A stamp for `source` with `clock`.
    pub fn new(source: SourceId, clock: Clock) -> Self {
        Stamp { source, clock }
    }
    /// An event at raw time `raw`.
    #[inline]
    pub fn event(&self, raw: u64, kind: EventKind) -> Event {
        Event { time_ns: self.clock.to_unix_nanos(raw), raw_time: raw, source: self.source, kind }
    }
}

/// Interns byte strings (symbol names, ns-3 trace source names) into shared `Arc<str>`s.
/// Bounded: past `max` distinct names, new names are allocated each time instead of cached.
///
/// The first [`RECENT`] names cached are also kept in a small array searched linearly before
/// the hash map: formats with a handful of distinct names (ns-3 trace sources) never hash.
#[derive(Debug, Default)]
pub struct Interner {
    recent: Vec<(Box<[u8]>, Arc<str>)>,
    map: HashMap<Box<[u8]>, Arc<str>>,
    max: usize,
}

/// How many names [`Interner`] finds by linear search.
pub const RECENT: usize = 16;

impl Interner {
    /// An interner caching at most `max` distinct names.
    pub fn new(max: usize) -> Self {
        Interner { recent: Vec::new(), map: HashMap::new(), max }
    }
    /// The shared string for `b` (invalid UTF-8 is replaced lossily).
    #[inline]
    pub fn get(&mut self, b: &[u8]) -> Arc<str> {
        if let Some((_, s)) = self.recent.iter().find(|(k, _)| **k == *b) {
            return s.clone();
        }
        self.get_slow(b)
    }
    fn get_slow(&mut self, b: &[u8]) -> Arc<str> {
        if self.recent.len() == RECENT
            && let Some(s) = self.map.get(b)
        {
            return s.clone();
        }
        let s: Arc<str> = Arc::from(String::from_utf8_lossy(b).as_ref());
        if self.recent.len() < RECENT.min(self.max) {
            self.recent.push((b.into(), s.clone()));
        } else if self.recent.len() + self.map.len() < self.max {
            self.map.insert(b.into(), s.clone());
        }
        s
    }
}

/// A forward-only cursor over a line with the small parsing steps every format needs.
/// Each step either consumes input and returns `Some`/`true`, or leaves the cursor where it
/// was and returns `None`/`false`.
#[derive(Debug, Clone, Copy)]
pub struct Cursor<'a> {
    /// The unconsumed rest.
    pub rest: &'a [u8],
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `b`.
    #[inline]
    pub fn new(b: &'a [u8]) -> Self {
        Cursor { rest: b }
    }
    /// True when everything was consumed.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }
    /// The next byte, if any.
    #[inline]
    pub fn peek(&self) -> Option<u8> {
        self.rest.first().copied()
    }
    /// Consumes `lit` if the rest starts with it.
    #[inline]
    pub fn lit(&mut self, lit: &[u8]) -> bool {
        if self.rest.starts_with(lit) {
            self.rest = &self.rest[lit.len()..];
            true
        } else {
            false
        }
    }
    /// Skips spaces and tabs.
    #[inline]
    pub fn spaces(&mut self) {
        let n = self.rest.iter().take_while(|&&b| b == b' ' || b == b'\t').count();
        self.rest = &self.rest[n..];
    }
    /// Consumes `n` bytes (fewer at the end).
    #[inline]
    pub fn skip(&mut self, n: usize) {
        self.rest = &self.rest[n.min(self.rest.len())..];
    }
    /// A decimal `u64` (at least one digit, no overflow).
    #[inline]
    pub fn dec(&mut self) -> Option<u64> {
        let (v, n) = dec_prefix(self.rest)?;
        self.rest = &self.rest[n..];
        Some(v)
    }
    /// A hexadecimal `u64` with an optional `0x`/`0X` prefix (1..=16 digits).
    #[inline]
    pub fn hex(&mut self) -> Option<u64> {
        let (v, n) = hex_prefix(self.rest)?;
        self.rest = &self.rest[n..];
        Some(v)
    }
    /// Hex if `0x`-prefixed, else decimal (C's `strtoul(s, 0, 0)` without octal).
    #[inline]
    pub fn num(&mut self) -> Option<u64> {
        if self.rest.starts_with(b"0x") || self.rest.starts_with(b"0X") { self.hex() } else { self.dec() }
    }
    /// The bytes up to (not including) the next space or tab, or to the end.
    #[inline]
    pub fn token(&mut self) -> &'a [u8] {
        let n = memchr::memchr2(b' ', b'\t', self.rest).unwrap_or(self.rest.len());
        let t = &self.rest[..n];
        self.rest = &self.rest[n..];
        t
    }
    /// The bytes up to the next `b` (consumed, not returned); `None` if `b` does not occur.
    #[inline]
    pub fn until(&mut self, b: u8) -> Option<&'a [u8]> {
        let i = memchr::memchr(b, self.rest)?;
        let t = &self.rest[..i];
        self.rest = &self.rest[i + 1..];
        Some(t)
    }
    /// Moves just past the next occurrence of `needle`; `false` (and no move) if absent.
    #[inline]
    pub fn past(&mut self, needle: &[u8]) -> bool {
        match memchr::memmem::find(self.rest, needle) {
            Some(i) => {
                self.rest = &self.rest[i + needle.len()..];
                true
            }
            None => false,
        }
    }
    /// [`Cursor::past`] with a prebuilt searcher (no searcher set-up per call).
    #[inline]
    pub fn past_with(&mut self, finder: &memchr::memmem::Finder<'_>) -> bool {
        match finder.find(self.rest) {
            Some(i) => {
                self.rest = &self.rest[i + finder.needle().len()..];
                true
            }
            None => false,
        }
    }
    /// `lit` followed by a number read with `f`, e.g. `c.field(b"addr ", Cursor::hex)`.
    #[inline]
    pub fn field(&mut self, lit: &[u8], f: impl FnOnce(&mut Self) -> Option<u64>) -> Option<u64> {
        let save = *self;
        if self.lit(lit)
            && let Some(v) = f(self)
        {
            return Some(v);
        }
        *self = save;
        None
    }
}

/// Decimal digits at the start of `b`: (value, digits used). `None` without a digit or on
/// overflow.
#[inline]
pub fn dec_prefix(b: &[u8]) -> Option<(u64, usize)> {
    let mut v: u64 = 0;
    let mut n = 0;
    // Up to 19 digits cannot overflow a u64: no checks on that (usual) path.
    let fast = b.len().min(19);
    while n < fast {
        let d = b[n].wrapping_sub(b'0');
        if d > 9 {
            return if n == 0 { None } else { Some((v, n)) };
        }
        v = v * 10 + d as u64;
        n += 1;
    }
    while n < b.len() {
        let d = b[n].wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        v = v.checked_mul(10)?.checked_add(d as u64)?;
        n += 1;
    }
    if n == 0 { None } else { Some((v, n)) }
}

/// Hex digit values, 0xff for bytes that are not hex digits.
static HEX: [u8; 256] = {
    let mut t = [0xffu8; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        t[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    t
};

#[inline]
fn hex_digit(b: u8) -> Option<u8> {
    let d = HEX[b as usize];
    if d == 0xff { None } else { Some(d) }
}

/// The value of a hex digit (`0-9a-fA-F`), `None` for any other byte.
#[inline]
pub fn hex_value(b: u8) -> Option<u8> {
    hex_digit(b)
}

/// Hex digits (optional `0x`) at the start of `b`: (value, bytes used). `None` without a
/// digit or with more than 16 significant digits.
#[inline]
pub fn hex_prefix(b: &[u8]) -> Option<(u64, usize)> {
    let skip = if b.len() >= 2 && b[0] == b'0' && (b[1] == b'x' || b[1] == b'X') { 2 } else { 0 };
    let mut v: u64 = 0;
    let mut n = skip;
    while n < b.len() {
        let Some(d) = hex_digit(b[n]) else { break };
        if v >> 60 != 0 {
            return None;
        }
        v = (v << 4) | d as u64;
        n += 1;
    }
    if n == skip { None } else { Some((v, n)) }
}

/// `b` without trailing spaces, tabs and `\r`.
#[inline]
pub fn trim_end(b: &[u8]) -> &[u8] {
    let n = b.iter().rposition(|&c| c != b' ' && c != b'\t' && c != b'\r').map(|i| i + 1).unwrap_or(0);
    &b[..n]
}

/// True when `b` holds only spaces/tabs.
#[inline]
pub fn is_blank(b: &[u8]) -> bool {
    b.iter().all(|&c| c == b' ' || c == b'\t' || c == b'\r')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert_eq!(dec_prefix(b"123abc"), Some((123, 3)));
        assert_eq!(dec_prefix(b"18446744073709551615"), Some((u64::MAX, 20)));
        assert_eq!(dec_prefix(b"18446744073709551616"), None);
        assert_eq!(dec_prefix(b"x"), None);
        assert_eq!(hex_prefix(b"0xffffffff81c00080/"), Some((0xffff_ffff_81c0_0080, 18)));
        assert_eq!(hex_prefix(b"2368c6000 "), Some((0x2368c6000, 9)));
        assert_eq!(hex_prefix(b"0x"), None);
        assert_eq!(hex_prefix(b"1ffffffffffffffff"), None);
        let mut c = Cursor::new(b"addr c0080300 size 4 id 9");
        assert_eq!(c.field(b"addr ", Cursor::hex), Some(0xc008_0300));
        assert_eq!(c.field(b"id ", Cursor::dec), None, "no move on mismatch");
        c.spaces();
        assert_eq!(c.field(b"size ", Cursor::hex), Some(4));
        assert_eq!(Cursor::new(b"0x10").num(), Some(16));
        assert_eq!(Cursor::new(b"10").num(), Some(10));
        assert_eq!(trim_end(b"ab \t\r"), b"ab");
    }

    proptest::proptest! {
        #[test]
        fn numbers_match_std(digits in "[0-9]{0,24}", hex in "[0-9a-fA-F]{0,20}", tail in "[ x:g]{0,2}") {
            let d = format!("{digits}{tail}");
            let want = (!digits.is_empty()).then(|| digits.parse::<u64>().ok().map(|v| (v, digits.len()))).flatten();
            let got = dec_prefix(d.as_bytes());
            if digits.is_empty() || want.is_some() {
                proptest::prop_assert_eq!(got, want);
            } else {
                proptest::prop_assert_eq!(got, None, "overflow");
            }
            let h = format!("0x{hex}{tail}");
            let sig = hex.len();
            let want = if hex.is_empty() || sig > 16 && u64::from_str_radix(&hex, 16).is_err() {
                None
            } else {
                u64::from_str_radix(&hex, 16).ok().map(|v| (v, 2 + sig))
            };
            proptest::prop_assert_eq!(hex_prefix(h.as_bytes()), want);
        }
    }

    #[test]
    fn interner_is_bounded() {
        let mut i = Interner::new(1);
        let a = i.get(b"a");
        assert!(Arc::ptr_eq(&a, &i.get(b"a")));
        let b1 = i.get(b"b");
        let b2 = i.get(b"b");
        assert_eq!(b1, b2);
        assert!(!Arc::ptr_eq(&b1, &b2), "not cached past the bound");
    }
}
