//! Spans and events to Arrow record batches (the schema in [`crate::schema`]) and back.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, FixedSizeBinaryArray, FixedSizeBinaryBuilder, Int64Array, MapArray, RecordBatch,
    StringArray, StringBuilder, TimestampNanosecondArray, UInt32Array, UInt32Builder, UInt64Array,
};
use weft_model::{
    Attributes, Event, Link, LinkRelation, Resource, Scope, Span, SpanEvent, SpanId, SpanKind, Status,
    StatusCode, TraceId, Value,
};

use crate::attrs::{AttrColumns, AttrSize, read_attrs};
use crate::error::{Result, StoreError};
use crate::schema;

/// The batches one group of spans becomes.
#[derive(Debug, Clone)]
pub struct SpanBatches {
    /// Rows of `spans` in the segment files' layout: without the resource columns, with a
    /// `resource_ref` naming a row of `resources` (see [`SpanBatches::logical_spans`]).
    pub spans: RecordBatch,
    /// The distinct resources of `spans` (schema of a segment's `span_resources` file,
    /// `resource_ref` = row number).
    pub resources: RecordBatch,
    /// Rows of `span_events`.
    pub events: RecordBatch,
    /// Rows of `span_links`.
    pub links: RecordBatch,
}

impl SpanBatches {
    /// The `spans` rows with their resource columns (the SQL table's schema).
    pub fn logical_spans(&self) -> Result<RecordBatch> {
        crate::resources::expand_local(&self.spans, &self.resources)
    }
}

fn ts_array(v: Vec<i64>) -> ArrayRef {
    Arc::new(TimestampNanosecondArray::from(v).with_timezone("UTC"))
}

fn fsb(capacity: usize, width: i32) -> FixedSizeBinaryBuilder {
    FixedSizeBinaryBuilder::with_capacity(capacity, width)
}

/// Distinct resources of one conversion compared with each new one.
const MAX_COMPARED: usize = 64;

/// Converts spans to record batches of `spans` (and its resources), `span_events` and
/// `span_links`. Each distinct resource is converted once.
pub fn spans_to_batches(spans: &[Span]) -> Result<SpanBatches> {
    let n = spans.len();
    // One cheap pass first, so that every builder is allocated once at its final size.
    let (mut sz_attrs, mut sz_res, mut sz_scope, mut sz_ev) =
        (AttrSize::default(), AttrSize::default(), AttrSize::default(), AttrSize::default());
    let (mut name_bytes, mut ev_name_bytes) = (0, 0);
    for s in spans {
        sz_attrs.add(&s.attributes);
        name_bytes += s.name.len();
        for e in &s.events {
            sz_ev.add(&e.attributes);
            ev_name_bytes += e.name.len();
        }
    }
    let mut trace_id = fsb(n, 16);
    let mut span_id = fsb(n, 8);
    let mut parent = fsb(n, 8);
    let mut trace_state = StringBuilder::with_capacity(n, 0);
    let mut flags = UInt32Builder::with_capacity(n);
    let mut name = StringBuilder::with_capacity(n, name_bytes);
    let mut kind = StringBuilder::with_capacity(n, n * 6);
    let mut start = Vec::with_capacity(n);
    let mut duration = Vec::with_capacity(n);
    let mut status_code = StringBuilder::with_capacity(n, n * 5);
    let mut status_msg = StringBuilder::with_capacity(n, 0);
    let mut service = StringBuilder::with_capacity(n, n * 16);
    let mut attrs = AttrColumns::sized(sz_attrs);
    let mut dropped_attrs = UInt32Builder::with_capacity(n);
    let mut dropped_events = UInt32Builder::with_capacity(n);
    let mut dropped_links = UInt32Builder::with_capacity(n);
    // Distinct (resource, scope) pairs in order of first appearance, and each span's.
    let mut resources: Vec<(&Arc<Resource>, &Arc<Scope>)> = Vec::new();
    let mut resource_ref: Vec<u64> = Vec::with_capacity(n);

    let n_events: usize = spans.iter().map(|s| s.events.len()).sum();
    let mut ev_trace = fsb(n_events, 16);
    let mut ev_span = fsb(n_events, 8);
    let mut ev_time = Vec::with_capacity(n_events);
    let mut ev_name = StringBuilder::with_capacity(n_events, ev_name_bytes);
    let mut ev_attrs = AttrColumns::sized(sz_ev);
    let mut ev_dropped = UInt32Builder::with_capacity(n_events);

    let n_links: usize = spans.iter().map(|s| s.links.len()).sum();
    let mut ln_trace = fsb(n_links, 16);
    let mut ln_span = fsb(n_links, 8);
    let mut ln_ltrace = fsb(n_links, 16);
    let mut ln_lspan = fsb(n_links, 8);
    let mut ln_state = StringBuilder::with_capacity(n_links, 0);
    let mut ln_flags = UInt32Builder::with_capacity(n_links);
    let mut ln_rel = StringBuilder::with_capacity(n_links, n_links * 8);
    let mut ln_attrs = AttrColumns::with_capacity(n_links);
    let mut ln_dropped = UInt32Builder::with_capacity(n_links);

    // Consecutive spans usually share their resource and scope (`Arc`s from one decoded
    // request): the previous span's pair is reused without comparing content.
    let mut prev: Option<&Span> = None;
    for s in spans {
        trace_id.append_value(s.trace_id.0)?;
        span_id.append_value(s.span_id.0)?;
        match s.parent_span_id {
            Some(p) => parent.append_value(p.0)?,
            None => parent.append_null(),
        }
        trace_state.append_value(&s.trace_state);
        flags.append_value(s.flags);
        name.append_value(&s.name);
        kind.append_value(s.kind.as_str());
        start.push(s.start_ns as i64);
        duration.push(s.end_ns.wrapping_sub(s.start_ns) as i64);
        status_code.append_value(s.status.code.as_str());
        status_msg.append_value(&s.status.message);
        service.append_value(s.resource.service_name());
        attrs.append(&s.attributes);
        dropped_attrs.append_value(s.dropped_attributes_count);
        dropped_events.append_value(s.dropped_events_count);
        dropped_links.append_value(s.dropped_links_count);
        let r = match (prev, resource_ref.last()) {
            (Some(p), Some(&r))
                if Arc::ptr_eq(&p.resource, &s.resource) && Arc::ptr_eq(&p.scope, &s.scope) =>
            {
                r
            }
            // A request often names one resource and scope in many `ResourceSpans` (spans of
            // a trace interleave services): compare content, so `resources` stays a handful of
            // rows. Past `MAX_COMPARED` distinct ones, a repeat may get a row of its own (the
            // buffer numbers resources by content anyway) rather than costing a quadratic search.
            _ => match resources.iter().take(MAX_COMPARED).position(|(r, sc)| {
                (Arc::ptr_eq(r, &s.resource) || ***r == *s.resource)
                    && (Arc::ptr_eq(sc, &s.scope) || ***sc == *s.scope)
            }) {
                Some(i) => i as u64,
                None => {
                    resources.push((&s.resource, &s.scope));
                    resources.len() as u64 - 1
                }
            },
        };
        resource_ref.push(r);

        for e in &s.events {
            ev_trace.append_value(s.trace_id.0)?;
            ev_span.append_value(s.span_id.0)?;
            ev_time.push(e.time_ns as i64);
            ev_name.append_value(&e.name);
            ev_attrs.append(&e.attributes);
            ev_dropped.append_value(e.dropped_attributes_count);
        }
        for l in &s.links {
            ln_trace.append_value(s.trace_id.0)?;
            ln_span.append_value(s.span_id.0)?;
            ln_ltrace.append_value(l.trace_id.0)?;
            ln_lspan.append_value(l.span_id.0)?;
            ln_state.append_value(&l.trace_state);
            ln_flags.append_value(l.flags);
            ln_rel.append_value(l.relation.as_str());
            ln_attrs.append(&l.attributes);
            ln_dropped.append_value(l.dropped_attributes_count);
        }
        prev = Some(s);
    }

    let (attrs_map, attrs_types) = attrs.finish("spans.attributes")?;
    let (ev_attrs_map, ev_attrs_types) = ev_attrs.finish("span_events.attributes")?;
    let (ln_attrs_map, ln_attrs_types) = ln_attrs.finish("span_links.attributes")?;
    for (r, sc) in &resources {
        sz_res.add(&r.attributes);
        sz_scope.add(&sc.attributes);
    }
    let (mut res_attrs, mut scope_attrs) = (AttrColumns::sized(sz_res), AttrColumns::sized(sz_scope));
    for (r, sc) in &resources {
        res_attrs.append(&r.attributes);
        scope_attrs.append(&sc.attributes);
    }
    let (res_attrs_map, res_attrs_types) = res_attrs.finish("span_resources.resource_attributes")?;
    let (scope_attrs_map, scope_attrs_types) = scope_attrs.finish("span_resources.scope_attributes")?;
    let text = |f: for<'a> fn(&'a (&Arc<Resource>, &Arc<Scope>)) -> &'a str| -> ArrayRef {
        Arc::new(StringArray::from_iter_values(resources.iter().map(f)))
    };
    let resources_batch = RecordBatch::try_new(
        schema::span_resources_schema(),
        vec![
            Arc::new(UInt64Array::from_iter_values(0..resources.len() as u64)),
            Arc::new(res_attrs_map),
            Arc::new(res_attrs_types),
            Arc::new(UInt32Array::from_iter_values(
                resources.iter().map(|(r, _)| r.dropped_attributes_count),
            )),
            text(|(r, _)| &r.schema_url),
            text(|(_, sc)| &sc.name),
            text(|(_, sc)| &sc.version),
            Arc::new(scope_attrs_map),
            Arc::new(scope_attrs_types),
            Arc::new(UInt32Array::from_iter_values(
                resources.iter().map(|(_, sc)| sc.dropped_attributes_count),
            )),
            text(|(_, sc)| &sc.schema_url),
        ],
    )?;
    let spans_batch = RecordBatch::try_new(
        schema::spans_file_schema(),
        vec![
            Arc::new(trace_id.finish()),
            Arc::new(span_id.finish()),
            Arc::new(parent.finish()),
            Arc::new(trace_state.finish()),
            Arc::new(flags.finish()),
            Arc::new(name.finish()),
            Arc::new(kind.finish()),
            ts_array(start),
            Arc::new(Int64Array::from(duration)),
            Arc::new(status_code.finish()),
            Arc::new(status_msg.finish()),
            Arc::new(service.finish()),
            Arc::new(attrs_map),
            Arc::new(attrs_types),
            Arc::new(dropped_attrs.finish()),
            Arc::new(dropped_events.finish()),
            Arc::new(dropped_links.finish()),
            Arc::new(UInt64Array::from(resource_ref)),
        ],
    )?;
    let events_batch = RecordBatch::try_new(
        schema::span_events_schema(),
        vec![
            Arc::new(ev_trace.finish()),
            Arc::new(ev_span.finish()),
            ts_array(ev_time),
            Arc::new(ev_name.finish()),
            Arc::new(ev_attrs_map),
            Arc::new(ev_attrs_types),
            Arc::new(ev_dropped.finish()),
        ],
    )?;
    let links_batch = RecordBatch::try_new(
        schema::span_links_schema(),
        vec![
            Arc::new(ln_trace.finish()),
            Arc::new(ln_span.finish()),
            Arc::new(ln_ltrace.finish()),
            Arc::new(ln_lspan.finish()),
            Arc::new(ln_state.finish()),
            Arc::new(ln_flags.finish()),
            Arc::new(ln_rel.finish()),
            Arc::new(ln_attrs_map),
            Arc::new(ln_attrs_types),
            Arc::new(ln_dropped.finish()),
        ],
    )?;
    Ok(SpanBatches {
        spans: spans_batch,
        resources: resources_batch,
        events: events_batch,
        links: links_batch,
    })
}

/// Converts raw events to a batch of the `events` table.
pub fn events_to_batch(events: &[Event]) -> Result<RecordBatch> {
    let n = events.len();
    let mut time = Vec::with_capacity(n);
    let mut raw = Vec::with_capacity(n);
    let mut source = UInt32Builder::with_capacity(n);
    let mut component = StringBuilder::with_capacity(n, n * 4);
    let mut ty = StringBuilder::with_capacity(n, n * 10);
    let mut name = StringBuilder::with_capacity(n, n * 16);
    let mut cpu = UInt32Builder::with_capacity(n);
    let mut pid = UInt32Builder::with_capacity(n);
    let mut tid = UInt32Builder::with_capacity(n);
    let mut fields = AttrColumns::with_capacity(n);
    for e in events {
        time.push(e.time_ns as i64);
        raw.push(e.raw_time);
        source.append_value(e.source.0);
        component.append_option(e.component().map(|c| c.as_str()));
        ty.append_value(e.type_name());
        name.append_value(e.name());
        cpu.append_option(e.cpu());
        let (p, t) = e.pid_tid();
        pid.append_option(p);
        tid.append_option(t);
        fields.append(&e.fields());
    }
    let (fields_map, fields_types) = fields.finish("events.fields")?;
    Ok(RecordBatch::try_new(
        schema::events_schema(),
        vec![
            ts_array(time),
            Arc::new(UInt64Array::from(raw)),
            Arc::new(source.finish()),
            Arc::new(component.finish()),
            Arc::new(ty.finish()),
            Arc::new(name.finish()),
            Arc::new(cpu.finish()),
            Arc::new(pid.finish()),
            Arc::new(tid.finish()),
            Arc::new(fields_map),
            Arc::new(fields_types),
        ],
    )?)
}

/// `events` rows as the current schema has them, whichever schema they were written with:
/// rows of [`schema::events_schema_v1`] (before the `name` column) get their `name` — a
/// tracepoint's was the first entry of its `fields`, which it leaves; any other event's is its
/// type. Rows of the current schema pass unchanged.
pub(crate) fn events_rows(b: RecordBatch) -> Result<RecordBatch> {
    if b.schema().column_with_name("name").is_some() {
        return Ok(b);
    }
    let c = Cols::new(&b, "events");
    let ty = c.get::<StringArray>("type")?;
    let (map, types) = (c.get::<MapArray>("fields")?, c.get::<StringArray>("field_types")?);
    let n = b.num_rows();
    let mut name = StringBuilder::with_capacity(n, n * 16);
    let mut fields = AttrColumns::with_capacity(n);
    for i in 0..n {
        let mut f = read_attrs(map, types, i, "event field")?;
        let t = str_at(ty, i);
        match f.0.first() {
            Some(kv) if t == "Tracepoint" && &*kv.key == "name" => {
                name.append_value(kv.value.as_str().unwrap_or_default());
                f.0.remove(0);
            }
            _ => name.append_value(t),
        }
        fields.append(&f);
    }
    let (fields_map, fields_types) = fields.finish("events.fields")?;
    let mut cols: Vec<ArrayRef> = Vec::with_capacity(b.num_columns() + 1);
    for f in schema::events_schema().fields() {
        cols.push(match f.name().as_str() {
            "name" => Arc::new(name.finish()),
            "fields" => Arc::new(fields_map.clone()),
            "field_types" => Arc::new(fields_types.clone()),
            other => c.col(other)?.clone(),
        });
    }
    Ok(RecordBatch::try_new(schema::events_schema(), cols)?)
}

// ---------------------------------------------------------------------------------------------
// Reading back.

/// Typed access to a batch's columns by name, with errors naming the column.
pub(crate) struct Cols<'a> {
    batch: &'a RecordBatch,
    table: &'static str,
}

impl<'a> Cols<'a> {
    pub fn new(batch: &'a RecordBatch, table: &'static str) -> Self {
        Cols { batch, table }
    }
    fn col(&self, name: &str) -> Result<&'a ArrayRef> {
        self.batch
            .column_by_name(name)
            .ok_or_else(|| StoreError::Decode(format!("{}: missing column {name}", self.table)))
    }
    pub fn get<T: 'static>(&self, name: &str) -> Result<&'a T> {
        self.col(name)?.as_any().downcast_ref::<T>().ok_or_else(|| {
            StoreError::Decode(format!("{}: column {name} has an unexpected type", self.table))
        })
    }
    pub fn fsb(&self, name: &str, width: i32) -> Result<&'a FixedSizeBinaryArray> {
        let a = self.get::<FixedSizeBinaryArray>(name)?;
        if a.value_length() != width {
            return Err(StoreError::Decode(format!(
                "{}: column {name} is not {width} bytes wide",
                self.table
            )));
        }
        Ok(a)
    }
}

pub(crate) fn trace_id_at(a: &FixedSizeBinaryArray, i: usize) -> TraceId {
    let mut b = [0u8; 16];
    b.copy_from_slice(a.value(i));
    TraceId(b)
}

pub(crate) fn span_id_at(a: &FixedSizeBinaryArray, i: usize) -> SpanId {
    let mut b = [0u8; 8];
    b.copy_from_slice(a.value(i));
    SpanId(b)
}

fn str_at(a: &StringArray, i: usize) -> &str {
    if a.is_null(i) { "" } else { a.value(i) }
}

fn status_code(s: &str) -> StatusCode {
    match s {
        "ok" => StatusCode::Ok,
        "error" => StatusCode::Error,
        _ => StatusCode::Unset,
    }
}

type SpanKey = (TraceId, SpanId);

/// Rebuilds spans from batches of the three span tables. Events and links are attached to
/// their span by (trace id, span id) in their stored order; spans come out in batch order.
pub fn batches_to_spans(
    spans: &[RecordBatch],
    events: &[RecordBatch],
    links: &[RecordBatch],
) -> Result<Vec<Span>> {
    let mut ev_by_span: HashMap<SpanKey, Vec<SpanEvent>> = HashMap::new();
    for b in events {
        let c = Cols::new(b, schema::SPAN_EVENTS);
        let (tr, sp) = (c.fsb("trace_id", 16)?, c.fsb("span_id", 8)?);
        let time = c.get::<TimestampNanosecondArray>("time")?;
        let name = c.get::<StringArray>("name")?;
        let attrs = c.get::<MapArray>("attributes")?;
        let types = c.get::<StringArray>("attribute_types")?;
        let dropped = c.get::<UInt32Array>("dropped_attributes_count")?;
        for i in 0..b.num_rows() {
            ev_by_span.entry((trace_id_at(tr, i), span_id_at(sp, i))).or_default().push(SpanEvent {
                time_ns: time.value(i) as u64,
                name: str_at(name, i).to_owned().into(),
                attributes: read_attrs(attrs, types, i, "span event attribute")?,
                dropped_attributes_count: dropped.value(i),
            });
        }
    }
    let mut ln_by_span: HashMap<SpanKey, Vec<Link>> = HashMap::new();
    for b in links {
        let c = Cols::new(b, schema::SPAN_LINKS);
        let (tr, sp) = (c.fsb("trace_id", 16)?, c.fsb("span_id", 8)?);
        let (ltr, lsp) = (c.fsb("linked_trace_id", 16)?, c.fsb("linked_span_id", 8)?);
        let state = c.get::<StringArray>("trace_state")?;
        let flags = c.get::<UInt32Array>("flags")?;
        let rel = c.get::<StringArray>("relation")?;
        let attrs = c.get::<MapArray>("attributes")?;
        let types = c.get::<StringArray>("attribute_types")?;
        let dropped = c.get::<UInt32Array>("dropped_attributes_count")?;
        for i in 0..b.num_rows() {
            ln_by_span.entry((trace_id_at(tr, i), span_id_at(sp, i))).or_default().push(Link {
                trace_id: trace_id_at(ltr, i),
                span_id: span_id_at(lsp, i),
                trace_state: str_at(state, i).to_owned(),
                relation: LinkRelation::parse(str_at(rel, i)),
                attributes: read_attrs(attrs, types, i, "span link attribute")?,
                dropped_attributes_count: dropped.value(i),
                flags: flags.value(i),
            });
        }
    }

    let mut out = Vec::with_capacity(spans.iter().map(|b| b.num_rows()).sum());
    // Resources and scopes repeat across spans: share one `Arc` per distinct value.
    let mut resources: Vec<Arc<Resource>> = Vec::new();
    let mut scopes: Vec<Arc<Scope>> = Vec::new();
    for b in spans {
        let c = Cols::new(b, schema::SPANS);
        let tr = c.fsb("trace_id", 16)?;
        let sp = c.fsb("span_id", 8)?;
        let parent = c.fsb("parent_span_id", 8)?;
        let trace_state = c.get::<StringArray>("trace_state")?;
        let flags = c.get::<UInt32Array>("flags")?;
        let name = c.get::<StringArray>("name")?;
        let kind = c.get::<StringArray>("kind")?;
        let start = c.get::<TimestampNanosecondArray>("start_time")?;
        let dur = c.get::<Int64Array>("duration_ns")?;
        let scode = c.get::<StringArray>("status_code")?;
        let smsg = c.get::<StringArray>("status_message")?;
        let attrs = c.get::<MapArray>("attributes")?;
        let types = c.get::<StringArray>("attribute_types")?;
        let d_attrs = c.get::<UInt32Array>("dropped_attributes_count")?;
        let d_events = c.get::<UInt32Array>("dropped_events_count")?;
        let d_links = c.get::<UInt32Array>("dropped_links_count")?;
        let r_attrs = c.get::<MapArray>("resource_attributes")?;
        let r_types = c.get::<StringArray>("resource_attribute_types")?;
        let r_dropped = c.get::<UInt32Array>("resource_dropped_attributes_count")?;
        let r_schema = c.get::<StringArray>("resource_schema_url")?;
        let sc_name = c.get::<StringArray>("scope_name")?;
        let sc_version = c.get::<StringArray>("scope_version")?;
        let sc_attrs = c.get::<MapArray>("scope_attributes")?;
        let sc_types = c.get::<StringArray>("scope_attribute_types")?;
        let sc_dropped = c.get::<UInt32Array>("scope_dropped_attributes_count")?;
        let sc_schema = c.get::<StringArray>("scope_schema_url")?;
        for i in 0..b.num_rows() {
            let trace_id = trace_id_at(tr, i);
            let span_id = span_id_at(sp, i);
            let resource = Resource {
                attributes: read_attrs(r_attrs, r_types, i, "resource attribute")?,
                dropped_attributes_count: r_dropped.value(i),
                schema_url: str_at(r_schema, i).to_owned(),
            };
            let resource = intern(&mut resources, resource);
            let scope = Scope {
                name: str_at(sc_name, i).to_owned(),
                version: str_at(sc_version, i).to_owned(),
                attributes: read_attrs(sc_attrs, sc_types, i, "scope attribute")?,
                dropped_attributes_count: sc_dropped.value(i),
                schema_url: str_at(sc_schema, i).to_owned(),
            };
            let scope = intern(&mut scopes, scope);
            let start_ns = start.value(i) as u64;
            let key = (trace_id, span_id);
            out.push(Span {
                trace_id,
                span_id,
                parent_span_id: if parent.is_null(i) { None } else { Some(span_id_at(parent, i)) },
                trace_state: str_at(trace_state, i).to_owned(),
                flags: flags.value(i),
                name: str_at(name, i).to_owned().into(),
                kind: SpanKind::parse(str_at(kind, i)).unwrap_or_default(),
                start_ns,
                end_ns: start_ns.wrapping_add(dur.value(i) as u64),
                status: Status { code: status_code(str_at(scode, i)), message: str_at(smsg, i).to_owned() },
                attributes: read_attrs(attrs, types, i, "span attribute")?,
                events: ev_by_span.remove(&key).unwrap_or_default(),
                links: ln_by_span.remove(&key).unwrap_or_default(),
                resource,
                scope,
                dropped_attributes_count: d_attrs.value(i),
                dropped_events_count: d_events.value(i),
                dropped_links_count: d_links.value(i),
            });
        }
    }
    Ok(out)
}

/// Returns a shared `Arc` equal to `v`, reusing a recent one (resources and scopes repeat).
fn intern<T: PartialEq>(cache: &mut Vec<Arc<T>>, v: T) -> Arc<T> {
    if let Some(a) = cache.iter().rev().find(|a| ***a == v) {
        return a.clone();
    }
    let a = Arc::new(v);
    if cache.len() >= 64 {
        cache.remove(0);
    }
    cache.push(a.clone());
    a
}

/// Keeps only the rows of `batch` whose `trace_id` column equals `id`.
pub(crate) fn filter_trace(batch: &RecordBatch, id: &TraceId) -> Result<Option<RecordBatch>> {
    let Some(col) = batch.column_by_name("trace_id") else {
        return Err(StoreError::Decode("batch without a trace_id column".into()));
    };
    let Some(ids) = col.as_any().downcast_ref::<FixedSizeBinaryArray>() else {
        return Err(StoreError::Decode("trace_id column is not FixedSizeBinary".into()));
    };
    if ids.value_length() != 16 {
        return Err(StoreError::Decode("trace_id column is not 16 bytes wide".into()));
    }
    let mask: datafusion::arrow::array::BooleanArray =
        (0..ids.len()).map(|i| Some(!ids.is_null(i) && ids.value(i) == id.0)).collect();
    if mask.true_count() == 0 {
        return Ok(None);
    }
    Ok(Some(datafusion::arrow::compute::filter_record_batch(batch, &mask)?))
}

/// Attributes helper for tests and callers that build spans.
pub fn attrs(pairs: &[(&str, Value)]) -> Attributes {
    pairs.iter().map(|(k, v)| weft_model::KeyValue::new(*k, v.clone())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_model::SourceId;

    use crate::testutil::span as sample_span;

    #[test]
    fn spans_round_trip_through_batches() {
        let spans: Vec<Span> = (0..10).map(sample_span).collect();
        let b = spans_to_batches(&spans).unwrap();
        assert_eq!(b.spans.num_rows(), 10);
        assert_eq!(b.events.num_rows(), 20);
        assert_eq!(b.links.num_rows(), 5);
        let back = batches_to_spans(&[b.logical_spans().unwrap()], &[b.events], &[b.links]).unwrap();
        assert_eq!(back, spans);
    }

    /// Spans of one decoded request share their resource and scope (`Arc`s): those rows are
    /// copies of the previous row, which must read back exactly, across changes of resource,
    /// of scope, and of empty attribute lists.
    #[test]
    fn shared_resources_and_scopes_round_trip() {
        let mut spans: Vec<Span> = Vec::new();
        let mut r = Resource::service("a");
        r.attributes.push("host.name", "h1");
        r.attributes.push("process.pid", Value::I64(42));
        let (ra, rb, re) = (Arc::new(r), Arc::new(Resource::service("b")), Arc::new(Resource::default()));
        let sa = Arc::new(Scope { name: "lib".into(), version: "1".into(), ..Scope::default() });
        let mut scoped = Scope::default();
        scoped.attributes.push("scope.k", Value::Bool(true));
        let sb = Arc::new(scoped);
        for (i, (res, scope)) in [
            (&re, &sa),
            (&re, &sa),
            (&ra, &sa),
            (&ra, &sa),
            (&ra, &sb),
            (&rb, &sb),
            (&rb, &sb),
            (&ra, &sa),
            (&ra, &sa),
        ]
        .into_iter()
        .enumerate()
        {
            let mut sp = sample_span(i as u64);
            sp.resource = Arc::clone(res);
            sp.scope = Arc::clone(scope);
            spans.push(sp);
        }
        let b = spans_to_batches(&spans).unwrap();
        // Each (resource, scope) once, in order of first appearance, whether or not its spans
        // are adjacent.
        assert_eq!(b.resources.num_rows(), 4);
        let refs = b.spans.column_by_name("resource_ref").unwrap();
        let refs = refs.as_any().downcast_ref::<UInt64Array>().unwrap();
        assert_eq!(refs.values().to_vec(), vec![0, 0, 1, 1, 2, 3, 3, 1, 1]);
        let back = batches_to_spans(&[b.logical_spans().unwrap()], &[b.events], &[b.links]).unwrap();
        assert_eq!(back, spans);
    }

    #[test]
    fn odd_times_survive() {
        let mut s = sample_span(0);
        s.start_ns = u64::MAX - 1;
        s.end_ns = 3; // end before start: kept as given
        let b = spans_to_batches(std::slice::from_ref(&s)).unwrap();
        let back = batches_to_spans(&[b.logical_spans().unwrap()], &[b.events], &[b.links]).unwrap();
        assert_eq!(back[0].start_ns, u64::MAX - 1);
        assert_eq!(back[0].end_ns, 3);
    }

    #[test]
    fn events_become_rows() {
        use weft_model::event::{EventKind, KernelEvent};
        let e = Event {
            time_ns: 10,
            raw_time: 20,
            source: SourceId(2),
            kind: EventKind::Kernel(KernelEvent::SyscallExit { cpu: 1, pid: 100, tid: 101, nr: 0, ret: -2 }),
        };
        let b = events_to_batch(&[e]).unwrap();
        assert_eq!(b.num_rows(), 1);
        let c = Cols::new(&b, "events");
        assert_eq!(c.get::<UInt32Array>("pid").unwrap().value(0), 100);
        assert_eq!(c.get::<StringArray>("type").unwrap().value(0), "sys_exit");
        assert_eq!(c.get::<StringArray>("component").unwrap().value(0), "kernel");
    }
}
