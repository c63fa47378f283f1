//! Ring records → [`weft_model::Event`]s.
//!
//! Each event id of a capture is registered with what it is ([`Probe`]); samples of the
//! scheduler and syscall tracepoints become typed [`KernelEvent`]s (their fields located by
//! name in the tracepoint's `format`, never by hard-coded offsets), uprobe samples become
//! `UprobeEntry`/`UprobeReturn`, any other tracepoint a [`TracepointEvent`] with every field
//! decoded generically. Side records (LOST, COMM, FORK/EXIT) update counters and the
//! thread → process map used to fill in `next_pid` of a switch (the tracepoint only has tids).
//!
//! Malformed records never stop decoding: they are counted with the first few messages.
//!
//! ## Switch-ins the tracepoint misses
//!
//! `sched_switch` is a tracepoint, and a tracepoint does not fire where RCU is not watching:
//! on a tickless CPU leaving idle, the kernel (seen on 6.18 under KVM) switches from the idle
//! task to a woken thread without the tracepoint firing, so the thread would seem to leave
//! the CPU twice without ever arriving. The per-CPU `sched_switch` event is therefore opened
//! with `context_switch`, which makes the scheduler itself write a `PERF_RECORD_SWITCH_CPU_WIDE`
//! record on every switch-in and switch-out. The decoder pairs each switch-in record with the
//! tracepoint sample that announced it (same CPU, same thread, the sample comes first in the
//! CPU's ring); a switch-in without one becomes a `SchedSwitch` of its own, with the previous
//! task from the record, its name from what the decoder has seen, and its state from the
//! preceding switch-out record (preempted → 0 = runnable, else 1 = sleeping: the record does
//! not tell an interruptible sleep from an uninterruptible one). These are counted in
//! [`DecodeStats::switch_ins_recovered`]. A task that is already exiting has no id in the
//! records (-1): its switch-in confirms whatever the tracepoint announced, and as the previous
//! task it is the one the decoder last saw switched in on that CPU.

use std::collections::HashMap;
use std::sync::Arc;

use weft_model::event::{KernelEvent, TracepointEvent};
use weft_model::{Clock, Event, EventKind, SourceId};

use super::format::{Field, Format};
use super::record::{Layout, Parser, Record, Sample};
use crate::parse::Interner;

/// What an event id is.
#[derive(Debug, Clone)]
pub enum Probe {
    /// `sched:sched_switch`.
    SchedSwitch(Box<SwitchFields>),
    /// `sched:sched_wakeup` / `sched_wakeup_new` / `sched_waking`.
    SchedWakeup(WakeupFields),
    /// `raw_syscalls:sys_enter`.
    SysEnter(SysFields),
    /// `raw_syscalls:sys_exit`.
    SysExit(SysFields),
    /// Any other tracepoint, decoded generically.
    Generic(Arc<Format>),
    /// A uprobe (`ret` = uretprobe) named `binary:function`, registered as a tracefs
    /// dynamic event with the argument (or return) registers as fields.
    Uprobe {
        /// Probe name.
        name: Arc<str>,
        /// Return probe.
        ret: bool,
        /// `__probe_ip` (entry) or `__probe_ret_ip` (return).
        ip: Field,
        /// `arg0`..`arg5` (entry) or `ret` (return).
        regs: Vec<Field>,
    },
    /// The side-record carrier (no samples).
    Dummy,
}

/// Field locations of `sched_switch`.
#[derive(Debug, Clone)]
pub struct SwitchFields {
    prev_comm: Field,
    prev_pid: Field,
    prev_state: Field,
    next_comm: Field,
    next_pid: Field,
}

/// Field locations of `sched_wakeup`.
#[derive(Debug, Clone)]
pub struct WakeupFields {
    pid: Field,
    target_cpu: Field,
}

/// Field locations of `raw_syscalls:sys_enter`/`sys_exit` (`args` for enter, `ret` for exit).
#[derive(Debug, Clone)]
pub struct SysFields {
    id: Field,
    value: Field,
}

impl Probe {
    /// The decoder of a uprobe dynamic event made by [`super::uprobe::DynamicUprobes`].
    pub fn for_uprobe(name: Arc<str>, ret: bool, f: &Format) -> Option<Probe> {
        let g = |n: &str| f.field(n).cloned();
        let (ip, regs) = if ret {
            (g("__probe_ret_ip")?, vec![g("ret")?])
        } else {
            (g("__probe_ip")?, (0..6).map(|i| g(&format!("arg{i}"))).collect::<Option<Vec<_>>>()?)
        };
        Some(Probe::Uprobe { name, ret, ip, regs })
    }

    /// The typed decoder for a tracepoint when weft knows it, else the generic one.
    pub fn for_tracepoint(f: Format) -> Probe {
        let g = |n: &str| f.field(n).cloned();
        let typed = match &*f.full_name {
            "sched:sched_switch" => (|| {
                Some(Probe::SchedSwitch(Box::new(SwitchFields {
                    prev_comm: g("prev_comm")?,
                    prev_pid: g("prev_pid")?,
                    prev_state: g("prev_state")?,
                    next_comm: g("next_comm")?,
                    next_pid: g("next_pid")?,
                })))
            })(),
            "sched:sched_wakeup" | "sched:sched_wakeup_new" | "sched:sched_waking" => {
                (|| Some(Probe::SchedWakeup(WakeupFields { pid: g("pid")?, target_cpu: g("target_cpu")? })))()
            }
            "raw_syscalls:sys_enter" => {
                (|| Some(Probe::SysEnter(SysFields { id: g("id")?, value: g("args")? })))()
            }
            "raw_syscalls:sys_exit" => {
                (|| Some(Probe::SysExit(SysFields { id: g("id")?, value: g("ret")? })))()
            }
            _ => None,
        };
        typed.unwrap_or_else(|| Probe::Generic(Arc::new(f)))
    }
}

/// Counters of one decoder.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DecodeStats {
    /// Records seen.
    pub records: u64,
    /// Samples decoded into events.
    pub samples: u64,
    /// Records the kernel dropped (`PERF_RECORD_LOST` totals).
    pub lost: u64,
    /// Samples dropped inside the kernel (`PERF_RECORD_LOST_SAMPLES`).
    pub lost_samples: u64,
    /// Records that could not be parsed or decoded.
    pub malformed: u64,
    /// The first few malformed-record messages.
    pub first_errors: Vec<String>,
    /// FORK/EXIT/COMM, SWITCH and other side records.
    pub side_records: u64,
    /// Switch-ins the `sched_switch` tracepoint did not report, recovered from
    /// `PERF_RECORD_SWITCH_CPU_WIDE` records (see the module docs).
    pub switch_ins_recovered: u64,
}

/// A side record the capture acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// A thread appeared (`pid` is its process).
    Fork {
        /// Process.
        pid: u32,
        /// Thread.
        tid: u32,
    },
    /// A thread exited.
    Exit {
        /// Process.
        pid: u32,
        /// Thread.
        tid: u32,
    },
}

/// What one record decoded to.
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded {
    /// An event (and whether it came from a per-task event, i.e. from a traced thread).
    Event(Event),
    /// A task side record.
    Side(Side),
    /// Nothing to emit (lost counts, comm, malformed — all counted in [`DecodeStats`]).
    Nothing,
}

/// Decodes the records of one capture.
#[derive(Debug)]
pub struct Decoder {
    parser: Parser,
    probes: HashMap<u64, Probe>,
    clock: Clock,
    source: SourceId,
    names: Interner,
    tgid: HashMap<u32, u32>,
    proc_lookups: bool,
    /// Thread names seen in switch samples and COMM records.
    comms: HashMap<u32, Arc<str>>,
    /// Per CPU: the thread the last `sched_switch` sample switched in, until its SWITCH
    /// record arrives.
    announced_in: HashMap<u32, u32>,
    /// Per CPU: the last switch-out record (thread, preempted).
    last_out: HashMap<u32, (u32, bool)>,
    /// Per CPU: the thread last switched in.
    running: HashMap<u32, u32>,
    /// Counters.
    pub stats: DecodeStats,
}

const MAX_ERRORS: usize = 5;
const MAX_TGID: usize = 1 << 20;
/// The pid/tid of a task that is already exiting, in SWITCH records.
const DEAD: u32 = u32::MAX;

impl Decoder {
    /// A decoder stamping events with `source` and mapping times through `clock`.
    pub fn new(clock: Clock, source: SourceId) -> Decoder {
        Decoder {
            parser: Parser::new(),
            probes: HashMap::new(),
            clock,
            source,
            names: Interner::new(4096),
            tgid: HashMap::new(),
            proc_lookups: false,
            comms: HashMap::new(),
            announced_in: HashMap::new(),
            last_out: HashMap::new(),
            running: HashMap::new(),
            stats: DecodeStats::default(),
        }
    }

    /// Look up unknown threads' processes in `/proc` (live captures; off for files/tests).
    pub fn with_proc_lookups(mut self, on: bool) -> Decoder {
        self.proc_lookups = on;
        self
    }

    /// Registers event `id`.
    pub fn add(&mut self, id: u64, layout: Layout, probe: Probe) -> Result<(), String> {
        self.parser.add(id, layout)?;
        self.probes.insert(id, probe);
        Ok(())
    }

    /// The clock in use.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// Records that `tid` belongs to process `pid`.
    pub fn learn(&mut self, pid: u32, tid: u32) {
        if self.tgid.len() >= MAX_TGID {
            self.tgid.clear();
        }
        self.tgid.insert(tid, pid);
    }

    fn remember_comm(&mut self, tid: u32, name: Arc<str>) {
        if tid == 0 {
            return;
        }
        if self.comms.len() >= MAX_TGID {
            self.comms.clear();
        }
        self.comms.insert(tid, name);
    }

    /// The name of thread `tid`: the idle task is `swapper/<cpu>` as in the kernel.
    fn comm_of(&mut self, tid: u32, cpu: u32) -> Arc<str> {
        if tid == 0 {
            return self.names.get(format!("swapper/{cpu}").as_bytes());
        }
        if let Some(c) = self.comms.get(&tid) {
            return c.clone();
        }
        let name = if self.proc_lookups {
            std::fs::read_to_string(format!("/proc/{tid}/comm"))
                .map(|s| s.trim_end().to_owned())
                .unwrap_or_default()
        } else {
            String::new()
        };
        let name = self.names.get(name.as_bytes());
        self.remember_comm(tid, name.clone());
        name
    }

    /// The process of thread `tid` (0 for the idle task; `tid` itself when unknown and no
    /// `/proc` entry exists).
    pub fn process_of(&mut self, tid: u32) -> u32 {
        if tid == 0 {
            return 0;
        }
        if let Some(p) = self.tgid.get(&tid) {
            return *p;
        }
        let pid = if self.proc_lookups { proc_tgid(tid).unwrap_or(tid) } else { tid };
        self.learn(pid, tid);
        pid
    }

    fn bad(&mut self, msg: String) -> Decoded {
        self.stats.malformed += 1;
        if self.stats.first_errors.len() < MAX_ERRORS {
            self.stats.first_errors.push(msg);
        }
        Decoded::Nothing
    }

    /// Decodes one record read from the ring of `ring_cpu`.
    pub fn decode(&mut self, rec: &[u8], ring_cpu: u32) -> Decoded {
        self.stats.records += 1;
        let parsed = match self.parser.parse(rec) {
            Ok(r) => r,
            Err(e) => return self.bad(format!("cpu {ring_cpu}: {e}")),
        };
        match parsed {
            Record::Sample(s) => {
                let Some(probe) = self.probes.get(&s.sid.id).cloned() else {
                    return self.bad(format!("cpu {ring_cpu}: sample of unregistered event id {}", s.sid.id));
                };
                match self.sample(&probe, &s) {
                    Ok(Some(kind)) => {
                        self.stats.samples += 1;
                        Decoded::Event(Event {
                            time_ns: self.clock.to_unix_nanos(s.sid.time),
                            raw_time: s.sid.time,
                            source: self.source,
                            kind,
                        })
                    }
                    Ok(None) => Decoded::Nothing,
                    Err(msg) => {
                        let name = probe_name(&probe);
                        self.bad(format!("cpu {ring_cpu}: {name} at raw time {}: {msg}", s.sid.time))
                    }
                }
            }
            Record::Lost { lost, .. } => {
                self.stats.lost += lost;
                Decoded::Nothing
            }
            Record::LostSamples { lost, .. } => {
                self.stats.lost_samples += lost;
                Decoded::Nothing
            }
            Record::Comm { pid, tid, comm, .. } => {
                self.stats.side_records += 1;
                self.learn(pid, tid);
                let name = self.names.get(comm);
                self.remember_comm(tid, name);
                Decoded::Nothing
            }
            Record::Task { exit, pid, tid, .. } => {
                self.stats.side_records += 1;
                self.learn(pid, tid);
                Decoded::Side(if exit { Side::Exit { pid, tid } } else { Side::Fork { pid, tid } })
            }
            Record::Switch { out, preempt, other_pid, other_tid, sid } => {
                self.stats.side_records += 1;
                if out {
                    self.last_out.insert(ring_cpu, (sid.tid, preempt));
                    return Decoded::Nothing;
                }
                let announced = self.announced_in.remove(&ring_cpu);
                // A task already unhashed (exiting) has no id in these records: -1.
                if announced == Some(sid.tid) || sid.tid == DEAD {
                    if let Some(t) = announced.filter(|_| sid.tid == DEAD) {
                        self.running.insert(ring_cpu, t);
                    }
                    return Decoded::Nothing;
                }
                let other_tid = match other_tid {
                    DEAD => self.running.get(&ring_cpu).copied().unwrap_or(DEAD),
                    t => t,
                };
                let other_pid = if other_pid == DEAD { self.process_of(other_tid) } else { other_pid };
                self.running.insert(ring_cpu, sid.tid);
                // A switch-in the tracepoint did not report.
                self.stats.switch_ins_recovered += 1;
                let prev_state = match self.last_out.get(&ring_cpu) {
                    _ if other_tid == 0 => 0,
                    Some(&(t, preempt)) if t == other_tid => i64::from(!preempt),
                    _ => 1,
                };
                if sid.tid != 0 {
                    self.learn(sid.pid, sid.tid);
                }
                if other_tid != 0 {
                    self.learn(other_pid, other_tid);
                }
                let prev_comm = self.comm_of(other_tid, ring_cpu);
                let next_comm = self.comm_of(sid.tid, ring_cpu);
                Decoded::Event(Event {
                    time_ns: self.clock.to_unix_nanos(sid.time),
                    raw_time: sid.time,
                    source: self.source,
                    kind: EventKind::Kernel(KernelEvent::SchedSwitch {
                        cpu: ring_cpu,
                        prev_pid: other_pid,
                        prev_tid: other_tid,
                        prev_comm,
                        prev_state,
                        next_pid: sid.pid,
                        next_tid: sid.tid,
                        next_comm,
                    }),
                })
            }
            Record::Other { .. } => {
                self.stats.side_records += 1;
                Decoded::Nothing
            }
        }
    }

    fn sample(&mut self, probe: &Probe, s: &Sample<'_>) -> Result<Option<EventKind>, String> {
        let (pid, tid, cpu) = (s.sid.pid, s.sid.tid, s.sid.cpu);
        if tid != 0 {
            self.learn(pid, tid);
        }
        let raw = s.raw;
        let need = |f: &Field| {
            f.int(raw).ok_or_else(|| {
                format!(
                    "field {} at {}+{} lies outside the {}-byte payload",
                    f.name,
                    f.offset,
                    f.size,
                    raw.len()
                )
            })
        };
        Ok(Some(match probe {
            Probe::SchedSwitch(f) => {
                let prev_tid = need(&f.prev_pid)? as u32;
                let next_tid = need(&f.next_pid)? as u32;
                let prev_state = need(&f.prev_state)?;
                let prev_comm = self.names.get(trim_nul(field_bytes(&f.prev_comm, raw)?));
                let next_comm = self.names.get(trim_nul(field_bytes(&f.next_comm, raw)?));
                self.remember_comm(prev_tid, prev_comm.clone());
                self.remember_comm(next_tid, next_comm.clone());
                self.announced_in.insert(cpu, next_tid);
                self.running.insert(cpu, next_tid);
                // The sample's pid/tid are the task current at the tracepoint: the previous one.
                let prev_pid = if prev_tid == tid { pid } else { self.process_of(prev_tid) };
                let next_pid = self.process_of(next_tid);
                EventKind::Kernel(KernelEvent::SchedSwitch {
                    cpu,
                    prev_pid,
                    prev_tid,
                    prev_comm,
                    prev_state,
                    next_pid,
                    next_tid,
                    next_comm,
                })
            }
            Probe::SchedWakeup(f) => {
                let wtid = need(&f.pid)? as u32;
                let target_cpu = need(&f.target_cpu)? as u32;
                let wpid = self.process_of(wtid);
                EventKind::Kernel(KernelEvent::SchedWakeup { cpu, pid: wpid, tid: wtid, target_cpu })
            }
            Probe::SysEnter(f) => {
                let nr = need(&f.id)?;
                let b = field_bytes(&f.value, raw)?;
                let mut args = [0u64; 6];
                for (i, a) in args.iter_mut().enumerate() {
                    *a = b
                        .get(i * 8..i * 8 + 8)
                        .and_then(|x| x.try_into().ok())
                        .map(u64::from_le_bytes)
                        .unwrap_or(0);
                }
                EventKind::Kernel(KernelEvent::SyscallEnter { cpu, pid, tid, nr, args })
            }
            Probe::SysExit(f) => {
                let nr = need(&f.id)?;
                let ret = need(&f.value)?;
                EventKind::Kernel(KernelEvent::SyscallExit { cpu, pid, tid, nr, ret })
            }
            Probe::Generic(fmt) => {
                let fields = fmt.decode(raw)?;
                EventKind::Tracepoint(TracepointEvent {
                    name: fmt.full_name.clone(),
                    cpu: Some(cpu),
                    pid: Some(pid),
                    tid: Some(tid),
                    fields,
                })
            }
            Probe::Uprobe { name, ret, ip, regs } => {
                let ip = need(ip)? as u64;
                if *ret {
                    let ret = match regs.first() {
                        Some(f) => need(f)?,
                        None => 0,
                    };
                    EventKind::Kernel(KernelEvent::UprobeReturn {
                        cpu,
                        pid,
                        tid,
                        probe: name.clone(),
                        ip,
                        ret,
                    })
                } else {
                    let mut args = [0u64; 6];
                    for (a, f) in args.iter_mut().zip(regs) {
                        *a = need(f)? as u64;
                    }
                    EventKind::Kernel(KernelEvent::UprobeEntry {
                        cpu,
                        pid,
                        tid,
                        probe: name.clone(),
                        ip,
                        args,
                    })
                }
            }
            Probe::Dummy => return Ok(None),
        }))
    }
}

fn probe_name(p: &Probe) -> String {
    match p {
        Probe::SchedSwitch(_) => "sched:sched_switch".into(),
        Probe::SchedWakeup(_) => "sched:sched_wakeup".into(),
        Probe::SysEnter(_) => "raw_syscalls:sys_enter".into(),
        Probe::SysExit(_) => "raw_syscalls:sys_exit".into(),
        Probe::Generic(f) => f.full_name.to_string(),
        Probe::Uprobe { name, ret, .. } => format!("{}uprobe {name}", if *ret { "ret" } else { "" }),
        Probe::Dummy => "dummy".into(),
    }
}

fn field_bytes<'a>(f: &Field, raw: &'a [u8]) -> Result<&'a [u8], String> {
    raw.get(f.offset..f.offset + f.size).ok_or_else(|| {
        format!("field {} at {}+{} lies outside the {}-byte payload", f.name, f.offset, f.size, raw.len())
    })
}

fn trim_nul(b: &[u8]) -> &[u8] {
    &b[..memchr::memchr(0, b).unwrap_or(b.len())]
}

/// `Tgid:` of `/proc/<tid>/status`.
pub fn proc_tgid(tid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    s.lines().find_map(|l| l.strip_prefix("Tgid:")).and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::record::{
        MISC_SWITCH_OUT, MISC_SWITCH_OUT_PREEMPT, RECORD_SWITCH_CPU_WIDE, SAMPLE_CPU, SAMPLE_IDENTIFIER,
        SAMPLE_RAW, SAMPLE_TID, SAMPLE_TIME, encode_sample,
    };

    const SWITCH: &str = "name: sched_switch\nID: 372\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n\
\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n\
\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;\n\
\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n\n\
print fmt: \"\"\n";

    const LAYOUT: Layout = Layout {
        sample_type: SAMPLE_IDENTIFIER | SAMPLE_TID | SAMPLE_TIME | SAMPLE_CPU | SAMPLE_RAW,
        regs_user: 0,
        sample_id_all: true,
    };

    fn decoder() -> Decoder {
        let mut d = Decoder::new(Clock::UNIX_NANOS, SourceId(0));
        let f = Format::parse(SWITCH, "sched").unwrap();
        d.add(1, LAYOUT, Probe::for_tracepoint(f)).unwrap();
        d
    }

    /// A `sched_switch` sample on `cpu`: `prev` → `next`.
    fn switch(cpu: u64, t: u64, prev: (u32, &str, i64), next: (u32, &str)) -> Vec<u8> {
        let mut raw = vec![0u8; 64];
        raw[8..8 + prev.1.len()].copy_from_slice(prev.1.as_bytes());
        raw[24..28].copy_from_slice(&prev.0.to_le_bytes());
        raw[32..40].copy_from_slice(&prev.2.to_le_bytes());
        raw[40..40 + next.1.len()].copy_from_slice(next.1.as_bytes());
        raw[56..60].copy_from_slice(&next.0.to_le_bytes());
        let cur = u64::from(prev.0);
        encode_sample(&[1, (cur << 32) | cur, t, cpu], Some(&raw), &[])
    }

    /// A `PERF_RECORD_SWITCH_CPU_WIDE` of thread `tid` (its own process) on `cpu`.
    fn record(misc: u16, cpu: u64, t: u64, tid: u32, other: u32) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&RECORD_SWITCH_CPU_WIDE.to_le_bytes());
        b.extend_from_slice(&misc.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&other.to_le_bytes());
        b.extend_from_slice(&other.to_le_bytes());
        let tid = u64::from(tid);
        // sample_id_all trailer in layout order: TID, TIME, CPU, IDENTIFIER.
        for w in [(tid << 32) | tid, t, cpu, 1] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        let n = b.len() as u16;
        b[6..8].copy_from_slice(&n.to_le_bytes());
        b
    }

    fn switches(d: &mut Decoder, recs: &[Vec<u8>], cpu: u32) -> Vec<(u32, u32, i64, String, String)> {
        recs.iter()
            .filter_map(|r| match d.decode(r, cpu) {
                Decoded::Event(Event {
                    kind:
                        EventKind::Kernel(KernelEvent::SchedSwitch {
                            prev_tid,
                            next_tid,
                            prev_state,
                            prev_comm,
                            next_comm,
                            ..
                        }),
                    ..
                }) => Some((prev_tid, next_tid, prev_state, prev_comm.to_string(), next_comm.to_string())),
                Decoded::Event(e) => panic!("{e:?}"),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn switch_records_confirm_announced_switch_ins() {
        // Every switch is reported by the tracepoint: the records add nothing.
        let mut d = decoder();
        let recs = [
            switch(1, 100, (7, "worker", 1), (0, "swapper/1")),
            record(MISC_SWITCH_OUT, 1, 101, 7, 0),
            record(0, 1, 102, 0, 7),
            switch(1, 200, (0, "swapper/1", 0), (7, "worker")),
            record(MISC_SWITCH_OUT, 1, 201, 0, 7),
            record(0, 1, 202, 7, 0),
        ];
        let got = switches(&mut d, &recs, 1);
        assert_eq!(got.len(), 2);
        assert_eq!((got[1].0, got[1].1), (0, 7));
        assert_eq!(d.stats.switch_ins_recovered, 0);
        assert_eq!(d.stats.side_records, 4);
    }

    #[test]
    fn switch_ins_the_tracepoint_missed_are_recovered() {
        let mut d = decoder();
        let recs = [
            // worker sleeps: the tracepoint reports the switch-out to idle.
            switch(1, 100, (7, "worker", 1), (0, "swapper/1")),
            record(MISC_SWITCH_OUT, 1, 101, 7, 0),
            record(0, 1, 102, 0, 7),
            // Leaving idle: no tracepoint sample, only the records.
            record(MISC_SWITCH_OUT, 1, 201, 0, 7),
            record(0, 1, 202, 7, 0),
            // worker is preempted by a thread never seen in a sample: both records only.
            record(MISC_SWITCH_OUT | MISC_SWITCH_OUT_PREEMPT, 1, 301, 7, 9),
            record(0, 1, 302, 9, 7),
            // ... which then leaves, and worker comes back, again without samples.
            record(MISC_SWITCH_OUT, 1, 401, 9, 7),
            record(0, 1, 402, 7, 9),
        ];
        let got = switches(&mut d, &recs, 1);
        assert_eq!(
            got,
            vec![
                (7, 0, 1, "worker".into(), "swapper/1".into()),
                (0, 7, 0, "swapper/1".into(), "worker".into()),
                (7, 9, 0, "worker".into(), "".into()),
                (9, 7, 1, "".into(), "worker".into()),
            ]
        );
        assert_eq!(d.stats.switch_ins_recovered, 3);
        assert_eq!(d.stats.malformed, 0);
    }

    #[test]
    fn exiting_tasks_have_no_id_in_switch_records() {
        let mut d = decoder();
        let recs = [
            // An exiting helper is switched in: the record names it -1.
            switch(1, 100, (7, "worker", 1), (8, "helper")),
            record(MISC_SWITCH_OUT, 1, 101, 7, 8),
            record(0, 1, 102, DEAD, 7),
            // It dies; leaving it, idle's switch-in record names the previous task -1 too, and
            // the tracepoint (leaving to idle) is there; then idle → worker is missed.
            switch(1, 200, (8, "helper", 16), (0, "swapper/1")),
            record(MISC_SWITCH_OUT, 1, 201, DEAD, 0),
            record(0, 1, 202, 0, DEAD),
            record(MISC_SWITCH_OUT, 1, 301, 0, 7),
            record(0, 1, 302, 7, 0),
        ];
        let got = switches(&mut d, &recs, 1);
        assert_eq!(got.iter().map(|g| (g.0, g.1)).collect::<Vec<_>>(), vec![(7, 8), (8, 0), (0, 7)]);
        assert_eq!(d.stats.switch_ins_recovered, 1);
        // A missed switch-in right after a dead task: the previous task is the one last seen.
        let mut d = decoder();
        let recs = [
            switch(1, 100, (7, "worker", 1), (8, "helper")),
            record(0, 1, 102, 8, 7),
            record(MISC_SWITCH_OUT, 1, 201, DEAD, 7),
            record(0, 1, 202, 7, DEAD),
        ];
        let got = switches(&mut d, &recs, 1);
        assert_eq!(got.iter().map(|g| (g.0, g.1)).collect::<Vec<_>>(), vec![(7, 8), (8, 7)]);
    }

    #[test]
    fn an_announcement_on_another_cpu_does_not_confirm() {
        let mut d = decoder();
        let recs = [switch(0, 100, (5, "a", 0), (7, "worker"))];
        assert_eq!(switches(&mut d, &recs, 0).len(), 1);
        // worker's switch-in record arrives on CPU 1: a switch the tracepoint missed there.
        let got = switches(&mut d, &[record(0, 1, 150, 7, 0)], 1);
        assert_eq!(got, vec![(0, 7, 0, "swapper/1".into(), "worker".into())]);
    }
}
