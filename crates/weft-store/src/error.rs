//! Errors of the store.

use std::path::PathBuf;

/// Everything that can go wrong in the store. Messages name the file (and offset) involved.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// An I/O error on a named file or directory.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done (`open`, `write`, `fsync`, `rename`, ...).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The data directory is in use by another writer.
    #[error("data directory {0} is locked by another weft process (its LOCK file is held)")]
    Locked(PathBuf),
    /// The in-memory buffer is full and flushing cannot keep up: retry later.
    #[error("store overloaded: {buffered_bytes} bytes buffered, limit {limit_bytes}; retry later")]
    Overloaded {
        /// Bytes held in memory (active + frozen buffers).
        buffered_bytes: usize,
        /// The configured limit.
        limit_bytes: usize,
    },
    /// A WAL write or fsync failed earlier (e.g. a full disk): the store refuses writes to
    /// avoid silent loss until its WAL goes on in a new file.
    #[error("store is read-only after a write failure: {0}")]
    Poisoned(String),
    /// One append is larger than the store takes at once: refused alone, before anything was
    /// written (later appends are unaffected).
    #[error(
        "append of {bytes} bytes exceeds the limit of {limit} bytes per append ({what}); send smaller batches"
    )]
    AppendTooLarge {
        /// The append's size.
        bytes: usize,
        /// The limit it exceeds.
        limit: usize,
        /// Which limit: the per-append bound on its in-memory (Arrow) size, or the WAL record limit.
        what: &'static str,
    },
    /// The store was opened read-only.
    #[error("store is opened read-only")]
    ReadOnly,
    /// The manifest is unreadable.
    #[error("manifest {path}: {reason}")]
    Manifest {
        /// The manifest file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A record in the write-ahead log could not be decoded.
    #[error("WAL {path} at offset {offset}: {reason}")]
    WalRecord {
        /// The WAL file.
        path: PathBuf,
        /// Byte offset of the record.
        offset: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// Stored data could not be turned back into spans (a column is missing or mistyped).
    #[error("stored data: {0}")]
    Decode(String),
    /// A query was invalid or failed.
    #[error("query: {0}")]
    Query(String),
    /// Arrow error.
    #[error("arrow: {0}")]
    Arrow(#[from] datafusion::arrow::error::ArrowError),
    /// Parquet error (with the file).
    #[error("parquet {path}: {source}")]
    Parquet {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: datafusion::parquet::errors::ParquetError,
    },
    /// A request to the segments' bucket failed (names the object: `s3://bucket/key`).
    #[error("bucket: {op} {object}: {reason}")]
    Bucket {
        /// What was done: read, write, upload, delete.
        op: &'static str,
        /// The object.
        object: String,
        /// What the bucket (or the network) said.
        reason: String,
    },
    /// The configuration cannot be used (names the setting).
    #[error("configuration: {0}")]
    Config(String),
    /// DataFusion error.
    #[error("{0}")]
    DataFusion(#[from] datafusion::error::DataFusionError),
    /// A result table's name, or rows that do not fit the table's columns.
    #[error("{0}")]
    ResultTable(String),
}

/// Result alias.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Helper: wraps an `io::Error` with the operation and path.
pub(crate) fn io_err(
    op: &'static str,
    path: impl Into<PathBuf>,
) -> impl FnOnce(std::io::Error) -> StoreError {
    let path = path.into();
    move |source| StoreError::Io { op, path, source }
}
