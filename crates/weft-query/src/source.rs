//! Live sources (what `FROM` names) and their schemas.

use std::fmt;

/// A column type. `Any` is a weft-probe field declared without a type (checked per event).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    I64,
    U64,
    F64,
    Bool,
    Str,
    Bytes,
    Any,
}

impl Type {
    /// From a weft-probe field spec type (`i64 u64 f64 bool str bytes`, none: any).
    pub fn from_spec(t: Option<&str>) -> Type {
        match t {
            Some("i64") => Type::I64,
            Some("u64") => Type::U64,
            Some("f64") => Type::F64,
            Some("bool") => Type::Bool,
            Some("str") => Type::Str,
            Some("bytes") => Type::Bytes,
            _ => Type::Any,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Type::I64 => "i64",
            Type::U64 => "u64",
            Type::F64 => "f64",
            Type::Bool => "bool",
            Type::Str => "str",
            Type::Bytes => "bytes",
            Type::Any => "untyped",
        }
    }

    pub fn integer(self) -> bool {
        matches!(self, Type::I64 | Type::U64 | Type::Bool | Type::Any)
    }

    pub fn numeric(self) -> bool {
        self.integer() || self == Type::F64
    }

    pub fn text(self) -> bool {
        matches!(self, Type::Str | Type::Bytes | Type::Any)
    }
}

/// What a query reads from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A weft-probe tracepoint of running processes: `tp('name')` (also `probe('name')`).
    Probe(String),
    /// A kernel tracepoint: `tracepoint('system:event')`.
    Kernel { system: String, event: String },
    /// A uprobe (`uprobe(binary, symbol)`) or uretprobe (`uretprobe(binary, symbol)`) on an
    /// unmodified binary; the symbol may be an address (`'0x4a3f0'`).
    Uprobe { binary: String, symbol: String, ret: bool },
}

impl Source {
    /// Which mechanism runs the probe level.
    pub fn runs_in(&self) -> &'static str {
        match self {
            Source::Probe(_) => "weft-probe, in the traced processes",
            Source::Kernel { .. } | Source::Uprobe { .. } => "eBPF, in the kernel",
        }
    }

    /// Which partials the machine level merges for this source.
    pub fn partials(&self) -> &'static str {
        match self {
            Source::Probe(_) => "the per-thread partials of every traced process",
            _ => "the per-CPU partials of the eBPF maps",
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Probe(n) => write!(f, "tp('{n}')"),
            Source::Kernel { system, event } => write!(f, "tracepoint('{system}:{event}')"),
            Source::Uprobe { binary, symbol, ret } => {
                write!(f, "{}('{binary}', '{symbol}')", if *ret { "uretprobe" } else { "uprobe" })
            }
        }
    }
}

/// The context columns every event has (host, pid, tid, comm, cpu, time, trace/span ids).
pub const CONTEXT: &[(&str, Type)] = &[
    ("host", Type::Str),
    ("pid", Type::U64),
    ("tid", Type::U64),
    ("comm", Type::Str),
    ("cpu", Type::U64),
    ("time", Type::U64),
    ("trace_id", Type::Bytes),
    ("span_id", Type::U64),
];

/// Where schemas come from: the agent's listing of weft-probe tracepoints, the kernel's
/// tracefs format files. Uprobe schemas are fixed ([`uprobe_fields`]).
pub trait Catalog {
    /// Fields of a weft-probe tracepoint (`None`: unknown).
    fn probe_fields(&self, name: &str) -> Option<Vec<(String, Type)>>;
    /// Fields of a kernel tracepoint (`None`: unknown).
    fn kernel_fields(&self, system: &str, event: &str) -> Option<Vec<(String, Type)>>;
}

/// A uprobe's columns: `arg0`..`arg5` (u64 registers at entry); a uretprobe adds `retval`
/// (i64) and `latency` (u64 ns from the same thread's entry to the return).
pub fn uprobe_fields(ret: bool) -> Vec<(String, Type)> {
    let mut v: Vec<(String, Type)> = (0..6).map(|i| (format!("arg{i}"), Type::U64)).collect();
    if ret {
        v.push(("retval".into(), Type::I64));
        v.push(("latency".into(), Type::U64));
    }
    v
}

/// A catalog from lists: weft-probe tracepoints by field spec (`name`, `a:u64,b:str`, as
/// [`weft_probe::TracepointInfo`] gives them) and kernel tracepoints read from tracefs
/// (`/sys/kernel/tracing/events/<system>/<event>/format`) when asked.
#[derive(Debug, Clone, Default)]
pub struct ListCatalog {
    probes: Vec<(String, String)>,
    tracefs: Option<std::path::PathBuf>,
}

impl ListCatalog {
    pub fn new() -> ListCatalog {
        ListCatalog::default()
    }

    /// Add a weft-probe tracepoint with its field spec.
    pub fn probe(mut self, name: &str, spec: &str) -> ListCatalog {
        self.probes.push((name.to_string(), spec.to_string()));
        self
    }

    /// Read kernel tracepoint formats under this tracefs `events` directory.
    pub fn tracefs(mut self, events_dir: impl Into<std::path::PathBuf>) -> ListCatalog {
        self.tracefs = Some(events_dir.into());
        self
    }
}

impl Catalog for ListCatalog {
    fn probe_fields(&self, name: &str) -> Option<Vec<(String, Type)>> {
        let (_, spec) = self.probes.iter().find(|(n, _)| n == name)?;
        Some(
            weft_probe::tracepoint::FieldSpec::parse_list(spec)
                .into_iter()
                .map(|f| {
                    let t = Type::from_spec(f.ty.as_deref());
                    (f.name, t)
                })
                .collect(),
        )
    }

    fn kernel_fields(&self, system: &str, event: &str) -> Option<Vec<(String, Type)>> {
        let dir = self.tracefs.as_ref()?;
        if [system, event].iter().any(|s| s.is_empty() || s.contains('/') || s.contains("..")) {
            return None;
        }
        let text = std::fs::read_to_string(dir.join(system).join(event).join("format")).ok()?;
        Some(parse_tracefs_format(&text))
    }
}

/// The event's own fields of a tracefs `format` file (the `common_*` fields are left out: the
/// context columns cover them). Integer fields are i64/u64 by their `signed:` flag, `char[]`
/// fields and `__data_loc char[]` strings are `str`, other arrays `bytes`.
pub fn parse_tracefs_format(text: &str) -> Vec<(String, Type)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("field:") else { continue };
        let mut decl = "";
        let mut signed = false;
        for part in rest.split(';') {
            let p = part.trim();
            if let Some(s) = p.strip_prefix("signed:") {
                signed = s.trim() == "1";
            } else if !p.contains(':') && decl.is_empty() {
                decl = p;
            }
        }
        let Some(name_part) = decl.split_whitespace().last() else { continue };
        let array = name_part.contains('[');
        let name = name_part.split('[').next().unwrap_or(name_part).trim_start_matches('*').to_string();
        if name.is_empty() || name.starts_with("common_") {
            continue;
        }
        let is_char = decl.contains("char");
        let ty = if decl.contains("__data_loc") || (array && is_char) {
            Type::Str
        } else if array {
            Type::Bytes
        } else if signed {
            Type::I64
        } else {
            Type::U64
        };
        out.push((name, ty));
    }
    out
}
