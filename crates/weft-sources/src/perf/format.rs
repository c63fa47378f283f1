//! Tracepoint field layouts from tracefs `events/<system>/<name>/format` files, and a generic
//! decoder that turns a tracepoint's raw payload (`PERF_SAMPLE_RAW`) into typed fields.
//!
//! A format file lists one field per line:
//!
//! ```text
//! name: sched_switch
//! ID: 372
//! format:
//!     field:unsigned short common_type;    offset:0;    size:2;    signed:0;
//!     ...
//!     field:char prev_comm[16];    offset:8;    size:16;    signed:0;
//!     field:__data_loc char[] filename;    offset:8;    size:4;    signed:0;
//! ```
//!
//! | declaration | [`FieldKind`] | decoded [`Value`] |
//! |---|---|---|
//! | integer of 1, 2, 4 or 8 bytes (`int`, `pid_t`, `long`, `u64`, pointers) | `Int` | `I64` (unsigned 64-bit values keep their bits) |
//! | `char name[N]` | `Chars` | `Str` up to the first NUL (lossy UTF-8) |
//! | `type name[N]` of integers | `Array` | `Array` of `I64` |
//! | `__data_loc char[] name` / `__rel_loc` | `DataLoc` / `RelLoc` | `Str` (char) or `Bytes` (other element types) |
//! | anything else (odd sizes) | `Opaque` | `Bytes` |
//!
//! The `common_*` fields (type, flags, preempt count, pid) are parsed but left out of decoded
//! fields: the perf sample header carries pid/tid/cpu/time already.

use std::path::Path;
use std::sync::Arc;

use weft_model::{Attributes, Value};

use super::error::PerfError;

/// How a field is stored in the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    /// An integer (or pointer) of `size` bytes.
    Int,
    /// A fixed `char[N]` string.
    Chars,
    /// A fixed array of `len` integers of `size / len` bytes each.
    Array {
        /// Number of elements.
        len: usize,
    },
    /// `__data_loc`: a u32 at the field's offset holds (length << 16 | offset from the payload
    /// start) of a dynamic array.
    DataLoc {
        /// The element type is `char` (decoded as text).
        chars: bool,
    },
    /// `__rel_loc`: like `DataLoc` but the offset counts from the end of the field.
    RelLoc {
        /// The element type is `char`.
        chars: bool,
    },
    /// A layout the decoder does not interpret (kept as bytes).
    Opaque,
}

/// One field of a tracepoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Field name (`prev_comm`).
    pub name: Arc<str>,
    /// Declared C type without the name (`char[16]`, `pid_t`, `__data_loc char[]`).
    pub c_type: String,
    /// Byte offset in the payload.
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
    /// Signed integer.
    pub signed: bool,
    /// Storage kind.
    pub kind: FieldKind,
}

/// A tracepoint's layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Format {
    /// `system:name`.
    pub full_name: Arc<str>,
    /// Tracepoint id (the perf `config` of a `PERF_TYPE_TRACEPOINT` event).
    pub id: u64,
    /// Every field, `common_*` ones first, in file order.
    pub fields: Vec<Field>,
}

impl Format {
    /// Parses a format file's text; `system` completes the name. Errors name the line.
    pub fn parse(text: &str, system: &str) -> Result<Format, (usize, String)> {
        let mut name = None;
        let mut id = None;
        let mut fields = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let ln = i + 1;
            let t = line.trim();
            if let Some(v) = t.strip_prefix("name:") {
                name = Some(v.trim().to_owned());
            } else if let Some(v) = t.strip_prefix("ID:") {
                id = Some(v.trim().parse::<u64>().map_err(|_| (ln, format!("bad ID {:?}", v.trim())))?);
            } else if t.starts_with("field:") {
                fields.push(parse_field(t).map_err(|m| (ln, m))?);
            } else if t.starts_with("print fmt:") {
                break;
            }
        }
        let name = name.ok_or((1, "no `name:` line".to_owned()))?;
        let id = id.ok_or((1, "no `ID:` line".to_owned()))?;
        Ok(Format { full_name: Arc::from(format!("{system}:{name}")), id, fields })
    }

    /// Reads and parses `dir/format` (a tracefs event directory).
    pub fn load(dir: &Path, system: &str) -> Result<Format, PerfError> {
        let path = dir.join("format");
        let text =
            std::fs::read_to_string(&path).map_err(|e| PerfError::io(&path, "read tracepoint format", e))?;
        Format::parse(&text, system).map_err(|(line, msg)| PerfError::Format { path, line, msg })
    }

    /// The field called `name`.
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| &*f.name == name)
    }

    /// Decodes every non-`common_*` field of `raw` (the tracepoint payload). Fields that lie
    /// outside `raw` are an error naming the field and offsets.
    pub fn decode(&self, raw: &[u8]) -> Result<Attributes, String> {
        let mut out = Attributes::new();
        for f in &self.fields {
            if f.name.starts_with("common_") {
                continue;
            }
            out.push(f.name.to_string(), f.decode(raw)?);
        }
        Ok(out)
    }
}

impl Field {
    /// This field's value in `raw`.
    pub fn decode(&self, raw: &[u8]) -> Result<Value, String> {
        let bytes = slice(raw, self.offset, self.size).ok_or_else(|| self.outside(raw.len()))?;
        Ok(match self.kind {
            FieldKind::Int => Value::I64(int(bytes, self.signed).ok_or_else(|| self.outside(raw.len()))?),
            FieldKind::Chars => Value::Str(cstr(bytes).into()),
            FieldKind::Array { len } => {
                let es = self.size / len.max(1);
                let mut v = Vec::with_capacity(len);
                for i in 0..len {
                    let b = slice(bytes, i * es, es).ok_or_else(|| self.outside(raw.len()))?;
                    v.push(Value::I64(int(b, self.signed).ok_or_else(|| self.outside(raw.len()))?));
                }
                Value::Array(v)
            }
            FieldKind::DataLoc { chars } | FieldKind::RelLoc { chars } => {
                let loc = u32::from_le_bytes(
                    bytes.get(..4).and_then(|b| b.try_into().ok()).ok_or_else(|| self.outside(raw.len()))?,
                );
                let mut off = (loc & 0xffff) as usize;
                let len = (loc >> 16) as usize;
                if matches!(self.kind, FieldKind::RelLoc { .. }) {
                    off += self.offset + self.size;
                }
                let data = slice(raw, off, len).ok_or_else(|| {
                    format!(
                        "field {}: dynamic data at {off}+{len} lies outside the {}-byte payload",
                        self.name,
                        raw.len()
                    )
                })?;
                if chars { Value::Str(cstr(data).into()) } else { Value::Bytes(data.to_vec()) }
            }
            FieldKind::Opaque => Value::Bytes(bytes.to_vec()),
        })
    }

    /// The integer at this field (for `Int` fields).
    pub fn int(&self, raw: &[u8]) -> Option<i64> {
        int(slice(raw, self.offset, self.size)?, self.signed)
    }

    /// The text of a `Chars` field.
    pub fn chars(&self, raw: &[u8]) -> Option<String> {
        slice(raw, self.offset, self.size).map(cstr)
    }

    fn outside(&self, len: usize) -> String {
        format!("field {} at {}+{} lies outside the {len}-byte payload", self.name, self.offset, self.size)
    }
}

fn slice(raw: &[u8], off: usize, len: usize) -> Option<&[u8]> {
    raw.get(off..off.checked_add(len)?)
}

/// Little-endian integer of 1, 2, 4 or 8 bytes, sign-extended when `signed`.
pub(crate) fn int(b: &[u8], signed: bool) -> Option<i64> {
    Some(match (b.len(), signed) {
        (1, false) => b[0] as i64,
        (1, true) => b[0] as i8 as i64,
        (2, false) => u16::from_le_bytes([b[0], b[1]]) as i64,
        (2, true) => i16::from_le_bytes([b[0], b[1]]) as i64,
        (4, false) => u32::from_le_bytes(b.try_into().ok()?) as i64,
        (4, true) => i32::from_le_bytes(b.try_into().ok()?) as i64,
        (8, _) => i64::from_le_bytes(b.try_into().ok()?),
        _ => return None,
    })
}

/// Text up to the first NUL (lossy UTF-8).
pub(crate) fn cstr(b: &[u8]) -> String {
    let end = memchr::memchr(0, b).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// `field:TYPE NAME[N];\toffset:O;\tsize:S;\tsigned:G;`
fn parse_field(line: &str) -> Result<Field, String> {
    let mut decl = None;
    let mut offset = None;
    let mut size = None;
    let mut signed = false;
    for part in line.split(';') {
        let part = part.trim();
        if let Some(v) = part.strip_prefix("field:") {
            decl = Some(v.trim());
        } else if let Some(v) = part.strip_prefix("offset:") {
            offset = Some(v.trim().parse::<usize>().map_err(|_| format!("bad offset {v:?}"))?);
        } else if let Some(v) = part.strip_prefix("size:") {
            size = Some(v.trim().parse::<usize>().map_err(|_| format!("bad size {v:?}"))?);
        } else if let Some(v) = part.strip_prefix("signed:") {
            signed = v.trim() == "1";
        }
    }
    let decl = decl.ok_or("no field declaration")?;
    let offset = offset.ok_or("no offset")?;
    let size = size.ok_or("no size")?;
    // The name is the last token; an array suffix may be on it (`prev_comm[16]`).
    let split = decl
        .rfind(|c: char| c.is_whitespace() || c == '*')
        .ok_or_else(|| format!("no field name in {decl:?}"))?;
    let (ty, name) = (decl[..=split].trim(), decl[split + 1..].trim());
    let (name, array) = match name.find('[') {
        Some(i) => (&name[..i], Some(name[i + 1..].trim_end_matches(']').to_owned())),
        None => (name, None),
    };
    if name.is_empty() {
        return Err(format!("no field name in {decl:?}"));
    }
    let base = ty.trim_start_matches("__data_loc").trim_start_matches("__rel_loc").trim();
    let is_char =
        base.starts_with("char") || base.starts_with("const char") || base.starts_with("unsigned char");
    let kind = if ty.starts_with("__data_loc") {
        FieldKind::DataLoc { chars: is_char && !ty.contains('*') }
    } else if ty.starts_with("__rel_loc") {
        FieldKind::RelLoc { chars: is_char && !ty.contains('*') }
    } else if let Some(n) = array {
        let len: usize = n.parse().map_err(|_| format!("bad array length {n:?} in {decl:?}"))?;
        if is_char && !ty.contains('*') {
            FieldKind::Chars
        } else if len > 0 && size.is_multiple_of(len) && matches!(size / len, 1 | 2 | 4 | 8) {
            FieldKind::Array { len }
        } else {
            FieldKind::Opaque
        }
    } else if matches!(size, 1 | 2 | 4 | 8) {
        FieldKind::Int
    } else {
        FieldKind::Opaque
    };
    let c_type = match (kind, decl.find('[')) {
        (FieldKind::Chars | FieldKind::Array { .. }, Some(i)) => format!("{ty}{}", &decl[i..]),
        _ => ty.to_owned(),
    };
    Ok(Field { name: Arc::from(name), c_type, offset, size, signed, kind })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SWITCH: &str = "name: sched_switch\nID: 372\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n\
\tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;\n\
\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n\
\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;\n\
\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n\
\tfield:int next_prio;\toffset:60;\tsize:4;\tsigned:1;\n\n\
print fmt: \"prev_comm=%s\", REC->prev_comm\n";

    #[test]
    fn parses_sched_switch() {
        let f = Format::parse(SWITCH, "sched").unwrap();
        assert_eq!(&*f.full_name, "sched:sched_switch");
        assert_eq!(f.id, 372);
        assert_eq!(f.fields.len(), 11);
        let c = f.field("prev_comm").unwrap();
        assert_eq!((c.offset, c.size, c.kind), (8, 16, FieldKind::Chars));
        assert_eq!(c.c_type, "char[16]");
        let s = f.field("prev_state").unwrap();
        assert_eq!((s.kind, s.signed, s.c_type.as_str()), (FieldKind::Int, true, "long"));
        let mut raw = vec![0u8; 64];
        raw[8..12].copy_from_slice(b"spin");
        raw[24..28].copy_from_slice(&1234i32.to_le_bytes());
        raw[32..40].copy_from_slice(&1i64.to_le_bytes());
        raw[40..44].copy_from_slice(b"idle");
        raw[56..60].copy_from_slice(&(-1i32).to_le_bytes());
        let a = f.decode(&raw).unwrap();
        assert_eq!(a.get_str("prev_comm"), Some("spin"));
        assert_eq!(a.get("prev_pid"), Some(&Value::I64(1234)));
        assert_eq!(a.get("next_pid"), Some(&Value::I64(-1)));
        assert_eq!(a.get("common_pid"), None);
        assert!(f.decode(&raw[..40]).unwrap_err().contains("next_comm"));
    }

    #[test]
    fn arrays_data_loc_pointers() {
        let text = "name: x\nID: 7\nformat:\n\
\tfield:unsigned long args[6];\toffset:16;\tsize:48;\tsigned:0;\n\
\tfield:__data_loc char[] filename;\toffset:8;\tsize:4;\tsigned:0;\n\
\tfield:const char * buf;\toffset:64;\tsize:8;\tsigned:0;\n\
\tfield:__rel_loc char[] rel;\toffset:12;\tsize:4;\tsigned:0;\n";
        let f = Format::parse(text, "s").unwrap();
        assert_eq!(f.field("args").unwrap().kind, FieldKind::Array { len: 6 });
        assert_eq!(f.field("filename").unwrap().kind, FieldKind::DataLoc { chars: true });
        assert_eq!(f.field("buf").unwrap().kind, FieldKind::Int);
        assert_eq!(f.field("rel").unwrap().kind, FieldKind::RelLoc { chars: true });
        let mut raw = vec![0u8; 90];
        for i in 0..6u64 {
            raw[16 + 8 * i as usize..24 + 8 * i as usize].copy_from_slice(&(i + 1).to_le_bytes());
        }
        raw[72..78].copy_from_slice(b"/tmp/x");
        raw[8..12].copy_from_slice(&((6u32 << 16) | 72).to_le_bytes());
        raw[80..83].copy_from_slice(b"rel");
        // rel offset counts from the end of the field (12 + 4 = 16): 80 - 16 = 64.
        raw[12..16].copy_from_slice(&((3u32 << 16) | 64).to_le_bytes());
        let a = f.decode(&raw).unwrap();
        assert_eq!(a.get("args").unwrap(), &Value::Array((1..=6).map(Value::I64).collect()));
        assert_eq!(a.get_str("filename"), Some("/tmp/x"));
        assert_eq!(a.get_str("rel"), Some("rel"));
        raw[8..12].copy_from_slice(&((60u32 << 16) | 72).to_le_bytes());
        assert!(f.decode(&raw).unwrap_err().contains("dynamic data"));
    }

    #[test]
    fn bad_format_names_the_line() {
        assert_eq!(Format::parse("name: x\nID: zz\n", "s").unwrap_err().0, 2);
        assert!(Format::parse("name: x\nID: 1\n\tfield:int;\toffset:0;\tsize:4;\tsigned:1;\n", "s").is_err());
        assert!(Format::parse("name: x\n", "s").unwrap_err().1.contains("ID"));
    }
}
