//! Protobuf wire-format walking of a message's top level: lets decoders take a large
//! request one repeated element at a time (bounded memory) and name byte offsets in errors.

use std::io::Read;

use crate::codec::error::{CodecError, ErrorKind, Position};

/// Reads a base-128 varint from `b` at `*pos`.
pub(crate) fn read_varint(b: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..70).step_by(7) {
        let byte = *b.get(*pos)?;
        *pos += 1;
        if shift == 63 && byte > 1 {
            return None;
        }
        v |= ((byte & 0x7f) as u64) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// Iterates the length-delimited field number 1 of a message (the repeated top-level field of
/// `ExportTraceServiceRequest` and of Zipkin's `ListOfSpans`), yielding each element with its
/// byte offset; other fields are skipped, as protobuf requires for unknown fields.
pub(crate) struct TopLevel<'a> {
    bytes: &'a [u8],
    pos: usize,
    format: &'static str,
    field: &'static str,
    failed: bool,
}

impl<'a> TopLevel<'a> {
    pub(crate) fn new(bytes: &'a [u8], format: &'static str, field: &'static str) -> Self {
        TopLevel { bytes, pos: 0, format, field, failed: false }
    }
}

impl<'a> Iterator for TopLevel<'a> {
    type Item = Result<(u64, &'a [u8]), CodecError>;
    fn next(&mut self) -> Option<Self::Item> {
        while !self.failed && self.pos < self.bytes.len() {
            match next_field(self.bytes, &mut self.pos, self.format, self.field) {
                Ok(Some(item)) => return Some(Ok(item)),
                Ok(None) => {}
                Err(e) => {
                    self.failed = true;
                    let e = if e.field.is_empty() { e.field(self.field) } else { e };
                    return Some(Err(e));
                }
            }
        }
        None
    }
}

fn err(format: &'static str, kind: ErrorKind, offset: usize, msg: String) -> CodecError {
    CodecError::new(format, kind, msg).at(Position::Offset(offset as u64))
}

/// Steps over one top-level field; returns the element when it is field 1 (LEN).
fn next_field<'a>(
    b: &'a [u8],
    pos: &mut usize,
    format: &'static str,
    field: &'static str,
) -> Result<Option<(u64, &'a [u8])>, CodecError> {
    let start = *pos;
    let key = read_varint(b, pos).ok_or_else(|| {
        let kind = if b.len() - start < 10 { ErrorKind::Truncated } else { ErrorKind::Syntax };
        err(format, kind, start, "malformed field key (varint)".into())
    })?;
    let number = key >> 3;
    let wire = key & 7;
    if key > u32::MAX as u64 {
        return Err(err(
            format,
            ErrorKind::Syntax,
            start,
            format!("invalid field key {key} (not protobuf?)"),
        ));
    }
    if number == 0 {
        return Err(err(
            format,
            ErrorKind::Syntax,
            start,
            "field number 0 is invalid (not protobuf?)".into(),
        ));
    }
    if number == 1 && wire != 2 {
        return Err(err(
            format,
            ErrorKind::Syntax,
            start,
            format!("field 1 ({field}) has wire type {wire}, not length-delimited (not this format?)"),
        ));
    }
    match wire {
        0 => {
            read_varint(b, pos).ok_or_else(|| {
                err(format, ErrorKind::Truncated, start, format!("field {number}: truncated varint"))
            })?;
            Ok(None)
        }
        1 | 5 => {
            let n = if wire == 1 { 8 } else { 4 };
            if b.len() - *pos < n {
                return Err(err(
                    format,
                    ErrorKind::Truncated,
                    start,
                    format!("field {number}: truncated fixed{}", n * 8),
                ));
            }
            *pos += n;
            Ok(None)
        }
        2 => {
            let len = read_varint(b, pos).ok_or_else(|| {
                err(format, ErrorKind::Truncated, start, format!("field {number}: truncated length"))
            })?;
            let body = *pos;
            let remaining = (b.len() - body) as u64;
            if len > remaining {
                return Err(err(
                    format,
                    ErrorKind::Truncated,
                    start,
                    format!(
                        "field {number} ({field}) declares {len} bytes but only {remaining} remain (truncated?)"
                    ),
                ));
            }
            *pos = body + len as usize;
            if number == 1 { Ok(Some((body as u64, &b[body..*pos]))) } else { Ok(None) }
        }
        w => Err(err(
            format,
            ErrorKind::Syntax,
            start,
            format!("field {number}: unsupported wire type {w} (not protobuf?)"),
        )),
    }
}

/// Reads a varint from a stream; `Ok(None)` at a clean end of input before the first byte.
fn read_varint_io(r: &mut impl Read, consumed: &mut u64) -> std::io::Result<Option<u64>> {
    let mut v = 0u64;
    for i in 0..10 {
        let mut byte = [0u8; 1];
        let n = read_full(r, &mut byte)?;
        if n == 0 {
            if i == 0 {
                return Ok(None);
            }
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "input ends inside a varint"));
        }
        *consumed += 1;
        if i == 9 && byte[0] > 1 {
            // The tenth byte may only hold bit 63 (the same rule as `read_varint`).
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "malformed varint (overflows 64 bits)",
            ));
        }
        v |= ((byte[0] & 0x7f) as u64) << (7 * i);
        if byte[0] & 0x80 == 0 {
            return Ok(Some(v));
        }
    }
    Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "malformed varint (longer than 10 bytes)"))
}

fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match r.read(&mut buf[done..]) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// The streaming counterpart of [`TopLevel`]: pulls field-1 elements one at a time from a
/// reader, holding only the current element in memory.
pub(crate) struct TopLevelReader<R> {
    inner: R,
    offset: u64,
    format: &'static str,
    field: &'static str,
    /// Largest element accepted (a corrupt length must not make us allocate terabytes).
    max_element: u64,
    buf: Vec<u8>,
}

impl<R: Read> TopLevelReader<R> {
    pub(crate) fn new(inner: R, format: &'static str, field: &'static str) -> Self {
        TopLevelReader { inner, offset: 0, format, field, max_element: 2 << 30, buf: Vec::new() }
    }

    /// The next element and its byte offset, or `None` at the end of input. Errors name the
    /// byte offset and the field being walked.
    pub(crate) fn next_element(&mut self) -> Result<Option<(u64, &[u8])>, CodecError> {
        let field = self.field;
        match self.next_element_inner() {
            Ok(Some((offset, len))) => Ok(Some((offset, &self.buf[..len]))),
            Ok(None) => Ok(None),
            Err(e) if e.field.is_empty() => Err(e.field(field)),
            Err(e) => Err(e),
        }
    }

    fn next_element_inner(&mut self) -> Result<Option<(u64, usize)>, CodecError> {
        let format = self.format;
        loop {
            let start = self.offset;
            let io_err = |e: std::io::Error| CodecError::io(format, e).at(Position::Offset(start));
            let Some(key) = read_varint_io(&mut self.inner, &mut self.offset).map_err(io_err)? else {
                return Ok(None);
            };
            let number = key >> 3;
            if key > u32::MAX as u64 {
                return Err(CodecError::new(
                    format,
                    ErrorKind::Syntax,
                    format!("invalid field key {key} (not protobuf?)"),
                )
                .at(Position::Offset(start)));
            }
            if number == 0 {
                return Err(err(
                    format,
                    ErrorKind::Syntax,
                    start as usize,
                    "field number 0 is invalid (not protobuf?)".into(),
                )
                .at(Position::Offset(start)));
            }
            if number == 1 && key & 7 != 2 {
                return Err(CodecError::new(
                    format,
                    ErrorKind::Syntax,
                    format!(
                        "field 1 ({}) has wire type {}, not length-delimited (not this format?)",
                        self.field,
                        key & 7
                    ),
                )
                .at(Position::Offset(start)));
            }
            let skip = match key & 7 {
                0 => {
                    read_varint_io(&mut self.inner, &mut self.offset)
                        .map_err(io_err)?
                        .ok_or_else(|| truncated(format, start, number))?;
                    continue;
                }
                1 => 8,
                5 => 4,
                2 => read_varint_io(&mut self.inner, &mut self.offset)
                    .map_err(io_err)?
                    .ok_or_else(|| truncated(format, start, number))?,
                w => {
                    return Err(CodecError::new(
                        format,
                        ErrorKind::Syntax,
                        format!("field {number}: unsupported wire type {w} (not protobuf?)"),
                    )
                    .at(Position::Offset(start)));
                }
            };
            if number == 1 && key & 7 == 2 {
                if skip > self.max_element {
                    return Err(CodecError::new(
                        format,
                        ErrorKind::Syntax,
                        format!("field 1 ({}) declares {skip} bytes, more than the 2 GiB limit", self.field),
                    )
                    .at(Position::Offset(start)));
                }
                self.buf.clear();
                let body = self.offset;
                let got = (&mut self.inner).take(skip).read_to_end(&mut self.buf).map_err(io_err)? as u64;
                self.offset += got;
                if got < skip {
                    return Err(CodecError::new(
                        format,
                        ErrorKind::Truncated,
                        format!(
                            "field 1 ({}) declares {skip} bytes but the input ends after {got} (truncated?)",
                            self.field
                        ),
                    )
                    .at(Position::Offset(start)));
                }
                return Ok(Some((body, self.buf.len())));
            }
            let got =
                std::io::copy(&mut (&mut self.inner).take(skip), &mut std::io::sink()).map_err(io_err)?;
            self.offset += got;
            if got < skip {
                return Err(truncated(format, start, number));
            }
        }
    }
}

fn truncated(format: &'static str, start: u64, number: u64) -> CodecError {
    CodecError::new(
        format,
        ErrorKind::Truncated,
        format!("field {number}: input ends inside the field (truncated?)"),
    )
    .at(Position::Offset(start))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_and_skips_unknown_fields() {
        // field 1 "ab", field 3 varint 150, field 1 "c", field 4 fixed32
        let b = [0x0a, 2, b'a', b'b', 0x18, 0x96, 0x01, 0x0a, 1, b'c', 0x25, 1, 2, 3, 4];
        let got: Vec<_> = TopLevel::new(&b, "t", "f").map(|r| r.unwrap()).collect();
        assert_eq!(got, vec![(2, &b"ab"[..]), (9, &b"c"[..])]);
        let mut r = TopLevelReader::new(&b[..], "t", "f");
        assert_eq!(r.next_element().unwrap().map(|(o, e)| (o, e.to_vec())), Some((2, b"ab".to_vec())));
        assert_eq!(r.next_element().unwrap().map(|(o, e)| (o, e.to_vec())), Some((9, b"c".to_vec())));
        assert!(r.next_element().unwrap().is_none());
    }

    #[test]
    fn truncation_names_offset() {
        let b = [0x0a, 2, b'a', b'b', 0x0a, 5, b'x'];
        let e = TopLevel::new(&b, "t", "resource_spans").nth(1).unwrap().unwrap_err();
        assert_eq!(e.kind, ErrorKind::Truncated);
        assert_eq!(e.position, Position::Offset(4));
        let mut r = TopLevelReader::new(&b[..], "t", "resource_spans");
        r.next_element().unwrap();
        let e = r.next_element().unwrap_err();
        assert_eq!(e.position, Position::Offset(4));
        assert!(e.to_string().contains("declares 5 bytes"), "{e}");
    }

    #[test]
    fn overlong_varints_fail_in_both_walkers() {
        let b = [0x8d, 0x8d, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x14, 0x60];
        assert!(TopLevel::new(&b, "t", "f").any(|r| r.is_err()));
        let e = TopLevelReader::new(&b[..], "t", "f").next_element().unwrap_err();
        assert_eq!(e.kind, ErrorKind::Syntax, "{e}");
        assert_eq!(e.position, Position::Offset(0));
    }

    #[test]
    fn keys_beyond_32_bits_fail_in_both_walkers() {
        // From the fuzzer: a key varint of 2^55 or so, which prost refuses.
        let b = [0xa0, 0x9f, 0x9f, 0x9f, 0x9f, 0x9f, 0x9f, 0x24, 0x00];
        let e = TopLevel::new(&b, "t", "f").find_map(Result::err).unwrap();
        assert!(e.message.contains("invalid field key"), "{e}");
        let e = TopLevelReader::new(&b[..], "t", "f").next_element().unwrap_err();
        assert!(e.message.contains("invalid field key"), "{e}");
    }

    #[test]
    fn the_repeated_field_must_be_length_delimited() {
        // From the fuzzer: field 1 as a varint, which prost refuses.
        let b = [0x08, 0xff, 0xfe, 0xff, 0x8d, 0x65];
        let e = TopLevel::new(&b, "t", "resource_spans").find_map(Result::err).unwrap();
        assert!(e.message.contains("not length-delimited"), "{e}");
        let e = TopLevelReader::new(&b[..], "t", "resource_spans").next_element().unwrap_err();
        assert!(e.message.contains("not length-delimited"), "{e}");
    }

    #[test]
    fn garbage_is_an_error() {
        for b in [&b"{\"a\":1}"[..], &[0x07][..], &[0x0a][..], &[0xff; 12][..]] {
            assert!(TopLevel::new(b, "t", "f").any(|r| r.is_err()), "{b:?}");
        }
    }
}
