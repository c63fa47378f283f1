//! How a store is opened: [`StoreConfig`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::segment::WriteOptions;
use crate::wal::FsyncPolicy;

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
    /// Largest append (its spans or events in memory, Arrow bytes) taken at once; a larger one
    /// is refused alone with `AppendTooLarge` before anything is written. A small request whose
    /// spans repeat a large scope or resource expands far beyond its wire size.
    pub max_append_bytes: usize,
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
    /// After a failed WAL write or fsync (a full disk), how often the background thread tries
    /// to go on in a new WAL file; appends are refused until it succeeds.
    pub wal_retry_interval: Duration,
    /// How often the background thread applies retention and compaction.
    pub maintenance_interval: Duration,
    /// Parquet writing options.
    pub write: WriteOptions,
    /// Memory DataFusion may use per query before spilling or failing.
    pub query_memory_bytes: usize,
    /// Open without writing anything: no lock, no WAL truncation, no flushes; appends fail.
    /// With a `bucket`: a reader over every collector's manifest under the bucket's URL (its
    /// own and one level down), the data directory only a cache of their segment files.
    pub read_only: bool,
    /// A read-only store over a bucket re-reads the manifests this often (new segments are
    /// added, those no manifest names any more dropped).
    pub refresh_interval: Duration,
    /// Creates the WAL's files: the real file system ([`crate::wal::OsFiles`]) unless a test
    /// injects write or fsync failures.
    pub wal_files: Arc<dyn crate::wal::WalFiles>,
    /// Keep segments and manifests in this bucket (the data directory keeps the WAL and a
    /// copy of the live segments); `None`: the data directory only.
    #[cfg(feature = "s3")]
    pub bucket: Option<crate::bucket::BucketConfig>,
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
            max_append_bytes: 128 << 20,
            retention_age: None,
            retention_bytes: None,
            compaction_small_bytes: 16 << 20,
            compaction_min_inputs: 4,
            compaction_target_bytes: 64 << 20,
            wal_retry_interval: Duration::from_secs(1),
            maintenance_interval: Duration::from_secs(10),
            write: WriteOptions::default(),
            query_memory_bytes: 1 << 30,
            read_only: false,
            refresh_interval: Duration::from_secs(2),
            wal_files: Arc::new(crate::wal::OsFiles),
            #[cfg(feature = "s3")]
            bucket: None,
        }
    }
}
