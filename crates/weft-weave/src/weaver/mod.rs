//! The weavers: events (in global time order) → spans.
//!
//! [`Weave`] owns one weaver per component — [`host`] for gem5 and QEMU hosts, [`nic`] for
//! nicbm and QEMU's e1000e, [`net`] for ns-3 — the cross-component queues of every declared
//! link ([`links`]) and the [`Assembler`]. It is fed the merged event stream one event at a
//! time and appends finished spans to a vector; it never blocks and never reads a clock, so its
//! output is a pure function of the merged stream. The rules are in the crate docs.
//!
//! Beside the weavers: [`config`] (what the weave is built from and reports), [`class`] (host
//! function classes), [`attr`] (weft-weave's attribute keys) and `span` (spans under
//! construction and the context weavers share while handling one event). This module routes
//! each event to its component's weaver.

pub mod attr;
pub mod class;
pub mod config;
pub mod host;
pub mod links;
pub mod net;
pub mod nic;
mod span;

use std::sync::Arc;

use weft_model::event::EventKind;
use weft_model::{Event, Span};

use crate::assemble::Assembler;
pub use class::FunctionLists;
pub use config::{
    ComponentSpec, EthLink, NET_BROKEN_SHARE, NetPortStats, PcieLink, Role, SpanEvents, WeaveConfig,
    WeaveStats,
};
use links::{CtxQueue, EthQueues, Links, PcieMode, PcieQueues};
pub use links::{LinkReport, LinkStats};
pub(crate) use span::{Building, Cx, Ident, int};

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
