//! # weft-store
//!
//! weft's durable span store: one directory, no external services.
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
//!   resource in a `span_resources` file); the manifest ([`manifest`]) naming the segment is
//!   replaced atomically; then the WAL files it covers are deleted.
//! * **Recovery**: [`Store::open`] replays WAL files newer than the manifest's checkpoint; a
//!   torn tail is truncated, counted and logged; a bad record with valid ones after it is
//!   copied to `quarantine/`, counted and logged, and replay goes on. A missing manifest next
//!   to segment files refuses the open (nothing is deleted).
//! * **Write failures are sticky**: after a failed WAL write or fsync nothing more is
//!   acknowledged ([`StoreError::Poisoned`]) until the store is reopened.
//! * **Bounded memory**: past [`StoreConfig::max_buffer_bytes`] of buffered data (flushing
//!   cannot keep up), appends fail with [`StoreError::Overloaded`] — receivers turn that into
//!   429/503 with Retry-After and count the drop.
//! * **Retention** by age (of when weft wrote the spans) and total size, **compaction** of small segments into larger ones.
//! * **Reads**: [`Store::trace`] (bloom filters and page statistics find the rows),
//!   [`Store::search`], [`Store::services`] / [`Store::operations`], and SQL
//!   ([`Store::sql`]) over the tables `spans`, `span_events`, `span_links`, `events`.

#![warn(missing_docs)]

mod attrs;
pub mod convert;
pub mod error;
pub mod manifest;
mod memtable;
mod query;
pub mod render;
mod resources;
pub mod schema;
pub mod segment;
pub mod synth;
pub mod wal;

#[cfg(test)]
mod testutil;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{Array, FixedSizeBinaryArray, StringArray};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::execution::memory_pool::FairSpillPool;
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::prelude::{SQLOptions, SessionConfig, SessionContext};
use futures::StreamExt;
use parking_lot::{Condvar, Mutex, RwLock};
use weft_model::{Event, Span, SpanKind, TraceId};

/// DataFusion, re-exported so crates linking the store use the same (single) copy of it and
/// of arrow/parquet (`weft_store::datafusion::arrow`).
pub use datafusion;
pub use datafusion::arrow::array::RecordBatch;

pub use convert::{SpanBatches, batches_to_spans, events_to_batch, spans_to_batches};
pub use error::{Result, StoreError};
pub use manifest::{FileMeta, Manifest, SegmentMeta};
pub use query::sql_str;
pub use segment::WriteOptions;
pub use wal::FsyncPolicy;

use memtable::MemTable;
use query::{Snapshot, SnapshotTable};
use segment::Segment;
use wal::{WalRecord, WalSync, WalWriter};

/// A WAL payload buffer kept by each appending thread up to this capacity, so that appends
/// reuse warm memory instead of allocating (and faulting in) a fresh buffer per request.
const KEEP_PAYLOAD_BYTES: usize = 8 << 20;

thread_local! {
    static PAYLOAD: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `f` with this thread's cleared payload buffer, reserved for `capacity` bytes.
fn with_payload_buffer<R>(capacity: usize, f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    PAYLOAD.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            buf.clear();
            buf.reserve(capacity);
            let r = f(&mut buf);
            if buf.capacity() > KEEP_PAYLOAD_BYTES {
                *buf = Vec::new();
            }
            r
        }
        // Re-entered on this thread (cannot happen today): use a buffer of its own.
        Err(_) => f(&mut Vec::with_capacity(capacity)),
    })
}

/// Store configuration.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// The data directory (created if missing).
    pub dir: PathBuf,
    /// When the WAL is fsynced.
    pub fsync: FsyncPolicy,
    /// Buffer size (Arrow bytes) that triggers a flush.
    pub flush_bytes: usize,
    /// Oldest unflushed data before a flush.
    pub flush_interval: Duration,
    /// Buffered bytes (active + frozen) past which appends fail with `Overloaded`.
    pub max_buffer_bytes: usize,
    /// Delete segments whose spans weft wrote longer ago than this (by when weft wrote them,
    /// not by the spans' own timestamps).
    pub retention_age: Option<Duration>,
    /// Delete the segments written first while all segments together exceed this many bytes.
    pub retention_bytes: Option<u64>,
    /// Segments smaller than this (Arrow bytes) are compaction candidates.
    pub compaction_small_bytes: u64,
    /// Compaction merges runs of at least this many small segments...
    pub compaction_min_inputs: usize,
    /// ...into segments of at most this many Arrow bytes.
    pub compaction_target_bytes: u64,
    /// How often the background thread applies retention and compaction.
    pub maintenance_interval: Duration,
    /// Parquet writing options.
    pub write: WriteOptions,
    /// Memory DataFusion may use per query before spilling or failing.
    pub query_memory_bytes: usize,
    /// Open without writing anything: no lock, no WAL truncation, no flushes; appends fail.
    pub read_only: bool,
    /// Creates the WAL's files: the real file system ([`wal::OsFiles`]) unless a test
    /// injects write or fsync failures.
    pub wal_files: Arc<dyn wal::WalFiles>,
}

impl StoreConfig {
    /// Defaults for a data directory.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        StoreConfig {
            dir: dir.into(),
            fsync: FsyncPolicy::Interval(Duration::from_millis(100)),
            flush_bytes: 64 << 20,
            flush_interval: Duration::from_secs(60),
            max_buffer_bytes: 256 << 20,
            retention_age: None,
            retention_bytes: None,
            compaction_small_bytes: 16 << 20,
            compaction_min_inputs: 4,
            compaction_target_bytes: 64 << 20,
            maintenance_interval: Duration::from_secs(10),
            write: WriteOptions::default(),
            query_memory_bytes: 1 << 30,
            read_only: false,
            wal_files: Arc::new(wal::OsFiles),
        }
    }
}

/// Counters (monotonic since open).
#[derive(Debug, Default)]
pub struct Metrics {
    /// Spans appended (acknowledged).
    pub spans_appended: AtomicU64,
    /// Raw events appended.
    pub events_appended: AtomicU64,
    /// Append calls acknowledged.
    pub appends: AtomicU64,
    /// Bytes written to the WAL.
    pub wal_bytes_written: AtomicU64,
    /// Appends refused because the buffer was full.
    pub appends_overloaded: AtomicU64,
    /// Spans in appends refused because the buffer was full.
    pub spans_overloaded: AtomicU64,
    /// Segments written by flushes.
    pub flushes: AtomicU64,
    /// Flushes that failed (retried later).
    pub flush_errors: AtomicU64,
    /// Compactions done.
    pub compactions: AtomicU64,
    /// Segments deleted by age retention.
    pub retired_by_age: AtomicU64,
    /// Segments deleted by size retention.
    pub retired_by_size: AtomicU64,
    /// WAL records replayed on open.
    pub wal_records_replayed: AtomicU64,
    /// Torn or corrupt WAL records found (and cut) on open.
    pub wal_records_torn: AtomicU64,
    /// Bad WAL records kept aside (copied to `quarantine/`) and skipped on open.
    pub wal_records_quarantined: AtomicU64,
}

/// A point-in-time view of the store's size.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct StoreStats {
    /// Live segments.
    pub segments: usize,
    /// Bytes of all segment files.
    pub segment_bytes: u64,
    /// Span rows in segments.
    pub segment_spans: u64,
    /// Raw event rows in segments.
    pub segment_events: u64,
    /// Buffered (unflushed) bytes, active + frozen.
    pub buffer_bytes: usize,
    /// Buffered span rows.
    pub buffer_spans: u64,
    /// Frozen buffers waiting for their flush.
    pub frozen_buffers: usize,
    /// Bytes of live WAL files.
    pub wal_bytes: u64,
    /// Memory held by the trace-id bloom filters.
    pub bloom_bytes: usize,
}

/// Search criteria for traces (all given criteria must hold on one span).
#[derive(Debug, Clone, Default)]
pub struct TraceQuery {
    /// `service.name`.
    pub service: Option<String>,
    /// Span name.
    pub span_name: Option<String>,
    /// Span kind.
    pub span_kind: Option<SpanKind>,
    /// `key = value` on span or resource attributes; a key alone matches when the attribute
    /// exists or a span event has that name. The key `error` also matches error status.
    pub attributes: Vec<(String, Option<String>)>,
    /// Minimum span duration, ns.
    pub min_duration_ns: Option<u64>,
    /// Maximum span duration, ns.
    pub max_duration_ns: Option<u64>,
    /// Span start ≥ this, ns since the epoch.
    pub start_min_ns: Option<u64>,
    /// Span start ≤ this, ns since the epoch.
    pub start_max_ns: Option<u64>,
    /// Maximum number of traces (newest first).
    pub limit: usize,
}

/// Result of a SQL query.
#[derive(Debug, Clone)]
pub struct SqlResult {
    /// Output schema.
    pub schema: SchemaRef,
    /// Output rows.
    pub batches: Vec<RecordBatch>,
    /// True when rows past the caller's row limit were cut.
    pub truncated: bool,
}

struct Frozen {
    mem: Arc<MemTable>,
    /// Every WAL file up to this id is contained in `mem` (or earlier segments).
    wal_upto: u64,
}

struct State {
    active: MemTable,
    /// WAL file the active buffer appends to.
    active_wal: u64,
    frozen: VecDeque<Frozen>,
    segments: Vec<Arc<Segment>>,
}

impl State {
    fn buffered_bytes(&self) -> usize {
        self.active.bytes + self.frozen.iter().map(|f| f.mem.bytes).sum::<usize>()
    }
}

struct Inner {
    cfg: StoreConfig,
    dir: PathBuf,
    wal_dir: PathBuf,
    seg_dir: PathBuf,
    wal: Mutex<Option<WalWriter>>,
    sync: WalSync,
    state: RwLock<State>,
    manifest: Mutex<Manifest>,
    /// Serializes flushes, compactions and retention (manifest writers).
    maint: Mutex<()>,
    metrics: Metrics,
    poisoned: Mutex<Option<String>>,
    shutdown: AtomicBool,
    wake: (Mutex<bool>, Condvar),
    runtime: Arc<RuntimeEnv>,
    _lock: Option<File>,
}

/// The store. Cheap to clone (shared handle); thread-safe. When the last handle is dropped
/// the background threads stop (without a final flush: the WAL keeps the buffered data; call
/// [`Store::close`] to flush first).
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
    threads: Arc<Background>,
}

struct Background {
    inner: Arc<Inner>,
    handles: Mutex<Vec<JoinHandle<()>>>,
}

impl Background {
    fn stop(&self) {
        self.inner.shutdown.store(true, Ordering::Release);
        self.inner.wake_background();
        for t in self.handles.lock().drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop();
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("dir", &self.inner.dir).finish()
    }
}

fn lock_dir(dir: &Path) -> Result<File> {
    let path = dir.join("LOCK");
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(error::io_err("open", &path))?;
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a valid, owned file descriptor.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r != 0 {
        return Err(StoreError::Locked(dir.to_owned()));
    }
    Ok(f)
}

impl Store {
    /// Opens (or creates) the store in `cfg.dir`: loads the manifest, deletes leftovers of
    /// interrupted flushes, replays the WAL, and starts the background threads.
    pub fn open(cfg: StoreConfig) -> Result<Store> {
        let read_only = cfg.read_only;
        if !read_only {
            std::fs::create_dir_all(&cfg.dir).map_err(error::io_err("create directory", &cfg.dir))?;
        }
        let dir = std::fs::canonicalize(&cfg.dir).map_err(error::io_err("open directory", &cfg.dir))?;
        let lock = if read_only { None } else { Some(lock_dir(&dir)?) };
        let wal_dir = dir.join("wal");
        let seg_dir = dir.join("segments");
        if !read_only {
            for d in [&wal_dir, &seg_dir] {
                std::fs::create_dir_all(d).map_err(error::io_err("create directory", d))?;
            }
        }
        let manifest = manifest::open(&dir, &seg_dir, read_only)?;

        // Segments named by the manifest; anything else in segments/ is a leftover.
        let mut segments = Vec::new();
        for m in &manifest.segments {
            segments.push(Arc::new(Segment::open(&seg_dir, m.clone())?));
        }
        if !read_only {
            let live: BTreeSet<&str> =
                manifest.segments.iter().flat_map(|s| s.files.iter().map(|f| f.file.as_str())).collect();
            if let Ok(rd) = std::fs::read_dir(&seg_dir) {
                for e in rd.flatten() {
                    let name = e.file_name();
                    let name = name.to_string_lossy();
                    if !live.contains(name.as_ref()) {
                        tracing::info!(file = %e.path().display(), "deleting segment file not in the manifest (interrupted flush)");
                        let _ = std::fs::remove_file(e.path());
                    }
                }
            }
        }

        let metrics = Metrics::default();
        // WAL replay.
        let wal_files = if wal_dir.is_dir() { wal::list_wal_files(&wal_dir)? } else { Vec::new() };
        let mut active = MemTable::default();
        let mut frozen = VecDeque::new();
        let mut last_id = manifest.wal_checkpoint;
        let quarantine = dir.join("quarantine");
        for (id, path) in &wal_files {
            if *id <= manifest.wal_checkpoint {
                if !read_only {
                    let _ = std::fs::remove_file(path);
                }
                continue;
            }
            let stats =
                wal::replay_file(path, (!read_only).then_some(quarantine.as_path()), |rec| match rec {
                    WalRecord::Spans(b) => active.push_spans(b),
                    WalRecord::Events(b) => active.push_events(b),
                })?;
            metrics.wal_records_replayed.fetch_add(stats.records, Ordering::Relaxed);
            metrics.wal_records_quarantined.fetch_add(stats.quarantined, Ordering::Relaxed);
            if let Some((offset, reason)) = &stats.torn {
                metrics.wal_records_torn.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    file = %path.display(), offset, reason = %reason,
                    "WAL ends in a torn or corrupt record; {}", if read_only { "ignored (read-only)" } else { "truncated there" }
                );
            }
            tracing::info!(file = %path.display(), records = stats.records, bytes = stats.bytes, "replayed WAL");
            last_id = last_id.max(*id);
            if active.bytes >= cfg.flush_bytes {
                frozen.push_back(Frozen { mem: Arc::new(std::mem::take(&mut active)), wal_upto: *id });
            }
        }
        let active_wal = last_id + 1;
        let (writer, sync) = if read_only {
            (None, WalSync::new(active_wal))
        } else {
            (Some(WalWriter::create(&wal_dir, active_wal, cfg.wal_files.clone())?), WalSync::new(active_wal))
        };
        if !active.is_empty() && !read_only {
            // Replayed data lives in older WAL files: freeze it so it is flushed promptly.
            frozen.push_back(Frozen { mem: Arc::new(std::mem::take(&mut active)), wal_upto: last_id });
        }

        let runtime = RuntimeEnvBuilder::new()
            .with_memory_pool(Arc::new(FairSpillPool::new(cfg.query_memory_bytes)))
            .build_arc()?;

        let inner = Arc::new(Inner {
            dir,
            wal_dir,
            seg_dir,
            wal: Mutex::new(writer),
            sync,
            state: RwLock::new(State { active, active_wal, frozen, segments }),
            manifest: Mutex::new(manifest),
            maint: Mutex::new(()),
            metrics,
            poisoned: Mutex::new(None),
            shutdown: AtomicBool::new(false),
            wake: (Mutex::new(false), Condvar::new()),
            runtime,
            _lock: lock,
            cfg,
        });
        let store = Store {
            threads: Arc::new(Background { inner: inner.clone(), handles: Mutex::new(Vec::new()) }),
            inner,
        };
        if !read_only {
            store.start_threads();
        }
        Ok(store)
    }

    fn start_threads(&self) {
        let mut threads = self.threads.handles.lock();
        let inner = self.inner.clone();
        threads.push(
            std::thread::Builder::new()
                .name("weft-store-flush".into())
                .spawn(move || inner.background())
                .unwrap_or_else(|e| panic!("cannot start the store's background thread: {e}")),
        );
        if let FsyncPolicy::Interval(period) = self.inner.cfg.fsync {
            let inner = self.inner.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("weft-store-fsync".into())
                    .spawn(move || inner.syncer(period))
                    .unwrap_or_else(|e| panic!("cannot start the store's fsync thread: {e}")),
            );
        }
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
        with_payload_buffer(arrow_bytes + 16 * 1024, |payload| {
            wal::encode_spans(&batches, payload)?;
            self.inner.commit(payload, |m| m.push_spans(batches))
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
        with_payload_buffer(batch.get_array_memory_size() / 2 + 1024, |payload| {
            wal::encode_events(&batch, payload)?;
            self.inner.commit(payload, |m| m.push_events(batch))
        })?;
        self.inner.metrics.events_appended.fetch_add(events.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Freezes the buffer and writes it to a segment now (blocking until it is durable).
    pub fn flush(&self) -> Result<()> {
        self.inner.freeze()?;
        self.inner.flush_frozen()
    }

    /// Applies retention now; returns the number of segments deleted.
    pub fn apply_retention(&self) -> Result<usize> {
        self.inner.retention(weft_model::time::now_unix_nanos())
    }

    /// Runs one compaction step now; returns true when segments were merged.
    pub fn compact(&self) -> Result<bool> {
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
            ..StoreStats::default()
        };
        for seg in &st.segments {
            s.segment_bytes += seg.meta.bytes();
            s.segment_spans += seg.meta.rows(schema::SPANS);
            s.segment_events += seg.meta.rows(schema::EVENTS);
            s.bloom_bytes += seg.bloom_bytes();
        }
        drop(st);
        if let Ok(files) = wal::list_wal_files(&self.inner.wal_dir) {
            s.wal_bytes = files.iter().filter_map(|(_, p)| std::fs::metadata(p).ok()).map(|m| m.len()).sum();
        }
        s
    }

    /// Live segments' manifest entries.
    pub fn segments(&self) -> Vec<SegmentMeta> {
        self.inner.state.read().segments.iter().map(|s| s.meta.clone()).collect()
    }

    fn snapshot(&self) -> Result<Arc<Snapshot>> {
        let st = self.inner.state.read();
        let mut memory: [Vec<RecordBatch>; 4] = Default::default();
        let mut memory_resources = Vec::with_capacity(st.frozen.len() + 1);
        for f in &st.frozen {
            for (t, m) in memory.iter_mut().enumerate() {
                m.extend(f.mem.tables[t].iter().cloned());
            }
            memory_resources.push((u64::from(f.mem.resources.id()), f.mem.resources.batch()?));
        }
        let active = st.active.snapshot();
        for (t, m) in memory.iter_mut().enumerate() {
            m.extend(active[t].iter().cloned());
        }
        memory_resources.push((u64::from(st.active.resources.id()), st.active.resources.batch()?));
        Ok(Arc::new(Snapshot { segments: st.segments.clone(), memory, memory_resources }))
    }

    /// All spans of a trace, ordered by start time (empty when unknown).
    pub fn trace(&self, id: TraceId) -> Result<Vec<Span>> {
        let snap = self.snapshot()?;
        let mut parts: [Vec<RecordBatch>; 3] = Default::default();
        for seg in &snap.segments {
            if let Some(found) = seg.read_trace(&id)? {
                for (p, f) in parts.iter_mut().zip(found) {
                    p.extend(f);
                }
            }
        }
        for (t, p) in parts.iter_mut().enumerate() {
            let mut found = Vec::new();
            for b in &snap.memory[t] {
                if let Some(f) = convert::filter_trace(b, &id)? {
                    found.push(f);
                }
            }
            if t == memtable::T_SPANS && !found.is_empty() {
                // Buffered spans name their resources; put the columns back.
                let lookup =
                    resources::ResourceLookup::new(snap.memory_resources.iter().map(|(i, b)| (*i, b)))?;
                found = resources::expand_all(found, &lookup)?;
            }
            p.extend(found);
        }
        let mut spans = batches_to_spans(&parts[0], &parts[1], &parts[2])?;
        spans.sort_by(|a, b| a.start_ns.cmp(&b.start_ns).then(a.span_id.cmp(&b.span_id)));
        Ok(spans)
    }

    /// A DataFusion session over a fresh snapshot: tables `spans`, `span_events`,
    /// `span_links`, `events`. The snapshot (and the segment files it names) lives as long as
    /// the context.
    pub fn session(&self) -> Result<SessionContext> {
        let snap = self.snapshot()?;
        let config = SessionConfig::new()
            .with_target_partitions(std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2))
            .with_information_schema(true);
        let ctx = SessionContext::new_with_config_rt(config, self.inner.runtime.clone());
        for (t, name) in schema::TABLE_NAMES.iter().enumerate() {
            let table = SnapshotTable { snapshot: snap.clone(), table: t, schema: schema::schema_of(t) };
            ctx.register_table(*name, Arc::new(table))?;
        }
        Ok(ctx)
    }

    /// Runs one read-only SQL statement (no DDL, DML or `SET`); at most `max_rows` rows are
    /// returned (`truncated` says whether more existed).
    pub async fn sql(&self, sql: &str, max_rows: usize) -> Result<SqlResult> {
        let ctx = self.session()?;
        let opts = SQLOptions::new().with_allow_ddl(false).with_allow_dml(false).with_allow_statements(false);
        let df = ctx.sql_with_options(sql, opts).await.map_err(|e| StoreError::Query(e.to_string()))?;
        let schema: SchemaRef = Arc::new(df.schema().as_arrow().clone());
        let mut stream = df.execute_stream().await.map_err(|e| StoreError::Query(e.to_string()))?;
        let mut batches = Vec::new();
        let mut rows = 0usize;
        let mut truncated = false;
        while let Some(b) = stream.next().await {
            let b = b.map_err(|e| StoreError::Query(e.to_string()))?;
            if rows + b.num_rows() > max_rows {
                let keep = max_rows - rows;
                if keep > 0 {
                    batches.push(b.slice(0, keep));
                }
                truncated = true;
                break;
            }
            rows += b.num_rows();
            batches.push(b);
        }
        Ok(SqlResult { schema, batches, truncated })
    }

    /// Trace ids matching `q`, newest first (by the latest matching span's start).
    pub async fn search_trace_ids(&self, q: &TraceQuery) -> Result<Vec<TraceId>> {
        let sql = search_sql(q);
        let res = self.sql(&sql, q.limit.max(1)).await?;
        let mut out = Vec::new();
        for b in &res.batches {
            let ids = b
                .column(0)
                .as_any()
                .downcast_ref::<FixedSizeBinaryArray>()
                .ok_or_else(|| StoreError::Decode("search returned no trace ids".into()))?;
            for i in 0..ids.len() {
                out.push(convert::trace_id_at(ids, i));
            }
        }
        Ok(out)
    }

    /// Traces matching `q` (each ordered by start time), newest first.
    pub async fn search(&self, q: &TraceQuery) -> Result<Vec<Vec<Span>>> {
        let ids = self.search_trace_ids(q).await?;
        let store = self.clone();
        tokio::task::spawn_blocking(move || {
            let mut out = Vec::with_capacity(ids.len());
            for id in ids {
                let t = store.trace(id)?;
                if !t.is_empty() {
                    out.push(t);
                }
            }
            Ok(out)
        })
        .await
        .map_err(|e| StoreError::Query(format!("search task: {e}")))?
    }

    /// Distinct (service, span name, kind) triples, sorted. Served from per-segment lists in
    /// the manifest and the buffers; falls back to SQL when a list was too long to keep.
    pub async fn operations_all(&self) -> Result<Vec<(String, String, String)>> {
        let (mut set, complete) = {
            let st = self.inner.state.read();
            let mut set: BTreeSet<(String, String, String)> = BTreeSet::new();
            let mut complete = st.active.operations_complete;
            set.extend(st.active.operations_sorted());
            for f in &st.frozen {
                complete &= f.mem.operations_complete;
                set.extend(f.mem.operations_sorted());
            }
            for s in &st.segments {
                complete &= s.meta.operations_complete;
                set.extend(s.meta.operations.iter().cloned());
            }
            (set, complete)
        };
        if !complete {
            let r = self.sql("SELECT DISTINCT service_name, name, kind FROM spans", 1_000_000).await?;
            for b in &r.batches {
                let col = |i: usize| b.column(i).as_any().downcast_ref::<StringArray>().cloned();
                let (Some(a), Some(n), Some(k)) = (col(0), col(1), col(2)) else { continue };
                for i in 0..b.num_rows() {
                    set.insert((a.value(i).to_owned(), n.value(i).to_owned(), k.value(i).to_owned()));
                }
            }
        }
        Ok(std::mem::take(&mut set).into_iter().collect())
    }

    /// Service names, sorted.
    pub async fn services(&self) -> Result<Vec<String>> {
        let ops = self.operations_all().await?;
        let set: BTreeSet<String> = ops.into_iter().map(|o| o.0).collect();
        Ok(set.into_iter().collect())
    }

    /// (span name, kind) of a service (all services when `None`), sorted.
    pub async fn operations(&self, service: Option<&str>) -> Result<Vec<(String, SpanKind)>> {
        let ops = self.operations_all().await?;
        let mut m: BTreeMap<(String, &'static str), SpanKind> = BTreeMap::new();
        for (s, n, k) in ops {
            if service.is_none_or(|want| want == s) {
                let kind = SpanKind::parse(&k).unwrap_or_default();
                m.insert((n, kind.as_str()), kind);
            }
        }
        Ok(m.into_iter().map(|((n, _), k)| (n, k)).collect())
    }

    /// Spans (without events and links) that started in `[from_ns, to_ns]`, delivered one
    /// trace at a time (`f` gets all of a trace's spans in the window). Memory stays bounded by
    /// DataFusion's sort (which spills).
    pub async fn for_each_trace_in_window(
        &self,
        from_ns: u64,
        to_ns: u64,
        mut f: impl FnMut(&[Span]) + Send,
    ) -> Result<u64> {
        let sql = format!(
            "SELECT * FROM spans WHERE start_time >= to_timestamp_nanos({}) AND start_time <= to_timestamp_nanos({}) ORDER BY trace_id",
            from_ns.min(i64::MAX as u64),
            to_ns.min(i64::MAX as u64)
        );
        let ctx = self.session()?;
        let df = ctx.sql(&sql).await.map_err(|e| StoreError::Query(e.to_string()))?;
        let mut stream = df.execute_stream().await.map_err(|e| StoreError::Query(e.to_string()))?;
        let mut pending: Vec<Span> = Vec::new();
        let mut traces = 0u64;
        while let Some(b) = stream.next().await {
            let b = b.map_err(|e| StoreError::Query(e.to_string()))?;
            for s in batches_to_spans(std::slice::from_ref(&b), &[], &[])? {
                if pending.last().is_some_and(|p| p.trace_id != s.trace_id) {
                    f(&pending);
                    traces += 1;
                    pending.clear();
                }
                pending.push(s);
            }
        }
        if !pending.is_empty() {
            f(&pending);
            traces += 1;
        }
        Ok(traces)
    }
}

/// The SQL [`Store::search_trace_ids`] runs.
pub fn search_sql(q: &TraceQuery) -> String {
    let mut conds: Vec<String> = Vec::new();
    if let Some(s) = &q.service {
        conds.push(format!("service_name = {}", sql_str(s)));
    }
    if let Some(n) = &q.span_name {
        conds.push(format!("name = {}", sql_str(n)));
    }
    if let Some(k) = q.span_kind {
        conds.push(format!("kind = {}", sql_str(k.as_str())));
    }
    for (k, v) in &q.attributes {
        let key = sql_str(k);
        match v {
            Some(v) => {
                let val = sql_str(v);
                let mut c = format!("(attributes[{key}] = {val} OR resource_attributes[{key}] = {val}");
                if k == "error" && (v == "true" || v.is_empty()) {
                    c.push_str(" OR status_code = 'error'");
                }
                c.push(')');
                conds.push(c);
            }
            None => {
                let mut c = format!(
                    "(attributes[{key}] IS NOT NULL OR resource_attributes[{key}] IS NOT NULL OR EXISTS (SELECT 1 FROM span_events e WHERE e.trace_id = spans.trace_id AND e.span_id = spans.span_id AND e.name = {key})"
                );
                if k == "error" {
                    c.push_str(" OR status_code = 'error'");
                }
                c.push(')');
                conds.push(c);
            }
        }
    }
    if let Some(d) = q.min_duration_ns {
        conds.push(format!("duration_ns >= {}", d.min(i64::MAX as u64)));
    }
    if let Some(d) = q.max_duration_ns {
        conds.push(format!("duration_ns <= {}", d.min(i64::MAX as u64)));
    }
    if let Some(t) = q.start_min_ns {
        conds.push(format!("start_time >= to_timestamp_nanos({})", t.min(i64::MAX as u64)));
    }
    if let Some(t) = q.start_max_ns {
        conds.push(format!("start_time <= to_timestamp_nanos({})", t.min(i64::MAX as u64)));
    }
    let filter = if conds.is_empty() { String::new() } else { format!(" WHERE {}", conds.join(" AND ")) };
    format!(
        "SELECT trace_id, max(start_time) AS latest FROM spans{filter} GROUP BY trace_id ORDER BY latest DESC LIMIT {}",
        q.limit.max(1)
    )
}

impl Inner {
    fn check_writable(&self, spans: u64) -> Result<()> {
        if self.cfg.read_only {
            return Err(StoreError::ReadOnly);
        }
        if let Some(p) = self.poisoned.lock().as_ref() {
            return Err(StoreError::Poisoned(p.clone()));
        }
        let buffered = self.state.read().buffered_bytes();
        if buffered >= self.cfg.max_buffer_bytes {
            self.metrics.appends_overloaded.fetch_add(1, Ordering::Relaxed);
            self.metrics.spans_overloaded.fetch_add(spans, Ordering::Relaxed);
            self.wake_background();
            return Err(StoreError::Overloaded {
                buffered_bytes: buffered,
                limit_bytes: self.cfg.max_buffer_bytes,
            });
        }
        Ok(())
    }

    fn poison(&self, e: StoreError) -> StoreError {
        let mut poisoned = self.poisoned.lock();
        if poisoned.is_none() {
            let msg = e.to_string();
            tracing::error!(error = %msg, "WAL write failed; the store refuses further writes");
            *poisoned = Some(msg);
        }
        e
    }

    fn commit(&self, payload: &[u8], push: impl FnOnce(&mut MemTable) -> Result<()>) -> Result<()> {
        let (file, end, freeze) = {
            let mut wal = self.wal.lock();
            let w = wal.as_mut().ok_or(StoreError::ReadOnly)?;
            let (file, end) = w.append(payload, &self.sync).map_err(|e| self.poison(e))?;
            let mut st = self.state.write();
            push(&mut st.active)?;
            let freeze = st.active.bytes >= self.cfg.flush_bytes;
            if freeze {
                self.freeze_locked(w, &mut st).map_err(|e| self.poison(e))?;
            }
            (file, end, freeze)
        };
        if freeze {
            self.wake_background();
        }
        if self.cfg.fsync == FsyncPolicy::Always {
            self.sync.sync_to(&file, end).map_err(|e| self.poison(e))?;
        }
        self.metrics.appends.fetch_add(1, Ordering::Relaxed);
        self.metrics.wal_bytes_written.fetch_add(payload.len() as u64 + 8, Ordering::Relaxed);
        Ok(())
    }

    fn freeze_locked(&self, w: &mut WalWriter, st: &mut State) -> Result<()> {
        if st.active.is_empty() {
            return Ok(());
        }
        let next = st.active_wal + 1;
        w.rotate(next, self.cfg.fsync, &self.sync)?;
        let mem = std::mem::take(&mut st.active);
        st.frozen.push_back(Frozen { mem: Arc::new(mem), wal_upto: st.active_wal });
        st.active_wal = next;
        Ok(())
    }

    fn freeze(&self) -> Result<()> {
        let mut wal = self.wal.lock();
        let Some(w) = wal.as_mut() else { return Ok(()) };
        let mut st = self.state.write();
        self.freeze_locked(w, &mut st)
    }

    fn wake_background(&self) {
        let (m, cv) = &self.wake;
        *m.lock() = true;
        cv.notify_all();
    }

    /// Flushes every frozen buffer, oldest first.
    fn flush_frozen(&self) -> Result<()> {
        let _m = self.maint.lock();
        loop {
            let next = {
                let st = self.state.read();
                st.frozen.front().map(|f| (f.mem.clone(), f.wal_upto))
            };
            let Some((mem, wal_upto)) = next else { return Ok(()) };
            let started = Instant::now();
            let id = self.manifest.lock().next_segment_id;
            let meta = segment::write_segment(
                &self.seg_dir,
                id,
                0,
                &mem.tables,
                &mem.resources.batch()?,
                (mem.operations_sorted(), mem.operations_complete),
                &self.cfg.write,
            )?;
            wal::fsync_dir(&self.seg_dir)?;
            let seg = Arc::new(Segment::open(&self.seg_dir, meta.clone())?);
            {
                let mut m = self.manifest.lock();
                let mut next_m = m.clone();
                next_m.segments.push(meta.clone());
                next_m.next_segment_id = id + 1;
                next_m.wal_checkpoint = next_m.wal_checkpoint.max(wal_upto);
                manifest::store(&self.dir, &next_m)?;
                *m = next_m;
            }
            {
                let mut st = self.state.write();
                st.frozen.pop_front();
                st.segments.push(seg);
            }
            for (wid, path) in wal::list_wal_files(&self.wal_dir)? {
                if wid <= wal_upto
                    && let Err(e) = std::fs::remove_file(&path)
                {
                    tracing::warn!(file = %path.display(), error = %e, "could not delete flushed WAL file");
                }
            }
            self.metrics.flushes.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                segment = id,
                spans = meta.rows(schema::SPANS),
                bytes = meta.bytes(),
                ms = started.elapsed().as_millis() as u64,
                "flushed segment"
            );
        }
    }

    /// Publishes a manifest without `remove` and with `add`, and swaps the live segments.
    fn replace_segments(&self, remove: &[u64], add: Option<(SegmentMeta, Arc<Segment>)>) -> Result<()> {
        {
            let mut m = self.manifest.lock();
            let mut next_m = m.clone();
            next_m.segments.retain(|s| !remove.contains(&s.id));
            if let Some((meta, _)) = &add {
                next_m.segments.push(meta.clone());
                next_m.segments.sort_by_key(|s| s.id);
                next_m.next_segment_id = next_m.next_segment_id.max(meta.id + 1);
            }
            manifest::store(&self.dir, &next_m)?;
            *m = next_m;
        }
        let mut st = self.state.write();
        let mut kept = Vec::with_capacity(st.segments.len());
        for s in st.segments.drain(..) {
            if remove.contains(&s.meta.id) {
                s.retire();
            } else {
                kept.push(s);
            }
        }
        if let Some((_, seg)) = add {
            kept.push(seg);
            kept.sort_by_key(|s| s.meta.id);
        }
        st.segments = kept;
        Ok(())
    }

    fn retention(&self, now_ns: u64) -> Result<usize> {
        let _m = self.maint.lock();
        let segs: Vec<SegmentMeta> = self.state.read().segments.iter().map(|s| s.meta.clone()).collect();
        let mut victims: Vec<u64> = Vec::new();
        if let Some(age) = self.cfg.retention_age {
            let cutoff = now_ns.saturating_sub(age.as_nanos().min(u64::MAX as u128) as u64);
            for s in &segs {
                if s.written_ns() < cutoff {
                    victims.push(s.id);
                }
            }
            self.metrics.retired_by_age.fetch_add(victims.len() as u64, Ordering::Relaxed);
        }
        if let Some(limit) = self.cfg.retention_bytes {
            let mut rest: Vec<&SegmentMeta> = segs.iter().filter(|s| !victims.contains(&s.id)).collect();
            rest.sort_by_key(|s| (s.written_ns(), s.id));
            let mut total: u64 = rest.iter().map(|s| s.bytes()).sum();
            let mut by_size = 0;
            for s in rest {
                if total <= limit {
                    break;
                }
                total -= s.bytes();
                victims.push(s.id);
                by_size += 1;
            }
            self.metrics.retired_by_size.fetch_add(by_size, Ordering::Relaxed);
        }
        if victims.is_empty() {
            return Ok(0);
        }
        tracing::info!(segments = victims.len(), "retention deletes segments");
        self.replace_segments(&victims, None)?;
        Ok(victims.len())
    }

    /// Merges the oldest run of small consecutive segments. Returns true when it did.
    fn compact_once(&self) -> Result<bool> {
        let _m = self.maint.lock();
        let segs: Vec<Arc<Segment>> = self.state.read().segments.clone();
        // The oldest run of consecutive small segments, up to the target size.
        let mut run: Vec<Arc<Segment>> = Vec::new();
        let mut size = 0u64;
        let mut chosen: Option<Vec<Arc<Segment>>> = None;
        for s in segs {
            let small = s.meta.mem_bytes < self.cfg.compaction_small_bytes;
            if small && size + s.meta.mem_bytes <= self.cfg.compaction_target_bytes {
                size += s.meta.mem_bytes;
                run.push(s);
                continue;
            }
            if run.len() >= self.cfg.compaction_min_inputs {
                chosen = Some(std::mem::take(&mut run));
                break;
            }
            run.clear();
            size = 0;
            if small {
                size = s.meta.mem_bytes;
                run.push(s);
            }
        }
        if chosen.is_none() && run.len() >= self.cfg.compaction_min_inputs.max(2) {
            chosen = Some(run);
        }
        let Some(best) = chosen else { return Ok(false) };
        let mut tables: [Vec<RecordBatch>; 4] = Default::default();
        let mut ops: BTreeSet<(String, String, String)> = BTreeSet::new();
        let mut complete = true;
        let mut level = 0;
        for s in &best {
            for (t, path, _) in s.paths() {
                let Some(ti) = schema::TABLE_NAMES.iter().position(|n| *n == t) else { continue };
                let rows = segment::read_all(&path)?;
                tables[ti].extend(if ti == memtable::T_SPANS { s.spans_rows(rows)? } else { rows });
            }
            ops.extend(s.meta.operations.iter().cloned());
            complete &= s.meta.operations_complete;
            level = level.max(s.meta.level);
        }
        if ops.len() > memtable::MAX_OPERATIONS {
            complete = false;
            ops.clear();
        }
        // The inputs' distinct resources, numbered again for the merged segment.
        let logical = std::mem::take(&mut tables[memtable::T_SPANS]);
        let (spans, resources) = resources::normalize(&logical.iter().collect::<Vec<_>>())?;
        drop(logical);
        tables[memtable::T_SPANS] = spans;
        let id = {
            let mut m = self.manifest.lock();
            let id = m.next_segment_id;
            m.next_segment_id += 1;
            id
        };
        let mut meta = segment::write_segment(
            &self.seg_dir,
            id,
            level + 1,
            &tables,
            &resources,
            (ops.into_iter().collect(), complete),
            &self.cfg.write,
        )?;
        // Its spans are as old (to retention) as when they were first written.
        meta.spans_written_ns = best.iter().map(|s| s.meta.written_ns()).max().unwrap_or(meta.created_ns);
        wal::fsync_dir(&self.seg_dir)?;
        let seg = Arc::new(Segment::open(&self.seg_dir, meta.clone())?);
        let inputs: Vec<u64> = best.iter().map(|s| s.meta.id).collect();
        tracing::info!(inputs = ?inputs, output = id, "compacted segments");
        drop(best);
        self.replace_segments(&inputs, Some((meta, seg)))?;
        self.metrics.compactions.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

    fn background(&self) {
        let mut last_maint = Instant::now();
        let mut backoff = Duration::from_millis(0);
        loop {
            {
                let (m, cv) = &self.wake;
                let mut woken = m.lock();
                if !*woken {
                    cv.wait_for(&mut woken, Duration::from_millis(500).max(backoff));
                }
                *woken = false;
            }
            if self.shutdown.load(Ordering::Acquire) {
                return;
            }
            let old = {
                let st = self.state.read();
                st.active.first_append.is_some_and(|t| t.elapsed() >= self.cfg.flush_interval)
            };
            if old && let Err(e) = self.freeze() {
                tracing::error!(error = %e, "freezing the buffer failed");
            }
            match self.flush_frozen() {
                Ok(()) => backoff = Duration::ZERO,
                Err(e) => {
                    self.metrics.flush_errors.fetch_add(1, Ordering::Relaxed);
                    backoff = (backoff * 2).clamp(Duration::from_millis(500), Duration::from_secs(30));
                    tracing::error!(error = %e, retry_in_ms = backoff.as_millis() as u64, "flush failed; will retry");
                }
            }
            if last_maint.elapsed() >= self.cfg.maintenance_interval {
                last_maint = Instant::now();
                if let Err(e) = self.retention(weft_model::time::now_unix_nanos()) {
                    tracing::error!(error = %e, "retention failed");
                }
                match self.compact_once() {
                    Ok(true) => self.wake_background(),
                    Ok(false) => {}
                    Err(e) => tracing::error!(error = %e, "compaction failed"),
                }
            }
        }
    }

    fn syncer(&self, period: Duration) {
        while !self.shutdown.load(Ordering::Acquire) {
            std::thread::sleep(period);
            let f = match self.wal.lock().as_ref() {
                Some(w) => w.current().clone(),
                None => return,
            };
            if let Err(e) = self.sync.sync_current(&f) {
                self.poison(e);
            }
        }
    }
}
