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

mod filter;
mod links;
mod raw;
mod sinks;
mod sources;
mod vars;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use weft_model::Clock;
use weft_sources::sim::SimFormat;
use weft_sources::symbols::{LoadOptions, SymbolTable, Symbolizer};

pub use filter::EVENT_TYPES;
use raw::{RawFunctions, RawRun, RawTopology};

use crate::actor::FilterSpec;
use crate::sink::SinkSpec;
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

/// What every part of reading one topology file needs: where errors point and how paths
/// resolve.
struct Reader<'a> {
    file: &'a Path,
    base: &'a Path,
    vars: &'a BTreeMap<String, String>,
}

impl Reader<'_> {
    fn err(&self, key: &str, msg: String) -> TopologyError {
        TopologyError { file: self.file.to_owned(), key: key.to_owned(), msg }
    }

    /// `p` with its variables expanded, relative to the topology's directory.
    fn resolve(&self, key: &str, p: &str) -> Result<PathBuf, TopologyError> {
        let p = PathBuf::from(vars::expand(p, self.vars).map_err(|m| self.err(key, m))?);
        Ok(if p.is_absolute() { p } else { self.base.join(p) })
    }

    /// The `[run]` table (defaults for what it leaves out).
    fn run(&self, r: RawRun) -> Result<RunSpec, TopologyError> {
        let d = RunSpec::default();
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
                Some(x) => {
                    return Err(self.err("run.span_events", format!("`{x}` is not brief, full or none")));
                }
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
                return Err(self.err(k, "must be at least 1".into()));
            }
        }
        Ok(run)
    }
}

/// The `[functions]` table over Columbo's defaults.
fn functions(f: RawFunctions) -> FunctionLists {
    let dfl = FunctionLists::default();
    FunctionLists {
        sys_entry: f.sys_entry.unwrap_or(dfl.sys_entry),
        kernel_tx: f.kernel_tx.unwrap_or(dfl.kernel_tx),
        kernel_rx: f.kernel_rx.unwrap_or(dfl.kernel_rx),
        driver_tx: f.driver_tx.unwrap_or(dfl.driver_tx),
        driver_rx: f.driver_rx.unwrap_or(dfl.driver_rx),
        pci_write: f.pci_write.unwrap_or(dfl.pci_write),
    }
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
        let rd = Reader { file, base, vars };
        let raw: RawTopology =
            toml::from_str(text).map_err(|e| rd.err("toml", e.to_string().trim_end().to_owned()))?;
        let run = rd.run(raw.run)?;
        let sources = rd.sources(&raw.source, run.epoch_ns)?;
        let (pcie, eth) = rd.links(&raw.link, &sources)?;
        let functions = functions(raw.functions);
        let filter = rd.filter(raw.filter, &sources)?;
        let sinks = rd.sinks(&raw.sink)?;
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
