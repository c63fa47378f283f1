//! Trace directories: finding CTF traces (a `metadata` file and its stream files) under a
//! directory — LTTng-UST per-UID (`ust/uid/UID/64-bit/`) and per-PID (`ust/pid/NAME-PID-DATE/`)
//! layouts, LTTng kernel (`kernel/`), session rotations — and reading all their streams
//! merged in time order.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use weft_model::{Event, SourceId};

use super::compile::{Compiled, compile};
use super::decode::{DecodeOptions, StreamDecoder, StreamStats};
use super::error::CtfError;
use super::meta::{Metadata, metadata_text};
use super::record::EventRecord;

/// One CTF trace: its compiled metadata and its stream files.
#[derive(Debug, Clone)]
pub struct CtfTrace {
    /// The directory holding `metadata`.
    pub dir: PathBuf,
    /// The compiled metadata.
    pub compiled: Arc<Compiled>,
    /// Stream files, sorted by name.
    pub streams: Vec<PathBuf>,
}

impl CtfTrace {
    /// Opens the trace in `dir` (which holds `metadata`).
    pub fn open(dir: &Path) -> Result<CtfTrace, CtfError> {
        let mpath = dir.join("metadata");
        let bytes = std::fs::read(&mpath).map_err(|e| CtfError::io(&mpath, "read", e))?;
        let text = metadata_text(&bytes, &mpath)?;
        let md = super::tsdl::parse(&text).map_err(|e| e.with_path(&mpath))?;
        let compiled = Arc::new(compile(md, &mpath)?);
        let mut streams = Vec::new();
        let rd = std::fs::read_dir(dir).map_err(|e| CtfError::io(dir, "read directory", e))?;
        for ent in rd {
            let ent = ent.map_err(|e| CtfError::io(dir, "read directory", e))?;
            let ft = ent.file_type().map_err(|e| CtfError::io(ent.path(), "stat", e))?;
            let name = ent.file_name();
            let name = name.to_string_lossy();
            if !ft.is_file() || name == "metadata" || name.starts_with('.') || name.ends_with(".idx") {
                continue;
            }
            streams.push(ent.path());
        }
        streams.sort();
        Ok(CtfTrace { dir: dir.to_path_buf(), compiled, streams })
    }

    /// The metadata.
    pub fn metadata(&self) -> &Metadata {
        &self.compiled.meta
    }

    /// Decoders for every stream file.
    pub fn decoders(&self, opts: &DecodeOptions) -> Result<Vec<StreamDecoder>, CtfError> {
        self.streams.iter().map(|p| StreamDecoder::open(self.compiled.clone(), p, opts.clone())).collect()
    }
}

/// Every directory at or under `root` holding a CTF `metadata` file (sorted). Symbolic links
/// are not followed.
pub fn find_traces(root: &Path) -> Result<Vec<PathBuf>, CtfError> {
    let meta = std::fs::metadata(root).map_err(|e| CtfError::io(root, "stat", e))?;
    if !meta.is_dir() {
        return Err(CtfError::Layout { path: root.into(), msg: "not a directory".into() });
    }
    let mut out = Vec::new();
    let mut stack = vec![(root.to_path_buf(), 0u32)];
    while let Some((dir, depth)) = stack.pop() {
        let rd = std::fs::read_dir(&dir).map_err(|e| CtfError::io(&dir, "read directory", e))?;
        for ent in rd {
            let ent = ent.map_err(|e| CtfError::io(&dir, "read directory", e))?;
            let ft = ent.file_type().map_err(|e| CtfError::io(ent.path(), "stat", e))?;
            if ft.is_dir() && depth < 16 {
                stack.push((ent.path(), depth + 1));
            } else if ft.is_file() && ent.file_name() == "metadata" {
                out.push(dir.clone());
            }
        }
    }
    out.sort();
    if out.is_empty() {
        return Err(CtfError::Layout {
            path: root.into(),
            msg: "no CTF trace here (no 'metadata' file in it or below it)".into(),
        });
    }
    Ok(out)
}

/// Opens every trace under `root`.
pub fn open_traces(root: &Path) -> Result<Vec<CtfTrace>, CtfError> {
    find_traces(root)?.iter().map(|d| CtfTrace::open(d)).collect()
}

/// Streams merged by event time (ns since the origin; ties broken by stream order). Holds one
/// decoded event per stream, so memory is one packet per stream.
pub struct Merged {
    decs: Vec<StreamDecoder>,
    heap: BinaryHeap<Reverse<(u64, u32)>>,
    pending: Option<usize>,
    started: bool,
}

impl Merged {
    /// Merges `decs`.
    pub fn new(decs: Vec<StreamDecoder>) -> Merged {
        Merged { heap: BinaryHeap::with_capacity(decs.len()), decs, pending: None, started: false }
    }

    /// The next event in time order.
    pub fn next_event(&mut self) -> Result<Option<EventRecord<'_>>, CtfError> {
        if !self.started {
            self.started = true;
            for (i, d) in self.decs.iter_mut().enumerate() {
                if d.next_event()? {
                    self.heap.push(Reverse((d.time_ns(), i as u32)));
                }
            }
        }
        if let Some(p) = self.pending.take() {
            let d = &mut self.decs[p];
            if d.next_event()? {
                let key = (d.time_ns(), p as u32);
                // Still the earliest (always so with one stream): no heap round trip.
                if self.heap.peek().is_none_or(|Reverse(top)| key < *top) {
                    self.pending = Some(p);
                    return Ok(Some(self.decs[p].event()));
                }
                self.heap.push(Reverse(key));
            }
        }
        let Some(Reverse((_, i))) = self.heap.pop() else { return Ok(None) };
        self.pending = Some(i as usize);
        Ok(Some(self.decs[i as usize].event()))
    }

    /// The decoders (for statistics and progress).
    pub fn decoders(&self) -> &[StreamDecoder] {
        &self.decs
    }

    /// Counters summed over all streams.
    pub fn stats(&self) -> StreamStats {
        let mut s = StreamStats::default();
        for d in &self.decs {
            s.merge(d.stats());
        }
        s
    }

    /// Bytes consumed so far over all streams.
    pub fn bytes_done(&self) -> u64 {
        self.decs.iter().map(StreamDecoder::bytes_done).sum()
    }
}

/// Reads every trace under a directory as weft events, in time order.
pub struct CtfReader {
    traces: Vec<CtfTrace>,
    merged: Merged,
    source: SourceId,
    total_bytes: u64,
}

impl CtfReader {
    /// Opens every trace under `root`; events carry `source`.
    pub fn open(root: &Path, source: SourceId, opts: DecodeOptions) -> Result<CtfReader, CtfError> {
        let traces = open_traces(root)?;
        let mut decs = Vec::new();
        for t in &traces {
            decs.extend(t.decoders(&opts)?);
        }
        let total_bytes = decs.iter().map(StreamDecoder::len).sum();
        Ok(CtfReader { traces, merged: Merged::new(decs), source, total_bytes })
    }

    /// The traces.
    pub fn traces(&self) -> &[CtfTrace] {
        &self.traces
    }

    /// Appends up to `max` events to `out`; returns how many (0 at the end).
    pub fn next_batch(&mut self, out: &mut Vec<Event>, max: usize) -> Result<usize, CtfError> {
        let mut n = 0;
        while n < max {
            match self.merged.next_event()? {
                Some(ev) => {
                    out.push(ev.to_event(self.source));
                    n += 1;
                }
                None => break,
            }
        }
        Ok(n)
    }

    /// The merged streams.
    pub fn merged(&mut self) -> &mut Merged {
        &mut self.merged
    }

    /// Counters so far.
    pub fn stats(&self) -> StreamStats {
        self.merged.stats()
    }

    /// Bytes of stream files consumed, and their total.
    pub fn progress(&self) -> (u64, u64) {
        (self.merged.bytes_done(), self.total_bytes)
    }
}
