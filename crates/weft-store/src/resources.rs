//! Resources (with their instrumentation scopes) stored once per segment instead of once per
//! span.
//!
//! Every span of one OTLP `ResourceSpans` carries the same resource (service, host, process,
//! SDK attributes — nine attributes in a typical OpenTelemetry SDK export), and a flush holds a
//! handful of distinct resources for hundreds of thousands of spans. Writing the four resource
//! columns on every span row cost ~19 % of a durable ingest's instructions (Parquet interns each
//! key and value of each row again; the flush gathers them row by row), for about half a byte
//! per span on disk. So a segment writes:
//!
//! * its spans file without [`RESOURCE_COLUMNS`] and with a `resource_ref` column
//!   (`segment id << 32 | row`), and
//! * a small `span_resources` file with one row per distinct resource.
//!
//! Everything that reads a segment puts the columns back ([`ResourceLookup`]): trace lookups and
//! compaction through [`expand`], SQL through [`ExpandExec`] (only when a query projects a
//! resource column). The SQL schema does not change. Segments written before this layout (no
//! resources file) are read as they are.
//!
//! A "resource" here is a (resource, instrumentation scope) pair: [`RESOURCE_COLUMNS`] holds
//! the six `scope_*` columns too, so a large scope repeated over thousands of tiny spans costs
//! its bytes once per append, buffer and segment instead of on every row (where it once made a
//! small gzip request expand past the per-append limit). Resources files and WAL records
//! written before that hold only the four resource columns and their span rows carry the scope
//! columns: reads take those from the span rows ([`plan`], [`expand_local`]).
//!
//! Spans have this layout from the moment they are converted: an append's batches carry its
//! distinct resources once (the WAL record too), the in-memory buffer keeps each distinct
//! resource once ([`BufferResources`]; span rows name `buffer id << 32 | row`, and buffer
//! queries put the columns back the same way), and a flush writes the buffer's resources as the
//! segment's resources file. Carrying the four columns on every span through conversion, WAL
//! and buffer, and numbering them at flush time, had cost ~8 % of a durable ingest's
//! instructions and a third of the WAL's bytes.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, MapArray, RecordBatch, StringArray, UInt32Array, UInt64Array, new_empty_array,
    new_null_array,
};
use datafusion::arrow::compute::{concat, interleave, take};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, Partitioning, PlanProperties,
};
use futures::StreamExt;

use crate::error::{Result, StoreError};
use crate::schema::{self, RESOURCE_COLUMNS, RESOURCE_REF};

/// Which distinct resource each span row of a flush has.
pub(crate) struct ResourceIds {
    /// Per input batch, per row: the resource's row in the resources file.
    pub ids: Vec<Vec<u32>>,
    /// Per resource: the (batch, row) it was first seen at.
    pub first: Vec<(usize, usize)>,
}

/// One of [`RESOURCE_COLUMNS`] of a batch, typed.
enum ResourceColumn<'a> {
    /// An attribute map, its keys and values.
    Map(&'a MapArray, &'a StringArray, &'a StringArray),
    Text(&'a StringArray),
    Count(&'a UInt32Array),
}

impl ResourceColumn<'_> {
    /// Whether rows `r` and `j` are equal (maps: without null keys or values).
    fn same(&self, r: usize, j: usize) -> bool {
        match *self {
            ResourceColumn::Map(m, keys, values) => same_row(m, keys, values, r, j),
            ResourceColumn::Text(s) => same_str(s, r, j),
            ResourceColumn::Count(c) => c.is_valid(r) == c.is_valid(j) && c.value(r) == c.value(j),
        }
    }

    /// Whether [`ResourceColumn::same`] may be used (maps without null keys or values).
    fn plain(&self) -> bool {
        match *self {
            ResourceColumn::Map(_, keys, values) => keys.null_count() == 0 && values.null_count() == 0,
            ResourceColumn::Text(_) | ResourceColumn::Count(_) => true,
        }
    }

    /// Appends an unambiguous encoding of row `r` to `key`.
    fn encode(&self, r: usize, key: &mut Vec<u8>) {
        match *self {
            ResourceColumn::Map(m, keys, values) => {
                if m.is_valid(r) {
                    let offsets = m.value_offsets();
                    let (lo, hi) = (offsets[r] as usize, offsets[r + 1] as usize);
                    key.push(1);
                    key.extend_from_slice(&((hi - lo) as u64).to_le_bytes());
                    for e in lo..hi {
                        put(key, opt_str(keys, e));
                        put(key, opt_str(values, e));
                    }
                } else {
                    key.push(0);
                }
            }
            ResourceColumn::Text(s) => put(key, opt_str(s, r)),
            ResourceColumn::Count(c) => {
                put(key, c.is_valid(r).then(|| c.value(r).to_le_bytes()).as_ref().map(|b| &b[..]))
            }
        }
    }
}

/// The [`RESOURCE_COLUMNS`] of a `spans` batch (logical schema) or a resources batch.
fn resource_columns(b: &RecordBatch) -> Result<Vec<ResourceColumn<'_>>> {
    let wrong = |name: &str| StoreError::Decode(format!("spans column {name} has an unexpected type"));
    RESOURCE_COLUMNS
        .iter()
        .map(|&name| {
            let col = b
                .column_by_name(name)
                .ok_or_else(|| StoreError::Decode(format!("spans batch without {name}")))?
                .as_any();
            if let Some(m) = col.downcast_ref::<MapArray>() {
                let keys = m.keys().as_any().downcast_ref::<StringArray>();
                let values = m.values().as_any().downcast_ref::<StringArray>();
                match (keys, values) {
                    (Some(k), Some(v)) => Ok(ResourceColumn::Map(m, k, v)),
                    _ => Err(StoreError::Decode(format!("{name} is not a map of strings"))),
                }
            } else if let Some(t) = col.downcast_ref::<StringArray>() {
                Ok(ResourceColumn::Text(t))
            } else {
                col.downcast_ref::<UInt32Array>().map(ResourceColumn::Count).ok_or_else(|| wrong(name))
            }
        })
        .collect()
}

/// Appends an unambiguous encoding of an optional byte string.
fn put(out: &mut Vec<u8>, v: Option<&[u8]>) {
    match v {
        None => out.push(0),
        Some(b) => {
            out.push(1);
            out.extend_from_slice(&(b.len() as u64).to_le_bytes());
            out.extend_from_slice(b);
        }
    }
}

/// Whether map rows `r` and `j` have the same entries (keys and values without nulls): equal
/// entry counts, entry lengths and bytes.
fn same_row(m: &MapArray, keys: &StringArray, values: &StringArray, r: usize, j: usize) -> bool {
    if m.is_valid(r) != m.is_valid(j) {
        return false;
    }
    let o = m.value_offsets();
    let (a, b) = ((o[j] as usize, o[j + 1] as usize), (o[r] as usize, o[r + 1] as usize));
    a.1 - a.0 == b.1 - b.0 && same_values(keys, a, b) && same_values(values, a, b)
}

/// Whether the values `a.0..a.1` and `b.0..b.1` of `s` are equal, value by value.
fn same_values(s: &StringArray, a: (usize, usize), b: (usize, usize)) -> bool {
    let o = s.value_offsets();
    let (da, db) = (o[a.0], o[b.0]);
    let lens_equal = o[a.0..=a.1].iter().zip(&o[b.0..=b.1]).all(|(x, y)| x - da == y - db);
    lens_equal && s.values()[da as usize..o[a.1] as usize] == s.values()[db as usize..o[b.1] as usize]
}

/// Whether values `r` and `j` of `s` are equal, nulls included.
fn same_str(s: &StringArray, r: usize, j: usize) -> bool {
    opt_str(s, r) == opt_str(s, j)
}

fn opt_str(a: &StringArray, i: usize) -> Option<&[u8]> {
    a.is_valid(i).then(|| a.value(i).as_bytes())
}

/// Numbers distinct resources by content, across any number of batches: the first distinct
/// resource is 0, the next 1, and so on. Works on any batch with the
/// [`RESOURCE_COLUMNS`] (logical `spans` batches, resources batches).
#[derive(Default)]
pub(crate) struct ResourceNumbering {
    // aHash: std's SipHash over these ~300-byte keys was most of the numbering's cost.
    seen: HashMap<Vec<u8>, u32, ahash::RandomState>,
    key: Vec<u8>,
}

impl ResourceNumbering {
    /// How many distinct resources have been numbered.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// The number of each row of `b`; `new(row)` is called for each row that is the first of
    /// its resource (in row order, so the n-th call gets the row numbered `len() + n` before
    /// this call). A row equal to the previous one costs a byte comparison; any other row an
    /// encoded key and a hash lookup.
    pub fn number(&mut self, b: &RecordBatch, mut new: impl FnMut(usize)) -> Result<Vec<u32>> {
        let columns = resource_columns(b)?;
        let plain = columns.iter().all(ResourceColumn::plain);
        let mut row_ids = Vec::with_capacity(b.num_rows());
        let mut last: Option<u32> = None;
        let key = &mut self.key;
        for r in 0..b.num_rows() {
            // Most rows of a spans batch repeat the previous one: compare the Arrow bytes.
            if let Some(id) = last
                && plain
                && columns.iter().all(|c| c.same(r, r - 1))
            {
                row_ids.push(id);
                continue;
            }
            key.clear();
            for c in &columns {
                c.encode(r, key);
            }
            let id = match self.seen.get(key.as_slice()) {
                Some(&id) => id,
                None => {
                    let id = u32::try_from(self.seen.len())
                        .map_err(|_| StoreError::Decode("more than 2^32 distinct resources".into()))?;
                    new(r);
                    self.seen.insert(key.clone(), id);
                    id
                }
            };
            row_ids.push(id);
            last = Some(id);
        }
        Ok(row_ids)
    }
}

impl ResourceIds {
    /// Numbers the distinct resources of `batches` (logical `spans` batches) in order of first
    /// appearance.
    pub fn of(batches: &[&RecordBatch]) -> Result<ResourceIds> {
        let mut numbering = ResourceNumbering::default();
        let mut first = Vec::new();
        let mut ids = Vec::with_capacity(batches.len());
        for (bi, b) in batches.iter().enumerate() {
            ids.push(numbering.number(b, |r| first.push((bi, r)))?);
        }
        Ok(ResourceIds { ids, first })
    }

    /// The resources file's batch for segment `segment`: `resource_ref` and the
    /// [`RESOURCE_COLUMNS`] of each resource's first row.
    pub fn batch(&self, segment: u64, batches: &[&RecordBatch]) -> Result<RecordBatch> {
        let schema = schema::span_resources_schema();
        if batches.is_empty() {
            // No spans (segments of raw events only): no resources.
            return Ok(RecordBatch::new_empty(schema));
        }
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
        columns.push(Arc::new(UInt64Array::from_iter_values(
            (0..self.first.len() as u64).map(|i| segment_ref(segment, i)),
        )));
        for name in RESOURCE_COLUMNS {
            let arrays = batches
                .iter()
                .map(|b| {
                    b.column_by_name(name)
                        .map(|c| c.as_ref())
                        .ok_or_else(|| StoreError::Decode(format!("spans batch without {name}")))
                })
                .collect::<Result<Vec<&dyn Array>>>()?;
            columns.push(interleave(&arrays, &self.first)?);
        }
        Ok(RecordBatch::try_new(schema, columns)?)
    }
}

/// Whether a resources batch holds the scope columns too (else it was written before scopes
/// were stored once, and its spans carry them).
pub(crate) fn scopes_apart(resources: &RecordBatch) -> bool {
    resources.schema_ref().index_of(RESOURCE_COLUMNS[schema::RESOURCE_COLUMNS_V2]).is_ok()
}

/// `resource_ref` of row `row` of segment `segment`'s resources file.
pub(crate) fn segment_ref(segment: u64, row: u64) -> u64 {
    (segment << 32) | row
}

/// Logical `spans` batches in the file layout: each batch without [`RESOURCE_COLUMNS`] and with
/// a [`RESOURCE_REF`] naming a row (`0 << 32 | row`) of the returned resources batch, which
/// holds every distinct resource once. For rows that come without their resources apart
/// (compaction's input, WAL records written before the buffer kept resources apart).
pub(crate) fn normalize(batches: &[&RecordBatch]) -> Result<(Vec<RecordBatch>, RecordBatch)> {
    let ids = ResourceIds::of(batches)?;
    let resources = ids.batch(0, batches)?;
    let spans = batches
        .iter()
        .zip(&ids.ids)
        .map(|(b, ids)| {
            let refs: ArrayRef = Arc::new(UInt64Array::from_iter_values(ids.iter().map(|&i| u64::from(i))));
            file_layout(b, refs)
        })
        .collect::<Result<_>>()?;
    Ok((spans, resources))
}

/// A logical `spans` batch in the file layout, with `refs` as its [`RESOURCE_REF`] column.
fn file_layout(logical: &RecordBatch, refs: ArrayRef) -> Result<RecordBatch> {
    let schema = schema::spans_file_schema();
    let columns = schema
        .fields()
        .iter()
        .map(|f| {
            if f.name() == RESOURCE_REF {
                Ok(refs.clone())
            } else {
                logical
                    .column_by_name(f.name())
                    .cloned()
                    .ok_or_else(|| StoreError::Decode(format!("spans batch without {}", f.name())))
            }
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// The rows of `resources` named by the low 32 bits of `refs` (the high bits, which say whose
/// resources they are, are the caller's business); an error for a row it does not have.
fn local_rows(refs: &UInt64Array, resources: usize) -> Result<UInt32Array> {
    if refs.null_count() > 0 {
        return Err(StoreError::Decode("resource_ref has nulls".into()));
    }
    refs.values()
        .iter()
        .map(|&r| {
            let row = (r & 0xffff_ffff) as u32;
            if (row as usize) < resources {
                Ok(row)
            } else {
                Err(StoreError::Decode(format!("resource_ref names resource {row} of {resources}")))
            }
        })
        .collect::<Result<Vec<u32>>>()
        .map(UInt32Array::from)
}

/// Checks that every `resource_ref` of an append's `spans` batch is a row number of its
/// `resources` rows.
pub(crate) fn check_refs(spans: &RecordBatch, resources: usize) -> Result<()> {
    let (_, refs) = ref_column(spans)?;
    if refs.null_count() > 0 {
        return Err(StoreError::Decode("resource_ref has nulls".into()));
    }
    match refs.values().iter().find(|&&r| r >= resources as u64) {
        Some(r) => Err(StoreError::Decode(format!("resource_ref {r} names none of {resources} resources"))),
        None => Ok(()),
    }
}

fn ref_column(b: &RecordBatch) -> Result<(usize, &UInt64Array)> {
    let at = b
        .schema_ref()
        .index_of(RESOURCE_REF)
        .map_err(|_| StoreError::Decode("spans batch without resource_ref".into()))?;
    let refs = b
        .column(at)
        .as_any()
        .downcast_ref::<UInt64Array>()
        .ok_or_else(|| StoreError::Decode("resource_ref is not UInt64".into()))?;
    Ok((at, refs))
}

/// A file-layout `spans` batch as logical `spans` rows, its resources looked up in
/// `resources` (a resources batch whose rows the refs' low 32 bits name).
pub(crate) fn expand_local(spans: &RecordBatch, resources: &RecordBatch) -> Result<RecordBatch> {
    let (_, refs) = ref_column(spans)?;
    let rows = local_rows(refs, resources.num_rows())?;
    let out = schema::spans_schema();
    let columns = out
        .fields()
        .iter()
        .map(|f| {
            // Spans written before scopes were stored once carry their scope columns.
            let from = if RESOURCE_COLUMNS.contains(&f.name().as_str())
                && spans.column_by_name(f.name()).is_none()
            {
                return resources
                    .column_by_name(f.name())
                    .ok_or_else(|| StoreError::Decode(format!("resources batch without {}", f.name())))
                    .and_then(|c| Ok(take(c.as_ref(), &rows, None)?));
            } else {
                spans.column_by_name(f.name())
            };
            from.cloned().ok_or_else(|| StoreError::Decode(format!("spans batch without {}", f.name())))
        })
        .collect::<Result<Vec<_>>>()?;
    let opts = datafusion::arrow::array::RecordBatchOptions::new().with_row_count(Some(spans.num_rows()));
    Ok(RecordBatch::try_new_with_options(out, columns, &opts)?)
}

/// A file-layout `spans` batch with the scope columns of its rows' resources (from
/// `resources`, as in [`expand_local`]) before its `resource_ref`: the layout of spans files
/// written before scopes were stored once.
pub(crate) fn with_scopes(spans: &RecordBatch, resources: &RecordBatch) -> Result<RecordBatch> {
    let logical = expand_local(spans, resources)?;
    let (_, refs) = ref_column(spans)?;
    let mut fields = logical.schema().fields().to_vec();
    fields.push(Arc::new(datafusion::arrow::datatypes::Field::new(
        RESOURCE_REF,
        datafusion::arrow::datatypes::DataType::UInt64,
        false,
    )));
    let mut columns = logical.columns().to_vec();
    columns.push(Arc::new(refs.clone()));
    let schema = Arc::new(datafusion::arrow::datatypes::Schema::new(fields));
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// The distinct resources of one in-memory buffer, each kept once: appends bring their own
/// resources (a few rows) and span rows naming them; the buffer numbers them by content and
/// points the span rows at its own rows (`buffer id << 32 | row`). A flush writes these rows as
/// the segment's resources file as they are, renumbered.
pub(crate) struct BufferResources {
    id: u32,
    numbering: ResourceNumbering,
    /// Resources batches (`span_resources` schema), rows in number order.
    chunks: Vec<RecordBatch>,
    bytes: usize,
    /// `chunks` concatenated, built when first asked for after a change.
    joined: parking_lot::Mutex<Option<RecordBatch>>,
}

impl BufferResources {
    pub fn new(id: u32) -> Self {
        BufferResources {
            id,
            numbering: ResourceNumbering::default(),
            chunks: Vec::new(),
            bytes: 0,
            joined: parking_lot::Mutex::new(None),
        }
    }

    /// The buffer id in the high bits of its span rows' `resource_ref`s.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Memory held by the resources.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Takes in one append: `resources` (its distinct resources) and `spans` (file layout,
    /// `resource_ref` = row of `resources`). Returns `spans` with `resource_ref`s naming this
    /// buffer's rows.
    pub fn adopt(&mut self, spans: &RecordBatch, resources: &RecordBatch) -> Result<RecordBatch> {
        let base = self.numbering.len() as u64;
        let mut fresh: Vec<u32> = Vec::new();
        let numbers = self.numbering.number(resources, |r| fresh.push(r as u32))?;
        if !fresh.is_empty() {
            let rows = datafusion::arrow::compute::take_record_batch(resources, &UInt32Array::from(fresh))?;
            let refs: ArrayRef = Arc::new(UInt64Array::from_iter_values(
                (0..rows.num_rows() as u64).map(|j| segment_ref(u64::from(self.id), base + j)),
            ));
            let (at, _) = ref_column(&rows)?;
            let mut columns = rows.columns().to_vec();
            columns[at] = refs;
            let rows = RecordBatch::try_new(schema::span_resources_schema(), columns)?;
            self.bytes += rows.get_array_memory_size();
            self.chunks.push(rows);
            *self.joined.lock() = None;
        }
        let (at, refs) = ref_column(spans)?;
        if refs.null_count() > 0 {
            return Err(StoreError::Decode("resource_ref has nulls".into()));
        }
        let id = u64::from(self.id);
        let mapped = refs
            .values()
            .iter()
            .map(|&r| {
                usize::try_from(r)
                    .ok()
                    .and_then(|i| numbers.get(i))
                    .map(|&n| segment_ref(id, u64::from(n)))
                    .ok_or_else(|| {
                        StoreError::Decode(format!(
                            "resource_ref {r} names none of the append's {} resources",
                            numbers.len()
                        ))
                    })
            })
            .collect::<Result<Vec<u64>>>()?;
        let mut columns = spans.columns().to_vec();
        columns[at] = Arc::new(UInt64Array::from(mapped));
        Ok(RecordBatch::try_new(spans.schema(), columns)?)
    }

    /// Every resource of the buffer, row `i` numbered `i` (`span_resources` schema).
    pub fn batch(&self) -> Result<RecordBatch> {
        let mut joined = self.joined.lock();
        if let Some(b) = &*joined {
            return Ok(b.clone());
        }
        let b = datafusion::arrow::compute::concat_batches(&schema::span_resources_schema(), &self.chunks)?;
        *joined = Some(b.clone());
        Ok(b)
    }
}

/// Resources of one or more segments, for putting the resource columns back on span rows.
pub(crate) struct ResourceLookup {
    /// Segment id → first row of its resources in `columns`, and how many it has.
    segments: HashMap<u64, (usize, usize)>,
    /// [`RESOURCE_COLUMNS`], every segment's resources concatenated.
    columns: Vec<ArrayRef>,
}

impl fmt::Debug for ResourceLookup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResourceLookup").field("segments", &self.segments.len()).finish()
    }
}

impl ResourceLookup {
    /// From (segment id, its resources batch) pairs.
    pub fn new<'a>(parts: impl IntoIterator<Item = (u64, &'a RecordBatch)>) -> Result<ResourceLookup> {
        let mut segments = HashMap::new();
        let mut per_column: Vec<Vec<ArrayRef>> = vec![Vec::new(); RESOURCE_COLUMNS.len()];
        let mut at = 0usize;
        let types = schema::span_resources_schema();
        for (seg, b) in parts {
            segments.insert(seg, (at, b.num_rows()));
            at += b.num_rows();
            for (c, name) in RESOURCE_COLUMNS.iter().enumerate() {
                per_column[c].push(match b.column_by_name(name) {
                    Some(col) => col.clone(),
                    // Resources files written before scopes were stored once lack the scope
                    // columns: their spans carry them ([`plan`] takes them from there), and
                    // nulls stand in here, never read.
                    None if c >= schema::RESOURCE_COLUMNS_V2 => {
                        new_null_array(types.field(c + 1).data_type(), b.num_rows())
                    }
                    None => {
                        return Err(StoreError::Decode(format!(
                            "resources file of segment {seg} without {name}"
                        )));
                    }
                });
            }
        }
        let mut columns = Vec::with_capacity(RESOURCE_COLUMNS.len());
        for (c, arrays) in per_column.iter().enumerate() {
            columns.push(match arrays.as_slice() {
                [] => new_empty_array(types.field(c + 1).data_type()),
                [one] => one.clone(),
                _ => concat(&arrays.iter().map(|a| a.as_ref()).collect::<Vec<_>>())?,
            });
        }
        Ok(ResourceLookup { segments, columns })
    }

    /// Rows of `columns` named by `refs`.
    fn indices(&self, refs: &UInt64Array) -> Result<UInt32Array> {
        if refs.null_count() > 0 {
            return Err(StoreError::Decode("resource_ref has nulls".into()));
        }
        let mut out = Vec::with_capacity(refs.len());
        let mut cached: Option<(u64, usize, usize)> = None;
        for &r in refs.values() {
            let (seg, row) = (r >> 32, (r & 0xffff_ffff) as usize);
            let (base, n) = match cached {
                Some((s, base, n)) if s == seg => (base, n),
                _ => {
                    let &(base, n) = self.segments.get(&seg).ok_or_else(|| {
                        StoreError::Decode(format!(
                            "resource_ref names segment {seg}, whose resources are not loaded"
                        ))
                    })?;
                    cached = Some((seg, base, n));
                    (base, n)
                }
            };
            if row >= n {
                return Err(StoreError::Decode(format!(
                    "resource_ref names resource {row} of segment {seg}, which has {n}"
                )));
            }
            out.push(u32::try_from(base + row).map_err(|_| StoreError::Decode("too many resources".into()))?);
        }
        Ok(UInt32Array::from(out))
    }
}

/// How each output column of [`expand`] is made.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Source {
    /// Column `i` of the input batch.
    Input(usize),
    /// Resource column `c` (index into [`RESOURCE_COLUMNS`]) of the row named by the input's
    /// column `r` (`resource_ref`).
    Resource { c: usize, r: usize },
}

/// The plan for turning spans-file rows (with `resource_ref`) into rows of `out` (logical
/// `spans` columns, possibly a projection of them).
pub(crate) fn plan(input: &SchemaRef, out: &SchemaRef) -> Result<Vec<Source>> {
    out.fields()
        .iter()
        .map(|f| {
            // Spans files written before scopes were stored once carry their scope columns.
            if let Some(c) = RESOURCE_COLUMNS.iter().position(|n| n == f.name())
                && input.index_of(f.name()).is_err()
            {
                let r = input
                    .index_of(RESOURCE_REF)
                    .map_err(|_| StoreError::Decode("spans file without resource_ref".into()))?;
                Ok(Source::Resource { c, r })
            } else {
                input
                    .index_of(f.name())
                    .map(Source::Input)
                    .map_err(|_| StoreError::Decode(format!("spans file without {}", f.name())))
            }
        })
        .collect()
}

/// Rows of a spans file as rows of `out`, resource columns looked up in `lookup`.
pub(crate) fn expand(
    batch: &RecordBatch,
    out: &SchemaRef,
    plan: &[Source],
    lookup: &ResourceLookup,
) -> Result<RecordBatch> {
    // Rows of the lookup's columns, once per batch, when a resource column is wanted.
    let refs_at = plan.iter().find_map(|s| match *s {
        Source::Resource { r, .. } => Some(r),
        Source::Input(_) => None,
    });
    let indices = match refs_at {
        Some(r) => {
            let refs = batch
                .column(r)
                .as_any()
                .downcast_ref::<UInt64Array>()
                .ok_or_else(|| StoreError::Decode("resource_ref is not UInt64".into()))?;
            Some(lookup.indices(refs)?)
        }
        None => None,
    };
    let mut columns = Vec::with_capacity(plan.len());
    for s in plan {
        columns.push(match (*s, &indices) {
            (Source::Input(i), _) => batch.column(i).clone(),
            (Source::Resource { c, .. }, Some(idx)) => take(lookup.columns[c].as_ref(), idx, None)?,
            (Source::Resource { .. }, None) => {
                return Err(StoreError::Decode("resource indices missing".into()));
            }
        });
    }
    let opts = datafusion::arrow::array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    Ok(RecordBatch::try_new_with_options(out.clone(), columns, &opts)?)
}

/// File-layout `spans` batches as logical `spans` rows, resources looked up in `lookup`.
pub(crate) fn expand_all(batches: Vec<RecordBatch>, lookup: &ResourceLookup) -> Result<Vec<RecordBatch>> {
    let out = schema::spans_schema();
    batches.into_iter().map(|b| expand(&b, &out, &plan(&b.schema(), &out)?, lookup)).collect()
}

/// A scan of segment spans files turned into `spans` rows: the input's rows with the resource
/// columns the query projects looked up by `resource_ref`.
pub(crate) struct ExpandExec {
    input: Arc<dyn ExecutionPlan>,
    schema: SchemaRef,
    plan: Arc<Vec<Source>>,
    lookup: Arc<ResourceLookup>,
    properties: Arc<PlanProperties>,
}

impl fmt::Debug for ExpandExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExpandExec").field("schema", &self.schema).finish()
    }
}

impl ExpandExec {
    /// `schema`: the (projected) logical columns to produce from `input`'s rows.
    pub fn new(
        input: Arc<dyn ExecutionPlan>,
        schema: SchemaRef,
        lookup: Arc<ResourceLookup>,
    ) -> Result<Self> {
        let plan = Arc::new(plan(&input.schema(), &schema)?);
        let properties = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(input.output_partitioning().partition_count()),
            input.pipeline_behavior(),
            input.boundedness(),
        ));
        Ok(ExpandExec { input, schema, plan, lookup, properties })
    }
}

impl DisplayAs for ExpandExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "ExpandResourcesExec: {} columns", self.schema.fields().len())
    }
}

impl ExecutionPlan for ExpandExec {
    fn name(&self) -> &'static str {
        "ExpandResourcesExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
        options: ReplaceChildrenOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        if children.len() != 1 {
            return Err(DataFusionError::Internal(format!(
                "ExpandResourcesExec takes 1 child, got {}",
                children.len()
            )));
        }
        let input = children.swap_remove(0);
        match options.children_properties {
            ChildrenPropertiesMode::Keep => Ok(Arc::new(ExpandExec {
                input,
                schema: self.schema.clone(),
                plan: self.plan.clone(),
                lookup: self.lookup.clone(),
                properties: self.properties.clone(),
            })),
            ChildrenPropertiesMode::Recompute => Ok(Arc::new(
                ExpandExec::new(input, self.schema.clone(), self.lookup.clone())
                    .map_err(|e| DataFusionError::External(Box::new(e)))?,
            )),
        }
    }

    #[allow(deprecated)]
    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.replace_children(children, ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute))
    }

    fn execute(&self, partition: usize, context: Arc<TaskContext>) -> DfResult<SendableRecordBatchStream> {
        let input = self.input.execute(partition, context)?;
        let (schema, plan, lookup) = (self.schema.clone(), self.plan.clone(), self.lookup.clone());
        let out = schema.clone();
        let stream = input.map(move |b| {
            b.and_then(|b| {
                expand(&b, &out, &plan, &lookup).map_err(|e| DataFusionError::External(Box::new(e)))
            })
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, stream)))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use weft_model::{Resource, Span};

    use super::*;

    fn resource(host: &str) -> Arc<Resource> {
        let mut r = Resource::default();
        r.attributes.push("service.name", "cart");
        r.attributes.push("host.name", host);
        Arc::new(r)
    }

    /// Equal resources get one id whether or not they share an `Arc`, are adjacent, or sit in
    /// different batches; the resources batch holds each once, in order of first appearance.
    #[test]
    fn distinct_resources_are_numbered_once() {
        let (a, b, a_again) = (resource("h1"), resource("h2"), resource("h1"));
        let batch = |rs: &[&Arc<Resource>]| {
            let spans: Vec<Span> =
                rs.iter().map(|r| Span { resource: Arc::clone(r), ..Span::default() }).collect();
            crate::arrow_rows::spans_to_batches(&spans).unwrap().logical_spans().unwrap()
        };
        let b1 = batch(&[&a, &a, &b, &a_again, &b]);
        let b2 = batch(&[&a_again, &b]);
        let ids = ResourceIds::of(&[&b1, &b2]).unwrap();
        assert_eq!(ids.ids, vec![vec![0, 0, 1, 0, 1], vec![0, 1]]);
        assert_eq!(ids.first, vec![(0, 0), (0, 2)]);
        let res = ids.batch(7, &[&b1, &b2]).unwrap();
        assert_eq!(res.num_rows(), 2);
        let refs = res.column(0).as_any().downcast_ref::<UInt64Array>().unwrap();
        assert_eq!(refs.values().to_vec(), vec![7 << 32, (7 << 32) | 1]);
        // Putting the columns back gives the original rows.
        let lookup = ResourceLookup::new([(7, &res)]).unwrap();
        let file_rows = RecordBatch::try_new(
            Arc::new(datafusion::arrow::datatypes::Schema::new(vec![
                datafusion::arrow::datatypes::Field::new(
                    RESOURCE_REF,
                    datafusion::arrow::datatypes::DataType::UInt64,
                    false,
                ),
            ])),
            vec![Arc::new(UInt64Array::from(vec![(7 << 32) | 1, 7 << 32]))],
        )
        .unwrap();
        let out = Arc::new(schema::spans_schema().project(&[17, 20]).unwrap());
        let p = plan(&file_rows.schema(), &out).unwrap();
        let got = expand(&file_rows, &out, &p, &lookup).unwrap();
        let want = b1.project(&[17, 20]).unwrap().slice(2, 2);
        let want = datafusion::arrow::compute::concat_batches(
            &out,
            &[want.slice(0, 1), b1.project(&[17, 20]).unwrap().slice(0, 1)],
        )
        .unwrap();
        assert_eq!(got, want);
        // A reference to a resource the segment does not have is an error, not a panic.
        let bad =
            RecordBatch::try_new(file_rows.schema(), vec![Arc::new(UInt64Array::from(vec![(7 << 32) | 2]))])
                .unwrap();
        assert!(expand(&bad, &out, &p, &lookup).is_err());
        let other =
            RecordBatch::try_new(file_rows.schema(), vec![Arc::new(UInt64Array::from(vec![8 << 32]))])
                .unwrap();
        assert!(expand(&other, &out, &p, &lookup).is_err());
    }
}
