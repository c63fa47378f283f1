//! Attributes in columns: a `Map<Utf8, Utf8>` of text values (what SQL sees:
//! `attributes['http.method'] = 'GET'`) plus a type string with one character per entry, in
//! map order, that restores the typed [`Value`] when spans are read back.
//!
//! | tag | type | text in the map |
//! |---|---|---|
//! | `s` | string | the string |
//! | `i` | int | decimal |
//! | `d` | double | shortest round-trip decimal (`NaN`, `inf`, `-inf` as Rust prints them) |
//! | `b` | bool | `true` / `false` |
//! | `x` | bytes | lower-case hex |
//! | `a` | array | JSON |
//! | `m` | map (OTLP kvlist) | JSON object |
//! | `e` | empty | empty string |
//!
//! Type strings are highly repetitive (spans of one kind carry the same attribute shapes), so
//! Parquet's dictionary encoding stores them in well under a byte per span.
//!
//! Known losses, all inside arrays and maps only: bytes become arrays of numbers, non-finite
//! floats become strings, and the keys of a nested map come back sorted.

use std::sync::Arc;

use datafusion::arrow::array::{Array, MapArray, StringArray, StructArray};
use datafusion::arrow::buffer::{Buffer, OffsetBuffer};
use datafusion::arrow::datatypes::DataType;
use weft_model::{Attributes, KeyValue, Value};

use crate::error::StoreError;

/// Builder for one attribute map column plus its type column, writing the Arrow buffers
/// directly: a row is its keys' and values' bytes appended to two buffers plus their offsets —
/// Arrow's `MapBuilder` spent a validity bit and a bounds check per value.
pub(crate) struct AttrColumns {
    /// Map offsets (entries per row), one more than the rows.
    rows: Vec<i32>,
    keys: Text,
    values: Text,
    types: Text,
    scratch: String,
}

/// A string column under construction: offsets (one more than the values) and bytes. Used by
/// the attribute builder and by the flush's gather (`segment`).
pub(crate) struct Text {
    offsets: Vec<i32>,
    data: Vec<u8>,
}

impl Text {
    pub fn with_capacity(values: usize, bytes: usize) -> Self {
        let mut offsets = Vec::with_capacity(values + 1);
        offsets.push(0);
        Text { offsets, data: Vec::with_capacity(bytes) }
    }
    #[inline]
    pub fn push(&mut self, s: &str) {
        self.data.extend_from_slice(s.as_bytes());
        // Wraps only past 2 GiB, which `finish` refuses.
        self.offsets.push(self.data.len() as i32);
    }
    /// Appends the values `lo..hi` of `a` (one copy of their bytes).
    pub fn push_range(&mut self, a: &StringArray, lo: usize, hi: usize) {
        let o = a.value_offsets();
        let base = self.data.len() as i32 - o[lo];
        self.data.extend_from_slice(&a.values()[o[lo] as usize..o[hi] as usize]);
        self.offsets.extend(o[lo + 1..=hi].iter().map(|&x| x + base));
    }
    pub fn finish(self, what: &str) -> Result<StringArray, StoreError> {
        if i32::try_from(self.data.len()).is_err() {
            return Err(StoreError::Decode(format!("{what}: more than 2 GiB of text in one batch")));
        }
        // SAFETY: the offsets start at 0, never decrease and end at `data.len()` (below 2 GiB,
        // checked above, so no offset wrapped); every value is a whole `str` (`push` takes one,
        // `push_range` copies whole values of valid string columns), so the
        // bytes between any two offsets are UTF-8. Arrow's checks (offsets, then UTF-8 of every
        // byte) were ~4 % of a durable ingest's instructions.
        Ok(unsafe {
            StringArray::new_unchecked(
                OffsetBuffer::new_unchecked(self.offsets.into()),
                Buffer::from_vec(self.data),
                None,
            )
        })
    }
}

/// How much an attribute column will hold: rows, entries, key bytes, value text bytes.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct AttrSize {
    rows: usize,
    entries: usize,
    key_bytes: usize,
    value_bytes: usize,
}

impl AttrSize {
    /// Counts one row of `attrs` (value text estimated: exact for strings, 24 bytes for
    /// numbers, JSON and bytes — an estimate only sizes buffers, it never limits them).
    pub fn add(&mut self, attrs: &Attributes) {
        self.rows += 1;
        self.entries += attrs.len();
        for kv in attrs.iter() {
            self.key_bytes += kv.key.len();
            self.value_bytes += match &kv.value {
                Value::Str(s) => s.len(),
                _ => 24,
            };
        }
    }
}

impl AttrColumns {
    pub fn with_capacity(rows: usize) -> Self {
        Self::sized(AttrSize { rows, ..AttrSize::default() })
    }

    /// Builders sized up front for `size` (growing them as rows arrive copied every buffer
    /// several times over: a measurable share of the span → Arrow conversion).
    pub fn sized(size: AttrSize) -> Self {
        let mut rows = Vec::with_capacity(size.rows + 1);
        rows.push(0);
        AttrColumns {
            rows,
            keys: Text::with_capacity(size.entries, size.key_bytes),
            values: Text::with_capacity(size.entries, size.value_bytes),
            types: Text::with_capacity(size.rows, size.entries),
            scratch: String::new(),
        }
    }

    /// Appends one row.
    pub fn append(&mut self, attrs: &Attributes) {
        for kv in attrs.iter() {
            self.keys.push(&kv.key);
            let (tag, text) = encode_value(&kv.value, &mut self.scratch);
            self.values.push(text);
            let mut t = [0u8; 4];
            self.types.data.extend_from_slice(tag.encode_utf8(&mut t).as_bytes());
        }
        self.types.offsets.push(self.types.data.len() as i32);
        self.rows.push((self.keys.offsets.len() - 1) as i32);
    }

    /// The map column and its type column.
    pub fn finish(self, what: &str) -> Result<(MapArray, StringArray), StoreError> {
        let keys = self.keys.finish(what)?;
        let values = self.values.finish(what)?;
        let types = self.types.finish(what)?;
        let field = crate::schema::map_entries_field();
        let DataType::Struct(fields) = field.data_type() else {
            return Err(StoreError::Decode(format!("{what}: map entries are not a struct")));
        };
        let entries = StructArray::try_new(fields.clone(), vec![Arc::new(keys), Arc::new(values)], None)?;
        let map = MapArray::try_new(field, OffsetBuffer::new(self.rows.into()), entries, None, false)?;
        Ok((map, types))
    }
}

/// The type tag and text form of `v`: a string is its own text (no copy); other values are
/// written into `out` (cleared first), which the text then borrows.
pub(crate) fn encode_value<'a>(v: &'a Value, out: &'a mut String) -> (char, &'a str) {
    use std::fmt::Write;
    out.clear();
    let tag = match v {
        Value::Str(s) => return ('s', s),
        Value::I64(i) => {
            out.push_str(itoa::Buffer::new().format(*i));
            'i'
        }
        Value::F64(f) => {
            let _ = write!(out, "{f}");
            'd'
        }
        Value::Bool(b) => {
            out.push_str(if *b { "true" } else { "false" });
            'b'
        }
        Value::Bytes(b) => {
            out.push_str(&hex::encode(b));
            'x'
        }
        Value::Array(_) => {
            out.push_str(&v.to_json().to_string());
            'a'
        }
        Value::Map(_) => {
            out.push_str(&v.to_json().to_string());
            'm'
        }
        Value::Empty => 'e',
    };
    (tag, out)
}

/// Inverse of [`encode_value`].
pub(crate) fn decode_value(tag: char, text: &str) -> Result<Value, String> {
    Ok(match tag {
        's' => Value::Str(text.to_owned().into()),
        'i' => Value::I64(text.parse().map_err(|e| format!("int attribute {text:?}: {e}"))?),
        'd' => Value::F64(text.parse().map_err(|e| format!("double attribute {text:?}: {e}"))?),
        'b' => match text {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => return Err(format!("bool attribute {text:?}")),
        },
        'x' => Value::Bytes(hex::decode(text).map_err(|e| format!("bytes attribute {text:?}: {e}"))?),
        'a' | 'm' => {
            let j: serde_json::Value =
                serde_json::from_str(text).map_err(|e| format!("array/map attribute {text:?}: {e}"))?;
            from_json(j)
        }
        'e' => Value::Empty,
        other => return Err(format!("unknown attribute type tag {other:?}")),
    })
}

fn from_json(j: serde_json::Value) -> Value {
    use serde_json::Value as J;
    match j {
        J::Null => Value::Empty,
        J::Bool(b) => Value::Bool(b),
        J::Number(n) => match n.as_i64() {
            Some(i) => Value::I64(i),
            None => Value::F64(n.as_f64().unwrap_or(f64::NAN)),
        },
        J::String(s) => Value::Str(s.into()),
        J::Array(a) => Value::Array(a.into_iter().map(from_json).collect()),
        J::Object(o) => {
            Value::Map(o.into_iter().map(|(k, v)| KeyValue { key: k.into(), value: from_json(v) }).collect())
        }
    }
}

/// Reads row `row` of a map column plus its type column back into attributes.
pub(crate) fn read_attrs(
    map: &MapArray,
    types: &StringArray,
    row: usize,
    what: &str,
) -> Result<Attributes, StoreError> {
    if map.is_null(row) {
        return Ok(Attributes::new());
    }
    let offsets = map.value_offsets();
    let (start, end) = (offsets[row] as usize, offsets[row + 1] as usize);
    let keys = map
        .keys()
        .as_any()
        .downcast_ref::<StringArray>()
        .ok_or_else(|| StoreError::Decode(format!("{what}: map keys are not strings")))?;
    let values = map
        .values()
        .as_any()
        .downcast_ref::<StringArray>()
        .ok_or_else(|| StoreError::Decode(format!("{what}: map values are not strings")))?;
    let tags = if types.is_null(row) { "" } else { types.value(row) };
    let mut tag_iter = tags.chars();
    let mut out = Vec::with_capacity(end - start);
    for i in start..end {
        let key = keys.value(i).to_owned();
        let tag = tag_iter.next().unwrap_or('s');
        let text = if values.is_null(i) { "" } else { values.value(i) };
        let value =
            decode_value(tag, text).map_err(|e| StoreError::Decode(format!("{what} {key:?}: {e}")))?;
        out.push(KeyValue { key: key.into(), value });
    }
    Ok(Attributes(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt(v: Value) -> Value {
        let mut s = String::new();
        let (tag, text) = encode_value(&v, &mut s);
        decode_value(tag, text).unwrap()
    }

    #[test]
    fn scalar_values_round_trip() {
        for v in [
            Value::Str("héllo, 'world'".into()),
            Value::Str(String::new().into()),
            Value::I64(i64::MIN),
            Value::I64(42),
            Value::F64(0.1),
            Value::F64(-0.0),
            Value::F64(1e300),
            Value::F64(f64::INFINITY),
            Value::Bool(true),
            Value::Bytes(vec![0, 1, 0xff]),
            Value::Empty,
            Value::Array(vec![Value::I64(1), Value::Str("a".into()), Value::F64(1.5), Value::Bool(false)]),
            Value::Map(vec![KeyValue::new("a", 1i64), KeyValue::new("b", "x")]),
        ] {
            assert_eq!(rt(v.clone()), v);
        }
        let Value::F64(n) = rt(Value::F64(f64::NAN)) else { panic!() };
        assert!(n.is_nan());
    }

    #[test]
    fn bad_text_is_an_error_not_a_panic() {
        assert!(decode_value('i', "x").is_err());
        assert!(decode_value('b', "yes").is_err());
        assert!(decode_value('x', "zz").is_err());
        assert!(decode_value('a', "[").is_err());
        assert!(decode_value('?', "").is_err());
    }

    proptest::proptest! {
        #[test]
        fn any_scalar_round_trips(s in ".*", i: i64, f in proptest::num::f64::NORMAL, b: bool, bytes: Vec<u8>) {
            proptest::prop_assert_eq!(rt(Value::Str(s.clone().into())), Value::Str(s.into()));
            proptest::prop_assert_eq!(rt(Value::I64(i)), Value::I64(i));
            proptest::prop_assert_eq!(rt(Value::F64(f)), Value::F64(f));
            proptest::prop_assert_eq!(rt(Value::Bool(b)), Value::Bool(b));
            proptest::prop_assert_eq!(rt(Value::Bytes(bytes.clone())), Value::Bytes(bytes));
        }
    }
}
