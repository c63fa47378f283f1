//! The perf ring-buffer record format (`struct perf_event_header` + body), parsed without
//! copying and without trusting a single length.
//!
//! Every record starts with `{ u32 type; u16 misc; u16 size; }`. Samples
//! (`PERF_RECORD_SAMPLE`) lay out the fields their event's `sample_type` selects, in this
//! order (only the ones weft uses are accepted): `IDENTIFIER` u64, `IP` u64, `TID` u32 pid +
//! u32 tid, `TIME` u64, `ID` u64, `STREAM_ID` u64, `CPU` u32 cpu + u32 reserved, `PERIOD` u64,
//! `RAW` u32 size + payload, `REGS_USER` u64 abi + one u64 per bit of `sample_regs_user`.
//! Other records carry, with `sample_id_all`, a trailer of `TID`, `TIME`, `ID`, `STREAM_ID`,
//! `CPU`, `IDENTIFIER` (those selected) at their end.
//!
//! Records of events sharing one ring (`PERF_EVENT_IOC_SET_OUTPUT`) are told apart by
//! `IDENTIFIER`: first in a sample, last in a trailer. The [`Parser`] maps ids to layouts.

use std::collections::HashMap;
use std::fmt;

/// `PERF_SAMPLE_IP`.
pub const SAMPLE_IP: u64 = 1 << 0;
/// `PERF_SAMPLE_TID`.
pub const SAMPLE_TID: u64 = 1 << 1;
/// `PERF_SAMPLE_TIME`.
pub const SAMPLE_TIME: u64 = 1 << 2;
/// `PERF_SAMPLE_ID`.
pub const SAMPLE_ID: u64 = 1 << 6;
/// `PERF_SAMPLE_CPU`.
pub const SAMPLE_CPU: u64 = 1 << 7;
/// `PERF_SAMPLE_PERIOD`.
pub const SAMPLE_PERIOD: u64 = 1 << 8;
/// `PERF_SAMPLE_STREAM_ID`.
pub const SAMPLE_STREAM_ID: u64 = 1 << 9;
/// `PERF_SAMPLE_RAW`.
pub const SAMPLE_RAW: u64 = 1 << 10;
/// `PERF_SAMPLE_REGS_USER`.
pub const SAMPLE_REGS_USER: u64 = 1 << 12;
/// `PERF_SAMPLE_IDENTIFIER`.
pub const SAMPLE_IDENTIFIER: u64 = 1 << 16;
/// The sample fields the parser understands.
pub const SUPPORTED: u64 = SAMPLE_IP
    | SAMPLE_TID
    | SAMPLE_TIME
    | SAMPLE_ID
    | SAMPLE_CPU
    | SAMPLE_PERIOD
    | SAMPLE_STREAM_ID
    | SAMPLE_RAW
    | SAMPLE_REGS_USER
    | SAMPLE_IDENTIFIER;

/// `PERF_RECORD_LOST`.
pub const RECORD_LOST: u32 = 2;
/// `PERF_RECORD_COMM`.
pub const RECORD_COMM: u32 = 3;
/// `PERF_RECORD_EXIT`.
pub const RECORD_EXIT: u32 = 4;
/// `PERF_RECORD_FORK`.
pub const RECORD_FORK: u32 = 7;
/// `PERF_RECORD_SAMPLE`.
pub const RECORD_SAMPLE: u32 = 9;
/// `PERF_RECORD_LOST_SAMPLES`.
pub const RECORD_LOST_SAMPLES: u32 = 13;
/// `PERF_RECORD_SWITCH_CPU_WIDE` (a per-CPU event with `context_switch` set).
pub const RECORD_SWITCH_CPU_WIDE: u32 = 15;
/// `PERF_RECORD_MISC_COMM_EXEC` (in `misc` of a COMM record: the name changed by exec).
pub const MISC_COMM_EXEC: u16 = 1 << 13;
/// `PERF_RECORD_MISC_SWITCH_OUT` (in `misc` of a SWITCH record: switch-out, else switch-in).
pub const MISC_SWITCH_OUT: u16 = 1 << 13;
/// `PERF_RECORD_MISC_SWITCH_OUT_PREEMPT` (the task left the CPU runnable: preempted).
pub const MISC_SWITCH_OUT_PREEMPT: u16 = 1 << 14;

/// Size of `struct perf_event_header`.
pub const HEADER_LEN: usize = 8;

/// What an event's records contain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Layout {
    /// `perf_event_attr.sample_type`.
    pub sample_type: u64,
    /// `perf_event_attr.sample_regs_user` (with `SAMPLE_REGS_USER`).
    pub regs_user: u64,
    /// `perf_event_attr.sample_id_all`.
    pub sample_id_all: bool,
}

impl Layout {
    /// Bytes of the `sample_id_all` trailer.
    fn trailer_len(&self) -> usize {
        if !self.sample_id_all {
            return 0;
        }
        [SAMPLE_TID, SAMPLE_TIME, SAMPLE_ID, SAMPLE_STREAM_ID, SAMPLE_CPU, SAMPLE_IDENTIFIER]
            .iter()
            .filter(|b| self.sample_type & **b != 0)
            .count()
            * 8
    }
}

/// The sample-id fields (of a sample, or of another record's trailer); absent ones are 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SampleId {
    /// Event id (`IDENTIFIER` or `ID`).
    pub id: u64,
    /// Process id (tgid).
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Timestamp in the event's clock, ns.
    pub time: u64,
    /// CPU.
    pub cpu: u32,
}

/// A sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample<'a> {
    /// Id, pid, tid, time, cpu.
    pub sid: SampleId,
    /// Instruction pointer (`IP`), 0 when absent.
    pub ip: u64,
    /// Tracepoint payload (`RAW`), empty when absent.
    pub raw: &'a [u8],
    /// User registers (`REGS_USER`): ABI (0 = none captured) and the registers as raw bytes,
    /// one u64 per bit of the layout's mask, lowest bit first.
    pub regs: Option<(u64, &'a [u8])>,
}

impl Sample<'_> {
    /// The `i`-th captured user register (0-based among the mask's bits).
    pub fn reg(&self, i: usize) -> Option<u64> {
        let (abi, b) = self.regs?;
        if abi == 0 {
            return None;
        }
        read_u64(b, i * 8)
    }
}

/// A parsed record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record<'a> {
    /// `PERF_RECORD_SAMPLE`.
    Sample(Sample<'a>),
    /// `PERF_RECORD_LOST`: the ring was full and `lost` records of event `id` were dropped.
    Lost {
        /// Event id.
        id: u64,
        /// Records dropped.
        lost: u64,
        /// Trailer.
        sid: SampleId,
    },
    /// `PERF_RECORD_LOST_SAMPLES`: samples dropped inside the kernel.
    LostSamples {
        /// Samples dropped.
        lost: u64,
        /// Trailer.
        sid: SampleId,
    },
    /// `PERF_RECORD_COMM`: a task's name (`exec` = changed by exec).
    Comm {
        /// Process.
        pid: u32,
        /// Thread.
        tid: u32,
        /// New name (without the NUL).
        comm: &'a [u8],
        /// Set by exec.
        exec: bool,
        /// Trailer.
        sid: SampleId,
    },
    /// `PERF_RECORD_FORK` (`exit` = false) or `PERF_RECORD_EXIT` (`exit` = true).
    Task {
        /// Exit rather than fork.
        exit: bool,
        /// Process of the (new or exiting) task.
        pid: u32,
        /// Parent process.
        ppid: u32,
        /// The task.
        tid: u32,
        /// Parent task.
        ptid: u32,
        /// When.
        time: u64,
        /// Trailer.
        sid: SampleId,
    },
    /// `PERF_RECORD_SWITCH_CPU_WIDE`: the trailer's task was switched out (`out`) or in on
    /// the trailer's CPU; `other_*` is the next task (out) or the previous one (in).
    Switch {
        /// A switch-out (else a switch-in).
        out: bool,
        /// The task left the CPU runnable (switch-outs only).
        preempt: bool,
        /// Process of the other task.
        other_pid: u32,
        /// The other task.
        other_tid: u32,
        /// Trailer: the task switched, when and on which CPU.
        sid: SampleId,
    },
    /// Any other record type (counted, not decoded).
    Other {
        /// `perf_event_header.type`.
        ty: u32,
    },
}

/// A record that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError {
    /// Byte offset inside the record where parsing failed.
    pub offset: usize,
    /// What is wrong.
    pub msg: String,
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "record offset {}: {}", self.offset, self.msg)
    }
}

impl std::error::Error for RecordError {}

fn err<T>(offset: usize, msg: impl Into<String>) -> Result<T, RecordError> {
    Err(RecordError { offset, msg: msg.into() })
}

fn read_u64(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(off..off.checked_add(8)?)?.try_into().ok()?))
}

fn read_u32(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(off..off.checked_add(4)?)?.try_into().ok()?))
}

/// Maps event ids to layouts and parses records.
#[derive(Debug, Clone, Default)]
pub struct Parser {
    layouts: HashMap<u64, Layout>,
    /// Layout used when a record has no identifier (a ring with a single event).
    default: Option<Layout>,
}

impl Parser {
    /// A parser for rings whose events all carry `IDENTIFIER`.
    pub fn new() -> Parser {
        Parser::default()
    }

    /// A parser for a ring holding one event with `layout` (identifier optional).
    pub fn single(layout: Layout) -> Parser {
        Parser { layouts: HashMap::new(), default: Some(layout) }
    }

    /// Registers event `id`.
    pub fn add(&mut self, id: u64, layout: Layout) -> Result<(), String> {
        if layout.sample_type & !SUPPORTED != 0 {
            return Err(format!("unsupported sample_type bits {:#x}", layout.sample_type & !SUPPORTED));
        }
        if layout.sample_type & SAMPLE_IDENTIFIER == 0 {
            return Err("events sharing a ring need PERF_SAMPLE_IDENTIFIER".into());
        }
        self.layouts.insert(id, layout);
        Ok(())
    }

    fn layout(&self, id: Option<u64>, at: usize) -> Result<Layout, RecordError> {
        if let Some(l) = self.default {
            return Ok(l);
        }
        match id {
            Some(id) => match self.layouts.get(&id) {
                Some(l) => Ok(*l),
                None => err(at, format!("unknown event id {id}")),
            },
            None => err(at, "record without an event identifier"),
        }
    }

    /// Parses one whole record (header included; `rec.len()` must equal the header's size).
    pub fn parse<'a>(&self, rec: &'a [u8]) -> Result<Record<'a>, RecordError> {
        if rec.len() < HEADER_LEN {
            return err(0, format!("{} bytes is shorter than a record header", rec.len()));
        }
        let ty = read_u32(rec, 0).unwrap_or(0);
        let misc = u16::from_le_bytes([rec[4], rec[5]]);
        let size = u16::from_le_bytes([rec[6], rec[7]]) as usize;
        if size != rec.len() {
            return err(6, format!("header size {size} but the record has {} bytes", rec.len()));
        }
        match ty {
            RECORD_SAMPLE => self.sample(rec).map(Record::Sample),
            RECORD_LOST => {
                let id =
                    read_u64(rec, 8).ok_or(RecordError { offset: 8, msg: "LOST record too short".into() })?;
                let lost = read_u64(rec, 16)
                    .ok_or(RecordError { offset: 16, msg: "LOST record too short".into() })?;
                Ok(Record::Lost { id, lost, sid: self.trailer(rec, 24)? })
            }
            RECORD_LOST_SAMPLES => {
                let lost = read_u64(rec, 8)
                    .ok_or(RecordError { offset: 8, msg: "LOST_SAMPLES too short".into() })?;
                Ok(Record::LostSamples { lost, sid: self.trailer(rec, 16)? })
            }
            RECORD_COMM => {
                let pid =
                    read_u32(rec, 8).ok_or(RecordError { offset: 8, msg: "COMM record too short".into() })?;
                let tid = read_u32(rec, 12)
                    .ok_or(RecordError { offset: 12, msg: "COMM record too short".into() })?;
                // The name is NUL-terminated and padded to 8 bytes; the trailer follows.
                let body = &rec[16..];
                let end = memchr::memchr(0, body)
                    .ok_or(RecordError { offset: 16, msg: "COMM name has no NUL".into() })?;
                let name_len = (end + 1).next_multiple_of(8);
                let sid = self.trailer(rec, 16 + name_len)?;
                Ok(Record::Comm { pid, tid, comm: &body[..end], exec: misc & MISC_COMM_EXEC != 0, sid })
            }
            RECORD_FORK | RECORD_EXIT => {
                let f = |o: usize| {
                    read_u32(rec, o)
                        .ok_or(RecordError { offset: o, msg: "FORK/EXIT record too short".into() })
                };
                let time = read_u64(rec, 24)
                    .ok_or(RecordError { offset: 24, msg: "FORK/EXIT record too short".into() })?;
                Ok(Record::Task {
                    exit: ty == RECORD_EXIT,
                    pid: f(8)?,
                    ppid: f(12)?,
                    tid: f(16)?,
                    ptid: f(20)?,
                    time,
                    sid: self.trailer(rec, 32)?,
                })
            }
            RECORD_SWITCH_CPU_WIDE => {
                let f = |o: usize| {
                    read_u32(rec, o)
                        .ok_or(RecordError { offset: o, msg: "SWITCH_CPU_WIDE record too short".into() })
                };
                Ok(Record::Switch {
                    out: misc & MISC_SWITCH_OUT != 0,
                    preempt: misc & MISC_SWITCH_OUT_PREEMPT != 0,
                    other_pid: f(8)?,
                    other_tid: f(12)?,
                    sid: self.trailer(rec, 16)?,
                })
            }
            _ => Ok(Record::Other { ty }),
        }
    }

    /// The `sample_id_all` trailer of a non-sample record whose body ends at `body_end`.
    fn trailer(&self, rec: &[u8], body_end: usize) -> Result<SampleId, RecordError> {
        if self.default.is_some_and(|l| !l.sample_id_all) {
            return Ok(SampleId::default());
        }
        // The identifier is the last u64 when present.
        let last = rec.len().checked_sub(8).filter(|&o| o >= body_end);
        let id = last.and_then(|o| read_u64(rec, o));
        let layout = self.layout(id, rec.len().saturating_sub(8))?;
        let tl = layout.trailer_len();
        if tl == 0 {
            return Ok(SampleId::default());
        }
        let start = match rec.len().checked_sub(tl) {
            Some(s) if s >= body_end => s,
            _ => {
                return err(
                    body_end,
                    format!("record of {} bytes has no room for a {tl}-byte sample_id trailer", rec.len()),
                );
            }
        };
        let mut sid = SampleId::default();
        let mut o = start;
        let st = layout.sample_type;
        let next = |o: &mut usize| {
            let v = read_u64(rec, *o).unwrap_or(0);
            *o += 8;
            v
        };
        if st & SAMPLE_TID != 0 {
            let v = next(&mut o);
            sid.pid = v as u32;
            sid.tid = (v >> 32) as u32;
        }
        if st & SAMPLE_TIME != 0 {
            sid.time = next(&mut o);
        }
        if st & SAMPLE_ID != 0 {
            sid.id = next(&mut o);
        }
        if st & SAMPLE_STREAM_ID != 0 {
            next(&mut o);
        }
        if st & SAMPLE_CPU != 0 {
            sid.cpu = next(&mut o) as u32;
        }
        if st & SAMPLE_IDENTIFIER != 0 {
            sid.id = next(&mut o);
        }
        Ok(sid)
    }

    fn sample<'a>(&self, rec: &'a [u8]) -> Result<Sample<'a>, RecordError> {
        let id = if self.default.is_some_and(|l| l.sample_type & SAMPLE_IDENTIFIER == 0) {
            None
        } else {
            read_u64(rec, 8)
        };
        let layout = self.layout(id, 8)?;
        let st = layout.sample_type;
        let mut o = HEADER_LEN;
        let mut sid = SampleId::default();
        let short = |o: usize, what: &str| RecordError {
            offset: o,
            msg: format!("sample of {} bytes ends before its {what} field", rec.len()),
        };
        let u64_at = |o: &mut usize, what: &str| -> Result<u64, RecordError> {
            let v = read_u64(rec, *o).ok_or_else(|| short(*o, what))?;
            *o += 8;
            Ok(v)
        };
        if st & SAMPLE_IDENTIFIER != 0 {
            sid.id = u64_at(&mut o, "IDENTIFIER")?;
        }
        let mut ip = 0;
        if st & SAMPLE_IP != 0 {
            ip = u64_at(&mut o, "IP")?;
        }
        if st & SAMPLE_TID != 0 {
            let v = u64_at(&mut o, "TID")?;
            sid.pid = v as u32;
            sid.tid = (v >> 32) as u32;
        }
        if st & SAMPLE_TIME != 0 {
            sid.time = u64_at(&mut o, "TIME")?;
        }
        if st & SAMPLE_ID != 0 {
            sid.id = u64_at(&mut o, "ID")?;
        }
        if st & SAMPLE_STREAM_ID != 0 {
            u64_at(&mut o, "STREAM_ID")?;
        }
        if st & SAMPLE_CPU != 0 {
            sid.cpu = u64_at(&mut o, "CPU")? as u32;
        }
        if st & SAMPLE_PERIOD != 0 {
            u64_at(&mut o, "PERIOD")?;
        }
        let mut raw: &[u8] = &[];
        if st & SAMPLE_RAW != 0 {
            let n = read_u32(rec, o).ok_or_else(|| short(o, "RAW size"))? as usize;
            let start = o + 4;
            raw = match rec.get(start..start.saturating_add(n)) {
                Some(r) => r,
                None => {
                    return err(
                        o,
                        format!("RAW payload of {n} bytes runs past the {}-byte record", rec.len()),
                    );
                }
            };
            // The u32 size + payload is padded to 8 bytes.
            o = (start + n).next_multiple_of(8);
        }
        let mut regs = None;
        if st & SAMPLE_REGS_USER != 0 {
            let abi = u64_at(&mut o, "REGS_USER abi")?;
            let n = if abi == 0 { 0 } else { layout.regs_user.count_ones() as usize * 8 };
            let b = match rec.get(o..o + n) {
                Some(b) => b,
                None => {
                    return err(
                        o,
                        format!("{n} bytes of user registers run past the {}-byte record", rec.len()),
                    );
                }
            };
            regs = Some((abi, b));
        }
        Ok(Sample { sid, ip, raw, regs })
    }
}

/// Builds a sample record (for tests, benches and fuzz seeds): `fields` are the u64 words
/// after the header in layout order; `raw` is appended as `RAW` when `Some`.
pub fn encode_sample(words: &[u64], raw: Option<&[u8]>, tail: &[u64]) -> Vec<u8> {
    let mut b = vec![0u8; HEADER_LEN];
    for w in words {
        b.extend_from_slice(&w.to_le_bytes());
    }
    if let Some(r) = raw {
        b.extend_from_slice(&(r.len() as u32).to_le_bytes());
        b.extend_from_slice(r);
        while !b.len().is_multiple_of(8) {
            b.push(0);
        }
    }
    for w in tail {
        b.extend_from_slice(&w.to_le_bytes());
    }
    b[0..4].copy_from_slice(&RECORD_SAMPLE.to_le_bytes());
    let len = b.len() as u16;
    b[6..8].copy_from_slice(&len.to_le_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    const ST: u64 = SAMPLE_IDENTIFIER | SAMPLE_TID | SAMPLE_TIME | SAMPLE_CPU | SAMPLE_RAW;

    fn parser() -> Parser {
        let mut p = Parser::new();
        p.add(7, Layout { sample_type: ST, regs_user: 0, sample_id_all: true }).unwrap();
        p.add(
            9,
            Layout { sample_type: ST | SAMPLE_IP | SAMPLE_REGS_USER, regs_user: 0b11, sample_id_all: true },
        )
        .unwrap();
        p
    }

    #[test]
    fn sample_with_raw() {
        let rec = encode_sample(&[7, (42u64 << 32) | 41, 1_000, 1], Some(&[1, 2, 3, 4, 5]), &[]);
        assert_eq!(rec.len(), 8 + 32 + 16);
        let Record::Sample(s) = parser().parse(&rec).unwrap() else { panic!() };
        assert_eq!(s.sid, SampleId { id: 7, pid: 41, tid: 42, time: 1_000, cpu: 1 });
        assert_eq!(s.raw, &[1, 2, 3, 4, 5]);
    }

    #[test]
    fn sample_with_regs() {
        let mut rec = encode_sample(&[9, 0xdead, (5u64 << 32) | 5, 7, 0], Some(&[0; 4]), &[2, 11, 22]);
        let Record::Sample(s) = parser().parse(&rec).unwrap() else { panic!() };
        assert_eq!((s.ip, s.reg(0), s.reg(1), s.reg(2)), (0xdead, Some(11), Some(22), None));
        // Truncate the registers: an error naming the offset.
        rec.truncate(rec.len() - 8);
        let n = rec.len() as u16;
        rec[6..8].copy_from_slice(&n.to_le_bytes());
        assert!(parser().parse(&rec).unwrap_err().msg.contains("user registers"));
    }

    #[test]
    fn lost_and_trailers() {
        let mut rec = Vec::new();
        rec.extend_from_slice(&RECORD_LOST.to_le_bytes());
        rec.extend_from_slice(&0u16.to_le_bytes());
        rec.extend_from_slice(&0u16.to_le_bytes());
        for w in [7u64, 13, (3u64 << 32) | 3, 555, 1, 7] {
            rec.extend_from_slice(&w.to_le_bytes());
        }
        let n = rec.len() as u16;
        rec[6..8].copy_from_slice(&n.to_le_bytes());
        match parser().parse(&rec).unwrap() {
            Record::Lost { id, lost, sid } => {
                assert_eq!((id, lost, sid.time, sid.cpu, sid.tid), (7, 13, 555, 1, 3));
            }
            r => panic!("{r:?}"),
        }
    }

    #[test]
    fn rejects_bad_records() {
        let p = parser();
        assert!(p.parse(&[0; 4]).is_err());
        let mut rec = encode_sample(&[8, 0, 0, 0], Some(&[]), &[]);
        assert!(p.parse(&rec).unwrap_err().msg.contains("unknown event id 8"));
        rec = encode_sample(&[7, 0, 0, 0], Some(&[1; 8]), &[]);
        rec[40..44].copy_from_slice(&1000u32.to_le_bytes());
        assert!(p.parse(&rec).unwrap_err().msg.contains("RAW payload"));
        rec[6] = 200;
        assert!(p.parse(&rec).unwrap_err().msg.contains("header size"));
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn arbitrary_bytes_never_panic(mut b in proptest::collection::vec(any::<u8>(), 0..300), ty in 0u32..20, id in 6u64..10) {
                if b.len() >= 16 {
                    b[0..4].copy_from_slice(&ty.to_le_bytes());
                    let n = b.len() as u16;
                    b[6..8].copy_from_slice(&n.to_le_bytes());
                    b[8..16].copy_from_slice(&id.to_le_bytes());
                }
                let _ = parser().parse(&b);
            }

            #[test]
            fn samples_round_trip(pid in any::<u32>(), tid in any::<u32>(), time in any::<u64>(), cpu in 0u64..4096,
                                  raw in proptest::collection::vec(any::<u8>(), 0..100)) {
                let rec = encode_sample(&[7, (u64::from(tid) << 32) | u64::from(pid), time, cpu], Some(&raw), &[]);
                let Record::Sample(s) = parser().parse(&rec).unwrap() else { panic!("not a sample") };
                prop_assert_eq!(s.sid, SampleId { id: 7, pid, tid, time, cpu: cpu as u32 });
                prop_assert_eq!(s.raw, &raw[..]);
            }
        }
    }
}
