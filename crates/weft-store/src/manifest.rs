//! The manifest: which segments are live and how far the WAL is covered by them.
//!
//! `MANIFEST.json` is replaced atomically (write `MANIFEST.json.tmp`, fsync it, rename over
//! the old one, fsync the directory), so after a crash it is either the old or the new
//! version, never a mix. Segment files not named by the manifest are leftovers of an
//! interrupted flush or compaction and are deleted on open.
//!
//! A new store writes its (empty) manifest when it is first opened, before any segment can
//! exist, so a missing manifest next to segment files means a lost one: [`open`] then refuses
//! to open the store, naming the files, rather than start empty and delete them as leftovers.
//! (Rebuilding it from the files is not reliable: the WAL checkpoint is lost, and the inputs
//! and output of an interrupted compaction cannot be told apart, so spans would come back
//! twice.)

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError, io_err};

/// Manifest file name.
pub const MANIFEST: &str = "MANIFEST.json";
/// 2: a segment may have a `span_resources` file, and its spans file then carries
/// `resource_ref` instead of the resource columns (a weft that reads only 1 would misread it).
const FORMAT_VERSION: u32 = 2;
/// Oldest version read (1: every spans file has its resource columns).
const OLDEST_VERSION: u32 = 1;

/// The manifest.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    /// Format version (2; 1 is read and becomes 2 with the next manifest written).
    pub version: u32,
    /// Id for the next segment (ids are never reused, so cached file metadata never goes stale).
    pub next_segment_id: u64,
    /// Every WAL file with an id ≤ this is contained in the segments.
    pub wal_checkpoint: u64,
    /// Live segments, oldest first.
    pub segments: Vec<SegmentMeta>,
}

impl Default for Manifest {
    fn default() -> Self {
        Manifest { version: FORMAT_VERSION, next_segment_id: 1, wal_checkpoint: 0, segments: Vec::new() }
    }
}

/// One segment: a Parquet file per non-empty table, written together.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SegmentMeta {
    /// Segment id.
    pub id: u64,
    /// 0 = written by a flush; n > 0 = written by compaction of level n-1 (or lower) segments.
    pub level: u32,
    /// When it was written, ns since the epoch.
    pub created_ns: u64,
    /// When weft wrote its spans, ns since the epoch: the flush that wrote them, or for a
    /// compacted segment its newest input's. Retention by age goes by this, never by the
    /// spans' own timestamps (a skewed clock would have them deleted as they arrive). 0 in
    /// manifests written before it existed ([`SegmentMeta::written_ns`] then uses
    /// `created_ns`).
    #[serde(default)]
    pub spans_written_ns: u64,
    /// Its files.
    pub files: Vec<FileMeta>,
    /// Rough in-memory (Arrow) size of its contents, for compaction planning.
    pub mem_bytes: u64,
    /// Distinct (service, span name, span kind) in its spans; capped (see `operations_complete`).
    #[serde(default)]
    pub operations: Vec<(String, String, String)>,
    /// False when there were too many operations to list.
    #[serde(default = "yes")]
    pub operations_complete: bool,
}

fn yes() -> bool {
    true
}

/// One Parquet file of a segment.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FileMeta {
    /// Table (`spans`, `span_events`, `span_links`, `events`).
    pub table: String,
    /// File name inside `segments/`.
    pub file: String,
    /// Rows.
    pub rows: u64,
    /// Bytes on disk.
    pub bytes: u64,
    /// Smallest time in the file (span start, event time), ns since the epoch.
    pub min_time_ns: u64,
    /// Largest time in the file.
    pub max_time_ns: u64,
}

impl SegmentMeta {
    /// The file of `table`, if the segment has one.
    pub fn file(&self, table: &str) -> Option<&FileMeta> {
        self.files.iter().find(|f| f.table == table)
    }
    /// Bytes on disk of all files.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.bytes).sum()
    }
    /// When weft wrote its spans (`spans_written_ns`, or `created_ns` in older manifests).
    pub fn written_ns(&self) -> u64 {
        if self.spans_written_ns > 0 { self.spans_written_ns } else { self.created_ns }
    }
    /// Newest time in any file.
    pub fn max_time_ns(&self) -> u64 {
        self.files.iter().map(|f| f.max_time_ns).max().unwrap_or(0)
    }
    /// Rows of `table`.
    pub fn rows(&self, table: &str) -> u64 {
        self.file(table).map(|f| f.rows).unwrap_or(0)
    }
}

/// Reads the manifest of `dir` (`None` when there is none).
pub fn load(dir: &Path) -> Result<Option<Manifest>> {
    let path = dir.join(MANIFEST);
    let text = match std::fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err("read", &path)(e)),
    };
    parse(&text, path).map(Some)
}

/// Parses a manifest's text (`path` names where it came from in errors).
pub(crate) fn parse(text: &[u8], path: PathBuf) -> Result<Manifest> {
    let mut m: Manifest = serde_json::from_slice(text)
        .map_err(|e| StoreError::Manifest { path: path.clone(), reason: e.to_string() })?;
    if !(OLDEST_VERSION..=FORMAT_VERSION).contains(&m.version) {
        return Err(StoreError::Manifest {
            path,
            reason: format!(
                "format version {} (this weft reads {OLDEST_VERSION} to {FORMAT_VERSION})",
                m.version
            ),
        });
    }
    // What this weft writes next may be in the newer layout.
    m.version = FORMAT_VERSION;
    Ok(m)
}

/// The manifest of the store in `dir` being opened, its segment files in `seg_dir`. Without a
/// manifest: a new store (nothing in `seg_dir`) gets an empty one, written unless
/// `read_only`; with segment files present, opening is refused with an error naming the
/// directory and the files (nothing is deleted).
pub fn open(dir: &Path, seg_dir: &Path, read_only: bool) -> Result<Manifest> {
    if let Some(m) = load(dir)? {
        return Ok(m);
    }
    let mut present: Vec<String> = match std::fs::read_dir(seg_dir) {
        Ok(rd) => rd
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect::<std::io::Result<_>>()
            .map_err(io_err("read directory", seg_dir))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(io_err("read directory", seg_dir)(e)),
    };
    if present.is_empty() {
        let m = Manifest::default();
        if !read_only {
            store(dir, &m)?;
        }
        return Ok(m);
    }
    present.sort();
    const NAMED: usize = 10;
    let more = present.len().saturating_sub(NAMED);
    let mut names = present[..present.len().min(NAMED)].join(", ");
    if more > 0 {
        names.push_str(&format!(" and {more} more"));
    }
    let path = dir.join(MANIFEST);
    let reason = format!(
        "missing, but {} holds {} file(s): {names}. Refusing to open rather than start empty and \
         delete them; restore {MANIFEST} (from a backup), or move those files out of the \
         directory to start without them",
        seg_dir.display(),
        present.len(),
    );
    tracing::error!(manifest = %path.display(), files = present.len(), "{reason}");
    Err(StoreError::Manifest { path, reason })
}

/// Replaces the manifest of `dir` atomically and durably.
pub fn store(dir: &Path, m: &Manifest) -> Result<()> {
    let path: PathBuf = dir.join(MANIFEST);
    let tmp = dir.join(format!("{MANIFEST}.tmp"));
    let text = serde_json::to_vec_pretty(m)
        .map_err(|e| StoreError::Manifest { path: path.clone(), reason: e.to_string() })?;
    let mut f = File::create(&tmp).map_err(io_err("create", &tmp))?;
    f.write_all(&text).map_err(io_err("write", &tmp))?;
    f.sync_all().map_err(io_err("fsync", &tmp))?;
    drop(f);
    std::fs::rename(&tmp, &path).map_err(io_err("rename", &tmp))?;
    crate::wal::fsync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_missing() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load(dir.path()).unwrap(), None);
        let m = Manifest {
            next_segment_id: 3,
            wal_checkpoint: 9,
            segments: vec![SegmentMeta {
                id: 2,
                level: 0,
                created_ns: 5,
                spans_written_ns: 4,
                files: vec![FileMeta {
                    table: "spans".into(),
                    file: "seg-2-spans.parquet".into(),
                    rows: 10,
                    bytes: 100,
                    min_time_ns: 1,
                    max_time_ns: 2,
                }],
                mem_bytes: 1000,
                operations: vec![("a".into(), "b".into(), "server".into())],
                operations_complete: true,
            }],
            ..Manifest::default()
        };
        store(dir.path(), &m).unwrap();
        assert_eq!(load(dir.path()).unwrap(), Some(m));
        assert!(!dir.path().join("MANIFEST.json.tmp").exists());
    }

    #[test]
    fn version_1_is_read_and_newer_versions_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = Manifest { next_segment_id: 4, ..Manifest::default() };
        m.version = 1;
        store(dir.path(), &m).unwrap();
        let got = load(dir.path()).unwrap().unwrap();
        assert_eq!((got.version, got.next_segment_id), (FORMAT_VERSION, 4));
        m.version = FORMAT_VERSION + 1;
        store(dir.path(), &m).unwrap();
        let e = load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("format version 3"), "{e}");
    }

    #[test]
    fn garbage_manifest_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(MANIFEST), b"{not json").unwrap();
        let e = load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("MANIFEST.json"), "{e}");
    }
}
