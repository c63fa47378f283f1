//! The SQL tables and their columns — the store's documented schema.
//!
//! Four tables: `spans` (one row per span), `span_events` (one row per span event /
//! annotation), `span_links` (one row per link) and `events` (raw low-level events from
//! simulators, the kernel and tracepoints). [`TABLES`] describes every column; `weft query
//! --schema` prints it and the README shows it.
//!
//! Conventions:
//! * ids are binary (`FixedSizeBinary(16)` trace ids, `FixedSizeBinary(8)` span ids); compare
//!   with `decode('4bf92f3577b34da6a3ce929d0e0e4736', 'hex')` or print with
//!   `encode(trace_id, 'hex')`;
//! * times are `Timestamp(ns, UTC)`; u64 nanoseconds are stored bit-for-bit, so times past
//!   2262 (which only garbage input produces) survive a round trip but sort as negative;
//! * attributes are `Map<Utf8, Utf8>` of text values with a type string beside them (see
//!   `attrs`): `attributes['http.method']`.

use std::sync::{Arc, OnceLock};

use datafusion::arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};

/// Table names.
pub const SPANS: &str = "spans";
/// Table of span events.
pub const SPAN_EVENTS: &str = "span_events";
/// Table of span links.
pub const SPAN_LINKS: &str = "span_links";
/// Table of raw events.
pub const EVENTS: &str = "events";

/// All tables, in a fixed order used for file naming and the WAL.
pub const TABLE_NAMES: [&str; 4] = [SPANS, SPAN_EVENTS, SPAN_LINKS, EVENTS];

/// One documented column.
#[derive(Debug, Clone, Copy)]
pub struct ColumnDoc {
    /// Column name.
    pub name: &'static str,
    /// SQL/Arrow type, as text.
    pub ty: &'static str,
    /// What it holds.
    pub doc: &'static str,
}

/// One documented table.
#[derive(Debug, Clone, Copy)]
pub struct TableDoc {
    /// Table name.
    pub name: &'static str,
    /// What a row is.
    pub doc: &'static str,
    /// Columns in order.
    pub columns: &'static [ColumnDoc],
}

const fn c(name: &'static str, ty: &'static str, doc: &'static str) -> ColumnDoc {
    ColumnDoc { name, ty, doc }
}

const ATTRS: &str = "Map<Utf8,Utf8>";

/// The documented schema of every table.
pub const TABLES: &[TableDoc] = &[
    TableDoc {
        name: SPANS,
        doc: "one row per span (segments are sorted by trace_id, then start_time)",
        columns: &[
            c("trace_id", "FixedSizeBinary(16)", "trace id"),
            c("span_id", "FixedSizeBinary(8)", "span id"),
            c("parent_span_id", "FixedSizeBinary(8) NULL", "parent span id; NULL for a root"),
            c("trace_state", "Utf8", "W3C tracestate ('' when absent)"),
            c("flags", "UInt32", "OTLP span flags (W3C trace flags in bits 0-7)"),
            c("name", "Utf8", "operation name"),
            c("kind", "Utf8", "unspecified | internal | server | client | producer | consumer"),
            c("start_time", "Timestamp(ns, UTC)", "start"),
            c("duration_ns", "Int64", "end - start in ns (end = start_time + duration_ns)"),
            c("status_code", "Utf8", "unset | ok | error"),
            c("status_message", "Utf8", "status message"),
            c("service_name", "Utf8", "resource attribute service.name ('' when absent)"),
            c("attributes", ATTRS, "span attributes as text: attributes['http.method']"),
            c("attribute_types", "Utf8", "one type tag per attribute, in map order (s i d b x a m e)"),
            c("dropped_attributes_count", "UInt32", "attributes the producer dropped"),
            c("dropped_events_count", "UInt32", "events the producer dropped"),
            c("dropped_links_count", "UInt32", "links the producer dropped"),
            c("resource_attributes", ATTRS, "resource attributes (service.name, host.name, ...)"),
            c("resource_attribute_types", "Utf8", "type tags of resource_attributes"),
            c("resource_dropped_attributes_count", "UInt32", "resource attributes dropped"),
            c("resource_schema_url", "Utf8", "OTLP ResourceSpans.schema_url"),
            c("scope_name", "Utf8", "instrumentation scope name"),
            c("scope_version", "Utf8", "instrumentation scope version"),
            c("scope_attributes", ATTRS, "instrumentation scope attributes"),
            c("scope_attribute_types", "Utf8", "type tags of scope_attributes"),
            c("scope_dropped_attributes_count", "UInt32", "scope attributes dropped"),
            c("scope_schema_url", "Utf8", "OTLP ScopeSpans.schema_url"),
        ],
    },
    TableDoc {
        name: SPAN_EVENTS,
        doc: "one row per span event (Zipkin annotation, Jaeger log), in the span's order",
        columns: &[
            c("trace_id", "FixedSizeBinary(16)", "trace of the span"),
            c("span_id", "FixedSizeBinary(8)", "the span"),
            c("time", "Timestamp(ns, UTC)", "when"),
            c("name", "Utf8", "event name (the Zipkin annotation value)"),
            c("attributes", ATTRS, "event attributes"),
            c("attribute_types", "Utf8", "type tags of attributes"),
            c("dropped_attributes_count", "UInt32", "attributes the producer dropped"),
        ],
    },
    TableDoc {
        name: SPAN_LINKS,
        doc: "one row per span link, in the span's order",
        columns: &[
            c("trace_id", "FixedSizeBinary(16)", "trace of the linking span"),
            c("span_id", "FixedSizeBinary(8)", "the linking span"),
            c("linked_trace_id", "FixedSizeBinary(16)", "trace of the linked span"),
            c("linked_span_id", "FixedSizeBinary(8)", "the linked span"),
            c("trace_state", "Utf8", "W3C tracestate of the linked context"),
            c("flags", "UInt32", "OTLP link flags"),
            c("relation", "Utf8", "'' | follows_from | child_of | caused_by"),
            c("attributes", ATTRS, "link attributes"),
            c("attribute_types", "Utf8", "type tags of attributes"),
            c("dropped_attributes_count", "UInt32", "attributes the producer dropped"),
        ],
    },
    TableDoc {
        name: EVENTS,
        doc: "one row per raw low-level event (simulators, kernel, tracepoints), sorted by time",
        columns: &[
            c("time", "Timestamp(ns, UTC)", "event time (through the source's clock)"),
            c("raw_time", "UInt64", "time in the source's own unit (simulated ps, TSC ticks)"),
            c("source", "UInt32", "source index in its topology or capture"),
            c("component", "Utf8 NULL", "host | nic | network | kernel | app (NULL: simulator sync)"),
            c(
                "type",
                "Utf8",
                "event type (HostMmioW, NicDmaEx, NetworkEnqueue, sched_switch, Tracepoint, ...)",
            ),
            c(
                "name",
                "Utf8 NULL",
                "event name: a tracepoint's own (provider:event), else the type (NULL in segments \
                 written before weft kept it apart, until compacted)",
            ),
            c("cpu", "UInt32 NULL", "CPU, when known"),
            c("pid", "UInt32 NULL", "process id, when the event names one"),
            c("tid", "UInt32 NULL", "thread id, when the event names one"),
            c(
                "fields",
                ATTRS,
                "the payload (Event::fields()) as text: fields['addr']; a payload field called \
                 name, cpu, pid or tid never stands for the columns",
            ),
            c("field_types", "Utf8", "type tags of fields"),
        ],
    },
];

/// The entries field of every attribute map column (`Map<Utf8, Utf8>`).
pub(crate) fn map_entries_field() -> Arc<Field> {
    static F: OnceLock<Arc<Field>> = OnceLock::new();
    F.get_or_init(|| {
        Arc::new(Field::new(
            "entries",
            DataType::Struct(Fields::from(vec![
                Field::new("keys", DataType::Utf8, false),
                Field::new("values", DataType::Utf8, true),
            ])),
            false,
        ))
    })
    .clone()
}

fn map_type() -> DataType {
    DataType::Map(map_entries_field(), false)
}

fn ts() -> DataType {
    DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()))
}

fn tid() -> DataType {
    DataType::FixedSizeBinary(16)
}

fn sid() -> DataType {
    DataType::FixedSizeBinary(8)
}

/// Schema of `spans`.
pub fn spans_schema() -> SchemaRef {
    static S: OnceLock<SchemaRef> = OnceLock::new();
    S.get_or_init(|| {
        Arc::new(Schema::new(vec![
            Field::new("trace_id", tid(), false),
            Field::new("span_id", sid(), false),
            Field::new("parent_span_id", sid(), true),
            Field::new("trace_state", DataType::Utf8, false),
            Field::new("flags", DataType::UInt32, false),
            Field::new("name", DataType::Utf8, false),
            Field::new("kind", DataType::Utf8, false),
            Field::new("start_time", ts(), false),
            Field::new("duration_ns", DataType::Int64, false),
            Field::new("status_code", DataType::Utf8, false),
            Field::new("status_message", DataType::Utf8, false),
            Field::new("service_name", DataType::Utf8, false),
            Field::new("attributes", map_type(), false),
            Field::new("attribute_types", DataType::Utf8, false),
            Field::new("dropped_attributes_count", DataType::UInt32, false),
            Field::new("dropped_events_count", DataType::UInt32, false),
            Field::new("dropped_links_count", DataType::UInt32, false),
            Field::new("resource_attributes", map_type(), false),
            Field::new("resource_attribute_types", DataType::Utf8, false),
            Field::new("resource_dropped_attributes_count", DataType::UInt32, false),
            Field::new("resource_schema_url", DataType::Utf8, false),
            Field::new("scope_name", DataType::Utf8, false),
            Field::new("scope_version", DataType::Utf8, false),
            Field::new("scope_attributes", map_type(), false),
            Field::new("scope_attribute_types", DataType::Utf8, false),
            Field::new("scope_dropped_attributes_count", DataType::UInt32, false),
            Field::new("scope_schema_url", DataType::Utf8, false),
        ]))
    })
    .clone()
}

/// The `spans` columns that describe the span's resource and instrumentation scope. A segment
/// stores each distinct (resource, scope) once, in its `span_resources` file, and its spans
/// file carries a `resource_ref` instead of these columns (see `segment`); SQL and every read
/// still see them on each span.
pub const RESOURCE_COLUMNS: [&str; 10] = [
    "resource_attributes",
    "resource_attribute_types",
    "resource_dropped_attributes_count",
    "resource_schema_url",
    "scope_name",
    "scope_version",
    "scope_attributes",
    "scope_attribute_types",
    "scope_dropped_attributes_count",
    "scope_schema_url",
];

/// How many of [`RESOURCE_COLUMNS`] (the first) segments and WAL records written before scopes
/// were stored once hold apart; their span rows carry the scope columns.
pub const RESOURCE_COLUMNS_V2: usize = 4;

/// Table name of a segment's resources file (not an SQL table).
pub const SPAN_RESOURCES: &str = "span_resources";

/// Column of a segment's spans file (and of its resources file) naming a resource:
/// `segment id << 32 | row of the resource in the segment's resources file`.
pub const RESOURCE_REF: &str = "resource_ref";

/// Schema of a segment's spans file: `spans` without [`RESOURCE_COLUMNS`], plus
/// [`RESOURCE_REF`] at the end.
pub fn spans_file_schema() -> SchemaRef {
    static S: OnceLock<SchemaRef> = OnceLock::new();
    S.get_or_init(|| spans_file_layout(&RESOURCE_COLUMNS)).clone()
}

/// Schema of a spans file (and of WAL records of kind 3) written before scopes were stored
/// once: only the resource columns apart, the scope columns on every row.
pub fn spans_file_schema_v2() -> SchemaRef {
    static S: OnceLock<SchemaRef> = OnceLock::new();
    S.get_or_init(|| spans_file_layout(&RESOURCE_COLUMNS[..RESOURCE_COLUMNS_V2])).clone()
}

fn spans_file_layout(apart: &[&str]) -> SchemaRef {
    let mut fields: Vec<Field> = spans_schema()
        .fields()
        .iter()
        .filter(|f| !apart.contains(&f.name().as_str()))
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new(RESOURCE_REF, DataType::UInt64, false));
    Arc::new(Schema::new(fields))
}

/// Schema of a segment's resources file: [`RESOURCE_REF`], then [`RESOURCE_COLUMNS`] as in
/// `spans`.
pub fn span_resources_schema() -> SchemaRef {
    static S: OnceLock<SchemaRef> = OnceLock::new();
    S.get_or_init(|| resources_layout(&RESOURCE_COLUMNS)).clone()
}

/// Schema of a resources file (and of WAL records of kind 3) written before scopes were stored
/// once: [`RESOURCE_REF`] and the resource columns only.
pub fn span_resources_schema_v2() -> SchemaRef {
    static S: OnceLock<SchemaRef> = OnceLock::new();
    S.get_or_init(|| resources_layout(&RESOURCE_COLUMNS[..RESOURCE_COLUMNS_V2])).clone()
}

fn resources_layout(apart: &[&str]) -> SchemaRef {
    let logical = spans_schema();
    let mut fields = vec![Field::new(RESOURCE_REF, DataType::UInt64, false)];
    for name in apart {
        if let Ok(f) = logical.field_with_name(name) {
            fields.push(f.clone());
        }
    }
    Arc::new(Schema::new(fields))
}

/// Schema of `span_events`.
pub fn span_events_schema() -> SchemaRef {
    static S: OnceLock<SchemaRef> = OnceLock::new();
    S.get_or_init(|| {
        Arc::new(Schema::new(vec![
            Field::new("trace_id", tid(), false),
            Field::new("span_id", sid(), false),
            Field::new("time", ts(), false),
            Field::new("name", DataType::Utf8, false),
            Field::new("attributes", map_type(), false),
            Field::new("attribute_types", DataType::Utf8, false),
            Field::new("dropped_attributes_count", DataType::UInt32, false),
        ]))
    })
    .clone()
}

/// Schema of `span_links`.
pub fn span_links_schema() -> SchemaRef {
    static S: OnceLock<SchemaRef> = OnceLock::new();
    S.get_or_init(|| {
        Arc::new(Schema::new(vec![
            Field::new("trace_id", tid(), false),
            Field::new("span_id", sid(), false),
            Field::new("linked_trace_id", tid(), false),
            Field::new("linked_span_id", sid(), false),
            Field::new("trace_state", DataType::Utf8, false),
            Field::new("flags", DataType::UInt32, false),
            Field::new("relation", DataType::Utf8, false),
            Field::new("attributes", map_type(), false),
            Field::new("attribute_types", DataType::Utf8, false),
            Field::new("dropped_attributes_count", DataType::UInt32, false),
        ]))
    })
    .clone()
}

/// Schema of `events`.
pub fn events_schema() -> SchemaRef {
    static S: OnceLock<SchemaRef> = OnceLock::new();
    S.get_or_init(|| events_layout(true)).clone()
}

/// Schema of `events` as written before the `name` column (WAL records of kind 2, older
/// segment files): a tracepoint's name was then the first entry of its `fields`.
pub fn events_schema_v1() -> SchemaRef {
    static S: OnceLock<SchemaRef> = OnceLock::new();
    S.get_or_init(|| events_layout(false)).clone()
}

fn events_layout(with_name: bool) -> SchemaRef {
    let mut f = vec![
        Field::new("time", ts(), false),
        Field::new("raw_time", DataType::UInt64, false),
        Field::new("source", DataType::UInt32, false),
        Field::new("component", DataType::Utf8, true),
        Field::new("type", DataType::Utf8, false),
    ];
    if with_name {
        f.push(Field::new("name", DataType::Utf8, true));
    }
    f.extend([
        Field::new("cpu", DataType::UInt32, true),
        Field::new("pid", DataType::UInt32, true),
        Field::new("tid", DataType::UInt32, true),
        Field::new("fields", map_type(), false),
        Field::new("field_types", DataType::Utf8, false),
    ]);
    Arc::new(Schema::new(f))
}

/// The schema of table number `i` in [`TABLE_NAMES`] order.
pub fn schema_of(table: usize) -> SchemaRef {
    match table {
        0 => spans_schema(),
        1 => span_events_schema(),
        2 => span_links_schema(),
        _ => events_schema(),
    }
}

/// The schema as Markdown (one table per SQL table), for `weft query --schema` and the README.
pub fn schema_markdown() -> String {
    let mut s = String::new();
    for t in TABLES {
        s.push_str(&format!("#### `{}` — {}\n\n| column | type | meaning |\n|---|---|---|\n", t.name, t.doc));
        for col in t.columns {
            // A `|` inside a cell (the kind and status value lists) would end the cell.
            let doc = col.doc.replace('|', "\\|");
            s.push_str(&format!("| `{}` | {} | {doc} |\n", col.name, col.ty));
        }
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docs_match_schemas() {
        for (i, t) in TABLES.iter().enumerate() {
            assert_eq!(t.name, TABLE_NAMES[i]);
            let schema = schema_of(i);
            let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
            let documented: Vec<&str> = t.columns.iter().map(|c| c.name).collect();
            assert_eq!(names, documented, "table {}", t.name);
        }
    }

    #[test]
    fn spans_file_and_resources_split_the_spans_columns() {
        let file = spans_file_schema();
        let res = span_resources_schema();
        assert_eq!(file.field(0).name(), "trace_id", "the sort key stays column 0");
        assert_eq!(res.fields().len(), 1 + RESOURCE_COLUMNS.len());
        for f in spans_schema().fields() {
            let in_file = file.field_with_name(f.name()).is_ok();
            let in_res = res.field_with_name(f.name()).is_ok();
            assert!(in_file != in_res, "{} must be in exactly one of the two files", f.name());
        }
    }

    #[test]
    fn markdown_rows_have_three_cells() {
        for line in schema_markdown().lines().filter(|l| l.starts_with("| `")) {
            let cells = line.replace("\\|", "").matches('|').count();
            assert_eq!(cells, 4, "{line}");
        }
    }
}
