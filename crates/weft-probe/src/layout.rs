//! The shared-memory segment: binary layout, version 1.
//!
//! This module is the **process ↔ agent contract**. An instrumented process (the *producer*)
//! owns one segment; an agent (the *consumer*, [`crate::consumer`]) maps the same file, reads
//! the tracepoint registry, drains the per-thread rings and switches tracepoints through the
//! control area. Both sides live on the same machine, so every integer is **native-endian**
//! (little-endian on the supported targets) and every multi-byte field is naturally aligned.
//!
//! # Where segments live
//!
//! * Directory: `$WEFT_PROBE_DIR`, else `/dev/shm/weft-<uid>` ([`default_dir`]). It must be a
//!   real directory (not a symlink) owned by the current user with mode `0700`; the producer
//!   refuses anything else. The agent creates it at start.
//! * File: `<pid>-<nonce>.weft` (mode `0600`), where `nonce` is random per process instance, so a
//!   recycled pid never collides with a stale file. The producer builds the file under a
//!   temporary name (`.<pid>-<nonce>.tmp`) and `rename`s it into place once the header is
//!   complete: a consumer never sees a half-initialised segment.
//! * A process creates a segment when the directory exists (or `WEFT_PROBE_MODE=shm`);
//!   otherwise its rings live in private memory with the same layout (in-process mode, drained by
//!   [`crate::capture`]).
//! * The producer never unlinks its file: when the process dies, the rings stay drainable. The
//!   consumer removes the file after draining a segment whose producer is gone
//!   ([`crate::consumer::Segment::producer_alive`]).
//!
//! # Segment map
//!
//! ```text
//! offset 0                 header (HEADER_SIZE = 4096 bytes, fields below)
//! registry_offset          registry area: append-only tracepoint descriptors (registry_capacity bytes)
//! state_offset             state mirror: 1 byte per tracepoint id (bit 0 = enabled), written by the producer
//! control_offset           control area: 1 byte per tracepoint id (a CTL_* request), written by the consumer
//! query_offset             live-query mailbox (query_capacity bytes; see below and crate::mailbox)
//! rings_offset             ring_count rings, each ring_stride bytes: RING_HEADER_SIZE header + ring_capacity data
//! ```
//!
//! # Header (offsets in bytes; `A` = accessed atomically)
//!
//! | off | type | field | writer | meaning |
//! |---|---|---|---|---|
//! | 0 | `[u8; 8]` | magic | P | [`MAGIC`] = `b"WEFTPRB\0"` |
//! | 8 | u32 | version | P | [`VERSION`] |
//! | 12 | u32 | header_size | P | [`HEADER_SIZE`] |
//! | 16 | u64 | total_size | P | size of the whole file; the consumer checks it against `fstat` |
//! | 24 | u32 | pid | P | producer process id |
//! | 28 | u32 A | flags | P | [`FLAG_EXITED`] (the process ran its exit hook), [`FLAG_PRIVATE`] |
//! | 32 | u64 | proc_start_ticks | P | field 22 of `/proc/<pid>/stat` at creation (pid-reuse check) |
//! | 40 | u64 | created_unix_ns | P | creation time |
//! | 48 | u64 A | heartbeat_unix_ns | P | refreshed about every 500 ms by the control thread |
//! | 56 | u32 A | clock_seq | P | seqlock over the clock fields (odd = being written) |
//! | 60 | u32 | clock_kind | P | [`CLOCK_REALTIME_NS`] or [`CLOCK_TSC`] |
//! | 64 | u64 | clock_tsc_base | P | TSC reading at the calibration point |
//! | 72 | u64 | clock_unix_base_ns | P | CLOCK_REALTIME (ns since the UNIX epoch) at that point |
//! | 80 | u64 | clock_mult | P | ns per tick as a 32.32 fixed-point number |
//! | 88 | u64 | clock_tsc_hz | P | calibrated TSC frequency (informational) |
//! | 96 | u64 | registry_offset | P | |
//! | 104 | u64 | registry_capacity | P | bytes |
//! | 112 | u64 A | registry_len | P | bytes of complete descriptors (published with release) |
//! | 120 | u32 A | registry_count | P | descriptors published |
//! | 124 | u32 A | registry_overflow | P | tracepoints that did not fit (not exported) |
//! | 128 | u64 | state_offset | P | |
//! | 136 | u64 | control_offset | P | |
//! | 144 | u32 | tracepoint_capacity | P | length of the state and control arrays |
//! | 148 | u32 A | ctl_seq | C | bumped by the consumer after writing control bytes; futex word |
//! | 152 | u32 A | ctl_ack | P | last `ctl_seq` the producer applied; futex word |
//! | 156 | u32 A | ctl_rejected | P | control bytes with an unknown value (reset to 0, ignored) |
//! | 160 | u32 A | ctl_protected | P | disable requests refused because the tracepoint is always-on |
//! | 164 | u32 | reserved | | |
//! | 168 | u64 A | no_ring_drops | P | records dropped because no ring was free or the thread was exiting |
//! | 176 | u64 | rings_offset | P | |
//! | 184 | u32 | ring_count | P | |
//! | 188 | u32 | reserved | | |
//! | 192 | u64 | ring_stride | P | RING_HEADER_SIZE + ring_capacity |
//! | 200 | u64 | ring_capacity | P | data bytes per ring, a power of two |
//! | 208 | u32 | service_len | P | |
//! | 212 | `[u8; 128]` | service | P | service name (UTF-8), `WEFT_PROBE_SERVICE` or set by `init` |
//! | 340 | u32 | exe_len | P | |
//! | 344 | `[u8; 256]` | exe | P | executable path (UTF-8, truncated) |
//! | 600 | u64 | query_offset | P | the live-query mailbox area ([`crate::mailbox`]); 0 = none |
//! | 608 | u64 | query_capacity | P | its bytes |
//!
//! Timestamps in records are raw clock values; convert with
//! `unix_ns = clock_unix_base_ns + ((raw - clock_tsc_base) * clock_mult) >> 32` for
//! [`CLOCK_TSC`] (signed difference: raw may precede the base), or use them as they are for
//! [`CLOCK_REALTIME_NS`]. The producer may refine the calibration while it runs; read the clock
//! fields under the seqlock ([`crate::consumer::Segment::clock`]).
//!
//! # Registry area
//!
//! A sequence of descriptors, each 8-byte aligned, appended by the producer only; the consumer
//! reads `registry_len` bytes (acquire) and decodes:
//!
//! | off | type | field |
//! |---|---|---|
//! | 0 | u32 | len (whole descriptor, a multiple of 8) |
//! | 4 | u32 | id (index into the state/control arrays, dense from 0) |
//! | 8 | u8 | level ([`crate::Level`]: 1 error … 5 trace) |
//! | 9 | u8 | flags ([`crate::tracepoint::FLAG_ALWAYS_ON`], `FLAG_SPAN`, `FLAG_DYNAMIC`, …) |
//! | 10 | u16 | name_len |
//! | 12 | u16 | group_len (0 = no group) |
//! | 14 | u16 | fields_len |
//! | 16 | u16 | file_len |
//! | 18 | u16 | reserved |
//! | 20 | u32 | line |
//! | 24 | … | name, group, fields spec (`a:u64,b:str`, see [`crate::tracepoint::FieldSpec`]), file — UTF-8, unpadded, then zero padding to 8 |
//!
//! # State and control
//!
//! `state[id]` mirrors the tracepoint's state byte (bit 0 = enabled). To switch tracepoints the
//! consumer writes one request per id into `control[id]` ([`CTL_ENABLE`], [`CTL_DISABLE`],
//! [`CTL_FORCE_DISABLE`]), then increments `ctl_seq` and wakes it (`FUTEX_WAKE`, shared). The
//! producer's control thread swaps each non-zero byte back to 0, applies it (a plain disable
//! leaves an always-on tracepoint on and counts `ctl_protected`; unknown values count
//! `ctl_rejected`), updates `state[]`, stores `ctl_ack = ctl_seq` and wakes `ctl_ack`.
//!
//! # Live-query mailbox
//!
//! At `query_offset` (absent — 0 — in segments written before it existed, so the layout version
//! did not change), `query_capacity` bytes: one request at a time from the agent to the
//! process's control thread (install a plan, detach it, collect its partial). Words (`A` =
//! atomic): 0 u32 A `req_seq` (C), 4 u32 A `resp_seq` (P, futex word), 8 u32 `req_len` (C), 12
//! u32 `resp_len` (P), 16 u32 `resp_status` (P, 0 done / 1 refused); the request bytes from 64,
//! the answer's from 65536. The consumer writes the request, bumps `req_seq`, then bumps and
//! wakes `ctl_seq`; the producer answers and stores `resp_seq = req_seq`. Protocol and request
//! formats: [`crate::mailbox`].
//!
//! # Rings
//!
//! One single-producer/single-consumer byte ring per thread. Ring `i` starts at
//! `rings_offset + i * ring_stride`. Header (RING_HEADER_SIZE = 256 bytes; producer and consumer
//! words on separate cache lines):
//!
//! | off | type | field | writer | meaning |
//! |---|---|---|---|---|
//! | 0 | u32 A | state | P | [`RING_FREE`], [`RING_OWNED`] (a live thread writes), [`RING_RELEASED`] (its thread exited) |
//! | 4 | u32 A | tid | P | OS thread id of the current/last owner |
//! | 8 | u64 | capacity | P | data bytes (power of two; equals the header's ring_capacity) |
//! | 16 | u64 A | owners | P | number of times the ring was acquired |
//! | 64 | u64 A | head | P | total bytes ever written (monotonic; published with release) |
//! | 72 | u64 A | dropped | P | records dropped because the ring was full |
//! | 80 | u64 A | records | P | records written |
//! | 128 | u64 A | tail | C | total bytes ever consumed (monotonic; published with release) |
//! | 136 | u64 A | mark | C | consumer bookmark: records before it were already delivered downstream (see below) |
//!
//! Bytes `[tail, head)` (positions modulo capacity) hold complete records. Indices survive ring
//! reuse: a new owner continues at `head`. A full ring drops the new record and counts it —
//! the producer never waits. The producer computes every write position from its own head
//! modulo its own capacity, so a consumer that corrupts `tail` can lose data but never make the
//! producer write outside the ring.
//!
//! `mark` is the consumer's own bookmark; the producer never reads it. A consumer that must not
//! lose partial state across its own restart (the agent assembles spans from several records)
//! keeps `tail` at the first record it may still need and `mark` at the first record it has not
//! delivered yet: a restarted consumer re-reads `[tail, mark)` only to rebuild its state and
//! delivers from `mark` on ([`crate::consumer::Segment::read_ring`],
//! [`crate::consumer::Segment::commit`]). A `mark` outside `[tail, head]` reads as `tail`. The
//! word was zero (and is still ignored by producers) in segments written before it was
//! defined, so the layout version did not change.
//!
//! # Records
//!
//! Each record is 8-byte aligned, at most 65528 bytes, and never wraps: when a record does not
//! fit before the end of the data area, the producer first writes a [`KIND_PAD`] record
//! covering the rest. Header ([`RECORD_HEADER_SIZE`] = 48 bytes):
//!
//! | off | type | field |
//! |---|---|---|
//! | 0 | u16 | len (whole record, a multiple of 8, ≥ 8; a PAD record may be just this word) |
//! | 2 | u8 | kind (`KIND_*`) |
//! | 3 | u8 | nfields |
//! | 4 | u32 | tracepoint id |
//! | 8 | u64 | timestamp (raw clock units, see above) |
//! | 16 | u32 | tid (OS thread id) |
//! | 20 | u32 | flags (SPAN_START: span kind in bits 0..8 ([`crate::SpanKind`]), [`RFLAG_REMOTE_PARENT`]) |
//! | 24 | u64 | trace id, high 64 bits (0 = none) |
//! | 32 | u64 | trace id, low 64 bits |
//! | 40 | u64 | span id (the span this record belongs to; 0 = none) |
//! | 48 | … | payload |
//!
//! Payloads: `SPAN_START` begins with the parent span id (u64, 0 = root) and then its fields;
//! every other kind is a list of `nfields` fields. A field is a u64 word
//! `type | name_index << 8 | key_len << 16 | value_len << 32`, then (when `name_index` is
//! [`NAME_INLINE`]) `key_len` key bytes padded to 8, then the value: 8 bytes for the scalar
//! types, `value_len` bytes padded to 8 for `str`/`bytes`. `name_index` refers to the
//! tracepoint's field spec; [`NAME_NONE`] means unnamed.
//!
//! | kind | meaning | fields |
//! |---|---|---|
//! | [`KIND_EVENT`] | a tracepoint hit | the tracepoint's fields |
//! | [`KIND_SPAN_START`] | a span began (name = the tracepoint's name) | parent id, then attributes |
//! | [`KIND_SPAN_END`] | the span ended | attributes set at the end |
//! | [`KIND_ANNOTATION`] | a timestamp annotation (Zipkin `cs`/`sr`/`ss`/`cr` or custom) | one unnamed `str` |
//! | [`KIND_KV`] | key/value annotations on the span | inline-keyed fields |
//! | [`KIND_ENDPOINT`] | the span's endpoint (BlkKin) | inline keys `service` (str), `ip` (str), `port` (u64) |

/// `b"WEFTPRB\0"`.
pub const MAGIC: [u8; 8] = *b"WEFTPRB\0";
/// Layout version; a consumer rejects any other.
pub const VERSION: u32 = 1;
/// Bytes of the segment header.
pub const HEADER_SIZE: usize = 4096;

/// Header flag: the producer's exit hook ran (the process ended normally).
pub const FLAG_EXITED: u32 = 1;
/// Header flag: private (in-process) memory, not a shared file.
pub const FLAG_PRIVATE: u32 = 2;

/// Record timestamps are CLOCK_REALTIME nanoseconds.
pub const CLOCK_REALTIME_NS: u32 = 0;
/// Record timestamps are TSC ticks; convert with the header's calibration.
pub const CLOCK_TSC: u32 = 1;

// Header field offsets.
pub const OFF_MAGIC: usize = 0;
pub const OFF_VERSION: usize = 8;
pub const OFF_HEADER_SIZE: usize = 12;
pub const OFF_TOTAL_SIZE: usize = 16;
pub const OFF_PID: usize = 24;
pub const OFF_FLAGS: usize = 28;
pub const OFF_PROC_START: usize = 32;
pub const OFF_CREATED: usize = 40;
pub const OFF_HEARTBEAT: usize = 48;
pub const OFF_CLOCK_SEQ: usize = 56;
pub const OFF_CLOCK_KIND: usize = 60;
pub const OFF_CLOCK_TSC_BASE: usize = 64;
pub const OFF_CLOCK_UNIX_BASE: usize = 72;
pub const OFF_CLOCK_MULT: usize = 80;
pub const OFF_CLOCK_HZ: usize = 88;
pub const OFF_REGISTRY_OFFSET: usize = 96;
pub const OFF_REGISTRY_CAPACITY: usize = 104;
pub const OFF_REGISTRY_LEN: usize = 112;
pub const OFF_REGISTRY_COUNT: usize = 120;
pub const OFF_REGISTRY_OVERFLOW: usize = 124;
pub const OFF_STATE_OFFSET: usize = 128;
pub const OFF_CONTROL_OFFSET: usize = 136;
pub const OFF_TP_CAPACITY: usize = 144;
pub const OFF_CTL_SEQ: usize = 148;
pub const OFF_CTL_ACK: usize = 152;
pub const OFF_CTL_REJECTED: usize = 156;
pub const OFF_CTL_PROTECTED: usize = 160;
pub const OFF_NO_RING_DROPS: usize = 168;
pub const OFF_RINGS_OFFSET: usize = 176;
pub const OFF_RING_COUNT: usize = 184;
pub const OFF_RING_STRIDE: usize = 192;
pub const OFF_RING_CAPACITY: usize = 200;
pub const OFF_SERVICE_LEN: usize = 208;
pub const OFF_SERVICE: usize = 212;
/// Bytes reserved for the service name.
pub const SERVICE_MAX: usize = 128;
pub const OFF_EXE_LEN: usize = 340;
pub const OFF_EXE: usize = 344;
/// Offset of the live-query mailbox area (0 in segments written before it existed).
pub const OFF_QUERY_OFFSET: usize = 600;
/// Bytes of the live-query mailbox area.
pub const OFF_QUERY_CAPACITY: usize = 608;
/// Bytes reserved for the executable path.
pub const EXE_MAX: usize = 256;

/// Control request: enable the tracepoint.
pub const CTL_ENABLE: u8 = 1;
/// Control request: disable it, unless it is always-on.
pub const CTL_DISABLE: u8 = 2;
/// Control request: disable it even if it is always-on (explicit override).
pub const CTL_FORCE_DISABLE: u8 = 3;

/// Bytes of a ring header.
pub const RING_HEADER_SIZE: usize = 256;
pub const RING_OFF_STATE: usize = 0;
pub const RING_OFF_TID: usize = 4;
pub const RING_OFF_CAPACITY: usize = 8;
pub const RING_OFF_OWNERS: usize = 16;
pub const RING_OFF_HEAD: usize = 64;
pub const RING_OFF_DROPPED: usize = 72;
pub const RING_OFF_RECORDS: usize = 80;
pub const RING_OFF_TAIL: usize = 128;
/// Consumer bookmark (see the ring table).
pub const RING_OFF_MARK: usize = 136;
/// Ring state: never used, or reclaimable.
pub const RING_FREE: u32 = 0;
/// Ring state: a live thread owns it.
pub const RING_OWNED: u32 = 1;
/// Ring state: its thread exited; the data stays until drained, and the ring may be reused.
pub const RING_RELEASED: u32 = 2;

/// Bytes of a record header.
pub const RECORD_HEADER_SIZE: usize = 48;
/// Largest record (the `len` field is a u16 and records are 8-byte aligned).
pub const RECORD_MAX: usize = 65528;
pub const KIND_PAD: u8 = 0;
pub const KIND_EVENT: u8 = 1;
pub const KIND_SPAN_START: u8 = 2;
pub const KIND_SPAN_END: u8 = 3;
pub const KIND_ANNOTATION: u8 = 4;
pub const KIND_KV: u8 = 5;
pub const KIND_ENDPOINT: u8 = 6;
/// Record flag (SPAN_START): the parent is a remote span (extracted from a carrier).
pub const RFLAG_REMOTE_PARENT: u32 = 1 << 8;

/// Field name index: an inline key follows the field word.
pub const NAME_INLINE: u8 = 0xFF;
/// Field name index: the field has no name.
pub const NAME_NONE: u8 = 0xFE;

/// Field value types.
pub const TYPE_I64: u8 = 1;
pub const TYPE_U64: u8 = 2;
pub const TYPE_F64: u8 = 3;
pub const TYPE_BOOL: u8 = 4;
pub const TYPE_STR: u8 = 5;
pub const TYPE_BYTES: u8 = 6;

/// Bytes of a registry descriptor's fixed part.
pub const DESC_HEADER_SIZE: usize = 24;

/// Round up to a multiple of 8.
#[inline(always)]
pub const fn pad8(n: usize) -> usize {
    (n + 7) & !7
}

/// The default segment directory: `$WEFT_PROBE_DIR`, else `/dev/shm/weft-<uid>`.
pub fn default_dir() -> std::path::PathBuf {
    if let Some(d) = std::env::var_os("WEFT_PROBE_DIR") {
        return std::path::PathBuf::from(d);
    }
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    std::path::PathBuf::from(format!("/dev/shm/weft-{uid}"))
}

/// File-name suffix of a segment.
pub const SEGMENT_SUFFIX: &str = ".weft";
