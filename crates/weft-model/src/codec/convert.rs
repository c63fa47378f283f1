//! Whole-file conversion between trace formats — the library behind `weft convert`.
//!
//! [`convert`] pulls spans from a [`stream::reader`] a batch at a time and pushes them into a
//! [`stream::writer`], so memory is bounded by the batch size and the largest record of the
//! input (one OTLP `ResourceSpans`, one Zipkin span, one Jaeger trace), never by the file. It
//! returns a [`ConvertReport`]: spans read and written, spans refused (with the first few
//! errors), and what the target format could not carry ([`Losses`]).
//!
//! [`resolve_input`] picks the input format: an explicit choice, else what the content looks
//! like ([`Format::detect`]), else the file name ([`Format::from_path`]).
//!
//! Failure rules (so a conversion never silently produces an empty or partial output):
//! * malformed input (syntax, truncation, the wrong format) fails with a [`CodecError`] that
//!   names the position (byte offset, or line and column) and the field; when the input
//!   looks like another format than the one it was read as, the message says which;
//! * spans with per-span defects (invalid ids, undecodable span objects) are skipped and
//!   counted in lenient mode, and fail the conversion in strict mode;
//! * an input that yields no span at all is an error (unless `allow_empty`): empty or
//!   all-rejected input is reported, not turned into an empty document.

use std::io::{BufRead, Write};
use std::path::Path;

use crate::codec::Losses;
use crate::codec::error::{CodecError, ErrorKind, Rejected};
use crate::codec::stream::{self, Format, WriterOptions};

/// How [`convert`] behaves.
#[derive(Debug, Clone)]
pub struct ConvertOptions {
    /// Skip and count spans with per-span defects instead of failing (default `true`).
    pub lenient: bool,
    /// Accept an input without spans (an empty output document is written).
    pub allow_empty: bool,
    /// Spans handed from the reader to the writer at a time.
    pub batch_spans: usize,
    /// Scratch space for sorting writers (Jaeger, Chrome).
    pub writer: WriterOptions,
}

impl Default for ConvertOptions {
    fn default() -> Self {
        ConvertOptions {
            lenient: true,
            allow_empty: false,
            batch_spans: 4096,
            writer: WriterOptions::default(),
        }
    }
}

/// What a conversion did.
#[derive(Debug)]
pub struct ConvertReport {
    /// Input format.
    pub from: Format,
    /// Output format.
    pub to: Format,
    /// Spans decoded from the input (not counting refused ones).
    pub spans_read: u64,
    /// Spans handed to the writer.
    pub spans_written: u64,
    /// Spans refused, with the first few reasons.
    pub rejected: Rejected,
    /// What the output format could not carry.
    pub losses: Losses,
}

/// Picks the input format: `explicit` if given, else the content's look (`prefix`: the first
/// bytes of the input, a few KiB or more), else the file name. `None` when nothing fits.
pub fn resolve_input(explicit: Option<Format>, path: Option<&Path>, prefix: &[u8]) -> Option<Format> {
    explicit.or_else(|| Format::detect(prefix)).or_else(|| path.and_then(Format::from_path))
}

/// Converts `input` (in format `from`) to `output` (in format `to`). `prefix` is what the
/// caller already peeked at to detect the format (used for the mismatch hint; may be empty).
/// `progress` is called after each batch with the spans read so far.
pub fn convert<R: BufRead, W: Write>(
    from: Format,
    to: Format,
    input: R,
    output: W,
    options: &ConvertOptions,
    prefix: &[u8],
    mut progress: impl FnMut(u64),
) -> Result<ConvertReport, CodecError> {
    if !from.can_read() {
        return Err(CodecError::new(
            from.name(),
            ErrorKind::Mismatch,
            format!("weft cannot read {} (it only writes it)", from.name()),
        ));
    }
    if !to.can_write() {
        return Err(CodecError::new(
            to.name(),
            ErrorKind::Mismatch,
            format!("weft cannot write {} (it only reads it)", to.name()),
        ));
    }
    let mismatch_hint = |e: CodecError| -> CodecError {
        if !matches!(e.kind, ErrorKind::Syntax | ErrorKind::Mismatch | ErrorKind::InvalidValue) {
            return e;
        }
        match Format::detect(prefix) {
            Some(seen) if seen != from => e.hint(&format!(
                "the input looks like {}, not {}: try --from {}",
                seen.name(),
                from.name(),
                seen.cli_name()
            )),
            _ => e,
        }
    };
    let mut reader = stream::reader(from, input, options.lenient)?;
    let mut writer = stream::writer(to, output, options.writer.clone())?;
    let batch_spans = options.batch_spans.max(1);
    let mut batch = Vec::with_capacity(batch_spans.min(1 << 16));
    let mut read = 0u64;
    loop {
        batch.clear();
        let more = reader.next_batch(&mut batch, batch_spans).map_err(mismatch_hint)?;
        if !batch.is_empty() {
            read += batch.len() as u64;
            writer.write(&batch)?;
            progress(read);
        }
        if !more {
            break;
        }
    }
    let rejected = reader.take_rejected();
    if read == 0 && !options.allow_empty {
        let e = if let Some(first) = rejected.first_error {
            let n = rejected.count;
            let msg =
                format!("none of the input's spans could be converted ({n} refused); the first: {first}");
            CodecError::new(from.name(), first.kind, msg).field(first.field.clone()).at(first.position)
        } else {
            let e = CodecError::new(from.name(), ErrorKind::Mismatch, "the input holds no spans");
            match Format::detect(prefix) {
                None if prefix.iter().all(u8::is_ascii_whitespace) => {
                    CodecError::new(from.name(), ErrorKind::Truncated, "the input is empty")
                }
                Some(seen) if seen != from => {
                    e.hint(&format!("it looks like {}: try --from {}", seen.name(), seen.cli_name()))
                }
                _ => e,
            }
        };
        return Err(e);
    }
    let losses = writer.finish()?;
    Ok(ConvertReport { from, to, spans_read: read, spans_written: read, rejected, losses })
}
