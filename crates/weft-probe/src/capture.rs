//! In-process mode: a thread in the instrumented process drains its own rings into a capture
//! file, for programs run without an agent.
//!
//! The file format is deliberately simple (weft-probe must not depend on weft-model; the
//! `weft` tooling converts captures to spans):
//!
//! ```text
//! "WEFTCAP1"                                   8-byte magic
//! chunk*:  u32 kind | u32 len | payload (len bytes) | zero padding to a multiple of 8
//!   kind 1 INFO      u32 pid, u32 0, u32 clock_kind, u32 0, u64 tsc_base, u64 unix_base_ns,
//!                    u64 mult, u64 tsc_hz, then the service name (UTF-8, rest of the payload)
//!   kind 2 REGISTRY  registry descriptors, encoded as in the segment's registry area; a later
//!                    REGISTRY chunk supersedes earlier ones (it is a full snapshot)
//!   kind 3 RECORDS   records back to back, encoded as in the rings (no PAD records)
//!   kind 4 DROPS     u64 records dropped so far (full rings + no ring), cumulative
//! ```
//!
//! Integers are little-endian (captures may move between machines). Records keep raw
//! timestamps; convert with the INFO chunk's calibration (the last INFO chunk wins: the drain
//! writes a refined calibration at the end).

use crate::clock::Calibration;
use crate::consumer::{self, ConsumerError, Record, Segment};
use crate::registry::TracepointInfo;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// Capture magic.
pub const CAPTURE_MAGIC: [u8; 8] = *b"WEFTCAP1";
pub const CHUNK_INFO: u32 = 1;
pub const CHUNK_REGISTRY: u32 = 2;
pub const CHUNK_RECORDS: u32 = 3;
pub const CHUNK_DROPS: u32 = 4;

/// Errors writing or reading captures.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error(transparent)]
    Segment(#[from] ConsumerError),
    #[error("{path}: not a weft capture (bad magic)")]
    Magic { path: PathBuf },
    #[error("{path}: chunk at byte {offset}: {detail}")]
    Chunk { path: PathBuf, offset: usize, detail: String },
}

fn chunk(out: &mut Vec<u8>, kind: u32, payload: &[u8]) {
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
    out.resize(crate::layout::pad8(out.len()), 0);
}

fn info_payload(pid: u32, service: &str, c: &Calibration) -> Vec<u8> {
    let mut p = Vec::with_capacity(48 + service.len());
    p.extend_from_slice(&pid.to_le_bytes());
    p.extend_from_slice(&0u32.to_le_bytes());
    p.extend_from_slice(&c.kind.to_le_bytes());
    p.extend_from_slice(&0u32.to_le_bytes());
    for v in [c.tsc_base, c.unix_base_ns, c.mult, c.tsc_hz] {
        p.extend_from_slice(&v.to_le_bytes());
    }
    p.extend_from_slice(service.as_bytes());
    p
}

fn registry_payload(list: &[TracepointInfo]) -> Vec<u8> {
    let mut p = Vec::new();
    for t in list {
        let clip = |s: &str| s.len().min(u16::MAX as usize);
        let (nl, gl, fl, il) = (clip(&t.name), clip(&t.group), clip(&t.fields), clip(&t.file));
        let len = crate::layout::pad8(crate::layout::DESC_HEADER_SIZE + nl + gl + fl + il);
        let start = p.len();
        p.extend_from_slice(&(len as u32).to_ne_bytes());
        p.extend_from_slice(&t.id.to_ne_bytes());
        p.push(t.level as u8);
        p.push(t.flags);
        for l in [nl, gl, fl, il] {
            p.extend_from_slice(&(l as u16).to_ne_bytes());
        }
        p.extend_from_slice(&0u16.to_ne_bytes());
        p.extend_from_slice(&t.line.to_ne_bytes());
        p.extend_from_slice(&t.name.as_bytes()[..nl]);
        p.extend_from_slice(&t.group.as_bytes()[..gl]);
        p.extend_from_slice(&t.fields.as_bytes()[..fl]);
        p.extend_from_slice(&t.file.as_bytes()[..il]);
        p.resize(start + len, 0);
    }
    p
}

/// Drains the process's own rings into a capture file.
pub struct FileDrain {
    seg: Segment,
    file: std::fs::File,
    path: PathBuf,
    registry_len: usize,
    pub records: u64,
}

impl FileDrain {
    /// Create (truncate) `path` and write the header chunks.
    pub fn create(path: &Path) -> Result<FileDrain, CaptureError> {
        let seg = Segment::own()?;
        let io = |source| CaptureError::Io { path: path.to_path_buf(), source };
        let mut file = std::fs::File::create(path).map_err(io)?;
        let mut out = CAPTURE_MAGIC.to_vec();
        chunk(&mut out, CHUNK_INFO, &info_payload(std::process::id(), &seg.service(), &seg.clock()));
        file.write_all(&out).map_err(io)?;
        Ok(FileDrain { seg, file, path: path.to_path_buf(), registry_len: usize::MAX, records: 0 })
    }

    /// One pass: registry snapshot if it changed, then every pending record.
    pub fn drain_once(&mut self) -> Result<u64, CaptureError> {
        let mut out = Vec::new();
        let reg = self.seg.registry()?;
        if reg.len() != self.registry_len {
            self.registry_len = reg.len();
            chunk(&mut out, CHUNK_REGISTRY, &registry_payload(&reg));
        }
        let mut recs = Vec::new();
        let mut n = 0u64;
        let mut raw = Vec::new();
        let rep = self.seg.drain(|r| {
            encode_record(r, &mut raw);
            recs.extend_from_slice(&raw);
            n += 1;
        });
        for e in &rep.errors {
            tracing::warn!(error = %e, "weft-probe capture: ring skipped");
        }
        if !recs.is_empty() {
            chunk(&mut out, CHUNK_RECORDS, &recs);
        }
        chunk(&mut out, CHUNK_DROPS, &self.seg.stats().dropped().to_le_bytes());
        self.file.write_all(&out).map_err(|source| CaptureError::Io { path: self.path.clone(), source })?;
        self.records += n;
        Ok(n)
    }

    /// Final pass with a refreshed clock calibration; flushes the file.
    pub fn finish(mut self) -> Result<u64, CaptureError> {
        self.drain_once()?;
        let mut out = Vec::new();
        let cal = crate::clock::refine(&self.seg.clock());
        chunk(&mut out, CHUNK_INFO, &info_payload(std::process::id(), &self.seg.service(), &cal));
        let io = |source| CaptureError::Io { path: self.path.clone(), source };
        self.file.write_all(&out).map_err(io)?;
        self.file.sync_data().map_err(io)?;
        Ok(self.records)
    }
}

/// Re-encode a decoded record exactly as the rings hold it.
pub fn encode_record(r: &Record<'_>, out: &mut Vec<u8>) {
    use crate::consumer::{FieldName, FieldValue, RecordKind};
    use crate::layout::*;
    out.clear();
    let kind = match r.kind {
        RecordKind::Event => KIND_EVENT,
        RecordKind::SpanStart => KIND_SPAN_START,
        RecordKind::SpanEnd => KIND_SPAN_END,
        RecordKind::Annotation => KIND_ANNOTATION,
        RecordKind::KeyValue => KIND_KV,
        RecordKind::Endpoint => KIND_ENDPOINT,
    };
    let words = [
        (kind as u64) << 16 | (r.fields.len().min(255) as u64) << 24 | (r.tracepoint as u64) << 32,
        r.timestamp,
        r.tid as u64 | (r.flags as u64) << 32,
        (r.trace_id >> 64) as u64,
        r.trace_id as u64,
        r.span_id,
    ];
    for w in words {
        out.extend_from_slice(&w.to_ne_bytes());
    }
    if r.kind == RecordKind::SpanStart {
        out.extend_from_slice(&r.parent_span_id.to_ne_bytes());
    }
    for f in r.fields.iter().take(255) {
        let (ni, key): (u8, &str) = match f.name {
            FieldName::Index(i) => (i, ""),
            FieldName::Key(k) => (NAME_INLINE, k),
            FieldName::None => (NAME_NONE, ""),
        };
        let (ty, bits, bytes): (u8, u64, &[u8]) = match f.value {
            FieldValue::I64(v) => (TYPE_I64, v as u64, &[]),
            FieldValue::U64(v) => (TYPE_U64, v, &[]),
            FieldValue::F64(v) => (TYPE_F64, v.to_bits(), &[]),
            FieldValue::Bool(v) => (TYPE_BOOL, v as u64, &[]),
            FieldValue::Str(s) => (TYPE_STR, 0, s.as_bytes()),
            FieldValue::Bytes(b) => (TYPE_BYTES, 0, b),
        };
        let scalar = bytes.is_empty() && !matches!(ty, TYPE_STR | TYPE_BYTES);
        let vlen = if scalar { 8 } else { bytes.len() };
        let w = ty as u64 | (ni as u64) << 8 | (key.len() as u64 & 0xffff) << 16 | (vlen as u64) << 32;
        out.extend_from_slice(&w.to_ne_bytes());
        if ni == NAME_INLINE {
            out.extend_from_slice(key.as_bytes());
            out.resize(pad8(out.len()), 0);
        }
        if scalar {
            out.extend_from_slice(&bits.to_ne_bytes());
        } else {
            out.extend_from_slice(bytes);
            out.resize(pad8(out.len()), 0);
        }
    }
    let len = out.len() as u64;
    let w0 = u64::from_ne_bytes(out[..8].try_into().unwrap_or([0; 8])) | (len & 0xffff);
    out[..8].copy_from_slice(&w0.to_ne_bytes());
}

/// A background drain thread ([`start`]); stop it with [`DrainThread::stop`].
pub struct DrainThread {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Result<u64, CaptureError>>>,
}

/// Start draining the process's rings into `path` every `interval`.
pub fn start(path: &Path, interval: Duration) -> Result<DrainThread, CaptureError> {
    let mut d = FileDrain::create(path)?;
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let handle = std::thread::Builder::new()
        .name("weft-probe-drain".into())
        .spawn(move || {
            while !s2.load(Ordering::Acquire) {
                d.drain_once()?;
                std::thread::park_timeout(interval);
            }
            d.finish()
        })
        .map_err(|source| CaptureError::Io { path: path.to_path_buf(), source })?;
    Ok(DrainThread { stop, handle: Some(handle) })
}

impl DrainThread {
    /// Stop after a final drain; returns the records written.
    pub fn stop(mut self) -> Result<u64, CaptureError> {
        self.stop.store(true, Ordering::Release);
        match self.handle.take() {
            Some(h) => {
                h.thread().unpark();
                h.join().unwrap_or_else(|_| {
                    Err(CaptureError::Io {
                        path: PathBuf::from("<drain thread>"),
                        source: io::Error::other("panicked"),
                    })
                })
            }
            None => Ok(0),
        }
    }
}

impl Drop for DrainThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

/// A capture read back.
#[derive(Debug, Default)]
pub struct Capture {
    pub pid: u32,
    pub service: String,
    pub clock: Option<Calibration>,
    pub tracepoints: Vec<TracepointInfo>,
    pub dropped: u64,
    record_chunks: Vec<Vec<u8>>,
}

impl Capture {
    /// Parse a capture file.
    pub fn read(path: &Path) -> Result<Capture, CaptureError> {
        let bytes =
            std::fs::read(path).map_err(|source| CaptureError::Io { path: path.to_path_buf(), source })?;
        Capture::parse(&bytes, path)
    }

    /// Parse capture bytes (`path` names the source in errors).
    pub fn parse(bytes: &[u8], path: &Path) -> Result<Capture, CaptureError> {
        if bytes.get(..8) != Some(&CAPTURE_MAGIC[..]) {
            return Err(CaptureError::Magic { path: path.to_path_buf() });
        }
        let mut c = Capture::default();
        let mut off = 8;
        while off < bytes.len() {
            let bad = |detail: String| CaptureError::Chunk { path: path.to_path_buf(), offset: off, detail };
            let h = bytes.get(off..off + 8).ok_or_else(|| bad("truncated chunk header".into()))?;
            let kind = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
            let len = u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as usize;
            let p = bytes
                .get(off + 8..off + 8 + len)
                .ok_or_else(|| bad(format!("payload of {len} bytes truncated")))?;
            match kind {
                CHUNK_INFO => {
                    if p.len() < 48 {
                        return Err(bad("INFO shorter than 48 bytes".into()));
                    }
                    let u32le = |i: usize| u32::from_le_bytes([p[i], p[i + 1], p[i + 2], p[i + 3]]);
                    let u64le = |i: usize| u64::from_le_bytes(p[i..i + 8].try_into().unwrap_or([0; 8]));
                    c.pid = u32le(0);
                    c.clock = Some(Calibration {
                        kind: u32le(8),
                        tsc_base: u64le(16),
                        unix_base_ns: u64le(24),
                        mult: u64le(32),
                        tsc_hz: u64le(40),
                    });
                    c.service = String::from_utf8_lossy(&p[48..]).into_owned();
                }
                CHUNK_REGISTRY => {
                    c.tracepoints = consumer::decode_registry(p)
                        .map_err(|(o, d)| bad(format!("registry descriptor at byte {o}: {d}")))?;
                }
                CHUNK_RECORDS => c.record_chunks.push(p.to_vec()),
                CHUNK_DROPS => {
                    let v = p.get(..8).ok_or_else(|| bad("DROPS shorter than 8 bytes".into()))?;
                    c.dropped = u64::from_le_bytes(v.try_into().unwrap_or([0; 8]));
                }
                other => return Err(bad(format!("unknown chunk kind {other}"))),
            }
            off = crate::layout::pad8(off + 8 + len);
        }
        Ok(c)
    }

    /// Every record, decoded (errors name the chunk and byte).
    pub fn records(&self) -> impl Iterator<Item = Result<Record<'_>, (usize, usize, consumer::RecordError)>> {
        self.record_chunks.iter().enumerate().flat_map(|(ci, ch)| {
            let mut off = 0usize;
            std::iter::from_fn(move || {
                if off >= ch.len() {
                    return None;
                }
                let len =
                    ch.get(off..off + 2).map(|b| u16::from_ne_bytes([b[0], b[1]]) as usize).unwrap_or(0);
                if len < 8 || off + len > ch.len() {
                    let at = off;
                    off = ch.len();
                    return Some(Err((ci, at, consumer::RecordError::Length { len, avail: ch.len() - at })));
                }
                let at = off;
                off += len;
                Some(consumer::decode_record(&ch[at..at + len]).map_err(|e| (ci, at, e)))
            })
        })
    }

    /// Name of a tracepoint id.
    pub fn name_of(&self, id: u32) -> Option<&str> {
        self.tracepoints.iter().find(|t| t.id == id).map(|t| t.name.as_str())
    }
}
