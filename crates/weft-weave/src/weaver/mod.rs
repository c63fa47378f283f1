//! The weavers: events (in global time order) → spans.
//!
//! [`Weave`] owns one weaver per component — [`host`] for gem5 and QEMU hosts, [`nic`] for
//! nicbm and QEMU's e1000e, [`net`] for ns-3 — the cross-component queues of every declared
//! link ([`links`]) and the [`Assembler`]. It is fed the merged event stream one event at a
//! time and appends finished spans to a vector; it never blocks and never reads a clock, so its
//! output is a pure function of the merged stream. The rules are in the crate docs.

pub mod host;
pub mod links;
pub mod net;
pub mod nic;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use weft_model::event::EventKind;
use weft_model::{Attributes, Event, Resource, Scope, Span, SpanEvent, SpanKind, Value, conv};
use weft_sources::reject::ReasonCounts;

use crate::assemble::{AssembleStats, Assembler, Limits, LocalId};
use links::{CtxQueue, EthQueues, Links, PcieMode, PcieQueues};
pub use links::{LinkReport, LinkStats};

/// Attribute keys of woven spans that are specific to weft-weave (the shared ones are in
/// [`weft_model::conv`]).
pub mod attr {
    /// HostCall: the entry function that opened it.
    pub const HOST_ENTRY: &str = "weft.host.entry";
    /// HostCall: function entries seen in it.
    pub const HOST_CALLS: &str = "weft.host.calls";
    /// HostCall: called a kernel-transmit function.
    pub const HOST_KERNEL_TX: &str = "weft.host.kernel_tx";
    /// HostCall: called a kernel-receive function.
    pub const HOST_KERNEL_RX: &str = "weft.host.kernel_rx";
    /// HostCall: called a driver-transmit function.
    pub const HOST_DRIVER_TX: &str = "weft.host.driver_tx";
    /// HostCall: called a driver-receive function.
    pub const HOST_DRIVER_RX: &str = "weft.host.driver_rx";
    /// MMIO: a write.
    pub const MMIO_WRITE: &str = "weft.mmio.write";
    /// MMIO (host): BAR.
    pub const MMIO_BAR: &str = "weft.mmio.bar";
    /// MMIO: offset within the BAR.
    pub const MMIO_OFFSET: &str = "weft.mmio.offset";
    /// MMIO: access size in bytes.
    pub const MMIO_SIZE: &str = "weft.mmio.size";
    /// MMIO (host): physical address.
    pub const MMIO_ADDR: &str = "weft.mmio.addr";
    /// MMIO: posted write.
    pub const MMIO_POSTED: &str = "weft.mmio.posted";
    /// MMIO (NIC): value read or written.
    pub const MMIO_VALUE: &str = "weft.mmio.value";
    /// DMA: the device writes host memory.
    pub const DMA_WRITE: &str = "weft.dma.write";
    /// DMA: host address.
    pub const DMA_ADDR: &str = "weft.dma.addr";
    /// DMA: length.
    pub const DMA_SIZE: &str = "weft.dma.size";
    /// DMA: the op id (nicbm op pointer = gem5 DMA id).
    pub const DMA_ID: &str = "weft.dma.id";
    /// MSI-X: vector.
    pub const MSIX_VECTOR: &str = "weft.msix.vector";
    /// NicEth: `tx` or `rx`.
    pub const ETH_DIRECTION: &str = "weft.eth.direction";
    /// NicEth: frame length.
    pub const ETH_LENGTH: &str = "weft.eth.length";
    /// NicEth (rx): port.
    pub const ETH_PORT: &str = "weft.eth.port";
    /// HostPci: a write.
    pub const PCI_WRITE: &str = "weft.pci.write";
    /// Span event: the event's raw time.
    pub const RAW_TIME: &str = "weft.raw.time";
}

/// Function classes (Columbo's indicator lists, spec §8), as bit flags.
pub mod class {
    /// Starts a new HostCall span (`entry_SYSCALL_64`, ...).
    pub const SYS_ENTRY: u8 = 1;
    /// Kernel transmit path.
    pub const KERNEL_TX: u8 = 2;
    /// Kernel receive path: a HostCall calling it joins the trace of the packet received.
    pub const KERNEL_RX: u8 = 4;
    /// Driver transmit.
    pub const DRIVER_TX: u8 = 8;
    /// Driver receive.
    pub const DRIVER_RX: u8 = 16;
    /// Writes the MSI-X table: the next MMIO does not reach the NIC.
    pub const PCI_WRITE: u8 = 32;
}

/// The function lists that classify host calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionLists {
    /// Entry functions: each call starts a new HostCall span.
    pub sys_entry: Vec<String>,
    /// Kernel transmit functions.
    pub kernel_tx: Vec<String>,
    /// Kernel receive functions.
    pub kernel_rx: Vec<String>,
    /// Driver transmit functions.
    pub driver_tx: Vec<String>,
    /// Driver receive functions.
    pub driver_rx: Vec<String>,
    /// MSI-X table writers.
    pub pci_write: Vec<String>,
}

impl Default for FunctionLists {
    /// Columbo's configuration (its `trace-env-config.yaml`), which targets Linux with the
    /// i40e driver.
    fn default() -> Self {
        let v = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect();
        FunctionLists {
            sys_entry: v(&["entry_SYSCALL_64", "error_entry", "entry_SYSCALL_64_safe_stack"]),
            kernel_tx: v(&[
                "__sys_sendto",
                "__sys_sendmsg",
                "dev_hard_start_xmit",
                "netdev_start_xmit",
                "dev_queue_xmit",
            ]),
            kernel_rx: v(&["netif_receive_skb_list_internal"]),
            driver_tx: v(&["i40e_lan_xmit_frame"]),
            driver_rx: v(&["i40e_napi_poll", "i40e_finalize_xdp_rx"]),
            pci_write: v(&["pci_msix_write_vector_ctrl", "__pci_write_msi_msg"]),
        }
    }
}

impl FunctionLists {
    pub(crate) fn classes(&self) -> HashMap<Box<str>, u8> {
        let mut m: HashMap<Box<str>, u8> = HashMap::new();
        for (list, c) in [
            (&self.sys_entry, class::SYS_ENTRY),
            (&self.kernel_tx, class::KERNEL_TX),
            (&self.kernel_rx, class::KERNEL_RX),
            (&self.driver_tx, class::DRIVER_TX),
            (&self.driver_rx, class::DRIVER_RX),
            (&self.pci_write, class::PCI_WRITE),
        ] {
            for f in list {
                *m.entry(f.as_str().into()).or_default() |= c;
            }
        }
        m
    }
}

/// What a source contributes to the woven system.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// A host (gem5).
    Host,
    /// A NIC (nicbm).
    Nic,
    /// A network (ns-3); names of its nodes (`0 → "client"`, `1 → "sw0"`).
    Network {
        /// Node names.
        nodes: BTreeMap<u32, String>,
    },
    /// A QEMU guest: host events and its e1000e NIC's events from one log.
    HostAndNic {
        /// The NIC component's name.
        nic: String,
    },
}

/// One source as the weave sees it (index = its [`weft_model::SourceId`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentSpec {
    /// Component name (`service.name`).
    pub name: String,
    /// Tool (`weft.source.tool`).
    pub tool: String,
    /// What it is.
    pub role: Role,
}

/// A host ↔ NIC link (indices into the component list).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PcieLink {
    /// The host component's source.
    pub host: usize,
    /// The NIC component's source.
    pub nic: usize,
}

/// A NIC ↔ network device link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthLink {
    /// The NIC's source.
    pub nic: usize,
    /// The network's source.
    pub net: usize,
    /// ns-3 node.
    pub node: u32,
    /// Device on the node (a CosimNetDevice in SimBricks runs).
    pub device: u32,
}

/// How much of each grouped event a span keeps as a span event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SpanEvents {
    /// No span events.
    None,
    /// Name, time and raw time; the function name of `HostCall` events. Everything else is
    /// in the span's own attributes (the default: cheap, and enough to see the steps).
    #[default]
    Brief,
    /// Every field of every event (`Event::fields`).
    Full,
}

/// Everything the weave needs.
#[derive(Debug, Clone)]
pub struct WeaveConfig {
    /// Seed of span and trace ids.
    pub seed: u64,
    /// The components, indexed by source id.
    pub components: Vec<ComponentSpec>,
    /// Host ↔ NIC links.
    pub pcie: Vec<PcieLink>,
    /// NIC ↔ network links.
    pub eth: Vec<EthLink>,
    /// Host function classes.
    pub functions: FunctionLists,
    /// Span events kept per span.
    pub max_span_events: usize,
    /// What a span event keeps of its event.
    pub span_events: SpanEvents,
    /// Keep HostCall spans that saw nothing but their entry function.
    pub keep_bare_calls: bool,
    /// A cause waiting longer than this (ns) for its effect is dropped as unmatched.
    pub max_cause_age_ns: u64,
    /// Causes a queue holds.
    pub max_queued_causes: usize,
    /// Open spans per weaver and kind before the oldest is closed as incomplete.
    pub max_open: usize,
    /// Assembler bounds.
    pub limits: Limits,
}

impl Default for WeaveConfig {
    fn default() -> Self {
        WeaveConfig {
            seed: 0,
            components: Vec::new(),
            pcie: Vec::new(),
            eth: Vec::new(),
            functions: FunctionLists::default(),
            max_span_events: 64,
            span_events: SpanEvents::Brief,
            keep_bare_calls: false,
            max_cause_age_ns: 10_000_000,
            max_queued_causes: 65_536,
            max_open: 65_536,
            limits: Limits::default(),
        }
    }
}

/// What the weave did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WeaveStats {
    /// Events per type name.
    pub events_by_type: BTreeMap<&'static str, u64>,
    /// Spans per type.
    pub spans_by_type: BTreeMap<&'static str, u64>,
    /// Spans closed without their opening or closing event.
    pub incomplete: u64,
    /// Events that no weaver uses (per reason).
    pub not_woven: ReasonCounts,
    /// Events that did not fit the expected sequence (a completion without a request, ...).
    pub anomalies: ReasonCounts,
    /// Spans per source (index = source id).
    pub spans_by_source: Vec<u64>,
    /// Assembler counters.
    pub assemble: AssembleStats,
    /// Cross-component matching per link and kind.
    pub links: Vec<LinkReport>,
}

/// A span being built.
#[derive(Debug)]
pub(crate) struct Building {
    pub id: LocalId,
    pub name: Option<String>,
    pub stype: &'static str,
    pub start_ns: u64,
    pub end_ns: u64,
    pub start_raw: u64,
    pub end_raw: u64,
    /// The opening event (kept inline: most spans group one or two events, and a `Vec`
    /// holding just it would cost an allocation per span).
    pub first: Event,
    /// The events after the first, up to the span-event limit.
    pub more: Vec<Event>,
    pub dropped_events: u32,
    pub attrs: Attributes,
    pub causes: Vec<LocalId>,
    pub incomplete: bool,
}

/// Attributes [`Cx::close`] puts before a span's own: type, component, raw start and end,
/// and `weft.incomplete` when set.
const HEADER_ATTRS: usize = 5;

impl Building {
    /// A span opened by `ev`, with room for 6 attributes of its own (more than most host
    /// and NIC spans have).
    pub fn new(id: LocalId, stype: &'static str, ev: &Event) -> Self {
        Self::with_capacity(id, stype, ev, 6)
    }

    /// A span opened by `ev`, with room for `attrs` attributes of its own (and the header
    /// [`Cx::close`] adds, so that closing does not reallocate unless it marks the span
    /// incomplete).
    pub fn with_capacity(id: LocalId, stype: &'static str, ev: &Event, attrs: usize) -> Self {
        Building {
            id,
            name: None,
            stype,
            start_ns: ev.time_ns,
            end_ns: ev.time_ns,
            start_raw: ev.raw_time,
            end_raw: ev.raw_time,
            first: ev.clone(),
            more: Vec::new(),
            dropped_events: 0,
            attrs: Attributes(Vec::with_capacity(attrs + header_len())),
            causes: Vec::new(),
            incomplete: false,
        }
    }

    pub fn add(&mut self, ev: &Event, max_events: usize) {
        self.end_ns = self.end_ns.max(ev.time_ns);
        self.end_raw = self.end_raw.max(ev.raw_time);
        if 1 + self.more.len() < max_events {
            self.more.push(ev.clone());
        } else {
            self.dropped_events += 1;
        }
    }

    pub fn attr(&mut self, key: &'static str, v: impl Into<Value>) {
        self.attrs.push(key, v);
    }
}

/// The header attributes always present (see [`HEADER_ATTRS`]).
const fn header_len() -> usize {
    HEADER_ATTRS - 1
}

/// A u64 as an OTLP int (two's complement above i64::MAX, as every OTLP exporter does).
pub(crate) fn int(v: u64) -> Value {
    Value::I64(v as i64)
}

fn span_event(e: &Event, detail: SpanEvents) -> SpanEvent {
    let attributes = match (detail, &e.kind) {
        (SpanEvents::Full, _) => {
            let mut f = e.fields();
            f.push(attr::RAW_TIME, int(e.raw_time));
            f
        }
        (_, EventKind::Host(weft_model::event::HostEvent::Call { func, .. })) => {
            let mut f = Attributes(Vec::with_capacity(2));
            f.push("func", func.as_ref());
            f.push(attr::RAW_TIME, int(e.raw_time));
            f
        }
        _ => {
            let mut f = Attributes(Vec::with_capacity(1));
            f.push(attr::RAW_TIME, int(e.raw_time));
            f
        }
    };
    SpanEvent {
        time_ns: e.time_ns,
        name: e.type_name().to_owned().into(),
        attributes,
        ..SpanEvent::default()
    }
}

/// Per-component output identity.
#[derive(Debug, Clone)]
pub(crate) struct Ident {
    pub source: usize,
    pub component: Arc<str>,
    pub resource: Arc<Resource>,
    pub scope: Arc<Scope>,
}

impl Ident {
    fn new(source: usize, name: &str, instance: &str, kind: &str, tool: &str, scope: &str) -> Self {
        let mut a = Attributes::new();
        a.push(conv::SERVICE_NAME, name);
        a.push(conv::SERVICE_INSTANCE_ID, instance);
        a.push(conv::COMPONENT_KIND, kind);
        a.push(conv::SOURCE_TOOL, tool);
        Ident {
            source,
            component: Arc::from(name),
            resource: Arc::new(Resource { attributes: a, ..Resource::default() }),
            scope: Arc::new(Scope {
                name: scope.to_owned(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
                ..Scope::default()
            }),
        }
    }
}

/// What weavers share while handling one event.
pub(crate) struct Cx<'a> {
    pub asm: &'a mut Assembler,
    pub links: &'a mut Links,
    pub stats: &'a mut WeaveStats,
    pub out: &'a mut Vec<Span>,
    pub max_events: usize,
    pub max_open: usize,
    pub detail: SpanEvents,
}

impl Cx<'_> {
    /// Finishes `b` as a span of `who` (component `comp`) and hands it to the assembler.
    pub fn close(&mut self, b: Building, who: &Ident, comp: &Arc<str>) {
        let Building {
            id,
            name,
            stype,
            start_ns,
            end_ns,
            start_raw,
            end_raw,
            first,
            more,
            dropped_events,
            attrs,
            causes,
            incomplete,
        } = b;
        // The header goes in front of the span's own attributes, in the vector they are in
        // (built with room for it).
        let mut a = attrs;
        let header = [
            weft_model::KeyValue::new(conv::SPAN_TYPE, stype),
            weft_model::KeyValue::new(conv::COMPONENT, comp.as_ref()),
            weft_model::KeyValue::new(conv::RAW_START, int(start_raw)),
            weft_model::KeyValue::new(conv::RAW_END, int(end_raw)),
        ];
        a.0.splice(0..0, header);
        if incomplete {
            a.0.insert(header_len(), weft_model::KeyValue::new(conv::INCOMPLETE, true));
            self.stats.incomplete += 1;
        }
        let detail = self.detail;
        let span_events = match detail {
            SpanEvents::None => Vec::new(),
            _ => {
                let mut v = Vec::with_capacity(1 + more.len());
                v.push(span_event(&first, detail));
                v.extend(more.iter().map(|e| span_event(e, detail)));
                v
            }
        };
        let span = Span {
            name: name.unwrap_or_else(|| stype.to_owned()).into(),
            kind: SpanKind::Internal,
            start_ns,
            end_ns,
            attributes: a,
            events: span_events,
            dropped_events_count: dropped_events,
            ..Span::with_context(who.resource.clone(), who.scope.clone())
        };
        *self.stats.spans_by_type.entry(stype).or_default() += 1;
        if let Some(c) = self.stats.spans_by_source.get_mut(who.source) {
            *c += 1;
        }
        self.asm.close(id, span, causes, self.out);
    }

    pub fn anomaly(&mut self, what: &'static str) {
        self.stats.anomalies.add(what, 1);
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Route {
    host: Option<usize>,
    nic: Option<usize>,
    net: Option<usize>,
}

/// The weave stage (see the module docs).
pub struct Weave {
    hosts: Vec<host::HostWeaver>,
    nics: Vec<nic::NicWeaver>,
    nets: Vec<net::NetWeaver>,
    route: Vec<Route>,
    links: Links,
    asm: Assembler,
    stats: WeaveStats,
    max_events: usize,
    max_open: usize,
    detail: SpanEvents,
}

/// A topology the weave cannot be built from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

impl Weave {
    /// Builds the weavers and queues for `cfg`.
    pub fn new(cfg: &WeaveConfig) -> Result<Weave, ConfigError> {
        let classes = Arc::new(cfg.functions.classes());
        let mut w = Weave {
            hosts: Vec::new(),
            nics: Vec::new(),
            nets: Vec::new(),
            route: vec![Route::default(); cfg.components.len()],
            links: Links::default(),
            asm: Assembler::new(cfg.seed, cfg.limits),
            stats: WeaveStats { spans_by_source: vec![0; cfg.components.len()], ..WeaveStats::default() },
            max_events: cfg.max_span_events,
            max_open: cfg.max_open.max(1),
            detail: cfg.span_events,
        };
        for (i, c) in cfg.components.iter().enumerate() {
            match &c.role {
                Role::Host => {
                    w.route[i].host = Some(w.hosts.len());
                    let id = Ident::new(i, &c.name, &c.name, "host", &c.tool, "weft.weave.host");
                    w.hosts.push(host::HostWeaver::new(id, classes.clone(), cfg.keep_bare_calls));
                }
                Role::Nic => {
                    w.route[i].nic = Some(w.nics.len());
                    let id = Ident::new(i, &c.name, &c.name, "nic", &c.tool, "weft.weave.nic");
                    w.nics.push(nic::NicWeaver::new(id, cfg.max_cause_age_ns));
                }
                Role::Network { nodes } => {
                    w.route[i].net = Some(w.nets.len());
                    let id = Ident::new(i, &c.name, &c.name, "network", &c.tool, "weft.weave.network");
                    w.nets.push(net::NetWeaver::new(id, nodes, cfg.max_cause_age_ns));
                }
                Role::HostAndNic { nic } => {
                    w.route[i].host = Some(w.hosts.len());
                    w.route[i].nic = Some(w.nics.len());
                    let hid = Ident::new(i, &c.name, &c.name, "host", &c.tool, "weft.weave.host");
                    let nid = Ident::new(i, nic, &c.name, "nic", &c.tool, "weft.weave.nic");
                    let mut h = host::HostWeaver::new(hid, classes.clone(), cfg.keep_bare_calls);
                    let mut n = nic::NicWeaver::new(nid, cfg.max_cause_age_ns);
                    let link = w.links.pcie.len();
                    w.links.pcie.push(pcie_queues(format!("{} ↔ {}", c.name, nic), PcieMode::Order, cfg));
                    h.set_pcie(link, PcieMode::Order);
                    n.set_pcie(link, PcieMode::Order);
                    w.hosts.push(h);
                    w.nics.push(n);
                }
            }
        }
        let name = |i: usize| cfg.components.get(i).map(|c| c.name.clone()).unwrap_or_default();
        for l in &cfg.pcie {
            let (Some(h), Some(n)) =
                (w.route.get(l.host).and_then(|r| r.host), w.route.get(l.nic).and_then(|r| r.nic))
            else {
                return Err(ConfigError(format!(
                    "pcie link {} ↔ {}: needs a host and a NIC",
                    name(l.host),
                    name(l.nic)
                )));
            };
            if w.hosts[h].pcie().is_some() {
                return Err(ConfigError(format!("host {} has more than one pcie link", name(l.host))));
            }
            if w.nics[n].pcie().is_some() {
                return Err(ConfigError(format!("NIC {} has more than one pcie link", name(l.nic))));
            }
            let link = w.links.pcie.len();
            w.links.pcie.push(pcie_queues(
                format!("{} ↔ {}", name(l.host), name(l.nic)),
                PcieMode::Full,
                cfg,
            ));
            w.hosts[h].set_pcie(link, PcieMode::Full);
            w.nics[n].set_pcie(link, PcieMode::Full);
        }
        for l in &cfg.eth {
            let (Some(n), Some(net)) =
                (w.route.get(l.nic).and_then(|r| r.nic), w.route.get(l.net).and_then(|r| r.net))
            else {
                return Err(ConfigError(format!(
                    "eth link {} ↔ {}: needs a NIC and a network",
                    name(l.nic),
                    name(l.net)
                )));
            };
            if w.nics[n].eth().is_some() {
                return Err(ConfigError(format!("NIC {} has more than one eth link", name(l.nic))));
            }
            let link = w.links.eth.len();
            let label =
                format!("{} ↔ {}/{}", name(l.nic), name(l.net), w.nets[net].port_name(l.node, l.device));
            w.links.eth.push(EthQueues {
                name: label,
                tx: CtxQueue::new(cfg.max_queued_causes, cfg.max_cause_age_ns),
                rx: CtxQueue::new(cfg.max_queued_causes, cfg.max_cause_age_ns),
            });
            w.nics[n].set_eth(link);
            if !w.nets[net].add_link(l.node, l.device, link) {
                return Err(ConfigError(format!(
                    "network {} node {} device {} is linked to more than one NIC",
                    name(l.net),
                    l.node,
                    l.device
                )));
            }
        }
        Ok(w)
    }

    /// Weaves one event (events must come in the merge's order), appending finished spans.
    pub fn push(&mut self, ev: &Event, out: &mut Vec<Span>) {
        *self.stats.events_by_type.entry(ev.type_name()).or_default() += 1;
        let r = self.route.get(ev.source.0 as usize).copied().unwrap_or_default();
        let mut cx = Cx {
            asm: &mut self.asm,
            links: &mut self.links,
            stats: &mut self.stats,
            out,
            max_events: self.max_events,
            max_open: self.max_open,
            detail: self.detail,
        };
        match &ev.kind {
            EventKind::Host(h) => match r.host {
                Some(i) => self.hosts[i].on(ev, h, &mut cx),
                None => cx.stats.not_woven.add("host event from a source that is not a host", 1),
            },
            EventKind::Nic(n) => match r.nic {
                Some(i) => self.nics[i].on(ev, n, &mut cx),
                None => cx.stats.not_woven.add("NIC event from a source that is not a NIC", 1),
            },
            EventKind::Net(n) => match r.net {
                Some(i) => self.nets[i].on(ev, n, &mut cx),
                None => cx.stats.not_woven.add("network event from a source that is not a network", 1),
            },
            EventKind::Sync(_) => cx.stats.not_woven.add("simulator sync bookkeeping", 1),
            EventKind::Kernel(_) | EventKind::Tracepoint(_) => {
                cx.stats.not_woven.add("kernel/tracepoint event (not a simulator event)", 1)
            }
        }
    }

    /// End of input: closes every open span (as incomplete), releases everything.
    pub fn finish(&mut self, out: &mut Vec<Span>) {
        let mut cx = Cx {
            asm: &mut self.asm,
            links: &mut self.links,
            stats: &mut self.stats,
            out,
            max_events: self.max_events,
            max_open: self.max_open,
            detail: self.detail,
        };
        // Hosts first: closing a receive HostCall still takes causes from its queues.
        for h in &mut self.hosts {
            h.finish(&mut cx);
        }
        for n in &mut self.nics {
            n.finish(&mut cx);
        }
        for n in &mut self.nets {
            n.finish(&mut cx);
        }
        self.links.finish();
        self.asm.finish(out);
        self.stats.assemble = self.asm.stats().clone();
        self.stats.links = self.links.report();
    }

    /// The statistics so far (links and assembler counters are final after
    /// [`Weave::finish`]).
    pub fn stats(&self) -> &WeaveStats {
        &self.stats
    }

    /// Spans per source so far.
    pub fn spans_by_source(&self) -> &[u64] {
        &self.stats.spans_by_source
    }
}

fn pcie_queues(name: String, mode: PcieMode, cfg: &WeaveConfig) -> PcieQueues {
    // QEMU's untimed exec lines take the time of the last timestamped line before them, so
    // ages mean nothing there: order alone matches.
    let age = if mode == PcieMode::Order { u64::MAX } else { cfg.max_cause_age_ns };
    let q = || CtxQueue::new(cfg.max_queued_causes, age);
    PcieQueues { name, mode, mmio: q(), dma: q(), msix: q(), recv: q(), xmit: q() }
}
