//! From a [`Query`] to eBPF programs: resolve the source (tracefs format, ELF symbol), lay out
//! the maps and the per-group state, and emit the filter, the key, the map update and each
//! aggregate's update.
//!
//! Registers: `R6` holds the context (tracepoint record or `pt_regs`), `R7` the group's
//! per-CPU state, `R9` a uretprobe's latency. Stack: the group key at `FP-64` (8 words), a
//! `comm` for the filter at `FP-80`, the thread's start-map key at `FP-88`, a scratch word at
//! `FP-96`.
//!
//! Per hit: filter → key → look the group up in the per-CPU map (a new group is inserted from
//! a zeroed template; a full map counts a drop) → update each aggregate in place (no atomics:
//! the state is this CPU's).

use std::path::{Path, PathBuf};

use weft_sources::perf::format::{FieldKind, Format};
use weft_sources::perf::uprobe::{UprobeTarget, address_offset};

use crate::Error;
use crate::insn::{Alu, Asm, Code, FP, Helper, Jmp, Label, R0, R1, R2, R3, R6, R7, R8, R9, Reg, Size};
use crate::query::{Agg, Cmp, Const, Filter, HIST_BUCKETS, Location, Query, Source, Value};
use crate::sys::{MapType, ProgType};

/// Map indices in [`Compiled::maps`].
pub const GROUPS: usize = 0;
pub const DROPS: usize = 1;
pub const ZERO: usize = 2;
/// The generation the programs write to (0 or 1; see [`crate::Probe::take`]).
pub const GEN: usize = 3;
pub const STARTS: usize = 4;

/// Most bytes of one group's per-CPU state (the kernel's per-CPU allocation unit).
pub const MAX_STATE_BYTES: usize = 32 << 10;
/// Entries of a uretprobe's thread → entry-time map.
pub const MAX_THREADS: u32 = 16384;

/// The key: the generation word, then up to `MAX_KEY_WORDS` words.
const KEY_OFF: i16 = -72;
const COMM_OFF: i16 = -88;
const TID_OFF: i16 = -96;
const SCRATCH_OFF: i16 = -104;
/// `BPF_NOEXIST` for `bpf_map_update_elem`.
const NOEXIST: i32 = 1;

/// `struct pt_regs` offsets of the x86-64 argument registers (rdi, rsi, rdx, rcx, r8, r9) and
/// of rax (the return value).
const ARG_REGS: [i16; 6] = [112, 104, 96, 88, 72, 64];
const RET_REG: i16 = 80;

/// One map to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapSpec {
    pub name: String,
    pub ty: MapType,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
}

/// Where a program attaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attach {
    Tracepoint { name: String, id: u64 },
    Uprobe { path: PathBuf, offset: u64, ret: bool },
}

/// One generated program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    pub name: String,
    pub ty: ProgType,
    pub code: Code,
    pub attach: Attach,
}

/// What a group key word holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    Int,
    /// 16 bytes of `comm`.
    Comm,
}

/// Where each aggregate's state lies in a group's value (in 8-byte words).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub keys: Vec<KeyKind>,
    pub aggs: Vec<(Agg, usize)>,
    pub state_words: usize,
}

impl Layout {
    pub fn key_bytes(&self) -> usize {
        self.keys.iter().map(|k| if *k == KeyKind::Comm { 16 } else { 8 }).sum()
    }
}

/// A query turned into maps and programs, ready for [`crate::Probe::attach`]. The programs
/// refer to maps by index (`Code::map_refs`); their fds are patched in at load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compiled {
    pub maps: Vec<MapSpec>,
    /// In attach order (a uretprobe's entry program first).
    pub programs: Vec<Program>,
    pub layout: Layout,
}

/// A value, resolved to how the program reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operand {
    /// A load from the context.
    Ctx {
        off: i16,
        bytes: u8,
        signed: bool,
    },
    Pid,
    Tid,
    Cpu,
    Latency,
    Comm,
}

impl Operand {
    fn signed(&self) -> bool {
        match self {
            Operand::Ctx { signed, .. } => *signed,
            _ => true,
        }
    }
}

/// The resolved source: what the programs attach to and how values are found.
enum Site {
    Tracepoint(Format),
    Uprobe { path: PathBuf, offset: u64, ret: bool, name: String },
}

impl Site {
    fn resolve(src: &Source) -> Result<Site, Error> {
        match src {
            Source::Tracepoint(name) => {
                let events = weft_sources::perf::sys::tracefs_events()?;
                Ok(Site::Tracepoint(weft_sources::perf::sys::tracepoint(&events, name)?))
            }
            Source::Uprobe { binary, at } => Site::uprobe(binary, at, false),
            Source::Uretprobe { binary, at } => Site::uprobe(binary, at, true),
        }
    }

    fn uprobe(binary: &Path, at: &Location, ret: bool) -> Result<Site, Error> {
        let (path, offset, what) = match at {
            Location::Symbol(sym) => {
                let t = UprobeTarget::resolve(&format!("{}:{sym}", binary.display()))?;
                (t.path, t.offset, sym.clone())
            }
            Location::Address(addr) => {
                let path =
                    binary.canonicalize().map_err(|e| Error::Io { path: binary.to_owned(), source: e })?;
                let data = std::fs::read(&path).map_err(|e| Error::Io { path: path.clone(), source: e })?;
                let off = address_offset(&data, *addr)
                    .map_err(|msg| Error::Query(format!("{}: {msg}", path.display())))?;
                (path, off, format!("{addr:#x}"))
            }
        };
        Ok(Site::Uprobe { path, offset, ret, name: what })
    }

    fn operand(&self, v: &Value) -> Result<Operand, Error> {
        Ok(match v {
            Value::Pid => Operand::Pid,
            Value::Tid => Operand::Tid,
            Value::Cpu => Operand::Cpu,
            Value::Comm => Operand::Comm,
            Value::Latency => Operand::Latency,
            Value::Retval => Operand::Ctx { off: RET_REG, bytes: 8, signed: true },
            Value::Arg(n) => Operand::Ctx { off: ARG_REGS[(*n as usize).min(5)], bytes: 8, signed: true },
            Value::Field(name) => match self {
                Site::Tracepoint(fmt) => field_operand(fmt, name)?,
                Site::Uprobe { .. } => {
                    return Err(Error::Query(format!("field {name}: only tracepoints have fields")));
                }
            },
        })
    }
}

/// `name` or `name[i]` of a tracepoint's format → a context load.
fn field_operand(fmt: &Format, spec: &str) -> Result<Operand, Error> {
    let (name, index) = match spec.split_once('[') {
        Some((n, rest)) => {
            let i = rest
                .strip_suffix(']')
                .and_then(|i| i.trim().parse::<usize>().ok())
                .ok_or_else(|| Error::Query(format!("field {spec:?}: expected NAME[INDEX]")))?;
            (n.trim(), Some(i))
        }
        None => (spec.trim(), None),
    };
    let f = fmt.field(name).ok_or_else(|| {
        let names: Vec<&str> = fmt.fields.iter().map(|f| &*f.name).collect();
        Error::Query(format!("{} has no field {name:?} (fields: {})", fmt.full_name, names.join(", ")))
    })?;
    let (off, size) = match (f.kind, index) {
        (FieldKind::Int, None) => (f.offset, f.size),
        (FieldKind::Array { len }, Some(i)) if i < len && len > 0 => {
            let each = f.size / len;
            (f.offset + i * each, each)
        }
        (FieldKind::Array { len }, Some(i)) => {
            return Err(Error::Query(format!("{}: {name}[{i}] beyond its {len} elements", fmt.full_name)));
        }
        (FieldKind::Array { .. }, None) => {
            return Err(Error::Query(format!(
                "{}: {name} is an array; pick an element, {name}[0]",
                fmt.full_name
            )));
        }
        (kind, _) => {
            return Err(Error::Query(format!(
                "{}: field {spec} ({}, {kind:?}) is not an integer",
                fmt.full_name, f.c_type
            )));
        }
    };
    if off < 8 {
        return Err(Error::Query(format!(
            "{}: {name} lies in the common header, which programs cannot read; use pid/tid",
            fmt.full_name
        )));
    }
    if Size::of(size).is_none() || off % size != 0 || off > i16::MAX as usize {
        return Err(Error::Query(format!(
            "{}: {spec} ({size} bytes at {off}) is not an aligned integer",
            fmt.full_name
        )));
    }
    Ok(Operand::Ctx { off: off as i16, bytes: size as u8, signed: f.signed })
}

/// Resolves `q`'s source, lays out its maps and emits its programs.
pub fn compile(q: &Query) -> Result<Compiled, Error> {
    q.check().map_err(Error::Query)?;
    let site = Site::resolve(&q.source)?;
    let mut aggs = Vec::new();
    let mut words = 0;
    for a in &q.aggs {
        aggs.push((a.clone(), words));
        words += a.words();
    }
    if words * 8 > MAX_STATE_BYTES {
        return Err(Error::Query(format!(
            "the aggregates need {} bytes per group, at most {MAX_STATE_BYTES}",
            words * 8
        )));
    }
    let keys: Vec<KeyKind> =
        q.keys.iter().map(|k| if *k == Value::Comm { KeyKind::Comm } else { KeyKind::Int }).collect();
    let layout = Layout { keys, aggs, state_words: words };
    let value_size = (words * 8) as u32;
    let keyed = !layout.keys.is_empty();
    let mut maps = vec![
        if keyed {
            MapSpec {
                name: "weft_groups".into(),
                ty: MapType::PerCpuHash,
                // the generation word, then the key; room for both generations' groups
                key_size: 8 + layout.key_bytes() as u32,
                value_size,
                max_entries: q.max_groups.saturating_mul(2),
            }
        } else {
            MapSpec {
                name: "weft_groups".into(),
                ty: MapType::PerCpuArray,
                key_size: 4,
                value_size,
                max_entries: 2, // one state per generation
            }
        },
        MapSpec {
            name: "weft_drops".into(),
            ty: MapType::PerCpuArray,
            key_size: 4,
            value_size: 8,
            max_entries: 2,
        },
        // The zeroed template a new group starts from (too big for the 512-byte stack).
        MapSpec { name: "weft_zero".into(), ty: MapType::Array, key_size: 4, value_size, max_entries: 1 },
        MapSpec { name: "weft_gen".into(), ty: MapType::Array, key_size: 4, value_size: 8, max_entries: 1 },
    ];
    let latency = q.aggs.iter().filter_map(Agg::value).chain(q.keys.iter()).any(|v| *v == Value::Latency)
        || q.filter.as_ref().is_some_and(|f| f.values().contains(&&Value::Latency));
    let mut programs = Vec::new();
    let attach = match &site {
        Site::Tracepoint(fmt) => Attach::Tracepoint { name: fmt.full_name.to_string(), id: fmt.id },
        Site::Uprobe { path, offset, ret, .. } => {
            Attach::Uprobe { path: path.clone(), offset: *offset, ret: *ret }
        }
    };
    let (ty, name) = match &site {
        Site::Tracepoint(fmt) => (ProgType::Tracepoint, fmt.full_name.to_string()),
        Site::Uprobe { name, .. } => (ProgType::Kprobe, name.clone()),
    };
    if latency {
        maps.push(MapSpec {
            name: "weft_starts".into(),
            ty: MapType::Hash,
            key_size: 8,
            value_size: 8,
            max_entries: MAX_THREADS,
        });
        let Site::Uprobe { path, offset, .. } = &site else {
            return Err(Error::Query("latency is known at a uretprobe only".into()));
        };
        // Hits that a thread-level filter refuses need no start time.
        let thread_filter = q
            .filter
            .as_ref()
            .filter(|f| f.values().iter().all(|v| matches!(v, Value::Pid | Value::Tid | Value::Comm)));
        programs.push(Program {
            name: format!("{name}_entry"),
            ty,
            code: entry_program(&site, thread_filter)?,
            attach: Attach::Uprobe { path: path.clone(), offset: *offset, ret: false },
        });
    }
    let code = main_program(&site, q, &layout, keyed, latency)?;
    programs.push(Program { name, ty, code, attach });
    Ok(Compiled { maps, programs, layout })
}

struct Gen<'a> {
    a: Asm,
    site: &'a Site,
}

impl Gen<'_> {
    /// The value of `op` into R0 (R1-R5 clobbered).
    fn load(&mut self, op: Operand) -> Result<(), Error> {
        let a = &mut self.a;
        match op {
            Operand::Ctx { off, bytes, signed } => {
                let size = Size::of(bytes as usize)
                    .ok_or_else(|| Error::Internal(format!("load of {bytes} bytes")))?;
                a.ldx(size, R0, R6, off);
                if signed && bytes < 8 {
                    let shift = 64 - 8 * bytes as i32;
                    a.alu_imm(Alu::Lsh, R0, shift);
                    a.alu_imm(Alu::Arsh, R0, shift);
                }
            }
            Operand::Pid => {
                a.call(Helper::GetCurrentPidTgid);
                a.alu_imm(Alu::Rsh, R0, 32);
            }
            Operand::Tid => {
                a.call(Helper::GetCurrentPidTgid);
                a.mov32(R0, R0);
            }
            Operand::Cpu => a.call(Helper::GetSmpProcessorId),
            Operand::Latency => a.mov(R0, R9),
            Operand::Comm => return Err(Error::Internal("comm is not a number".into())),
        }
        Ok(())
    }

    /// `comm` into the 16 bytes at `FP+off`.
    fn comm(&mut self, off: i16) {
        self.a.stack_ptr(R1, off);
        self.a.mov_imm(R2, 16);
        self.a.call(Helper::GetCurrentComm);
    }

    /// Jumps to `t` when `f` holds, else to `fl`.
    fn cond(&mut self, f: &Filter, t: Label, fl: Label) -> Result<(), Error> {
        match f {
            Filter::And(x, y) => {
                let mid = self.a.label();
                self.cond(x, mid, fl)?;
                self.a.bind(mid);
                self.cond(y, t, fl)
            }
            Filter::Or(x, y) => {
                let mid = self.a.label();
                self.cond(x, t, mid)?;
                self.a.bind(mid);
                self.cond(y, t, fl)
            }
            Filter::Not(x) => self.cond(x, fl, t),
            Filter::Cmp(v, op, c) => {
                let operand = self.site.operand(v)?;
                match (operand, c) {
                    (Operand::Comm, Const::Str(s)) => {
                        let (yes, no) = if *op == Cmp::Eq { (t, fl) } else { (fl, t) };
                        let mut bytes = [0u8; 16];
                        for (b, c) in bytes.iter_mut().zip(s.bytes()) {
                            *b = c;
                        }
                        self.comm(COMM_OFF);
                        for (i, chunk) in bytes.chunks(8).enumerate() {
                            let mut w = [0u8; 8];
                            w.copy_from_slice(chunk);
                            self.a.ldx(Size::DW, R0, FP, COMM_OFF + 8 * i as i16);
                            self.a.ld_imm64(R1, i64::from_le_bytes(w));
                            self.a.jmp(Jmp::Ne, R0, R1, no);
                        }
                        self.a.ja(yes);
                    }
                    (_, Const::Int(k)) => {
                        self.load(operand)?;
                        self.a.ld_imm64(R1, *k);
                        let s = operand.signed();
                        let j = match op {
                            Cmp::Eq => Jmp::Eq,
                            Cmp::Ne => Jmp::Ne,
                            Cmp::Lt if s => Jmp::Slt,
                            Cmp::Lt => Jmp::Lt,
                            Cmp::Le if s => Jmp::Sle,
                            Cmp::Le => Jmp::Le,
                            Cmp::Gt if s => Jmp::Sgt,
                            Cmp::Gt => Jmp::Gt,
                            Cmp::Ge if s => Jmp::Sge,
                            Cmp::Ge => Jmp::Ge,
                        };
                        self.a.jmp(j, R0, R1, t);
                        self.a.ja(fl);
                    }
                    _ => return Err(Error::Query(format!("{v:?} compared with {c:?}"))),
                }
                Ok(())
            }
        }
    }

    /// Emits the filter (if any): falls through when it holds, jumps to `out` otherwise.
    fn filter(&mut self, f: Option<&Filter>, out: Label) -> Result<(), Error> {
        if let Some(f) = f {
            let pass = self.a.label();
            self.cond(f, pass, out)?;
            self.a.bind(pass);
        }
        Ok(())
    }

    /// The element of array `map` whose index is at `FP+SCRATCH_OFF` into R0; to `out` if
    /// there is none.
    fn array_slot(&mut self, map: usize, out: Label) {
        let a = &mut self.a;
        a.ld_map(R1, map);
        a.stack_ptr(R2, SCRATCH_OFF);
        a.call(Helper::MapLookupElem);
        a.jmp_imm(Jmp::Eq, R0, 0, out);
    }

    /// The generation (0 or 1) into R8; to `out` if the map cannot be read (it always can).
    fn load_gen(&mut self, out: Label) {
        self.a.st(Size::W, FP, SCRATCH_OFF, 0);
        self.array_slot(GEN, out);
        self.a.ldx(Size::DW, R8, R0, 0);
        self.a.alu_imm(Alu::And, R8, 1);
    }

    /// Adds one to this CPU's drop counter of the generation in R8, then goes to `out`.
    fn drop_hit(&mut self, out: Label) {
        self.a.stx(Size::W, FP, SCRATCH_OFF, R8);
        self.array_slot(DROPS, out);
        let a = &mut self.a;
        a.ldx(Size::DW, R1, R0, 0);
        a.alu_imm(Alu::Add, R1, 1);
        a.stx(Size::DW, R0, 0, R1);
        a.ja(out);
    }

    /// Adds one to the bucket whose index is in R1 (at most `last`) of the state at word `at`.
    fn bump_bucket(&mut self, at: usize, last: i32) {
        let a = &mut self.a;
        let ok = a.label();
        a.jmp_imm(Jmp::Le, R1, last, ok);
        a.mov_imm(R1, last);
        a.bind(ok);
        a.alu_imm(Alu::Lsh, R1, 3);
        a.mov(R2, R7);
        a.alu(Alu::Add, R2, R1);
        a.ldx(Size::DW, R3, R2, (at * 8) as i16);
        a.alu_imm(Alu::Add, R3, 1);
        a.stx(Size::DW, R2, (at * 8) as i16, R3);
    }

    /// Updates the aggregate whose state starts at word `at` of the state in R7.
    fn update(&mut self, agg: &Agg, at: usize) -> Result<(), Error> {
        if let Some(v) = agg.value() {
            let op = self.site.operand(v)?;
            self.load(op)?;
        }
        let off = (at * 8) as i16;
        let a = &mut self.a;
        match agg {
            Agg::Count => {
                a.ldx(Size::DW, R1, R7, off);
                a.alu_imm(Alu::Add, R1, 1);
                a.stx(Size::DW, R7, off, R1);
            }
            Agg::Sum(_) => {
                a.ldx(Size::DW, R1, R7, off);
                a.alu(Alu::Add, R1, R0);
                a.stx(Size::DW, R7, off, R1);
            }
            Agg::Min(_) | Agg::Max(_) => {
                let (set, done) = (a.label(), a.label());
                a.ldx(Size::DW, R1, R7, off);
                a.jmp_imm(Jmp::Eq, R1, 0, set);
                a.ldx(Size::DW, R2, R7, off + 8);
                // Keep the old value unless the new one is more extreme.
                let keep = if matches!(agg, Agg::Min(_)) { Jmp::Sge } else { Jmp::Sle };
                a.jmp(keep, R0, R2, done);
                a.bind(set);
                a.stx(Size::DW, R7, off + 8, R0);
                a.st(Size::DW, R7, off, 1);
                a.bind(done);
            }
            Agg::Hist(_) => {
                let bucketed = a.label();
                a.mov_imm(R1, 0);
                a.jmp_imm(Jmp::Slt, R0, 0, bucketed);
                a.mov_imm(R1, 1);
                a.jmp_imm(Jmp::Eq, R0, 0, bucketed);
                // R1 = 2 + floor(log2 R0), by halving the search range 32, 16, … 1 bits.
                a.mov_imm(R1, 2);
                for shift in [32, 16, 8, 4, 2, 1] {
                    let next = a.label();
                    a.mov(R2, R0);
                    a.alu_imm(Alu::Rsh, R2, shift);
                    a.jmp_imm(Jmp::Eq, R2, 0, next);
                    a.mov(R0, R2);
                    a.alu_imm(Alu::Add, R1, shift);
                    a.bind(next);
                }
                a.bind(bucketed);
                self.bump_bucket(at, HIST_BUCKETS as i32 - 1);
            }
            Agg::Lhist { min, max, step, .. } => {
                let last = agg.words() as i32 - 1;
                let bucketed = a.label();
                a.mov_imm(R1, 0);
                a.ld_imm64(R2, *min);
                a.jmp(Jmp::Slt, R0, R2, bucketed);
                a.mov_imm(R1, last);
                a.ld_imm64(R2, *max);
                a.jmp(Jmp::Sge, R0, R2, bucketed);
                a.ld_imm64(R2, *min);
                a.alu(Alu::Sub, R0, R2);
                a.ld_imm64(R2, *step);
                a.alu(Alu::Div, R0, R2);
                a.mov(R1, R0);
                a.alu_imm(Alu::Add, R1, 1);
                a.bind(bucketed);
                self.bump_bucket(at, last);
            }
        }
        Ok(())
    }
}

/// A uretprobe's entry program: this thread's entry time into the start map.
fn entry_program(site: &Site, filter: Option<&Filter>) -> Result<Code, Error> {
    let mut g = Gen { a: Asm::new(), site };
    let out = g.a.label();
    g.a.mov(R6, R1);
    g.load_gen(out);
    g.filter(filter, out)?;
    let a = &mut g.a;
    a.call(Helper::GetCurrentPidTgid);
    a.stx(Size::DW, FP, TID_OFF, R0);
    a.call(Helper::KtimeGetNs);
    a.stx(Size::DW, FP, SCRATCH_OFF, R0);
    a.ld_map(R1, STARTS);
    a.stack_ptr(R2, TID_OFF);
    a.stack_ptr(R3, SCRATCH_OFF);
    a.mov_imm(Reg(4), 0);
    a.call(Helper::MapUpdateElem);
    a.jmp_imm(Jmp::Sge, R0, 0, out);
    g.drop_hit(out);
    g.a.bind(out);
    g.a.ret0();
    Ok(g.a.finish()?)
}

/// The program that filters, keys and aggregates.
fn main_program(site: &Site, q: &Query, layout: &Layout, keyed: bool, latency: bool) -> Result<Code, Error> {
    let mut g = Gen { a: Asm::new(), site };
    let out = g.a.label();
    g.a.mov(R6, R1);
    g.load_gen(out);
    if latency {
        let a = &mut g.a;
        a.call(Helper::GetCurrentPidTgid);
        a.stx(Size::DW, FP, TID_OFF, R0);
        a.ld_map(R1, STARTS);
        a.stack_ptr(R2, TID_OFF);
        a.call(Helper::MapLookupElem);
        a.jmp_imm(Jmp::Eq, R0, 0, out);
        a.ldx(Size::DW, R9, R0, 0);
        a.call(Helper::KtimeGetNs);
        a.alu(Alu::Sub, R0, R9);
        a.mov(R9, R0);
        a.ld_map(R1, STARTS);
        a.stack_ptr(R2, TID_OFF);
        a.call(Helper::MapDeleteElem);
    }
    g.filter(q.filter.as_ref(), out)?;
    // The group key.
    if keyed {
        g.a.stx(Size::DW, FP, KEY_OFF, R8);
        let mut at = KEY_OFF + 8;
        for k in &q.keys {
            let op = site.operand(k)?;
            if op == Operand::Comm {
                g.comm(at);
                at += 16;
            } else {
                g.load(op)?;
                g.a.stx(Size::DW, FP, at, R0);
                at += 8;
            }
        }
    } else {
        g.a.stx(Size::W, FP, KEY_OFF, R8);
    }
    // The group's state: look it up, else insert the zeroed template and look again.
    let have = g.a.label();
    let a = &mut g.a;
    a.ld_map(R1, GROUPS);
    a.stack_ptr(R2, KEY_OFF);
    a.call(Helper::MapLookupElem);
    a.jmp_imm(Jmp::Ne, R0, 0, have);
    if keyed {
        a.st(Size::W, FP, SCRATCH_OFF, 0);
        a.ld_map(R1, ZERO);
        a.stack_ptr(R2, SCRATCH_OFF);
        a.call(Helper::MapLookupElem);
        a.jmp_imm(Jmp::Eq, R0, 0, out);
        a.mov(R3, R0);
        a.ld_map(R1, GROUPS);
        a.stack_ptr(R2, KEY_OFF);
        a.mov_imm(Reg(4), NOEXIST);
        a.call(Helper::MapUpdateElem);
        // Full (or raced by another CPU inserting the same key: then the lookup finds it).
        a.ld_map(R1, GROUPS);
        a.stack_ptr(R2, KEY_OFF);
        a.call(Helper::MapLookupElem);
        a.jmp_imm(Jmp::Ne, R0, 0, have);
    }
    g.drop_hit(out);
    g.a.bind(have);
    g.a.mov(R7, R0);
    for (agg, at) in &layout.aggs {
        g.update(agg, *at)?;
    }
    g.a.bind(out);
    g.a.ret0();
    Ok(g.a.finish()?)
}
