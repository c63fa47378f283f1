//! Static tracepoints: the descriptor every `tracepoint!` (and the C `WEFT_TRACEPOINT`) expands
//! to, levels, and field specs.

use std::ffi::{CStr, c_char};
use std::fmt;
use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};

/// Severity of a tracepoint; selecting "level X" switches every tracepoint at X or more severe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Level {
    Error = 1,
    Warn = 2,
    Info = 3,
    Debug = 4,
    Trace = 5,
}

impl Level {
    /// From the wire byte; `None` for anything but 1..=5.
    pub fn from_u8(v: u8) -> Option<Level> {
        Some(match v {
            1 => Level::Error,
            2 => Level::Warn,
            3 => Level::Info,
            4 => Level::Debug,
            5 => Level::Trace,
            _ => return None,
        })
    }

    /// Lower-case name (`"debug"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
            Level::Trace => "trace",
        }
    }

    /// Parse `error|warn|warning|info|debug|trace` (any case) or `1..5`.
    pub fn parse(s: &str) -> Option<Level> {
        match s.to_ascii_lowercase().as_str() {
            "error" | "1" => Some(Level::Error),
            "warn" | "warning" | "2" => Some(Level::Warn),
            "info" | "3" => Some(Level::Info),
            "debug" | "4" => Some(Level::Debug),
            "trace" | "5" => Some(Level::Trace),
            _ => None,
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Flag: always on — enabled at start; a plain disable (by name, glob, level or group) leaves
/// it on; only an explicit force-disable turns it off.
pub const FLAG_ALWAYS_ON: u8 = 1;
/// Flag: the tracepoint opens spans (its name is the span name).
pub const FLAG_SPAN: u8 = 2;
/// Flag: enabled at start (can be disabled normally).
pub const FLAG_DEFAULT_ON: u8 = 4;
/// Flag: registered at run time (e.g. a `tracing` callsite), not from a linker section.
pub const FLAG_DYNAMIC: u8 = 8;
/// Flag: internal entry (the registry sentinel); never listed.
pub const FLAG_HIDDEN: u8 = 16;

/// State bit: enabled.
pub const STATE_ENABLED: u8 = 1;
/// State bit: a live query is installed ([`crate::query`]); `event!` runs it even when the
/// tracepoint is not enabled for recording.
pub const STATE_QUERY: u8 = 2;

/// Id of a tracepoint not registered yet.
pub const UNREGISTERED: u32 = u32::MAX;

/// ABI version of [`Tracepoint`] (the C header's `WEFT_TP_ABI`).
pub const TP_ABI: u8 = 1;

/// Pre-filter word: valid bit; comparison (bits 28-30, [`crate::query::CmpOp`] order), field
/// position (bits 21-27) and an unsigned constant below 2^21 (bits 0-20).
const PF_VALID: u32 = 1 << 31;
/// Largest constant a pre-filter holds.
pub(crate) const PF_MAX_CONST: u64 = (1 << 21) - 1;
/// Largest field position a pre-filter names.
pub(crate) const PF_MAX_FIELD: u8 = 127;

/// A tracepoint descriptor. One `static` per tracepoint; the layout is shared with C
/// (`struct weft_tracepoint` in `weft_probe.h`), so it is `repr(C)` with NUL-terminated strings.
///
/// The hot-path test is [`Tracepoint::active`] (what `event!` checks): one relaxed load of
/// `state` and a branch. When active, `event!` next asks [`Tracepoint::prefilter_pass`], a
/// live query's filter compiled to one word, with the arguments still in registers.
#[repr(C)]
pub struct Tracepoint {
    state: AtomicU8,
    level: u8,
    flags: u8,
    abi: u8,
    id: AtomicU32,
    name: *const c_char,
    group: *const c_char,
    fields: *const c_char,
    file: *const c_char,
    line: u32,
    /// The pre-filter word (0: none). The C header's reserved word: C tracepoints leave it 0.
    prefilter: AtomicU32,
}

// SAFETY: the pointers refer to immutable, 'static, NUL-terminated strings; the mutable parts
// are atomics.
unsafe impl Sync for Tracepoint {}
// SAFETY: as above.
unsafe impl Send for Tracepoint {}

impl Tracepoint {
    /// A descriptor; every string must end with `"\0"` (the macros append it).
    ///
    /// # Panics
    /// At compile time (const evaluation) when a string is not NUL-terminated.
    pub const fn new(
        name: &'static str,
        level: Level,
        group: &'static str,
        fields: &'static str,
        flags: u8,
        file: &'static str,
        line: u32,
    ) -> Tracepoint {
        assert!(ends_with_nul(name) && ends_with_nul(group) && ends_with_nul(fields) && ends_with_nul(file));
        let on = flags & (FLAG_ALWAYS_ON | FLAG_DEFAULT_ON) != 0;
        Tracepoint {
            state: AtomicU8::new(if on { STATE_ENABLED } else { 0 }),
            level: level as u8,
            flags,
            abi: TP_ABI,
            id: AtomicU32::new(UNREGISTERED),
            name: name.as_ptr().cast(),
            group: group.as_ptr().cast(),
            fields: fields.as_ptr().cast(),
            file: file.as_ptr().cast(),
            line,
            prefilter: AtomicU32::new(0),
        }
    }

    /// Is it enabled? One relaxed atomic load; inlined at every call site.
    #[inline(always)]
    pub fn enabled(&self) -> bool {
        self.state.load(Ordering::Relaxed) & STATE_ENABLED != 0
    }

    /// Is it enabled for recording or for a live query? What `event!` tests: one relaxed load.
    #[inline(always)]
    pub fn active(&self) -> bool {
        self.state.load(Ordering::Relaxed) != 0
    }

    /// May the event with these fields matter? `false` only when the tracepoint is not
    /// enabled for recording and its one live query's filter (a comparison of a `u64` field
    /// with a small constant) rejects them — then `event!` does nothing more. Inlined at every
    /// call site after [`Tracepoint::active`].
    #[inline(always)]
    pub fn prefilter_pass<F: crate::value::Fields>(&self, fields: &F) -> bool {
        let p = self.prefilter.load(Ordering::Relaxed);
        if p == 0 || self.enabled() {
            return true;
        }
        let Some(crate::query::Scalar::U64(v)) = fields.field(((p >> 21) & 127) as u8) else { return true };
        let c = (p & PF_MAX_CONST as u32) as u64;
        match (p >> 28) & 7 {
            0 => v == c,
            1 => v != c,
            2 => v < c,
            3 => v <= c,
            4 => v > c,
            5 => v >= c,
            _ => true,
        }
    }

    /// Set the pre-filter (the query module): `Some((field, op as 0..=5, constant))` within
    /// [`PF_MAX_FIELD`] and [`PF_MAX_CONST`], or none. The enabled bit overrides it.
    pub(crate) fn set_prefilter(&self, pf: Option<(u8, u8, u64)>) {
        let w = match pf {
            Some((field, op, c)) if field <= PF_MAX_FIELD && op <= 5 && c <= PF_MAX_CONST => {
                PF_VALID | (op as u32) << 28 | (field as u32) << 21 | c as u32
            }
            _ => 0,
        };
        self.prefilter.store(w, Ordering::Relaxed);
    }

    /// Is a pre-filter set?
    pub fn has_prefilter(&self) -> bool {
        self.prefilter.load(Ordering::Relaxed) != 0
    }

    /// The state bits ([`STATE_ENABLED`], [`STATE_QUERY`]).
    #[inline(always)]
    pub fn state(&self) -> u8 {
        self.state.load(Ordering::Relaxed)
    }

    /// Set the enabled bit (no always-on protection; the registry's switches use this after
    /// checking). The query bit is kept.
    pub(crate) fn set_enabled(&self, on: bool) {
        self.set_bit(STATE_ENABLED, on);
    }

    /// Set the query bit (the query module, when the first query is installed and the last one
    /// detached).
    pub(crate) fn set_query(&self, on: bool) {
        self.set_bit(STATE_QUERY, on);
    }

    fn set_bit(&self, bit: u8, on: bool) {
        if on {
            self.state.fetch_or(bit, Ordering::Relaxed);
        } else {
            self.state.fetch_and(!bit, Ordering::Relaxed);
        }
    }

    /// Registry id (dense, from 0), registering the tracepoint first if needed.
    #[inline]
    pub fn id(&'static self) -> u32 {
        let id = self.id.load(Ordering::Relaxed);
        if id != UNREGISTERED {
            return id;
        }
        crate::registry::register(self)
    }

    pub(crate) fn raw_id(&self) -> u32 {
        self.id.load(Ordering::Acquire)
    }

    pub(crate) fn set_id(&self, id: u32) {
        self.id.store(id, Ordering::Release);
    }

    pub fn name(&self) -> &str {
        cstr(self.name)
    }

    /// Group, `""` when none.
    pub fn group(&self) -> &str {
        cstr(self.group)
    }

    /// Field spec, e.g. `offset:u64,len:u64` (see [`FieldSpec`]).
    pub fn fields_spec(&self) -> &str {
        cstr(self.fields)
    }

    pub fn file(&self) -> &str {
        cstr(self.file)
    }

    pub fn line(&self) -> u32 {
        self.line
    }

    /// Level; a C descriptor with an out-of-range byte reads as `Trace`.
    pub fn level(&self) -> Level {
        Level::from_u8(self.level).unwrap_or(Level::Trace)
    }

    pub fn flags(&self) -> u8 {
        self.flags
    }

    pub fn always_on(&self) -> bool {
        self.flags & FLAG_ALWAYS_ON != 0
    }

    pub(crate) fn abi(&self) -> u8 {
        self.abi
    }
}

impl fmt::Debug for Tracepoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tracepoint")
            .field("name", &self.name())
            .field("level", &self.level())
            .field("group", &self.group())
            .field("fields", &self.fields_spec())
            .field("flags", &self.flags)
            .field("enabled", &self.enabled())
            .finish()
    }
}

const fn ends_with_nul(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty() && b[b.len() - 1] == 0
}

fn cstr(p: *const c_char) -> &'static str {
    if p.is_null() {
        return "";
    }
    // SAFETY: descriptors hold NUL-terminated 'static strings (Rust macros append "\0"; the C
    // header uses string literals).
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str().unwrap_or("<invalid utf-8>")
}

/// One declared field: `name` or `name:type` in a spec such as `offset:u64,len:u64,path:str`.
/// Types: `i64 u64 f64 bool str bytes` (or none: any). Names index fields in records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldSpec {
    pub name: String,
    pub ty: Option<String>,
}

impl FieldSpec {
    /// Parse a spec; empty items are skipped, whitespace around names is trimmed.
    pub fn parse_list(spec: &str) -> Vec<FieldSpec> {
        spec.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|item| match item.split_once(':') {
                Some((n, t)) => FieldSpec { name: n.trim().to_string(), ty: Some(t.trim().to_string()) },
                None => FieldSpec { name: item.to_string(), ty: None },
            })
            .collect()
    }
}
