//! Streaming JSON: walks a document's outer structure byte by byte and hands out the elements
//! of one array (Zipkin's top-level span array, OTLP's `resourceSpans`, Jaeger's `data`) one
//! at a time, each as a complete JSON text that serde then parses. Memory is bounded by the
//! largest element, not by the file; positions (line, column, byte offset) are tracked so
//! every error names where it is. [`ElementReader`] is the streaming reader of every such
//! format, with an [`ElementDecoder`] for what one element becomes.

use std::io::BufRead;

use crate::codec::error::{CodecError, ErrorKind, Mode, Position, Rejected, Sink};
use crate::codec::stream::NextInto;
use crate::span::Span;

/// Largest single element accepted (protects against unterminated garbage).
const MAX_ELEMENT: usize = 1 << 30;

/// Where a captured element starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Start {
    pub line: u64,
    pub column: u64,
    pub offset: u64,
}

impl Start {
    pub(crate) fn position(&self) -> Position {
        Position::Line { line: self.line, column: self.column }
    }
}

/// Byte-level cursor over a buffered reader with line tracking.
pub(crate) struct Scanner<R> {
    r: R,
    offset: u64,
    line: u64,
    line_start: u64,
    pub(crate) format: &'static str,
}

impl<R: BufRead> Scanner<R> {
    pub(crate) fn new(r: R, format: &'static str) -> Self {
        Scanner { r, offset: 0, line: 1, line_start: 0, format }
    }

    pub(crate) fn here(&self) -> Start {
        Start { line: self.line, column: self.offset - self.line_start + 1, offset: self.offset }
    }

    pub(crate) fn error(&self, kind: ErrorKind, msg: impl Into<String>) -> CodecError {
        CodecError::new(self.format, kind, msg).at(self.here().position())
    }

    /// Marks `n` bytes as consumed, `nl` of them newlines, the last at index `last_nl`.
    fn advance(&mut self, n: usize, nl: u64, last_nl: Option<usize>) {
        if let Some(last) = last_nl {
            self.line += nl;
            self.line_start = self.offset + last as u64 + 1;
        }
        self.offset += n as u64;
        self.r.consume(n);
    }

    /// Skips whitespace and returns the next byte without consuming it (`None` at the end).
    pub(crate) fn peek(&mut self) -> Result<Option<u8>, CodecError> {
        loop {
            let (ws, next, nl, last_nl) = {
                let chunk = match fill(&mut self.r) {
                    Ok(c) => c,
                    Err(e) => {
                        let e = CodecError::io(self.format, e);
                        return Err(e.at(Position::Line {
                            line: self.line,
                            column: self.offset - self.line_start + 1,
                        }));
                    }
                };
                if chunk.is_empty() {
                    return Ok(None);
                }
                let ws = chunk.iter().take_while(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r')).count();
                let nl = memchr::memchr_iter(b'\n', &chunk[..ws]).count() as u64;
                (ws, chunk.get(ws).copied(), nl, memchr::memrchr(b'\n', &chunk[..ws]))
            };
            self.advance(ws, nl, last_nl);
            if let Some(b) = next {
                return Ok(Some(b));
            }
        }
    }

    /// Consumes `b` (after whitespace) or fails with `what` expected.
    pub(crate) fn expect(&mut self, b: u8, what: &str) -> Result<(), CodecError> {
        match self.peek()? {
            Some(c) if c == b => {
                self.advance(1, 0, None);
                Ok(())
            }
            Some(c) => Err(self.error(ErrorKind::Syntax, format!("expected {what}, found {}", show(c)))),
            None => {
                Err(self.error(ErrorKind::Truncated, format!("expected {what}, found the end of the input")))
            }
        }
    }

    /// Consumes one (non-newline) byte that `peek` returned.
    pub(crate) fn bump(&mut self) {
        if let Ok(Some(_)) = self.peek() {
            self.advance(1, 0, None);
        }
    }

    /// Reads an object key (a JSON string) and the following `:`.
    pub(crate) fn key(&mut self) -> Result<String, CodecError> {
        let start = self.here();
        if self.peek()? != Some(b'"') {
            return Err(self.error(ErrorKind::Syntax, "expected an object key (a string)"));
        }
        let mut buf = Vec::new();
        self.capture(&mut buf)?;
        let k: String = serde_json::from_slice(&buf).map_err(|e| {
            CodecError::new(self.format, ErrorKind::Syntax, format!("bad object key: {e}"))
                .at(start.position())
        })?;
        self.expect(b':', "':' after an object key")?;
        Ok(k)
    }

    /// Appends the next complete JSON value (after whitespace) to `buf` and returns where it
    /// started.
    pub(crate) fn capture(&mut self, buf: &mut Vec<u8>) -> Result<Start, CodecError> {
        self.walk(Some(buf))
    }

    /// Steps over the next complete JSON value.
    pub(crate) fn skip(&mut self) -> Result<Start, CodecError> {
        self.walk(None)
    }

    fn walk(&mut self, mut buf: Option<&mut Vec<u8>>) -> Result<Start, CodecError> {
        let Some(first) = self.peek()? else {
            return Err(self.error(ErrorKind::Truncated, "expected a value, found the end of the input"));
        };
        let start = self.here();
        let scalar = !matches!(first, b'{' | b'[' | b'"');
        let mut depth: u32 = 0;
        let mut in_str = false;
        let mut esc = false;
        let mut began = false;
        let mut taken = 0usize;
        loop {
            let (n, done, nl, last_nl) = {
                let chunk = match fill(&mut self.r) {
                    Ok(c) => c,
                    Err(e) => return Err(CodecError::io(self.format, e).at(start.position())),
                };
                if chunk.is_empty() {
                    if scalar && began {
                        return Ok(start);
                    }
                    return Err(CodecError::new(
                        self.format,
                        ErrorKind::Truncated,
                        "the input ends inside this value (truncated?)",
                    )
                    .at(start.position()));
                }
                let mut end = None;
                let mut i = 0;
                while i < chunk.len() {
                    let b = chunk[i];
                    if !began {
                        began = true;
                        match b {
                            b'{' | b'[' => depth = 1,
                            b'"' => in_str = true,
                            _ => {}
                        }
                    } else if scalar {
                        if matches!(b, b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r') {
                            end = Some(i);
                            break;
                        }
                    } else if in_str {
                        if esc {
                            esc = false;
                        } else {
                            // Jump to the next quote or backslash.
                            match memchr::memchr2(b'"', b'\\', &chunk[i..]) {
                                None => {
                                    i = chunk.len();
                                    continue;
                                }
                                Some(k) => {
                                    i += k;
                                    if chunk[i] == b'\\' {
                                        esc = true;
                                    } else {
                                        in_str = false;
                                        if depth == 0 {
                                            end = Some(i + 1);
                                            break;
                                        }
                                    }
                                }
                            }
                        }
                    } else {
                        match b {
                            b'"' => in_str = true,
                            b'{' | b'[' => depth += 1,
                            b'}' | b']' => {
                                depth -= 1;
                                if depth == 0 {
                                    end = Some(i + 1);
                                    break;
                                }
                            }
                            _ => {}
                        }
                    }
                    i += 1;
                }
                let n = end.unwrap_or(chunk.len());
                let part = &chunk[..n];
                if let Some(b) = buf.as_deref_mut() {
                    b.extend_from_slice(part);
                }
                (
                    n,
                    end.is_some(),
                    memchr::memchr_iter(b'\n', part).count() as u64,
                    memchr::memrchr(b'\n', part),
                )
            };
            self.advance(n, nl, last_nl);
            taken += n;
            if done {
                return Ok(start);
            }
            if taken > MAX_ELEMENT {
                return Err(CodecError::new(
                    self.format,
                    ErrorKind::InvalidValue,
                    format!("a single value is larger than {} MiB (unterminated?)", MAX_ELEMENT >> 20),
                )
                .at(start.position()));
            }
        }
    }
}

/// `fill_buf`, retrying on `Interrupted`.
fn fill<R: BufRead>(r: &mut R) -> std::io::Result<&[u8]> {
    loop {
        match r.fill_buf() {
            Ok(_) => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    r.fill_buf()
}

/// Printable form of a byte for messages.
pub(crate) fn show(c: u8) -> String {
    if c.is_ascii_graphic() { format!("'{}'", c as char) } else { format!("byte 0x{c:02x}") }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Between top-level values.
    Top,
    /// Inside a top-level object, before a member (`first` = no member yet).
    Object { first: bool },
    /// Inside the target array (`first` = no element yet).
    Array { first: bool },
    /// Finished.
    Done,
}

/// Streams the elements of the array at `key` of every top-level object (JSON Lines and
/// concatenated documents included), or of every top-level array when `key` is `None`.
pub(crate) struct ArrayStream<R> {
    pub(crate) scan: Scanner<R>,
    keys: &'static [&'static str],
    state: State,
    /// Index of the next element within its array.
    pub(crate) index: usize,
    /// What the document should look like, for mismatch errors.
    expected: &'static str,
}

impl<R: BufRead> ArrayStream<R> {
    /// `keys`: the member names that hold the array (e.g. `["resourceSpans", "resource_spans"]`);
    /// empty for a top-level array.
    pub(crate) fn new(
        r: R,
        format: &'static str,
        keys: &'static [&'static str],
        expected: &'static str,
    ) -> Self {
        ArrayStream { scan: Scanner::new(r, format), keys, state: State::Top, index: 0, expected }
    }

    /// Appends the next element to `buf` (cleared first); returns its start and index, or
    /// `None` at the end of the input.
    pub(crate) fn next_into(&mut self, buf: &mut Vec<u8>) -> Result<Option<(Start, usize)>, CodecError> {
        buf.clear();
        loop {
            match self.state {
                State::Done => return Ok(None),
                State::Top => match self.scan.peek()? {
                    None => {
                        self.state = State::Done;
                        return Ok(None);
                    }
                    Some(b'{') if !self.keys.is_empty() => {
                        self.scan.bump();
                        self.state = State::Object { first: true };
                    }
                    Some(b'[') if self.keys.is_empty() => {
                        self.scan.bump();
                        self.index = 0;
                        self.state = State::Array { first: true };
                    }
                    Some(c) => {
                        return Err(self.scan.error(
                            ErrorKind::Mismatch,
                            format!("expected {}, found {}", self.expected, show(c)),
                        ));
                    }
                },
                State::Object { first } => {
                    match self.scan.peek()? {
                        Some(b'}') => {
                            self.scan.bump();
                            self.state = State::Top;
                            continue;
                        }
                        None => {
                            return Err(self
                                .scan
                                .error(ErrorKind::Truncated, "the input ends inside an object"));
                        }
                        _ => {}
                    }
                    if !first {
                        self.scan.expect(b',', "',' or '}'")?;
                    }
                    let k = self.scan.key()?;
                    self.state = State::Object { first: false };
                    if self.keys.contains(&k.as_str()) {
                        if self.scan.peek()? == Some(b'n') {
                            // `"key": null` is an empty array.
                            self.scan.skip()?;
                            continue;
                        }
                        self.scan.expect(b'[', &format!("an array for \"{k}\""))?;
                        self.index = 0;
                        self.state = State::Array { first: true };
                    } else {
                        self.scan.skip()?;
                    }
                }
                State::Array { first } => {
                    match self.scan.peek()? {
                        Some(b']') => {
                            self.scan.bump();
                            self.state = if self.keys.is_empty() {
                                State::Top
                            } else {
                                State::Object { first: false }
                            };
                            continue;
                        }
                        None => {
                            return Err(self
                                .scan
                                .error(ErrorKind::Truncated, "the input ends inside an array"));
                        }
                        _ => {}
                    }
                    if !first {
                        self.scan.expect(b',', "',' or ']'")?;
                    }
                    self.state = State::Array { first: false };
                    let start = self.scan.capture(buf)?;
                    let i = self.index;
                    self.index += 1;
                    return Ok(Some((start, i)));
                }
            }
        }
    }
}

/// One array element as [`ElementReader`] hands it to its decoder.
pub(crate) struct Element<'a> {
    /// The element's complete JSON text.
    pub(crate) bytes: &'a [u8],
    pub(crate) start: Start,
    /// Its index within its array.
    pub(crate) index: usize,
}

/// The format's half of an [`ElementReader`]: where the array is and what one element becomes.
pub(crate) trait ElementDecoder: Default {
    const FORMAT: &'static str;
    /// The member names that hold the array; empty for a top-level array.
    const KEYS: &'static [&'static str];
    /// What the document should look like, for mismatch errors.
    const EXPECTED: &'static str;

    /// Decodes one element into `out`, handing each span it cannot accept to `sink`; an
    /// error returned ends the read.
    fn decode(&mut self, el: Element<'_>, sink: Sink<'_>, out: &mut Vec<Span>) -> Result<(), CodecError>;
}

/// Streaming reader of a JSON format: one array element at a time, decoded by `D`.
pub(crate) struct ElementReader<R, D> {
    stream: ArrayStream<R>,
    buf: Vec<u8>,
    decoder: D,
}

impl<R: BufRead, D: ElementDecoder> ElementReader<R, D> {
    pub(crate) fn new(r: R) -> Self {
        ElementReader {
            stream: ArrayStream::new(r, D::FORMAT, D::KEYS, D::EXPECTED),
            buf: Vec::new(),
            decoder: D::default(),
        }
    }
}

impl<R: BufRead, D: ElementDecoder> NextInto for ElementReader<R, D> {
    /// Decodes the next element into `out` (or counts its bad spans as rejected); `false` at
    /// the end of the input.
    #[inline]
    fn next_into(
        &mut self,
        mode: Mode,
        out: &mut Vec<Span>,
        rejected: &mut Rejected,
    ) -> Result<bool, CodecError> {
        let Some((start, index)) = self.stream.next_into(&mut self.buf)? else {
            return Ok(false);
        };
        let el = Element { bytes: &self.buf, start, index };
        self.decoder.decode(el, Sink { mode, rejected }, out)?;
        Ok(true)
    }
}

/// Turns a serde_json error on an element that starts at `start` into a [`CodecError`] with
/// whole-input line/column and — by parsing the element once more through
/// `serde_path_to_error` — the JSON path of the offending field, prefixed with `prefix`.
pub(crate) fn element_error<'a, T>(
    format: &'static str,
    e: serde_json::Error,
    element: &'a [u8],
    start: Start,
    prefix: &str,
) -> CodecError
where
    T: serde::Deserialize<'a>,
{
    let mut de = serde_json::Deserializer::from_slice(element);
    let path = match serde_path_to_error::deserialize::<_, T>(&mut de) {
        Err(pe) => pe.path().to_string(),
        Ok(_) => String::new(),
    };
    let path = if path == "." { String::new() } else { path };
    let kind = match e.classify() {
        serde_json::error::Category::Eof => ErrorKind::Truncated,
        serde_json::error::Category::Syntax => ErrorKind::Syntax,
        serde_json::error::Category::Data | serde_json::error::Category::Io => ErrorKind::InvalidValue,
    };
    let msg = strip_location(&e.to_string());
    CodecError::new(format, kind, msg)
        .field(path)
        .within(prefix)
        .at(Position::Line { line: e.line() as u64, column: e.column() as u64 })
        .shifted(start.line, start.column, start.offset)
}

/// serde_json appends " at line L column C"; the position is reported separately.
fn strip_location(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_owned(),
        None => msg.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(input: &str, keys: &'static [&'static str]) -> Result<Vec<(String, u64, u64, usize)>, CodecError> {
        let mut s = ArrayStream::new(input.as_bytes(), "t", keys, "x");
        let mut out = Vec::new();
        let mut buf = Vec::new();
        while let Some((start, i)) = s.next_into(&mut buf)? {
            out.push((String::from_utf8(buf.clone()).unwrap(), start.line, start.column, i));
        }
        Ok(out)
    }

    #[test]
    fn top_level_array_elements() {
        let got = all(" [ {\"a\":\"]}\\\"\"} ,\n [1,[2]], \"s\" , 12 ,true]", &[]).unwrap();
        let texts: Vec<_> = got.iter().map(|g| g.0.as_str()).collect();
        assert_eq!(texts, vec!["{\"a\":\"]}\\\"\"}", "[1,[2]]", "\"s\"", "12", "true"]);
        assert_eq!((got[1].1, got[1].2), (2, 2));
    }

    #[test]
    fn keyed_arrays_in_json_lines() {
        let input = "{\"x\":{\"resourceSpans\":[9]},\"resourceSpans\":[{\"a\":1},{\"b\":2}]}\n{\"resourceSpans\":[{\"c\":3}]}\n";
        let got = all(input, &["resourceSpans"]).unwrap();
        let texts: Vec<_> = got.iter().map(|g| (g.0.as_str(), g.1, g.3)).collect();
        assert_eq!(texts, vec![("{\"a\":1}", 1, 0), ("{\"b\":2}", 1, 1), ("{\"c\":3}", 2, 0)]);
    }

    #[test]
    fn truncation_and_mismatch_are_errors() {
        let e = all("[{\"a\":1},{\"b\":", &[]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Truncated);
        assert_eq!(e.position, Position::Line { line: 1, column: 10 });
        let e = all("[1,2", &[]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Truncated);
        let e = all("{\"a\":1}", &[]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Mismatch);
        let e = all("[1 2]", &[]).unwrap_err();
        assert!(e.to_string().contains("expected ',' or ']'"), "{e}");
        assert!(all("", &[]).unwrap().is_empty());
    }

    #[test]
    fn small_reads_give_same_result() {
        let input = "[{\"a\":\"x\\\\\"}, {\"b\":[1,2,{\"c\":\"}\"}]}]";
        let r = std::io::BufReader::with_capacity(1, input.as_bytes());
        let mut s = ArrayStream::new(r, "t", &[], "x");
        let mut buf = Vec::new();
        let mut texts = Vec::new();
        while s.next_into(&mut buf).unwrap().is_some() {
            texts.push(String::from_utf8(buf.clone()).unwrap());
        }
        assert_eq!(texts, vec!["{\"a\":\"x\\\\\"}", "{\"b\":[1,2,{\"c\":\"}\"}]}"]);
    }
}
