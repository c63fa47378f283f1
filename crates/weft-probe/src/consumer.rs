//! The consumer (agent) side of a segment: attach, read the registry, drain the rings, read
//! statistics and switch tracepoints. Layout: [`crate::layout`].
//!
//! Two ways to consume: [`Segment::drain`] reads and releases everything at once; an agent that
//! must survive its own restart reads with [`Segment::read_ring`] (nothing is released) and
//! stores its positions with [`Segment::commit`] — `tail` (what the producer may overwrite) and
//! the bookmark `mark` (what was delivered), both kept in the segment ([`crate::layout`]).
//! [`Segment::open_shared`] attaches without the consumer lock, for control and inspection
//! while another consumer drains.
//!
//! Everything read from the segment is untrusted: a corrupt header is rejected at
//! [`Segment::open`]; a corrupt ring or record is reported as an error naming the file, ring
//! and byte position, the rest of that ring is skipped (its tail jumps to its head, so the
//! producer can keep writing), and draining goes on with the other rings. Nothing in a segment
//! can make the consumer read outside the mapping or panic.
//!
//! ```no_run
//! use weft_probe::consumer::{self, Segment};
//! for path in consumer::discover(&weft_probe::layout::default_dir())? {
//!     let mut seg = Segment::open(&path)?;
//!     let tps = seg.registry()?;
//!     let clock = seg.clock();
//!     let report = seg.drain(|rec| {
//!         let name = tps.iter().find(|t| t.id == rec.tracepoint).map(|t| t.name.as_str());
//!         println!("{:?} {:?} at {} ns", rec.kind, name, clock.to_unix_ns(rec.timestamp));
//!     });
//!     for e in &report.errors { eprintln!("{e}"); }
//!     seg.switch(&"group:blocker".parse()?, weft_probe::Op::Enable)?;
//!     if !seg.producer_alive() { seg.remove()?; }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::clock::Calibration;
use crate::layout::*;
use crate::mem::{Map, futex_wait, futex_wake};
use crate::registry::{Op, TracepointInfo};
use crate::select::Selector;
use crate::tracepoint::Level;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Errors attaching to or reading a segment.
#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: not a weft probe segment (magic {found:02x?} at offset 0)")]
    Magic { path: PathBuf, found: [u8; 8] },
    #[error("{path}: segment layout version {found}, this build reads version {VERSION}")]
    Version { path: PathBuf, found: u32 },
    #[error("{path}: corrupt header: field {field} at offset {offset}: {detail}")]
    Header { path: PathBuf, field: &'static str, offset: usize, detail: String },
    #[error("{path}: another consumer is attached (flock held)")]
    Busy { path: PathBuf },
    #[error("{path}: registry descriptor at byte {offset} of the registry area: {detail}")]
    Registry { path: PathBuf, offset: usize, detail: String },
    #[error("{path}: ring {ring}: {detail}")]
    Ring { path: PathBuf, ring: usize, detail: String },
    #[error("{path}: ring {ring}, record at stream byte {pos}: {source}")]
    Record { path: PathBuf, ring: usize, pos: u64, source: RecordError },
    #[error("{path}: tracepoint id {id} is outside the control array (capacity {capacity})")]
    Id { path: PathBuf, id: u32, capacity: u32 },
    #[error("{path}: live-query mailbox: {detail}")]
    Mailbox { path: PathBuf, detail: String },
}

/// A record that does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("record shorter than its {RECORD_HEADER_SIZE}-byte header ({0} bytes)")]
    Short(usize),
    #[error("length field {len} is not a multiple of 8 or exceeds the {avail} bytes available")]
    Length { len: usize, avail: usize },
    #[error("unknown record kind {0}")]
    Kind(u8),
    #[error("field {index} at byte {offset}: {detail}")]
    Field { index: usize, offset: usize, detail: &'static str },
    #[error("{extra} bytes after the last of {nfields} fields")]
    Trailing { nfields: u8, extra: usize },
}

/// Record kinds ([`crate::layout`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    Event,
    SpanStart,
    SpanEnd,
    Annotation,
    KeyValue,
    Endpoint,
}

impl RecordKind {
    fn from_u8(k: u8) -> Option<RecordKind> {
        Some(match k {
            KIND_EVENT => RecordKind::Event,
            KIND_SPAN_START => RecordKind::SpanStart,
            KIND_SPAN_END => RecordKind::SpanEnd,
            KIND_ANNOTATION => RecordKind::Annotation,
            KIND_KV => RecordKind::KeyValue,
            KIND_ENDPOINT => RecordKind::Endpoint,
            _ => return None,
        })
    }
}

/// A field's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldName<'a> {
    /// Position in the tracepoint's field spec ([`TracepointInfo::field_names`]).
    Index(u8),
    /// An inline key.
    Key(&'a str),
    /// Unnamed (an annotation's text).
    None,
}

/// A field's value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FieldValue<'a> {
    I64(i64),
    U64(u64),
    F64(f64),
    Bool(bool),
    Str(&'a str),
    Bytes(&'a [u8]),
}

/// One decoded field.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Field<'a> {
    pub name: FieldName<'a>,
    pub value: FieldValue<'a>,
}

impl<'a> Field<'a> {
    /// The name as text, resolving indices through `names` (`"field<i>"` when out of range).
    pub fn name_in(&self, names: &'a [String]) -> std::borrow::Cow<'a, str> {
        match self.name {
            FieldName::Key(k) => k.into(),
            FieldName::Index(i) => match names.get(i as usize) {
                Some(n) => n.as_str().into(),
                None => format!("field{i}").into(),
            },
            FieldName::None => "".into(),
        }
    }
}

/// A decoded, validated record (borrowing the consumer's copy).
#[derive(Debug, Clone, PartialEq)]
pub struct Record<'a> {
    pub kind: RecordKind,
    pub tracepoint: u32,
    /// Raw clock value; convert with [`Segment::clock`].
    pub timestamp: u64,
    /// OS thread id of the writer.
    pub tid: u32,
    pub flags: u32,
    /// 0 = none.
    pub trace_id: u128,
    /// 0 = none.
    pub span_id: u64,
    /// SPAN_START only: the parent span id (0 = root).
    pub parent_span_id: u64,
    pub fields: Vec<Field<'a>>,
}

impl Record<'_> {
    /// SPAN_START: the span kind.
    pub fn span_kind(&self) -> crate::SpanKind {
        crate::SpanKind::from_u8((self.flags & 0xff) as u8).unwrap_or_default()
    }

    /// SPAN_START: was the parent extracted from a remote carrier?
    pub fn remote_parent(&self) -> bool {
        self.flags & RFLAG_REMOTE_PARENT != 0
    }

    /// The first field with this inline key or spec name.
    pub fn field(&self, name: &str, names: &[String]) -> Option<FieldValue<'_>> {
        self.fields.iter().find(|f| f.name_in(names) == name).map(|f| f.value)
    }
}

fn rd_u64(b: &[u8], off: usize) -> Option<u64> {
    b.get(off..off.checked_add(8)?).map(|s| u64::from_ne_bytes(s.try_into().unwrap_or([0; 8])))
}

/// Decode one record (exactly `bytes.len()` bytes; the length field must match). Used by the
/// drain, the capture reader and the fuzz target.
pub fn decode_record(bytes: &[u8]) -> Result<Record<'_>, RecordError> {
    if bytes.len() < RECORD_HEADER_SIZE {
        return Err(RecordError::Short(bytes.len()));
    }
    let w0 = rd_u64(bytes, 0).ok_or(RecordError::Short(bytes.len()))?;
    let len = (w0 & 0xffff) as usize;
    if len != bytes.len() || !len.is_multiple_of(8) {
        return Err(RecordError::Length { len, avail: bytes.len() });
    }
    let kind_b = (w0 >> 16) as u8;
    let kind = RecordKind::from_u8(kind_b).ok_or(RecordError::Kind(kind_b))?;
    let nfields = (w0 >> 24) as u8;
    let w = |i: usize| rd_u64(bytes, i * 8).unwrap_or(0);
    let w2 = w(2);
    let mut rec = Record {
        kind,
        tracepoint: (w0 >> 32) as u32,
        timestamp: w(1),
        tid: w2 as u32,
        flags: (w2 >> 32) as u32,
        trace_id: ((w(3) as u128) << 64) | w(4) as u128,
        span_id: w(5),
        parent_span_id: 0,
        fields: Vec::with_capacity(nfields as usize),
    };
    let mut off = RECORD_HEADER_SIZE;
    if kind == RecordKind::SpanStart {
        rec.parent_span_id = rd_u64(bytes, off).ok_or(RecordError::Field {
            index: 0,
            offset: off,
            detail: "missing parent span id",
        })?;
        off += 8;
    }
    for index in 0..nfields as usize {
        let ferr = |detail| RecordError::Field { index, offset: off, detail };
        let fw = rd_u64(bytes, off).ok_or(ferr("truncated field word"))?;
        let ty = fw as u8;
        let name_index = (fw >> 8) as u8;
        let key_len = ((fw >> 16) & 0xffff) as usize;
        let value_len = (fw >> 32) as usize;
        let mut p = off + 8;
        let name = match name_index {
            NAME_INLINE => {
                let kb = bytes.get(p..p + key_len).ok_or(ferr("key runs past the record"))?;
                let k = std::str::from_utf8(kb).map_err(|_| ferr("key is not UTF-8"))?;
                p += pad8(key_len);
                FieldName::Key(k)
            }
            NAME_NONE => FieldName::None,
            i => FieldName::Index(i),
        };
        if name_index != NAME_INLINE && key_len != 0 {
            return Err(ferr("key length without an inline key"));
        }
        let value = match ty {
            TYPE_I64 | TYPE_U64 | TYPE_F64 | TYPE_BOOL => {
                if value_len != 8 {
                    return Err(ferr("scalar with a length other than 8"));
                }
                let v = rd_u64(bytes, p).ok_or(ferr("scalar runs past the record"))?;
                p += 8;
                match ty {
                    TYPE_I64 => FieldValue::I64(v as i64),
                    TYPE_U64 => FieldValue::U64(v),
                    TYPE_F64 => FieldValue::F64(f64::from_bits(v)),
                    _ => match v {
                        0 => FieldValue::Bool(false),
                        1 => FieldValue::Bool(true),
                        _ => return Err(ferr("bool other than 0 or 1")),
                    },
                }
            }
            TYPE_STR | TYPE_BYTES => {
                let end = p.checked_add(value_len).ok_or(ferr("length overflow"))?;
                let vb = bytes.get(p..end).ok_or(ferr("value runs past the record"))?;
                p = p.checked_add(pad8(value_len)).ok_or(ferr("length overflow"))?;
                if p > bytes.len() {
                    return Err(ferr("value padding runs past the record"));
                }
                if ty == TYPE_STR {
                    FieldValue::Str(std::str::from_utf8(vb).map_err(|_| ferr("str is not UTF-8"))?)
                } else {
                    FieldValue::Bytes(vb)
                }
            }
            _ => return Err(ferr("unknown value type")),
        };
        rec.fields.push(Field { name, value });
        off = p;
    }
    if off != bytes.len() {
        return Err(RecordError::Trailing { nfields, extra: bytes.len().saturating_sub(off) });
    }
    Ok(rec)
}

/// Decode registry descriptors from a registry area (`bytes` = the published prefix).
pub fn decode_registry(bytes: &[u8]) -> Result<Vec<TracepointInfo>, (usize, String)> {
    let mut out = Vec::new();
    let mut off = 0usize;
    while off < bytes.len() {
        let err = |d: &str| (off, d.to_string());
        let hdr = bytes.get(off..off + DESC_HEADER_SIZE).ok_or(err("truncated descriptor header"))?;
        let u16_at = |i: usize| u16::from_ne_bytes([hdr[i], hdr[i + 1]]) as usize;
        let len = u32::from_ne_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]) as usize;
        let id = u32::from_ne_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]);
        let level = Level::from_u8(hdr[8]).ok_or(err("level outside 1..=5"))?;
        let flags = hdr[9];
        let (nl, gl, fl, il) = (u16_at(10), u16_at(12), u16_at(14), u16_at(16));
        let line = u32::from_ne_bytes([hdr[20], hdr[21], hdr[22], hdr[23]]);
        if len < DESC_HEADER_SIZE
            || !len.is_multiple_of(8)
            || len != pad8(DESC_HEADER_SIZE + nl + gl + fl + il)
        {
            return Err(err(&format!("length {len} does not match its strings")));
        }
        let body = bytes
            .get(off + DESC_HEADER_SIZE..off + len)
            .ok_or(err("descriptor runs past the published registry"))?;
        let s = |a: usize, n: usize, what: &str| -> Result<String, (usize, String)> {
            std::str::from_utf8(&body[a..a + n])
                .map(str::to_string)
                .map_err(|_| (off, format!("{what} is not UTF-8")))
        };
        out.push(TracepointInfo {
            id,
            name: s(0, nl, "name")?,
            level,
            group: s(nl, gl, "group")?,
            fields: s(nl + gl, fl, "fields")?,
            flags,
            enabled: false,
            file: s(nl + gl + fl, il, "file")?,
            line,
        });
        off += len;
    }
    Ok(out)
}

enum Backing {
    Owned { map: Map, _file: File },
    Borrowed(&'static Map),
}

/// Geometry from a validated header (immutable after creation).
#[derive(Debug, Clone, Copy)]
struct Geometry {
    registry_offset: usize,
    registry_capacity: usize,
    state_offset: usize,
    control_offset: usize,
    tp_capacity: usize,
    rings_offset: usize,
    ring_count: usize,
    ring_stride: usize,
    ring_capacity: usize,
    /// The live-query mailbox (offset, bytes), when the producer has one.
    query: Option<(usize, usize)>,
}

/// Per-ring statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingStats {
    pub index: usize,
    /// `RING_FREE`, `RING_OWNED`, `RING_RELEASED` (or a corrupt value).
    pub state: u32,
    pub tid: u32,
    pub capacity: u64,
    /// Bytes written but not drained yet.
    pub pending: u64,
    pub dropped: u64,
    pub records: u64,
}

/// Segment-wide statistics (VAIF's congestion signal: occupancy and drops).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stats {
    pub rings: Vec<RingStats>,
    /// Records dropped because no ring was free (or the thread was exiting).
    pub no_ring_drops: u64,
    pub ctl_rejected: u32,
    pub ctl_protected: u32,
    pub registry_overflow: u32,
}

impl Stats {
    /// Records dropped in all: full rings plus no ring.
    pub fn dropped(&self) -> u64 {
        self.no_ring_drops + self.rings.iter().map(|r| r.dropped).sum::<u64>()
    }

    /// Fullest ring's occupancy in [0, 1].
    pub fn max_occupancy(&self) -> f64 {
        self.rings.iter().map(|r| r.pending as f64 / r.capacity.max(1) as f64).fold(0.0, f64::max)
    }
}

/// What one drain did.
#[derive(Debug, Default)]
pub struct DrainReport {
    pub records: u64,
    pub bytes: u64,
    /// Bytes skipped after a corrupt record or ring header.
    pub skipped_bytes: u64,
    /// One error per ring that was (partly) skipped.
    pub errors: Vec<ConsumerError>,
}

/// A ring's consumer positions ([`Segment::positions`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingPositions {
    /// Bytes the consumer released (the producer may overwrite what lies before).
    pub tail: u64,
    /// The consumer's bookmark: records before it were delivered downstream.
    pub mark: u64,
    /// Bytes the producer has written.
    pub head: u64,
}

/// What one [`Segment::read_ring`] did.
#[derive(Debug, Default)]
pub struct RingRead {
    /// Where the next read starts (a record boundary; the head after a skip).
    pub next: u64,
    pub records: u64,
    pub bytes: u64,
    /// Bytes skipped after a corrupt record or ring header.
    pub skipped_bytes: u64,
    /// Why bytes were skipped.
    pub error: Option<ConsumerError>,
}

/// An attached segment.
pub struct Segment {
    backing: Backing,
    path: PathBuf,
    geo: Geometry,
    buf: Vec<u8>,
    /// Opened with the consumer lock (may drain and commit).
    exclusive: bool,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment").field("path", &self.path).field("pid", &self.pid()).finish()
    }
}

/// Segment files in `dir` (`*.weft`, sorted). A missing directory is an empty list.
pub fn discover(dir: &Path) -> Result<Vec<PathBuf>, ConsumerError> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(ConsumerError::Io { path: dir.to_path_buf(), source }),
    };
    let mut out: Vec<PathBuf> = rd
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(SEGMENT_SUFFIX) && !n.starts_with('.'))
        })
        .collect();
    out.sort();
    Ok(out)
}

impl Segment {
    /// Attach to a segment file: map it, validate the header, and take the consumer lock
    /// (`flock`; one consumer per segment, released when the consumer dies).
    pub fn open(path: &Path) -> Result<Segment, ConsumerError> {
        Self::open_with(path, true)
    }

    fn open_with(path: &Path, exclusive: bool) -> Result<Segment, ConsumerError> {
        let io = |source| ConsumerError::Io { path: path.to_path_buf(), source };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(io)?;
        // SAFETY: valid fd.
        if exclusive && unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::WouldBlock {
                return Err(ConsumerError::Busy { path: path.to_path_buf() });
            }
            return Err(io(e));
        }
        let size = file.metadata().map_err(io)?.len();
        if size < HEADER_SIZE as u64 {
            return Err(ConsumerError::Header {
                path: path.to_path_buf(),
                field: "total_size",
                offset: OFF_TOTAL_SIZE,
                detail: format!("file is {size} bytes, smaller than the {HEADER_SIZE}-byte header"),
            });
        }
        let size = usize::try_from(size)
            .map_err(|_| io(std::io::Error::other("segment larger than the address space")))?;
        let map = Map::shared(file.as_raw_fd(), size).map_err(io)?;
        let geo = validate(&map, path)?;
        Ok(Segment {
            backing: Backing::Owned { map, _file: file },
            path: path.to_path_buf(),
            geo,
            buf: Vec::new(),
            exclusive,
        })
    }

    /// Attach for control and inspection only, without the consumer lock: registry, stats,
    /// switches and [`Segment::wait_applied`] work while another consumer (the agent) drains;
    /// [`Segment::drain`], [`Segment::read_ring`] and [`Segment::commit`] are refused. Control
    /// requests from several such handles are safe: each is one byte per tracepoint, the last
    /// writer wins, and every writer bumps `ctl_seq` atomically.
    pub fn open_shared(path: &Path) -> Result<Segment, ConsumerError> {
        Self::open_with(path, false)
    }

    /// A consumer view of this process's own segment (in-process draining; see
    /// [`crate::capture`]). Creates the segment if needed.
    pub fn own() -> Result<Segment, ConsumerError> {
        let path = PathBuf::from("<in-process>");
        let seg = crate::segment::get_or_create().ok_or_else(|| ConsumerError::Io {
            path: path.clone(),
            source: std::io::Error::other("the probe segment could not be created"),
        })?;
        let geo = validate(&seg.map, &path)?;
        Ok(Segment { backing: Backing::Borrowed(&seg.map), path, geo, buf: Vec::new(), exclusive: true })
    }

    fn map(&self) -> &Map {
        match &self.backing {
            Backing::Owned { map, .. } => map,
            Backing::Borrowed(m) => m,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn hdr_u32(&self, off: usize) -> u32 {
        self.map().u32_at(off).map(|a| a.load(Ordering::Acquire)).unwrap_or(0)
    }

    fn hdr_u64(&self, off: usize) -> u64 {
        self.map().u64_at(off).map(|a| a.load(Ordering::Acquire)).unwrap_or(0)
    }

    fn hdr_str(&self, len_off: usize, off: usize, max: usize) -> String {
        let n = (self.hdr_u32(len_off) as usize).min(max);
        let mut v = Vec::new();
        if self.map().copy_out(off, n, &mut v).is_none() {
            return String::new();
        }
        String::from_utf8_lossy(&v).into_owned()
    }

    pub fn pid(&self) -> u32 {
        self.hdr_u32(OFF_PID)
    }

    pub fn service(&self) -> String {
        self.hdr_str(OFF_SERVICE_LEN, OFF_SERVICE, SERVICE_MAX)
    }

    pub fn exe(&self) -> String {
        self.hdr_str(OFF_EXE_LEN, OFF_EXE, EXE_MAX)
    }

    pub fn created_unix_ns(&self) -> u64 {
        self.hdr_u64(OFF_CREATED)
    }

    pub fn heartbeat_unix_ns(&self) -> u64 {
        self.hdr_u64(OFF_HEARTBEAT)
    }

    /// Did the producer mark a normal exit?
    pub fn exited(&self) -> bool {
        self.hdr_u32(OFF_FLAGS) & FLAG_EXITED != 0
    }

    /// Is the producing process still running (same pid *and* same start time)?
    pub fn producer_alive(&self) -> bool {
        let pid = self.pid();
        if pid == 0 {
            return false;
        }
        match crate::segment::proc_start_ticks(pid) {
            Some(t) => {
                let want = self.hdr_u64(OFF_PROC_START);
                want == 0 || t == want
            }
            None => false,
        }
    }

    /// The clock calibration (read under the header's seqlock; falls back to the last torn-free
    /// value after a few tries).
    pub fn clock(&self) -> Calibration {
        let m = self.map();
        let (Some(seq), Some(kind)) = (m.u32_at(OFF_CLOCK_SEQ), m.u32_at(OFF_CLOCK_KIND)) else {
            return Calibration::REALTIME;
        };
        let rd = |off| m.u64_at(off).map(|a| a.load(Ordering::Relaxed)).unwrap_or(0);
        for _ in 0..1000 {
            let s0 = seq.load(Ordering::Acquire);
            if s0 & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let c = Calibration {
                kind: kind.load(Ordering::Relaxed),
                tsc_base: rd(OFF_CLOCK_TSC_BASE),
                unix_base_ns: rd(OFF_CLOCK_UNIX_BASE),
                mult: rd(OFF_CLOCK_MULT),
                tsc_hz: rd(OFF_CLOCK_HZ),
            };
            std::sync::atomic::fence(Ordering::Acquire);
            if seq.load(Ordering::Relaxed) == s0 {
                return if c.kind == CLOCK_TSC { c } else { Calibration::REALTIME };
            }
        }
        Calibration::REALTIME
    }

    /// Bytes of published registry descriptors: changes exactly when tracepoints are added, so
    /// a consumer re-reads [`Segment::registry`] only then.
    pub fn registry_len(&self) -> u64 {
        self.hdr_u64(OFF_REGISTRY_LEN)
    }

    /// Every exported tracepoint with its current state.
    pub fn registry(&self) -> Result<Vec<TracepointInfo>, ConsumerError> {
        let g = self.geo;
        let len = self.hdr_u64(OFF_REGISTRY_LEN) as usize;
        if len > g.registry_capacity {
            return Err(ConsumerError::Header {
                path: self.path.clone(),
                field: "registry_len",
                offset: OFF_REGISTRY_LEN,
                detail: format!("{len} exceeds the registry capacity {}", g.registry_capacity),
            });
        }
        let mut bytes = Vec::new();
        self.map().copy_out(g.registry_offset, len, &mut bytes).ok_or_else(|| ConsumerError::Registry {
            path: self.path.clone(),
            offset: 0,
            detail: "registry area outside the file".into(),
        })?;
        let mut list = decode_registry(&bytes).map_err(|(offset, detail)| ConsumerError::Registry {
            path: self.path.clone(),
            offset,
            detail,
        })?;
        for t in &mut list {
            if (t.id as usize) < g.tp_capacity {
                t.enabled = self
                    .map()
                    .u8_at(g.state_offset + t.id as usize)
                    .is_some_and(|b| b.load(Ordering::Relaxed) & 1 != 0);
            }
        }
        Ok(list)
    }

    fn ring_u64(&self, ring: usize, off: usize) -> u64 {
        let base = self.geo.rings_offset + ring * self.geo.ring_stride;
        self.map().u64_at(base + off).map(|a| a.load(Ordering::Acquire)).unwrap_or(0)
    }

    fn ring_u32(&self, ring: usize, off: usize) -> u32 {
        let base = self.geo.rings_offset + ring * self.geo.ring_stride;
        self.map().u32_at(base + off).map(|a| a.load(Ordering::Acquire)).unwrap_or(0)
    }

    /// Occupancy and drop counters.
    pub fn stats(&self) -> Stats {
        let rings = (0..self.geo.ring_count)
            .map(|i| {
                let head = self.ring_u64(i, RING_OFF_HEAD);
                let tail = self.ring_u64(i, RING_OFF_TAIL);
                RingStats {
                    index: i,
                    state: self.ring_u32(i, RING_OFF_STATE),
                    tid: self.ring_u32(i, RING_OFF_TID),
                    capacity: self.geo.ring_capacity as u64,
                    pending: head.wrapping_sub(tail).min(self.geo.ring_capacity as u64),
                    dropped: self.ring_u64(i, RING_OFF_DROPPED),
                    records: self.ring_u64(i, RING_OFF_RECORDS),
                }
            })
            .collect();
        Stats {
            rings,
            no_ring_drops: self.hdr_u64(OFF_NO_RING_DROPS),
            ctl_rejected: self.hdr_u32(OFF_CTL_REJECTED),
            ctl_protected: self.hdr_u32(OFF_CTL_PROTECTED),
            registry_overflow: self.hdr_u32(OFF_REGISTRY_OVERFLOW),
        }
    }

    /// Drain every ring, calling `f` for each record in per-ring order, and consume what was
    /// read (`tail` and `mark` move to the end). Returns counts and the errors of rings that had
    /// to be (partly) skipped. A consumer that needs to survive its own restart without losing
    /// partial state uses [`Segment::read_ring`] and [`Segment::commit`] instead.
    pub fn drain(&mut self, mut f: impl FnMut(&Record<'_>)) -> DrainReport {
        let mut rep = DrainReport::default();
        if !self.exclusive {
            rep.errors.push(self.not_exclusive());
            return rep;
        }
        let mut buf = std::mem::take(&mut self.buf);
        for ring in 0..self.geo.ring_count {
            let tail = self.ring_u64(ring, RING_OFF_TAIL);
            let r = self.read_ring_into(ring, tail, &mut |_, rec| f(rec), &mut buf);
            rep.records += r.records;
            rep.bytes += r.bytes;
            rep.skipped_bytes += r.skipped_bytes;
            if let Some(e) = r.error {
                rep.errors.push(e);
            }
            if r.next != tail {
                self.store_positions(ring, r.next, r.next);
            }
        }
        self.buf = buf;
        rep
    }

    fn not_exclusive(&self) -> ConsumerError {
        ConsumerError::Ring {
            path: self.path.clone(),
            ring: 0,
            detail: "opened for control only (open_shared): draining needs Segment::open".into(),
        }
    }

    /// Number of rings.
    pub fn ring_count(&self) -> usize {
        self.geo.ring_count
    }

    /// Data bytes per ring.
    pub fn ring_capacity(&self) -> u64 {
        self.geo.ring_capacity as u64
    }

    /// The consumer positions of every ring as stored in the segment: `tail`, the bookmark `mark`
    /// (read as `tail` when it lies outside `[tail, head]`) and the producer's `head`.
    pub fn positions(&self) -> Vec<RingPositions> {
        (0..self.geo.ring_count)
            .map(|i| {
                let head = self.ring_u64(i, RING_OFF_HEAD);
                let tail = self.ring_u64(i, RING_OFF_TAIL);
                let mark = self.ring_u64(i, RING_OFF_MARK);
                let used = head.wrapping_sub(tail);
                let mark = if mark.wrapping_sub(tail) <= used { mark } else { tail };
                RingPositions { tail, mark, head }
            })
            .collect()
    }

    /// Read the records of ring `ring` from stream position `from` (a record boundary in
    /// `[tail, head]`, e.g. a previous [`RingRead::next`] or a stored `tail`/`mark`) up to the
    /// producer's current head, calling `f(position, record)`, **without consuming them**: the
    /// producer's free space changes only with [`Segment::commit`].
    ///
    /// A corrupt record (or a `from` outside `[tail, head]`) ends the read at the head: the
    /// error is returned in [`RingRead::error`], the bytes skipped are counted, and `next` is
    /// the head, so committing it resynchronises the ring.
    pub fn read_ring(
        &mut self,
        ring: usize,
        from: u64,
        mut f: impl FnMut(u64, &Record<'_>),
    ) -> Result<RingRead, ConsumerError> {
        if !self.exclusive {
            return Err(self.not_exclusive());
        }
        if ring >= self.geo.ring_count {
            return Err(ConsumerError::Ring {
                path: self.path.clone(),
                ring,
                detail: format!("no such ring (the segment has {})", self.geo.ring_count),
            });
        }
        let mut buf = std::mem::take(&mut self.buf);
        let r = self.read_ring_into(ring, from, &mut f, &mut buf);
        self.buf = buf;
        Ok(r)
    }

    /// Store ring `ring`'s consumer positions: `tail` (the producer may reuse the bytes before
    /// it) and the bookmark `mark`. Requires `tail <= mark <= head` (stream positions; both
    /// record boundaries the consumer read). The mark is stored first, so a consumer that dies
    /// in between never sees a mark behind its tail.
    pub fn commit(&self, ring: usize, tail: u64, mark: u64) -> Result<(), ConsumerError> {
        if !self.exclusive {
            return Err(self.not_exclusive());
        }
        if ring >= self.geo.ring_count {
            return Err(ConsumerError::Ring {
                path: self.path.clone(),
                ring,
                detail: format!("no such ring (the segment has {})", self.geo.ring_count),
            });
        }
        let head = self.ring_u64(ring, RING_OFF_HEAD);
        let old = self.ring_u64(ring, RING_OFF_TAIL);
        let span = head.wrapping_sub(old);
        if tail.wrapping_sub(old) > span || mark.wrapping_sub(tail) > head.wrapping_sub(tail) {
            return Err(ConsumerError::Ring {
                path: self.path.clone(),
                ring,
                detail: format!(
                    "commit tail {tail}, mark {mark} outside the stored tail {old} .. head {head}"
                ),
            });
        }
        self.store_positions(ring, tail, mark);
        Ok(())
    }

    fn store_positions(&self, ring: usize, tail: u64, mark: u64) {
        let base = self.geo.rings_offset + ring * self.geo.ring_stride;
        if let Some(m) = self.map().u64_at(base + RING_OFF_MARK) {
            m.store(mark, Ordering::Release);
        }
        if let Some(t) = self.map().u64_at(base + RING_OFF_TAIL) {
            t.store(tail, Ordering::Release);
        }
    }

    fn read_ring_into(
        &self,
        ring: usize,
        from: u64,
        f: &mut dyn FnMut(u64, &Record<'_>),
        buf: &mut Vec<u8>,
    ) -> RingRead {
        let g = self.geo;
        let base = g.rings_offset + ring * g.ring_stride;
        let cap = g.ring_capacity as u64;
        let ring_cap = self.ring_u64(ring, RING_OFF_CAPACITY);
        let head = self.ring_u64(ring, RING_OFF_HEAD);
        let tail = self.ring_u64(ring, RING_OFF_TAIL);
        let mut out = RingRead { next: from, ..RingRead::default() };
        if head == from {
            return out;
        }
        let path = self.path.clone();
        if ring_cap != cap {
            out.error = Some(ConsumerError::Ring {
                path,
                ring,
                detail: format!("capacity field {ring_cap} differs from the header's {cap}; ring skipped"),
            });
            return out;
        }
        let used = head.wrapping_sub(tail);
        if used > cap {
            out.error = Some(ConsumerError::Ring {
                path,
                ring,
                detail: format!(
                    "head {head} and tail {tail} are {used} bytes apart (capacity {cap}); skipped to head"
                ),
            });
            out.skipped_bytes = used.min(cap);
            out.next = head;
            return out;
        }
        if from.wrapping_sub(tail) > used {
            out.error = Some(ConsumerError::Ring {
                path,
                ring,
                detail: format!("read position {from} outside tail {tail} .. head {head}; skipped to head"),
            });
            out.skipped_bytes = used;
            out.next = head;
            return out;
        }
        let data = base + RING_HEADER_SIZE;
        let mask = cap - 1;
        let mut pos = from;
        while pos != head {
            let off = (pos & mask) as usize;
            let avail = head.wrapping_sub(pos).min(cap - off as u64) as usize;
            let w0 = self.map().u64_at(data + off).map(|a| a.load(Ordering::Relaxed)).unwrap_or(0);
            let len = (w0 & 0xffff) as usize;
            let kind = (w0 >> 16) as u8;
            if len < 8 || !len.is_multiple_of(8) || len > avail {
                out.error = Some(ConsumerError::Record {
                    path: path.clone(),
                    ring,
                    pos,
                    source: RecordError::Length { len, avail },
                });
                out.skipped_bytes += head.wrapping_sub(pos);
                pos = head;
                break;
            }
            if kind == KIND_PAD {
                pos += len as u64;
                continue;
            }
            if self.map().copy_out(data + off, len, buf).is_none() {
                break;
            }
            match decode_record(buf) {
                Ok(rec) => {
                    f(pos, &rec);
                    out.records += 1;
                    out.bytes += len as u64;
                    pos += len as u64;
                }
                Err(source) => {
                    out.error = Some(ConsumerError::Record { path: path.clone(), ring, pos, source });
                    out.skipped_bytes += head.wrapping_sub(pos);
                    pos = head;
                    break;
                }
            }
        }
        out.next = pos;
        out
    }

    /// Write control requests (`(tracepoint id, op)`) and wake the producer; returns the
    /// sequence number to pass to [`Segment::wait_applied`].
    pub fn control(&self, requests: &[(u32, Op)]) -> Result<u32, ConsumerError> {
        let g = self.geo;
        for &(id, op) in requests {
            if id as usize >= g.tp_capacity {
                return Err(ConsumerError::Id {
                    path: self.path.clone(),
                    id,
                    capacity: g.tp_capacity as u32,
                });
            }
            let byte = match op {
                Op::Enable => CTL_ENABLE,
                Op::Disable => CTL_DISABLE,
                Op::ForceDisable => CTL_FORCE_DISABLE,
            };
            if let Some(b) = self.map().u8_at(g.control_offset + id as usize) {
                b.store(byte, Ordering::Relaxed);
            }
        }
        let seq = self.map().u32_at(OFF_CTL_SEQ).ok_or_else(|| self.hdr_err("ctl_seq", OFF_CTL_SEQ))?;
        let s = seq.fetch_add(1, Ordering::AcqRel).wrapping_add(1);
        futex_wake(seq);
        Ok(s)
    }

    fn hdr_err(&self, field: &'static str, offset: usize) -> ConsumerError {
        ConsumerError::Header { path: self.path.clone(), field, offset, detail: "outside the mapping".into() }
    }

    /// Wait until the producer applied control sequence `seq` (or a later one); `false` on
    /// timeout (e.g. the process is gone or stopped).
    pub fn wait_applied(&self, seq: u32, timeout: Duration) -> bool {
        let Some(ack) = self.map().u32_at(OFF_CTL_ACK) else { return false };
        let deadline = Instant::now() + timeout;
        loop {
            let a = ack.load(Ordering::Acquire);
            if a.wrapping_sub(seq) as i32 >= 0 {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            futex_wait(ack, a, (deadline - now).min(Duration::from_millis(50)));
        }
    }

    /// Switch every exported tracepoint `sel` matches (matching uses the registry; always-on
    /// protection is applied by the producer). Returns the ids requested and the sequence number.
    pub fn switch(&self, sel: &Selector, op: Op) -> Result<(Vec<u32>, u32), ConsumerError> {
        let ids: Vec<u32> = self
            .registry()?
            .into_iter()
            .filter(|t| sel.matches(&t.name, &t.group, t.level))
            .map(|t| t.id)
            .collect();
        let reqs: Vec<(u32, Op)> = ids.iter().map(|&i| (i, op)).collect();
        let seq = self.control(&reqs)?;
        Ok((ids, seq))
    }

    /// Does the producer answer live-query requests ([`crate::mailbox`])?
    pub fn has_mailbox(&self) -> bool {
        self.geo.query.is_some()
    }

    fn mb_err(&self, detail: impl Into<String>) -> ConsumerError {
        ConsumerError::Mailbox { path: self.path.clone(), detail: detail.into() }
    }

    /// One mailbox request: `Ok(Ok(answer))` when the process did it, `Ok(Err(reason))` when it
    /// refused, `Err` when it did not answer within `timeout` (stopped, dying) or the segment has
    /// no mailbox. One request at a time per segment (the agent's live-query thread).
    pub fn mailbox_request(
        &self,
        req: &[u8],
        timeout: Duration,
    ) -> Result<Result<Vec<u8>, String>, ConsumerError> {
        use crate::mailbox::*;
        let (base, cap) =
            self.geo.query.ok_or_else(|| self.mb_err("this process has none (older weft-probe)"))?;
        if req.len() > REQ_MAX {
            return Err(self.mb_err(format!("request of {} bytes exceeds {REQ_MAX}", req.len())));
        }
        let m = self.map();
        let word = |off: usize| m.u32_at(base + off).ok_or_else(|| self.mb_err("outside the mapping"));
        let (req_seq, resp_seq, req_len) = (word(MB_REQ_SEQ)?, word(MB_RESP_SEQ)?, word(MB_REQ_LEN)?);
        m.write(base + MB_REQ, req).ok_or_else(|| self.mb_err("request outside the mapping"))?;
        req_len.store(req.len() as u32, Ordering::Relaxed);
        let seq = req_seq.load(Ordering::Relaxed).wrapping_add(1).max(1);
        req_seq.store(seq, Ordering::Release);
        let ctl = m.u32_at(OFF_CTL_SEQ).ok_or_else(|| self.hdr_err("ctl_seq", OFF_CTL_SEQ))?;
        ctl.fetch_add(1, Ordering::AcqRel);
        futex_wake(ctl);
        let deadline = Instant::now() + timeout;
        loop {
            let r = resp_seq.load(Ordering::Acquire);
            if r == seq {
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(self.mb_err(format!("no answer within {} ms", timeout.as_millis())));
            }
            futex_wait(resp_seq, r, (deadline - now).min(Duration::from_millis(20)));
        }
        let len = word(MB_RESP_LEN)?.load(Ordering::Relaxed) as usize;
        let status = word(MB_RESP_STATUS)?.load(Ordering::Relaxed);
        if len > cap.saturating_sub(MB_RESP) {
            return Err(self.mb_err(format!("answer length {len} out of range")));
        }
        let mut out = Vec::new();
        m.copy_out(base + MB_RESP, len, &mut out).ok_or_else(|| self.mb_err("answer outside the mapping"))?;
        Ok(if status == STATUS_OK { Ok(out) } else { Err(String::from_utf8_lossy(&out).into_owned()) })
    }

    /// Install a live query in the process; `Ok(Err(reason))` when the process refused the plan
    /// (no such tracepoint, a field's type…). The process detaches it by itself when no collect
    /// renewed it for `lease`.
    pub fn install_query(
        &self,
        plan: &crate::query::Plan,
        lease: Duration,
        timeout: Duration,
    ) -> Result<Result<crate::query::QueryId, String>, ConsumerError> {
        let mut req = vec![crate::mailbox::OP_INSTALL];
        req.extend((lease.as_millis() as u64).to_le_bytes());
        req.extend(crate::mailbox::encode_plan(plan));
        Ok(match self.mailbox_request(&req, timeout)? {
            Ok(a) => match <[u8; 8]>::try_from(a.as_slice()) {
                Ok(b) => Ok(crate::query::QueryId(u64::from_le_bytes(b))),
                Err(_) => return Err(self.mb_err("install answer is not a query id")),
            },
            Err(e) => Err(e),
        })
    }

    /// Remove an installed query (the process frees its tables).
    pub fn detach_query(
        &self,
        id: crate::query::QueryId,
        timeout: Duration,
    ) -> Result<Result<(), String>, ConsumerError> {
        let mut req = vec![crate::mailbox::OP_DETACH];
        req.extend(id.0.to_le_bytes());
        Ok(self.mailbox_request(&req, timeout)?.map(drop))
    }

    /// Collect (and reset) an installed query's partial.
    pub fn collect_query(
        &self,
        id: crate::query::QueryId,
        timeout: Duration,
    ) -> Result<Result<crate::agg::Partial, String>, ConsumerError> {
        let mut req = vec![crate::mailbox::OP_COLLECT];
        req.extend(id.0.to_le_bytes());
        Ok(match self.mailbox_request(&req, timeout)? {
            Ok(a) => Ok(crate::agg::Partial::decode(&a).map_err(|e| self.mb_err(e.to_string()))?),
            Err(e) => Err(e),
        })
    }

    /// Delete the segment file (after draining a dead producer's segment).
    pub fn remove(self) -> Result<(), ConsumerError> {
        std::fs::remove_file(&self.path)
            .map_err(|source| ConsumerError::Io { path: self.path.clone(), source })
    }
}

fn validate(map: &Map, path: &Path) -> Result<Geometry, ConsumerError> {
    let mut magic = Vec::new();
    map.copy_out(OFF_MAGIC, 8, &mut magic);
    let mut found = [0u8; 8];
    found.copy_from_slice(&magic[..8.min(magic.len())]);
    if found != MAGIC {
        return Err(ConsumerError::Magic { path: path.to_path_buf(), found });
    }
    let u32v = |off| map.u32_at(off).map(|a| a.load(Ordering::Acquire)).unwrap_or(0);
    let u64v = |off| map.u64_at(off).map(|a| a.load(Ordering::Acquire)).unwrap_or(0);
    let version = u32v(OFF_VERSION);
    if version != VERSION {
        return Err(ConsumerError::Version { path: path.to_path_buf(), found: version });
    }
    let bad = |field, offset, detail: String| ConsumerError::Header {
        path: path.to_path_buf(),
        field,
        offset,
        detail,
    };
    let hs = u32v(OFF_HEADER_SIZE) as usize;
    if hs != HEADER_SIZE {
        return Err(bad("header_size", OFF_HEADER_SIZE, format!("{hs}, want {HEADER_SIZE}")));
    }
    let total = u64v(OFF_TOTAL_SIZE);
    if total != map.len() as u64 {
        return Err(bad(
            "total_size",
            OFF_TOTAL_SIZE,
            format!("{total} but the file is {} bytes", map.len()),
        ));
    }
    let len = map.len();
    let area = |field, off_field: usize, start: u64, size: u64| -> Result<usize, ConsumerError> {
        let end = start.checked_add(size);
        if start < HEADER_SIZE as u64 || !start.is_multiple_of(8) || end.is_none_or(|e| e > len as u64) {
            return Err(bad(
                field,
                off_field,
                format!("area [{start}, +{size}) outside the {len}-byte file or misaligned"),
            ));
        }
        Ok(start as usize)
    };
    let registry_capacity = u64v(OFF_REGISTRY_CAPACITY);
    let registry_offset =
        area("registry_offset", OFF_REGISTRY_OFFSET, u64v(OFF_REGISTRY_OFFSET), registry_capacity)?;
    let tp_capacity = u32v(OFF_TP_CAPACITY) as u64;
    let state_offset = area("state_offset", OFF_STATE_OFFSET, u64v(OFF_STATE_OFFSET), tp_capacity)?;
    let control_offset = area("control_offset", OFF_CONTROL_OFFSET, u64v(OFF_CONTROL_OFFSET), tp_capacity)?;
    let ring_capacity = u64v(OFF_RING_CAPACITY);
    if ring_capacity < 8 || !ring_capacity.is_power_of_two() {
        return Err(bad(
            "ring_capacity",
            OFF_RING_CAPACITY,
            format!("{ring_capacity} is not a power of two ≥ 8"),
        ));
    }
    let ring_stride = u64v(OFF_RING_STRIDE);
    if ring_stride != RING_HEADER_SIZE as u64 + ring_capacity {
        return Err(bad(
            "ring_stride",
            OFF_RING_STRIDE,
            format!("{ring_stride}, want {}", RING_HEADER_SIZE as u64 + ring_capacity),
        ));
    }
    let ring_count = u32v(OFF_RING_COUNT) as u64;
    let rings_size = ring_count
        .checked_mul(ring_stride)
        .ok_or_else(|| bad("ring_count", OFF_RING_COUNT, format!("{ring_count} rings overflow")))?;
    let rings_offset = area("rings_offset", OFF_RINGS_OFFSET, u64v(OFF_RINGS_OFFSET), rings_size)?;
    let query = match (u64v(OFF_QUERY_OFFSET), u64v(OFF_QUERY_CAPACITY)) {
        (0, _) => None,
        (off, cap) if cap as usize == crate::mailbox::AREA_SIZE => {
            Some((area("query_offset", OFF_QUERY_OFFSET, off, cap)?, cap as usize))
        }
        (_, cap) => {
            return Err(bad(
                "query_capacity",
                OFF_QUERY_CAPACITY,
                format!("{cap}, want {}", crate::mailbox::AREA_SIZE),
            ));
        }
    };
    Ok(Geometry {
        query,
        registry_offset,
        registry_capacity: registry_capacity as usize,
        state_offset,
        control_offset,
        tp_capacity: tp_capacity as usize,
        rings_offset,
        ring_count: ring_count as usize,
        ring_stride: ring_stride as usize,
        ring_capacity: ring_capacity as usize,
    })
}
