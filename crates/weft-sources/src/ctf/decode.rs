//! The binary stream decoder: packets (header, context, sizes), events (header, contexts,
//! payload), bit-exact integer reads in either byte order, alignment, strings, arrays,
//! sequences, variants, and clock reconstruction from partial timestamps.
//!
//! One [`StreamDecoder`] reads one stream file a packet at a time into a reused buffer, so its
//! memory is bounded by the largest packet (and [`DecodeOptions::max_packet_bytes`]). Decoded
//! values go into per-scope [`Val`] buffers that are reused from event to event: decoding
//! allocates nothing per event.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::bits::{PAD, align_up, mask, read_be, read_le, sign_extend};
use super::compile::{Compiled, IntNode, LttngHeader, NONE, NSPECIAL, Node, Program, SCOPES, Scope, Special};
use super::error::CtfError;

/// Magic number at the start of a CTF packet header.
pub const PACKET_MAGIC: u32 = 0xC1FC_1FC1;

/// A decoded value, in pre-order of the type tree.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Val {
    /// An integer or enum (signed values sign-extended to 64 bits).
    Int(u64),
    /// A floating point number.
    Float(f64),
    /// A string or text array: byte range in the packet buffer (up to the first NUL).
    Str {
        /// Offset in the packet buffer.
        off: u32,
        /// Length in bytes.
        len: u32,
    },
    /// An array or sequence of this many elements follows.
    Len(u32),
    /// A variant's selected option (its type node) follows.
    Opt(u32),
}

/// Decoder settings.
#[derive(Debug, Clone)]
pub struct DecodeOptions {
    /// Stop at the first error (else: record it, skip the rest of the packet, go on).
    pub strict: bool,
    /// Largest packet accepted (bounds memory per stream).
    pub max_packet_bytes: u64,
    /// Errors kept as samples (all are counted).
    pub max_error_samples: usize,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions { strict: false, max_packet_bytes: 1 << 30, max_error_samples: 8 }
    }
}

/// What a stream's decoding saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Events decoded.
    pub events: u64,
    /// Packets read.
    pub packets: u64,
    /// Events the tracer reports it discarded (LTTng's cumulative `events_discarded`).
    pub discarded_events: u64,
    /// Packets missing according to gaps in `packet_seq_num`.
    pub lost_packets: u64,
    /// Decoding errors (each one skipped the rest of a packet, or ended the stream).
    pub errors: u64,
    /// The first errors.
    pub error_samples: Vec<String>,
    /// Bytes not decoded because of errors.
    pub skipped_bytes: u64,
}

impl StreamStats {
    /// Adds another stream's counts.
    pub fn merge(&mut self, o: &StreamStats) {
        self.events += o.events;
        self.packets += o.packets;
        self.discarded_events += o.discarded_events;
        self.lost_packets += o.lost_packets;
        self.errors += o.errors;
        self.skipped_bytes += o.skipped_bytes;
        for s in &o.error_samples {
            if self.error_samples.len() < 8 {
                self.error_samples.push(s.clone());
            }
        }
    }
}

/// Where a stream's bytes come from.
enum Source {
    File(File),
    Mem(Arc<[u8]>),
    /// Packets pushed as they arrive (LTTng live): the bytes from stream offset `base` on.
    Live {
        data: Vec<u8>,
        base: u64,
    },
}

impl Source {
    fn read_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
        match self {
            Source::File(f) => {
                let mut done = 0;
                while done < buf.len() {
                    match f.read_at(&mut buf[done..], off + done as u64) {
                        Ok(0) => break,
                        Ok(n) => done += n,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(done)
            }
            Source::Mem(m) => Ok(copy_from(m, off, buf)),
            Source::Live { data, base } => Ok(copy_from(data, off.saturating_sub(*base), buf)),
        }
    }
}

/// Copies `src[off..]` into `buf` as far as both go; returns how many bytes.
fn copy_from(src: &[u8], off: u64, buf: &mut [u8]) -> usize {
    let start = (off.min(src.len() as u64)) as usize;
    let n = buf.len().min(src.len() - start);
    buf[..n].copy_from_slice(&src[start..start + n]);
    n
}

/// A decoding failure inside a packet (bit position relative to the packet start). Boxed, so
/// the hot path's `Result<(), DErr>` stays one register wide.
#[derive(Debug)]
pub(crate) struct DErr(Box<DErrInner>);

#[derive(Debug)]
pub(crate) struct DErrInner {
    pub pos: u64,
    pub msg: String,
    /// The data ended (more bytes might fix it).
    pub eod: bool,
}

impl DErr {
    #[cold]
    pub(crate) fn new(pos: u64, msg: String, eod: bool) -> DErr {
        DErr(Box::new(DErrInner { pos, msg, eod }))
    }
}

impl std::ops::Deref for DErr {
    type Target = DErrInner;
    fn deref(&self) -> &DErrInner {
        &self.0
    }
}

/// Decoding state of the current packet.
pub(crate) struct Cursor {
    /// Packet bytes plus [`PAD`] zero bytes.
    pub buf: Vec<u8>,
    /// Bit position in `buf`.
    pub pos: u64,
    /// End of readable content, in bits.
    pub end: u64,
    /// Latest values of referenced integers, per scope.
    pub slots: [Vec<u64>; SCOPES],
    /// Special field values and which are set this packet.
    pub regs: [u64; NSPECIAL],
    pub set: u32,
    /// The stream clock (cycles).
    pub clock: u64,
}

impl Cursor {
    #[inline]
    fn reg(&self, s: Special) -> Option<u64> {
        (self.set & (1 << s as u32) != 0).then(|| self.regs[s as usize])
    }
    #[inline]
    fn update_clock(&mut self, raw: u64, size: u32) {
        if size >= 64 {
            self.clock = raw;
        } else {
            let m = mask(size);
            let low = self.clock & m;
            let mut new = (self.clock & !m) | raw;
            if raw < low {
                new = new.wrapping_add(1u64 << size);
            }
            self.clock = new;
        }
    }
}

#[cold]
#[inline(never)]
fn err(prog: &Program, n: u32, pos: u64, eod: bool, what: std::fmt::Arguments<'_>) -> DErr {
    let name = &prog.names[n as usize];
    let msg = if name.is_empty() { format!("{what}") } else { format!("field '{name}': {what}") };
    DErr::new(pos, msg, eod)
}

#[cold]
#[inline(never)]
fn past_end(prog: &Program, n: u32, pos: u64, size: u32) -> DErr {
    err(prog, n, pos, true, format_args!("{size}-bit integer runs past the end of the packet content"))
}

/// Reads an integer field (the hot path: one unaligned 8-byte load for fields that fit).
#[inline(always)]
fn decode_int(
    prog: &Program,
    c: &mut Cursor,
    n: u32,
    i: &IntNode,
    scope: usize,
    out: &mut Vec<Val>,
) -> Result<(), DErr> {
    let pos = align_up(c.pos, i.align);
    let end = pos + i.size as u64;
    if end > c.end {
        return Err(past_end(prog, n, pos, i.size));
    }
    let b = (pos >> 3) as usize;
    let sh = (pos & 7) as u32;
    // `end <= c.end` and the buffer holds PAD bytes past the content: 8 bytes are there.
    let raw = match c.buf.get(b..b + 8) {
        Some(w) if sh + i.size <= 64 => {
            let mut a = [0u8; 8];
            a.copy_from_slice(w);
            if i.le {
                (u64::from_le_bytes(a) >> sh) & mask(i.size)
            } else {
                (u64::from_be_bytes(a) << sh) >> (64 - i.size)
            }
        }
        _ if i.le => read_le(&c.buf, pos, i.size),
        _ => read_be(&c.buf, pos, i.size),
    };
    c.pos = end;
    let v = if i.signed { sign_extend(raw, i.size) } else { raw };
    if i.slot != NONE {
        c.slots[scope][i.slot as usize] = v;
    }
    if i.clock.is_some() {
        c.update_clock(raw, i.size);
    }
    if i.special != Special::None {
        c.regs[i.special as usize] = v;
        c.set |= 1 << i.special as u32;
    }
    out.push(Val::Int(v));
    Ok(())
}

/// Decodes one of LTTng's event headers (the same values, in the same order, as walking its
/// struct, enum and variant nodes would produce).
#[inline(always)]
fn decode_lttng_header(
    prog: &Program,
    c: &mut Cursor,
    h: &LttngHeader,
    out: &mut Vec<Val>,
) -> Result<(), DErr> {
    const S: usize = Scope::EventHeader as usize;
    c.pos = align_up(c.pos, h.align);
    decode_int(prog, c, h.id_node, &h.id, S, out)?;
    if c.regs[Special::EventId as usize] == h.ext {
        out.push(Val::Opt(h.ext_opt));
        c.pos = align_up(c.pos, h.ext_align);
        decode_int(prog, c, h.ext_id_node, &h.ext_id, S, out)?;
        decode_int(prog, c, h.ext_ts_node, &h.ext_ts, S, out)
    } else {
        out.push(Val::Opt(h.compact_opt));
        c.pos = align_up(c.pos, h.compact_align);
        decode_int(prog, c, h.ts_node, &h.ts, S, out)
    }
}

/// Decodes a scope's root (a struct): its members inline, so flat scopes (LTTng's contexts and
/// most payloads) take no call per field.
#[inline(always)]
fn decode_root(prog: &Program, c: &mut Cursor, n: u32, scope: usize, out: &mut Vec<Val>) -> Result<(), DErr> {
    match &prog.nodes[n as usize] {
        Node::Struct { fields, align } => {
            c.pos = align_up(c.pos, *align);
            for &f in fields.iter() {
                match &prog.nodes[f as usize] {
                    Node::Int(i) => decode_int(prog, c, f, i, scope, out)?,
                    _ => decode(prog, c, f, scope, out)?,
                }
            }
            Ok(())
        }
        _ => decode(prog, c, n, scope, out),
    }
}

/// Decodes node `n` at the cursor, appending values to `out`.
pub(crate) fn decode(
    prog: &Program,
    c: &mut Cursor,
    n: u32,
    scope: usize,
    out: &mut Vec<Val>,
) -> Result<(), DErr> {
    match &prog.nodes[n as usize] {
        Node::Int(i) => decode_int(prog, c, n, i, scope, out)?,
        Node::Float { double, align, le } => {
            let pos = align_up(c.pos, *align);
            let size = if *double { 64 } else { 32 };
            let end = pos + size;
            if end > c.end {
                return Err(err(
                    prog,
                    n,
                    pos,
                    true,
                    format_args!("floating point runs past the end of the packet content"),
                ));
            }
            let raw = if *le { read_le(&c.buf, pos, size as u32) } else { read_be(&c.buf, pos, size as u32) };
            c.pos = end;
            out.push(Val::Float(if *double {
                f64::from_bits(raw)
            } else {
                f32::from_bits(raw as u32) as f64
            }));
        }
        Node::Str => {
            let pos = align_up(c.pos, 8);
            let start = (pos >> 3) as usize;
            let limit = (c.end >> 3) as usize;
            if start > limit {
                return Err(err(
                    prog,
                    n,
                    pos,
                    true,
                    format_args!("string starts past the end of the packet content"),
                ));
            }
            let Some(len) = memchr::memchr(0, &c.buf[start..limit]) else {
                return Err(err(
                    prog,
                    n,
                    pos,
                    true,
                    format_args!("string is not terminated before the end of the packet content"),
                ));
            };
            c.pos = ((start + len + 1) as u64) << 3;
            out.push(Val::Str { off: start as u32, len: len as u32 });
        }
        Node::Struct { fields, align } => {
            c.pos = align_up(c.pos, *align);
            for &f in fields.iter() {
                match &prog.nodes[f as usize] {
                    Node::Int(i) => decode_int(prog, c, f, i, scope, out)?,
                    _ => decode(prog, c, f, scope, out)?,
                }
            }
        }
        Node::Array { elem, len, align, text, uuid: _ } => {
            decode_array(prog, c, n, *elem, *len, *align, *text, scope, out)?;
        }
        Node::Seq { elem, len, align, text } => {
            let v = c.slots[len.scope as usize][len.slot as usize];
            decode_array(prog, c, n, *elem, v, *align, *text, scope, out)?;
        }
        Node::Variant { tag, tag_signed, options } => {
            let raw = c.slots[tag.scope as usize][tag.slot as usize];
            let t: i128 = if *tag_signed { raw as i64 as i128 } else { raw as i128 };
            let Some(&(_, _, opt)) = options.iter().find(|(lo, hi, _)| *lo <= t && t <= *hi) else {
                return Err(err(
                    prog,
                    n,
                    c.pos,
                    false,
                    format_args!("variant tag value {t} selects no option"),
                ));
            };
            out.push(Val::Opt(opt));
            decode(prog, c, opt, scope, out)?;
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
#[inline]
fn decode_array(
    prog: &Program,
    c: &mut Cursor,
    n: u32,
    elem: u32,
    len: u64,
    align: u32,
    text: bool,
    scope: usize,
    out: &mut Vec<Val>,
) -> Result<(), DErr> {
    let pos = align_up(c.pos, align);
    let remaining = c.end.saturating_sub(pos);
    if text {
        // Text is counted in bytes (its elements are byte-aligned 8-bit integers).
        if len > remaining / 8 {
            return Err(err(
                prog,
                n,
                pos,
                true,
                format_args!(
                    "text length {len} bytes exceeds the {} bytes left in the packet content",
                    remaining / 8
                ),
            ));
        }
        let start = (pos >> 3) as usize;
        let bytes = &c.buf[start..start + len as usize];
        let l = memchr::memchr(0, bytes).unwrap_or(bytes.len());
        c.pos = pos + len * 8;
        out.push(Val::Str { off: start as u32, len: l as u32 });
        return Ok(());
    }
    if len > remaining {
        // Every element takes at least one bit (zero-size elements aside, which nobody uses).
        return Err(err(
            prog,
            n,
            pos,
            true,
            format_args!("length {len} exceeds the rest of the packet content"),
        ));
    }
    c.pos = pos;
    out.push(Val::Len(len as u32));
    for _ in 0..len {
        decode(prog, c, elem, scope, out)?;
    }
    Ok(())
}

/// Decodes one stream file: packets in order, events in order.
pub struct StreamDecoder {
    trace: Arc<Compiled>,
    path: PathBuf,
    src: Source,
    len: u64,
    opts: DecodeOptions,
    pub(crate) cur: Cursor,
    /// Values of the current packet header / context and event, per scope.
    pub(crate) vals: [Vec<Val>; SCOPES],
    packet_off: u64,
    next_off: u64,
    in_packet: bool,
    done: bool,
    pub(crate) stream: usize,
    pub(crate) event: u32,
    pub(crate) ts: u64,
    last_seq: Option<u64>,
    uuid_warned: bool,
    /// The current packet is cut short (already reported).
    truncated: bool,
    /// Metadata to switch to at the next packet (live metadata grows).
    next_trace: Option<Arc<Compiled>>,
    stats: StreamStats,
}

impl StreamDecoder {
    /// Opens a stream file of `trace`.
    pub fn open(trace: Arc<Compiled>, path: &Path, opts: DecodeOptions) -> Result<StreamDecoder, CtfError> {
        let f = File::open(path).map_err(|e| CtfError::io(path, "open", e))?;
        let len = f.metadata().map_err(|e| CtfError::io(path, "stat", e))?.len();
        Ok(Self::new(trace, path.to_path_buf(), Source::File(f), len, opts))
    }

    /// Decodes a stream held in memory (`name` is used in errors).
    pub fn from_bytes(
        trace: Arc<Compiled>,
        name: &str,
        bytes: Arc<[u8]>,
        opts: DecodeOptions,
    ) -> StreamDecoder {
        let len = bytes.len() as u64;
        Self::new(trace, PathBuf::from(name), Source::Mem(bytes), len, opts)
    }

    /// A decoder fed packet by packet ([`StreamDecoder::push_packet`]), as an LTTng live viewer
    /// receives them; `name` is used in errors. [`StreamDecoder::next_event`] returning `false`
    /// means "no more events until the next packet", not the end.
    pub fn live(trace: Arc<Compiled>, name: &str, opts: DecodeOptions) -> StreamDecoder {
        Self::new(trace, PathBuf::from(name), Source::Live { data: Vec::new(), base: 0 }, 0, opts)
    }

    /// Appends a whole packet to a live decoder (the bytes of packets already decoded are
    /// dropped, so memory stays one packet or two). Returns `false` (and ignores the bytes)
    /// for a decoder that reads a file or a buffer.
    pub fn push_packet(&mut self, packet: &[u8]) -> bool {
        let Source::Live { data, base } = &mut self.src else { return false };
        // Everything before the next packet is decoded or copied into the packet buffer.
        let consumed = (self.next_off.saturating_sub(*base) as usize).min(data.len());
        data.drain(..consumed);
        *base += consumed as u64;
        data.extend_from_slice(packet);
        self.len = *base + data.len() as u64;
        true
    }

    /// Switches to a newer version of the metadata (live metadata grows as tracepoints
    /// register) from the next packet on.
    pub fn set_trace(&mut self, trace: Arc<Compiled>) {
        self.next_trace = Some(trace);
    }

    fn is_live(&self) -> bool {
        matches!(self.src, Source::Live { .. })
    }

    fn new(trace: Arc<Compiled>, path: PathBuf, src: Source, len: u64, opts: DecodeOptions) -> StreamDecoder {
        let slots = std::array::from_fn(|s| vec![0u64; trace.slot_counts[s] as usize]);
        StreamDecoder {
            trace,
            path,
            src,
            len,
            opts,
            cur: Cursor { buf: Vec::new(), pos: 0, end: 0, slots, regs: [0; NSPECIAL], set: 0, clock: 0 },
            vals: Default::default(),
            packet_off: 0,
            next_off: 0,
            in_packet: false,
            done: false,
            stream: 0,
            event: NONE,
            ts: 0,
            last_seq: None,
            uuid_warned: false,
            truncated: false,
            next_trace: None,
            stats: StreamStats::default(),
        }
    }

    /// The stream file.
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// The compiled metadata.
    pub fn trace(&self) -> &Arc<Compiled> {
        &self.trace
    }
    /// Counters so far.
    pub fn stats(&self) -> &StreamStats {
        &self.stats
    }
    /// Bytes of the file consumed so far (for progress).
    pub fn bytes_done(&self) -> u64 {
        if self.done { self.len } else { self.packet_off }
    }
    /// Size of the stream file.
    pub fn len(&self) -> u64 {
        self.len
    }
    /// True for an empty stream file.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn stream_error(&self, e: DErr) -> CtfError {
        let abs = self.packet_off * 8 + e.pos;
        CtfError::Stream {
            path: self.path.clone(),
            packet: self.packet_off,
            offset: abs / 8,
            bit: (abs % 8) as u8,
            msg: e.0.msg,
        }
    }

    /// Records an error (lenient mode) or returns it (strict mode).
    fn fail(&mut self, e: CtfError, skipped: u64) -> Result<(), CtfError> {
        if self.opts.strict {
            self.done = true;
            return Err(e);
        }
        if self.stats.errors < self.opts.max_error_samples as u64 {
            tracing::warn!("{e}");
        } else {
            tracing::debug!("{e}");
        }
        self.stats.errors += 1;
        self.stats.skipped_bytes += skipped;
        if self.stats.error_samples.len() < self.opts.max_error_samples {
            self.stats.error_samples.push(e.to_string());
        }
        Ok(())
    }

    /// Reads `n` bytes of the packet at `self.packet_off` into the buffer (plus padding);
    /// returns how many were there.
    fn fill(&mut self, n: u64) -> Result<u64, CtfError> {
        let n = n.min(self.len.saturating_sub(self.packet_off));
        let have = self.cur.buf.len().saturating_sub(PAD) as u64;
        self.cur.buf.resize(n as usize + PAD, 0);
        if n > have {
            let got = self
                .src
                .read_at(&mut self.cur.buf[have as usize..n as usize], self.packet_off + have)
                .map_err(|e| CtfError::io(&self.path, "read", e))?;
            if (got as u64) < n - have {
                let total = have + got as u64;
                self.cur.buf.truncate(total as usize);
                self.cur.buf.resize(total as usize + PAD, 0);
                return Ok(total);
            }
        }
        // Zero the padding (a previous, longer packet left bytes there).
        let l = self.cur.buf.len();
        self.cur.buf[l - PAD..].fill(0);
        Ok(n)
    }

    /// Loads the next packet; `false` at the end of the file.
    fn load_packet(&mut self) -> Result<bool, CtfError> {
        loop {
            if self.done || self.next_off >= self.len {
                // A live stream ends only when its owner stops feeding it.
                self.done = !self.is_live();
                return Ok(false);
            }
            if let Some(t) = self.next_trace.take() {
                for (s, v) in self.cur.slots.iter_mut().enumerate() {
                    v.resize(t.slot_counts[s] as usize, 0);
                }
                self.trace = t;
            }
            self.packet_off = self.next_off;
            self.cur.buf.clear();
            match self.packet_start() {
                Ok(()) => return Ok(true),
                Err((e, fatal)) => {
                    let left = self.len - self.packet_off;
                    if fatal {
                        // Without a trustworthy packet size there is no next packet to go to
                        // (a live stream's next packet comes whole: go on with it).
                        self.fail(e, left)?;
                        if self.is_live() {
                            self.next_off = self.len;
                            continue;
                        }
                        self.done = true;
                        return Ok(false);
                    }
                    self.fail(e, self.next_off.saturating_sub(self.packet_off))?;
                }
            }
        }
    }

    /// Decodes the packet header and context at `packet_off` and loads the whole packet.
    /// The error's flag says whether the stream cannot go on.
    fn packet_start(&mut self) -> Result<(), (CtfError, bool)> {
        let remaining = self.len - self.packet_off;
        let mut want = remaining.min(4096);
        let trace = self.trace.clone();
        loop {
            let got = self.fill(want).map_err(|e| (e, true))?;
            self.cur.pos = 0;
            self.cur.end = got * 8;
            self.cur.set = 0;
            match self.decode_packet_head(&trace) {
                Ok(()) => break,
                Err(e) if e.eod && got < remaining => {
                    want = (want * 4).min(remaining).min(self.opts.max_packet_bytes);
                    if want <= got {
                        return Err((self.stream_error(e), true));
                    }
                }
                Err(e) => return Err((self.stream_error(e), true)),
            }
        }
        let bad = |me: &Self, msg: String| (me.stream_error(DErr::new(0, msg, false)), true);
        let packet_bits = self.cur.reg(Special::PacketSize).unwrap_or(remaining * 8);
        let content_bits = self.cur.reg(Special::ContentSize).unwrap_or(packet_bits);
        if packet_bits == 0 || !packet_bits.is_multiple_of(8) {
            return Err(bad(
                self,
                format!("packet size {packet_bits} bits is not a positive number of bytes"),
            ));
        }
        if content_bits > packet_bits {
            return Err(bad(
                self,
                format!("content size {content_bits} bits exceeds packet size {packet_bits} bits"),
            ));
        }
        if content_bits < self.cur.pos {
            return Err(bad(
                self,
                format!("content size {content_bits} bits ends inside the packet context"),
            ));
        }
        let packet_bytes = packet_bits / 8;
        if packet_bytes > self.opts.max_packet_bytes {
            return Err(bad(
                self,
                format!("packet of {packet_bytes} bytes exceeds the limit of {}", self.opts.max_packet_bytes),
            ));
        }
        self.next_off = self.packet_off + packet_bytes;
        self.truncated = false;
        let need = content_bits.div_ceil(8);
        let got = self.fill(need).map_err(|e| (e, true))?;
        self.cur.end = content_bits;
        self.stats.packets += 1;
        if packet_bytes > remaining {
            // A truncated last packet: decode what is there, then report it.
            self.cur.end = content_bits.min(got * 8);
            self.next_off = self.len;
            self.truncated = true;
            let e = CtfError::Stream {
                path: self.path.clone(),
                packet: self.packet_off,
                offset: self.len,
                bit: 0,
                msg: format!("truncated packet: {packet_bytes} bytes declared, {remaining} in the file"),
            };
            self.fail(e, 0).map_err(|e| (e, true))?;
        }
        if let Some(d) = self.cur.reg(Special::Discarded) {
            self.stats.discarded_events = self.stats.discarded_events.max(d);
        }
        if let Some(s) = self.cur.reg(Special::SeqNum) {
            if let Some(prev) = self.last_seq
                && s > prev + 1
            {
                self.stats.lost_packets += s - prev - 1;
            }
            self.last_seq = Some(s);
        }
        self.in_packet = true;
        Ok(())
    }

    fn decode_packet_head(&mut self, trace: &Compiled) -> Result<(), DErr> {
        let prog = &trace.prog;
        let [v0, v1, ..] = &mut self.vals;
        v0.clear();
        v1.clear();
        if trace.packet_header != NONE {
            decode(prog, &mut self.cur, trace.packet_header, Scope::PacketHeader as usize, v0)?;
            if let Some(m) = self.cur.reg(Special::Magic)
                && m != PACKET_MAGIC as u64
            {
                return Err(DErr::new(
                    0,
                    format!("bad packet magic {m:#x} (expected {PACKET_MAGIC:#x})"),
                    false,
                ));
            }
            if trace.has_uuid
                && let Some(want) = trace.meta.uuid
            {
                // The uuid array is byte aligned: find it in the header values.
                // babeltrace2 reads such packets; so does weft, with a warning.
                if let Some(got) = uuid_in(prog, trace.packet_header, v0, &self.cur.buf)
                    && got != want
                    && !self.uuid_warned
                {
                    self.uuid_warned = true;
                    tracing::warn!(
                        "{}: packet at byte {}: packet UUID differs from the metadata's",
                        self.path.display(),
                        self.packet_off
                    );
                }
            }
        }
        self.stream = match self.cur.reg(Special::StreamId) {
            Some(id) => trace.stream_index(id).ok_or_else(|| {
                DErr::new(0, format!("stream id {id} is not declared in the metadata"), false)
            })?,
            None if trace.streams.len() == 1 => 0,
            None => {
                return Err(DErr::new(0, "no stream_id and several stream classes".into(), false));
            }
        };
        let pc = trace.streams[self.stream].packet_context;
        if pc != NONE {
            decode(prog, &mut self.cur, pc, Scope::PacketContext as usize, v1)?;
        }
        Ok(())
    }

    /// Decodes the next event; `false` at the end of the stream. In lenient mode errors are
    /// recorded in [`StreamDecoder::stats`] and decoding resumes at the next packet.
    pub fn next_event(&mut self) -> Result<bool, CtfError> {
        loop {
            if !self.in_packet || self.cur.pos >= self.cur.end {
                self.in_packet = false;
                if !self.load_packet()? {
                    return Ok(false);
                }
                continue;
            }
            let start = self.cur.pos;
            match self.decode_event() {
                Ok(()) => {
                    self.stats.events += 1;
                    return Ok(true);
                }
                Err(e) => {
                    self.in_packet = false;
                    if e.eod && self.truncated {
                        // The event the truncation cut: already reported with the packet.
                        continue;
                    }
                    let skipped = (self.cur.end.saturating_sub(start)) / 8;
                    let e = self.stream_error(e);
                    self.fail(e, skipped)?;
                }
            }
        }
    }

    #[inline]
    fn decode_event(&mut self) -> Result<(), DErr> {
        let trace = &*self.trace;
        let prog = &trace.prog;
        let sc = &trace.streams[self.stream];
        let c = &mut self.cur;
        let [_, _, vh, vsc, vec_, vp] = &mut self.vals;
        vh.clear();
        c.set &= !(1 << Special::EventId as u32);
        let start = c.pos;
        if let Some(h) = &sc.lttng_header {
            decode_lttng_header(prog, c, h, vh)?;
        } else if sc.event_header != NONE {
            decode(prog, c, sc.event_header, Scope::EventHeader as usize, vh)?;
        }
        let id =
            if c.set & (1 << Special::EventId as u32) != 0 { c.regs[Special::EventId as usize] } else { 0 };
        let Some(ei) = sc.event(id) else {
            return Err(DErr::new(
                start,
                format!("event id {id} is not declared in stream class {}", sc.id),
                false,
            ));
        };
        self.event = ei;
        self.ts = c.clock;
        let ec = &trace.events[ei as usize];
        vsc.clear();
        vec_.clear();
        vp.clear();
        if sc.event_context != NONE {
            decode_root(prog, c, sc.event_context, Scope::StreamEventContext as usize, vsc)?;
        }
        if ec.context != NONE {
            decode_root(prog, c, ec.context, Scope::EventContext as usize, vec_)?;
        }
        if ec.payload != NONE {
            decode_root(prog, c, ec.payload, Scope::Payload as usize, vp)?;
        }
        if c.pos == start {
            // An event that takes no bits would repeat forever.
            return Err(DErr::new(start, "event of zero size".into(), false));
        }
        Ok(())
    }

    /// The current event (valid after [`StreamDecoder::next_event`] returned `true`).
    pub fn event(&self) -> super::EventRecord<'_> {
        super::EventRecord { dec: self }
    }

    /// Where the decoder is: the current packet's byte offset in the file and the bit
    /// position inside it (just after the current event).
    pub fn position(&self) -> (u64, u64) {
        (self.packet_off, self.cur.pos)
    }

    /// Raw clock value of the current event.
    pub fn timestamp(&self) -> u64 {
        self.ts
    }

    /// The current event's time in ns since the clock's origin (0 without a clock).
    #[inline]
    pub fn time_ns(&self) -> u64 {
        self.trace.cycles_to_ns(self.stream, self.ts)
    }

    /// The value of a special packet-context field for the current packet.
    pub(crate) fn packet_reg(&self, s: Special) -> Option<u64> {
        self.cur.reg(s)
    }
}

/// The 16 uuid bytes of a packet header (the array's values are consecutive bytes).
fn uuid_in(prog: &Program, root: u32, vals: &[Val], _buf: &[u8]) -> Option<[u8; 16]> {
    let Node::Struct { fields, .. } = &prog.nodes[root as usize] else { return None };
    let mut i = 0usize;
    for f in fields.iter() {
        let node = &prog.nodes[*f as usize];
        if let Node::Array { uuid: true, .. } = node {
            // Len(16) then 16 Int values.
            let mut out = [0u8; 16];
            for (k, o) in out.iter_mut().enumerate() {
                match vals.get(i + 1 + k) {
                    Some(Val::Int(v)) => *o = *v as u8,
                    _ => return None,
                }
            }
            return Some(out);
        }
        i += count_vals(prog, *f, &vals[i..])?;
    }
    None
}

/// How many values node `n` produced at the start of `vals`.
pub(crate) fn count_vals(prog: &Program, n: u32, vals: &[Val]) -> Option<usize> {
    match &prog.nodes[n as usize] {
        Node::Int(_) | Node::Float { .. } | Node::Str => Some(1),
        Node::Struct { fields, .. } => {
            let mut i = 0;
            for f in fields.iter() {
                i += count_vals(prog, *f, vals.get(i..)?)?;
            }
            Some(i)
        }
        Node::Array { elem, text, .. } | Node::Seq { elem, text, .. } => {
            if *text {
                return Some(1);
            }
            let Val::Len(len) = vals.first()? else { return None };
            let mut i = 1;
            for _ in 0..*len {
                i += count_vals(prog, *elem, vals.get(i..)?)?;
            }
            Some(i)
        }
        Node::Variant { .. } => {
            let Val::Opt(o) = vals.first()? else { return None };
            Some(1 + count_vals(prog, *o, vals.get(1..)?)?)
        }
    }
}
