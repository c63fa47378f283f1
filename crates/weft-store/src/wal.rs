//! The write-ahead log.
//!
//! A WAL file is `wal/<id>.wal`: an 8-byte header `WEFTWAL\x01`, then records framed as
//! `[len: u32 LE][crc32(payload): u32 LE][payload]`. A payload is one append: a kind byte
//! followed by length-prefixed Arrow IPC streams — the batches the in-memory buffer keeps, so
//! replay is a decode, not a re-conversion:
//!
//! * 5 = spans: spans (segment file layout, `resource_ref` = row of the next stream), their
//!   distinct resources (each with its instrumentation scope), span events, span links;
//! * 4 = raw events: events;
//! * 3 = spans as written before scopes were stored once: as 5, but the scope columns on every
//!   span row and only the resource columns apart. Still replayed (the scopes are moved into
//!   the resources then);
//! * 2 = raw events as written before the `name` column (a tracepoint's name was then the first
//!   entry of its fields). Still replayed (given their `name` then);
//! * 1 = spans as written before the buffer kept resources apart: spans (every column of the
//!   SQL table), span events, span links. Still replayed (the resources are split off then).
//!
//! Durability: an append returns only after its record is written to the file (so a killed
//! process never loses an acknowledged append) and, with [`FsyncPolicy::Always`], after an
//! `fdatasync` covering it. Concurrent appenders share fsyncs (group commit): whoever finds
//! no sync in flight syncs everything written so far, and everyone it covered returns.
//! [`FsyncPolicy::Interval`] syncs from a background thread; [`FsyncPolicy::Never`] leaves it
//! to the OS (a machine crash may lose recent appends; a process crash does not).
//!
//! Each time the in-memory buffer is frozen for flushing, the WAL rotates to a new file; once
//! the frozen buffer's segment and the manifest naming it are durable, every WAL file up to
//! the frozen one is deleted. Replay on start reads the files after the manifest's checkpoint.
//! A bad record (bad CRC, impossible length, a payload this weft cannot decode) with valid
//! records after it is kept aside — its bytes copied to `quarantine/<file>.<offset>.bad` —,
//! counted and logged, and replay goes on with the next record that checks out (found by
//! scanning forward for a frame whose length fits, kind is known and CRC matches; the CRC work
//! of the scan is bounded). Only the tail is cut: a record torn by a crash (never
//! acknowledged), or bad records with nothing valid after them (kept aside first).
//!
//! A failed write or fsync is sticky for its file: the kernel may drop the dirty pages of a
//! failed fsync and report the next one as a success, so after one failure nothing more is
//! acknowledged (appends, waiting group-commit members and rotations fail) until the WAL goes
//! on in a new file ([`WalWriter::reopen`], which the store retries in the background, e.g.
//! once a full disk has room again). The broken file is first cut back to its last whole
//! record (what a failed write left of its record is gone, never replayed); an append waiting
//! for the broken file's fsync is still refused afterwards.
//! Files are written through [`WalFiles`] / [`WalIo`], the seam tests inject failures with.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;
use parking_lot::{Condvar, Mutex};

use crate::arrow_rows::SpanBatches;
use crate::error::{Result, StoreError, io_err};

const MAGIC: &[u8; 8] = b"WEFTWAL\x01";
const FRAME_HEADER: usize = 8;
/// Largest record accepted (a bigger length field means a corrupt frame).
pub(crate) const MAX_RECORD: usize = 1 << 30;

const KIND_SPANS_V1: u8 = 1;
const KIND_EVENTS_V1: u8 = 2;
const KIND_SPANS_V2: u8 = 3;
const KIND_EVENTS: u8 = 4;
const KIND_SPANS: u8 = 5;

/// When the WAL is fsynced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// Before every append is acknowledged (group commit shares syncs between appenders).
    Always,
    /// Every this often, from a background thread.
    Interval(Duration),
    /// Never explicitly (the OS writes back; process crashes lose nothing, machine crashes may).
    Never,
}

impl std::str::FromStr for FsyncPolicy {
    type Err = String;
    /// `always`, `never`, or an interval in ms (`100ms`, `100`).
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "always" => Ok(FsyncPolicy::Always),
            "never" => Ok(FsyncPolicy::Never),
            _ => {
                let n = s.strip_suffix("ms").unwrap_or(s);
                n.parse::<u64>()
                    .ok()
                    .filter(|&v| v > 0)
                    .map(|v| FsyncPolicy::Interval(Duration::from_millis(v)))
                    .ok_or_else(|| {
                        format!("fsync policy {s:?}: expected always, never or a period like 100ms")
                    })
            }
        }
    }
}

/// One decoded WAL record.
#[derive(Debug)]
pub enum WalRecord {
    /// An append of spans (batches of `spans` and their resources, `span_events`, `span_links`).
    Spans(SpanBatches),
    /// An append of raw events (a batch of `events`).
    Events(RecordBatch),
}

fn ipc_encode(out: &mut Vec<u8>, batch: &RecordBatch) -> Result<()> {
    let len_at = out.len();
    out.extend_from_slice(&[0; 4]);
    if batch.num_rows() > 0 {
        let mut w = StreamWriter::try_new(&mut *out, batch.schema_ref())?;
        w.write(batch)?;
        w.finish()?;
    }
    let len = (out.len() - len_at - 4) as u32;
    out[len_at..len_at + 4].copy_from_slice(&len.to_le_bytes());
    Ok(())
}

fn ipc_decode(
    buf: &mut &[u8],
    schema: datafusion::arrow::datatypes::SchemaRef,
) -> Result<RecordBatch, String> {
    if buf.len() < 4 {
        return Err("truncated stream length".into());
    }
    let len = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    *buf = &buf[4..];
    if len > buf.len() {
        return Err(format!("stream length {len} exceeds the record"));
    }
    let (stream, rest) = buf.split_at(len);
    *buf = rest;
    if len == 0 {
        return Ok(RecordBatch::new_empty(schema));
    }
    // Our writer always produces the current IPC format, whose messages start with the
    // continuation marker. Anything else is corrupt — and arrow's reader can spin on some
    // legacy-format garbage (found by the `store_wal_record` fuzz target), so refuse it here.
    if stream.len() < 8 || stream[..4] != [0xff; 4] {
        return Err("stream does not start with an Arrow IPC continuation marker".into());
    }
    let reader = StreamReader::try_new(stream, None).map_err(|e| e.to_string())?;
    if reader.schema() != schema {
        return Err("stream schema differs from the table schema".into());
    }
    let mut batches = Vec::new();
    for b in reader {
        batches.push(b.map_err(|e| e.to_string())?);
    }
    match batches.len() {
        0 => Ok(RecordBatch::new_empty(schema)),
        1 => Ok(batches.pop().unwrap_or_else(|| RecordBatch::new_empty(schema))),
        _ => datafusion::arrow::compute::concat_batches(&schema, &batches).map_err(|e| e.to_string()),
    }
}

/// Encodes an append of spans as a WAL record payload.
pub fn encode_spans(b: &SpanBatches, out: &mut Vec<u8>) -> Result<()> {
    out.push(KIND_SPANS);
    ipc_encode(out, &b.spans)?;
    ipc_encode(out, &b.resources)?;
    ipc_encode(out, &b.events)?;
    ipc_encode(out, &b.links)?;
    Ok(())
}

/// Encodes an append of raw events as a WAL record payload.
pub fn encode_events(b: &RecordBatch, out: &mut Vec<u8>) -> Result<()> {
    out.push(KIND_EVENTS);
    ipc_encode(out, b)
}

/// Decodes a record payload (never panics: anything malformed is an error naming the problem).
pub fn decode_record(payload: &[u8]) -> Result<WalRecord, String> {
    let Some((&kind, mut rest)) = payload.split_first() else {
        return Err("empty record".into());
    };
    let rec = match kind {
        KIND_SPANS => {
            let spans = ipc_decode(&mut rest, crate::schema::spans_file_schema())?;
            let resources = ipc_decode(&mut rest, crate::schema::span_resources_schema())?;
            let events = ipc_decode(&mut rest, crate::schema::span_events_schema())?;
            let links = ipc_decode(&mut rest, crate::schema::span_links_schema())?;
            crate::resources::check_refs(&spans, resources.num_rows()).map_err(|e| format!("spans: {e}"))?;
            WalRecord::Spans(SpanBatches { spans, resources, events, links })
        }
        KIND_SPANS_V2 => {
            let spans = ipc_decode(&mut rest, crate::schema::spans_file_schema_v2())?;
            let resources = ipc_decode(&mut rest, crate::schema::span_resources_schema_v2())?;
            let logical =
                crate::resources::expand_local(&spans, &resources).map_err(|e| format!("spans: {e}"))?;
            spans_of_logical(&logical, &mut rest)?
        }
        KIND_SPANS_V1 => {
            let logical = ipc_decode(&mut rest, crate::schema::spans_schema())?;
            spans_of_logical(&logical, &mut rest)?
        }
        KIND_EVENTS => WalRecord::Events(ipc_decode(&mut rest, crate::schema::events_schema())?),
        KIND_EVENTS_V1 => {
            let old = ipc_decode(&mut rest, crate::schema::events_schema_v1())?;
            WalRecord::Events(crate::arrow_rows::events_rows(old).map_err(|e| format!("events: {e}"))?)
        }
        k => return Err(format!("unknown record kind {k}")),
    };
    if !rest.is_empty() {
        return Err(format!("{} trailing bytes", rest.len()));
    }
    Ok(rec)
}

/// A spans record of an older kind from its spans with every column (`logical`) and the
/// rest of its payload (span events, span links): the resources split off as now.
fn spans_of_logical(logical: &RecordBatch, rest: &mut &[u8]) -> Result<WalRecord, String> {
    let events = ipc_decode(rest, crate::schema::span_events_schema())?;
    let links = ipc_decode(rest, crate::schema::span_links_schema())?;
    let (mut spans, resources) =
        crate::resources::normalize(&[logical]).map_err(|e| format!("spans: {e}"))?;
    let spans = spans.pop().ok_or("spans: nothing normalized")?;
    Ok(WalRecord::Spans(SpanBatches { spans, resources, events, links }))
}

/// Path of WAL file `id`.
pub(crate) fn wal_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:016}.wal"))
}

/// The WAL files in `dir`, sorted by id.
pub(crate) fn list_wal_files(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    let rd = std::fs::read_dir(dir).map_err(io_err("read directory", dir))?;
    for e in rd {
        let e = e.map_err(io_err("read directory", dir))?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(id) = name.strip_suffix(".wal").and_then(|s| s.parse::<u64>().ok()) {
            out.push((id, e.path()));
        }
    }
    out.sort();
    Ok(out)
}

pub(crate) fn fsync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io_err("fsync directory", dir))
}

/// What the WAL needs from a file it appends to. The real file is the default; this is the
/// seam through which tests inject write and fsync failures (see [`WalFiles`]).
pub trait WalIo: Send + Sync {
    /// Writes all of `buf` at the end of the file.
    fn write_all(&self, buf: &[u8]) -> std::io::Result<()>;
    /// Makes everything written so far durable (`fdatasync`).
    fn sync_data(&self) -> std::io::Result<()>;
    /// Cuts the file to `len` bytes (what a failed write left past the last whole record).
    fn set_len(&self, len: u64) -> std::io::Result<()>;
}

impl WalIo for File {
    fn write_all(&self, buf: &[u8]) -> std::io::Result<()> {
        let mut f: &File = self;
        Write::write_all(&mut f, buf)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        File::sync_data(self)
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        File::set_len(self, len)
    }
}

/// Creates the files the WAL appends to ([`OsFiles`] unless a test injects faults).
pub trait WalFiles: Send + Sync + std::fmt::Debug {
    /// Creates `path`, which must not exist, for appending.
    fn create(&self, path: &Path) -> std::io::Result<Box<dyn WalIo>>;
}

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsFiles;

impl WalFiles for OsFiles {
    fn create(&self, path: &Path) -> std::io::Result<Box<dyn WalIo>> {
        Ok(Box::new(OpenOptions::new().create_new(true).append(true).open(path)?))
    }
}

/// The file being appended to.
pub(crate) struct WalFile {
    pub id: u64,
    pub file: Box<dyn WalIo>,
    /// Bytes written so far (header included).
    pub written: AtomicU64,
    pub path: PathBuf,
}

/// Writer side: one current file, appends under the store's WAL lock.
pub(crate) struct WalWriter {
    dir: PathBuf,
    files: Arc<dyn WalFiles>,
    current: Arc<WalFile>,
    frame: Vec<u8>,
}

impl WalWriter {
    /// Creates WAL file `id` (which must not exist) through `files` and makes it durable.
    pub fn create(dir: &Path, id: u64, files: Arc<dyn WalFiles>) -> Result<Self> {
        let current = Arc::new(Self::new_file(&*files, dir, id)?);
        Ok(WalWriter { dir: dir.to_owned(), files, current, frame: Vec::new() })
    }

    fn new_file(files: &dyn WalFiles, dir: &Path, id: u64) -> Result<WalFile> {
        let path = wal_path(dir, id);
        let file = files.create(&path).map_err(io_err("create", &path))?;
        file.write_all(MAGIC).map_err(io_err("write", &path))?;
        file.sync_data().map_err(io_err("fsync", &path))?;
        fsync_dir(dir)?;
        Ok(WalFile { id, file, written: AtomicU64::new(MAGIC.len() as u64), path })
    }

    pub fn current(&self) -> &Arc<WalFile> {
        &self.current
    }

    /// Appends one record; returns the file and the offset just past it. Refused once a write
    /// or fsync of this WAL has failed (`sync` remembers it); a failed write is remembered so.
    pub fn append(&mut self, payload: &[u8], sync: &WalSync) -> Result<(Arc<WalFile>, u64)> {
        sync.check()?;
        if payload.len() > MAX_RECORD {
            return Err(StoreError::AppendTooLarge {
                bytes: payload.len(),
                limit: MAX_RECORD,
                what: "the WAL record limit",
            });
        }
        self.frame.clear();
        self.frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        self.frame.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
        let f = &self.current;
        // One write for small records (header + payload), two for big ones (no copy).
        let written = if payload.len() <= 64 * 1024 {
            self.frame.extend_from_slice(payload);
            f.file.write_all(&self.frame)
        } else {
            f.file.write_all(&self.frame).and_then(|()| f.file.write_all(payload))
        };
        written.map_err(|e| sync.fail(io_err("write", &f.path)(e)))?;
        let end = f.written.fetch_add((FRAME_HEADER + payload.len()) as u64, Ordering::Release)
            + (FRAME_HEADER + payload.len()) as u64;
        Ok((f.clone(), end))
    }

    /// Switches to a new file `id`; the old one is fsynced first unless `policy` is `Never`
    /// (a failure of that fsync is remembered by `sync`: nothing is acknowledged after it).
    pub fn rotate(&mut self, id: u64, policy: FsyncPolicy, sync: &WalSync) -> Result<()> {
        sync.check()?;
        if policy != FsyncPolicy::Never {
            let f = &self.current;
            f.file.sync_data().map_err(|e| sync.fail(io_err("fsync", &f.path)(e)))?;
            sync.mark_synced(f.id, f.written.load(Ordering::Acquire));
        }
        self.current = Arc::new(Self::new_file(&*self.files, &self.dir, id)?);
        sync.advance_file(id);
        Ok(())
    }

    /// After a failed write or fsync: cuts the current file back to its last whole record and
    /// goes on in a new file `id` (the caller keeps the rows of the broken file in memory until
    /// they are flushed). Fails, changing nothing, while the file system still refuses (a full
    /// disk); `sync` then still refuses acknowledgements.
    pub fn reopen(&mut self, id: u64, sync: &WalSync) -> Result<()> {
        let f = &self.current;
        let whole = f.written.load(Ordering::Acquire);
        f.file.set_len(whole).map_err(io_err("truncate", &f.path))?;
        // What an earlier attempt may have left: nothing in it was ever acknowledged.
        let path = wal_path(&self.dir, id);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io_err("remove", &path)(e)),
            _ => {}
        }
        let next = Self::new_file(&*self.files, &self.dir, id)?;
        let old = std::mem::replace(&mut self.current, Arc::new(next));
        sync.reopened(old.id, id);
        Ok(())
    }
}

#[derive(Default)]
struct SyncState {
    file_id: u64,
    synced: u64,
    syncing: bool,
    /// The first failed write or fsync: sticky, nothing is acknowledged after it. (After a
    /// failed fsync the kernel may have dropped the dirty pages and report the next fsync as
    /// a success, so a retry proves nothing.)
    failed: Option<String>,
    /// Files left behind by [`WalWriter::reopen`]: how far each was fsynced before its failure,
    /// and the failure. Forgotten once a flush made their rows durable elsewhere.
    broken: BTreeMap<u64, (u64, String)>,
}

/// Group-commit bookkeeping: what has been made durable.
#[derive(Default)]
pub(crate) struct WalSync {
    state: Mutex<SyncState>,
    cv: Condvar,
}

impl WalSync {
    pub fn new(file_id: u64) -> Self {
        WalSync { state: Mutex::new(SyncState { file_id, ..SyncState::default() }), cv: Condvar::new() }
    }

    /// Remembers a failed write or fsync (the first one) and returns the error.
    pub fn fail(&self, e: StoreError) -> StoreError {
        let mut st = self.state.lock();
        if st.failed.is_none() {
            tracing::error!(error = %e, "WAL write or fsync failed; nothing more is acknowledged until the WAL is reopened");
            st.failed = Some(e.to_string());
        }
        drop(st);
        self.cv.notify_all();
        e
    }

    /// Refuses when a write or fsync has failed.
    pub fn check(&self) -> Result<()> {
        Self::refuse(&self.state.lock())
    }

    fn refuse(st: &SyncState) -> Result<()> {
        match &st.failed {
            Some(m) => Err(StoreError::Poisoned(m.clone())),
            None => Ok(()),
        }
    }

    /// The WAL went on in file `new` after `old` failed: `old`'s unsynced records are never
    /// confirmed durable by an fsync; acknowledgements resume in `new`.
    fn reopened(&self, old: u64, new: u64) {
        let mut st = self.state.lock();
        let synced = if st.file_id == old { st.synced } else { 0 };
        let why = st.failed.take().unwrap_or_else(|| "an earlier WAL write failed".into());
        st.broken.insert(old, (synced, why));
        st.file_id = new;
        st.synced = 0;
        drop(st);
        self.cv.notify_all();
    }

    /// Files up to `upto` are flushed: their rows are durable in a segment.
    pub fn forget_broken(&self, upto: u64) {
        self.state.lock().broken.retain(|id, _| *id > upto);
    }

    fn mark_synced(&self, file_id: u64, upto: u64) {
        let mut st = self.state.lock();
        if st.file_id == file_id && upto > st.synced {
            st.synced = upto;
        }
        drop(st);
        self.cv.notify_all();
    }

    fn advance_file(&self, file_id: u64) {
        let mut st = self.state.lock();
        if file_id > st.file_id {
            st.file_id = file_id;
            st.synced = 0;
        }
        drop(st);
        self.cv.notify_all();
    }

    /// Returns once everything in `f` up to `upto` is durable (syncing it if nobody else is);
    /// fails when it is not and a write or fsync has failed (here or before).
    pub fn sync_to(&self, f: &WalFile, upto: u64) -> Result<()> {
        let mut st = self.state.lock();
        loop {
            if let Some((synced, why)) = st.broken.get(&f.id) {
                return if upto <= *synced { Ok(()) } else { Err(StoreError::Poisoned(why.clone())) };
            }
            if st.file_id > f.id || (st.file_id == f.id && st.synced >= upto) {
                return Ok(());
            }
            Self::refuse(&st)?;
            if st.syncing {
                self.cv.wait(&mut st);
                continue;
            }
            st.syncing = true;
            drop(st);
            let target = f.written.load(Ordering::Acquire);
            let r = f.file.sync_data();
            st = self.state.lock();
            st.syncing = false;
            match r {
                Ok(()) if st.file_id == f.id && target > st.synced => st.synced = target,
                Ok(()) => {}
                Err(e) => {
                    drop(st);
                    return Err(self.fail(io_err("fsync", &f.path)(e)));
                }
            }
            self.cv.notify_all();
        }
    }

    /// Like [`WalSync::sync_to`] for one append that must be durable whatever the policy: under
    /// [`FsyncPolicy::Never`] rotations leave files unsynced, so `f` is fsynced here.
    pub fn sync_append(&self, f: &WalFile, upto: u64, policy: FsyncPolicy) -> Result<()> {
        if policy != FsyncPolicy::Never {
            return self.sync_to(f, upto);
        }
        {
            let st = self.state.lock();
            if let Some((_, why)) = st.broken.get(&f.id) {
                return Err(StoreError::Poisoned(why.clone()));
            }
            Self::refuse(&st)?;
        }
        f.file.sync_data().map_err(|e| self.fail(io_err("fsync", &f.path)(e)))
    }

    /// Background sync of the current file (interval policy). Returns bytes newly synced.
    pub fn sync_current(&self, f: &WalFile) -> Result<u64> {
        let written = f.written.load(Ordering::Acquire);
        let before = {
            let st = self.state.lock();
            if st.file_id != f.id {
                return Ok(0);
            }
            st.synced
        };
        if written <= before {
            return Ok(0);
        }
        self.sync_to(f, written)?;
        Ok(written - before)
    }
}

/// What replaying one file found.
#[derive(Debug, Default, Clone)]
pub(crate) struct ReplayStats {
    pub records: u64,
    pub bytes: u64,
    /// A torn tail ended the file at this offset (with the reason); it was cut there.
    pub torn: Option<(u64, String)>,
    /// Bad records with valid records after them, kept aside and skipped.
    pub quarantined: u64,
}

/// After a bad record, the scan for the next one CRCs at most this many bytes of candidate
/// records before it gives up (and treats the rest of the file as one bad stretch).
const RESYNC_CRC_BUDGET: u64 = 256 << 20;
/// The scan reads the file in windows of this size.
const SCAN_WINDOW: usize = 1 << 20;
/// Bytes a candidate record must show to be checked: frame header, kind, the first stream's
/// length and its continuation marker.
const CANDIDATE_BYTES: usize = FRAME_HEADER + 1 + 4 + 4;

/// A frame read at some offset.
enum Frame {
    /// Header and CRC check out: the payload is in the buffer.
    Good(u64),
    /// Runs past the end of the file with a plausible length: a write torn by a crash.
    Torn(String),
    /// A complete frame whose CRC fails (with where it ends), or an impossible length.
    Bad(String, Option<u64>),
}

/// Where the scan after a bad record got to.
enum Resync {
    /// The next record that checks out starts here.
    At(u64),
    /// No record checks out up to the end of the file.
    NoneAfter,
    /// The CRC budget ran out before one was found.
    GaveUp,
}

struct WalReader<'a> {
    file: &'a File,
    path: &'a Path,
    size: u64,
}

impl WalReader<'_> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.file.read_exact_at(buf, offset).map_err(io_err("read", self.path))
    }

    /// Reads the frame at `offset` (the payload into `payload` when its CRC checks out).
    fn frame(&self, offset: u64, payload: &mut Vec<u8>) -> Result<Frame> {
        let left = self.size - offset;
        if left < FRAME_HEADER as u64 {
            return Ok(Frame::Torn(format!("{left} trailing bytes, shorter than a frame header")));
        }
        let mut header = [0u8; FRAME_HEADER];
        self.read_at(&mut header, offset)?;
        let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as u64;
        let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        if len > MAX_RECORD as u64 {
            return Ok(Frame::Bad(format!("record length {len} exceeds the limit of {MAX_RECORD}"), None));
        }
        if FRAME_HEADER as u64 + len > left {
            return Ok(Frame::Torn(format!(
                "record length {len} runs past the end of the file ({} bytes)",
                self.size
            )));
        }
        payload.resize(len as usize, 0);
        self.read_at(payload, offset + FRAME_HEADER as u64)?;
        let end = offset + FRAME_HEADER as u64 + len;
        Ok(if crc32fast::hash(payload) == crc {
            Frame::Good(len)
        } else {
            Frame::Bad("CRC mismatch".into(), Some(end))
        })
    }

    /// The length of the record a frame at `at` would hold if `bytes` (the file from `at`)
    /// look like the start of one: a length that fits, a known kind, a first stream that fits
    /// the record and starts with an Arrow IPC continuation marker. Cheap; the CRC decides.
    fn candidate(&self, at: u64, bytes: &[u8]) -> Option<u64> {
        let u32_at =
            |i: usize| bytes.get(i..i + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64);
        let len = u32_at(0)?;
        if !(5..=MAX_RECORD as u64).contains(&len) || at + FRAME_HEADER as u64 + len > self.size {
            return None;
        }
        if !matches!(
            bytes.get(FRAME_HEADER),
            Some(&(KIND_SPANS_V1 | KIND_EVENTS_V1 | KIND_SPANS_V2 | KIND_EVENTS | KIND_SPANS))
        ) {
            return None;
        }
        let first = u32_at(FRAME_HEADER + 1)?;
        if first > len - 5 || (first > 0 && (first < 8 || u32_at(FRAME_HEADER + 5)? != 0xffff_ffff)) {
            return None;
        }
        Some(len)
    }

    /// Finds the next record that checks out after a bad one at `bad`, trying `hint` (where
    /// the bad frame ends if its length was right, e.g. one flipped bit in its payload) first.
    fn resync(&self, bad: u64, hint: Option<u64>, payload: &mut Vec<u8>) -> Result<Resync> {
        let mut budget = RESYNC_CRC_BUDGET;
        let mut window = vec![0u8; SCAN_WINDOW + CANDIDATE_BYTES];
        if let Some(h) = hint.filter(|&h| h < self.size) {
            let n = (self.size - h).min(CANDIDATE_BYTES as u64) as usize;
            self.read_at(&mut window[..n], h)?;
            if let Some(len) = self.candidate(h, &window[..n]) {
                budget -= len.min(budget);
                if let Frame::Good(_) = self.frame(h, payload)? {
                    return Ok(Resync::At(h));
                }
            }
        }
        let mut pos = bad + 1;
        while pos < self.size {
            let n = (self.size - pos).min(window.len() as u64) as usize;
            self.read_at(&mut window[..n], pos)?;
            let positions = if n as u64 == self.size - pos { n } else { SCAN_WINDOW };
            for i in 0..positions {
                let at = pos + i as u64;
                let Some(len) = self.candidate(at, &window[i..n]) else { continue };
                let Some(left) = budget.checked_sub(len) else { return Ok(Resync::GaveUp) };
                budget = left;
                if let Frame::Good(_) = self.frame(at, payload)? {
                    return Ok(Resync::At(at));
                }
            }
            pos += positions as u64;
        }
        Ok(Resync::NoneAfter)
    }

    /// Copies `len` bytes at `offset` to `<quarantine>/<wal file name>.<offset>.bad`, durably.
    fn quarantine(&self, dir: &Path, offset: u64, len: u64) -> Result<PathBuf> {
        std::fs::create_dir_all(dir).map_err(io_err("create directory", dir))?;
        let name = self.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let out = dir.join(format!("{name}.{offset:012}.bad"));
        let mut src = self.file.try_clone().map_err(io_err("open", self.path))?;
        src.seek(SeekFrom::Start(offset)).map_err(io_err("seek", self.path))?;
        let mut dst = File::create(&out).map_err(io_err("create", &out))?;
        std::io::copy(&mut src.take(len), &mut dst).map_err(io_err("write", &out))?;
        dst.sync_all().map_err(io_err("fsync", &out))?;
        fsync_dir(dir)?;
        Ok(out)
    }
}

/// Counts bytes `from..to` of a WAL file as one bad record, copies them to `quarantine` (when
/// replay may write) and says so.
fn keep_aside(
    r: &WalReader<'_>,
    quarantine: Option<&Path>,
    stats: &mut ReplayStats,
    from: u64,
    to: u64,
    reason: &str,
) -> Result<()> {
    stats.quarantined += 1;
    let copy = quarantine.map(|q| r.quarantine(q, from, to - from)).transpose()?;
    tracing::warn!(
        file = %r.path.display(), offset = from, bytes = to - from, reason,
        copy = %copy.as_deref().map_or_else(|| "none (read-only)".into(), |c| c.display().to_string()),
        "bad WAL record kept aside; replay goes on after it"
    );
    Ok(())
}

/// Reads the records of one WAL file, calling `f` with each decoded record.
///
/// A bad record followed by valid ones (a bad CRC, an impossible length, a payload this weft
/// cannot decode) is skipped and replay goes on with the next record that checks out; with
/// `quarantine` set, its bytes are first copied there. Only the tail may be cut, and only
/// with `quarantine` set (read-only replay changes nothing): a record torn by a crash, or bad
/// records with nothing valid after them (those bytes are quarantined before the cut).
pub(crate) fn replay_file(
    path: &Path,
    quarantine: Option<&Path>,
    mut f: impl FnMut(WalRecord) -> Result<()>,
) -> Result<ReplayStats> {
    let file = File::open(path).map_err(io_err("open", path))?;
    let size = file.metadata().map_err(io_err("stat", path))?.len();
    let r = WalReader { file: &file, path, size };
    let mut stats = ReplayStats::default();
    let mut header = [0u8; MAGIC.len()];
    if size < MAGIC.len() as u64 {
        stats.torn = Some((0, "file shorter than the WAL header".into()));
    } else {
        r.read_at(&mut header, 0)?;
        if &header != MAGIC {
            // Not ours, or its first bytes are damaged: keep it all aside rather than guess.
            let reason = "not a weft WAL file (bad header)";
            keep_aside(&r, quarantine, &mut stats, 0, size, reason)?;
            stats.torn = Some((0, reason.into()));
        }
    }
    let mut offset = MAGIC.len() as u64;
    let mut payload = Vec::new();
    while stats.torn.is_none() && offset < size {
        let (reason, hint, torn_write) = match r.frame(offset, &mut payload)? {
            Frame::Good(len) => {
                let end = offset + FRAME_HEADER as u64 + len;
                match decode_record(&payload) {
                    Ok(rec) => {
                        f(rec)?;
                        stats.records += 1;
                        stats.bytes += end - offset;
                    }
                    // Its frame checks out (it may come from another weft version): the next
                    // record starts right after it.
                    Err(reason) => keep_aside(
                        &r,
                        quarantine,
                        &mut stats,
                        offset,
                        end,
                        &format!("undecodable record: {reason}"),
                    )?,
                }
                offset = end;
                continue;
            }
            Frame::Bad(reason, end) => (reason, end, false),
            Frame::Torn(reason) => (reason, None, true),
        };
        match r.resync(offset, hint, &mut payload)? {
            Resync::At(next) => {
                keep_aside(&r, quarantine, &mut stats, offset, next, &reason)?;
                offset = next;
            }
            found => {
                // Nothing valid follows: the tail is cut. A write torn by a crash was never
                // acknowledged; anything else is kept aside first.
                if !torn_write || matches!(found, Resync::GaveUp) {
                    keep_aside(&r, quarantine, &mut stats, offset, size, &reason)?;
                }
                stats.torn = Some((offset, reason));
            }
        }
    }
    if let Some((at, _)) = &stats.torn
        && quarantine.is_some()
    {
        let file = OpenOptions::new().write(true).open(path).map_err(io_err("open", path))?;
        if *at < MAGIC.len() as u64 {
            file.set_len(0).map_err(io_err("truncate", path))?;
            file.write_all(MAGIC).map_err(io_err("write", path))?;
        } else {
            file.set_len(*at).map_err(io_err("truncate", path))?;
        }
        file.sync_all().map_err(io_err("fsync", path))?;
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    #[test]
    fn legacy_format_garbage_is_refused_quickly() {
        // Found by the store_wal_record fuzz target: arrow's stream reader never returned.
        let input = [1u8, 5, 0, 0, 0, 0, 0, 0, 0, 0x14, 0x14, 0, 0, 0, 0];
        let err = super::decode_record(&input).unwrap_err();
        assert!(err.contains("continuation marker"), "{err}");
    }

    use super::*;
    use crate::arrow_rows::spans_to_batches;

    fn batches(n: u64) -> SpanBatches {
        let spans: Vec<_> = (0..n).map(crate::testutil::span).collect();
        spans_to_batches(&spans).unwrap()
    }

    fn writer(dir: &Path, id: u64) -> (WalWriter, WalSync) {
        (WalWriter::create(dir, id, Arc::new(OsFiles)).unwrap(), WalSync::new(id))
    }

    fn replay_all(path: &Path, quarantine: Option<&Path>) -> (Vec<usize>, ReplayStats) {
        let mut rows = Vec::new();
        let st = replay_file(path, quarantine, |r| {
            if let WalRecord::Spans(b) = r {
                rows.push(b.spans.num_rows());
            }
            Ok(())
        })
        .unwrap();
        (rows, st)
    }

    /// `back` (a decoded record) has the rows `logical` and converts back to `spans`.
    fn reads_back(back: SpanBatches, logical: &RecordBatch, spans: &[weft_model::Span]) {
        assert_eq!(&back.logical_spans().unwrap(), logical);
        let again = crate::arrow_rows::batches_to_spans(
            &[back.logical_spans().unwrap()],
            &[back.events],
            &[back.links],
        );
        assert_eq!(again.unwrap(), spans);
    }

    /// Records written before the buffer kept resources apart (kind 1: spans with every
    /// column) replay as the same spans, their resources split off.
    #[test]
    fn records_of_the_previous_format_replay() {
        let mut spans: Vec<_> = (0..6).map(crate::testutil::span).collect();
        let mut other = (*spans[0].resource).clone();
        other.attributes.push("host.name", "h2");
        let other = Arc::new(other);
        for s in spans.iter_mut().skip(2).step_by(2) {
            s.resource = Arc::clone(&other);
        }
        let b = spans_to_batches(&spans).unwrap();
        let logical = b.logical_spans().unwrap();
        let mut p = vec![KIND_SPANS_V1];
        for batch in [&logical, &b.events, &b.links] {
            ipc_encode(&mut p, batch).unwrap();
        }
        let WalRecord::Spans(back) = decode_record(&p).unwrap() else { panic!("not spans") };
        assert_eq!(back.resources.num_rows(), 4, "svc-0, svc-1, the other one, svc-2");
        reads_back(back, &logical, &spans);
        // A current record names the resources the same way.
        let mut p = Vec::new();
        encode_spans(&b, &mut p).unwrap();
        let WalRecord::Spans(cur) = decode_record(&p).unwrap() else { panic!("not spans") };
        assert_eq!(cur.logical_spans().unwrap(), logical);
        // A reference past the record's resources: the record does not decode (replay keeps
        // it aside, as any undecodable record), and the buffer refuses it too.
        let bad = SpanBatches { resources: cur.resources.slice(0, 1), ..cur };
        let mut p = Vec::new();
        encode_spans(&bad, &mut p).unwrap();
        let err = decode_record(&p).unwrap_err();
        assert!(err.contains("resource_ref"), "{err}");
        let mut m = crate::memtable::MemTable::default();
        assert!(m.push_spans(bad).is_err());
    }

    /// Records written before scopes were stored once (kind 3: scope columns on every span
    /// row, only the resource columns apart) replay as the same spans, each distinct
    /// (resource, scope) once.
    #[test]
    fn records_written_before_scopes_were_stored_once_replay() {
        let mut spans: Vec<_> = (0..6).map(crate::testutil::span).collect();
        let mut scope = (*spans[0].scope).clone();
        scope.name = "other".into();
        let scope = Arc::new(scope);
        for s in spans.iter_mut().skip(1).step_by(2) {
            s.scope = Arc::clone(&scope);
        }
        let b = spans_to_batches(&spans).unwrap();
        let logical = b.logical_spans().unwrap();
        let take = |from: &RecordBatch, schema: datafusion::arrow::datatypes::SchemaRef| {
            let at: Vec<usize> =
                schema.fields().iter().map(|f| from.schema().index_of(f.name()).unwrap()).collect();
            let p = from.project(&at).unwrap();
            RecordBatch::try_new(schema, p.columns().to_vec()).unwrap()
        };
        let old_spans = take(
            &crate::resources::with_scopes(&b.spans, &b.resources).unwrap(),
            crate::schema::spans_file_schema_v2(),
        );
        let old_resources = take(&b.resources, crate::schema::span_resources_schema_v2());
        let mut p = vec![KIND_SPANS_V2];
        for batch in [&old_spans, &old_resources, &b.events, &b.links] {
            ipc_encode(&mut p, batch).unwrap();
        }
        let WalRecord::Spans(back) = decode_record(&p).unwrap() else { panic!("not spans") };
        assert_eq!(back.resources.num_rows(), 6, "three resources, each with two scopes");
        assert!(back.spans.schema().index_of("scope_name").is_err());
        reads_back(back, &logical, &spans);
    }

    /// Raw events written before the `name` column (kind 2: a tracepoint's name first in its
    /// fields) replay with their name apart from a payload field called `name`.
    #[test]
    fn events_of_the_previous_format_replay() {
        use weft_model::event::{EventKind, TracepointEvent};
        use weft_model::{Attributes, Event, SourceId};
        let tp = |fields: Attributes| Event {
            time_ns: 1,
            raw_time: 2,
            source: SourceId(0),
            kind: EventKind::Tracepoint(TracepointEvent {
                name: "app:ev".into(),
                cpu: Some(1),
                pid: None,
                tid: None,
                fields,
            }),
        };
        let mut payload = Attributes::new();
        payload.push("name", "payload");
        payload.push("n", 7i64);
        let mut old_fields = Attributes::new();
        old_fields.push("name", "app:ev");
        old_fields.push("cpu", 1i64);
        old_fields.0.extend(payload.0.iter().cloned());
        // What the previous conversion stored: the name as the first field, no name column.
        let old = crate::arrow_rows::events_to_batch(&[tp(old_fields)]).unwrap();
        let v1 = old.project(&[0, 1, 2, 3, 4, 6, 7, 8, 9, 10]).unwrap();
        assert_eq!(v1.schema(), crate::schema::events_schema_v1());
        let mut p = vec![KIND_EVENTS_V1];
        ipc_encode(&mut p, &v1).unwrap();
        let WalRecord::Events(back) = decode_record(&p).unwrap() else { panic!("not events") };
        let mut want_fields = Attributes::new();
        want_fields.push("cpu", 1i64);
        want_fields.0.extend(payload.0.iter().cloned());
        assert_eq!(back, crate::arrow_rows::events_to_batch(&[tp(want_fields)]).unwrap());
        // A current record keeps name and payload apart.
        let cur = crate::arrow_rows::events_to_batch(&[tp(payload)]).unwrap();
        let mut p = Vec::new();
        encode_events(&cur, &mut p).unwrap();
        let WalRecord::Events(again) = decode_record(&p).unwrap() else { panic!("not events") };
        assert_eq!(again, cur);
    }

    /// After [`WalWriter::reopen`] the broken file's unsynced records are never confirmed
    /// durable (an fsync of it now could succeed over pages the failed one dropped); the new
    /// file's are.
    #[test]
    fn a_reopened_wal_never_confirms_the_broken_file() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, sync) = writer(dir.path(), 1);
        let mut payload = Vec::new();
        encode_spans(&batches(5), &mut payload).unwrap();
        let (first, end) = w.append(&payload, &sync).unwrap();
        sync.sync_to(&first, end).unwrap();
        let (broken, end2) = w.append(&payload, &sync).unwrap();
        sync.fail(StoreError::Poisoned("injected".into()));
        assert!(w.append(&payload, &sync).is_err());
        w.reopen(2, &sync).unwrap();
        assert!(sync.sync_to(&broken, end).is_ok(), "synced before the failure");
        assert!(matches!(sync.sync_to(&broken, end2), Err(StoreError::Poisoned(_))));
        assert!(sync.sync_append(&broken, end2, FsyncPolicy::Never).is_err());
        let (f, end3) = w.append(&payload, &sync).unwrap();
        assert_eq!(f.id, 2);
        sync.sync_to(&f, end3).unwrap();
        sync.forget_broken(1);
        assert!(sync.sync_to(&broken, end2).is_ok(), "flushed: durable in a segment");
    }

    #[test]
    fn append_and_replay() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, sync) = writer(dir.path(), 1);
        for n in [1, 5, 200] {
            let mut p = Vec::new();
            encode_spans(&batches(n), &mut p).unwrap();
            let (f, end) = w.append(&p, &sync).unwrap();
            sync.sync_to(&f, end).unwrap();
        }
        let (rows, st) = replay_all(&wal_path(dir.path(), 1), None);
        assert_eq!(rows, vec![1, 5, 200]);
        assert!(st.torn.is_none());
    }

    #[test]
    fn torn_tail_is_truncated_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, sync) = writer(dir.path(), 7);
        let mut p = Vec::new();
        encode_spans(&batches(3), &mut p).unwrap();
        let (_, good_end) = w.append(&p, &sync).unwrap();
        w.append(&p, &sync).unwrap();
        let path = wal_path(dir.path(), 7);
        let full = std::fs::metadata(&path).unwrap().len();
        // Cut the second record in half: a write torn by a crash.
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(full - 10).unwrap();
        let q = dir.path().join("quarantine");
        let (rows, st) = replay_all(&path, Some(&q));
        assert_eq!(rows, vec![3]);
        assert_eq!(st.torn.as_ref().unwrap().0, good_end);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), good_end);
        assert!(!q.exists(), "a write torn by a crash was never acknowledged: nothing kept");
        // Replaying again finds a clean file.
        let (rows, st) = replay_all(&path, Some(&q));
        assert_eq!(rows, vec![3]);
        assert!(st.torn.is_none());
    }

    #[test]
    fn corrupt_byte_fails_crc() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, sync) = writer(dir.path(), 1);
        let mut p = Vec::new();
        encode_spans(&batches(2), &mut p).unwrap();
        w.append(&p, &sync).unwrap();
        let path = wal_path(dir.path(), 1);
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 3;
        bytes[last] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let (rows, st) = replay_all(&path, None);
        assert!(rows.is_empty());
        assert!(st.torn.unwrap().1.contains("CRC"));
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "read-only replay changes nothing");
        // The last record, complete but failing its CRC, with nothing after it: cut, but its
        // bytes are kept aside first.
        let q = dir.path().join("quarantine");
        let (rows, st) = replay_all(&path, Some(&q));
        assert!(rows.is_empty());
        assert_eq!((st.quarantined, st.torn.map(|t| t.0)), (1, Some(MAGIC.len() as u64)));
        assert_eq!(std::fs::read(&path).unwrap(), MAGIC);
        let kept = q.join(format!("0000000000000001.wal.{:012}.bad", MAGIC.len()));
        assert_eq!(std::fs::read(kept).unwrap(), &bytes[MAGIC.len()..]);
    }

    /// Writes records of 1, 2, 3 and 4 spans to WAL file 1; returns its path and where each
    /// record starts (then where the file ends).
    fn four_records(dir: &Path) -> (PathBuf, Vec<u64>) {
        let (mut w, sync) = writer(dir, 1);
        let mut starts = vec![MAGIC.len() as u64];
        for n in 1..=4 {
            let mut p = Vec::new();
            encode_spans(&batches(n), &mut p).unwrap();
            starts.push(w.append(&p, &sync).unwrap().1);
        }
        (wal_path(dir, 1), starts)
    }

    /// A bad record with valid ones after it: a flipped payload byte (its length still
    /// holds), a flipped length byte (the next record is found by scanning), a payload this
    /// weft cannot decode (a newer kind; its frame checks out). Replay keeps it aside (a copy
    /// in the quarantine directory, named by file and offset), and goes on; the WAL is not cut.
    #[test]
    fn a_bad_record_in_the_middle_is_kept_aside_and_replay_goes_on() {
        for damage in ["payload", "length", "kind"] {
            let dir = tempfile::tempdir().unwrap();
            let (path, starts) = four_records(dir.path());
            let mut bytes = std::fs::read(&path).unwrap();
            let (at, end) = (starts[1] as usize, starts[2] as usize);
            match damage {
                "payload" => bytes[at + 40] ^= 0x55,
                "length" => bytes[at + 2] ^= 0x7f,
                _ => {
                    bytes[at + FRAME_HEADER] = 9;
                    let crc = crc32fast::hash(&bytes[at + FRAME_HEADER..end]);
                    bytes[at + 4..at + 8].copy_from_slice(&crc.to_le_bytes());
                }
            }
            std::fs::write(&path, &bytes).unwrap();
            let q = dir.path().join("quarantine");
            let (rows, st) = replay_all(&path, None);
            assert_eq!((rows, st.quarantined), (vec![1, 3, 4], 1), "{damage}, read-only");
            assert!(!q.exists(), "{damage}: read-only replay writes nothing");
            let (rows, st) = replay_all(&path, Some(&q));
            assert_eq!((rows, st.quarantined), (vec![1, 3, 4], 1), "{damage}");
            assert!(st.torn.is_none(), "{damage}");
            let kept = q.join(format!("0000000000000001.wal.{at:012}.bad"));
            assert_eq!(std::fs::read(&kept).unwrap(), &bytes[at..end], "{damage}");
            assert_eq!(std::fs::read(&path).unwrap(), bytes, "{damage}: the WAL is not cut");
        }
    }

    #[test]
    fn garbage_payloads_never_panic() {
        for payload in [&b""[..], &[1], &[1, 255, 255, 255, 255], &[2, 4, 0, 0, 0, 1, 2, 3, 4], &[9, 9]] {
            assert!(decode_record(payload).is_err());
        }
    }

    #[test]
    fn policy_parses() {
        assert_eq!("always".parse::<FsyncPolicy>().unwrap(), FsyncPolicy::Always);
        assert_eq!(
            "250ms".parse::<FsyncPolicy>().unwrap(),
            FsyncPolicy::Interval(Duration::from_millis(250))
        );
        assert!("0".parse::<FsyncPolicy>().is_err());
        assert!("sometimes".parse::<FsyncPolicy>().is_err());
    }
}
