//! A kept live query's closed windows as rows of a store result table
//! ([`weft_store::results`], read by SQL as `live_NAME`): one row per group per window.
//!
//! | column | type | what |
//! |---|---|---|
//! | `window_start`, `window_end` | `Timestamp(ns, UTC)` | the window `[start, end)` |
//! | the group-by keys | their field's type (`Int64`, `UInt64`, `Float64`, `Boolean`; text, bytes and untyped fields as `Utf8`) | the group |
//! | the aggregates | `count`, `sum`, `min`, `max`: `Int64` (null past its range); `avg`, quantiles: `Float64`; `hist`, `lhist`: `List<Struct<bucket: Int32, count: UInt64>>` (the results API's `[bucket, count]` pairs) | the group's aggregate over the window |
//! | `agents_contributing`, `agents_missing` | `Int64` | agents whose partial was merged into the window, agents expected and absent |
//!
//! Column names are the query's output names made plain identifiers: lower case, runs of
//! anything but `a-z0-9_` turned into one `_`, trimmed (`count(*)` → `count`, `sum(len)` →
//! `sum_len`, an alias stays itself); a repeated name gets `_2`, `_3`, …

use std::collections::BTreeSet;
use std::sync::Arc;

use weft_probe::agg::{AggKind, KeyValue, Output};
use weft_query::merge::Cell;
use weft_query::{LivePlan, OutCol, Type};
use weft_store::RecordBatch;
use weft_store::datafusion::arrow::array::{
    ArrayRef, BooleanArray, Float64Array, Int32Array, Int64Array, ListArray, StringArray, StructArray,
    TimestampNanosecondArray, UInt64Array,
};
use weft_store::datafusion::arrow::buffer::{NullBuffer, OffsetBuffer};
use weft_store::datafusion::arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};
use weft_store::datafusion::arrow::error::ArrowError;

/// One closed window waiting to be written.
pub struct KeptWindow {
    /// Window start (ns since the epoch).
    pub start_ns: u64,
    /// Window end (exclusive).
    pub end_ns: u64,
    /// The window's rows ([`weft_query::merge::rows`]).
    pub rows: Vec<Vec<Cell>>,
    /// Agents whose partial was merged.
    pub agents: usize,
    /// Agents expected and absent.
    pub missing: usize,
}

fn ts() -> DataType {
    DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()))
}

fn bucket_fields() -> Fields {
    Fields::from(vec![
        Field::new("bucket", DataType::Int32, false),
        Field::new("count", DataType::UInt64, false),
    ])
}

/// An output name as a plain identifier (see the module's doc).
pub fn plain(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars().map(|c| c.to_ascii_lowercase()) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' {
            out.push(c);
        } else if !out.ends_with('_') {
            out.push('_');
        }
    }
    out.trim_matches('_').to_owned()
}

fn column_type(plan: &LivePlan, col: OutCol) -> DataType {
    match col {
        OutCol::Key(i) => match plan.keys.get(i).map(|k| k.ty) {
            Some(Type::I64) => DataType::Int64,
            Some(Type::U64) => DataType::UInt64,
            Some(Type::F64) => DataType::Float64,
            Some(Type::Bool) => DataType::Boolean,
            _ => DataType::Utf8,
        },
        OutCol::Agg(i) => match plan.aggs.get(i).map(|a| a.kind) {
            Some(AggKind::Avg | AggKind::Quantile(_)) => DataType::Float64,
            Some(AggKind::Hist | AggKind::Lhist(_)) => {
                DataType::List(Arc::new(Field::new_struct("item", bucket_fields(), true)))
            }
            _ => DataType::Int64,
        },
    }
}

/// The result table's columns for `plan`.
pub fn schema(plan: &LivePlan) -> SchemaRef {
    let mut used: BTreeSet<String> = BTreeSet::new();
    let mut unique = |name: String| {
        let base = if name.is_empty() { "col".to_owned() } else { name };
        let mut n = base.clone();
        let mut k = 2;
        while !used.insert(n.clone()) {
            n = format!("{base}_{k}");
            k += 1;
        }
        n
    };
    let mut fields = vec![
        Field::new(unique("window_start".into()), ts(), false),
        Field::new(unique("window_end".into()), ts(), false),
    ];
    for (name, col) in &plan.outputs {
        fields.push(Field::new(unique(plain(name)), column_type(plan, *col), true));
    }
    fields.push(Field::new(unique("agents_contributing".into()), DataType::Int64, false));
    fields.push(Field::new(unique("agents_missing".into()), DataType::Int64, false));
    Arc::new(Schema::new(fields))
}

fn key_text(k: &KeyValue) -> String {
    match k {
        KeyValue::Int(v) => v.to_string(),
        KeyValue::Uint(v) => v.to_string(),
        KeyValue::Float(bits) => f64::from_bits(*bits).to_string(),
        KeyValue::Bool(b) => b.to_string(),
        KeyValue::Str(s) => String::from_utf8_lossy(s).into_owned(),
    }
}

/// One column (`i`: its place among the outputs) over every window's rows.
fn column(ty: &DataType, windows: &[KeptWindow], i: usize) -> ArrayRef {
    let cells = || windows.iter().flat_map(|w| w.rows.iter().map(move |r| r.get(i)));
    match ty {
        DataType::Int64 => Arc::new(Int64Array::from_iter(cells().map(|c| match c {
            Some(Cell::Key(KeyValue::Int(v))) => Some(*v),
            Some(Cell::Key(KeyValue::Uint(v))) => i64::try_from(*v).ok(),
            Some(Cell::Value(Output::Int(v))) => i64::try_from(*v).ok(),
            _ => None,
        }))),
        DataType::UInt64 => Arc::new(UInt64Array::from_iter(cells().map(|c| match c {
            Some(Cell::Key(KeyValue::Uint(v))) => Some(*v),
            Some(Cell::Key(KeyValue::Int(v))) => u64::try_from(*v).ok(),
            _ => None,
        }))),
        DataType::Float64 => Arc::new(Float64Array::from_iter(cells().map(|c| match c {
            Some(Cell::Key(KeyValue::Float(bits))) => Some(f64::from_bits(*bits)),
            Some(Cell::Value(Output::Float(f))) => Some(*f),
            Some(Cell::Value(Output::Int(v))) => Some(*v as f64),
            _ => None,
        }))),
        DataType::Boolean => Arc::new(BooleanArray::from_iter(cells().map(|c| match c {
            Some(Cell::Key(KeyValue::Bool(v))) => Some(*v),
            _ => None,
        }))),
        DataType::List(_) => {
            let (mut buckets, mut counts, mut offsets, mut valid) =
                (Vec::new(), Vec::new(), vec![0i32], Vec::new());
            for c in cells() {
                let pairs = match c {
                    Some(Cell::Value(Output::Buckets(b))) => Some(b.as_slice()),
                    _ => None,
                };
                for (k, n) in pairs.unwrap_or_default() {
                    buckets.push(*k);
                    counts.push(*n);
                }
                valid.push(pairs.is_some());
                offsets.push(buckets.len() as i32);
            }
            let values = StructArray::new(
                bucket_fields(),
                vec![Arc::new(Int32Array::from(buckets)), Arc::new(UInt64Array::from(counts))],
                None,
            );
            let field = Arc::new(Field::new_struct("item", bucket_fields(), true));
            Arc::new(ListArray::new(
                field,
                OffsetBuffer::new(offsets.into()),
                Arc::new(values),
                Some(NullBuffer::from(valid)),
            ))
        }
        _ => Arc::new(StringArray::from_iter(cells().map(|c| match c {
            Some(Cell::Key(k)) => Some(key_text(k)),
            _ => None,
        }))),
    }
}

/// The windows' rows as one batch of [`schema`]`(plan)`.
pub fn batch(plan: &LivePlan, schema: &SchemaRef, windows: &[KeptWindow]) -> Result<RecordBatch, ArrowError> {
    let per_row = |f: &dyn Fn(&KeptWindow) -> u64| -> Vec<u64> {
        windows.iter().flat_map(|w| std::iter::repeat_n(f(w), w.rows.len())).collect()
    };
    let as_i64 = |v: Vec<u64>| v.into_iter().map(|t| t.min(i64::MAX as u64) as i64);
    let times = |v: Vec<u64>| -> ArrayRef {
        Arc::new(TimestampNanosecondArray::from_iter_values(as_i64(v)).with_timezone("UTC"))
    };
    let counts = |v: Vec<u64>| -> ArrayRef { Arc::new(Int64Array::from_iter_values(as_i64(v))) };
    let mut cols = vec![times(per_row(&|w| w.start_ns)), times(per_row(&|w| w.end_ns))];
    for i in 0..plan.outputs.len() {
        cols.push(column(schema.field(i + 2).data_type(), windows, i));
    }
    cols.push(counts(per_row(&|w| w.agents as u64)));
    cols.push(counts(per_row(&|w| w.missing as u64)));
    RecordBatch::try_new(schema.clone(), cols)
}
