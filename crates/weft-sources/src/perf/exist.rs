//! Scheduler records in EXIST's compact form: one fixed 24-byte record per switch of a traced
//! thread onto or off a CPU.
//!
//! EXIST keeps exactly (timestamp, cpu, pid, tid, switch in/out) around a target process; weft
//! adds the state the thread left in (runnable vs. sleeping) and the thread on the other side
//! of the switch, which still fits in 24 bytes.
//!
//! ## On-disk format (version 1, little-endian)
//!
//! A 16-byte header, then records back to back:
//!
//! | bytes | field |
//! |---|---|
//! | 0..8 | magic `WEFTSCHD` |
//! | 8..12 | u32 version = 1 |
//! | 12..16 | u32 record size = 24 |
//!
//! | bytes | record field |
//! |---|---|
//! | 0..8 | u64 time, ns since the UNIX epoch |
//! | 8..12 | u32 pid (tgid) of the thread |
//! | 12..16 | u32 tid of the thread |
//! | 16..18 | u16 CPU |
//! | 18 | u8 direction: 1 = switched in (starts running), 0 = switched out |
//! | 19 | u8 state when switched out: 0 = runnable (preempted, `R`), 1 = interruptible sleep (`S`), 2 = uninterruptible (`D`), 3 = other (stopped, dead, idle, parked); 0 for switch-ins |
//! | 20..24 | u32 the other thread of the switch (the next thread for a switch-out, the previous one for a switch-in; 0 = idle) |
//!
//! A file whose length is not 16 + 24·n has a torn last record: the reader reports it with
//! its offset. Unknown direction/state values are errors naming the record's offset.

use std::io::{Read, Write};

/// File magic.
pub const MAGIC: &[u8; 8] = b"WEFTSCHD";
/// Format version.
pub const VERSION: u32 = 1;
/// Header size.
pub const HEADER_LEN: usize = 16;
/// Record size.
pub const RECORD_LEN: usize = 24;

/// Which way the switch went for the record's thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// The thread started running on the CPU.
    In,
    /// The thread stopped running on the CPU.
    Out,
}

/// The state a thread left the CPU in (a class of the kernel's `prev_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeaveState {
    /// Preempted while runnable (`R`): waiting for a CPU.
    Runnable,
    /// Interruptible sleep (`S`): waiting for an event (sleep, I/O readiness, futex).
    Sleeping,
    /// Uninterruptible sleep (`D`): usually waiting for disk I/O.
    DiskWait,
    /// Anything else (stopped, traced, dead, idle, parked).
    Other,
}

impl LeaveState {
    /// From the kernel's `sched_switch.prev_state`: the low 8 state bits; none set means
    /// runnable (a preempted task reports `TASK_REPORT_MAX`, 0x100, with no state bits).
    pub fn from_prev_state(s: i64) -> LeaveState {
        let bits = s & 0xff;
        if bits == 0 {
            LeaveState::Runnable
        } else if bits & 0x1 != 0 {
            LeaveState::Sleeping
        } else if bits & 0x2 != 0 {
            LeaveState::DiskWait
        } else {
            LeaveState::Other
        }
    }
    /// One-letter code as `ps`/`perf sched` print it (`R`, `S`, `D`, `-`).
    pub fn letter(self) -> &'static str {
        match self {
            LeaveState::Runnable => "R",
            LeaveState::Sleeping => "S",
            LeaveState::DiskWait => "D",
            LeaveState::Other => "-",
        }
    }
    fn code(self) -> u8 {
        match self {
            LeaveState::Runnable => 0,
            LeaveState::Sleeping => 1,
            LeaveState::DiskWait => 2,
            LeaveState::Other => 3,
        }
    }
}

/// One compact scheduler record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SchedRecord {
    /// ns since the UNIX epoch.
    pub time_ns: u64,
    /// Process (tgid).
    pub pid: u32,
    /// Thread.
    pub tid: u32,
    /// CPU.
    pub cpu: u16,
    /// In or out.
    pub dir: Direction,
    /// State when switched out (`Runnable` for switch-ins).
    pub state: LeaveState,
    /// The other thread of the switch (0 = idle).
    pub peer_tid: u32,
}

impl SchedRecord {
    /// The 24 bytes of this record.
    pub fn encode(&self) -> [u8; RECORD_LEN] {
        let mut b = [0u8; RECORD_LEN];
        b[0..8].copy_from_slice(&self.time_ns.to_le_bytes());
        b[8..12].copy_from_slice(&self.pid.to_le_bytes());
        b[12..16].copy_from_slice(&self.tid.to_le_bytes());
        b[16..18].copy_from_slice(&self.cpu.to_le_bytes());
        b[18] = (self.dir == Direction::In) as u8;
        b[19] = if self.dir == Direction::In { 0 } else { self.state.code() };
        b[20..24].copy_from_slice(&self.peer_tid.to_le_bytes());
        b
    }

    /// Decodes 24 bytes; the error says which byte is wrong.
    pub fn decode(b: &[u8; RECORD_LEN]) -> Result<SchedRecord, (usize, String)> {
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let dir = match b[18] {
            1 => Direction::In,
            0 => Direction::Out,
            v => return Err((18, format!("direction byte {v} (expected 0 or 1)"))),
        };
        let state = match b[19] {
            0 => LeaveState::Runnable,
            1 => LeaveState::Sleeping,
            2 => LeaveState::DiskWait,
            3 => LeaveState::Other,
            v => return Err((19, format!("state byte {v} (expected 0..=3)"))),
        };
        Ok(SchedRecord {
            time_ns: u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
            pid: u32_at(8),
            tid: u32_at(12),
            cpu: u16::from_le_bytes([b[16], b[17]]),
            dir,
            state,
            peer_tid: u32_at(20),
        })
    }
}

/// The EXIST records of one `sched_switch` event: a switch-out for the previous thread and a
/// switch-in for the next one, each only when `traced(tid)` says so (the idle task, tid 0,
/// never gets a record).
pub fn from_event(e: &weft_model::Event, traced: impl Fn(u32) -> bool) -> impl Iterator<Item = SchedRecord> {
    use weft_model::EventKind;
    use weft_model::event::KernelEvent;
    let mut out = [None, None];
    if let EventKind::Kernel(KernelEvent::SchedSwitch {
        cpu,
        prev_pid,
        prev_tid,
        prev_state,
        next_pid,
        next_tid,
        ..
    }) = &e.kind
    {
        let cpu = (*cpu).min(u16::MAX as u32) as u16;
        if *prev_tid != 0 && traced(*prev_tid) {
            out[0] = Some(SchedRecord {
                time_ns: e.time_ns,
                pid: *prev_pid,
                tid: *prev_tid,
                cpu,
                dir: Direction::Out,
                state: LeaveState::from_prev_state(*prev_state),
                peer_tid: *next_tid,
            });
        }
        if *next_tid != 0 && traced(*next_tid) {
            out[1] = Some(SchedRecord {
                time_ns: e.time_ns,
                pid: *next_pid,
                tid: *next_tid,
                cpu,
                dir: Direction::In,
                state: LeaveState::Runnable,
                peer_tid: *prev_tid,
            });
        }
    }
    out.into_iter().flatten()
}

/// Writes the header, then records.
#[derive(Debug)]
pub struct Writer<W: Write> {
    out: W,
    /// Records written.
    pub records: u64,
}

impl<W: Write> Writer<W> {
    /// Writes the header.
    pub fn new(mut out: W) -> std::io::Result<Writer<W>> {
        let mut h = [0u8; HEADER_LEN];
        h[..8].copy_from_slice(MAGIC);
        h[8..12].copy_from_slice(&VERSION.to_le_bytes());
        h[12..16].copy_from_slice(&(RECORD_LEN as u32).to_le_bytes());
        out.write_all(&h)?;
        Ok(Writer { out, records: 0 })
    }
    /// Appends a record.
    pub fn write(&mut self, r: &SchedRecord) -> std::io::Result<()> {
        self.records += 1;
        self.out.write_all(&r.encode())
    }
    /// Flushes and returns the output.
    pub fn finish(mut self) -> std::io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// A bad EXIST file.
#[derive(Debug, thiserror::Error)]
pub enum ExistError {
    /// Reading failed.
    #[error("read: {0}")]
    Io(#[from] std::io::Error),
    /// The content is wrong at `offset`.
    #[error("byte offset {offset}: {msg}")]
    Invalid {
        /// Byte offset in the file.
        offset: u64,
        /// What is wrong.
        msg: String,
    },
}

/// Reads records one at a time.
#[derive(Debug)]
pub struct Reader<R: Read> {
    input: R,
    offset: u64,
}

impl<R: Read> Reader<R> {
    /// Reads and checks the header.
    pub fn new(mut input: R) -> Result<Reader<R>, ExistError> {
        let mut h = [0u8; HEADER_LEN];
        let n = read_full(&mut input, &mut h)?;
        if n < HEADER_LEN {
            return Err(ExistError::Invalid {
                offset: n as u64,
                msg: format!("file ends inside the {HEADER_LEN}-byte header"),
            });
        }
        if &h[..8] != MAGIC {
            return Err(ExistError::Invalid {
                offset: 0,
                msg: "not a weft scheduler-record file (magic is not WEFTSCHD)".into(),
            });
        }
        let version = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
        if version != VERSION {
            return Err(ExistError::Invalid {
                offset: 8,
                msg: format!("version {version} (this reader knows {VERSION})"),
            });
        }
        let size = u32::from_le_bytes([h[12], h[13], h[14], h[15]]);
        if size as usize != RECORD_LEN {
            return Err(ExistError::Invalid {
                offset: 12,
                msg: format!("record size {size} (expected {RECORD_LEN})"),
            });
        }
        Ok(Reader { input, offset: HEADER_LEN as u64 })
    }

    /// The next record, `None` at a clean end.
    pub fn next_record(&mut self) -> Result<Option<SchedRecord>, ExistError> {
        let mut b = [0u8; RECORD_LEN];
        let n = read_full(&mut self.input, &mut b)?;
        if n == 0 {
            return Ok(None);
        }
        if n < RECORD_LEN {
            return Err(ExistError::Invalid {
                offset: self.offset,
                msg: format!("torn record: {n} of {RECORD_LEN} bytes before the end of the file"),
            });
        }
        let r = SchedRecord::decode(&b)
            .map_err(|(o, msg)| ExistError::Invalid { offset: self.offset + o as u64, msg })?;
        self.offset += RECORD_LEN as u64;
        Ok(Some(r))
    }
}

fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rec() -> impl Strategy<Value = SchedRecord> {
        (any::<u64>(), any::<u32>(), any::<u32>(), any::<u16>(), any::<bool>(), 0u8..4, any::<u32>())
            .prop_map(|(t, p, tid, cpu, inn, st, peer)| SchedRecord {
                time_ns: t,
                pid: p,
                tid,
                cpu,
                dir: if inn { Direction::In } else { Direction::Out },
                state: if inn {
                    LeaveState::Runnable
                } else {
                    [LeaveState::Runnable, LeaveState::Sleeping, LeaveState::DiskWait, LeaveState::Other]
                        [st as usize]
                },
                peer_tid: peer,
            })
    }

    proptest! {
        #[test]
        fn roundtrip(recs in proptest::collection::vec(rec(), 0..50)) {
            let mut w = Writer::new(Vec::new()).unwrap();
            for r in &recs { w.write(r).unwrap(); }
            let bytes = w.finish().unwrap();
            prop_assert_eq!(bytes.len(), HEADER_LEN + RECORD_LEN * recs.len());
            let mut rd = Reader::new(&bytes[..]).unwrap();
            let mut back = Vec::new();
            while let Some(r) = rd.next_record().unwrap() { back.push(r); }
            prop_assert_eq!(back, recs);
        }

        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut input = MAGIC.to_vec();
            input.extend_from_slice(&1u32.to_le_bytes());
            input.extend_from_slice(&24u32.to_le_bytes());
            input.extend_from_slice(&bytes);
            if let Ok(mut r) = Reader::new(&input[..]) {
                while let Ok(Some(_)) = r.next_record() {}
            }
        }
    }

    #[test]
    fn errors_name_offsets() {
        assert!(matches!(
            Reader::new(&b"NOTMAGIC\x01\0\0\0\x18\0\0\0"[..]),
            Err(ExistError::Invalid { offset: 0, .. })
        ));
        let mut w = Writer::new(Vec::new()).unwrap();
        let r = SchedRecord {
            time_ns: 5,
            pid: 1,
            tid: 2,
            cpu: 1,
            dir: Direction::Out,
            state: LeaveState::Sleeping,
            peer_tid: 0,
        };
        w.write(&r).unwrap();
        w.write(&r).unwrap();
        let mut b = w.finish().unwrap();
        b[HEADER_LEN + RECORD_LEN + 18] = 7;
        let mut rd = Reader::new(&b[..]).unwrap();
        assert_eq!(rd.next_record().unwrap(), Some(r));
        match rd.next_record() {
            Err(ExistError::Invalid { offset, .. }) => {
                assert_eq!(offset, (HEADER_LEN + RECORD_LEN + 18) as u64)
            }
            other => panic!("{other:?}"),
        }
        b.truncate(HEADER_LEN + RECORD_LEN + 10);
        let mut rd = Reader::new(&b[..]).unwrap();
        rd.next_record().unwrap();
        assert!(matches!(rd.next_record(), Err(ExistError::Invalid { offset: 40, .. })));
        assert_eq!(LeaveState::from_prev_state(0), LeaveState::Runnable);
        assert_eq!(LeaveState::from_prev_state(1), LeaveState::Sleeping);
        assert_eq!(LeaveState::from_prev_state(2), LeaveState::DiskWait);
        assert_eq!(LeaveState::from_prev_state(0x80), LeaveState::Other);
    }
}
