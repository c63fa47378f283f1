//! Segments: one Parquet file per non-empty table, written together by a flush or a
//! compaction and listed in the manifest.
//!
//! Layout choices (measured in `benches/`, see the README's Performance section):
//! * `spans`, `span_events`, `span_links` are sorted by trace id (spans then by start time;
//!   events and links keep their order within a span): a trace's rows sit together, the trace
//!   id column collapses to a dictionary run, and row-group and page statistics on it narrow a
//!   lookup to a page;
//! * row groups of 32 Ki rows ([`WriteOptions::row_group_rows`]): DataFusion splits the scan
//!   of one file between its row groups only, so a search that reads a single segment decodes
//!   it on every core (a segment written before, in one row group, is read by one thread);
//! * `spans.trace_id` carries a split-block bloom filter per row group; the filters are loaded
//!   into memory when a segment is opened, so a trace lookup touches only segments that hold
//!   the trace (plus ~1 % false positives);
//! * each distinct resource is stored once, in the segment's `span_resources` file; span rows
//!   carry a `resource_ref` instead of the four resource columns, which every read puts back
//!   (`resources`). Segments written before have the columns on every row and are read as
//!   they are; compaction rewrites them in this layout. Other Parquet readers join the two
//!   files on `resource_ref`;
//! * zstd, dictionary encoding for repetitive text, none for random ids; page statistics
//!   (the column index) on ids, times and numbers; none on text columns, where min/max prune
//!   nothing in trace-id order and cost ~15 % of ingest CPU.
//!
//! A segment that compaction or retention removed from the manifest is deleted when the last
//! query holding it ends (`Arc` drop).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use datafusion::arrow::array::{
    Array, ArrayRef, FixedSizeBinaryArray, MapArray, RecordBatch, StringArray, StructArray,
    TimestampNanosecondArray, UInt64Array,
};
use datafusion::arrow::buffer::{BooleanBuffer, Buffer, NullBuffer, OffsetBuffer};
use datafusion::arrow::compute::interleave;
use datafusion::arrow::datatypes::{DataType, FieldRef, SchemaRef};
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder, RowSelection, RowSelector,
};
use datafusion::parquet::basic::{Compression, Encoding, ZstdLevel};
use datafusion::parquet::bloom_filter::Sbbf;
use datafusion::parquet::file::metadata::{KeyValue, PageIndexPolicy, ParquetMetaData, SortingColumn};
use datafusion::parquet::file::page_index::column_index::ColumnIndexMetaData;
use datafusion::parquet::file::properties::{EnabledStatistics, WriterProperties, WriterPropertiesBuilder};
use datafusion::parquet::schema::types::ColumnPath;
use weft_model::TraceId;

use crate::arrow_rows::filter_trace;
use crate::attrs::Text;
use crate::error::{Result, StoreError, io_err};
use crate::manifest::{FileMeta, SegmentMeta};
use crate::query::Origin;
use crate::resources::{self, ResourceLookup};
use crate::schema::{self, TABLE_NAMES};
use crate::search_index::{self, SearchIndex};

/// How segments are written.
#[derive(Debug, Clone)]
pub struct WriteOptions {
    /// zstd level (1..=22). 1 by default: against 3, 1.8 % fewer instructions per durable span
    /// (zstd was ~5 % of them) for 0.3 B/span more on disk (38.3 → 38.6 B/span).
    pub zstd_level: i32,
    /// Rows per row group. 32 Ki by default: a flush's segment (~120 Ki spans) gets ~4, which
    /// a query reads in parallel; with 128 Ki (before) it was one, decoded in one thread.
    pub row_group_rows: usize,
    /// Rows per data page (smaller pages: finer trace lookups, slightly worse compression).
    pub page_rows: usize,
    /// Bloom filter false-positive rate on `spans.trace_id`.
    pub bloom_fpp: f64,
    /// Store each distinct resource once per segment (a `span_resources` file, spans carry a
    /// `resource_ref`; see `resources`). `false` writes every span's resource columns on its
    /// row, as segments written before this layout have them (kept to test reading those).
    pub resource_table: bool,
    /// Write a search index into the spans file's footer (`search_index`). `false` writes
    /// segments as weft did before it (kept to test searching those).
    pub search_index: bool,
    /// With `resource_table`: store each span's instrumentation scope with its resource.
    /// `false` writes the scope columns on every span row, as segments written before scopes
    /// were stored once have them (kept to test reading those).
    pub scopes_apart: bool,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            zstd_level: 1,
            row_group_rows: 32 * 1024,
            page_rows: 8 * 1024,
            bloom_fpp: 0.01,
            resource_table: true,
            search_index: true,
            scopes_apart: true,
        }
    }
}

/// File name of `table` in segment `id`.
pub(crate) fn file_name(id: u64, table: &str) -> String {
    format!("seg-{id:010}-{table}.parquet")
}

/// The writer settings every segment file shares: zstd at the configured level, weft as writer.
fn base_props(o: &WriteOptions) -> Result<WriterPropertiesBuilder> {
    let level = ZstdLevel::try_new(o.zstd_level)
        .map_err(|e| StoreError::Query(format!("zstd level {}: {e}", o.zstd_level)))?;
    Ok(WriterProperties::builder()
        .set_compression(Compression::ZSTD(level))
        .set_created_by(format!("weft-store {}", env!("CARGO_PKG_VERSION"))))
}

fn props(table: usize, o: &WriteOptions) -> Result<WriterProperties> {
    let mut b = base_props(o)?
        .set_max_row_group_row_count(Some(o.row_group_rows))
        .set_data_page_row_count_limit(o.page_rows)
        .set_statistics_enabled(EnabledStatistics::Page);
    let col = |n: &str| ColumnPath::from(n);
    // Random 8-byte ids: a dictionary only costs.
    let no_dict: &[&str] = match table {
        0 => &["span_id", "parent_span_id"],
        1 => &["span_id"],
        2 => &["span_id", "linked_span_id", "linked_trace_id"],
        _ => &[],
    };
    for n in no_dict {
        b = b.set_column_dictionary_enabled(col(n), false);
    }
    // Times and durations: delta encoding (sorted runs within a trace / by time).
    let delta: &[&str] = match table {
        0 => &["start_time", "duration_ns"],
        1 => &["time"],
        3 => &["time", "raw_time"],
        _ => &[],
    };
    for n in delta {
        b = b
            .set_column_dictionary_enabled(col(n), false)
            .set_column_encoding(col(n), Encoding::DELTA_BINARY_PACKED);
    }
    // Text columns (names, services, statuses, attribute maps and their type tags): rows are
    // sorted by trace id, so every page and row group holds nearly every value and min/max
    // prune nothing, while computing them was ~15 % of a durable ingest's CPU (two string
    // comparisons per value). Statistics stay on ids, times and durations.
    for f in crate::schema::schema_of(table).fields() {
        let n = f.name();
        match f.data_type() {
            DataType::Map(entries, _) => {
                if let DataType::Struct(kv) = entries.data_type() {
                    for leaf in kv.iter() {
                        let path =
                            ColumnPath::new(vec![n.clone(), entries.name().clone(), leaf.name().clone()]);
                        b = b.set_column_statistics_enabled(path, EnabledStatistics::None);
                    }
                }
            }
            DataType::Utf8 => b = b.set_column_statistics_enabled(col(n), EnabledStatistics::None),
            // Span flags and dropped counts: nobody prunes by them (raw events' pid, tid and cpu
            // keep theirs).
            DataType::UInt32 if table <= 2 => {
                b = b.set_column_statistics_enabled(col(n), EnabledStatistics::None)
            }
            _ => {}
        }
    }
    if table == 0 {
        b = b
            .set_column_bloom_filter_enabled(col("trace_id"), true)
            .set_column_bloom_filter_fpp(col("trace_id"), o.bloom_fpp)
            .set_column_bloom_filter_max_ndv(col("trace_id"), o.row_group_rows as u64);
    }
    // Column 0 is the sort key: trace_id (span tables) or time (raw events).
    b = b.set_sorting_columns(Some(vec![SortingColumn {
        column_idx: 0,
        descending: false,
        nulls_first: false,
    }]));
    Ok(b.build())
}

/// Rows per chunk gathered into sorted order and handed to the Parquet writer: big enough to
/// amortise the per-call work, small enough that a chunk is still in cache when it is encoded.
const WRITE_CHUNK_ROWS: usize = 16 * 1024;

/// Sort order of the rows of `batches` as (batch, row) pairs: by trace id (then start time for
/// spans), or by time for raw events. Ties keep their input order (span events and links stay
/// in order within a span), because the (batch, row) position is the last sort key.
///
/// The keys are extracted once into plain integers (a trace id read big-endian as a `u128`
/// orders like its bytes), so the sort compares integers instead of slicing Arrow arrays.
fn sort_order(table: usize, batches: &[&RecordBatch]) -> Result<Vec<(usize, usize)>> {
    match table {
        crate::memtable::T_EVENTS => {
            order_by(batches, |b| Ok(time_col(b, "time")?.values().iter().map(|&v| v as u64).collect()))
        }
        crate::memtable::T_SPANS => order_by(batches, |b| {
            let t = time_col(b, "start_time")?.values();
            Ok(trace_id_keys(b)?.into_iter().zip(t.iter().map(|&v| v as u64)).collect())
        }),
        _ => order_by(batches, trace_id_keys),
    }
}

/// The (batch, row) positions of `batches` ordered by `keys_of` (one key per row), ties in
/// input order.
fn order_by<K: Ord>(
    batches: &[&RecordBatch],
    keys_of: impl Fn(&RecordBatch) -> Result<Vec<K>>,
) -> Result<Vec<(usize, usize)>> {
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    let mut keys: Vec<(K, u64)> = Vec::with_capacity(rows);
    for (bi, b) in batches.iter().enumerate() {
        let pos = (bi as u64) << 32;
        keys.extend(keys_of(b)?.into_iter().enumerate().map(|(r, k)| (k, pos | r as u64)));
    }
    keys.sort_unstable();
    Ok(keys.into_iter().map(|(_, p)| ((p >> 32) as usize, (p & 0xffff_ffff) as usize)).collect())
}

/// The trace ids of a span-table batch as `u128` sort keys.
fn trace_id_keys(b: &RecordBatch) -> Result<Vec<u128>> {
    let ids = b
        .column_by_name("trace_id")
        .and_then(|c| c.as_any().downcast_ref::<FixedSizeBinaryArray>())
        .filter(|a| a.value_length() == 16)
        .ok_or_else(|| StoreError::Decode("trace_id column missing or not 16 bytes wide".into()))?;
    Ok(ids
        .value_data()
        .chunks_exact(16)
        .map(|c| {
            let mut k = [0u8; 16];
            k.copy_from_slice(c);
            u128::from_be_bytes(k)
        })
        .collect())
}

/// Where a written column comes from: a column of the input batches, or (spans files) the
/// input's `resource_ref` column `at` renumbered for segment `segment` (its low 32 bits are
/// rows of the resources batch, which has `resources` rows).
enum Col {
    Input(usize),
    Ref { at: usize, segment: u64, resources: usize },
}

/// Gathers the rows `order` of `batches` (one schema) into a new batch of `schema`, whose
/// columns come from `cols`.
fn gather(
    schema: &SchemaRef,
    cols: &[Col],
    batches: &[&RecordBatch],
    order: &[(usize, usize)],
) -> Result<RecordBatch> {
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for col in cols {
        let i = match *col {
            Col::Input(i) => i,
            Col::Ref { at, segment, resources } => {
                let refs = batches
                    .iter()
                    .map(|b| {
                        b.column(at)
                            .as_any()
                            .downcast_ref::<UInt64Array>()
                            .filter(|a| a.null_count() == 0)
                            .ok_or_else(|| {
                                StoreError::Decode("resource_ref is not UInt64 without nulls".into())
                            })
                    })
                    .collect::<Result<Vec<_>>>()?;
                let mut out = Vec::with_capacity(order.len());
                for &(b, r) in order {
                    let row = refs[b].value(r) & 0xffff_ffff;
                    if row >= resources as u64 {
                        return Err(StoreError::Decode(format!(
                            "resource_ref names resource {row} of {resources}"
                        )));
                    }
                    out.push(resources::segment_ref(segment, row));
                }
                columns.push(Arc::new(UInt64Array::from(out)));
                continue;
            }
        };
        let arrays: Vec<&dyn Array> = batches.iter().map(|b| b.column(i).as_ref()).collect();
        columns.push(match arrays[0].data_type() {
            DataType::FixedSizeBinary(w) => gather_fsb(&arrays, order, *w)?,
            DataType::Utf8 => match gather_utf8(&arrays, order)? {
                Some(a) => Arc::new(a),
                None => interleave(&arrays, order)?,
            },
            DataType::Map(field, sorted) => match gather_map(&arrays, order, field, *sorted)? {
                Some(a) => a,
                None => interleave(&arrays, order)?,
            },
            _ => interleave(&arrays, order)?,
        });
    }
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

/// [`interleave`] for fixed-size binary columns (ids), whose generic path copies row by row
/// through `MutableArrayData`.
fn gather_fsb(arrays: &[&dyn Array], order: &[(usize, usize)], width: i32) -> Result<ArrayRef> {
    let typed: Vec<&FixedSizeBinaryArray> = arrays
        .iter()
        .map(|a| {
            a.as_any()
                .downcast_ref::<FixedSizeBinaryArray>()
                .filter(|a| a.value_length() == width)
                .ok_or_else(|| StoreError::Decode("fixed-size binary columns differ".into()))
        })
        .collect::<Result<_>>()?;
    let w = usize::try_from(width).map_err(|_| StoreError::Decode(format!("binary width {width}")))?;
    let mut data: Vec<u8> = Vec::with_capacity(order.len() * w);
    for &(b, r) in order {
        data.extend_from_slice(typed[b].value(r));
    }
    let nulls = if typed.iter().any(|a| a.null_count() > 0) {
        let valid: BooleanBuffer = order.iter().map(|&(b, r)| typed[b].is_valid(r)).collect();
        Some(NullBuffer::new(valid))
    } else {
        None
    };
    Ok(Arc::new(FixedSizeBinaryArray::try_new(width, Buffer::from_vec(data), nulls)?))
}

/// The rows `order` of null-free string columns, copied value by value into buffers sized
/// once; `None` when a column has nulls (the caller falls back to [`interleave`]).
fn gather_utf8(arrays: &[&dyn Array], order: &[(usize, usize)]) -> Result<Option<StringArray>> {
    let Some(typed) = null_free::<StringArray>(arrays) else { return Ok(None) };
    let bytes: usize = order.iter().map(|&(b, r)| typed[b].value_length(r) as usize).sum();
    let mut out = Text::with_capacity(order.len(), bytes);
    for &(b, r) in order {
        out.push(typed[b].value(r));
    }
    Ok(Some(out.finish("gathered text column")?))
}

/// The rows `order` of `Map<Utf8, Utf8>` columns without nulls (at any level). A row's entries
/// are contiguous in its map, so each row is two byte-range copies (keys, values) plus its
/// offsets — where [`interleave`] gathers the entries one by one through a struct array (8 %
/// of a durable ingest's CPU in a profile). `None` for anything else (nulls, other key or
/// value types): the caller falls back to [`interleave`].
fn gather_map(
    arrays: &[&dyn Array],
    order: &[(usize, usize)],
    field: &FieldRef,
    sorted: bool,
) -> Result<Option<ArrayRef>> {
    let Some(maps) = null_free::<MapArray>(arrays) else { return Ok(None) };
    let mut keys = Vec::with_capacity(maps.len());
    let mut values = Vec::with_capacity(maps.len());
    for m in &maps {
        let (Some(k), Some(v)) = (
            m.keys().as_any().downcast_ref::<StringArray>(),
            m.values().as_any().downcast_ref::<StringArray>(),
        ) else {
            return Ok(None);
        };
        if k.null_count() > 0 || v.null_count() > 0 || m.entries().null_count() > 0 {
            return Ok(None);
        }
        keys.push(k);
        values.push(v);
    }
    let DataType::Struct(entry_fields) = field.data_type() else { return Ok(None) };
    // Sizes first, so every buffer is allocated once.
    let (mut entries, mut key_bytes, mut value_bytes) = (0usize, 0usize, 0usize);
    for &(b, r) in order {
        let o = maps[b].value_offsets();
        let (lo, hi) = (o[r] as usize, o[r + 1] as usize);
        entries += hi - lo;
        key_bytes += byte_span(keys[b], lo, hi);
        value_bytes += byte_span(values[b], lo, hi);
    }
    if i32::try_from(entries).is_err() {
        return Err(StoreError::Decode(format!("{entries} map entries exceed an Arrow map's offsets")));
    }
    let mut map_offsets: Vec<i32> = Vec::with_capacity(order.len() + 1);
    map_offsets.push(0);
    let (mut k, mut v) = (Text::with_capacity(entries, key_bytes), Text::with_capacity(entries, value_bytes));
    for &(b, r) in order {
        let o = maps[b].value_offsets();
        let (lo, hi) = (o[r] as usize, o[r + 1] as usize);
        k.push_range(keys[b], lo, hi);
        v.push_range(values[b], lo, hi);
        map_offsets.push(map_offsets[map_offsets.len() - 1] + (hi - lo) as i32);
    }
    let (k, v) = (k.finish("gathered map keys")?, v.finish("gathered map values")?);
    let entries = StructArray::try_new(entry_fields.clone(), vec![Arc::new(k), Arc::new(v)], None)?;
    let map = MapArray::try_new(field.clone(), OffsetBuffer::new(map_offsets.into()), entries, None, sorted)?;
    Ok(Some(Arc::new(map)))
}

/// The arrays as `T`, when every one is a `T` without nulls.
fn null_free<'a, T: 'static>(arrays: &[&'a dyn Array]) -> Option<Vec<&'a T>> {
    arrays.iter().map(|a| if a.null_count() > 0 { None } else { a.as_any().downcast_ref::<T>() }).collect()
}

/// Bytes of the values `lo..hi` of a string array.
fn byte_span(a: &StringArray, lo: usize, hi: usize) -> usize {
    let o = a.value_offsets();
    (o[hi] - o[lo]) as usize
}

fn time_col<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a TimestampNanosecondArray> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<TimestampNanosecondArray>())
        .ok_or_else(|| StoreError::Decode(format!("{name} column missing")))
}

fn time_range(table: usize, batch: &RecordBatch) -> (u64, u64) {
    let name = if table == 0 { "start_time" } else { "time" };
    match time_col(batch, name) {
        Ok(t) if !t.is_empty() => {
            t.values().iter().fold((u64::MAX, 0), |(lo, hi), &v| (lo.min(v as u64), hi.max(v as u64)))
        }
        _ => (0, 0),
    }
}

/// Writes a segment from per-table batches; returns its manifest entry. Files are fsynced;
/// the caller makes the directory entry durable and publishes the manifest. Spans come in the
/// files' layout (`memtable::schema_of`), their `resource_ref`s' low 32 bits naming rows of
/// `resources`, every one of which is written to the segment's resources file.
pub(crate) fn write_segment(
    seg_dir: &Path,
    id: u64,
    level: u32,
    tables: &[Vec<RecordBatch>; 4],
    resources: &RecordBatch,
    operations: (Vec<(String, String, String)>, bool),
    o: &WriteOptions,
) -> Result<SegmentMeta> {
    let mut files = Vec::new();
    let mut mem_bytes = 0u64;
    for (t, batches) in tables.iter().enumerate() {
        let batches: Vec<&RecordBatch> = batches.iter().filter(|b| b.num_rows() > 0).collect();
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        if rows == 0 {
            continue;
        }
        // Spans: distinct resources go to their own file, span rows name them. (The layout
        // without a resources file is still written on request, for tests of old segments.)
        let expanded: Vec<RecordBatch>;
        let mut batches = batches;
        let split = t == crate::memtable::T_SPANS && o.resource_table;
        if t == crate::memtable::T_SPANS && !o.resource_table {
            expanded =
                batches.iter().map(|b| resources::expand_local(b, resources)).collect::<Result<_>>()?;
            batches = expanded.iter().collect();
        } else if split && !o.scopes_apart {
            expanded = batches.iter().map(|b| resources::with_scopes(b, resources)).collect::<Result<_>>()?;
            batches = expanded.iter().collect();
        }
        if split && id > u64::from(u32::MAX) {
            return Err(StoreError::Decode(format!("segment id {id} does not fit a resource_ref")));
        }
        let input = batches[0].schema();
        let (schema, resources_schema) = match (split, o.scopes_apart) {
            (false, _) => (schema::schema_of(t), schema::span_resources_schema()),
            (true, true) => (schema::spans_file_schema(), schema::span_resources_schema()),
            (true, false) => (schema::spans_file_schema_v2(), schema::span_resources_schema_v2()),
        };
        let cols = schema
            .fields()
            .iter()
            .map(|f| match input.index_of(f.name()) {
                Ok(at) if split && f.name() == schema::RESOURCE_REF => {
                    Ok(Col::Ref { at, segment: id, resources: resources.num_rows() })
                }
                Ok(i) => Ok(Col::Input(i)),
                Err(_) => Err(StoreError::Decode(format!("no source for column {}", f.name()))),
            })
            .collect::<Result<Vec<_>>>()?;
        // Sorted rows are gathered straight from the buffered batches, a chunk at a time, and
        // written: no concatenated copy of the whole flush, and each chunk is encoded while
        // it is still in cache.
        let order = sort_order(t, &batches)?;
        // The spans file's search index, row group by row group as the writer cuts them.
        let index = (t == crate::memtable::T_SPANS && o.search_index)
            .then(|| {
                SearchIndex::build(
                    &batches,
                    resources,
                    &order,
                    o.row_group_rows,
                    &tables[crate::memtable::T_SPAN_EVENTS],
                )
            })
            .transpose()?;
        let name = file_name(id, TABLE_NAMES[t]);
        let path = seg_dir.join(&name);
        let file = File::create(&path).map_err(io_err("create", &path))?;
        let mut w = ArrowWriter::try_new(file, schema.clone(), Some(props(t, o)?))
            .map_err(|source| StoreError::Parquet { path: path.clone(), source })?;
        let (mut min_t, mut max_t) = (u64::MAX, 0u64);
        for part in order.chunks(WRITE_CHUNK_ROWS) {
            let chunk = gather(&schema, &cols, &batches, part)?;
            mem_bytes += chunk.get_array_memory_size() as u64;
            let (lo, hi) = time_range(t, &chunk);
            (min_t, max_t) = (min_t.min(lo), max_t.max(hi));
            w.write(&chunk).map_err(|source| StoreError::Parquet { path: path.clone(), source })?;
        }
        if let Some(ix) = &index {
            w.append_key_value_metadata(KeyValue::new(search_index::FOOTER_KEY.to_owned(), ix.encode()));
        }
        let file = w.into_inner().map_err(|source| StoreError::Parquet { path: path.clone(), source })?;
        file.sync_all().map_err(io_err("fsync", &path))?;
        let bytes = file.metadata().map_err(io_err("stat", &path))?.len();
        files.push(FileMeta {
            table: TABLE_NAMES[t].to_owned(),
            file: name,
            rows: rows as u64,
            bytes,
            min_time_ns: min_t,
            max_time_ns: max_t,
        });
        if split {
            let mut columns = resources.columns()[..resources_schema.fields().len()].to_vec();
            columns[0] = Arc::new(UInt64Array::from_iter_values(
                (0..resources.num_rows() as u64).map(|i| resources::segment_ref(id, i)),
            ));
            let batch = RecordBatch::try_new(resources_schema, columns)?;
            let name = file_name(id, schema::SPAN_RESOURCES);
            let path = seg_dir.join(&name);
            let bytes = write_small(&path, &batch, o)?;
            files.push(FileMeta {
                table: schema::SPAN_RESOURCES.to_owned(),
                file: name,
                rows: batch.num_rows() as u64,
                bytes,
                min_time_ns: min_t,
                max_time_ns: max_t,
            });
        }
    }
    let now = weft_model::time::now_unix_nanos();
    Ok(SegmentMeta {
        id,
        level,
        created_ns: now,
        spans_written_ns: now,
        files,
        mem_bytes,
        operations: operations.0,
        operations_complete: operations.1,
    })
}

/// Writes `batch` as one Parquet file (zstd, dictionaries), fsynced; returns its size.
fn write_small(path: &Path, batch: &RecordBatch, o: &WriteOptions) -> Result<u64> {
    let props = base_props(o)?.build();
    let pq = |source| StoreError::Parquet { path: path.to_owned(), source };
    let file = File::create(path).map_err(io_err("create", path))?;
    let mut w = ArrowWriter::try_new(file, batch.schema(), Some(props)).map_err(pq)?;
    w.write(batch).map_err(pq)?;
    let file = w.into_inner().map_err(pq)?;
    file.sync_all().map_err(io_err("fsync", path))?;
    Ok(file.metadata().map_err(io_err("stat", path))?.len())
}

/// Reader state of one Parquet file, loaded once.
pub(crate) struct FileReader {
    pub path: PathBuf,
    pub meta: ArrowReaderMetadata,
    /// Leaf column index of `trace_id`.
    trace_col: Option<usize>,
    /// Bloom filter on `trace_id` per row group (spans only).
    blooms: Vec<Option<Sbbf>>,
    bloom_bytes: usize,
}

impl FileReader {
    pub fn open(path: &Path, with_blooms: bool) -> Result<FileReader> {
        let file = File::open(path).map_err(io_err("open", path))?;
        let pq = |source| StoreError::Parquet { path: path.to_owned(), source };
        let meta = ArrowReaderMetadata::load(
            &file,
            ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Optional),
        )
        .map_err(pq)?;
        let md: &ParquetMetaData = meta.metadata();
        let trace_col =
            md.file_metadata().schema_descr().columns().iter().position(|c| c.path().string() == "trace_id");
        let mut blooms = Vec::new();
        let mut bloom_bytes = 0;
        if with_blooms && let Some(tc) = trace_col {
            for rg in md.row_groups() {
                let cc = rg.column(tc);
                bloom_bytes += cc.bloom_filter_length().unwrap_or(0).max(0) as usize;
                blooms.push(Sbbf::read_from_column_chunk(cc, &file).map_err(pq)?);
            }
        }
        Ok(FileReader { path: path.to_owned(), meta, trace_col, blooms, bloom_bytes })
    }

    /// The search index in the footer, if any; a damaged one is logged and ignored (the
    /// segment is then searched without it).
    fn search_index(&self) -> Option<SearchIndex> {
        let kv = self.meta.metadata().file_metadata().key_value_metadata()?;
        let text = kv.iter().find(|kv| kv.key == search_index::FOOTER_KEY)?.value.as_deref()?;
        SearchIndex::decode(text)
            .inspect_err(|reason| {
                tracing::warn!(file = %self.path.display(), %reason, "unreadable search index, segment searched by scan")
            })
            .ok()
    }

    /// Bytes of memory the cached bloom filters take.
    pub fn bloom_bytes(&self) -> usize {
        self.bloom_bytes
    }

    /// Rows whose trace id is `id`, at most `limit` of them (page-level selection from
    /// statistics; bloom filters skip row groups that cannot hold it; reading stops at the
    /// limit).
    pub fn read_trace(&self, id: &TraceId, limit: usize) -> Result<Vec<RecordBatch>> {
        let md = self.meta.metadata();
        let Some(tc) = self.trace_col else {
            return Err(StoreError::Decode(format!("{}: no trace_id column", self.path.display())));
        };
        let key: &[u8] = &id.0;
        let mut groups = Vec::new();
        let mut selectors: Vec<RowSelector> = Vec::new();
        for (rg_i, rg) in md.row_groups().iter().enumerate() {
            let cc = rg.column(tc);
            if let Some(st) = cc.statistics()
                && let (Some(min), Some(max)) = (st.min_bytes_opt(), st.max_bytes_opt())
                && (key < min || key > max)
            {
                continue;
            }
            if let Some(Some(bloom)) = self.blooms.get(rg_i)
                && !bloom.check(key)
            {
                continue;
            }
            groups.push(rg_i);
            let rows = rg.num_rows() as usize;
            let pages = page_ranges(md, rg_i, tc, rows, key);
            match pages {
                Some(ranges) => {
                    let mut at = 0;
                    for (from, to) in ranges {
                        if from > at {
                            selectors.push(RowSelector::skip(from - at));
                        }
                        selectors.push(RowSelector::select(to - from));
                        at = to;
                    }
                    if rows > at {
                        selectors.push(RowSelector::skip(rows - at));
                    }
                }
                None => selectors.push(RowSelector::select(rows)),
            }
        }
        if groups.is_empty() {
            return Ok(Vec::new());
        }
        let file = File::open(&self.path).map_err(io_err("open", &self.path))?;
        let pq = |source| StoreError::Parquet { path: self.path.clone(), source };
        let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(file, self.meta.clone())
            .with_row_groups(groups)
            .with_row_selection(RowSelection::from(selectors))
            .with_batch_size(8192)
            .build()
            .map_err(pq)?;
        let mut out = Vec::new();
        let mut left = limit;
        for b in reader {
            if left == 0 {
                break;
            }
            let b = b.map_err(|e| StoreError::Parquet { path: self.path.clone(), source: e.into() })?;
            if let Some(f) = filter_trace(&b, id)? {
                let f = if f.num_rows() > left { f.slice(0, left) } else { f };
                left -= f.num_rows();
                out.push(f);
            }
        }
        Ok(out)
    }
}

/// Row ranges of the pages of row group `rg` whose trace id range may contain `key`
/// (`None` when the file has no page index).
fn page_ranges(
    md: &ParquetMetaData,
    rg: usize,
    col: usize,
    rows: usize,
    key: &[u8],
) -> Option<Vec<(usize, usize)>> {
    let ci = md.column_index()?.get(rg)?.get(col)?;
    let oi = md.offset_index()?.get(rg)?.get(col)?;
    let ColumnIndexMetaData::FIXED_LEN_BYTE_ARRAY(idx) = ci else { return None };
    let locs = oi.page_locations();
    let mut out: Vec<(usize, usize)> = Vec::new();
    for (p, loc) in locs.iter().enumerate() {
        let from = usize::try_from(loc.first_row_index).ok()?;
        let to = match locs.get(p + 1) {
            Some(next) => usize::try_from(next.first_row_index).ok()?,
            None => rows,
        };
        let may = match (idx.min_value(p), idx.max_value(p)) {
            (Some(min), Some(max)) => key >= min && key <= max,
            _ => true,
        };
        if may && to > from {
            match out.last_mut() {
                Some(last) if last.1 == from => last.1 = to,
                _ => out.push((from, to)),
            }
        }
    }
    Some(out)
}

/// A live segment.
pub(crate) struct Segment {
    pub meta: SegmentMeta,
    pub dir: PathBuf,
    /// Spans file reader (with blooms), opened with the segment.
    spans: Option<FileReader>,
    /// Span events / links readers, opened on first use.
    lazy: [OnceLock<Result<FileReader, String>>; 2],
    /// The resources file's rows (segments written with `resource_table`), loaded with the
    /// segment.
    resources: Option<RecordBatch>,
    /// The spans file's search index (none in segments written before it existed).
    search: Option<SearchIndex>,
    /// The collector whose manifest names it, in a read-only store over several collectors'
    /// prefixes (`None`: the store's own segment).
    pub origin: Option<Arc<Origin>>,
    obsolete: AtomicBool,
}

impl Segment {
    /// Opens a segment listed in the manifest (loads the spans file's metadata and blooms).
    pub fn open(dir: &Path, meta: SegmentMeta) -> Result<Segment> {
        let spans = match meta.file(schema::SPANS) {
            Some(f) => Some(FileReader::open(&dir.join(&f.file), true)?),
            None => None,
        };
        let resources = match meta.file(schema::SPAN_RESOURCES) {
            Some(f) => {
                let path = dir.join(&f.file);
                let parts = read_all(&path)?;
                // Written before scopes were stored once: the resource columns only.
                let layout = match parts.first() {
                    Some(p) if !resources::scopes_apart(p) => schema::span_resources_schema_v2(),
                    _ => schema::span_resources_schema(),
                };
                let batch = datafusion::arrow::compute::concat_batches(&layout, &parts)
                    .map_err(|e| StoreError::Decode(format!("{}: {e}", path.display())))?;
                Some(batch)
            }
            None => None,
        };
        let search = spans.as_ref().and_then(FileReader::search_index);
        Ok(Segment {
            meta,
            dir: dir.to_owned(),
            spans,
            lazy: Default::default(),
            resources,
            search,
            origin: None,
            obsolete: AtomicBool::new(false),
        })
    }

    /// The segment as one of `origin`'s.
    #[cfg(feature = "s3")]
    pub fn with_origin(mut self, origin: Arc<Origin>) -> Segment {
        self.origin = Some(origin);
        self
    }

    /// The resources file's rows, when the segment has one.
    pub fn resources(&self) -> Option<&RecordBatch> {
        self.resources.as_ref()
    }

    /// The schema of the spans file of a segment with a resources file: the scope columns
    /// apart too, or (written before scopes were stored once) on every span row.
    pub fn spans_file_schema(&self) -> SchemaRef {
        match &self.resources {
            Some(r) if !resources::scopes_apart(r) => schema::spans_file_schema_v2(),
            _ => schema::spans_file_schema(),
        }
    }

    /// Rows read from this segment's spans file as `spans` rows (the resource columns put back
    /// when the segment stores them apart).
    pub fn spans_rows(&self, batches: Vec<RecordBatch>) -> Result<Vec<RecordBatch>> {
        let Some(res) = &self.resources else { return Ok(batches) };
        resources::expand_all(batches, &ResourceLookup::new([(self.meta.id, res)])?)
    }

    /// Paths of the segment's files.
    pub fn paths(&self) -> impl Iterator<Item = (&str, PathBuf, u64)> {
        self.meta.files.iter().map(|f| (f.table.as_str(), self.dir.join(&f.file), f.bytes))
    }

    /// Marks the segment for deletion once nobody uses it.
    pub fn retire(&self) {
        self.obsolete.store(true, Ordering::Release);
    }

    pub fn bloom_bytes(&self) -> usize {
        self.spans.as_ref().map(|s| s.bloom_bytes()).unwrap_or(0)
    }

    /// The search index, when the segment was written with one.
    pub fn search_index(&self) -> Option<&SearchIndex> {
        self.search.as_ref()
    }

    /// Which row groups of the spans file a search for `q` reads (`None`: all), by the search
    /// index and the resources.
    pub(crate) fn search_row_groups(&self, q: &crate::search::TraceQuery) -> Option<Vec<bool>> {
        let (idx, spans) = (self.search.as_ref()?, self.spans.as_ref()?);
        let rows: Vec<u64> =
            spans.meta.metadata().row_groups().iter().map(|rg| rg.num_rows().max(0) as u64).collect();
        search_index::row_groups_to_read(idx, &rows, self.resources(), q)
    }

    fn lazy_reader(&self, slot: usize, table: &str) -> Result<Option<&FileReader>> {
        let Some(f) = self.meta.file(table) else { return Ok(None) };
        let r = self.lazy[slot]
            .get_or_init(|| FileReader::open(&self.dir.join(&f.file), false).map_err(|e| e.to_string()));
        match r {
            Ok(r) => Ok(Some(r)),
            Err(e) => Err(StoreError::Decode(e.clone())),
        }
    }

    /// The rows of trace `id` in the spans, span events and span links files, at most
    /// `limits[t]` of table `t`.
    pub fn read_trace(&self, id: &TraceId, limits: [usize; 3]) -> Result<Option<[Vec<RecordBatch>; 3]>> {
        let Some(spans) = &self.spans else { return Ok(None) };
        let s = spans.read_trace(id, limits[0])?;
        if s.is_empty() {
            return Ok(None);
        }
        let s = self.spans_rows(s)?;
        let e = match self.lazy_reader(0, schema::SPAN_EVENTS)? {
            Some(r) => r.read_trace(id, limits[1])?,
            None => Vec::new(),
        };
        let l = match self.lazy_reader(1, schema::SPAN_LINKS)? {
            Some(r) => r.read_trace(id, limits[2])?,
            None => Vec::new(),
        };
        Ok(Some([s, e, l]))
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::Acquire) {
            for f in &self.meta.files {
                let p = self.dir.join(&f.file);
                if let Err(e) = std::fs::remove_file(&p)
                    && e.kind() != std::io::ErrorKind::NotFound
                {
                    tracing::warn!(path = %p.display(), error = %e, "could not delete retired segment file");
                }
            }
        }
    }
}

/// Reads all rows of one segment file (compaction input).
pub(crate) fn read_all(path: &Path) -> Result<Vec<RecordBatch>> {
    let file = File::open(path).map_err(io_err("open", path))?;
    let pq = |source| StoreError::Parquet { path: path.to_owned(), source };
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(pq)?
        .with_batch_size(64 * 1024)
        .build()
        .map_err(pq)?;
    let mut out = Vec::new();
    for b in reader {
        out.push(b.map_err(|e| StoreError::Parquet { path: path.to_owned(), source: e.into() })?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{MapBuilder, MapFieldNames, StringBuilder};
    use proptest::prelude::*;

    use super::*;

    /// Rows of one batch: per row, `None` (a null map) or entries (key, value or null).
    type Rows = Vec<Option<Vec<(String, Option<String>)>>>;

    fn map_array(rows: &Rows) -> ArrayRef {
        let names = MapFieldNames { entry: "entries".into(), key: "keys".into(), value: "values".into() };
        let mut b = MapBuilder::new(Some(names), StringBuilder::new(), StringBuilder::new());
        for row in rows {
            match row {
                None => b.append(false).unwrap(),
                Some(entries) => {
                    for (k, v) in entries {
                        b.keys().append_value(k);
                        b.values().append_option(v.as_deref());
                    }
                    b.append(true).unwrap();
                }
            }
        }
        Arc::new(b.finish())
    }

    fn string_array(rows: &Rows) -> ArrayRef {
        Arc::new(StringArray::from_iter(rows.iter().map(|r| r.as_ref().map(|e| format!("{e:?}")))))
    }

    fn rows(nulls: bool) -> impl Strategy<Value = Rows> {
        let value = if nulls {
            proptest::option::of("[a-zé]{0,6}").boxed()
        } else {
            "[a-zé]{0,6}".prop_map(Some).boxed()
        };
        let entries = proptest::collection::vec(("[a-z.]{0,5}", value), 0..5);
        let row = if nulls {
            proptest::option::weighted(0.8, entries).boxed()
        } else {
            entries.prop_map(Some).boxed()
        };
        proptest::collection::vec(row, 1..8)
    }

    /// Random (batch, row) picks over `sizes`, repeats allowed, as a flush's sort produces.
    fn picks(sizes: &[usize], seeds: &[u32]) -> Vec<(usize, usize)> {
        seeds
            .iter()
            .map(|&s| {
                let b = s as usize % sizes.len();
                (b, (s as usize / 7) % sizes[b])
            })
            .collect()
    }

    fn check(batches: &[Rows], seeds: &[u32]) {
        let sizes: Vec<usize> = batches.iter().map(|b| b.len()).collect();
        let order = picks(&sizes, seeds);
        for make in [map_array as fn(&Rows) -> ArrayRef, string_array] {
            let arrays: Vec<ArrayRef> = batches.iter().map(make).collect();
            let refs: Vec<&dyn Array> = arrays.iter().map(|a| a.as_ref()).collect();
            let want = interleave(&refs, &order).unwrap();
            let got = match refs[0].data_type() {
                DataType::Map(f, sorted) => gather_map(&refs, &order, f, *sorted).unwrap(),
                _ => gather_utf8(&refs, &order).unwrap().map(|a| Arc::new(a) as ArrayRef),
            };
            let has_nulls = refs.iter().any(|a| a.logical_null_count() > 0)
                || batches.iter().flatten().flatten().flatten().any(|(_, v)| v.is_none());
            match got {
                Some(got) => {
                    assert_eq!(got.to_data(), want.to_data());
                    if matches!(refs[0].data_type(), DataType::Map(..)) {
                        assert!(!has_nulls, "a column with nulls must fall back to interleave");
                    }
                }
                None => assert!(has_nulls, "only columns with nulls fall back to interleave"),
            }
        }
    }

    proptest! {
        /// The specialised gathers produce exactly what Arrow's `interleave` produces, and fall
        /// back to it (`None`) only when there are nulls.
        #[test]
        fn gathers_agree_with_interleave(
            batches in proptest::collection::vec(rows(false), 1..4),
            seeds in proptest::collection::vec(any::<u32>(), 0..40),
        ) {
            check(&batches, &seeds);
        }

        #[test]
        fn columns_with_nulls_fall_back(
            batches in proptest::collection::vec(rows(true), 1..4),
            seeds in proptest::collection::vec(any::<u32>(), 0..40),
        ) {
            check(&batches, &seeds);
        }
    }
}
