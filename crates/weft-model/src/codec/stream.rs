//! Streaming conversion: readers that pull spans from any supported format a batch at a
//! time, and writers that push them out, so a file of any size converts in bounded memory.
//!
//! | format | how the reader streams | how the writer streams |
//! |---|---|---|
//! | OTLP protobuf | walks the request's top-level `resource_spans` fields, one `ResourceSpans` in memory at a time | one encoded request per batch, appended: concatenated requests are one valid request |
//! | OTLP/JSON | one `resourceSpans` element at a time (of one object, JSON Lines, or concatenated objects) | one object, `resourceSpans` elements appended per batch |
//! | Zipkin v2 / v1 JSON | one array element (span) at a time | `[`, spans, `]` |
//! | Zipkin v2 protobuf | one `spans` field at a time | one `spans` field per span |
//! | Jaeger JSON | one `data[]` trace at a time | spans are grouped per trace by an external sort (spilled runs, merged) |
//! | Chrome trace JSON | — (write only) | spans are ordered per service and start by an external sort, then laid out on tracks |
//!
//! Formats are detected from the file name and, when that is not conclusive, from the
//! first bytes ([`Format::detect`]).

use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};

use crate::codec::error::{CodecError, ErrorKind, Mode, Position, Rejected, Sink};
use crate::codec::{Losses, chrome, jaeger, otlp, zipkin};
use crate::span::Span;

/// A trace file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// OTLP protobuf (`ExportTraceServiceRequest` / `TracesData`).
    OtlpProto,
    /// OTLP/JSON (one object, JSON Lines, or concatenated objects).
    OtlpJson,
    /// Zipkin v2 JSON.
    ZipkinV2Json,
    /// Zipkin v2 proto3 (`ListOfSpans`).
    ZipkinV2Proto,
    /// Zipkin v1 JSON (read only).
    ZipkinV1Json,
    /// Jaeger JSON (the UI's upload / API v1 format).
    JaegerJson,
    /// Chrome Trace Event JSON (write only).
    ChromeJson,
}

impl Format {
    /// Every format.
    pub const ALL: [Format; 7] = [
        Format::OtlpProto,
        Format::OtlpJson,
        Format::ZipkinV2Json,
        Format::ZipkinV2Proto,
        Format::ZipkinV1Json,
        Format::JaegerJson,
        Format::ChromeJson,
    ];

    /// The command-line name (`otlp-proto`, `otlp-json`, `zipkin`, `zipkin-proto`,
    /// `zipkin-v1`, `jaeger`, `chrome`).
    pub fn cli_name(self) -> &'static str {
        match self {
            Format::OtlpProto => "otlp-proto",
            Format::OtlpJson => "otlp-json",
            Format::ZipkinV2Json => "zipkin",
            Format::ZipkinV2Proto => "zipkin-proto",
            Format::ZipkinV1Json => "zipkin-v1",
            Format::JaegerJson => "jaeger",
            Format::ChromeJson => "chrome",
        }
    }

    /// The human name used in messages.
    pub fn name(self) -> &'static str {
        match self {
            Format::OtlpProto => otlp::PROTO,
            Format::OtlpJson => otlp::json::FORMAT,
            Format::ZipkinV2Json => zipkin::v2::FORMAT,
            Format::ZipkinV2Proto => zipkin::proto::FORMAT,
            Format::ZipkinV1Json => zipkin::v1::FORMAT,
            Format::JaegerJson => jaeger::FORMAT,
            Format::ChromeJson => chrome::FORMAT,
        }
    }

    /// Parses a command-line name (a few aliases accepted).
    pub fn parse(s: &str) -> Option<Format> {
        Some(match s.to_ascii_lowercase().as_str() {
            "otlp-proto" | "otlp" | "otlp-pb" | "pb" | "proto" => Format::OtlpProto,
            "otlp-json" | "otlp-jsonl" | "jsonl" => Format::OtlpJson,
            "zipkin" | "zipkin-v2" | "zipkin-json" | "zipkin-v2-json" => Format::ZipkinV2Json,
            "zipkin-proto" | "zipkin-v2-proto" | "zipkin-pb" => Format::ZipkinV2Proto,
            "zipkin-v1" | "zipkin-v1-json" | "blkkin" => Format::ZipkinV1Json,
            "jaeger" | "jaeger-json" => Format::JaegerJson,
            "chrome" | "chrome-json" | "perfetto" | "trace-event" => Format::ChromeJson,
            _ => return None,
        })
    }

    /// True when weft can read this format.
    pub fn can_read(self) -> bool {
        self != Format::ChromeJson
    }

    /// True when weft can write this format.
    pub fn can_write(self) -> bool {
        self != Format::ZipkinV1Json
    }

    /// A guess from the file name alone, for unambiguous extensions (`.pb`/`.binpb`/`.otlp`
    /// → OTLP protobuf, `.jsonl`/`.ndjson` → OTLP/JSON Lines); names that say their format
    /// (`x.zipkin.json`, `x.jaeger.json`, `x.chrome.json`, `x.otlp.json`, `x.zipkin.pb`,
    /// `x.zipkin-v1.json`) are honoured too.
    pub fn from_path(path: &Path) -> Option<Format> {
        let name = path.file_name()?.to_str()?.to_ascii_lowercase();
        let has = |w: &str| name.contains(w);
        let ext = name.rsplit('.').next().unwrap_or("");
        let json = matches!(ext, "json" | "jsonl" | "ndjson");
        let proto = matches!(ext, "pb" | "binpb" | "proto" | "bin" | "otlp" | "protobuf");
        Some(if has("zipkin") && proto {
            Format::ZipkinV2Proto
        } else if (has("zipkin-v1") || has("zipkin_v1") || has("zipkinv1") || has("blkkin")) && json {
            Format::ZipkinV1Json
        } else if has("zipkin") && json {
            Format::ZipkinV2Json
        } else if has("jaeger") && json {
            Format::JaegerJson
        } else if (has("chrome") || has("perfetto") || has("trace_event") || has("trace-event")) && json {
            Format::ChromeJson
        } else if has("otlp") && json || matches!(ext, "jsonl" | "ndjson") {
            Format::OtlpJson
        } else if proto {
            Format::OtlpProto
        } else {
            return None;
        })
    }

    /// Detects a format from the first bytes of an input (a few KiB are enough; more make
    /// JSON detection surer). `None` when nothing fits.
    pub fn detect(prefix: &[u8]) -> Option<Format> {
        let text = prefix.iter().position(|b| !b.is_ascii_whitespace()).map(|i| &prefix[i..]).unwrap_or(&[]);
        match text.first() {
            Some(b'{') => {
                let head = &text[..text.len().min(1 << 16)];
                let find = |k: &[u8]| memchr::memmem::find(head, k);
                // The first of the telling keys decides.
                let cands = [
                    (find(b"\"resourceSpans\""), Format::OtlpJson),
                    (find(b"\"resource_spans\""), Format::OtlpJson),
                    (find(b"\"data\""), Format::JaegerJson),
                    (find(b"\"traceEvents\""), Format::ChromeJson),
                ];
                cands.iter().filter_map(|(p, f)| p.map(|p| (p, *f))).min_by_key(|(p, _)| *p).map(|(_, f)| f)
            }
            Some(b'[') => {
                let head = &text[..text.len().min(1 << 16)];
                let find = |k: &[u8]| memchr::memmem::find(head, k).is_some();
                if find(b"\"binaryAnnotations\"") || find(b"\"endpoint\"") {
                    Some(Format::ZipkinV1Json)
                } else if find(b"\"ph\"") && !find(b"\"traceId\"") {
                    Some(Format::ChromeJson)
                } else {
                    Some(Format::ZipkinV2Json)
                }
            }
            _ if prefix.first() == Some(&0x0a) => Some(detect_proto(prefix)),
            _ => None,
        }
    }
}

/// OTLP and Zipkin protobuf both start with field 1 (LEN). A Zipkin span's own first field
/// is its 8- or 16-byte trace id (field 1) followed by other span fields; an OTLP
/// `ResourceSpans` starts with a `Resource` or `ScopeSpans` message.
fn detect_proto(prefix: &[u8]) -> Format {
    let mut pos = 1;
    let Some(len) = otlp::wire::read_varint(prefix, &mut pos) else { return Format::OtlpProto };
    let body = &prefix[pos..prefix.len().min(pos + len as usize)];
    if body.first() == Some(&0x0a) {
        let mut p = 1;
        if let Some(l) = otlp::wire::read_varint(body, &mut p)
            && (l == 8 || l == 16)
        {
            let next = p + l as usize;
            // Zipkin: after the trace id come parent id (0x12) or id (0x1a), 8 bytes each.
            if let Some(&tag) = body.get(next)
                && (tag == 0x12 || tag == 0x1a)
                && body.get(next + 1) == Some(&8)
            {
                return Format::ZipkinV2Proto;
            }
        }
    }
    Format::OtlpProto
}

/// Pulls spans from an input a batch at a time.
pub trait SpanReader {
    /// Appends at least one span (unless the input is exhausted) and at most about
    /// `max` spans beyond one record's worth to `out`; `false` once the input is exhausted.
    fn next_batch(&mut self, out: &mut Vec<Span>, max: usize) -> Result<bool, CodecError>;
    /// Spans refused so far (lenient readers).
    fn rejected(&self) -> &Rejected;
    /// Takes the tally of refused spans (leaving an empty one).
    fn take_rejected(&mut self) -> Rejected;
}

/// Opens a streaming reader for `format` over `input`. `lenient` skips and counts spans
/// with invalid ids (or undecodable Zipkin span objects) instead of failing.
pub fn reader<'a, R: BufRead + 'a>(
    format: Format,
    input: R,
    lenient: bool,
) -> Result<Box<dyn SpanReader + 'a>, CodecError> {
    let mode = if lenient { Mode::Lenient } else { Mode::Strict };
    Ok(match format {
        Format::OtlpProto => Box::new(ProtoReader::new(
            otlp::wire::TopLevelReader::new(input, otlp::PROTO, "resource_spans"),
            mode,
            |element, offset, index, sink, out| {
                otlp::decode_resource_spans_into(element, offset, index, sink, out).map_err(|e| {
                    if e.position == Position::Unknown { e.at(Position::Offset(offset)) } else { e }
                })
            },
        )),
        Format::OtlpJson => {
            Box::new(Each { inner: otlp::json::JsonReader::new(input), mode, rejected: Rejected::default() })
        }
        Format::ZipkinV2Json => Box::new(Each {
            inner: zipkin::v2::V2JsonReader::new(input),
            mode,
            rejected: Rejected::default(),
        }),
        Format::ZipkinV1Json => Box::new(Each {
            inner: zipkin::v1::V1JsonReader::new(input),
            mode,
            rejected: Rejected::default(),
        }),
        Format::ZipkinV2Proto => {
            let mut interner = zipkin::Interner::default();
            Box::new(ProtoReader::new(
                otlp::wire::TopLevelReader::new(input, zipkin::proto::FORMAT, "spans"),
                mode,
                move |element, offset, index, sink, out| {
                    zipkin::proto::decode_one(element, offset, index, &mut interner, sink, out)
                },
            ))
        }
        Format::JaegerJson => {
            Box::new(Each { inner: jaeger::JaegerReader::new(input), mode, rejected: Rejected::default() })
        }
        Format::ChromeJson => {
            return Err(CodecError::new(
                chrome::FORMAT,
                ErrorKind::Mismatch,
                "weft writes Chrome traces but does not read them",
            ));
        }
    })
}

/// A record-at-a-time decoder (one JSON element).
pub(crate) trait NextInto {
    fn next_into(
        &mut self,
        mode: Mode,
        out: &mut Vec<Span>,
        rejected: &mut Rejected,
    ) -> Result<bool, CodecError>;
}

/// Decodes a whole input with a record-at-a-time reader (for [`super::error::strict`] and
/// [`super::error::lenient`]).
pub(crate) fn read_all(
    mut r: impl NextInto,
) -> impl FnOnce(Mode, &mut Vec<Span>, &mut Rejected) -> Result<(), CodecError> {
    move |mode, out, rejected| {
        while r.next_into(mode, out, rejected)? {}
        Ok(())
    }
}

struct Each<T> {
    inner: T,
    mode: Mode,
    rejected: Rejected,
}

impl<T: NextInto> SpanReader for Each<T> {
    fn next_batch(&mut self, out: &mut Vec<Span>, max: usize) -> Result<bool, CodecError> {
        let before = out.len();
        loop {
            if !self.inner.next_into(self.mode, out, &mut self.rejected)? {
                return Ok(out.len() > before);
            }
            if out.len() - before >= max {
                return Ok(true);
            }
        }
    }
    fn rejected(&self) -> &Rejected {
        &self.rejected
    }
    fn take_rejected(&mut self) -> Rejected {
        std::mem::take(&mut self.rejected)
    }
}

/// Streaming reader of a length-delimited protobuf format: one top-level element at a time,
/// decoded by `decode` (element, its byte offset, its index, sink, output).
struct ProtoReader<R, F> {
    inner: otlp::wire::TopLevelReader<R>,
    index: usize,
    decode: F,
    mode: Mode,
    rejected: Rejected,
}

impl<R: Read, F> ProtoReader<R, F>
where
    F: FnMut(&[u8], u64, usize, &mut Sink<'_>, &mut Vec<Span>) -> Result<(), CodecError>,
{
    fn new(inner: otlp::wire::TopLevelReader<R>, mode: Mode, decode: F) -> Self {
        ProtoReader { inner, index: 0, decode, mode, rejected: Rejected::default() }
    }
}

impl<R: Read, F> SpanReader for ProtoReader<R, F>
where
    F: FnMut(&[u8], u64, usize, &mut Sink<'_>, &mut Vec<Span>) -> Result<(), CodecError>,
{
    fn next_batch(&mut self, out: &mut Vec<Span>, max: usize) -> Result<bool, CodecError> {
        let before = out.len();
        while let Some((offset, element)) = self.inner.next_element()? {
            let mut sink = Sink { mode: self.mode, rejected: &mut self.rejected };
            (self.decode)(element, offset, self.index, &mut sink, out)?;
            self.index += 1;
            if out.len() - before >= max {
                return Ok(true);
            }
        }
        Ok(out.len() > before)
    }
    fn rejected(&self) -> &Rejected {
        &self.rejected
    }
    fn take_rejected(&mut self) -> Rejected {
        std::mem::take(&mut self.rejected)
    }
}

/// Pushes spans to an output a batch at a time.
pub trait SpanWriter {
    /// Writes a batch.
    fn write(&mut self, spans: &[Span]) -> Result<(), CodecError>;
    /// Completes the output (closing brackets, sorted phases, flush); returns what the
    /// format could not carry.
    fn finish(self: Box<Self>) -> Result<Losses, CodecError>;
}

/// Options for writers that need scratch space.
#[derive(Debug, Clone)]
pub struct WriterOptions {
    /// Where sorting writers (Jaeger, Chrome) spill runs; the system temp dir by default.
    pub spill_dir: PathBuf,
    /// Spans a sorting writer keeps in memory before it spills a run (default 20,000: some
    /// 60 MiB of realistic spans; a run is one open file during the merge).
    pub sort_run_spans: usize,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions { spill_dir: std::env::temp_dir(), sort_run_spans: 20_000 }
    }
}

/// Opens a streaming writer for `format` over `output`.
pub fn writer<'a, W: Write + 'a>(
    format: Format,
    output: W,
    options: WriterOptions,
) -> Result<Box<dyn SpanWriter + 'a>, CodecError> {
    Ok(match format {
        Format::OtlpProto => Box::new(OtlpProtoWriter { out: output }),
        Format::OtlpJson => Box::new(OtlpJsonWriter { out: output, first: true, buf: Vec::new() }),
        Format::ZipkinV2Json => Box::new(ZipkinJsonWriter {
            out: output,
            first: true,
            buf: Vec::new(),
            losses: Losses::default(),
        }),
        Format::ZipkinV2Proto => Box::new(ZipkinProtoWriter { out: output, losses: Losses::default() }),
        Format::JaegerJson => Box::new(jaeger::JaegerWriter::new(output, options)),
        Format::ChromeJson => Box::new(chrome::ChromeWriter::new(output, options)),
        Format::ZipkinV1Json => {
            return Err(CodecError::new(
                zipkin::v1::FORMAT,
                ErrorKind::Mismatch,
                "weft reads Zipkin v1 JSON but does not write it (write Zipkin v2)",
            ));
        }
    })
}

fn io_err(format: &'static str) -> impl Fn(std::io::Error) -> CodecError {
    move |e| CodecError::io(format, e)
}

struct OtlpProtoWriter<W> {
    out: W,
}

impl<W: Write> SpanWriter for OtlpProtoWriter<W> {
    fn write(&mut self, spans: &[Span]) -> Result<(), CodecError> {
        self.out.write_all(&otlp::encode_proto(spans)).map_err(io_err(otlp::PROTO))
    }
    fn finish(mut self: Box<Self>) -> Result<Losses, CodecError> {
        self.out.flush().map_err(io_err(otlp::PROTO))?;
        Ok(Losses::default())
    }
}

struct OtlpJsonWriter<W> {
    out: W,
    first: bool,
    buf: Vec<u8>,
}

impl<W: Write> SpanWriter for OtlpJsonWriter<W> {
    fn write(&mut self, spans: &[Span]) -> Result<(), CodecError> {
        if spans.is_empty() {
            return Ok(());
        }
        self.buf.clear();
        otlp::encode_json_to(spans, &mut self.buf);
        // `{"resourceSpans":[ ... ]}` → append the elements to the one open array.
        let inner = &self.buf[b"{\"resourceSpans\":[".len()..self.buf.len() - 2];
        let io = io_err(otlp::json::FORMAT);
        if self.first {
            self.out.write_all(b"{\"resourceSpans\":[\n").map_err(&io)?;
            self.first = false;
        } else {
            self.out.write_all(b",\n").map_err(&io)?;
        }
        self.out.write_all(inner).map_err(&io)
    }
    fn finish(mut self: Box<Self>) -> Result<Losses, CodecError> {
        let io = io_err(otlp::json::FORMAT);
        if self.first {
            self.out.write_all(b"{\"resourceSpans\":[").map_err(&io)?;
        }
        self.out.write_all(b"]}\n").map_err(&io)?;
        self.out.flush().map_err(&io)?;
        Ok(Losses::default())
    }
}

struct ZipkinJsonWriter<W> {
    out: W,
    first: bool,
    buf: Vec<u8>,
    losses: Losses,
}

impl<W: Write> SpanWriter for ZipkinJsonWriter<W> {
    fn write(&mut self, spans: &[Span]) -> Result<(), CodecError> {
        self.buf.clear();
        for s in spans {
            self.buf.extend_from_slice(if self.first { b"[\n" } else { b",\n" });
            self.first = false;
            zipkin::v2::write_span(s, &mut self.buf, &mut self.losses);
        }
        self.out.write_all(&self.buf).map_err(io_err(zipkin::v2::FORMAT))
    }
    fn finish(mut self: Box<Self>) -> Result<Losses, CodecError> {
        let io = io_err(zipkin::v2::FORMAT);
        self.out.write_all(if self.first { b"[]\n" } else { b"\n]\n" }).map_err(&io)?;
        self.out.flush().map_err(&io)?;
        Ok(self.losses)
    }
}

struct ZipkinProtoWriter<W> {
    out: W,
    losses: Losses,
}

impl<W: Write> SpanWriter for ZipkinProtoWriter<W> {
    fn write(&mut self, spans: &[Span]) -> Result<(), CodecError> {
        let bytes = zipkin::encode_v2_proto_with(spans, &mut self.losses);
        self.out.write_all(&bytes).map_err(io_err(zipkin::proto::FORMAT))
    }
    fn finish(mut self: Box<Self>) -> Result<Losses, CodecError> {
        self.out.flush().map_err(io_err(zipkin::proto::FORMAT))?;
        Ok(self.losses)
    }
}

// ---------------------------------------------------------------------------------------
// External sort: bounded-memory ordering of a span stream (Jaeger groups by trace, Chrome
// lays out per service in time order).

/// Sorts spans by a key in bounded memory: runs of `run_spans` spans are sorted in memory
/// and spilled to files (length-delimited one-span OTLP requests — lossless), then merged.
pub(crate) struct ExternalSorter<K: Ord, F: Fn(&Span) -> K> {
    key: F,
    run: Vec<Span>,
    run_spans: usize,
    dir: PathBuf,
    files: Vec<PathBuf>,
    format: &'static str,
}

static RUN_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl<K: Ord, F: Fn(&Span) -> K> ExternalSorter<K, F> {
    pub(crate) fn new(format: &'static str, options: &WriterOptions, key: F) -> Self {
        ExternalSorter {
            key,
            run: Vec::new(),
            run_spans: options.sort_run_spans.max(1),
            dir: options.spill_dir.clone(),
            files: Vec::new(),
            format,
        }
    }

    pub(crate) fn push(&mut self, spans: &[Span]) -> Result<(), CodecError> {
        for s in spans {
            self.run.push(s.clone());
            if self.run.len() >= self.run_spans {
                self.spill()?;
            }
        }
        Ok(())
    }

    fn spill(&mut self) -> Result<(), CodecError> {
        let key = &self.key;
        self.run.sort_by_cached_key(|s| key(s));
        let seq = RUN_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = self.dir.join(format!("weft-sort-{}-{seq}.run", std::process::id()));
        let io = io_err(self.format);
        let f = std::fs::File::create(&path).map_err(|e| io(e).field(path.display().to_string()))?;
        self.files.push(path);
        let mut w = std::io::BufWriter::new(f);
        for s in self.run.drain(..) {
            let bytes = otlp::encode_proto(std::slice::from_ref(&s));
            let mut len = Vec::with_capacity(10);
            prost::encoding::encode_varint(bytes.len() as u64, &mut len);
            w.write_all(&len).map_err(&io)?;
            w.write_all(&bytes).map_err(&io)?;
        }
        w.flush().map_err(&io)?;
        Ok(())
    }

    /// Hands every span to `f` in key order.
    pub(crate) fn drain(
        mut self,
        mut f: impl FnMut(Span) -> Result<(), CodecError>,
    ) -> Result<(), CodecError> {
        if self.files.is_empty() {
            let key = &self.key;
            self.run.sort_by_cached_key(|s| key(s));
            for s in std::mem::take(&mut self.run) {
                f(s)?;
            }
            return Ok(());
        }
        if !self.run.is_empty() {
            self.spill()?;
        }
        let io = io_err(self.format);
        let mut runs = Vec::with_capacity(self.files.len());
        for p in &self.files {
            let file = std::fs::File::open(p).map_err(&io)?;
            runs.push(RunReader {
                r: std::io::BufReader::with_capacity(64 << 10, file),
                format: self.format,
            });
        }
        // k-way merge with a heap of (key, run index).
        let mut heads: Vec<Option<Span>> = Vec::with_capacity(runs.len());
        let mut heap = std::collections::BinaryHeap::new();
        for (i, r) in runs.iter_mut().enumerate() {
            let s = r.next()?;
            if let Some(s) = &s {
                heap.push(std::cmp::Reverse(((self.key)(s), i)));
            }
            heads.push(s);
        }
        while let Some(std::cmp::Reverse((_, i))) = heap.pop() {
            if let Some(s) = heads[i].take() {
                f(s)?;
            }
            let next = runs[i].next()?;
            if let Some(s) = &next {
                heap.push(std::cmp::Reverse(((self.key)(s), i)));
            }
            heads[i] = next;
        }
        Ok(())
    }
}

impl<K: Ord, F: Fn(&Span) -> K> Drop for ExternalSorter<K, F> {
    fn drop(&mut self) {
        for p in &self.files {
            let _ = std::fs::remove_file(p);
        }
    }
}

struct RunReader<R> {
    r: R,
    format: &'static str,
}

impl<R: BufRead> RunReader<R> {
    fn next(&mut self) -> Result<Option<Span>, CodecError> {
        if self.r.fill_buf().map_err(io_err(self.format))?.is_empty() {
            return Ok(None);
        }
        let mut len_bytes = Vec::with_capacity(10);
        loop {
            let mut b = [0u8; 1];
            self.r.read_exact(&mut b).map_err(io_err(self.format))?;
            len_bytes.push(b[0]);
            if b[0] & 0x80 == 0 || len_bytes.len() >= 10 {
                break;
            }
        }
        let mut p = 0;
        let len = otlp::wire::read_varint(&len_bytes, &mut p)
            .ok_or_else(|| CodecError::new(self.format, ErrorKind::Syntax, "corrupt sort run"))?;
        let mut buf = vec![0u8; len as usize];
        self.r.read_exact(&mut buf).map_err(io_err(self.format))?;
        let req: otlp::proto::ExportTraceServiceRequest = prost::Message::decode(buf.as_slice())
            .map_err(|e| CodecError::new(self.format, ErrorKind::Syntax, format!("corrupt sort run: {e}")))?;
        Ok(otlp::from_request(req)?.pop())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::fixture;

    #[test]
    fn external_sort_spills_and_merges_in_order() {
        let dir = std::env::temp_dir();
        let options = WriterOptions { spill_dir: dir, sort_run_spans: 7 };
        let spans = fixture::spans(100, 5);
        let mut sorter = ExternalSorter::new("test", &options, |s: &Span| (s.start_ns, s.span_id));
        sorter.push(&spans).unwrap();
        let files = sorter.files.clone();
        assert!(files.len() >= 10);
        let mut got = Vec::new();
        sorter
            .drain(|s| {
                got.push(s);
                Ok(())
            })
            .unwrap();
        let mut want = spans.clone();
        want.sort_by_key(|s| (s.start_ns, s.span_id));
        assert_eq!(got, want);
        assert!(files.iter().all(|p| !p.exists()), "runs are removed");
    }
}
