//! The bounded on-disk spool between the drain loop and the sender (store-and-forward).
//!
//! Every batch the agent builds is appended here first and sent from here, in order; a batch
//! leaves the spool only when the collector acknowledged it (or refused it as invalid). So a
//! collector outage, an agent restart or both lose nothing that fits in the spool — Scribe's
//! guarantee — and the agent can release the probe rings as soon as a batch is appended.
//!
//! # Files
//!
//! `DIR/<16-digit id>.chunk` files, oldest first, each a sequence of records:
//!
//! | off | type | field |
//! |---|---|---|
//! | 0 | u32 LE | magic `"WSP1"` (payload gzip-compressed) or `"WSP0"` (not compressed) |
//! | 4 | u32 LE | payload length |
//! | 8 | u32 LE | CRC-32 of bytes 12.. (span count, sequence number, payload) |
//! | 12 | u32 LE | spans in the batch |
//! | 16 | u64 LE | sequence number |
//! | 24 | … | payload (an OTLP `ExportTraceServiceRequest`) |
//!
//! `DIR/cursor` holds `v1 <chunk> <offset> <next seq>`: the first record not acknowledged yet
//! and the next sequence number (replaced atomically after each acknowledgement). On open, records from the cursor on are checked; a
//! torn or corrupt record cuts its chunk there (counted), so the sender never sees garbage.
//!
//! # Bound
//!
//! The chunk files never exceed [`SpoolConfig::limit_bytes`] together. When a new batch would
//! not fit, [`FullPolicy`] decides: drop the oldest chunk (its unacknowledged batches and spans
//! are counted as dropped) or drop the new batch (counted). Acknowledged data is never needed
//! again, so nothing the collector acknowledged can be lost by either policy.
//!
//! Durability: appends are plain `write`s (they survive an agent crash through the page cache);
//! [`SpoolConfig::fsync`] adds `fdatasync` per append and per cursor update for machine crashes.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Record magic: payload gzip-compressed (`"WSP1"`).
const MAGIC: u32 = 0x3150_5357;
/// Record magic: payload not compressed (`"WSP0"`).
const MAGIC_RAW: u32 = 0x3050_5357;
/// Bytes of a record header.
pub const RECORD_HEADER: usize = 24;

/// What to drop when the spool is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FullPolicy {
    /// Delete the oldest chunk (keep the newest data).
    DropOldest,
    /// Refuse the new batch (keep the oldest data).
    DropNewest,
}

impl std::str::FromStr for FullPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "drop-oldest" | "oldest" => Ok(FullPolicy::DropOldest),
            "drop-newest" | "newest" => Ok(FullPolicy::DropNewest),
            _ => Err(format!("{s:?}: expected drop-oldest or drop-newest")),
        }
    }
}

/// Spool settings.
#[derive(Debug, Clone)]
pub struct SpoolConfig {
    pub dir: PathBuf,
    /// Bytes on disk at most (all chunk files).
    pub limit_bytes: u64,
    /// Bytes per chunk file (a quarter of the limit at most).
    pub chunk_bytes: u64,
    pub fsync: bool,
    pub policy: FullPolicy,
}

impl SpoolConfig {
    pub fn new(dir: impl Into<PathBuf>, limit_bytes: u64) -> SpoolConfig {
        let limit_bytes = limit_bytes.max(4096);
        SpoolConfig {
            dir: dir.into(),
            limit_bytes,
            chunk_bytes: (limit_bytes / 8).clamp(1024, 8 << 20),
            fsync: false,
            policy: FullPolicy::DropOldest,
        }
    }
}

/// Errors of the spool (I/O, naming the file).
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error("spool {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

/// Spool counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpoolStats {
    /// Bytes on disk now.
    pub bytes: u64,
    /// Largest `bytes` ever reached.
    pub max_bytes: u64,
    pub limit_bytes: u64,
    /// Batches and spans waiting for an acknowledgement.
    pub pending_batches: u64,
    pub pending_spans: u64,
    pub appended_batches: u64,
    pub appended_spans: u64,
    pub acked_batches: u64,
    pub acked_spans: u64,
    /// Dropped because of the bound.
    pub dropped_batches: u64,
    pub dropped_spans: u64,
    /// Records cut at open (torn tail) or found corrupt while reading.
    pub corrupt_records: u64,
    pub corrupt_bytes: u64,
}

/// A batch read from the spool (to send, then [`Spool::ack`]).
#[derive(Debug, Clone)]
pub struct Batch {
    pub seq: u64,
    pub spans: u32,
    /// The payload is gzip-compressed.
    pub gzip: bool,
    pub payload: Vec<u8>,
    chunk: u64,
    offset: u64,
    next: u64,
}

/// What [`Spool::append`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    Stored {
        seq: u64,
    },
    /// The new batch was dropped (spool full with `DropNewest`, or larger than half the limit).
    Dropped,
}

#[derive(Debug, Clone, Copy)]
struct Chunk {
    id: u64,
    size: u64,
}

struct Inner {
    cfg: SpoolConfig,
    chunks: VecDeque<Chunk>,
    /// Appends go to `chunks.back()` while this is set.
    writer: Option<File>,
    reader: Option<(u64, File)>,
    read_chunk: u64,
    read_offset: u64,
    next_seq: u64,
    stats: SpoolStats,
    closed: bool,
}

/// The spool (shared by the drain loop and the sender).
pub struct Spool {
    inner: Mutex<Inner>,
    cv: Condvar,
}

fn chunk_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:016}.chunk"))
}

struct Header {
    gzip: bool,
    len: u32,
    crc: u32,
    spans: u32,
    seq: u64,
}

fn parse_header(h: &[u8; RECORD_HEADER]) -> Option<Header> {
    let u32_at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
    let gzip = match u32_at(0) {
        MAGIC => true,
        MAGIC_RAW => false,
        _ => return None,
    };
    let mut s = [0u8; 8];
    s.copy_from_slice(&h[16..24]);
    Some(Header { gzip, len: u32_at(4), crc: u32_at(8), spans: u32_at(12), seq: u64::from_le_bytes(s) })
}

fn crc_of(spans: u32, seq: u64, payload: &[u8]) -> u32 {
    let mut c = crc32fast::Hasher::new();
    c.update(&spans.to_le_bytes());
    c.update(&seq.to_le_bytes());
    c.update(payload);
    c.finalize()
}

/// Encode one record (header + payload).
pub fn encode_record(seq: u64, spans: u32, gzip: bool, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(RECORD_HEADER + payload.len());
    v.extend_from_slice(&(if gzip { MAGIC } else { MAGIC_RAW }).to_le_bytes());
    v.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    v.extend_from_slice(&crc_of(spans, seq, payload).to_le_bytes());
    v.extend_from_slice(&spans.to_le_bytes());
    v.extend_from_slice(&seq.to_le_bytes());
    v.extend_from_slice(payload);
    v
}

/// A record read from a chunk: sequence number, span count, gzip, payload, next offset.
type RawRecord = (u64, u32, bool, Vec<u8>, u64);

/// Read and check the record at `off` of a chunk of `size` bytes: `Ok(Some(record))`,
/// `Ok(None)` at the end, `Err(reason)` when torn or corrupt.
fn read_record(f: &File, off: u64, size: u64, max_len: u64) -> Result<Option<RawRecord>, String> {
    if off >= size {
        return Ok(None);
    }
    if size - off < RECORD_HEADER as u64 {
        return Err(format!("{} bytes at offset {off}: shorter than a record header", size - off));
    }
    let mut h = [0u8; RECORD_HEADER];
    f.read_exact_at(&mut h, off).map_err(|e| format!("reading the header at offset {off}: {e}"))?;
    let hd = parse_header(&h).ok_or_else(|| format!("bad magic at offset {off}"))?;
    let end = off + RECORD_HEADER as u64 + hd.len as u64;
    if hd.len as u64 > max_len || end > size {
        return Err(format!("record at offset {off}: length {} runs past the chunk ({size} bytes)", hd.len));
    }
    let mut payload = vec![0u8; hd.len as usize];
    f.read_exact_at(&mut payload, off + RECORD_HEADER as u64)
        .map_err(|e| format!("reading the payload at offset {off}: {e}"))?;
    if crc_of(hd.spans, hd.seq, &payload) != hd.crc {
        return Err(format!("record at offset {off}: CRC mismatch"));
    }
    Ok(Some((hd.seq, hd.spans, hd.gzip, payload, end)))
}

impl Spool {
    /// Open (or create) the spool in `cfg.dir` (mode 0700), checking what is pending.
    pub fn open(cfg: SpoolConfig) -> Result<Spool, SpoolError> {
        let dir = cfg.dir.clone();
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| SpoolError::Io { path, source }
        };
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir).map_err(io(&dir))?;
        let mut ids: Vec<u64> = std::fs::read_dir(&dir)
            .map_err(io(&dir))?
            .filter_map(Result::ok)
            .filter_map(|e| {
                let n = e.file_name();
                let n = n.to_str()?;
                n.strip_suffix(".chunk")?.parse::<u64>().ok()
            })
            .collect();
        ids.sort_unstable();
        let (mut read_chunk, mut read_offset, mut next_seq) = (0u64, 0u64, 0u64);
        if let Ok(c) = std::fs::read_to_string(dir.join("cursor")) {
            let p: Vec<&str> = c.split_whitespace().collect();
            if let (Some(&"v1"), Some(a), Some(b)) = (p.first(), p.get(1), p.get(2))
                && let (Ok(a), Ok(b)) = (a.parse(), b.parse())
            {
                (read_chunk, read_offset) = (a, b);
                next_seq = p.get(3).and_then(|s| s.parse().ok()).unwrap_or(0);
            }
        }
        // chunks before the cursor's were fully acknowledged: delete leftovers
        for &id in ids.iter().filter(|&&id| id < read_chunk) {
            let _ = std::fs::remove_file(chunk_path(&dir, id));
        }
        ids.retain(|&id| id >= read_chunk);
        if ids.first() != Some(&read_chunk) {
            // The cursor's chunk is gone (fully acknowledged): read from the next one. With
            // none left, keep its id, so the next chunk gets a higher one — a reused id would
            // let the old cursor offset skip the new chunk's records.
            read_chunk = ids.first().copied().unwrap_or(read_chunk);
            read_offset = 0;
        }
        let mut stats = SpoolStats { limit_bytes: cfg.limit_bytes, ..SpoolStats::default() };
        let mut chunks = VecDeque::new();
        for &id in &ids {
            let path = chunk_path(&dir, id);
            let f = OpenOptions::new().read(true).write(true).open(&path).map_err(io(&path))?;
            let size = f.metadata().map_err(io(&path))?.len();
            let mut off = if id == read_chunk { read_offset.min(size) } else { 0 };
            loop {
                match read_record(&f, off, size, cfg.limit_bytes) {
                    Ok(Some((seq, spans, _, _, next))) => {
                        stats.pending_batches += 1;
                        stats.pending_spans += spans as u64;
                        next_seq = next_seq.max(seq + 1);
                        off = next;
                    }
                    Ok(None) => break,
                    Err(why) => {
                        tracing::warn!(file = %path.display(), %why, cut = size - off, "spool: cutting a torn or corrupt chunk tail");
                        stats.corrupt_records += 1;
                        stats.corrupt_bytes += size - off;
                        f.set_len(off).map_err(io(&path))?;
                        break;
                    }
                }
            }
            let size = f.metadata().map_err(io(&path))?.len();
            chunks.push_back(Chunk { id, size });
        }
        stats.bytes = chunks.iter().map(|c| c.size).sum();
        stats.max_bytes = stats.bytes;
        read_offset = read_offset.min(chunks.front().map_or(0, |c| c.size));
        Ok(Spool {
            inner: Mutex::new(Inner {
                cfg,
                chunks,
                writer: None,
                reader: None,
                read_chunk,
                read_offset,
                next_seq,
                stats,
                closed: false,
            }),
            cv: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn stats(&self) -> SpoolStats {
        self.lock().stats
    }

    pub fn dir(&self) -> PathBuf {
        self.lock().cfg.dir.clone()
    }

    /// Append a batch of `spans` spans (`gzip`: the payload is gzip-compressed). Never blocks
    /// on the sender.
    pub fn append(&self, payload: &[u8], spans: u32, gzip: bool) -> Result<Appended, SpoolError> {
        let mut g = self.lock();
        let rec_len = (RECORD_HEADER + payload.len()) as u64;
        if rec_len > g.cfg.limit_bytes / 2 {
            tracing::warn!(
                bytes = rec_len,
                limit = g.cfg.limit_bytes,
                "spool: batch larger than half the spool dropped"
            );
            g.stats.dropped_batches += 1;
            g.stats.dropped_spans += spans as u64;
            return Ok(Appended::Dropped);
        }
        while g.stats.bytes + rec_len > g.cfg.limit_bytes {
            match g.cfg.policy {
                FullPolicy::DropNewest => {
                    g.stats.dropped_batches += 1;
                    g.stats.dropped_spans += spans as u64;
                    return Ok(Appended::Dropped);
                }
                FullPolicy::DropOldest => {
                    if g.chunks.len() <= 1 && g.writer.is_some() {
                        // only the write chunk is left: seal it so it can go
                        g.writer = None;
                    }
                    if !g.drop_oldest_chunk()? {
                        g.stats.dropped_batches += 1;
                        g.stats.dropped_spans += spans as u64;
                        return Ok(Appended::Dropped);
                    }
                }
            }
        }
        let need_new = match (&g.writer, g.chunks.back()) {
            (Some(_), Some(c)) => c.size + rec_len > g.cfg.chunk_bytes && c.size > 0,
            _ => true,
        };
        if need_new {
            // Chunk ids only grow: the cursor on disk may still name the last removed chunk.
            let id = g.chunks.back().map_or(g.read_chunk + 1, |c| c.id + 1);
            let path = chunk_path(&g.cfg.dir, id);
            let f = OpenOptions::new()
                .create(true)
                .truncate(true)
                .write(true)
                .mode(0o600)
                .open(&path)
                .map_err(|source| SpoolError::Io { path: path.clone(), source })?;
            if g.chunks.is_empty() {
                g.read_chunk = id;
                g.read_offset = 0;
            }
            g.chunks.push_back(Chunk { id, size: 0 });
            g.writer = Some(f);
        }
        let seq = g.next_seq;
        let rec = encode_record(seq, spans, gzip, payload);
        let (id, fsync) = (g.chunks.back().map_or(0, |c| c.id), g.cfg.fsync);
        let path = chunk_path(&g.cfg.dir, id);
        let res = match g.writer.as_mut() {
            Some(w) => w.write_all(&rec).and_then(|_| if fsync { w.sync_data() } else { Ok(()) }),
            None => Err(std::io::Error::other("no write chunk")),
        };
        if let Err(source) = res {
            // a partial write is cut when the spool is reopened; stop appending to this chunk
            g.writer = None;
            return Err(SpoolError::Io { path, source });
        }
        g.next_seq += 1;
        if let Some(c) = g.chunks.back_mut() {
            c.size += rec_len;
        }
        let s = &mut g.stats;
        s.bytes += rec_len;
        s.max_bytes = s.max_bytes.max(s.bytes);
        s.appended_batches += 1;
        s.appended_spans += spans as u64;
        s.pending_batches += 1;
        s.pending_spans += spans as u64;
        drop(g);
        self.cv.notify_all();
        Ok(Appended::Stored { seq })
    }

    /// The oldest batch not acknowledged yet, waiting up to `timeout` for one. Returns the same
    /// batch until it is acknowledged.
    pub fn next(&self, timeout: Duration) -> Result<Option<Batch>, SpoolError> {
        let deadline = std::time::Instant::now() + timeout;
        let mut g = self.lock();
        loop {
            if g.closed {
                return Ok(None);
            }
            if let Some(b) = g.read_next()? {
                return Ok(Some(b));
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            g = self.cv.wait_timeout(g, deadline - now).map(|(g, _)| g).unwrap_or_else(|e| e.into_inner().0);
        }
    }

    /// The collector acknowledged (or permanently refused) `b`: release it.
    pub fn ack(&self, b: &Batch) -> Result<(), SpoolError> {
        let mut g = self.lock();
        if g.read_chunk != b.chunk || g.read_offset != b.offset {
            // Its chunk was dropped (and counted) while the batch was being sent: it was
            // delivered after all, so move it from dropped to acknowledged.
            if b.chunk < g.read_chunk {
                let s = &mut g.stats;
                s.dropped_batches = s.dropped_batches.saturating_sub(1);
                s.dropped_spans = s.dropped_spans.saturating_sub(b.spans as u64);
                s.acked_batches += 1;
                s.acked_spans += b.spans as u64;
            }
            return Ok(());
        }
        g.read_offset = b.next;
        g.stats.acked_batches += 1;
        g.stats.acked_spans += b.spans as u64;
        g.stats.pending_batches = g.stats.pending_batches.saturating_sub(1);
        g.stats.pending_spans = g.stats.pending_spans.saturating_sub(b.spans as u64);
        g.write_cursor()
    }

    /// Wake waiters and make [`Spool::next`] return `None` (shutdown).
    pub fn close(&self) {
        self.lock().closed = true;
        self.cv.notify_all();
    }
}

impl Inner {
    fn write_cursor(&self) -> Result<(), SpoolError> {
        let tmp = self.cfg.dir.join("cursor.tmp");
        let path = self.cfg.dir.join("cursor");
        let io = |source| SpoolError::Io { path: tmp.clone(), source };
        let mut f =
            OpenOptions::new().create(true).truncate(true).write(true).mode(0o600).open(&tmp).map_err(io)?;
        f.write_all(format!("v1 {} {} {}\n", self.read_chunk, self.read_offset, self.next_seq).as_bytes())
            .map_err(io)?;
        if self.cfg.fsync {
            f.sync_data().map_err(io)?;
        }
        std::fs::rename(&tmp, &path).map_err(|source| SpoolError::Io { path, source })
    }

    /// Is chunk `id` still being appended to?
    fn is_write_chunk(&self, id: u64) -> bool {
        self.writer.is_some() && self.chunks.back().is_some_and(|c| c.id == id)
    }

    fn read_next(&mut self) -> Result<Option<Batch>, SpoolError> {
        loop {
            let Some(front) = self.chunks.front().copied() else { return Ok(None) };
            if front.id != self.read_chunk {
                self.read_chunk = front.id;
                self.read_offset = 0;
            }
            let path = chunk_path(&self.cfg.dir, front.id);
            if self.reader.as_ref().is_none_or(|(id, _)| *id != front.id) {
                let f = File::open(&path).map_err(|source| SpoolError::Io { path: path.clone(), source })?;
                self.reader = Some((front.id, f));
            }
            let Some((_, f)) = self.reader.as_ref() else { return Ok(None) };
            match read_record(f, self.read_offset, front.size, self.cfg.limit_bytes) {
                Ok(Some((seq, spans, gzip, payload, next))) => {
                    return Ok(Some(Batch {
                        seq,
                        spans,
                        gzip,
                        payload,
                        chunk: front.id,
                        offset: self.read_offset,
                        next,
                    }));
                }
                Ok(None) => {
                    if self.is_write_chunk(front.id) {
                        return Ok(None);
                    }
                    // fully acknowledged and sealed
                    self.remove_front()?;
                    self.write_cursor()?;
                }
                Err(why) => {
                    tracing::error!(file = %path.display(), %why, "spool: skipping the rest of a corrupt chunk");
                    self.stats.corrupt_records += 1;
                    self.stats.corrupt_bytes += front.size - self.read_offset;
                    let (b, s) = self.count_from(front.id, self.read_offset, front.size);
                    self.stats.pending_batches = self.stats.pending_batches.saturating_sub(b);
                    self.stats.pending_spans = self.stats.pending_spans.saturating_sub(s);
                    if self.is_write_chunk(front.id) {
                        self.writer = None;
                    }
                    self.remove_front()?;
                    self.write_cursor()?;
                }
            }
        }
    }

    fn remove_front(&mut self) -> Result<(), SpoolError> {
        if let Some(c) = self.chunks.pop_front() {
            let path = chunk_path(&self.cfg.dir, c.id);
            if self.reader.as_ref().is_some_and(|(id, _)| *id == c.id) {
                self.reader = None;
            }
            if self.chunks.is_empty() {
                self.writer = None;
            }
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => return Err(SpoolError::Io { path, source }),
            }
            self.stats.bytes = self.stats.bytes.saturating_sub(c.size);
            let next = self.chunks.front().map_or(c.id + 1, |n| n.id);
            self.read_chunk = next;
            self.read_offset = 0;
        }
        Ok(())
    }

    /// Batches and spans in a chunk from `off` (readable prefix only).
    fn count_from(&self, id: u64, mut off: u64, size: u64) -> (u64, u64) {
        let Ok(f) = File::open(chunk_path(&self.cfg.dir, id)) else { return (0, 0) };
        let (mut b, mut s) = (0, 0);
        while let Ok(Some((_, spans, _, _, next))) = read_record(&f, off, size, self.cfg.limit_bytes) {
            b += 1;
            s += spans as u64;
            off = next;
        }
        (b, s)
    }

    /// Drop the oldest sealed chunk, counting what was pending in it. `false` when none can go.
    fn drop_oldest_chunk(&mut self) -> Result<bool, SpoolError> {
        let Some(front) = self.chunks.front().copied() else { return Ok(false) };
        if self.is_write_chunk(front.id) {
            return Ok(false);
        }
        let from = if front.id == self.read_chunk { self.read_offset } else { 0 };
        let (b, s) = self.count_from(front.id, from, front.size);
        tracing::warn!(chunk = front.id, batches = b, spans = s, "spool full: dropping the oldest chunk");
        self.stats.dropped_batches += b;
        self.stats.dropped_spans += s;
        self.stats.pending_batches = self.stats.pending_batches.saturating_sub(b);
        self.stats.pending_spans = self.stats.pending_spans.saturating_sub(s);
        self.remove_front()?;
        self.write_cursor()?;
        Ok(true)
    }
}
