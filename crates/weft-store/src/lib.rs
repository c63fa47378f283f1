//! # weft-store
//!
//! weft's durable span store: one directory, no external services (optionally a bucket
//! holding the segments, feature `s3`).
//!
//! ```text
//!  append(spans) ──▶ Arrow batches ──▶ WAL record (fsync policy) ──▶ in-memory buffer ──┐
//!                                        acknowledged here                             │ flush (size / age)
//!  queries ◀── DataFusion (SQL, search) ◀── segments (Parquet, zstd, sorted by trace) ◀┘
//!              trace by id ◀── bloom filters + page index          manifest (atomic)
//! ```
//!
//! * **Write path** ([`Store::append`]): spans become Arrow record batches of the `spans`,
//!   `span_events` and `span_links` tables ([`schema`]), are appended to the write-ahead log
//!   ([`wal`]) as Arrow IPC, and join the in-memory buffer. The call returns after the WAL
//!   append (and its fsync under [`FsyncPolicy::Always`]) — that is the acknowledgement.
//! * **Flush**: when the buffer passes [`StoreConfig::flush_bytes`] or
//!   [`StoreConfig::flush_interval`], it is frozen (the WAL rotates) and a background thread
//!   writes it as a segment ([`segment`]: a Parquet file per table, plus one row per distinct
//!   resource and instrumentation scope in a `span_resources` file); the manifest ([`manifest`]) naming the segment is
//!   replaced atomically; then the WAL files it covers are deleted.
//! * **Recovery**: [`Store::open`] replays WAL files newer than the manifest's checkpoint; a
//!   torn tail is truncated, counted and logged; a bad record with valid ones after it is
//!   copied to `quarantine/`, counted and logged, and replay goes on. A missing manifest next
//!   to segment files refuses the open (nothing is deleted).
//! * **Write failures are sticky until the WAL starts afresh**: after a failed WAL write or
//!   fsync nothing more is acknowledged ([`StoreError::Poisoned`]) until the background thread
//!   has cut the broken WAL file back to its last whole record and opened a new one (retried
//!   every [`StoreConfig::wal_retry_interval`], e.g. until a full disk has room again; the
//!   broken file's rows are flushed from memory). Appends waiting for the failed fsync are
//!   never acknowledged.
//! * **Bounded memory**: past [`StoreConfig::max_buffer_bytes`] of buffered data (flushing
//!   cannot keep up), appends fail with [`StoreError::Overloaded`] — receivers turn that into
//!   429/503 with Retry-After and count the drop.
//! * **Duplicates**: a span stored twice (a client's retry after an answer it never got) is
//!   read once by [`Store::trace`] and [`Store::search`] and written once by compaction
//!   (same trace id, span id and content hash; two different spans sharing ids are both kept).
//!   SQL over `spans` sees both copies until compaction merges the segments holding them.
//! * **A bucket** (cargo feature `s3`, `StoreConfig::bucket`): segments, resource files and
//!   manifests are also kept in an S3-compatible bucket (`bucket`): a flush uploads the segment,
//!   puts the bucket's manifest, then the local one, then trims the WAL; a failed upload is
//!   retried with the flush's backoff while appends go on into the WAL. Opening takes the
//!   bucket's manifest and fetches missing segment files; SQL and search read the files from
//!   the bucket (DataFusion's object-store registry), trace by id the local copy. A segment
//!   whose object the bucket lacks at open is left out of reads, named in a warning and in
//!   [`Store::missing_objects`], and kept in the manifest. `s3_store`, `read_manifest` and
//!   `collector_prefixes` give other readers (a cluster's nodes) the same client, the manifest
//!   and the collectors' prefixes that a read-only store reads.
//! * **Several collectors, one bucket**: opened [`StoreConfig::read_only`] with a bucket, a
//!   store reads the union of the manifest at the bucket's URL and of every manifest one level
//!   down (each collector writing its own prefix), re-read every
//!   [`StoreConfig::refresh_interval`] ([`Store::refresh`]); segment ids are per collector.
//!   Trace by id and search de-duplicate across collectors; the data directory only caches the
//!   live segment files read. An unreadable manifest or segment is counted
//!   ([`Metrics::bucket_read_errors`]) and the rest served.
//! * **Retention** by age (of when weft wrote the spans) and total size, **compaction** of small segments into larger ones.
//! * **Reads**: [`Store::trace`] (bloom filters and page statistics find the rows;
//!   [`Store::trace_bounded`] stops reading past a span limit and says so),
//!   [`Store::search`] (a per-segment search index in each spans file's footer, written by
//!   flush and compaction, skips segments and row groups that cannot match; newest segments
//!   first, it stops at N traces; [`SearchPlan::Scan`] is the full scan it must agree with),
//!   [`Store::services`] / [`Store::operations`], and SQL
//!   ([`Store::sql`]) over the tables `spans`, `span_events`, `span_links`, `events`, and
//!   the result tables (`live_NAME`).
//! * **Result tables** ([`results`]): rows kept for later SQL (a live query's windows), Parquet
//!   files under `tables/NAME/` apart from the span engine, capped per table by rows.
//!
//! # Modules
//!
//! The front door is [`Store`] (this file: open, append, flush, close, sizes), its reads
//! (`read`: a trace by id, SQL, services and operations, time windows) and search
//! (`search`: [`TraceQuery`], [`search_sql`], [`SearchPlan`]; `search_index`: what each
//! segment's footer says for it). Behind it, `engine` holds the shared state and
//! the background work: WAL replay on open, the write path, flush, retention and compaction.
//! Data formats: [`schema`] (the tables), [`arrow_rows`] (spans ↔ Arrow rows), [`wal`],
//! [`segment`], [`manifest`], [`results`].

#![warn(missing_docs)]

pub mod arrow_rows;
mod attrs;
#[cfg(feature = "s3")]
mod bucket;
mod config;
mod dedup;
mod engine;
pub mod error;
pub mod manifest;
mod memtable;
mod metrics;
mod query;
mod query_memory;
mod read;
pub mod render;
mod resources;
pub mod results;
pub mod schema;
mod search;
mod search_index;
pub mod segment;
pub mod wal;

#[cfg(test)]
mod testutil;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use weft_model::{Event, Span};

/// DataFusion, re-exported so crates linking the store use the same (single) copy of it and
/// of arrow/parquet (`weft_store::datafusion::arrow`).
pub use datafusion;
pub use datafusion::arrow::array::RecordBatch;

pub use arrow_rows::{SpanBatches, batches_to_spans, events_to_batch, spans_to_batches};
#[cfg(feature = "s3")]
pub use bucket::{BucketConfig, collector_prefixes, read_manifest, s3_store};
pub use config::StoreConfig;
pub use error::{Result, StoreError};
pub use manifest::{FileMeta, Manifest, SegmentMeta};
pub use metrics::{Metrics, StoreStats};
pub use query::sql_str;
pub use read::{EVENT_ROWS_PER_SPAN, SqlLimits, SqlResult, TraceRead};
pub use search::{SearchPlan, TraceQuery, search_sql};
pub use segment::WriteOptions;
pub use wal::FsyncPolicy;

use engine::{Background, Inner, with_payload_buffer};

/// The store. Cheap to clone (shared handle); thread-safe. When the last handle is dropped
/// the background threads stop (without a final flush: the WAL keeps the buffered data; call
/// [`Store::close`] to flush first).
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
    threads: Arc<Background>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("dir", &self.inner.dir).finish()
    }
}

impl Store {
    /// Opens (or creates) the store in `cfg.dir`: loads the manifest, deletes leftovers of
    /// interrupted flushes, replays the WAL, and starts the background threads.
    pub fn open(cfg: StoreConfig) -> Result<Store> {
        let inner = Inner::open(cfg)?;
        let threads = Arc::new(Background::new(inner.clone()));
        if !inner.cfg.read_only || inner.is_union() {
            threads.start();
        }
        Ok(Store { inner, threads })
    }

    /// The data directory (canonical path).
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The configuration the store was opened with.
    pub fn config(&self) -> &StoreConfig {
        &self.inner.cfg
    }

    /// Counters.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Appends spans durably: returns once they are in the WAL (and fsynced under
    /// [`FsyncPolicy::Always`]). On `Overloaded`, nothing was written.
    pub fn append(&self, spans: &[Span]) -> Result<()> {
        self.append_spans(spans, false)
    }

    /// Appends spans and returns only once the WAL holding them is fsynced, whatever the
    /// [`FsyncPolicy`] (concurrent callers share fsyncs): for senders that delete their copy on
    /// the acknowledgement, so a machine crash cannot lose what they deleted.
    pub fn append_synced(&self, spans: &[Span]) -> Result<()> {
        self.append_spans(spans, true)
    }

    fn append_spans(&self, spans: &[Span], fsync: bool) -> Result<()> {
        if spans.is_empty() {
            return Ok(());
        }
        self.inner.check_writable(spans.len() as u64)?;
        let batches = spans_to_batches(spans)?;
        // The IPC streams are about the size of the Arrow buffers: reserve that once instead of
        // growing the payload (each regrowth copied it and faulted in fresh pages).
        let arrow_bytes = [&batches.spans, &batches.resources, &batches.events, &batches.links]
            .iter()
            .map(|b| b.get_array_memory_size())
            .sum::<usize>();
        self.inner.check_append_size(arrow_bytes)?;
        with_payload_buffer(arrow_bytes + 16 * 1024, |payload| {
            wal::encode_spans(&batches, payload)?;
            self.inner.commit(payload, fsync, |m| m.push_spans(batches))
        })?;
        self.inner.metrics.spans_appended.fetch_add(spans.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Appends raw low-level events (the `events` table) durably.
    pub fn append_events(&self, events: &[Event]) -> Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        self.inner.check_writable(0)?;
        let batch = events_to_batch(events)?;
        self.inner.check_append_size(batch.get_array_memory_size())?;
        with_payload_buffer(batch.get_array_memory_size() / 2 + 1024, |payload| {
            wal::encode_events(&batch, payload)?;
            self.inner.commit(payload, false, |m| m.push_events(batch))
        })?;
        self.inner.metrics.events_appended.fetch_add(events.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Freezes the buffer and writes it to a segment now (blocking until it is durable).
    pub fn flush(&self) -> Result<()> {
        self.inner.freeze()?;
        self.inner.flush_frozen()
    }

    /// Applies retention now; returns the number of segments deleted (a read-only store
    /// refuses: [`StoreError::ReadOnly`]).
    pub fn apply_retention(&self) -> Result<usize> {
        if self.inner.cfg.read_only {
            return Err(StoreError::ReadOnly);
        }
        self.inner.retention(weft_model::time::now_unix_nanos())
    }

    /// A read-only store over a bucket ([`StoreConfig::read_only`] with a bucket): re-reads
    /// the collectors' manifests now, as the refresh thread does every
    /// [`StoreConfig::refresh_interval`]. Nothing to do for other stores.
    pub fn refresh(&self) -> Result<()> {
        self.inner.refresh_now()
    }

    /// Runs one compaction step now; returns true when segments were merged (a read-only
    /// store refuses: [`StoreError::ReadOnly`]).
    pub fn compact(&self) -> Result<bool> {
        if self.inner.cfg.read_only {
            return Err(StoreError::ReadOnly);
        }
        self.inner.compact_once()
    }

    /// Flushes everything and stops the background threads. Further appends fail.
    pub fn close(&self) -> Result<()> {
        let r = if self.inner.cfg.read_only { Ok(()) } else { self.flush() };
        self.threads.stop();
        r
    }

    /// Sizes right now.
    pub fn stats(&self) -> StoreStats {
        let st = self.inner.state.read();
        let mut s = StoreStats {
            segments: st.segments.len(),
            buffer_bytes: st.buffered_bytes(),
            buffer_spans: st.active.rows[0] + st.frozen.iter().map(|f| f.mem.rows[0]).sum::<u64>(),
            frozen_buffers: st.frozen.len(),
            segments_missing: self
                .inner
                .missing_objects
                .iter()
                .map(|(id, _)| *id)
                .collect::<BTreeSet<_>>()
                .len(),
            ..StoreStats::default()
        };
        for seg in &st.segments {
            s.segment_bytes += seg.meta.bytes();
            s.segment_spans += seg.meta.rows(schema::SPANS);
            s.segment_events += seg.meta.rows(schema::EVENTS);
            s.bloom_bytes += seg.bloom_bytes();
            s.search_index_bytes += seg.search_index().map_or(0, |i| i.encoded_len() as u64);
        }
        drop(st);
        if let Ok(files) = wal::list_wal_files(&self.inner.wal_dir) {
            s.wal_bytes = files.iter().filter_map(|(_, p)| std::fs::metadata(p).ok()).map(|m| m.len()).sum();
        }
        s
    }

    /// The bucket's objects that segments named by the manifest lacked when the store opened
    /// (`s3://bucket/key`, each a warning in the log then): those segments are left out of
    /// SQL, search and trace by id, and stay named in the manifest.
    pub fn missing_objects(&self) -> Vec<String> {
        self.inner.missing_objects.iter().map(|(_, object)| object.clone()).collect()
    }

    /// Live segments' manifest entries.
    pub fn segments(&self) -> Vec<SegmentMeta> {
        self.inner.state.read().segments.iter().map(|s| s.meta.clone()).collect()
    }
}
