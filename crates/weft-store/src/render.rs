//! Query results as JSON, CSV or a text table — shared by `POST /api/sql` and `weft query`.
//!
//! JSON keeps types: numbers stay numbers, booleans booleans, maps become objects, lists
//! arrays; ids (binary) are lower-case hex and times are RFC 3339 text in UTC.

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, MapArray, RecordBatch, StructArray, new_null_array,
};
use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use serde_json::{Map, Value as J};

fn fmt_opts() -> FormatOptions<'static> {
    FormatOptions::new().with_null("")
}

fn display(a: &dyn Array, i: usize) -> String {
    match ArrayFormatter::try_new(a, &fmt_opts()) {
        Ok(f) => f.value(i).to_string(),
        Err(e) => format!("<{e}>"),
    }
}

/// One cell as JSON.
pub fn cell_json(a: &ArrayRef, i: usize) -> J {
    if a.is_null(i) {
        return J::Null;
    }
    macro_rules! num {
        ($t:ty) => {
            J::from(a.as_primitive::<$t>().value(i))
        };
    }
    use datafusion::arrow::datatypes::*;
    match a.data_type() {
        DataType::Boolean => J::Bool(a.as_any().downcast_ref::<BooleanArray>().is_some_and(|b| b.value(i))),
        DataType::Int8 => num!(Int8Type),
        DataType::Int16 => num!(Int16Type),
        DataType::Int32 => num!(Int32Type),
        DataType::Int64 => num!(Int64Type),
        DataType::UInt8 => num!(UInt8Type),
        DataType::UInt16 => num!(UInt16Type),
        DataType::UInt32 => num!(UInt32Type),
        DataType::UInt64 => num!(UInt64Type),
        DataType::Float32 | DataType::Float64 => {
            let v = if matches!(a.data_type(), DataType::Float32) {
                a.as_primitive::<Float32Type>().value(i) as f64
            } else {
                a.as_primitive::<Float64Type>().value(i)
            };
            serde_json::Number::from_f64(v).map(J::Number).unwrap_or_else(|| J::String(v.to_string()))
        }
        DataType::Utf8 => J::String(a.as_string::<i32>().value(i).to_owned()),
        DataType::LargeUtf8 => J::String(a.as_string::<i64>().value(i).to_owned()),
        DataType::Utf8View => J::String(a.as_string_view().value(i).to_owned()),
        DataType::Map(_, _) => {
            let Some(m) = a.as_any().downcast_ref::<MapArray>() else { return J::String(display(a, i)) };
            let entries = m.value(i);
            let (keys, values) = (entries.column(0).clone(), entries.column(1).clone());
            let mut obj = Map::new();
            for k in 0..entries.len() {
                obj.insert(display(keys.as_ref(), k), cell_json(&values, k));
            }
            J::Object(obj)
        }
        DataType::List(_) => {
            let v = a.as_list::<i32>().value(i);
            J::Array((0..v.len()).map(|k| cell_json(&v, k)).collect())
        }
        DataType::LargeList(_) => {
            let v = a.as_list::<i64>().value(i);
            J::Array((0..v.len()).map(|k| cell_json(&v, k)).collect())
        }
        DataType::Struct(fields) => {
            let Some(s) = a.as_any().downcast_ref::<StructArray>() else { return J::String(display(a, i)) };
            let mut obj = Map::new();
            for (f, c) in fields.iter().zip(s.columns()) {
                obj.insert(f.name().clone(), cell_json(c, i));
            }
            J::Object(obj)
        }
        _ => J::String(display(a.as_ref(), i)),
    }
}

/// `{"columns": [{"name", "type"}], "rows": [[...]]}`.
pub fn to_json(schema: &Schema, batches: &[RecordBatch]) -> J {
    let columns: Vec<J> = schema
        .fields()
        .iter()
        .map(|f| serde_json::json!({"name": f.name(), "type": f.data_type().to_string()}))
        .collect();
    let mut rows = Vec::new();
    for b in batches {
        for i in 0..b.num_rows() {
            rows.push(J::Array(b.columns().iter().map(|c| cell_json(c, i)).collect()));
        }
    }
    serde_json::json!({"columns": columns, "rows": rows})
}

fn csv_field(out: &mut String, s: &str) {
    if s.contains([',', '"', '\n', '\r']) {
        out.push('"');
        out.push_str(&s.replace('"', "\"\""));
        out.push('"');
    } else {
        out.push_str(s);
    }
}

/// RFC 4180 CSV with a header row; nested values as JSON text.
pub fn to_csv(schema: &Schema, batches: &[RecordBatch]) -> String {
    let mut out = String::new();
    for (k, f) in schema.fields().iter().enumerate() {
        if k > 0 {
            out.push(',');
        }
        csv_field(&mut out, f.name());
    }
    out.push_str("\r\n");
    for b in batches {
        for i in 0..b.num_rows() {
            for (k, c) in b.columns().iter().enumerate() {
                if k > 0 {
                    out.push(',');
                }
                let text = match c.data_type() {
                    DataType::Map(_, _)
                    | DataType::List(_)
                    | DataType::LargeList(_)
                    | DataType::Struct(_) => {
                        if c.is_null(i) {
                            String::new()
                        } else {
                            cell_json(c, i).to_string()
                        }
                    }
                    _ => display(c.as_ref(), i),
                };
                csv_field(&mut out, &text);
            }
            out.push_str("\r\n");
        }
    }
    out
}

/// A boxed text table.
pub fn to_table(schema: &Schema, batches: &[RecordBatch]) -> String {
    if batches.iter().all(|b| b.num_rows() == 0) {
        // Show the header even for no rows.
        let cols: Vec<ArrayRef> = schema.fields().iter().map(|f| new_null_array(f.data_type(), 0)).collect();
        let empty = RecordBatch::try_new(std::sync::Arc::new(schema.clone()), cols);
        return match empty {
            Ok(b) => datafusion::arrow::util::pretty::pretty_format_batches(&[b])
                .map(|t| t.to_string())
                .unwrap_or_default(),
            Err(e) => e.to_string(),
        };
    }
    match datafusion::arrow::util::pretty::pretty_format_batches_with_options(batches, &fmt_opts()) {
        Ok(t) => t.to_string(),
        Err(e) => format!("cannot format the result: {e}"),
    }
}

/// The first column as strings (nulls skipped).
pub fn first_column_strings(batches: &[RecordBatch]) -> Vec<String> {
    let mut out = Vec::new();
    for b in batches {
        if b.num_columns() == 0 {
            continue;
        }
        let c = b.column(0);
        for i in 0..b.num_rows() {
            if !c.is_null(i) {
                out.push(display(c.as_ref(), i));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arrow_rows::spans_to_batches;

    #[test]
    fn spans_render_in_every_format() {
        let spans: Vec<_> = (0..3).map(crate::testutil::span).collect();
        let b = spans_to_batches(&spans).unwrap().logical_spans().unwrap();
        let schema = b.schema();
        let j = to_json(&schema, std::slice::from_ref(&b));
        let row = &j["rows"][0];
        assert_eq!(row[0], J::String(spans[0].trace_id.to_string()));
        assert_eq!(row[12]["http.status_code"], J::String("200".into()));
        assert!(row[7].as_str().unwrap().starts_with("2023-11-14T22:13:20"), "{}", row[7]);
        let csv = to_csv(&schema, std::slice::from_ref(&b));
        assert_eq!(csv.lines().count(), 4);
        assert!(csv.starts_with("trace_id,span_id,"));
        let t = to_table(&schema, std::slice::from_ref(&b));
        assert!(t.contains(&spans[0].trace_id.to_string()));
        assert!(to_table(&schema, &[]).contains("trace_id"));
        assert_eq!(first_column_strings(&[b]).len(), 3);
    }
}
