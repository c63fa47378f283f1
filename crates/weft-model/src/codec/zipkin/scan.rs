//! A hand-written scanner for Zipkin v2 JSON spans of the usual shape — the fast path of the
//! v2 decoder (serde's generic machinery costs more than the spans' own bytes).
//!
//! It reads exactly the fields serde's [`super::v2`] path reads, into the same `JSpan` (so the
//! checks and the conversion are shared), and it gives up (`None`) on anything unusual: an
//! unknown or repeated field, `null`, a tag that is not a string, a number that is not a
//! plain non-negative integer, a `\u` escape, a control character, malformed JSON. The caller
//! then decodes the same bytes through serde, which accepts, rejects or reports them as it
//! always did; the scanner only ever answers what serde would.

use std::borrow::Cow;

use super::Interner;
use super::v2::{JAnnotation, JEndpoint, JSpan, Tags};
use crate::codec::otlp::json::Num;
use crate::span::Span;
use crate::value::Str;

/// Decodes a whole document that is one array of spans; `None` when serde must do it.
pub(crate) fn decode(bytes: &[u8]) -> Option<Vec<Span>> {
    let mut p = P { b: bytes, i: 0 };
    if !p.eat(b'[') {
        return None;
    }
    let mut interner = Interner::default();
    // Spans take hundreds of bytes of JSON: this is about right (growing copies big spans).
    let mut out = Vec::with_capacity((bytes.len() / 700).clamp(16, 1 << 16));
    if !p.eat(b']') {
        loop {
            let z = p.span()?.into_zipkin().ok()?;
            out.push(super::to_span(z, &mut interner));
            if p.eat(b',') {
                continue;
            }
            if p.eat(b']') {
                break;
            }
            return None;
        }
    }
    p.end().then_some(out)
}

/// Decodes one span object (an element of the streaming reader); `None` when serde must.
pub(crate) fn element(bytes: &[u8]) -> Option<JSpan<'_>> {
    let mut p = P { b: bytes, i: 0 };
    let j = p.span()?;
    p.end().then_some(j)
}

/// The first byte at or after `from` that ends a run of plain string content — `"`, `\` or
/// a control character — and whether the run has a non-ASCII byte (then it needs a UTF-8
/// check). Eight bytes at a time: for each of the three tests, the lowest flagged byte is
/// exact (a borrow only flags bytes above a true hit), so the lowest flag of all is the
/// first special byte.
pub(crate) fn find_special(b: &[u8], from: usize) -> Option<(usize, bool)> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let zero = |x: u64| x.wrapping_sub(LO) & !x;
    let mut i = from;
    let mut high = 0u64;
    while let Some(chunk) = b.get(i..i + 8) {
        let w = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
        let m =
            (zero(w ^ (LO * b'"' as u64)) | zero(w ^ (LO * b'\\' as u64)) | (w.wrapping_sub(LO * 0x20) & !w))
                & HI;
        if m != 0 {
            let k = m.trailing_zeros() / 8;
            high |= w & HI & ((1u64 << (8 * k)) - 1);
            return Some((i + k as usize, high != 0));
        }
        high |= w & HI;
        i += 8;
    }
    while let Some(&c) = b.get(i) {
        if c == b'"' || c == b'\\' || c < 0x20 {
            return Some((i, high != 0));
        }
        high |= u64::from(c & 0x80);
        i += 1;
    }
    None
}

/// The plain run `b[from..]` up to its special byte, as text, and where it ends; `None` when
/// the string is unterminated, has a control character or is not UTF-8.
#[inline]
fn run(b: &[u8], from: usize) -> Option<(&str, usize)> {
    let (end, non_ascii) = find_special(b, from)?;
    if b[end] < 0x20 {
        return None;
    }
    let seg = &b[from..end];
    let s = if non_ascii {
        std::str::from_utf8(seg).ok()?
    } else {
        // SAFETY: `find_special` saw no byte with the high bit set: ASCII, valid UTF-8.
        unsafe { std::str::from_utf8_unchecked(seg) }
    };
    Some((s, end))
}

/// A [`Str`] of a decoded string (a short owned one is copied inline, a long one keeps its
/// buffer).
fn to_str(c: Cow<'_, str>) -> Str {
    match c {
        Cow::Borrowed(s) => Str::new(s),
        Cow::Owned(s) if s.len() <= crate::value::STR_INLINE => Str::new(&s),
        Cow::Owned(s) => Str::from(s),
    }
}

struct P<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> P<'a> {
    #[inline]
    fn ws(&mut self) {
        while let Some(&c) = self.b.get(self.i)
            && matches!(c, b' ' | b'\n' | b'\r' | b'\t')
        {
            self.i += 1;
        }
    }

    #[inline]
    fn eat(&mut self, c: u8) -> bool {
        self.ws();
        if self.b.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    /// Only whitespace is left.
    fn end(&mut self) -> bool {
        self.ws();
        self.i == self.b.len()
    }

    /// A string, borrowed from the input when it has no escapes.
    fn str(&mut self) -> Option<Cow<'a, str>> {
        if !self.eat(b'"') {
            return None;
        }
        let b: &'a [u8] = self.b;
        let start = self.i;
        let (first, mut j) = run(b, start)?;
        if b[j] == b'"' {
            self.i = j + 1;
            return Some(Cow::Borrowed(first));
        }
        // Escaped text is mostly JSON in JSON (event attributes in annotation values).
        let mut out = String::with_capacity(j - start + 64);
        out.push_str(first);
        loop {
            // at a backslash
            out.push(match *b.get(j + 1)? {
                b'"' => '"',
                b'\\' => '\\',
                b'/' => '/',
                b'n' => '\n',
                b't' => '\t',
                b'r' => '\r',
                b'b' => '\u{8}',
                b'f' => '\u{c}',
                _ => return None,
            });
            let (more, end) = run(b, j + 2)?;
            out.push_str(more);
            j = end;
            if b[j] == b'"' {
                self.i = j + 1;
                return Some(Cow::Owned(out));
            }
        }
    }

    /// A plain non-negative integer (no sign, fraction, exponent or leading zero).
    fn u64(&mut self) -> Option<u64> {
        self.ws();
        let b = self.b;
        let start = self.i;
        let mut v: u64 = 0;
        while let Some(&c) = b.get(self.i)
            && c.is_ascii_digit()
        {
            v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
            self.i += 1;
        }
        let len = self.i - start;
        if len == 0 || (len > 1 && b[start] == b'0') || matches!(b.get(self.i), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        Some(v)
    }

    fn bool(&mut self) -> Option<bool> {
        self.ws();
        let rest = self.b.get(self.i..)?;
        if rest.starts_with(b"true") {
            self.i += 4;
            Some(true)
        } else if rest.starts_with(b"false") {
            self.i += 5;
            Some(false)
        } else {
            None
        }
    }

    /// `{` … `}` with `field` called on each key (after its `:`).
    fn object(&mut self, mut field: impl FnMut(&mut Self, Cow<'a, str>) -> Option<()>) -> Option<()> {
        if !self.eat(b'{') {
            return None;
        }
        if self.eat(b'}') {
            return Some(());
        }
        loop {
            let k = self.str()?;
            if !self.eat(b':') {
                return None;
            }
            field(self, k)?;
            if self.eat(b',') {
                continue;
            }
            return self.eat(b'}').then_some(());
        }
    }

    fn endpoint(&mut self) -> Option<JEndpoint> {
        let mut e = JEndpoint::default();
        self.object(|p, k| {
            match &*k {
                "serviceName" if e.service_name.is_none() => e.service_name = Some(to_str(p.str()?)),
                "ipv4" if e.ipv4.is_none() => e.ipv4 = Some(to_str(p.str()?)),
                "ipv6" if e.ipv6.is_none() => e.ipv6 = Some(to_str(p.str()?)),
                "port" if e.port.is_none() => e.port = Some(i64::try_from(p.u64()?).ok()?),
                _ => return None,
            }
            Some(())
        })?;
        Some(e)
    }

    fn annotations(&mut self) -> Option<Vec<JAnnotation>> {
        if !self.eat(b'[') {
            return None;
        }
        let mut out = Vec::with_capacity(4);
        if self.eat(b']') {
            return Some(out);
        }
        loop {
            let mut a = JAnnotation { timestamp: None, value: None };
            self.object(|p, k| {
                match &*k {
                    "timestamp" if a.timestamp.is_none() => a.timestamp = Some(Num(p.u64()?)),
                    "value" if a.value.is_none() => a.value = Some(to_str(p.str()?)),
                    _ => return None,
                }
                Some(())
            })?;
            out.push(a);
            if self.eat(b',') {
                continue;
            }
            return self.eat(b']').then_some(out);
        }
    }

    fn tags(&mut self) -> Option<Tags> {
        let mut out = Vec::with_capacity(16);
        self.object(|p, k| {
            let key = crate::value::key(&k);
            out.push((key, to_str(p.str()?)));
            Some(())
        })?;
        Some(Tags(out))
    }

    fn span(&mut self) -> Option<JSpan<'a>> {
        let mut j = JSpan::default();
        self.object(|p, k| {
            match &*k {
                "traceId" if j.trace_id.is_none() => j.trace_id = Some(p.str()?),
                "id" if j.id.is_none() => j.id = Some(p.str()?),
                "parentId" if j.parent_id.is_none() => j.parent_id = Some(p.str()?),
                "name" if j.name.is_none() => j.name = Some(to_str(p.str()?)),
                "kind" if j.kind.is_none() => j.kind = Some(p.str()?),
                "timestamp" if j.timestamp.is_none() => j.timestamp = Some(Num(p.u64()?)),
                "duration" if j.duration.is_none() => j.duration = Some(Num(p.u64()?)),
                "localEndpoint" if j.local_endpoint.is_none() => j.local_endpoint = Some(p.endpoint()?),
                "remoteEndpoint" if j.remote_endpoint.is_none() => j.remote_endpoint = Some(p.endpoint()?),
                "annotations" if j.annotations.is_none() => j.annotations = Some(p.annotations()?),
                "tags" if j.tags.is_none() => j.tags = Some(p.tags()?),
                "debug" if j.debug.is_none() => j.debug = Some(p.bool()?),
                "shared" if j.shared.is_none() => j.shared = Some(p.bool()?),
                _ => return None,
            }
            Some(())
        })?;
        Some(j)
    }
}
