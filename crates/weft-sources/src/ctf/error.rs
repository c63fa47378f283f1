//! Errors of the CTF reader. Every error names its input: the metadata file with line:column
//! (or the byte offset of a bad metadata packet), or the stream file with the byte offset of the
//! packet and of the field being decoded.

use std::path::PathBuf;

/// A CTF reading error.
#[derive(Debug, thiserror::Error)]
pub enum CtfError {
    /// Opening or reading a file failed.
    #[error("{path}: {op}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done (`open`, `read`, ...).
        op: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The TSDL text is malformed or uses something this reader does not support.
    #[error("{path}:{line}:{col}: {msg}")]
    Metadata {
        /// The metadata file.
        path: PathBuf,
        /// 1-based line (0 when the problem is not tied to one place, e.g. a missing block).
        line: u32,
        /// 1-based column.
        col: u32,
        /// What is wrong.
        msg: String,
    },
    /// A metadata packet (the packetized form, magic 0x75D11D57) is malformed.
    #[error("{path}: metadata packet at byte {offset}: {msg}")]
    MetadataPacket {
        /// The metadata file.
        path: PathBuf,
        /// Byte offset of the packet.
        offset: u64,
        /// What is wrong.
        msg: String,
    },
    /// A stream file is corrupt or truncated.
    #[error("{path}: packet at byte {packet}: byte {offset}{bit}: {msg}", bit = fmt_bit(*.bit))]
    Stream {
        /// The stream file.
        path: PathBuf,
        /// Byte offset of the packet in the file.
        packet: u64,
        /// Byte offset (in the file) where decoding failed.
        offset: u64,
        /// Bit within that byte (0 when byte aligned).
        bit: u8,
        /// What is wrong (names the field).
        msg: String,
    },
    /// The directory does not hold a CTF trace, or a file of it is not what it should be.
    #[error("{path}: {msg}")]
    Layout {
        /// The directory or file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
}

fn fmt_bit(bit: u8) -> String {
    if bit == 0 { String::new() } else { format!(" bit {bit}") }
}

impl CtfError {
    /// An I/O error.
    pub fn io(path: impl Into<PathBuf>, op: &'static str, source: std::io::Error) -> Self {
        CtfError::Io { path: path.into(), op, source }
    }
    /// The byte offset in the stream file for [`CtfError::Stream`].
    pub fn stream_offset(&self) -> Option<u64> {
        match self {
            CtfError::Stream { offset, .. } => Some(*offset),
            _ => None,
        }
    }
}

impl From<CtfError> for crate::SourceError {
    fn from(e: CtfError) -> Self {
        // SourceError prints "{path}: {msg}": keep the location, drop the repeated path.
        match e {
            CtfError::Io { path, op, source } => crate::SourceError::Io { path, op, source },
            CtfError::Metadata { path, line, col, msg } => {
                crate::SourceError::invalid(path, format!("line {line}, column {col}: {msg}"))
            }
            CtfError::MetadataPacket { path, offset, msg } => {
                crate::SourceError::invalid(path, format!("metadata packet at byte {offset}: {msg}"))
            }
            CtfError::Stream { path, packet, offset, bit, msg } => crate::SourceError::invalid(
                path,
                format!("packet at byte {packet}: byte {offset}{}: {msg}", fmt_bit(bit)),
            ),
            CtfError::Layout { path, msg } => crate::SourceError::invalid(path, msg),
        }
    }
}

/// A problem at a place in the TSDL text (wrapped into [`CtfError::Metadata`] with the path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MetaErr {
    pub line: u32,
    pub col: u32,
    pub msg: String,
}

impl MetaErr {
    pub fn new(line: u32, col: u32, msg: impl Into<String>) -> Self {
        MetaErr { line, col, msg: msg.into() }
    }
    pub fn with_path(self, path: impl Into<PathBuf>) -> CtfError {
        CtfError::Metadata { path: path.into(), line: self.line, col: self.col, msg: self.msg }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_place() {
        let e =
            CtfError::Stream { path: "t/ch_0".into(), packet: 4096, offset: 4180, bit: 3, msg: "bad".into() };
        assert_eq!(e.to_string(), "t/ch_0: packet at byte 4096: byte 4180 bit 3: bad");
        assert_eq!(
            crate::SourceError::from(e).to_string(),
            "t/ch_0: packet at byte 4096: byte 4180 bit 3: bad"
        );
        let m = CtfError::Metadata { path: "t/metadata".into(), line: 3, col: 7, msg: "x".into() };
        assert_eq!(m.to_string(), "t/metadata:3:7: x");
        assert_eq!(crate::SourceError::from(m).to_string(), "t/metadata: line 3, column 7: x");
    }
}
