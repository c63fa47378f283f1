//! The crate's error type.
//!
//! Malformed *records* are not errors: parsers reject them and the [`crate::reject`]
//! accounting counts them. A [`SourceError`] means a source cannot go on at all (the file is
//! unreadable, a symbol table cannot be loaded, ...); its message names the input.

use std::path::PathBuf;

/// Errors of sources, readers and symbol loaders.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// Opening or reading an input failed.
    #[error("{path}: {op}: {source}")]
    Io {
        /// The input (file, FIFO, symbol table).
        path: PathBuf,
        /// What was being done (`open`, `read`, ...).
        op: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// An input is structurally unusable as a whole (e.g. an ELF file that is not ELF).
    #[error("{path}: {msg}")]
    Invalid {
        /// The input.
        path: PathBuf,
        /// What is wrong, naming the field/offset where possible.
        msg: String,
    },
}

impl SourceError {
    /// An I/O error on `path` while doing `op`.
    pub fn io(path: impl Into<PathBuf>, op: &'static str, source: std::io::Error) -> Self {
        SourceError::Io { path: path.into(), op, source }
    }
    /// A structurally invalid input.
    pub fn invalid(path: impl Into<PathBuf>, msg: impl Into<String>) -> Self {
        SourceError::Invalid { path: path.into(), msg: msg.into() }
    }
}
