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

/// Whether every byte is printable ASCII (0x20..=0x7f), in one pass the compiler vectorizes.
#[inline]
pub(crate) fn printable_ascii(seg: &[u8]) -> bool {
    seg.iter().fold(true, |ok, &c| ok & (c.wrapping_sub(0x20) < 0x60))
}

/// `seg` as text when it is valid JSON string content without escapes: no control
/// characters, valid UTF-8. Printable ASCII (nearly all of it) is checked word-wise.
#[inline]
fn text(seg: &[u8]) -> Option<&str> {
    if printable_ascii(seg) {
        // SAFETY: every byte is ASCII (0x20..=0x7f), which is valid UTF-8.
        return Some(unsafe { std::str::from_utf8_unchecked(seg) });
    }
    if seg.iter().any(|&c| c < 0x20) {
        return None;
    }
    std::str::from_utf8(seg).ok()
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
        let n = memchr::memchr2(b'"', b'\\', &b[start..])?;
        let first = text(&b[start..start + n])?;
        if b[start + n] == b'"' {
            self.i = start + n + 1;
            return Some(Cow::Borrowed(first));
        }
        // Escaped text is mostly JSON in JSON (event attributes in annotation values).
        let mut out = String::with_capacity(n + 64);
        out.push_str(first);
        let mut j = start + n; // at a backslash
        loop {
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
            j += 2;
            let n = memchr::memchr2(b'"', b'\\', b.get(j..)?)?;
            out.push_str(text(&b[j..j + n])?);
            j += n;
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
