//! Typed attribute values — the OTLP `AnyValue` model, which every other format maps into.
//!
//! | weft | OTLP | Zipkin tag / Jaeger tag |
//! |---|---|---|
//! | `Str` ([`Str`]) | `string_value` | string / `string` |
//! | `Bool` | `bool_value` | `"true"`/`"false"` / `bool` |
//! | `I64` | `int_value` | decimal string / `int64` |
//! | `F64` | `double_value` | shortest round-trip decimal / `float64` |
//! | `Bytes` | `bytes_value` | base64 string / `binary` (base64) |
//! | `Array`, `Map` | `array_value`, `kvlist_value` | JSON text of the value / `string` (JSON) |
//!
//! Zipkin tags are strings only, so a Zipkin round trip keeps the text but not the type; the
//! codecs say so in their conversion reports.
//!
//! # Strings: [`Str`]
//!
//! Attribute keys ([`KeyValue::key`]), string values ([`Value::Str`]), span names
//! ([`crate::Span::name`]) and event names ([`crate::SpanEvent::name`]) are [`Str`]s, not
//! `String`s: a `Str` of at most 24 bytes lives inline (no heap allocation), and a `Str` made
//! with [`Str::const_new`] from a `&'static str` points at it, whatever its length. Decoders
//! build keys with [`key`], which maps well-known long keys (OpenTelemetry semantic
//! conventions and [`crate::conv`]; see [`crate::conv::known`]) to static strings, so
//! typical spans decode with few allocations beyond their long values. A `Str` derefs to
//! `str`, compares with `&str`/`String`, converts from `&str`/`String` (`.into()`; a `String`
//! keeps its buffer), and serializes exactly as a `String` does (same JSON).

use std::fmt;

/// weft's string for keys, names and string values: [`compact_str::CompactString`] — inline
/// up to 24 bytes, a `&'static str` without copying ([`Str::const_new`]), heap beyond. See
/// the [module docs](self).
pub type Str = compact_str::CompactString;

/// Longest string a [`Str`] holds without allocating.
pub const STR_INLINE: usize = 24;

/// An attribute key as a [`Str`] without allocating when it is short ([`STR_INLINE`] bytes
/// or fewer) or well known ([`crate::conv::known`]); what decoders use for keys.
#[inline]
pub fn key(s: &str) -> Str {
    if s.len() > STR_INLINE
        && let Some(k) = crate::conv::known(s)
    {
        return Str::const_new(k);
    }
    Str::new(s)
}

/// An attribute value.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Value {
    /// UTF-8 string.
    Str(Str),
    /// Boolean.
    Bool(bool),
    /// Signed 64-bit integer.
    I64(i64),
    /// IEEE-754 double.
    F64(f64),
    /// Raw bytes.
    Bytes(Vec<u8>),
    /// Homogeneous or mixed array.
    Array(Vec<Value>),
    /// Nested key/value list (OTLP `kvlist_value`).
    Map(Vec<KeyValue>),
    /// The empty value OTLP allows (an `AnyValue` with no field set).
    Empty,
}

impl Value {
    /// The string if this is a `Str`.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
    /// The integer if this is an `I64`.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::I64(v) => Some(*v),
            _ => None,
        }
    }
    /// The boolean if this is a `Bool`.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(v) => Some(*v),
            _ => None,
        }
    }
    /// The float if this is an `F64`.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::F64(v) => Some(*v),
            _ => None,
        }
    }
    /// A short type name, used in reports and schema docs.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
            Value::Bool(_) => "bool",
            Value::I64(_) => "int",
            Value::F64(_) => "double",
            Value::Bytes(_) => "bytes",
            Value::Array(_) => "array",
            Value::Map(_) => "map",
            Value::Empty => "empty",
        }
    }
    /// The value as a JSON value (bytes as base64-free hex is *not* used: bytes become an
    /// array of numbers only here; codecs with a defined byte encoding do their own).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        match self {
            Value::Str(s) => J::String(s.to_string()),
            Value::Bool(b) => J::Bool(*b),
            Value::I64(i) => J::from(*i),
            Value::F64(f) => {
                serde_json::Number::from_f64(*f).map(J::Number).unwrap_or_else(|| J::String(f.to_string()))
            }
            Value::Bytes(b) => J::Array(b.iter().map(|x| J::from(*x)).collect()),
            Value::Array(a) => J::Array(a.iter().map(Value::to_json).collect()),
            Value::Map(m) => J::Object(m.iter().map(|kv| (kv.key.to_string(), kv.value.to_json())).collect()),
            Value::Empty => J::Null,
        }
    }
}

/// Text form used where a format has only string values (Zipkin tags, Chrome args keys):
/// strings as-is, numbers and bools as Rust prints them (floats shortest round-trip), bytes
/// as lower-case hex, arrays and maps as JSON.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Str(s) => f.write_str(s),
            Value::Bool(b) => write!(f, "{b}"),
            Value::I64(i) => write!(f, "{i}"),
            Value::F64(x) => write!(f, "{x}"),
            Value::Bytes(b) => f.write_str(&hex::encode(b)),
            Value::Array(_) | Value::Map(_) => write!(f, "{}", self.to_json()),
            Value::Empty => Ok(()),
        }
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Str(Str::new(s))
    }
}
impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Str(Str::from(s))
    }
}
impl From<&String> for Value {
    fn from(s: &String) -> Self {
        Value::Str(Str::new(s))
    }
}
impl From<Str> for Value {
    fn from(s: Str) -> Self {
        Value::Str(s)
    }
}
impl From<&Str> for Value {
    fn from(s: &Str) -> Self {
        Value::Str(s.clone())
    }
}
impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::I64(v)
    }
}
impl From<u32> for Value {
    fn from(v: u32) -> Self {
        Value::I64(v as i64)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::F64(v)
    }
}

/// One attribute.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct KeyValue {
    /// Attribute key (OpenTelemetry semantic-convention names where one exists).
    pub key: Str,
    /// Attribute value.
    pub value: Value,
}

impl KeyValue {
    /// Builds a key/value pair.
    pub fn new(key: impl Into<Str>, value: impl Into<Value>) -> Self {
        KeyValue { key: key.into(), value: value.into() }
    }
}

/// An ordered attribute list. Order is kept (formats that carry order round-trip it);
/// keys are expected to be unique, and [`Attributes::set`] keeps them so.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Attributes(pub Vec<KeyValue>);

impl Attributes {
    /// An empty list.
    pub const fn new() -> Self {
        Attributes(Vec::new())
    }
    /// The value for `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.iter().find(|kv| kv.key == key).map(|kv| &kv.value)
    }
    /// The string value for `key`, if present and a string.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Value::as_str)
    }
    /// Sets `key` (replacing an existing value in place, else appending).
    pub fn set(&mut self, key: impl Into<Str>, value: impl Into<Value>) {
        let key = key.into();
        let value = value.into();
        match self.0.iter_mut().find(|kv| kv.key == key) {
            Some(kv) => kv.value = value,
            None => self.0.push(KeyValue { key, value }),
        }
    }
    /// Appends without checking for an existing key (for decoders that trust their input).
    pub fn push(&mut self, key: impl Into<Str>, value: impl Into<Value>) {
        self.0.push(KeyValue::new(key, value));
    }
    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<Value> {
        let i = self.0.iter().position(|kv| kv.key == key)?;
        Some(self.0.remove(i).value)
    }
    /// Number of attributes.
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// Iterates in order.
    pub fn iter(&self) -> std::slice::Iter<'_, KeyValue> {
        self.0.iter()
    }
}

impl FromIterator<KeyValue> for Attributes {
    fn from_iter<I: IntoIterator<Item = KeyValue>>(iter: I) -> Self {
        Attributes(iter.into_iter().collect())
    }
}

impl<'a> IntoIterator for &'a Attributes {
    type Item = &'a KeyValue;
    type IntoIter = std::slice::Iter<'a, KeyValue>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_replaces_in_place() {
        let mut a = Attributes::new();
        a.set("a", 1i64);
        a.set("b", "x");
        a.set("a", 2i64);
        assert_eq!(a.len(), 2);
        assert_eq!(a.0[0].value, Value::I64(2));
        assert_eq!(a.get_str("b"), Some("x"));
        assert_eq!(a.remove("a"), Some(Value::I64(2)));
        assert!(a.get("a").is_none());
    }

    #[test]
    fn display_forms() {
        assert_eq!(Value::F64(0.1).to_string(), "0.1");
        assert_eq!(Value::Bytes(vec![0xde, 0xad]).to_string(), "dead");
        assert_eq!(Value::Array(vec![Value::I64(1), Value::Str("a".into())]).to_string(), r#"[1,"a"]"#);
    }
}
