//! Errors and partial-success accounting shared by every codec.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::span::Span;

/// Where in the input an error was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Position {
    /// Not known (e.g. an already decoded message was handed to the converter).
    #[default]
    Unknown,
    /// A byte offset (binary formats).
    Offset(u64),
    /// A line and column, both 1-based, and the byte offset of the line's start when known
    /// (text formats).
    Line {
        /// 1-based line.
        line: u64,
        /// 1-based column (in bytes).
        column: u64,
    },
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Position::Unknown => Ok(()),
            Position::Offset(o) => write!(f, "byte {o}"),
            Position::Line { line, column } => write!(f, "line {line}, column {column}"),
        }
    }
}

/// What went wrong, coarsely (for callers that react differently, e.g. "wrong format" vs
/// "damaged file").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Not well-formed (JSON syntax, protobuf wire format).
    Syntax,
    /// The input ends inside a record.
    Truncated,
    /// A field has the wrong type or an impossible value.
    InvalidValue,
    /// A trace or span id is missing, all zero, or of the wrong length.
    InvalidId,
    /// The input is well-formed but is not the format it was read as.
    Mismatch,
    /// Reading or writing failed.
    Io,
}

/// A codec error: names the format, the file (once known), the position (byte offset, or
/// line and column), the field (a JSON path such as `resourceSpans[0].scopeSpans[1].spans[4].traceId`
/// or a protobuf field path) and what is wrong. The details are boxed (one pointer on the
/// `Err` path) and readable through `Deref` (`err.field`, `err.kind`, ...).
pub struct CodecError(Box<ErrorDetails>);

/// The details of a [`CodecError`].
#[derive(Debug)]
pub struct ErrorDetails {
    /// Format being read or written (`"OTLP protobuf"`, `"Zipkin v2 JSON"`, ...).
    pub format: &'static str,
    /// The file, when the caller knows it ([`CodecError::in_file`]).
    pub file: Option<PathBuf>,
    /// Position in the input.
    pub position: Position,
    /// The field path (empty when the error is not inside a field).
    pub field: String,
    /// Coarse kind.
    pub kind: ErrorKind,
    /// What is wrong.
    pub message: String,
    /// Underlying error, if any.
    pub source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl std::ops::Deref for CodecError {
    type Target = ErrorDetails;
    fn deref(&self) -> &ErrorDetails {
        &self.0
    }
}

impl fmt::Debug for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Debug shows the message too, so `unwrap()` failures in tests read well.
        write!(f, "CodecError({self})")
    }
}

impl std::error::Error for CodecError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source.as_deref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(p) = &self.file {
            write!(f, "{}: ", p.display())?;
        }
        f.write_str(self.format)?;
        if self.position != Position::Unknown {
            write!(f, ", {}", self.position)?;
        }
        if !self.field.is_empty() {
            write!(f, ", field {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl CodecError {
    /// A new error without position or field.
    pub fn new(format: &'static str, kind: ErrorKind, message: impl Into<String>) -> Self {
        CodecError(Box::new(ErrorDetails {
            format,
            file: None,
            position: Position::Unknown,
            field: String::new(),
            kind,
            message: message.into(),
            source: None,
        }))
    }
    /// Sets the field path.
    pub fn field(mut self, field: impl Into<String>) -> Self {
        self.0.field = field.into();
        self
    }
    /// Sets the position.
    pub fn at(mut self, position: Position) -> Self {
        self.0.position = position;
        self
    }
    /// Sets the underlying error.
    pub fn source(mut self, e: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.0.source = Some(Box::new(e));
        self
    }
    /// Appends a hint to the message (e.g. which format the input looks like).
    pub fn hint(mut self, hint: &str) -> Self {
        self.0.message = format!("{} ({hint})", self.0.message);
        self
    }
    /// Names the file the error is in.
    pub fn in_file(mut self, path: impl AsRef<Path>) -> Self {
        self.0.file = Some(path.as_ref().to_path_buf());
        self
    }
    /// Prefixes the field path with `prefix` (`prefix.field`, or `prefix` alone).
    pub fn within(mut self, prefix: &str) -> Self {
        if prefix.is_empty() {
            return self;
        }
        let d = &mut self.0;
        d.field = if d.field.is_empty() {
            prefix.to_owned()
        } else if d.field.starts_with('[') {
            format!("{prefix}{}", d.field)
        } else {
            format!("{prefix}.{}", d.field)
        };
        self
    }
    /// Moves a position that is relative to a fragment starting at `base` (line, column and
    /// byte offset of the fragment's first byte) into whole-input coordinates.
    pub fn shifted(mut self, base_line: u64, base_column: u64, base_offset: u64) -> Self {
        self.0.position = match self.0.position {
            Position::Line { line, column } => {
                let column = if line <= 1 { column + base_column.saturating_sub(1) } else { column };
                Position::Line { line: line + base_line.saturating_sub(1), column }
            }
            Position::Offset(o) => Position::Offset(o + base_offset),
            Position::Unknown => Position::Unknown,
        };
        self
    }
    /// An I/O error while reading or writing `format`.
    pub fn io(format: &'static str, e: std::io::Error) -> Self {
        let kind = match e.kind() {
            std::io::ErrorKind::UnexpectedEof => ErrorKind::Truncated,
            std::io::ErrorKind::InvalidData => ErrorKind::Syntax,
            _ => ErrorKind::Io,
        };
        CodecError::new(format, kind, e.to_string()).source(e)
    }
}

/// Spans a lenient decoder refused (invalid ids and other per-span defects) while keeping
/// the rest of the batch — what an OTLP receiver reports as `partial_success`.
#[derive(Debug, Default)]
pub struct Rejected {
    /// How many spans were refused.
    pub count: u64,
    /// Why the first one was refused.
    pub first_error: Option<CodecError>,
    /// Why the next few were refused (up to [`Rejected::KEPT_ERRORS`] errors are kept in all,
    /// the rest only counted: memory stays bounded however bad the input).
    pub more_errors: Vec<CodecError>,
}

impl Rejected {
    /// How many errors are kept (the first one included).
    pub const KEPT_ERRORS: usize = 5;

    /// Records one refused span.
    pub fn add(&mut self, e: CodecError) {
        self.count += 1;
        if self.first_error.is_none() {
            self.first_error = Some(e);
        } else if self.more_errors.len() + 1 < Self::KEPT_ERRORS {
            self.more_errors.push(e);
        }
    }
    /// Adds another tally to this one.
    pub fn merge(&mut self, other: Rejected) {
        self.count += other.count;
        for e in other.first_error.into_iter().chain(other.more_errors) {
            if self.first_error.is_none() {
                self.first_error = Some(e);
            } else if self.more_errors.len() + 1 < Self::KEPT_ERRORS {
                self.more_errors.push(e);
            }
        }
    }
    /// The kept errors, first one first.
    pub fn errors(&self) -> impl Iterator<Item = &CodecError> {
        self.first_error.iter().chain(&self.more_errors)
    }
    /// True when nothing was refused.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// How a decoder treats a span it cannot accept (invalid id, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The first bad span fails the whole input.
    Strict,
    /// Bad spans are counted in [`Rejected`] and skipped.
    Lenient,
}

/// A whole input decoded strictly: `decode` fills the spans; the first bad span fails it.
pub(crate) fn strict(
    decode: impl FnOnce(Mode, &mut Vec<Span>, &mut Rejected) -> Result<(), CodecError>,
) -> Result<Vec<Span>, CodecError> {
    let mut out = Vec::new();
    decode(Mode::Strict, &mut out, &mut Rejected::default())?;
    Ok(out)
}

/// A whole input decoded leniently: `decode` fills the spans and counts the bad ones.
pub(crate) fn lenient(
    decode: impl FnOnce(Mode, &mut Vec<Span>, &mut Rejected) -> Result<(), CodecError>,
) -> Result<(Vec<Span>, Rejected), CodecError> {
    let mut out = Vec::new();
    let mut rejected = Rejected::default();
    decode(Mode::Lenient, &mut out, &mut rejected)?;
    Ok((out, rejected))
}

/// Collects spans and rejections for one decode call.
pub(crate) struct Sink<'a> {
    pub mode: Mode,
    pub rejected: &'a mut Rejected,
}

impl Sink<'_> {
    /// Handles a per-span error: strict mode returns it, lenient mode counts it.
    pub fn reject(&mut self, e: CodecError) -> Result<(), CodecError> {
        match self.mode {
            Mode::Strict => Err(e),
            Mode::Lenient => {
                self.rejected.add(e);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_file_position_and_field() {
        let e = CodecError::new("OTLP JSON", ErrorKind::InvalidId, "not hex")
            .field("traceId")
            .within("spans[3]")
            .within("resourceSpans[0].scopeSpans[1]")
            .at(Position::Line { line: 1, column: 7 })
            .shifted(10, 3, 0)
            .in_file("in.json");
        assert_eq!(
            e.to_string(),
            "in.json: OTLP JSON, line 10, column 9, field resourceSpans[0].scopeSpans[1].spans[3].traceId: not hex"
        );
        let e = CodecError::new("OTLP protobuf", ErrorKind::Truncated, "ends early").at(Position::Offset(12));
        assert_eq!(e.to_string(), "OTLP protobuf, byte 12: ends early");
    }
}
