//! The trace's metadata as declared in TSDL: types, the trace/env/clock/stream/event blocks;
//! and reading the metadata file in either form (plain text starting `/* CTF 1.8`, or the
//! packetized form of metadata packets with magic `0x75D11D57`).

use std::path::Path;
use std::sync::Arc;

use super::error::CtfError;

/// Byte order of a type (`Native` = the trace's, resolved when the metadata is compiled).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteOrder {
    /// The trace's byte order.
    Native,
    /// Little endian.
    Le,
    /// Big endian (also `network`).
    Be,
}

/// Character encoding of strings and of integers that hold characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// Not text.
    None,
    /// UTF-8.
    Utf8,
    /// ASCII.
    Ascii,
}

/// Where a declaration is in the TSDL text (for errors reported after parsing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pos {
    /// 1-based line.
    pub line: u32,
    /// 1-based column (bytes).
    pub col: u32,
}

/// `integer { ... }`.
#[derive(Debug, Clone, PartialEq)]
pub struct IntDecl {
    /// Size in bits.
    pub size: u32,
    /// Alignment in bits.
    pub align: u32,
    /// Two's complement signed.
    pub signed: bool,
    /// Byte order.
    pub byte_order: ByteOrder,
    /// Display base (2, 8, 10, 16).
    pub base: u8,
    /// Encoding (integers that hold characters).
    pub encoding: Encoding,
    /// `map = clock.NAME.value`: the clock this integer samples.
    pub map: Option<Arc<str>>,
    /// Where it was declared.
    pub pos: Pos,
}

/// `floating_point { ... }`.
#[derive(Debug, Clone, PartialEq)]
pub struct FloatDecl {
    /// Exponent digits.
    pub exp_dig: u32,
    /// Mantissa digits (including the implicit bit).
    pub mant_dig: u32,
    /// Byte order.
    pub byte_order: ByteOrder,
    /// Alignment in bits.
    pub align: u32,
    /// Where it was declared.
    pub pos: Pos,
}

/// One `label = lo ... hi` mapping of an enum.
#[derive(Debug, Clone, PartialEq)]
pub struct EnumEntry {
    /// The label.
    pub label: Arc<str>,
    /// Lowest value (inclusive).
    pub lo: i128,
    /// Highest value (inclusive).
    pub hi: i128,
}

/// `enum : container { ... }`.
#[derive(Debug, Clone, PartialEq)]
pub struct EnumDecl {
    /// The integer holding the value.
    pub container: Arc<IntDecl>,
    /// Mappings, in declaration order.
    pub entries: Vec<EnumEntry>,
}

impl EnumDecl {
    /// Labels whose range holds `v`.
    pub fn labels(&self, v: i128) -> impl Iterator<Item = &Arc<str>> + '_ {
        self.entries.iter().filter(move |e| e.lo <= v && v <= e.hi).map(|e| &e.label)
    }
}

/// A named member of a struct or variant.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldDecl {
    /// Name as declared (a leading `_` is part of it here).
    pub name: String,
    /// Type.
    pub ty: TypeDecl,
    /// Where it was declared.
    pub pos: Pos,
}

/// `struct { ... } align(N)`.
#[derive(Debug, Clone, PartialEq)]
pub struct StructDecl {
    /// Members in order.
    pub fields: Vec<FieldDecl>,
    /// Minimum alignment from `align(N)` (bits; 1 when absent).
    pub min_align: u32,
}

/// `variant <tag> { ... }`.
#[derive(Debug, Clone, PartialEq)]
pub struct VariantDecl {
    /// The tag's path (`None` for an untagged declaration, tagged where used).
    pub tag: Option<Vec<String>>,
    /// Options; the tag's enum label selects the option of the same name.
    pub options: Vec<FieldDecl>,
    /// Where it was declared.
    pub pos: Pos,
}

/// A type.
#[derive(Debug, Clone, PartialEq)]
pub enum TypeDecl {
    /// Integer.
    Int(Arc<IntDecl>),
    /// Floating point.
    Float(Arc<FloatDecl>),
    /// Enumeration.
    Enum(Arc<EnumDecl>),
    /// Null-terminated string.
    String(Encoding),
    /// Structure.
    Struct(Arc<StructDecl>),
    /// Variant.
    Variant(Arc<VariantDecl>),
    /// Fixed-length array.
    Array {
        /// Element type.
        elem: Arc<TypeDecl>,
        /// Length.
        len: u64,
    },
    /// Sequence: its length is an integer field named by `len`.
    Sequence {
        /// Element type.
        elem: Arc<TypeDecl>,
        /// Path of the length field.
        len: Vec<String>,
        /// Where it was declared.
        pos: Pos,
    },
}

/// A value of the `env` block.
#[derive(Debug, Clone, PartialEq)]
pub enum EnvValue {
    /// Integer.
    Int(i64),
    /// String (or identifier).
    Str(String),
}

impl std::fmt::Display for EnvValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EnvValue::Int(v) => write!(f, "{v}"),
            EnvValue::Str(s) => f.write_str(s),
        }
    }
}

/// A `clock { ... }` block.
#[derive(Debug, Clone, PartialEq)]
pub struct ClockDecl {
    /// Name (`monotonic` for LTTng).
    pub name: Arc<str>,
    /// UUID.
    pub uuid: Option<[u8; 16]>,
    /// Description.
    pub description: Option<String>,
    /// Frequency in Hz (default 1 GHz).
    pub freq: u64,
    /// Offset from the origin in seconds.
    pub offset_s: i64,
    /// Further offset in cycles.
    pub offset: i64,
    /// Precision in cycles.
    pub precision: u64,
    /// Whether the origin is the UNIX epoch (CTF 1.8 `absolute`; LTTng's clocks are
    /// epoch-based in practice).
    pub absolute: bool,
}

impl ClockDecl {
    /// Nanoseconds since the origin (the UNIX epoch for LTTng) of a clock value, as
    /// babeltrace2 computes it: `offset_s` s + (`offset` + `cycles`) / `freq`.
    pub fn to_ns(&self, cycles: u64) -> u64 {
        let freq = self.freq.max(1) as i128;
        let total = self.offset as i128 + cycles as i128;
        let ns = if freq == 1_000_000_000 {
            total
        } else {
            let s = total.div_euclid(freq);
            let rem = total.rem_euclid(freq);
            s * 1_000_000_000 + rem * 1_000_000_000 / freq
        };
        let v = self.offset_s as i128 * 1_000_000_000 + ns;
        v.clamp(0, u64::MAX as i128) as u64
    }
}

/// A `stream { ... }` block.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StreamDecl {
    /// Stream class id (`None` when the trace has one stream class and omits it).
    pub id: Option<u64>,
    /// `packet.context`.
    pub packet_context: Option<TypeDecl>,
    /// `event.header`.
    pub event_header: Option<TypeDecl>,
    /// `event.context` (common to all events of the stream).
    pub event_context: Option<TypeDecl>,
}

/// An `event { ... }` block.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EventDecl {
    /// `provider:event` for LTTng.
    pub name: String,
    /// Id within its stream class.
    pub id: Option<u64>,
    /// Stream class id.
    pub stream_id: Option<u64>,
    /// Log level.
    pub loglevel: Option<i64>,
    /// `model.emf.uri`.
    pub model_emf_uri: Option<String>,
    /// `context`.
    pub context: Option<TypeDecl>,
    /// `fields` (the payload).
    pub fields: Option<TypeDecl>,
    /// Where the block starts.
    pub pos: Pos,
}

/// Everything the metadata declares.
#[derive(Debug, Clone, PartialEq)]
pub struct Metadata {
    /// `major`.
    pub major: Option<u64>,
    /// `minor`.
    pub minor: Option<u64>,
    /// The trace UUID.
    pub uuid: Option<[u8; 16]>,
    /// Byte order of the trace (`le` when the trace block does not say).
    pub byte_order: ByteOrder,
    /// `packet.header`.
    pub packet_header: Option<TypeDecl>,
    /// The env block.
    pub env: Vec<(String, EnvValue)>,
    /// Clocks.
    pub clocks: Vec<ClockDecl>,
    /// Stream classes.
    pub streams: Vec<StreamDecl>,
    /// Event classes.
    pub events: Vec<EventDecl>,
}

impl Metadata {
    /// The env value for `key`.
    pub fn env(&self, key: &str) -> Option<&EnvValue> {
        self.env.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Parses TSDL text (no file name in errors: they read `<metadata>:line:col`).
    pub fn parse(text: &str) -> Result<Metadata, CtfError> {
        super::tsdl::parse(text).map_err(|e| e.with_path("<metadata>"))
    }

    /// Reads and parses a metadata file in either form.
    pub fn read(path: &Path) -> Result<Metadata, CtfError> {
        let bytes = std::fs::read(path).map_err(|e| CtfError::io(path, "read", e))?;
        let text = metadata_text(&bytes, path)?;
        super::tsdl::parse(&text).map_err(|e| e.with_path(path))
    }
}

/// Magic number of a metadata packet.
pub const METADATA_MAGIC: u32 = 0x75D1_1D57;
/// Bytes in a metadata packet header.
pub const METADATA_HEADER_LEN: usize = 37;

/// The TSDL text of a metadata file: the file itself when it is text, else the concatenated
/// content of its metadata packets.
pub fn metadata_text(bytes: &[u8], path: &Path) -> Result<String, CtfError> {
    let magic_le = bytes.get(..4).map(|m| u32::from_le_bytes([m[0], m[1], m[2], m[3]]));
    let magic_be = bytes.get(..4).map(|m| u32::from_be_bytes([m[0], m[1], m[2], m[3]]));
    let le = match (magic_le, magic_be) {
        (Some(METADATA_MAGIC), _) => true,
        (_, Some(METADATA_MAGIC)) => false,
        _ => {
            return String::from_utf8(bytes.to_vec()).map_err(|e| CtfError::MetadataPacket {
                path: path.into(),
                offset: e.utf8_error().valid_up_to() as u64,
                msg: "metadata is neither packetized (magic 0x75D11D57) nor UTF-8 text".into(),
            });
        }
    };
    let mut text = Vec::with_capacity(bytes.len());
    let mut off = 0usize;
    let mut uuid: Option<&[u8]> = None;
    while off < bytes.len() {
        let err = |msg: String| CtfError::MetadataPacket { path: path.into(), offset: off as u64, msg };
        let h = bytes
            .get(off..off + METADATA_HEADER_LEN)
            .ok_or_else(|| err(format!("truncated packet header ({} bytes left)", bytes.len() - off)))?;
        let u32_at = |i: usize| {
            let b = [h[i], h[i + 1], h[i + 2], h[i + 3]];
            if le { u32::from_le_bytes(b) } else { u32::from_be_bytes(b) }
        };
        let magic = u32_at(0);
        if magic != METADATA_MAGIC {
            return Err(err(format!("bad magic {magic:#010x} (expected {METADATA_MAGIC:#010x})")));
        }
        match uuid {
            None => uuid = Some(&h[4..20]),
            Some(u) if u != &h[4..20] => {
                return Err(err("packet UUID differs from the first packet's".into()));
            }
            Some(_) => {}
        }
        let content_bits = u32_at(24) as usize;
        let packet_bits = u32_at(28) as usize;
        let (compression, encryption, checksum) = (h[32], h[33], h[34]);
        if compression != 0 || encryption != 0 || checksum != 0 {
            return Err(err(format!(
                "compression/encryption/checksum schemes {compression}/{encryption}/{checksum} are not supported"
            )));
        }
        if !content_bits.is_multiple_of(8) || !packet_bits.is_multiple_of(8) {
            return Err(err(format!(
                "content size {content_bits} or packet size {packet_bits} bits is not whole bytes"
            )));
        }
        let (content, packet) = (content_bits / 8, packet_bits / 8);
        if content < METADATA_HEADER_LEN || packet < content {
            return Err(err(format!("content size {content} / packet size {packet} bytes are inconsistent")));
        }
        let body = bytes.get(off + METADATA_HEADER_LEN..off + content).ok_or_else(|| {
            err(format!("truncated packet: {content} bytes of content, {} in the file", bytes.len() - off))
        })?;
        text.extend_from_slice(body);
        off += packet;
    }
    // Trailing NULs (padding inside content) are harmless; keep them out of the text.
    while text.last() == Some(&0) {
        text.pop();
    }
    String::from_utf8(text).map_err(|e| CtfError::MetadataPacket {
        path: path.into(),
        offset: 0,
        msg: format!("metadata text is not UTF-8 (at text byte {})", e.utf8_error().valid_up_to()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(text: &[u8], pad: usize, le: bool) -> Vec<u8> {
        let content = (METADATA_HEADER_LEN + text.len()) as u32 * 8;
        let size = content + pad as u32 * 8;
        let w = |v: u32| if le { v.to_le_bytes() } else { v.to_be_bytes() };
        let mut p = Vec::new();
        p.extend_from_slice(&w(METADATA_MAGIC));
        p.extend_from_slice(&[7; 16]);
        p.extend_from_slice(&w(0));
        p.extend_from_slice(&w(content));
        p.extend_from_slice(&w(size));
        p.extend_from_slice(&[0, 0, 0, 1, 8]);
        p.extend_from_slice(text);
        p.extend(std::iter::repeat_n(0u8, pad));
        p
    }

    #[test]
    fn packetized_text_is_concatenated() {
        for le in [true, false] {
            let mut f = packet(b"/* CTF 1.8 */ trace { ma", 5, le);
            f.extend(packet(b"jor = 1; };", 0, le));
            assert_eq!(metadata_text(&f, Path::new("m")).unwrap(), "/* CTF 1.8 */ trace { major = 1; };");
        }
        assert_eq!(metadata_text(b"/* CTF 1.8 */", Path::new("m")).unwrap(), "/* CTF 1.8 */");
    }

    #[test]
    fn corrupt_packets_name_the_offset() {
        let mut f = packet(b"abc", 0, true);
        let second = f.len();
        f.extend(packet(b"def", 0, true));
        f[second + 28] = 1; // packet size smaller than content
        let e = metadata_text(&f, Path::new("m")).unwrap_err().to_string();
        assert!(e.contains(&format!("metadata packet at byte {second}")), "{e}");
        let e = metadata_text(&f[..second + 10], Path::new("m")).unwrap_err().to_string();
        assert!(e.contains("truncated packet header"), "{e}");
        let mut g = packet(b"abc", 0, true);
        g[32] = 1;
        assert!(metadata_text(&g, Path::new("m")).unwrap_err().to_string().contains("compression"));
        assert!(metadata_text(&[0xff, 0xfe, 0, 1], Path::new("m")).is_err());
    }

    #[test]
    fn clock_conversion() {
        let c = ClockDecl {
            name: "c".into(),
            uuid: None,
            description: None,
            freq: 1_000_000_000,
            offset_s: 10,
            offset: 5,
            precision: 0,
            absolute: false,
        };
        assert_eq!(c.to_ns(7), 10_000_000_012);
        let slow = ClockDecl { freq: 1000, offset_s: 0, offset: 1500, ..c.clone() };
        assert_eq!(slow.to_ns(1), 1_501_000_000);
        let neg = ClockDecl { offset_s: -1, offset: 0, ..c };
        assert_eq!(neg.to_ns(0), 0, "before the epoch saturates at 0");
    }
}
