//! Per-thread state: the thread's ring (a single-producer writer), its span context and id
//! generator. No locks and no heap allocation on the record path.

use crate::clock;
use crate::layout::*;
use crate::segment;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

const NO_RING: u8 = 0;
const HAS_RING: u8 = 1;
const RING_UNAVAILABLE: u8 = 2;
const EXITING: u8 = 3;

pub(crate) struct Local {
    status: Cell<u8>,
    hdr: Cell<*mut u8>,
    data: Cell<*mut u8>,
    mask: Cell<u64>,
    head: Cell<u64>,
    tail_cache: Cell<u64>,
    records: Cell<u64>,
    dropped: Cell<u64>,
    ring_index: Cell<usize>,
    retry: Cell<u32>,
    tid: Cell<u32>,
    pub(crate) trace_hi: Cell<u64>,
    pub(crate) trace_lo: Cell<u64>,
    pub(crate) span: Cell<u64>,
    rng: Cell<u64>,
}

impl Local {
    const fn new() -> Local {
        Local {
            status: Cell::new(NO_RING),
            hdr: Cell::new(std::ptr::null_mut()),
            data: Cell::new(std::ptr::null_mut()),
            mask: Cell::new(0),
            head: Cell::new(0),
            tail_cache: Cell::new(0),
            records: Cell::new(0),
            dropped: Cell::new(0),
            ring_index: Cell::new(0),
            retry: Cell::new(0),
            tid: Cell::new(0),
            trace_hi: Cell::new(0),
            trace_lo: Cell::new(0),
            span: Cell::new(0),
            rng: Cell::new(0),
        }
    }
}

thread_local! {
    pub(crate) static LOCAL: Local = const { Local::new() };
    static GUARD: RingGuard = const { RingGuard };
}

/// Releases the thread's ring when the thread exits.
struct RingGuard;

impl Drop for RingGuard {
    fn drop(&mut self) {
        let _ = LOCAL.try_with(|l| {
            if l.status.get() == HAS_RING
                && let Some(seg) = segment::get()
            {
                seg.release_ring(l.ring_index.get());
            }
            l.status.set(EXITING);
            l.hdr.set(std::ptr::null_mut());
        });
    }
}

/// The calling thread's OS thread id.
pub fn tid() -> u32 {
    LOCAL.try_with(local_tid).unwrap_or_else(|_| os_tid())
}

fn os_tid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

#[inline(always)]
fn local_tid(l: &Local) -> u32 {
    let t = l.tid.get();
    if t != 0 {
        return t;
    }
    let t = os_tid();
    l.tid.set(t);
    t
}

/// A random non-zero u64 from the thread's wyrand generator.
#[inline]
pub(crate) fn random_u64(l: &Local) -> u64 {
    let mut s = l.rng.get();
    if s == 0 {
        s = seed(l);
    }
    s = s.wrapping_add(0xa076_1d64_78bd_642f);
    l.rng.set(s);
    let t = (s as u128).wrapping_mul((s ^ 0xe703_7ed1_a0b4_28db) as u128);
    let r = ((t >> 64) as u64) ^ (t as u64);
    if r == 0 { 1 } else { r }
}

#[cold]
fn seed(l: &Local) -> u64 {
    static SALT: AtomicU64 = AtomicU64::new(0x9e37_79b9_7f4a_7c15);
    let salt = SALT.fetch_add(0x632b_e59b_d9b4_e019, Ordering::Relaxed);
    let mut buf = [0u8; 8];
    // SAFETY: buf is valid for 8 bytes.
    let got = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), 8, libc::GRND_NONBLOCK) };
    let r = if got == 8 { u64::from_ne_bytes(buf) } else { 0 };
    (r ^ salt ^ clock::realtime_ns() ^ ((local_tid(l) as u64) << 32)) | 1
}

/// A random non-zero u64 (span ids).
pub fn random_id() -> u64 {
    LOCAL.try_with(random_u64).unwrap_or_else(|_| clock::realtime_ns() | 1)
}

/// Where a record gets its trace/span ids.
#[derive(Clone, Copy)]
pub(crate) enum Ids {
    /// The thread's current context.
    Current,
    /// Explicit (trace high, trace low, span).
    Explicit(u64, u64, u64),
}

/// Write one record: header, then `payload_len` bytes filled by `fill`. Drops and counts when
/// there is no room. `payload_len` must be a multiple of 8.
#[inline(always)]
pub(crate) fn write_record<F: FnOnce(*mut u8)>(
    kind: u8,
    nfields: u8,
    tp_id: u32,
    flags: u32,
    ids: Ids,
    payload_len: usize,
    fill: F,
) {
    let len = RECORD_HEADER_SIZE + payload_len;
    let res = LOCAL.try_with(|l| {
        if len > RECORD_MAX {
            count_drop(l);
            return;
        }
        let Some(p) = reserve(l, len) else { return };
        let ts = clock::now_raw();
        let (hi, lo, span) = match ids {
            Ids::Current => (l.trace_hi.get(), l.trace_lo.get(), l.span.get()),
            Ids::Explicit(h, lo, s) => (h, lo, s),
        };
        let tid = local_tid(l);
        // SAFETY: reserve() returned an 8-aligned pointer valid for `len` bytes.
        unsafe {
            let w = p as *mut u64;
            w.write(len as u64 | (kind as u64) << 16 | (nfields as u64) << 24 | (tp_id as u64) << 32);
            w.add(1).write(ts);
            w.add(2).write(tid as u64 | (flags as u64) << 32);
            w.add(3).write(hi);
            w.add(4).write(lo);
            w.add(5).write(span);
            fill(p.add(RECORD_HEADER_SIZE));
        }
        commit(l, len);
    });
    if res.is_err()
        && let Some(seg) = segment::get()
    {
        seg.count_no_ring();
    }
}

#[inline(always)]
fn ring_u64(l: &Local, off: usize) -> &AtomicU64 {
    // SAFETY: hdr points at a live ring header inside the leaked segment mapping; off is one of
    // the 8-aligned RING_OFF_* constants.
    unsafe { &*(l.hdr.get().add(off) as *const AtomicU64) }
}

#[cold]
fn count_drop(l: &Local) {
    if l.status.get() == HAS_RING {
        let d = l.dropped.get() + 1;
        l.dropped.set(d);
        ring_u64(l, RING_OFF_DROPPED).store(d, Ordering::Relaxed);
    } else if let Some(seg) = segment::get() {
        seg.count_no_ring();
    }
}

/// Reserve `len` contiguous bytes (writing a PAD record at the end of the ring when needed).
#[inline(always)]
fn reserve(l: &Local, len: usize) -> Option<*mut u8> {
    if l.status.get() != HAS_RING && !attach(l) {
        return None;
    }
    let head = l.head.get();
    let mask = l.mask.get();
    let cap = mask + 1;
    let pos = head & mask;
    let to_end = cap - pos;
    let need = if len as u64 > to_end { to_end + len as u64 } else { len as u64 };
    if head.wrapping_sub(l.tail_cache.get()).wrapping_add(need) > cap {
        let tail = ring_u64(l, RING_OFF_TAIL).load(Ordering::Acquire);
        l.tail_cache.set(tail);
        let used = head.wrapping_sub(tail);
        if used > cap || used + need > cap {
            count_drop(l);
            return None;
        }
    }
    let data = l.data.get();
    if len as u64 > to_end {
        // SAFETY: pos is within the data area and to_end ≥ 8 bytes remain (8-aligned).
        unsafe { (data.add(pos as usize) as *mut u64).write(to_end | (KIND_PAD as u64) << 16) };
        l.head.set(head + to_end);
        // SAFETY: position 0 of the data area, `len` ≤ capacity bytes.
        return Some(data);
    }
    // SAFETY: pos + len ≤ capacity.
    Some(unsafe { data.add(pos as usize) })
}

#[inline(always)]
fn commit(l: &Local, len: usize) {
    let head = l.head.get() + len as u64;
    l.head.set(head);
    let n = l.records.get() + 1;
    l.records.set(n);
    ring_u64(l, RING_OFF_RECORDS).store(n, Ordering::Relaxed);
    ring_u64(l, RING_OFF_HEAD).store(head, Ordering::Release);
}

/// Acquire a ring for this thread (slow path).
#[cold]
#[inline(never)]
fn attach(l: &Local) -> bool {
    match l.status.get() {
        EXITING => {
            if let Some(seg) = segment::get() {
                seg.count_no_ring();
            }
            return false;
        }
        RING_UNAVAILABLE => {
            // Retry a full scan only every 256 records.
            let r = l.retry.get().wrapping_add(1);
            l.retry.set(r);
            if !r.is_multiple_of(256) {
                if let Some(seg) = segment::get() {
                    seg.count_no_ring();
                }
                return false;
            }
        }
        _ => {}
    }
    let Some(seg) = segment::get_or_create() else { return false };
    let tid = local_tid(l);
    let Some(i) = seg.acquire_ring(tid) else {
        l.status.set(RING_UNAVAILABLE);
        seg.count_no_ring();
        return false;
    };
    let base = seg.rings_offset + i * seg.ring_stride;
    // SAFETY: base is inside the mapping (ring i < ring_count).
    let hdr = unsafe { seg.map.base().add(base) };
    l.hdr.set(hdr);
    // SAFETY: the data area follows the header inside the mapping.
    l.data.set(unsafe { hdr.add(RING_HEADER_SIZE) });
    l.mask.set(seg.ring_capacity as u64 - 1);
    l.ring_index.set(i);
    l.status.set(HAS_RING);
    // Continue the ring's monotonic indices (the acquire CAS ordered us after the previous
    // owner's last release store).
    let head = ring_u64(l, RING_OFF_HEAD).load(Ordering::Acquire);
    l.head.set(head);
    l.tail_cache.set(ring_u64(l, RING_OFF_TAIL).load(Ordering::Acquire));
    l.records.set(ring_u64(l, RING_OFF_RECORDS).load(Ordering::Relaxed));
    l.dropped.set(ring_u64(l, RING_OFF_DROPPED).load(Ordering::Relaxed));
    // Register the exit hook that releases the ring.
    let _ = GUARD.try_with(|_| ());
    true
}

/// The thread's current (trace id, span id); zeros when none.
pub(crate) fn current_ids() -> (u128, u64) {
    LOCAL
        .try_with(|l| (((l.trace_hi.get() as u128) << 64) | l.trace_lo.get() as u128, l.span.get()))
        .unwrap_or((0, 0))
}

/// Set the thread's current context; returns the previous one.
pub(crate) fn swap_ids(trace: u128, span: u64) -> (u128, u64) {
    LOCAL
        .try_with(|l| {
            let prev = (((l.trace_hi.get() as u128) << 64) | l.trace_lo.get() as u128, l.span.get());
            l.trace_hi.set((trace >> 64) as u64);
            l.trace_lo.set(trace as u64);
            l.span.set(span);
            prev
        })
        .unwrap_or((0, 0))
}
