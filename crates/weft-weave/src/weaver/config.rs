//! What the weave is built from ([`WeaveConfig`]: components, links, limits) and what it
//! reports ([`WeaveStats`]).

use std::collections::BTreeMap;

use weft_sources::reject::ReasonCounts;

use super::LinkReport;
use super::class::FunctionLists;
use crate::assemble::{AssembleStats, Limits};

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
    /// Network hops per device (`ns3/r2/dev1`), for devices that saw any.
    pub net_ports: BTreeMap<String, NetPortStats>,
}

/// How the hops of one network device were woven.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetPortStats {
    /// Hop spans (whole, instant or incomplete).
    pub hops: u64,
    /// Dequeues with no enqueue of that packet on the device (instant, incomplete hops).
    pub unmatched: u64,
    /// Hops still open when the input ended (incomplete).
    pub open_at_end: u64,
    /// Hops closed as incomplete because too many were open (`max_open`).
    pub evicted: u64,
    /// Packets dropped with nothing open for them on the device — a full queue refused one
    /// (`TxQueue/Drop`), a stock receiver's PHY lost one (`PhyRxDrop`): journeys that end
    /// there, not errors.
    pub drops: u64,
}

impl NetPortStats {
    /// Hops whose times are not what happened: unmatched, open at the end, evicted.
    pub fn broken(&self) -> u64 {
        self.unmatched + self.open_at_end + self.evicted
    }
}

/// Share of a device's hops above which [`WeaveStats::net_warnings`] speaks up.
pub const NET_BROKEN_SHARE: f64 = 0.01;

impl WeaveStats {
    /// One sentence per network device where more than [`NET_BROKEN_SHARE`] of the hops are
    /// incomplete or unmatched: which device, how many, the likely cause and fix. Empty when
    /// every device is fine.
    pub fn net_warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (port, s) in &self.net_ports {
            let broken = s.broken();
            if broken == 0 || (broken as f64) <= NET_BROKEN_SHARE * s.hops as f64 {
                continue;
            }
            let mut why = Vec::new();
            if s.unmatched > 0 {
                why.push(format!(
                    "{} dequeued without an enqueue of that packet on the device (the log lacks lines \
                     of this device — cut, filtered or rejected — or its packets cannot be told \
                     apart: trace with packet uids, as the SimBricks fork's layout does)",
                    s.unmatched
                ));
            }
            if s.open_at_end > 0 {
                why.push(format!(
                    "{} still queued when the log ended (stop the traffic a while before the \
                     simulation ends)",
                    s.open_at_end
                ));
            }
            if s.evicted > 0 {
                why.push(format!(
                    "{} closed early because too many hops were open (raise max_open in [run])",
                    s.evicted
                ));
            }
            out.push(format!(
                "{port}: {broken} of {} hops ({:.1}%) are incomplete — times at this device and \
                 the journeys through it are cut: {}",
                s.hops,
                100.0 * broken as f64 / s.hops.max(1) as f64,
                why.join("; ")
            ));
        }
        out
    }
}
