//! Load, attach, read, detach.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};

use weft_sources::perf::record::Layout as RecordLayout;
use weft_sources::perf::sys::{EventOptions, EventSpec, PerfFd, uprobe_pmu};

use crate::emit::{Attach, Compiled, DROPS, GEN, GROUPS, KeyKind, Layout};
use crate::query::Agg;
use crate::sys::{Map, load_program, possible_cpus};
use crate::{Error, Query};

/// `PERF_EVENT_IOC_SET_BPF`: `_IOW('$', 8, __u32)`.
const PERF_EVENT_IOC_SET_BPF: libc::c_ulong = 0x4004_2408;

/// One part of a group key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KeyPart {
    Int(i64),
    Str(String),
}

/// One aggregate's state, merged over CPUs. Bucket indices are bpftrace's (see
/// [`crate::Agg`]); only buckets that were hit are present.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Count(u64),
    Sum(i64),
    Min(Option<i64>),
    Max(Option<i64>),
    Buckets(BTreeMap<i32, u64>),
}

/// The probe's partial result: one state per aggregate for every group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Partial {
    pub groups: BTreeMap<Vec<KeyPart>, Vec<State>>,
    /// Hits lost because a map was full.
    pub drops: u64,
}

/// A program attached to its event. The perf event goes first: closing it detaches.
struct Link {
    _event: PerfFd,
    _prog: OwnedFd,
}

/// How long [`Probe::take`] waits after switching generations, for programs that read the
/// old one to finish (they run without sleeping, for microseconds at most).
pub const GRACE: std::time::Duration = std::time::Duration::from_millis(10);

/// Attached programs and their maps. Dropping it detaches every program, then frees the maps.
pub struct Probe {
    links: Vec<Link>,
    maps: Vec<Map>,
    layout: Layout,
    ncpus: usize,
    /// The generation the programs write to.
    generation: u64,
}

impl std::fmt::Debug for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probe").field("programs", &self.links.len()).field("maps", &self.maps.len()).finish()
    }
}

impl Probe {
    /// Compiles and attaches `q`.
    pub fn start(q: &Query) -> Result<Probe, Error> {
        Probe::attach(crate::compile(q)?)
    }

    /// Creates the maps, loads and attaches every program. On any failure what was created so
    /// far is closed again: nothing stays attached or allocated.
    pub fn attach(c: Compiled) -> Result<Probe, Error> {
        let ncpus = possible_cpus()?;
        let mut maps = Vec::with_capacity(c.maps.len());
        for m in &c.maps {
            maps.push(Map::create(m.ty, m.key_size, m.value_size, m.max_entries, &m.name)?);
        }
        let mut links = Vec::new();
        for p in c.programs {
            let mut insns = p.code.insns;
            for (at, map) in &p.code.map_refs {
                let fd = maps.get(*map).ok_or_else(|| Error::Internal(format!("map {map} not created")))?;
                let slot = insns.get_mut(*at).ok_or_else(|| Error::Internal(format!("map ref at {at}")))?;
                slot.imm = fd.as_raw_fd();
            }
            let prog = load_program(p.ty, &insns, &p.name)?;
            let (spec, what) = match &p.attach {
                Attach::Tracepoint { name, id } => {
                    (EventSpec::Tracepoint { id: *id }, format!("tracepoint {name}"))
                }
                Attach::Uprobe { path, offset, ret } => {
                    let (pmu_type, bit) = uprobe_pmu()?;
                    let kind = if *ret { "uretprobe" } else { "uprobe" };
                    (
                        EventSpec::Uprobe {
                            pmu_type,
                            path: path.clone(),
                            offset: *offset,
                            retprobe_bit: ret.then_some(bit),
                        },
                        format!("{kind} {}+{offset:#x}", path.display()),
                    )
                }
            };
            let opts = EventOptions {
                layout: RecordLayout { sample_type: 0, regs_user: 0, sample_id_all: false },
                inherit: false,
                enable_on_exec: false,
                task_comm: false,
                wakeup_bytes: 0,
                context_switch: false,
            };
            // One event for every CPU: the program hangs off the tracepoint or uprobe itself.
            let event = PerfFd::open(&spec, &opts, -1, 0, false, &what)?;
            // SAFETY: both fds are open; the ioctl reads the program fd as its argument.
            let r = unsafe { libc::ioctl(event.as_raw_fd(), PERF_EVENT_IOC_SET_BPF, prog.as_raw_fd()) };
            if r < 0 {
                return Err(Error::Attach { what, source: std::io::Error::last_os_error() });
            }
            event.enable()?;
            tracing::debug!(program = %p.name, %what, insns = insns.len(), "attached");
            links.push(Link { _event: event, _prog: prog });
        }
        Ok(Probe { links, maps, layout: c.layout, ncpus, generation: 0 })
    }

    /// Every group's state since the probe was attached (or last [`Probe::take`]n), merged
    /// over CPUs, and the drop count. Nothing is reset.
    pub fn read(&self) -> Result<Partial, Error> {
        let mut out = Partial::default();
        for g in 0..2 {
            self.read_generation(g, false, &mut out)?;
        }
        Ok(out)
    }

    /// Read and reset: what was counted since the last take (or the attach), with nothing
    /// lost or counted twice. The programs write to one of two generations (a word in every
    /// group key and an index of the unkeyed state and the drop counter): this switches them
    /// to the other, waits [`GRACE`] for hits under way, then reads the old generation and
    /// deletes (or zeroes) it.
    pub fn take(&mut self) -> Result<Partial, Error> {
        let old = self.generation;
        let new = old ^ 1;
        self.maps[GEN].update(&0u32.to_ne_bytes(), &new.to_ne_bytes())?;
        self.generation = new;
        std::thread::sleep(GRACE);
        let mut out = Partial::default();
        self.read_generation(old, true, &mut out)?;
        Ok(out)
    }

    /// Merges generation `g` into `out`; `reset` deletes its groups and zeroes its counters.
    fn read_generation(&self, g: u64, reset: bool, out: &mut Partial) -> Result<(), Error> {
        let groups = &self.maps[GROUPS];
        let mut buf = vec![0u8; groups.lookup_len(self.ncpus)];
        let stride = (groups.value_size as usize).div_ceil(8) * 8;
        let keyed = !self.layout.keys.is_empty();
        let keys = if keyed {
            groups.keys()?.into_iter().filter(|k| k.len() >= 8 && word(&k[..8]) == g).collect()
        } else {
            vec![(g as u32).to_ne_bytes().to_vec()]
        };
        for key in keys {
            if !groups.lookup(&key, &mut buf)? {
                continue; // deleted meanwhile
            }
            let parts = if keyed { decode_key(&self.layout.keys, &key[8..]) } else { Vec::new() };
            let states = self.merge_cpus(&buf, stride);
            if reset {
                if keyed {
                    groups.delete(&key)?;
                } else {
                    groups.update(&key, &vec![0u8; buf.len()])?;
                }
            }
            match out.groups.get_mut(&parts) {
                Some(have) => have.iter_mut().zip(states).for_each(|(a, b)| a.merge(b)),
                None => {
                    out.groups.insert(parts, states);
                }
            }
        }
        let drops = &self.maps[DROPS];
        let mut d = vec![0u8; drops.lookup_len(self.ncpus)];
        let key = (g as u32).to_ne_bytes();
        if drops.lookup(&key, &mut d)? {
            out.drops =
                out.drops.wrapping_add(d.chunks_exact(8).map(word).fold(0u64, |a, b| a.wrapping_add(b)));
            if reset {
                drops.update(&key, &vec![0u8; d.len()])?;
            }
        }
        Ok(())
    }

    fn merge_cpus(&self, buf: &[u8], stride: usize) -> Vec<State> {
        let mut states: Vec<State> = self.layout.aggs.iter().map(|(a, _)| empty(a)).collect();
        for cpu in buf.chunks_exact(stride) {
            let words: Vec<u64> = cpu.chunks_exact(8).map(word).collect();
            for ((agg, at), st) in self.layout.aggs.iter().zip(states.iter_mut()) {
                let w = &words[*at..*at + agg.words()];
                match st {
                    State::Count(n) => *n = n.wrapping_add(w[0]),
                    State::Sum(s) => *s = s.wrapping_add(w[0] as i64),
                    State::Min(m) if w[0] != 0 => *m = Some(m.map_or(w[1] as i64, |m| m.min(w[1] as i64))),
                    State::Max(m) if w[0] != 0 => *m = Some(m.map_or(w[1] as i64, |m| m.max(w[1] as i64))),
                    State::Min(_) | State::Max(_) => {}
                    State::Buckets(b) => {
                        for (i, n) in w.iter().enumerate().filter(|(_, n)| **n != 0) {
                            *b.entry(i as i32).or_default() += n;
                        }
                    }
                }
            }
        }
        states
    }

    /// Detaches every program and frees every map (what dropping the probe does).
    pub fn detach(self) {
        drop(self);
    }
}

impl State {
    /// Adds `other` (the same aggregate) into `self`.
    pub fn merge(&mut self, other: State) {
        match (self, other) {
            (State::Count(a), State::Count(b)) => *a = a.wrapping_add(b),
            (State::Sum(a), State::Sum(b)) => *a = a.wrapping_add(b),
            (State::Min(a), State::Min(b)) => *a = a.iter().copied().chain(b).min(),
            (State::Max(a), State::Max(b)) => *a = a.iter().copied().chain(b).max(),
            (State::Buckets(a), State::Buckets(b)) => {
                for (i, n) in b {
                    *a.entry(i).or_default() += n;
                }
            }
            // the same layout gives the same variants
            _ => {}
        }
    }
}

fn word(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[..8]);
    u64::from_ne_bytes(w)
}

fn empty(a: &Agg) -> State {
    match a {
        Agg::Count => State::Count(0),
        Agg::Sum(_) => State::Sum(0),
        Agg::Min(_) => State::Min(None),
        Agg::Max(_) => State::Max(None),
        Agg::Hist(_) | Agg::Lhist { .. } => State::Buckets(BTreeMap::new()),
    }
}

fn decode_key(kinds: &[KeyKind], key: &[u8]) -> Vec<KeyPart> {
    let mut at = 0;
    let mut out = Vec::with_capacity(kinds.len());
    for k in kinds {
        match k {
            KeyKind::Int => {
                out.push(KeyPart::Int(word(&key[at..at + 8]) as i64));
                at += 8;
            }
            KeyKind::Comm => {
                let raw = &key[at..at + 16];
                let end = raw.iter().position(|b| *b == 0).unwrap_or(16);
                out.push(KeyPart::Str(String::from_utf8_lossy(&raw[..end]).into_owned()));
                at += 16;
            }
        }
    }
    out
}
