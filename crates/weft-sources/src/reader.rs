//! Reading line-oriented inputs — regular files and named pipes (FIFOs) — with bounded memory.
//!
//! [`LineReader`] reads fixed-size chunks into one reusable buffer and hands out complete
//! lines as slices of it (no per-line allocation). Its memory is bounded by
//! `max_line + chunk` bytes whatever the input: a line longer than `max_line` is reported as
//! [`LineItem::TooLong`] and discarded up to its newline, never buffered whole.
//!
//! Line numbers and byte offsets depend only on the bytes, never on how the OS split them
//! into reads, so a file and a FIFO carrying the same bytes give identical items (the
//! determinism the weaver relies on). A final line without `\n` is delivered with
//! `terminated == false`; a trailing `\r` is stripped.
//!
//! [`open_input`] opens a path for reading; for a FIFO it blocks until a writer opens the other
//! end (as any reader of a named pipe does) and enlarges the pipe buffer (`F_SETPIPE_SZ`) so
//! a bursty simulator blocks less often.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use crate::error::SourceError;

/// Default read size.
pub const DEFAULT_CHUNK: usize = 256 * 1024;
/// Default longest accepted line (nicbm's DMA payload dumps of jumbo frames reach ~90 KB).
pub const DEFAULT_MAX_LINE: usize = 1024 * 1024;
/// Pipe buffer size requested for FIFOs.
pub const PIPE_BUFFER: usize = 1024 * 1024;

/// What kind of input was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// A regular file of this many bytes (at open time).
    File {
        /// Size in bytes when opened.
        len: u64,
    },
    /// A named pipe (or another stream: a character device, a socket): length unknown.
    Stream,
}

/// An opened input.
#[derive(Debug)]
pub struct Input {
    /// The open file.
    pub file: File,
    /// File or stream.
    pub kind: InputKind,
}

/// Opens `path` for reading. FIFOs block here until a writer appears.
pub fn open_input(path: &Path) -> Result<Input, SourceError> {
    let file = File::open(path).map_err(|e| SourceError::io(path, "open", e))?;
    let meta = file.metadata().map_err(|e| SourceError::io(path, "stat", e))?;
    let kind = if meta.is_file() { InputKind::File { len: meta.len() } } else { InputKind::Stream };
    if kind == InputKind::Stream {
        enlarge_pipe(&file);
    }
    Ok(Input { file, kind })
}

#[cfg(target_os = "linux")]
fn enlarge_pipe(file: &File) {
    use std::os::fd::AsRawFd;
    // SAFETY: fcntl on a valid, owned descriptor with an integer argument; failure (not a
    // pipe, or above /proc/sys/fs/pipe-max-size) is harmless and only logged.
    let r = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_BUFFER as libc::c_int) };
    if r < 0 {
        tracing::debug!("F_SETPIPE_SZ failed: {}", io::Error::last_os_error());
    }
}

#[cfg(not(target_os = "linux"))]
fn enlarge_pipe(_file: &File) {}

/// One complete line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Line<'a> {
    /// The line without its `\n` (and without a `\r` before it).
    pub text: &'a [u8],
    /// 1-based line number.
    pub number: u64,
    /// Byte offset of the line's first byte in the input.
    pub offset: u64,
    /// False for a final line that ended without `\n` (end of input, e.g. a pipe closed early).
    pub terminated: bool,
}

/// What the reader hands out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineItem<'a> {
    /// A line.
    Line(Line<'a>),
    /// A line longer than the limit (`max_line` bytes); its bytes are discarded. `prefix` is
    /// its start.
    TooLong {
        /// 1-based line number.
        number: u64,
        /// Byte offset of the line's start.
        offset: u64,
        /// The first bytes of the line (for the reject sample).
        prefix: &'a [u8],
    },
}

/// Chunked line reader with a bounded buffer (see the module docs).
#[derive(Debug)]
pub struct LineReader<R> {
    inner: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Bytes in `buf[start..scanned]` are known to hold no newline.
    scanned: usize,
    chunk: usize,
    max_line: usize,
    next_number: u64,
    /// Input offset of `buf[start]`.
    offset: u64,
    /// Discarding the rest of an over-long line.
    skipping: bool,
    eof: bool,
    bytes_read: u64,
}

impl<R: Read> LineReader<R> {
    /// A reader with the default chunk and line limit.
    pub fn new(inner: R) -> Self {
        Self::with_limits(inner, DEFAULT_CHUNK, DEFAULT_MAX_LINE)
    }

    /// A reader reading `chunk` bytes at a time and accepting lines up to `max_line` bytes.
    pub fn with_limits(inner: R, chunk: usize, max_line: usize) -> Self {
        let chunk = chunk.max(1);
        let max_line = max_line.max(1);
        LineReader {
            inner,
            buf: vec![0; max_line + chunk],
            start: 0,
            end: 0,
            scanned: 0,
            chunk,
            max_line,
            next_number: 1,
            offset: 0,
            skipping: false,
            eof: false,
            bytes_read: 0,
        }
    }

    /// Bytes read from the input so far.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// True once the input ended and every line was handed out.
    pub fn is_done(&self) -> bool {
        self.eof
    }

    /// Reads once (one `read` call, retried on `EINTR`) and calls `f` for every line that is
    /// now complete. Returns the number of bytes read; `0` means the input ended (the final
    /// unterminated line, if any, was delivered in that call).
    pub fn read_lines(&mut self, mut f: impl FnMut(LineItem<'_>)) -> io::Result<usize> {
        if self.eof {
            return Ok(0);
        }
        // Make room for one chunk after the pending partial line.
        if self.buf.len() - self.end < self.chunk {
            self.buf.copy_within(self.start..self.end, 0);
            self.scanned -= self.start;
            self.end -= self.start;
            self.start = 0;
        }
        let n = loop {
            let lim = (self.end + self.chunk).min(self.buf.len());
            match self.inner.read(&mut self.buf[self.end..lim]) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        };
        self.end += n;
        self.bytes_read += n as u64;
        self.deliver(&mut f);
        if n == 0 {
            self.eof = true;
            if self.start < self.end && !self.skipping {
                let text = strip_cr(&self.buf[self.start..self.end]);
                f(LineItem::Line(Line {
                    text,
                    number: self.next_number,
                    offset: self.offset,
                    terminated: false,
                }));
                self.next_number += 1;
            }
            self.offset += (self.end - self.start) as u64;
            self.start = self.end;
            self.scanned = self.end;
        }
        Ok(n)
    }

    fn deliver(&mut self, f: &mut impl FnMut(LineItem<'_>)) {
        loop {
            let from = self.scanned.max(self.start);
            match memchr::memchr(b'\n', &self.buf[from..self.end]) {
                Some(i) => {
                    let nl = from + i;
                    if self.skipping {
                        self.skipping = false;
                    } else if nl - self.start > self.max_line {
                        let prefix = &self.buf[self.start..self.start + 256.min(nl - self.start)];
                        f(LineItem::TooLong { number: self.next_number, offset: self.offset, prefix });
                    } else {
                        let text = strip_cr(&self.buf[self.start..nl]);
                        f(LineItem::Line(Line {
                            text,
                            number: self.next_number,
                            offset: self.offset,
                            terminated: true,
                        }));
                    }
                    self.next_number += 1;
                    self.offset += (nl + 1 - self.start) as u64;
                    self.start = nl + 1;
                    self.scanned = self.start;
                }
                None => {
                    self.scanned = self.end;
                    if !self.skipping && self.end - self.start > self.max_line {
                        let prefix = &self.buf[self.start..self.start + 256.min(self.end - self.start)];
                        f(LineItem::TooLong { number: self.next_number, offset: self.offset, prefix });
                        self.skipping = true;
                    }
                    if self.skipping {
                        // Drop the buffered part of the over-long line (its number is kept).
                        self.offset += (self.end - self.start) as u64;
                        self.start = self.end;
                        self.scanned = self.end;
                    }
                    return;
                }
            }
        }
    }
}

fn strip_cr(s: &[u8]) -> &[u8] {
    match s.last() {
        Some(b'\r') => &s[..s.len() - 1],
        _ => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads everything, returning (number, offset, text, terminated) or a TooLong marker.
    fn collect(data: &[u8], chunk: usize, max_line: usize) -> Vec<(u64, u64, String, bool)> {
        let mut r = LineReader::with_limits(data, chunk, max_line);
        let mut out = Vec::new();
        loop {
            let n = r
                .read_lines(|it| match it {
                    LineItem::Line(l) => out.push((
                        l.number,
                        l.offset,
                        String::from_utf8_lossy(l.text).into_owned(),
                        l.terminated,
                    )),
                    LineItem::TooLong { number, offset, .. } => {
                        out.push((number, offset, "<long>".into(), true))
                    }
                })
                .unwrap();
            if n == 0 {
                break;
            }
        }
        out
    }

    #[test]
    fn lines_offsets_and_final_line() {
        let got = collect(b"ab\r\n\ncd\nef", 3, 100);
        assert_eq!(
            got,
            vec![
                (1, 0, "ab".into(), true),
                (2, 4, "".into(), true),
                (3, 5, "cd".into(), true),
                (4, 8, "ef".into(), false),
            ]
        );
    }

    #[test]
    fn long_lines_are_bounded_and_reported() {
        let mut data = b"ok\n".to_vec();
        data.extend(std::iter::repeat_n(b'x', 50));
        data.extend(b"\nafter\n");
        let got = collect(&data, 4, 10);
        assert_eq!(got[0], (1, 0, "ok".into(), true));
        assert_eq!(got[1], (2, 3, "<long>".into(), true));
        assert_eq!(got[2], (3, 54, "after".into(), true));
        assert_eq!(got.len(), 3);
    }

    proptest::proptest! {
        /// Chunking never changes what comes out.
        #[test]
        fn chunking_is_invisible(data in proptest::collection::vec(
            proptest::prop_oneof![proptest::strategy::Just(b'\n'), proptest::strategy::Just(b'a'), proptest::strategy::Just(b'\r')], 0..300),
            chunk in 1usize..40, max_line in 1usize..30) {
            let a = collect(&data, chunk, max_line);
            let b = collect(&data, 4096, max_line);
            proptest::prop_assert_eq!(a, b);
        }
    }
}
