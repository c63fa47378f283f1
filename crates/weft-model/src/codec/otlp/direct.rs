//! Direct OTLP protobuf decoding: from the wire straight into weft's [`Span`]s, without
//! building the generated `opentelemetry-proto` messages first (which cost a second set of
//! vectors and a conversion pass; see the decode benchmark).
//!
//! It follows protobuf's rules as prost applies them, so both decoders agree on every input
//! (a fuzz target checks this against the prost path): fields in any order, unknown fields
//! skipped (groups included), a repeated occurrence of a singular message merged into the
//! first, the last occurrence of a scalar winning, strings checked for UTF-8, wire types
//! checked, nesting limited to 100 levels.

use std::sync::Arc;

use super::{PROTO, parent_from_bytes, span_id_from_bytes, split_relation, trace_id_from_bytes};
use crate::codec::error::{CodecError, ErrorKind, Position, Sink};
use crate::span::{Link, Resource, Scope, Span, SpanEvent, SpanKind, Status, StatusCode};
use crate::value::{Attributes, KeyValue, Str, Value};

const MAX_DEPTH: u32 = 100;

/// A wire error inside the `ResourceSpans` element at `base`: boxed, so that the decoders'
/// `Result`s stay small (they are returned on every field).
struct WireError(Box<WireErrorAt>);

struct WireErrorAt {
    at: usize,
    msg: String,
}

impl WireError {
    #[cold]
    fn new(at: usize, msg: impl Into<String>) -> Self {
        WireError(Box::new(WireErrorAt { at, msg: msg.into() }))
    }
}

type W<T> = Result<T, WireError>;

struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(b: &'a [u8]) -> Self {
        Cursor { b, pos: 0 }
    }
    #[inline]
    fn done(&self) -> bool {
        self.pos >= self.b.len()
    }
    #[cold]
    fn err<T>(&self, msg: impl Into<String>) -> W<T> {
        Err(WireError::new(self.pos, msg))
    }
    #[inline]
    fn varint(&mut self) -> W<u64> {
        // One-byte varints (field keys, small lengths) are most of them.
        if let Some(&b) = self.b.get(self.pos)
            && b < 0x80
        {
            self.pos += 1;
            return Ok(u64::from(b));
        }
        let start = self.pos;
        match super::wire::read_varint(self.b, &mut self.pos) {
            Some(v) => Ok(v),
            None => {
                self.pos = start;
                self.err("invalid varint")
            }
        }
    }
    /// The next field's number and wire type.
    #[inline]
    fn key(&mut self) -> W<(u32, u8)> {
        let k = self.varint()?;
        if k > u32::MAX as u64 {
            return self.err(format!("invalid key value: {k}"));
        }
        let (field, wire) = ((k >> 3) as u32, (k & 7) as u8);
        if field == 0 {
            return self.err("invalid field number 0");
        }
        Ok((field, wire))
    }
    #[inline]
    fn bytes(&mut self) -> W<&'a [u8]> {
        let len = self.varint()?;
        if len > (self.b.len() - self.pos) as u64 {
            return self.err("buffer underflow (a length runs past the end)");
        }
        let s = &self.b[self.pos..self.pos + len as usize];
        self.pos += len as usize;
        Ok(s)
    }
    #[inline]
    fn fixed64(&mut self) -> W<u64> {
        match self.b.get(self.pos..self.pos + 8) {
            Some(s) => {
                self.pos += 8;
                Ok(u64::from_le_bytes(s.try_into().unwrap_or([0; 8])))
            }
            None => self.err("buffer underflow (fixed64)"),
        }
    }
    #[inline]
    fn fixed32(&mut self) -> W<u32> {
        match self.b.get(self.pos..self.pos + 4) {
            Some(s) => {
                self.pos += 4;
                Ok(u32::from_le_bytes(s.try_into().unwrap_or([0; 4])))
            }
            None => self.err("buffer underflow (fixed32)"),
        }
    }
    /// Skips a field of `wire` type (`field` for groups).
    fn skip(&mut self, field: u32, wire: u8, depth: u32) -> W<()> {
        if depth >= MAX_DEPTH {
            return self.err("recursion limit reached");
        }
        match wire {
            0 => self.varint().map(drop),
            1 => self.fixed64().map(drop),
            2 => self.bytes().map(drop),
            5 => self.fixed32().map(drop),
            3 => loop {
                if self.done() {
                    return self.err("unexpected end of group");
                }
                let (f, w) = self.key()?;
                if w == 4 {
                    return if f == field { Ok(()) } else { self.err("unexpected end group tag") };
                }
                self.skip(f, w, depth + 1)?;
            },
            w => self.err(format!("invalid wire type value: {w}")),
        }
    }
    #[inline]
    fn expect(&self, field: u32, wire: u8, want: u8) -> W<()> {
        if wire == want {
            Ok(())
        } else {
            self.err(format!("invalid wire type: field {field} has wire type {wire}, expected {want}"))
        }
    }
    /// A length-delimited field's bytes (ids, opaque bytes).
    #[inline]
    fn len_delimited(&mut self, field: u32, wire: u8) -> W<&'a [u8]> {
        self.expect(field, wire, 2)?;
        self.bytes()
    }
    /// A length-delimited field's bytes and where they start (for errors inside a message).
    #[inline]
    fn message(&mut self, field: u32, wire: u8) -> W<(usize, &'a [u8])> {
        self.expect(field, wire, 2)?;
        let at = self.pos;
        Ok((at, self.bytes()?))
    }
    #[inline]
    fn fixed64_field(&mut self, field: u32, wire: u8) -> W<u64> {
        self.expect(field, wire, 1)?;
        self.fixed64()
    }
    #[inline]
    fn fixed32_field(&mut self, field: u32, wire: u8) -> W<u32> {
        self.expect(field, wire, 5)?;
        self.fixed32()
    }
    /// A string field, borrowed from the input.
    #[inline]
    fn str(&mut self, field: u32, wire: u8) -> W<&'a str> {
        let (at, b) = self.message(field, wire)?;
        match utf8(b) {
            Ok(s) => Ok(s),
            Err(_) => Err(WireError::new(at, "invalid string value: data is not UTF-8 encoded")),
        }
    }
    fn string(&mut self, field: u32, wire: u8) -> W<String> {
        self.str(field, wire).map(str::to_owned)
    }
    /// A string field as a [`Str`] (inline when short: no allocation).
    #[inline]
    fn small(&mut self, field: u32, wire: u8) -> W<Str> {
        self.str(field, wire).map(Str::new)
    }
    #[inline]
    fn varint_field(&mut self, field: u32, wire: u8) -> W<u64> {
        self.expect(field, wire, 0)?;
        self.varint()
    }
    #[inline]
    fn u32(&mut self, field: u32, wire: u8) -> W<u32> {
        Ok(self.varint_field(field, wire)? as u32)
    }
}

/// `b` as UTF-8 text. Keys and values are nearly always ASCII, which `is_ascii` checks a word
/// at a time; `str::from_utf8` costs a few times more on these short strings.
#[inline]
fn utf8(b: &[u8]) -> Result<&str, std::str::Utf8Error> {
    if b.is_ascii() {
        // SAFETY: ASCII bytes are valid UTF-8.
        Ok(unsafe { std::str::from_utf8_unchecked(b) })
    } else {
        std::str::from_utf8(b)
    }
}

/// The usual encoding of a `KeyValue`, read without the general field loop: the key (field
/// 1), then the value (field 2) holding one scalar — a string, bool, int or double — each
/// length below 128. `None` for anything else (the general path decides, and names errors).
#[inline]
fn plain_key_value(b: &[u8]) -> Option<KeyValue> {
    let [0x0a, klen, rest @ ..] = b else { return None };
    let (k, rest) = rest.split_at_checked(usize::from(*klen).min(0x80))?;
    let [0x12, vlen, v @ ..] = rest else { return None };
    if *klen >= 0x80 || *vlen >= 0x80 || v.len() != usize::from(*vlen) {
        return None;
    }
    let key = crate::value::key(utf8(k).ok()?);
    let value = match v {
        [0x0a, slen, s @ ..] if usize::from(*slen) == s.len() => Value::Str(Str::new(utf8(s).ok()?)),
        [0x10, x] if *x < 0x80 => Value::Bool(*x != 0),
        [0x18, int @ ..] => {
            let mut pos = 0;
            let x = super::wire::read_varint(int, &mut pos)?;
            if pos != int.len() {
                return None;
            }
            Value::I64(x as i64)
        }
        [0x21, f @ ..] => Value::F64(f64::from_bits(u64::from_le_bytes(f.try_into().ok()?))),
        _ => return None,
    };
    Some(KeyValue { key, value })
}

/// Attributes (a repeated `KeyValue` field), merged onto `into`.
fn key_value(b: &[u8], depth: u32, into: &mut Vec<KeyValue>) -> W<()> {
    if depth > MAX_DEPTH {
        return Err(WireError::new(0, "recursion limit reached"));
    }
    if let Some(kv) = plain_key_value(b) {
        into.push(kv);
        return Ok(());
    }
    let mut c = Cursor::new(b);
    // Decoded in place (a `KeyValue` is large: moving it costs more than building it).
    into.push(KeyValue { key: Str::default(), value: Value::Empty });
    let Some(kv) = into.last_mut() else { return Ok(()) };
    while !c.done() {
        let (f, w) = c.key()?;
        match f {
            1 => kv.key = crate::value::key(c.str(f, w)?),
            2 => {
                let (at, body) = c.message(f, w)?;
                any_value(body, depth + 1, &mut kv.value).map_err(|e| shift(e, at))?;
            }
            3 => {
                // `key_strindex` (profiles only): not carried, but it must be a varint.
                c.varint_field(f, w)?;
            }
            _ => c.skip(f, w, depth)?,
        }
    }
    Ok(())
}

fn shift(mut e: WireError, at: usize) -> WireError {
    e.0.at += at;
    e
}

/// An `AnyValue`, merged onto `v` (a repeated array / kvlist merges, anything else replaces).
fn any_value(b: &[u8], depth: u32, v: &mut Value) -> W<()> {
    if depth > MAX_DEPTH {
        return Err(WireError::new(0, "recursion limit reached"));
    }
    let mut c = Cursor::new(b);
    while !c.done() {
        let (f, w) = c.key()?;
        match f {
            1 => *v = Value::Str(c.small(f, w)?),
            2 => *v = Value::Bool(c.varint_field(f, w)? != 0),
            3 => *v = Value::I64(c.varint_field(f, w)? as i64),
            4 => *v = Value::F64(f64::from_bits(c.fixed64_field(f, w)?)),
            5 | 6 => {
                let (at, body) = c.message(f, w)?;
                if depth + 1 > MAX_DEPTH {
                    return Err(WireError::new(at, "recursion limit reached"));
                }
                let merge = matches!((f, &*v), (5, Value::Array(_)) | (6, Value::Map(_)));
                if !merge {
                    *v = if f == 5 { Value::Array(Vec::new()) } else { Value::Map(Vec::new()) };
                }
                let mut inner = Cursor::new(body);
                while !inner.done() {
                    let (g, gw) = inner.key().map_err(|e| shift(e, at))?;
                    if g == 1 {
                        inner.expect(g, gw, 2).map_err(|e| shift(e, at))?;
                        let iat = inner.pos;
                        let item = inner.bytes().map_err(|e| shift(e, at))?;
                        match v {
                            Value::Array(a) => {
                                let mut x = Value::Empty;
                                any_value(item, depth + 2, &mut x).map_err(|e| shift(e, at + iat))?;
                                a.push(x);
                            }
                            Value::Map(m) => key_value(item, depth + 2, m).map_err(|e| shift(e, at + iat))?,
                            _ => {}
                        }
                    } else {
                        inner.skip(g, gw, depth + 1).map_err(|e| shift(e, at))?;
                    }
                }
            }
            7 => *v = Value::Bytes(c.len_delimited(f, w)?.to_vec()),
            8 => {
                c.varint_field(f, w)?;
                *v = Value::Empty;
            }
            _ => c.skip(f, w, depth)?,
        }
    }
    Ok(())
}

/// Appends a repeated `KeyValue` element (a message at nesting depth `depth`) to `attrs`.
fn attr(c: &mut Cursor<'_>, f: u32, w: u8, depth: u32, attrs: &mut Attributes) -> W<()> {
    let (at, body) = c.message(f, w)?;
    if attrs.0.capacity() == 0 {
        // Spans carry about eight attributes: one allocation instead of growing 4 → 8 (a
        // `KeyValue` is large, so every regrowth copies a lot).
        attrs.0.reserve(8);
    }
    key_value(body, depth, &mut attrs.0).map_err(|e| shift(e, at))
}

fn resource(b: &[u8], r: &mut Resource) -> W<()> {
    let mut c = Cursor::new(b);
    while !c.done() {
        let (f, w) = c.key()?;
        match f {
            1 => attr(&mut c, f, w, 2, &mut r.attributes)?,
            2 => r.dropped_attributes_count = c.u32(f, w)?,
            3 => {
                // `entity_refs` (development): not carried, but checked as prost checks it.
                let (at, body) = c.message(f, w)?;
                entity_ref(body).map_err(|e| shift(e, at))?;
            }
            _ => c.skip(f, w, 1)?,
        }
    }
    Ok(())
}

/// Checks an `EntityRef` (depth 2): four string fields.
fn entity_ref(b: &[u8]) -> W<()> {
    let mut c = Cursor::new(b);
    while !c.done() {
        let (f, w) = c.key()?;
        match f {
            1..=4 => drop(c.str(f, w)?),
            _ => c.skip(f, w, 2)?,
        }
    }
    Ok(())
}

fn scope(b: &[u8], s: &mut Scope) -> W<()> {
    let mut c = Cursor::new(b);
    while !c.done() {
        let (f, w) = c.key()?;
        match f {
            1 => s.name = c.string(f, w)?,
            2 => s.version = c.string(f, w)?,
            3 => attr(&mut c, f, w, 3, &mut s.attributes)?,
            4 => s.dropped_attributes_count = c.u32(f, w)?,
            _ => c.skip(f, w, 2)?,
        }
    }
    Ok(())
}

/// The raw ids of a span or link (checked by the caller, as the prost path does).
#[derive(Default)]
struct Ids<'a> {
    trace: &'a [u8],
    span: &'a [u8],
    parent: &'a [u8],
}

fn event(b: &[u8]) -> W<SpanEvent> {
    let mut e = SpanEvent::default();
    let mut c = Cursor::new(b);
    while !c.done() {
        let (f, w) = c.key()?;
        match f {
            1 => e.time_ns = c.fixed64_field(f, w)?,
            2 => e.name = c.small(f, w)?,
            3 => attr(&mut c, f, w, 4, &mut e.attributes)?,
            4 => e.dropped_attributes_count = c.u32(f, w)?,
            _ => c.skip(f, w, 3)?,
        }
    }
    Ok(e)
}

fn link<'a>(b: &'a [u8], ids: &mut Ids<'a>) -> W<Link> {
    let mut l = Link::default();
    let mut c = Cursor::new(b);
    while !c.done() {
        let (f, w) = c.key()?;
        match f {
            1 => ids.trace = c.len_delimited(f, w)?,
            2 => ids.span = c.len_delimited(f, w)?,
            3 => l.trace_state = c.string(f, w)?,
            4 => attr(&mut c, f, w, 4, &mut l.attributes)?,
            5 => l.dropped_attributes_count = c.u32(f, w)?,
            6 => l.flags = c.fixed32_field(f, w)?,
            _ => c.skip(f, w, 3)?,
        }
    }
    Ok(l)
}

/// Decodes one span's wire form; the outer `Result` is the wire, the inner the span's
/// acceptability (ids), which a lenient caller may skip.
fn span(b: &[u8], resource: &Arc<Resource>, scope: &Arc<Scope>) -> W<Result<Span, CodecError>> {
    let mut s = Span::with_context(Arc::clone(resource), Arc::clone(scope));
    let mut ids = Ids::default();
    let mut links: Vec<(Link, Ids<'_>)> = Vec::new();
    let mut status: Option<(i32, String)> = None;
    let mut c = Cursor::new(b);
    while !c.done() {
        let (f, w) = c.key()?;
        match f {
            1 => ids.trace = c.len_delimited(f, w)?,
            2 => ids.span = c.len_delimited(f, w)?,
            3 => s.trace_state = c.string(f, w)?,
            4 => ids.parent = c.len_delimited(f, w)?,
            5 => s.name = c.small(f, w)?,
            6 => s.kind = SpanKind::from_i32(c.varint_field(f, w)? as i32),
            7 => s.start_ns = c.fixed64_field(f, w)?,
            8 => s.end_ns = c.fixed64_field(f, w)?,
            9 => attr(&mut c, f, w, 3, &mut s.attributes)?,
            10 => s.dropped_attributes_count = c.u32(f, w)?,
            11 => {
                let (at, body) = c.message(f, w)?;
                s.events.push(event(body).map_err(|e| shift(e, at))?);
            }
            12 => s.dropped_events_count = c.u32(f, w)?,
            13 => {
                let (at, body) = c.message(f, w)?;
                let mut lids = Ids::default();
                let l = link(body, &mut lids).map_err(|e| shift(e, at))?;
                links.push((l, lids));
            }
            14 => s.dropped_links_count = c.u32(f, w)?,
            15 => {
                let (at, body) = c.message(f, w)?;
                let st = status.get_or_insert((0, String::new()));
                let mut sc = Cursor::new(body);
                while !sc.done() {
                    let (g, gw) = sc.key().map_err(|e| shift(e, at))?;
                    match g {
                        2 => st.1 = sc.string(g, gw).map_err(|e| shift(e, at))?,
                        3 => {
                            sc.expect(g, gw, 0).map_err(|e| shift(e, at))?;
                            st.0 = sc.varint().map_err(|e| shift(e, at))? as i32;
                        }
                        _ => sc.skip(g, gw, 3).map_err(|e| shift(e, at))?,
                    }
                }
            }
            16 => s.flags = c.fixed32_field(f, w)?,
            _ => c.skip(f, w, 2)?,
        }
    }
    if let Some((code, message)) = status {
        s.status = Status { code: StatusCode::from_i32(code), message };
    }
    // The acceptability checks, in the prost path's order.
    let check = (|| {
        s.trace_id = trace_id_from_bytes(ids.trace, "trace_id")?;
        s.span_id = span_id_from_bytes(ids.span, "span_id")?;
        s.parent_span_id = parent_from_bytes(ids.parent)?;
        s.links.reserve(links.len());
        for (i, (mut l, lids)) in links.into_iter().enumerate() {
            l.trace_id =
                trace_id_from_bytes(lids.trace, "trace_id").map_err(|e| e.within(&format!("links[{i}]")))?;
            l.span_id =
                span_id_from_bytes(lids.span, "span_id").map_err(|e| e.within(&format!("links[{i}]")))?;
            let (relation, attributes) = split_relation(std::mem::take(&mut l.attributes));
            l.relation = relation;
            l.attributes = attributes;
            s.links.push(l);
        }
        Ok(())
    })();
    Ok(check.map(|()| s))
}

/// Most distinct resources (and scopes) one request remembers in [`Seen`].
const SEEN_MAX: usize = 16;

/// Resources and scopes already decoded from one request, by their wire bytes. Exporters that
/// batch several processes' spans (a collector, a gateway) repeat one resource in many
/// `ResourceSpans` — weft's load generator sends ~200 per 512 spans — and a repeat costs a byte
/// comparison instead of decoding nine attributes again. Repeats also share one `Arc`, which
/// the store's conversion recognises without comparing contents.
#[derive(Default)]
pub(crate) struct Seen<'a> {
    resources: Remembered<'a, Resource>,
    scopes: Remembered<'a, Scope>,
}

/// Up to [`SEEN_MAX`] decoded messages by (message bytes, schema URL), replaced round robin.
struct Remembered<'a, T> {
    list: Vec<(&'a [u8], &'a str, Arc<T>)>,
    next: usize,
}

impl<T> Default for Remembered<'_, T> {
    fn default() -> Self {
        Remembered { list: Vec::new(), next: 0 }
    }
}

/// A `ResourceSpans` or `ScopeSpans` message split into its fields, which may come in any
/// order: its context messages (field 1: the resource or scope; protobuf merges repeats), its
/// children (field 2: scope spans or spans) and its schema URL (field 3). Offsets are within
/// the message.
struct Level<'a> {
    context: Vec<(usize, &'a [u8])>,
    children: Vec<(usize, &'a [u8])>,
    url: &'a str,
}

/// Splits a level message (unknown fields skipped at nesting depth `depth`).
fn level(b: &[u8], depth: u32) -> W<Level<'_>> {
    let mut lv = Level { context: Vec::new(), children: Vec::new(), url: "" };
    let mut c = Cursor::new(b);
    while !c.done() {
        let (f, w) = c.key()?;
        match f {
            1 | 2 => {
                let (at, body) = c.message(f, w)?;
                if f == 1 { &mut lv.context } else { &mut lv.children }.push((at, body));
            }
            3 => lv.url = c.str(f, w)?,
            _ => c.skip(f, w, depth)?,
        }
    }
    Ok(lv)
}

/// Resource and scope: decoded from their message, with the schema URL of their level.
trait Context: Default {
    fn merge(&mut self, b: &[u8]) -> W<()>;
    fn schema_url(&mut self) -> &mut String;
}

impl Context for Resource {
    fn merge(&mut self, b: &[u8]) -> W<()> {
        resource(b, self)
    }
    fn schema_url(&mut self) -> &mut String {
        &mut self.schema_url
    }
}

impl Context for Scope {
    fn merge(&mut self, b: &[u8]) -> W<()> {
        scope(b, self)
    }
    fn schema_url(&mut self) -> &mut String {
        &mut self.schema_url
    }
}

impl<'a, T: Context> Remembered<'a, T> {
    /// The context of `lv`: the remembered one with the same bytes and schema URL, or a new one
    /// (remembered when it is a single message; merged repeats are decoded in place).
    fn context(&mut self, lv: &Level<'a>) -> W<Arc<T>> {
        let decode = || -> W<T> {
            let mut t = T::default();
            *t.schema_url() = lv.url.to_owned();
            for &(at, body) in &lv.context {
                t.merge(body).map_err(|e| shift(e, at))?;
            }
            Ok(t)
        };
        let &[(_, body)] = lv.context.as_slice() else { return decode().map(Arc::new) };
        if let Some((_, _, v)) = self.list.iter().find(|(b, u, _)| *b == body && *u == lv.url) {
            return Ok(Arc::clone(v));
        }
        let v = Arc::new(decode()?);
        if self.list.len() < SEEN_MAX {
            self.list.push((body, lv.url, Arc::clone(&v)));
        } else {
            self.list[self.next % SEEN_MAX] = (body, lv.url, Arc::clone(&v));
            self.next += 1;
        }
        Ok(v)
    }
}

/// Decodes the `index`-th `ResourceSpans` element, found at byte `offset` of the input, into
/// `out` (per-span defects go to `sink`); `seen` carries the request's resources and scopes.
pub(crate) fn resource_spans<'a>(
    element: &'a [u8],
    offset: u64,
    index: usize,
    sink: &mut Sink<'_>,
    seen: &mut Seen<'a>,
    out: &mut Vec<Span>,
) -> Result<(), CodecError> {
    let wire = |e: WireError| {
        CodecError::new(
            PROTO,
            if e.0.msg.contains("underflow") || e.0.msg.contains("end of group") {
                ErrorKind::Truncated
            } else {
                ErrorKind::Syntax
            },
            format!("cannot decode ResourceSpans starting at byte {offset}: {}", e.0.msg),
        )
        .at(Position::Offset(offset + e.0.at as u64))
        .field(format!("resource_spans[{index}]"))
    };
    // The resource, the schema URL, where the scope spans are; spans need their resource.
    let rs = level(element, 0).map_err(wire)?;
    let res = seen.resources.context(&rs).map_err(wire)?;
    for (j, (at, ss)) in rs.children.into_iter().enumerate() {
        let w2 = |e: WireError| wire(shift(e, at));
        let scoped = level(ss, 1).map_err(w2)?;
        let sc = seen.scopes.context(&scoped).map_err(w2)?;
        out.reserve(scoped.children.len());
        for (k, (sat, body)) in scoped.children.into_iter().enumerate() {
            match span(body, &res, &sc).map_err(|e| w2(shift(e, sat)))? {
                Ok(s) => out.push(s),
                Err(e) => {
                    sink.reject(e.within(&format!("resource_spans[{index}].scope_spans[{j}].spans[{k}]")))?
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// `KeyValue`s as raw bytes — plain ones (the shortcut) and unusual ones (value first,
    /// repeated fields, multi-byte lengths, unknown fields, a missing value) — decode as
    /// prost decodes them.
    #[test]
    fn key_values_agree_with_prost() {
        let long = vec![b'v'; 130];
        let mut long_str = vec![0x0a, 0x01, b'k', 0x12, 0x85, 0x01, 0x0a, 0x82, 0x01];
        long_str.extend_from_slice(&long);
        let cases: Vec<Vec<u8>> = vec![
            vec![0x0a, 0x01, b'k', 0x12, 0x02, 0x18, 0x05],
            vec![0x0a, 0x01, b'k', 0x12, 0x03, 0x18, 0x80, 0x01],
            vec![0x0a, 0x01, b'k', 0x12, 0x02, 0x10, 0x01],
            vec![0x0a, 0x01, b'k', 0x12, 0x09, 0x21, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f],
            vec![0x0a, 0x01, b'k', 0x12, 0x03, 0x0a, 0x01, b's'],
            vec![0x0a, 0x01, b'k', 0x12, 0x00],
            vec![0x0a, 0x01, b'k'],
            vec![0x12, 0x02, 0x18, 0x05, 0x0a, 0x01, b'k'],
            vec![0x0a, 0x01, b'a', 0x0a, 0x01, b'b', 0x12, 0x02, 0x18, 0x05],
            vec![0x0a, 0x01, b'k', 0x12, 0x04, 0x18, 0x05, 0x18, 0x06],
            vec![0x0a, 0x01, b'k', 0x12, 0x02, 0x18, 0x05, 0x12, 0x02, 0x10, 0x01],
            vec![0x0a, 0x01, b'k', 0x12, 0x02, 0x18, 0x05, 0x28, 0x01],
            vec![0x0a, 0x01, b'k', 0x12, 0x04, 0x0a, 0x00, 0x10, 0x01],
            long_str,
        ];
        for b in cases {
            let want = crate::codec::otlp::attrs_from_proto(vec![proto_kv(&b)]);
            let mut got = Vec::new();
            assert!(key_value(&b, 1, &mut got).is_ok(), "{b:x?}");
            assert_eq!(got, want.0, "{b:x?}");
        }
        // Not UTF-8, a truncated value: errors, as prost's are.
        for b in [vec![0x0a, 0x01, 0xff, 0x12, 0x02, 0x18, 0x05], vec![0x0a, 0x01, b'k', 0x12, 0x02, 0x18]] {
            assert!(crate::codec::otlp::proto::KeyValue::decode(b.as_slice()).is_err());
            assert!(key_value(&b, 1, &mut Vec::new()).is_err(), "{b:x?}");
        }
    }

    /// A request that repeats resources and scopes in many `ResourceSpans` (as a collector's
    /// batches do) decodes to the same spans as prost's path, and every repeat shares one
    /// `Arc` — also past the `SEEN_MAX` remembered ones, and not across schema URLs.
    #[test]
    fn repeated_resources_and_scopes_are_decoded_once() {
        use crate::codec::otlp::{decode_proto, encode_proto};
        let res = |i: usize, url: &str| {
            let mut r = Resource::service(format!("svc-{i}"));
            r.attributes.push("host.name", "h1");
            r.schema_url = url.into();
            Arc::new(r)
        };
        let sc = |i: usize| Arc::new(Scope { name: format!("lib-{}", i % 2), ..Scope::default() });
        let mut spans = Vec::new();
        // 8 ResourceSpans cycling over 4 resources, 30 new ones (more than SEEN_MAX), the
        // first 4 again, then two that differ only in their schema URL.
        let which: Vec<usize> = (0..8).map(|i| i % 4).chain(100..130).chain(0..4).collect();
        for (i, &r) in which.iter().enumerate() {
            let i = i as u64;
            let r = res(r, "");
            let mut s = Span::with_context(r, sc(i as usize));
            s.trace_id = crate::TraceId::from_u128(1 + i as u128);
            s.span_id = crate::SpanId::from_u64(1 + i);
            spans.push(s);
        }
        for (i, url) in ["", "https://opentelemetry.io/schemas/1.21.0"].into_iter().enumerate() {
            let mut s = Span::with_context(res(7, url), sc(0));
            s.trace_id = crate::TraceId::from_u128(1000 + i as u128);
            s.span_id = crate::SpanId::from_u64(1000 + i as u64);
            spans.push(s);
        }
        let bytes = encode_proto(&spans);
        let got = decode_proto(&bytes).unwrap();
        let want = crate::codec::otlp::from_request(
            crate::codec::otlp::proto::ExportTraceServiceRequest::decode(bytes.as_slice()).unwrap(),
        )
        .unwrap();
        assert_eq!(got, want);
        assert_eq!(got, spans);
        // A repeat among the remembered resources is the same Arc; scopes likewise.
        assert!(Arc::ptr_eq(&got[0].resource, &got[4].resource));
        assert!(!Arc::ptr_eq(&got[0].resource, &got[1].resource));
        assert!(Arc::ptr_eq(&got[0].scope, &got[2].scope));
        let n = got.len();
        assert!(!Arc::ptr_eq(&got[n - 2].resource, &got[n - 1].resource), "schema URLs differ");
        assert_eq!(got[n - 1].resource.schema_url, "https://opentelemetry.io/schemas/1.21.0");
    }

    fn proto_kv(b: &[u8]) -> crate::codec::otlp::proto::KeyValue {
        crate::codec::otlp::proto::KeyValue::decode(b).unwrap()
    }
}
