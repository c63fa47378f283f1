//! Errors of kernel capture.

use std::path::PathBuf;

/// Failures of kernel capture as a whole (malformed ring records are counted, not errors).
#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    /// `perf_event_open` refused an event.
    #[error("perf_event_open({what}, pid {pid}, cpu {cpu}): {source}{hint}")]
    Open {
        /// The event (`sched:sched_switch`, `uprobe /bin/x:main`, ...).
        what: String,
        /// pid argument (-1 = every task; a cgroup fd with the cgroup flag).
        pid: i32,
        /// cpu argument (-1 = any CPU).
        cpu: i32,
        /// The OS error.
        source: std::io::Error,
        /// A hint on how to fix it (permissions, paranoid level).
        hint: String,
    },
    /// An ioctl or mmap on an event fd failed.
    #[error("{op} on {what}: {source}")]
    Sys {
        /// What was done (`mmap ring`, `PERF_EVENT_IOC_SET_OUTPUT`, ...).
        op: &'static str,
        /// The event.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// tracefs is missing or a tracepoint does not exist.
    #[error("{path}: {msg}")]
    Tracefs {
        /// The tracefs path looked at.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// A tracepoint's `format` file could not be parsed.
    #[error("{path}: line {line}: {msg}")]
    Format {
        /// The format file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        msg: String,
    },
    /// An ELF binary could not be used for a uprobe.
    #[error("{path}: {msg}")]
    Elf {
        /// The binary.
        path: PathBuf,
        /// What is wrong (no such function, no loadable segment, ...).
        msg: String,
    },
    /// A file (EXIST records, /proc, sysfs) could not be read or written.
    #[error("{path}: {op}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// A configuration that cannot work (bad event name, no target, ...).
    #[error("{0}")]
    Config(String),
}

impl PerfError {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, op: &'static str, source: std::io::Error) -> Self {
        PerfError::Io { path: path.into(), op, source }
    }
}
