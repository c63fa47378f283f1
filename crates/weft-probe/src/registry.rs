//! The tracepoint registry: every tracepoint compiled into the process, enabled or not.
//!
//! # How tracepoints are found
//!
//! Each `tracepoint!` (and the C header's `WEFT_TRACEPOINT`) places a pointer to its descriptor
//! in the ELF section `weft_tracepoints`. The linker gathers those pointers from every object
//! file into one array and defines `__start_weft_tracepoints` / `__stop_weft_tracepoints`
//! around it (GNU ld, gold and lld do this for sections whose names are C identifiers, and keep
//! such sections under `--gc-sections` while the bounds are referenced — the registry
//! references them). The registry walks that array on first use: tracepoints are listed before
//! they ever fire. A crate-internal hidden entry guarantees the section exists.
//!
//! A shared library (the `weft-probe-c` cdylib) sees only its own section, so the C header also
//! emits, in every translation unit, a constructor that hands the executable's (or the calling
//! library's) bounds to [`register_section`]; duplicate ranges are ignored. Tracepoints created
//! at run time (`tracing` callsites) are added with [`register`].
//!
//! Limits: a tracepoint in an object file the linker drops (no referenced symbol) is not
//! listed — it cannot fire either. Ids are dense, assigned in registration order, stable for the
//! life of the process.

use crate::select::Selector;
use crate::tracepoint::{FLAG_ALWAYS_ON, FLAG_DYNAMIC, FLAG_HIDDEN, Level, TP_ABI, Tracepoint, UNREGISTERED};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// A switch applied to tracepoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Enable,
    /// Disable, leaving always-on tracepoints on.
    Disable,
    /// Disable even always-on tracepoints.
    ForceDisable,
}

/// What a switch did to one tracepoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    Changed,
    Unchanged,
    /// A plain disable of an always-on tracepoint (left on).
    Protected,
    /// No tracepoint with that id.
    Unknown,
}

/// Totals of a switch over a selector.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Switched {
    pub matched: usize,
    pub changed: usize,
    /// Always-on tracepoints a plain disable left on.
    pub protected: usize,
}

/// A listed tracepoint (also what [`crate::consumer`] decodes from a segment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracepointInfo {
    pub id: u32,
    pub name: String,
    pub level: Level,
    /// `""` when none.
    pub group: String,
    /// Field spec (`a:u64,b:str`).
    pub fields: String,
    pub flags: u8,
    pub enabled: bool,
    pub file: String,
    pub line: u32,
}

impl TracepointInfo {
    pub fn always_on(&self) -> bool {
        self.flags & FLAG_ALWAYS_ON != 0
    }

    pub fn is_span(&self) -> bool {
        self.flags & crate::tracepoint::FLAG_SPAN != 0
    }

    /// Field names in spec order (record field `name_index` refers to these).
    pub fn field_names(&self) -> Vec<String> {
        crate::tracepoint::FieldSpec::parse_list(&self.fields).into_iter().map(|f| f.name).collect()
    }
}

struct Reg {
    tps: Vec<&'static Tracepoint>,
    sections: Vec<usize>,
    exported: usize,
    env_ops: Vec<(Op, Selector)>,
    initialized: bool,
    bad_abi: usize,
}

static REG: Mutex<Reg> = Mutex::new(Reg {
    tps: Vec::new(),
    sections: Vec::new(),
    exported: 0,
    env_ops: Vec::new(),
    initialized: false,
    bad_abi: 0,
});
static LEN: AtomicUsize = AtomicUsize::new(0);
static DYNAMIC_HOOK: OnceLock<fn()> = OnceLock::new();

static SENTINEL: Tracepoint =
    Tracepoint::new("weft.probe.sentinel\0", Level::Trace, "\0", "\0", FLAG_HIDDEN, "\0", 0);
#[used]
#[unsafe(link_section = "weft_tracepoints")]
static SENTINEL_ENTRY: &Tracepoint = &SENTINEL;

unsafe extern "C" {
    static __start_weft_tracepoints: u8;
    static __stop_weft_tracepoints: u8;
}

fn lock() -> MutexGuard<'static, Reg> {
    REG.lock().unwrap_or_else(|e| e.into_inner())
}

/// Make sure the linker section has been walked and the environment switches parsed.
pub fn init() {
    let mut r = lock();
    ensure_init(&mut r);
}

fn ensure_init(r: &mut Reg) {
    if r.initialized {
        return;
    }
    r.initialized = true;
    for (var, op) in [("WEFT_PROBE_ENABLE", Op::Enable), ("WEFT_PROBE_DISABLE", Op::Disable)] {
        if let Ok(v) = std::env::var(var) {
            for item in v.split(',').filter(|s| !s.trim().is_empty()) {
                match Selector::parse(item) {
                    Ok(sel) => r.env_ops.push((op, sel)),
                    Err(e) => tracing::warn!(var, error = %e, "weft-probe: ignoring a bad selector"),
                }
            }
        }
    }
    std::hint::black_box(&SENTINEL_ENTRY);
    // SAFETY: the linker defines both bounds around the section, which holds only
    // `&'static Tracepoint` entries (ours and the C header's `const struct weft_tracepoint *`).
    unsafe {
        let start = (&raw const __start_weft_tracepoints) as *const *const Tracepoint;
        let stop = (&raw const __stop_weft_tracepoints) as *const *const Tracepoint;
        add_section(r, start, stop);
    }
}

/// Register the tracepoints of a linker-section range (the C header's constructors call this
/// through `weft_register_section`). Ranges seen before are ignored.
///
/// # Safety
/// `[start, stop)` must be an array of pointers to valid, `'static` tracepoint descriptors
/// (null entries are skipped).
pub unsafe fn register_section(start: *const *const Tracepoint, stop: *const *const Tracepoint) {
    let mut r = lock();
    ensure_init(&mut r);
    // SAFETY: forwarded contract.
    unsafe { add_section(&mut r, start, stop) };
    export_locked(&mut r);
}

unsafe fn add_section(r: &mut Reg, start: *const *const Tracepoint, stop: *const *const Tracepoint) {
    if start.is_null() || stop <= start || r.sections.contains(&(start as usize)) {
        return;
    }
    r.sections.push(start as usize);
    let n = (stop as usize - start as usize) / std::mem::size_of::<*const Tracepoint>();
    for i in 0..n {
        // SAFETY: i < n entries inside the section.
        let p = unsafe { *start.add(i) };
        if p.is_null() {
            continue;
        }
        // SAFETY: entries point to 'static descriptors.
        let tp: &'static Tracepoint = unsafe { &*p };
        add(r, tp);
    }
}

fn add(r: &mut Reg, tp: &'static Tracepoint) -> u32 {
    if tp.abi() != TP_ABI {
        r.bad_abi += 1;
        return UNREGISTERED;
    }
    if tp.flags() & FLAG_HIDDEN != 0 {
        return UNREGISTERED;
    }
    let id = tp.raw_id();
    if id != UNREGISTERED {
        return id;
    }
    let id = r.tps.len() as u32;
    tp.set_id(id);
    r.tps.push(tp);
    LEN.store(r.tps.len(), Ordering::Release);
    for (op, sel) in &r.env_ops {
        if sel.matches(tp.name(), tp.group(), tp.level()) {
            apply_tp(tp, *op);
        }
    }
    id
}

/// Register a tracepoint that was not found in a section (a `tracing` callsite, or a
/// tracepoint in a library whose section was not registered); returns its id.
pub fn register(tp: &'static Tracepoint) -> u32 {
    let mut r = lock();
    ensure_init(&mut r);
    let id = add(&mut r, tp);
    export_locked(&mut r);
    id
}

/// Register a descriptor created at run time (leaked; flagged dynamic).
pub fn register_dynamic(
    name: &str,
    level: Level,
    group: &str,
    fields: &str,
    flags: u8,
) -> &'static Tracepoint {
    fn leak(s: &str) -> &'static str {
        let mut owned = s.replace('\0', "");
        owned.push('\0');
        Box::leak(owned.into_boxed_str())
    }
    let tp: &'static Tracepoint = Box::leak(Box::new(Tracepoint::new(
        leak(name),
        level,
        leak(group),
        leak(fields),
        flags | FLAG_DYNAMIC,
        "\0",
        0,
    )));
    register(tp);
    tp
}

/// Export not-yet-exported descriptors into the segment (after it is created).
pub(crate) fn export_pending() {
    let mut r = lock();
    ensure_init(&mut r);
    export_locked(&mut r);
}

fn export_locked(r: &mut Reg) {
    let Some(seg) = crate::segment::get() else { return };
    while r.exported < r.tps.len() {
        let id = r.exported;
        seg.export(r.tps[id], id as u32);
        r.exported += 1;
    }
}

/// Number of registered tracepoints.
pub fn len() -> usize {
    LEN.load(Ordering::Acquire)
}

/// Descriptors that were refused because of a different ABI version (C headers of another
/// version).
pub fn bad_abi() -> usize {
    lock().bad_abi
}

/// The tracepoint with this id.
pub fn lookup(id: u32) -> Option<&'static Tracepoint> {
    let mut r = lock();
    ensure_init(&mut r);
    r.tps.get(id as usize).copied()
}

/// Every registered tracepoint, in id order.
pub fn list() -> Vec<TracepointInfo> {
    let mut r = lock();
    ensure_init(&mut r);
    r.tps
        .iter()
        .enumerate()
        .map(|(id, tp)| TracepointInfo {
            id: id as u32,
            name: tp.name().to_string(),
            level: tp.level(),
            group: tp.group().to_string(),
            fields: tp.fields_spec().to_string(),
            flags: tp.flags(),
            enabled: tp.enabled(),
            file: tp.file().to_string(),
            line: tp.line(),
        })
        .collect()
}

fn apply_tp(tp: &'static Tracepoint, op: Op) -> Applied {
    let was = tp.enabled();
    let now = match op {
        Op::Enable => true,
        Op::Disable if tp.always_on() => return if was { Applied::Protected } else { Applied::Unchanged },
        Op::Disable | Op::ForceDisable => false,
    };
    if was == now {
        return Applied::Unchanged;
    }
    tp.set_enabled(now);
    if let Some(seg) = crate::segment::get() {
        seg.mirror_state(tp.raw_id(), now);
    }
    Applied::Changed
}

/// Apply `op` to the tracepoint with this id.
pub fn apply_id(id: u32, op: Op) -> Applied {
    let (res, dynamic) = {
        let mut r = lock();
        ensure_init(&mut r);
        match r.tps.get(id as usize).copied() {
            Some(tp) => (apply_tp(tp, op), tp.flags() & FLAG_DYNAMIC != 0),
            None => (Applied::Unknown, false),
        }
    };
    if dynamic && res == Applied::Changed {
        run_dynamic_hook();
    }
    res
}

/// Apply `op` to every tracepoint the selector matches.
pub fn switch(sel: &Selector, op: Op) -> Switched {
    let mut out = Switched::default();
    let mut dynamic = false;
    {
        let mut r = lock();
        ensure_init(&mut r);
        for tp in r.tps.iter().copied() {
            if !sel.matches(tp.name(), tp.group(), tp.level()) {
                continue;
            }
            out.matched += 1;
            match apply_tp(tp, op) {
                Applied::Changed => {
                    out.changed += 1;
                    dynamic |= tp.flags() & FLAG_DYNAMIC != 0;
                }
                Applied::Protected => out.protected += 1,
                _ => {}
            }
        }
    }
    if dynamic {
        run_dynamic_hook();
    }
    out
}

/// Enable every tracepoint the selector matches.
pub fn enable(sel: &Selector) -> Switched {
    switch(sel, Op::Enable)
}

/// Disable every tracepoint the selector matches, except always-on ones.
pub fn disable(sel: &Selector) -> Switched {
    switch(sel, Op::Disable)
}

/// Disable every matching tracepoint, always-on ones included.
pub fn force_disable(sel: &Selector) -> Switched {
    switch(sel, Op::ForceDisable)
}

/// Install the hook run after dynamic tracepoints change state (the `tracing` layer uses it to
/// rebuild `tracing`'s interest cache). Only the first call wins.
pub fn set_dynamic_hook(f: fn()) {
    let _ = DYNAMIC_HOOK.set(f);
}

fn run_dynamic_hook() {
    if let Some(f) = DYNAMIC_HOOK.get() {
        f();
    }
}
