//! The in-memory Arrow buffer: appended batches per table, queryable right away, flushed to a
//! Parquet segment when big or old enough.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use datafusion::arrow::array::{RecordBatch, StringArray, TimestampNanosecondArray};
use datafusion::arrow::compute::concat_batches;

use crate::arrow_rows::SpanBatches;
use crate::error::Result;
use crate::resources::BufferResources;
use crate::schema;

/// Distinct (service, name, kind) kept per buffer/segment before giving up listing them.
pub(crate) const MAX_OPERATIONS: usize = 10_000;
/// Batches smaller than this are merged once [`SMALL_RUN`] of them pile up. Requests of the
/// OpenTelemetry SDKs' default 512 spans are kept as they are: merging them copied the whole
/// buffer once more (into freshly faulted pages, ~10 % of durable ingest CPU in a profile),
/// and flushes read the buffered batches directly, so only queries of the buffer see them.
const SMALL_BATCH: usize = 256;
const SMALL_RUN: usize = 64;

/// Per-table index in `[spans, span_events, span_links, events]`.
pub(crate) const T_SPANS: usize = 0;
pub(crate) const T_SPAN_EVENTS: usize = 1;
pub(crate) const T_EVENTS: usize = 3;

/// Ids of buffers, for the high bits of their span rows' `resource_ref`s: unique among the
/// buffers of a process (it would take 2^32 buffers for one to wrap onto a live one).
static NEXT_BUFFER_ID: AtomicU32 = AtomicU32::new(1);

/// One buffer.
pub(crate) struct MemTable {
    /// Per table: its batches. Spans are in the segment files' layout (`resource_ref` naming a
    /// row of `resources`); see [`schema_of`].
    pub tables: [Vec<RecordBatch>; 4],
    /// The distinct resources of the buffered spans.
    pub resources: BufferResources,
    pub rows: [u64; 4],
    pub bytes: usize,
    /// Min/max time per table (span start, event time).
    pub time_range: [Option<(u64, u64)>; 4],
    pub first_append: Option<Instant>,
    /// `service \x1f name \x1f kind` of every distinct operation (one `String` per entry so a
    /// lookup needs no allocation).
    pub operations: HashSet<String>,
    pub operations_complete: bool,
    small_run: [usize; 4],
}

impl Default for MemTable {
    fn default() -> Self {
        MemTable {
            tables: Default::default(),
            resources: BufferResources::new(NEXT_BUFFER_ID.fetch_add(1, Ordering::Relaxed)),
            rows: [0; 4],
            bytes: 0,
            time_range: [None; 4],
            first_append: None,
            operations: HashSet::new(),
            operations_complete: true,
            small_run: [0; 4],
        }
    }
}

/// Schema of the buffer's batches of table `t`: as in the segment files (spans without the
/// resource columns, with `resource_ref`).
pub(crate) fn schema_of(t: usize) -> datafusion::arrow::datatypes::SchemaRef {
    if t == T_SPANS { schema::spans_file_schema() } else { schema::schema_of(t) }
}

fn time_column(table: usize) -> &'static str {
    match table {
        0 => "start_time",
        _ => "time",
    }
}

impl MemTable {
    pub fn is_empty(&self) -> bool {
        self.rows.iter().all(|&r| r == 0)
    }

    pub fn push_spans(&mut self, b: SpanBatches) -> Result<()> {
        let before = self.resources.bytes();
        let spans = self.resources.adopt(&b.spans, &b.resources)?;
        self.bytes += self.resources.bytes() - before;
        self.note_operations(&spans);
        self.push(0, spans)?;
        self.push(1, b.events)?;
        self.push(2, b.links)?;
        Ok(())
    }

    pub fn push_events(&mut self, b: RecordBatch) -> Result<()> {
        self.push(T_EVENTS, b)
    }

    fn note_operations(&mut self, spans: &RecordBatch) {
        if !self.operations_complete {
            return;
        }
        let get = |n: &str| spans.column_by_name(n).and_then(|c| c.as_any().downcast_ref::<StringArray>());
        let (Some(svc), Some(name), Some(kind)) = (get("service_name"), get("name"), get("kind")) else {
            return;
        };
        let mut key = String::new();
        for i in 0..spans.num_rows() {
            key.clear();
            key.push_str(svc.value(i));
            key.push('\x1f');
            key.push_str(name.value(i));
            key.push('\x1f');
            key.push_str(kind.value(i));
            if self.operations.contains(key.as_str()) {
                continue;
            }
            if self.operations.len() >= MAX_OPERATIONS {
                self.operations_complete = false;
                return;
            }
            self.operations.insert(key.clone());
        }
    }

    fn push(&mut self, t: usize, b: RecordBatch) -> Result<()> {
        let n = b.num_rows();
        if n == 0 {
            return Ok(());
        }
        if self.first_append.is_none() {
            self.first_append = Some(Instant::now());
        }
        if let Some(ts) = b
            .column_by_name(time_column(t))
            .and_then(|c| c.as_any().downcast_ref::<TimestampNanosecondArray>())
        {
            let (mut lo, mut hi) = self.time_range[t].unwrap_or((u64::MAX, 0));
            for v in ts.values().iter() {
                let v = *v as u64;
                lo = lo.min(v);
                hi = hi.max(v);
            }
            self.time_range[t] = Some((lo, hi));
        }
        self.rows[t] += n as u64;
        self.bytes += b.get_array_memory_size();
        self.tables[t].push(b);
        if n < SMALL_BATCH {
            self.small_run[t] += 1;
            if self.small_run[t] >= SMALL_RUN {
                self.coalesce_tail(t)?;
            }
        } else {
            self.small_run[t] = 0;
        }
        Ok(())
    }

    /// Merges the trailing run of small batches into one (fewer, larger batches for queries).
    fn coalesce_tail(&mut self, t: usize) -> Result<()> {
        let run = self.small_run[t].min(self.tables[t].len());
        self.small_run[t] = 0;
        if run < 2 {
            return Ok(());
        }
        let at = self.tables[t].len() - run;
        let tail: Vec<RecordBatch> = self.tables[t].split_off(at);
        let old: usize = tail.iter().map(|b| b.get_array_memory_size()).sum();
        let merged = concat_batches(&schema_of(t), &tail)?;
        self.bytes = self.bytes - old + merged.get_array_memory_size();
        self.tables[t].push(merged);
        Ok(())
    }

    /// Cheap copy of the batches (Arrow arrays are reference counted).
    pub fn snapshot(&self) -> [Vec<RecordBatch>; 4] {
        self.tables.clone()
    }

    /// Operations as sorted triples.
    pub fn operations_sorted(&self) -> Vec<(String, String, String)> {
        let mut v: Vec<_> = self
            .operations
            .iter()
            .map(|k| {
                let mut p = k.splitn(3, '\x1f');
                let mut next = || p.next().unwrap_or("").to_owned();
                (next(), next(), next())
            })
            .collect();
        v.sort();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arrow_rows::spans_to_batches;
    use crate::testutil::span;

    fn push(m: &mut MemTable, from: u64, n: u64) {
        let spans: Vec<_> = (from..from + n).map(span).collect();
        m.push_spans(spans_to_batches(&spans).unwrap()).unwrap();
    }

    /// Appends bring their resources; the buffer keeps each distinct one once, and its span
    /// rows name the buffer's rows.
    #[test]
    fn resources_are_kept_once_per_buffer() {
        let mut m = MemTable::default();
        push(&mut m, 0, 20);
        push(&mut m, 100, 20);
        let res = m.resources.batch().unwrap();
        assert_eq!(res.num_rows(), 3, "testutil spans have three resources");
        let id = u64::from(m.resources.id());
        for (b, from) in m.tables[T_SPANS].iter().zip([0, 100]) {
            let refs = b.column_by_name(schema::RESOURCE_REF).unwrap();
            let refs = refs.as_any().downcast_ref::<datafusion::arrow::array::UInt64Array>().unwrap();
            // Span i has resource svc-(i % 3), numbered in order of first appearance.
            let want: Vec<u64> = (from..from + 20).map(|i| id << 32 | (i % 3)).collect();
            assert_eq!(refs.values().to_vec(), want);
        }
        assert_ne!(MemTable::default().resources.id(), m.resources.id());
    }

    #[test]
    fn sdk_sized_batches_are_kept_and_tiny_ones_merged() {
        let mut m = MemTable::default();
        for i in 0..(2 * SMALL_RUN as u64) {
            push(&mut m, i * 512, 512);
        }
        assert_eq!(m.tables[T_SPANS].len(), 2 * SMALL_RUN, "512-span appends are not copied again");
        let mut m = MemTable::default();
        for i in 0..(2 * SMALL_RUN as u64) {
            push(&mut m, i * 10, 10);
        }
        assert_eq!(m.tables[T_SPANS].len(), 2, "runs of tiny appends are merged");
        assert_eq!(m.rows[T_SPANS], 2 * SMALL_RUN as u64 * 10);
        let total: usize = m.tables[T_SPANS].iter().map(|b| b.num_rows()).sum();
        assert_eq!(total, 2 * SMALL_RUN * 10);
    }
}
