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
    /// FORK/EXIT/COMM and other side records.
    pub side_records: u64,
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
    /// Counters.
    pub stats: DecodeStats,
}

const MAX_ERRORS: usize = 5;
const MAX_TGID: usize = 1 << 20;

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
            Record::Comm { pid, tid, .. } => {
                self.stats.side_records += 1;
                self.learn(pid, tid);
                Decoded::Nothing
            }
            Record::Task { exit, pid, tid, .. } => {
                self.stats.side_records += 1;
                self.learn(pid, tid);
                Decoded::Side(if exit { Side::Exit { pid, tid } } else { Side::Fork { pid, tid } })
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
