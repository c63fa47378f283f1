//! The experiment as a TOML file: sources, links, function classes, filters, sinks — an
//! experiment is described without recompiling anything.
//!
//! ```toml
//! [run]                          # all optional
//! seed = 0                       # span/trace ids derive from it (same logs + seed = same ids)
//! epoch_ns = 0                   # where simulated time 0 is shown (ns since 1970)
//! batch_events = 4096            # events per batch between stages
//! queue_batches = 16             # batches each source may queue ahead of the merge
//! merge_buffer_events = 262144   # events the merge buffers while waiting for a slow source
//! merge_stall_ms = 2000          # at that bound, how long a silent pipe may hold the merge back
//! max_span_events = 64           # span events kept per span
//! span_events = "brief"          # brief (name, time, function), full (every field) or none
//! keep_bare_calls = false        # keep HostCall spans with nothing but their entry function
//! max_cause_age_ns = 10000000    # a cross-component cause waits at most this long
//!
//! [[source]]
//! name = "client"                # component name = service.name of its spans
//! kind = "gem5"                  # gem5 | nicbm | ns3 | ns3-stock | qemu
//! path = "logs/client.gem5"      # a file or a named pipe (FIFO); relative to this file
//! clock = { unit = "ps", epoch_ns = 0 }   # optional (ps for simulators, µs wall clock for qemu)
//! symbols = [                    # optional: PC → function (gem5 without ExecSymbol, qemu)
//!   { path = "vmlinux.syms", id = "linux" },
//!   { path = "i40e.syms", id = "i40e", offset = "0xffffffffa0000000", format = "objdump-syms", section = ".text" },
//! ]
//!
//! [[source]]
//! name = "ns3"
//! kind = "ns3"
//! path = "logs/ns3.tr"
//! nodes = { 0 = "sw0", 1 = "sw1" }   # names of ns-3 nodes (default node<N>)
//!
//! [[source]]
//! name = "guest"
//! kind = "qemu"                  # one log: host events + its e1000e NIC's events
//! nic = "guest-nic"              # the NIC component's name (default <name>-nic)
//!
//! [[link]]
//! kind = "pcie"                  # host ↔ NIC
//! host = "client"
//! nic = "client-nic"
//!
//! [[link]]
//! kind = "eth"                   # NIC ↔ a network device (a CosimNetDevice)
//! nic = "client-nic"
//! net = "ns3"
//! node = 1
//! device = 2
//!
//! [functions]                    # host function classes (defaults: Columbo's, Linux + i40e)
//! sys_entry = ["entry_SYSCALL_64"]
//! kernel_tx = ["__sys_sendto"]
//! kernel_rx = ["netif_receive_skb_list_internal"]
//! driver_tx = ["i40e_lan_xmit_frame"]
//! driver_rx = ["i40e_napi_poll"]
//! pci_write = ["pci_msix_write_vector_ctrl"]
//!
//! [filter]
//! drop_types = ["HostInstr", "SimSendSync", "SimProcInEvent"]   # the default
//! window_raw = [1900000000000, 2000000000000]  # or window_ns = [from, to]
//! components = ["client", "ns3/sw0"]           # keep only these (default: all)
//! only_interesting = false
//! blacklist = ["xas_load"]                     # calls dropped
//!
//! [[sink]]
//! kind = "file"
//! path = "out/trace.otlp.json"
//! format = "otlp-json"           # otlp-json | otlp-proto | zipkin | jaeger | chrome (default: from the name)
//!
//! [[sink]]
//! kind = "otlp-http"
//! url = "http://127.0.0.1:4318/v1/traces"
//! batch_spans = 512
//! queue_batches = 4             # span batches queued (a batch is up to batch_events spans)
//! max_retries = 5
//! timeout_ms = 10000
//! backpressure = "block"         # or "drop" (counted): what a slow sink does to the pipeline
//! ```
//!
//! Paths may use `${NAME}` and `${NAME:-default}` (environment variables, e.g. a run
//! directory); relative paths are relative to the topology file.
//!
//! Errors name the file, the key and the problem (`topo.toml: source[2].symbols[0].offset:
//! not a number: "0xzz"`); TOML syntax errors quote the offending line.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use weft_model::codec::stream::Format;
use weft_model::{Clock, TimeUnit};
use weft_sources::sim::SimFormat;
use weft_sources::sim::ns3::Ns3Time;
use weft_sources::symbols::{LoadOptions, SymbolFormat, SymbolTable, Symbolizer};

use crate::actor::FilterSpec;
use crate::sink::{Backpressure, HttpOptions, SinkSpec};
use crate::weaver::{ComponentSpec, EthLink, FunctionLists, PcieLink, Role, SpanEvents, WeaveConfig};

/// A topology that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {key}: {msg}", file.display())]
pub struct TopologyError {
    /// The topology file.
    pub file: PathBuf,
    /// The key at fault (`source[1].path`), or `toml` for syntax errors.
    pub key: String,
    /// The problem.
    pub msg: String,
}

/// Run-wide settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSpec {
    /// Seed of span and trace ids.
    pub seed: u64,
    /// Where simulated time 0 is shown (ns since the epoch).
    pub epoch_ns: u64,
    /// Events per batch between stages.
    pub batch_events: usize,
    /// Batches a source may queue ahead of the merge.
    pub queue_batches: usize,
    /// Events the merge buffers while waiting for a slow source.
    pub merge_buffer_events: usize,
    /// How long (ms) the merge, at its bound, waits for a silent pipe before passing it over.
    pub merge_stall_ms: u64,
    /// Span events kept per span.
    pub max_span_events: usize,
    /// What span events keep of their event.
    pub span_events: SpanEvents,
    /// Keep HostCall spans with nothing but their entry function.
    pub keep_bare_calls: bool,
    /// Maximum wait of a cross-component cause (ns).
    pub max_cause_age_ns: u64,
}

impl Default for RunSpec {
    fn default() -> Self {
        RunSpec {
            seed: 0,
            epoch_ns: 0,
            batch_events: 4096,
            queue_batches: 16,
            merge_buffer_events: 1 << 18,
            merge_stall_ms: 2000,
            max_span_events: 64,
            span_events: SpanEvents::Brief,
            keep_bare_calls: false,
            max_cause_age_ns: 10_000_000,
        }
    }
}

/// A symbol table of a source.
#[derive(Debug, Clone)]
pub struct SymbolSpec {
    /// The table file.
    pub path: PathBuf,
    /// Identifier (a call's `comp`).
    pub id: String,
    /// Format, offset, section.
    pub options: LoadOptions,
}

/// One log.
#[derive(Debug, Clone)]
pub struct SourceSpec {
    /// Component name.
    pub name: String,
    /// Log format.
    pub format: SimFormat,
    /// File or FIFO.
    pub path: PathBuf,
    /// Raw time → ns.
    pub clock: Clock,
    /// What it contributes.
    pub role: Role,
    /// Symbol tables.
    pub symbols: Vec<SymbolSpec>,
}

/// A validated topology.
#[derive(Debug, Clone)]
pub struct Topology {
    /// Where it was read from (for messages).
    pub file: PathBuf,
    /// Run settings.
    pub run: RunSpec,
    /// Sources, in file order (index = source id).
    pub sources: Vec<SourceSpec>,
    /// Host ↔ NIC links.
    pub pcie: Vec<PcieLink>,
    /// NIC ↔ network links.
    pub eth: Vec<EthLink>,
    /// Host function classes.
    pub functions: FunctionLists,
    /// Filters.
    pub filter: FilterSpec,
    /// Sinks.
    pub sinks: Vec<SinkSpec>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawRun {
    seed: Option<u64>,
    epoch_ns: Option<u64>,
    batch_events: Option<usize>,
    queue_batches: Option<usize>,
    merge_buffer_events: Option<usize>,
    merge_stall_ms: Option<u64>,
    max_span_events: Option<usize>,
    span_events: Option<String>,
    keep_bare_calls: Option<bool>,
    max_cause_age_ns: Option<u64>,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(untagged)]
enum Num {
    Int(i64),
    Str(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClock {
    unit: Option<String>,
    epoch_ns: Option<u64>,
    origin: Option<Num>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSymbols {
    path: String,
    id: Option<String>,
    format: Option<String>,
    offset: Option<Num>,
    section: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSource {
    name: String,
    kind: String,
    path: String,
    clock: Option<RawClock>,
    nic: Option<String>,
    nodes: Option<BTreeMap<String, String>>,
    #[serde(default)]
    symbols: Vec<RawSymbols>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLink {
    kind: String,
    host: Option<String>,
    nic: Option<String>,
    net: Option<String>,
    node: Option<u32>,
    device: Option<u32>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawFunctions {
    sys_entry: Option<Vec<String>>,
    kernel_tx: Option<Vec<String>>,
    kernel_rx: Option<Vec<String>>,
    driver_tx: Option<Vec<String>>,
    driver_rx: Option<Vec<String>>,
    pci_write: Option<Vec<String>>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawFilter {
    drop_types: Option<Vec<String>>,
    window_ns: Option<[u64; 2]>,
    window_raw: Option<[u64; 2]>,
    components: Option<Vec<String>>,
    only_interesting: Option<bool>,
    blacklist: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSink {
    kind: String,
    path: Option<String>,
    format: Option<String>,
    url: Option<String>,
    batch_spans: Option<usize>,
    queue_batches: Option<usize>,
    max_retries: Option<u32>,
    timeout_ms: Option<u64>,
    backpressure: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTopology {
    #[serde(default)]
    run: RawRun,
    #[serde(default)]
    source: Vec<RawSource>,
    #[serde(default)]
    link: Vec<RawLink>,
    #[serde(default)]
    functions: RawFunctions,
    #[serde(default)]
    filter: RawFilter,
    #[serde(default)]
    sink: Vec<RawSink>,
}

/// Every event type name a filter may mention.
pub const EVENT_TYPES: &[&str] = &[
    "SimSendSync",
    "SimProcInEvent",
    "HostInstr",
    "HostCall",
    "HostMmioR",
    "HostMmioW",
    "HostMmioImRespPoW",
    "HostMmioCR",
    "HostMmioCW",
    "HostDmaR",
    "HostDmaW",
    "HostDmaC",
    "HostMsiX",
    "HostMsi",
    "HostConfRead",
    "HostConfWrite",
    "HostPciR",
    "HostPciW",
    "HostPostInt",
    "HostClearInt",
    "NicMmioR",
    "NicMmioW",
    "NicDmaI",
    "NicDmaEn",
    "NicDmaEx",
    "NicDmaCR",
    "NicDmaCW",
    "NicMsix",
    "NicMsi",
    "SetIX",
    "NicTx",
    "NicRx",
    "NicTxDescr",
    "NicRxDescr",
    "NicRxWritten",
    "NetworkEnqueue",
    "NetworkDequeue",
    "NetworkDrop",
    "NetworkReceive",
];

/// Expands `${NAME}` and `${NAME:-default}` from `vars`, else the environment.
fn expand(s: &str, vars: &BTreeMap<String, String>) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let end = after.find('}').ok_or_else(|| format!("unclosed `${{` in `{s}`"))?;
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (inner, None),
        };
        let v = vars.get(name).cloned().or_else(|| std::env::var(name).ok()).or(default.map(str::to_owned));
        out.push_str(&v.ok_or_else(|| format!("`${{{name}}}` is not set (and has no `:-default`)"))?);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn parse_num(n: &Num) -> Option<u64> {
    match n {
        Num::Int(i) => u64::try_from(*i).ok(),
        Num::Str(s) => {
            let s = s.trim().replace('_', "");
            match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
                Some(h) => u64::from_str_radix(h, 16).ok(),
                None => s.parse().ok(),
            }
        }
    }
}

fn parse_unit(s: &str) -> Option<TimeUnit> {
    Some(match s {
        "ps" | "picos" => TimeUnit::Picos,
        "ns" | "nanos" => TimeUnit::Nanos,
        "us" | "µs" | "micros" => TimeUnit::Micros,
        "ms" | "millis" => TimeUnit::Millis,
        "s" | "seconds" => TimeUnit::Seconds,
        other => TimeUnit::Hz(other.strip_suffix("hz").or_else(|| other.strip_suffix("Hz"))?.parse().ok()?),
    })
}

impl Topology {
    /// Reads and validates a topology file.
    pub fn load(path: &Path) -> Result<Topology, TopologyError> {
        let text = std::fs::read_to_string(path).map_err(|e| TopologyError {
            file: path.to_owned(),
            key: "(file)".into(),
            msg: format!("cannot read: {e}"),
        })?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Topology::parse(&text, path, &base)
    }

    /// Parses and validates topology text; relative paths are resolved against `base`.
    pub fn parse(text: &str, file: &Path, base: &Path) -> Result<Topology, TopologyError> {
        Topology::parse_with_vars(text, file, base, &BTreeMap::new())
    }

    /// [`Topology::parse`] with variables for `${NAME}` in paths that take precedence over
    /// the environment.
    pub fn parse_with_vars(
        text: &str,
        file: &Path,
        base: &Path,
        vars: &BTreeMap<String, String>,
    ) -> Result<Topology, TopologyError> {
        let err = |key: &str, msg: String| TopologyError { file: file.to_owned(), key: key.to_owned(), msg };
        let raw: RawTopology =
            toml::from_str(text).map_err(|e| err("toml", e.to_string().trim_end().to_owned()))?;
        let d = RunSpec::default();
        let r = raw.run;
        let run = RunSpec {
            seed: r.seed.unwrap_or(d.seed),
            epoch_ns: r.epoch_ns.unwrap_or(d.epoch_ns),
            batch_events: r.batch_events.unwrap_or(d.batch_events),
            queue_batches: r.queue_batches.unwrap_or(d.queue_batches),
            merge_buffer_events: r.merge_buffer_events.unwrap_or(d.merge_buffer_events),
            merge_stall_ms: r.merge_stall_ms.unwrap_or(d.merge_stall_ms),
            max_span_events: r.max_span_events.unwrap_or(d.max_span_events),
            span_events: match r.span_events.as_deref() {
                None => d.span_events,
                Some("brief") => SpanEvents::Brief,
                Some("full") => SpanEvents::Full,
                Some("none") => SpanEvents::None,
                Some(x) => return Err(err("run.span_events", format!("`{x}` is not brief, full or none"))),
            },
            keep_bare_calls: r.keep_bare_calls.unwrap_or(d.keep_bare_calls),
            max_cause_age_ns: r.max_cause_age_ns.unwrap_or(d.max_cause_age_ns),
        };
        for (k, v) in [
            ("run.batch_events", run.batch_events),
            ("run.queue_batches", run.queue_batches),
            ("run.merge_buffer_events", run.merge_buffer_events),
        ] {
            if v == 0 {
                return Err(err(k, "must be at least 1".into()));
            }
        }
        let resolve = |key: &str, p: &str| -> Result<PathBuf, TopologyError> {
            let p = PathBuf::from(expand(p, vars).map_err(|m| err(key, m))?);
            Ok(if p.is_absolute() { p } else { base.join(p) })
        };
        if raw.source.is_empty() {
            return Err(err("source", "no [[source]] given: a topology needs at least one log".into()));
        }
        let mut sources = Vec::new();
        let mut names = HashSet::new();
        for (i, s) in raw.source.iter().enumerate() {
            let key = |k: &str| format!("source[{i}].{k}");
            if s.name.trim().is_empty() {
                return Err(err(&key("name"), "must not be empty".into()));
            }
            if !names.insert(s.name.clone()) {
                return Err(err(&key("name"), format!("`{}` is used by another source", s.name)));
            }
            let format = match s.kind.as_str() {
                "ns3-stock" => SimFormat::Ns3(Ns3Time::Seconds),
                k => SimFormat::parse(k).ok_or_else(|| {
                    err(&key("kind"), format!("unknown kind `{k}` (gem5, nicbm, ns3, ns3-stock, qemu)"))
                })?,
            };
            let mut clock = format.default_clock(run.epoch_ns);
            if let Some(c) = &s.clock {
                if let Some(u) = &c.unit {
                    clock.unit = parse_unit(u).ok_or_else(|| {
                        err(&key("clock.unit"), format!("unknown unit `{u}` (ps, ns, us, ms, s or <n>hz)"))
                    })?;
                }
                if let Some(e) = c.epoch_ns {
                    clock.epoch_ns = e;
                }
                if let Some(o) = &c.origin {
                    clock.raw_origin = parse_num(o)
                        .ok_or_else(|| err(&key("clock.origin"), format!("not a number: {o:?}")))?;
                }
            }
            let mut nodes = BTreeMap::new();
            if let Some(ns) = &s.nodes {
                if !matches!(format, SimFormat::Ns3(_)) {
                    return Err(err(&key("nodes"), "only ns-3 sources have nodes".into()));
                }
                for (k, v) in ns {
                    let n: u32 = k
                        .parse()
                        .map_err(|_| err(&key("nodes"), format!("node `{k}` is not a node index")))?;
                    if v.is_empty() || v.contains('/') {
                        return Err(err(
                            &key(&format!("nodes.{k}")),
                            format!("bad node name `{v}` (non-empty, no '/')"),
                        ));
                    }
                    nodes.insert(n, v.clone());
                }
            }
            if s.nic.is_some() && format != SimFormat::Qemu {
                return Err(err(&key("nic"), "only qemu sources name their NIC".into()));
            }
            let role = match format {
                SimFormat::Gem5 => Role::Host,
                SimFormat::Nicbm => Role::Nic,
                SimFormat::Ns3(_) => Role::Network { nodes },
                SimFormat::Qemu => {
                    Role::HostAndNic { nic: s.nic.clone().unwrap_or_else(|| format!("{}-nic", s.name)) }
                }
            };
            if let Role::HostAndNic { nic } = &role
                && !names.insert(nic.clone())
            {
                return Err(err(&key("nic"), format!("`{nic}` is used by another component")));
            }
            let mut symbols = Vec::new();
            for (j, y) in s.symbols.iter().enumerate() {
                let sk = |k: &str| key(&format!("symbols[{j}].{k}"));
                let fmt = match &y.format {
                    None => SymbolFormat::Auto,
                    Some(f) => SymbolFormat::parse(f).ok_or_else(|| {
                        err(&sk("format"), format!("unknown format `{f}` (auto, objdump-syms, objdump-d, readelf, nm, kallsyms, elf)"))
                    })?,
                };
                let offset = match &y.offset {
                    None => 0,
                    Some(o) => {
                        parse_num(o).ok_or_else(|| err(&sk("offset"), format!("not a number: {o:?}")))?
                    }
                };
                let path = resolve(&sk("path"), &y.path)?;
                symbols.push(SymbolSpec {
                    id: y.id.clone().unwrap_or_else(|| {
                        path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default()
                    }),
                    path,
                    options: LoadOptions { format: fmt, offset, section: y.section.clone() },
                });
            }
            sources.push(SourceSpec {
                name: s.name.clone(),
                format,
                path: resolve(&key("path"), &s.path)?,
                clock,
                role,
                symbols,
            });
        }
        let find = |key: &str, name: &Option<String>, what: &str| -> Result<usize, TopologyError> {
            let n = name.as_ref().ok_or_else(|| err(key, format!("missing (the {what}'s source name)")))?;
            sources
                .iter()
                .position(|s| &s.name == n || matches!(&s.role, Role::HostAndNic { nic } if nic == n))
                .ok_or_else(|| err(key, format!("no source named `{n}`")))
        };
        let mut pcie = Vec::new();
        let mut eth = Vec::new();
        for (i, l) in raw.link.iter().enumerate() {
            let key = |k: &str| format!("link[{i}].{k}");
            match l.kind.as_str() {
                "pcie" => {
                    let host = find(&key("host"), &l.host, "host")?;
                    let nic = find(&key("nic"), &l.nic, "NIC")?;
                    if sources[host].role != Role::Host {
                        return Err(err(
                            &key("host"),
                            format!("`{}` is not a gem5 host", sources[host].name),
                        ));
                    }
                    if sources[nic].role != Role::Nic {
                        return Err(err(&key("nic"), format!("`{}` is not a nicbm NIC", sources[nic].name)));
                    }
                    pcie.push(PcieLink { host, nic });
                }
                "eth" => {
                    let nic = find(&key("nic"), &l.nic, "NIC")?;
                    let net = find(&key("net"), &l.net, "network")?;
                    if !matches!(sources[nic].role, Role::Nic | Role::HostAndNic { .. }) {
                        return Err(err(&key("nic"), format!("`{}` is not a NIC", sources[nic].name)));
                    }
                    if !matches!(sources[net].role, Role::Network { .. }) {
                        return Err(err(&key("net"), format!("`{}` is not a network", sources[net].name)));
                    }
                    let node =
                        l.node.ok_or_else(|| err(&key("node"), "missing (the ns-3 node index)".into()))?;
                    let device = l.device.ok_or_else(|| {
                        err(&key("device"), "missing (the device index on the node)".into())
                    })?;
                    eth.push(EthLink { nic, net, node, device });
                }
                k => return Err(err(&key("kind"), format!("unknown link kind `{k}` (pcie, eth)"))),
            }
        }
        let dfl = FunctionLists::default();
        let f = raw.functions;
        let functions = FunctionLists {
            sys_entry: f.sys_entry.unwrap_or(dfl.sys_entry),
            kernel_tx: f.kernel_tx.unwrap_or(dfl.kernel_tx),
            kernel_rx: f.kernel_rx.unwrap_or(dfl.kernel_rx),
            driver_tx: f.driver_tx.unwrap_or(dfl.driver_tx),
            driver_rx: f.driver_rx.unwrap_or(dfl.driver_rx),
            pci_write: f.pci_write.unwrap_or(dfl.pci_write),
        };
        let mut filter = FilterSpec::default();
        let rf = raw.filter;
        if let Some(t) = rf.drop_types {
            for (i, name) in t.iter().enumerate() {
                if !EVENT_TYPES.contains(&name.as_str()) {
                    return Err(err(
                        &format!("filter.drop_types[{i}]"),
                        format!("unknown event type `{name}` (one of {})", EVENT_TYPES.join(", ")),
                    ));
                }
            }
            filter.drop_types = t;
        }
        if let Some([a, b]) = rf.window_ns {
            if a >= b {
                return Err(err("filter.window_ns", format!("empty window [{a}, {b})")));
            }
            filter.from_ns = Some(a);
            filter.to_ns = Some(b);
        }
        if let Some([a, b]) = rf.window_raw {
            if a >= b {
                return Err(err("filter.window_raw", format!("empty window [{a}, {b})")));
            }
            filter.from_raw = Some(a);
            filter.to_raw = Some(b);
        }
        if let Some(c) = rf.components {
            for (i, name) in c.iter().enumerate() {
                let head = name.split('/').next().unwrap_or("");
                let known = sources
                    .iter()
                    .any(|s| s.name == head || matches!(&s.role, Role::HostAndNic { nic } if nic == head));
                if !known {
                    return Err(err(&format!("filter.components[{i}]"), format!("no component `{head}`")));
                }
            }
            filter.components = c;
        }
        filter.only_interesting = rf.only_interesting.unwrap_or(false);
        filter.blacklist = rf.blacklist.unwrap_or_default();
        let mut sinks = Vec::new();
        for (i, s) in raw.sink.iter().enumerate() {
            let key = |k: &str| format!("sink[{i}].{k}");
            let backpressure = match s.backpressure.as_deref() {
                None | Some("block") => Backpressure::Block,
                Some("drop") => Backpressure::Drop,
                Some(b) => {
                    return Err(err(&key("backpressure"), format!("`{b}` is neither `block` nor `drop`")));
                }
            };
            let queue_batches = s.queue_batches.unwrap_or(4).max(1);
            match s.kind.as_str() {
                "file" => {
                    let path = resolve(
                        &key("path"),
                        s.path.as_deref().ok_or_else(|| err(&key("path"), "missing".into()))?,
                    )?;
                    let format = match &s.format {
                        Some(f) => Format::parse(f)
                            .ok_or_else(|| err(&key("format"), format!("unknown format `{f}`")))?,
                        None => Format::from_path(&path).ok_or_else(|| {
                            err(
                                &key("format"),
                                "missing, and the file name does not say it (e.g. x.otlp.json)".into(),
                            )
                        })?,
                    };
                    if !format.can_write() {
                        return Err(err(&key("format"), format!("weft cannot write {}", format.name())));
                    }
                    sinks.push(SinkSpec::File { path, format, backpressure, queue_batches });
                }
                "otlp-http" => {
                    let url = s.url.clone().ok_or_else(|| err(&key("url"), "missing".into()))?;
                    if !url.starts_with("http://") && !url.starts_with("https://") {
                        return Err(err(&key("url"), format!("`{url}` is not an http(s) URL")));
                    }
                    let d = HttpOptions::default();
                    sinks.push(SinkSpec::OtlpHttp(HttpOptions {
                        url,
                        batch_spans: s.batch_spans.unwrap_or(d.batch_spans).max(1),
                        max_retries: s.max_retries.unwrap_or(d.max_retries),
                        timeout_ms: s.timeout_ms.unwrap_or(d.timeout_ms),
                        backpressure,
                        queue_batches,
                    }));
                }
                k => return Err(err(&key("kind"), format!("unknown sink kind `{k}` (file, otlp-http)"))),
            }
        }
        Ok(Topology { file: file.to_owned(), run, sources, pcie, eth, functions, filter, sinks })
    }

    /// The weave configuration.
    pub fn weave_config(&self) -> WeaveConfig {
        WeaveConfig {
            seed: self.run.seed,
            components: self
                .sources
                .iter()
                .map(|s| ComponentSpec {
                    name: s.name.clone(),
                    tool: s.format.tool().to_owned(),
                    role: s.role.clone(),
                })
                .collect(),
            pcie: self.pcie.clone(),
            eth: self.eth.clone(),
            functions: self.functions.clone(),
            max_span_events: self.run.max_span_events,
            span_events: self.run.span_events,
            keep_bare_calls: self.run.keep_bare_calls,
            max_cause_age_ns: self.run.max_cause_age_ns,
            ..WeaveConfig::default()
        }
    }

    /// Loads the symbol tables of source `i` (`None` when it has none).
    pub fn load_symbols(&self, i: usize) -> Result<Option<Symbolizer>, TopologyError> {
        let Some(s) = self.sources.get(i) else { return Ok(None) };
        if s.symbols.is_empty() {
            return Ok(None);
        }
        let mut tables = Vec::new();
        for (j, y) in s.symbols.iter().enumerate() {
            let t = SymbolTable::load(&y.path, &y.id, &y.options).map_err(|e| TopologyError {
                file: self.file.clone(),
                key: format!("source[{i}].symbols[{j}].path"),
                msg: e.to_string(),
            })?;
            tables.push(t);
        }
        Ok(Some(Symbolizer::new(tables)))
    }
}
