//! The network weaver (ns-3): one `NetDevice` span per device hop of a packet (spec §6
//! "Network", with a per-packet path instead of Columbo's "last completed span").
//!
//! **Hops.** An enqueue-side event opens a hop, the matching dequeue or drop on the same
//! device, in the same direction, of the same packet closes it:
//!
//! | device | ingress hop (packet arrives at the node) | egress hop (packet leaves the node) |
//! |---|---|---|
//! | SimpleNetDevice (fork) | `RxPacketFromNetwork` → `TxPacketToAttachedDevice` / `PhyRxDrop` | `TxQueue/Enqueue` → `TxQueue/Dequeue` / `TxQueue/Drop` |
//! | CosimNetDevice (fork) | `RxPacketFromAdapter` → `TxPacketToNetwork` (the packet enters from a NIC) | `RxPacketFromNetwork` → `TxPacketToAdapter` (it leaves towards a NIC) / `DropPacket` |
//! | stock ns-3 | `r` (`MacRx`): an instant; `d` `PhyRxDrop`: an instant drop | `+` `TxQueue/Enqueue` → `-` `TxQueue/Dequeue` / `d` |
//!
//! A closing event takes the *oldest* open hop of its device and direction whose packet it
//! can be: the same uid (without uids: the same payload size) and, where both have one, the
//! same header — IPv4 addresses, protocol, identification, ports and TCP sequence and
//! acknowledgement numbers, or ARP addresses. A device's queue is first in, first out, so
//! among look-alike packets the oldest is the one; an open hop stays open however long its
//! packet waits (until its dequeue or drop, the end of the input, or `max_open`). A drop
//! with nothing open for it on the device — a full queue refusing a packet (`TxQueue/Drop`),
//! a stock receiver's PHY losing one — is an instant drop hop that ends the journey.
//!
//! **Packets.** A *journey* is one packet's way through the network. With ns-3 packet uids,
//! a hop joins the most recent journey of its uid whose header agrees (lines without one
//! join the uid's most recent journey); a uid seen with a new header starts a new journey —
//! an echo server sending the received packet object back, or TCP segments cut from one
//! buffered packet (they keep its uid). Without uids, among the journeys of the same payload
//! size and header:
//!
//! * stock ns-3 devices (whose `r` is printed before the forwarding node's `+`) match by
//!   where the packet is: an ingress hop joins the journey that left a device of another node
//!   first and has not arrived anywhere since (a wire delivers in order; once a packet has
//!   been seen as the only candidate on a wire, only packets from the egress ports seen
//!   feeding that ingress port are considered), an egress hop the journey that last arrived at
//!   its node; none, a new packet (a host sending);
//! * the fork's 2023 layout joins the most recent journey.
//!
//! In both cases a journey is a candidate while it has an open hop, or for the idle window
//! after its last event: `max_cause_age_ns`, or the longest a hop has been open so far if
//! that is longer (a full queue's wait, its size times the serialization time, is what a
//! link can hold a packet). A packet entering from a NIC (`RxPacketFromAdapter`) always
//! starts a new journey.
//!
//! **Counts.** Per device, [`net_ports`](super::WeaveStats::net_ports) counts hops, dequeues
//! that matched no enqueue, hops still open at the end or closed early (`max_open`), and
//! drops; [`net_warnings`](super::WeaveStats::net_warnings) turns a device with more than 1 %
//! such hops (not counting drops) into a warning.
//!
//! **Parents.** An egress hop's parent is the journey's latest ingress hop on the same node
//! (else its latest hop); an ingress hop's parent is the journey's latest egress hop on another
//! node that did not leave towards a NIC. Some logs print a node's egress before its ingress
//! at the same instant (a forwarding bridge runs inside the receive callback before the
//! receive tap prints); when an ingress hop arrives, the journey's egress hops on the same
//! node that started at that very instant and are not yet children of that node are moved
//! under it. Closed hops are held until the network's time moves past their start, so such
//! corrections never come too late.
//!
//! **Across components.** A journey entering from a NIC starts under the NIC's TX span (the
//! oldest pending on the device's link, the same frame length preferred); a hop leaving
//! towards a NIC (`TxPacketToAdapter`, not dropped) is offered to that NIC as the cause of its
//! RX.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use weft_model::event::{Boundary, DeviceType, NetEvent, NetOp};
use weft_model::{Event, conv};

use super::config::NetPortStats;
use super::links::Ctx;
use super::{Building, Cx, Ident, int};
use crate::assemble::LocalId;
use weft_model::id::IdMap;

type JourneyId = u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Addrs {
    Ip { src: [u8; 4], dst: [u8; 4], proto: u8, sport: u16, dport: u16, ident: u16, seq: u32, ack: u32 },
    Arp { src: [u8; 4], dst: [u8; 4], req: bool },
}

#[derive(Debug, Clone, Copy)]
struct HopRef {
    id: LocalId,
    node: u32,
    ingress: bool,
    to_adapter: bool,
    start_raw: u64,
    parent_node: Option<u32>,
}

#[derive(Debug)]
struct Journey {
    uid: Option<u64>,
    size: u32,
    addrs: Option<Addrs>,
    hops: Vec<HopRef>,
    open: u32,
    last_ns: u64,
    /// The node of its latest ingress hop: where the packet is (stock ns-3 matching).
    at: Option<u32>,
    /// Its latest hop is an egress hop that was dequeued: the packet is on a wire (or, on a
    /// shared medium, on its way to more receivers).
    flying: bool,
    /// When and from which (node, device) it left.
    flight_ns: u64,
    flight_from: (u32, u32),
}

struct OpenHop {
    b: Building,
    node: u32,
    to_adapter: bool,
    journey: JourneyId,
    uid: Option<u64>,
    size: u32,
    addrs: Option<Addrs>,
}

impl OpenHop {
    /// Whether `n` can be this hop's packet: the same uid (without uids: the same payload
    /// size), the same header where both have one.
    fn is(&self, n: &NetEvent, a: Option<Addrs>) -> bool {
        let same_packet = match n.packet_uid {
            Some(u) => self.uid == Some(u),
            None => self.uid.is_none() && self.size == n.payload_size,
        };
        same_packet
            && match (a, self.addrs) {
                (Some(x), Some(y)) => x == y,
                _ => true,
            }
    }
}

/// One direction of one device: its open hops in the order they opened (a FIFO queue).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct PortKey {
    node: u32,
    dev: u32,
    ingress: bool,
}

const MAX_HOPS_REMEMBERED: usize = 64;
/// Attributes `hop_attrs` gives a hop of `n`, plus one for the boundary or drop mark: the
/// span's attribute vector is allocated once, at its size (a few bytes too big would move
/// it out of the allocator's fast per-thread cache).
fn hop_attr_count(n: &NetEvent) -> usize {
    let l3 = match (&n.ipv4, &n.arp) {
        (Some(ip), _) => {
            4 + (ip.protocol != 0) as usize + 2 * (ip.src_port != 0 || ip.dst_port != 0) as usize
        }
        (None, Some(_)) => 3,
        (None, None) => 0,
    };
    6 + n.packet_uid.is_some() as usize + n.interesting.is_some() as usize + l3 + 1
}
const MAX_JOURNEYS: usize = 1 << 16;
/// The [`NetWeaver::port_stats`] key of devices beyond the first `MAX_JOURNEYS`.
const OTHER_PORTS: (u32, u32) = (u32::MAX, u32::MAX);
/// Egress ports remembered per ingress port (a shared medium has several).
const MAX_WIRES_PER_PORT: usize = 16;

pub(crate) struct NetWeaver {
    who: Ident,
    names: BTreeMap<u32, String>,
    node_comp: IdMap<u32, Arc<str>>,
    /// `port_name` per (node, device), formatted once.
    ports: IdMap<(u32, u32), String>,
    links: IdMap<(u32, u32), usize>,
    journeys: IdMap<JourneyId, Journey>,
    next_journey: JourneyId,
    by_uid: IdMap<u64, Vec<JourneyId>>,
    by_size: IdMap<u32, Vec<JourneyId>>,
    /// Journeys without uid by payload size and header (`None`: not known yet), ascending.
    by_key: IdMap<(u32, Option<Addrs>), Vec<JourneyId>>,
    idle_ns: u64,
    /// The longest a hop has been open so far (ns).
    longest_hop_ns: u64,
    open: IdMap<PortKey, VecDeque<OpenHop>>,
    open_count: usize,
    held: VecDeque<(Building, Arc<str>)>,
    /// Per (node, device): how its hops were woven (into `WeaveStats::net_ports` at the end).
    port_stats: IdMap<(u32, u32), NetPortStats>,
    /// Per ingress (node, device): the egress ports packets were seen to come from.
    wires: IdMap<(u32, u32), Vec<(u32, u32)>>,
}

fn addrs_of(n: &NetEvent) -> Option<Addrs> {
    if let Some(ip) = &n.ipv4 {
        return Some(Addrs::Ip {
            src: ip.src_ip,
            dst: ip.dst_ip,
            proto: ip.protocol,
            sport: ip.src_port,
            dport: ip.dst_port,
            ident: ip.ident,
            seq: ip.tcp_seq,
            ack: ip.tcp_ack,
        });
    }
    n.arp.as_ref().map(|a| Addrs::Arp { src: a.src_ip, dst: a.dst_ip, req: a.is_request })
}

/// A stock ns-3 device (not the SimBricks fork's Simple or Cosim devices): its `r` comes
/// before the forwarding node's `+`, so a packet's position tells look-alike packets apart.
fn is_stock(n: &NetEvent) -> bool {
    !matches!(n.device_type, DeviceType::Simple | DeviceType::Cosim)
}

/// Which direction an event's hop is in (see the module docs).
fn is_ingress(n: &NetEvent) -> bool {
    let s: &str = &n.trace_source;
    match (&n.device_type, n.op) {
        (_, NetOp::Receive) => true,
        (DeviceType::Cosim, NetOp::Enqueue) => s == "RxPacketFromAdapter",
        (DeviceType::Cosim, NetOp::Dequeue) => s == "TxPacketToNetwork",
        (_, NetOp::Enqueue) => s == "RxPacketFromNetwork" || s.ends_with("MacRx"),
        (_, NetOp::Dequeue) => s == "TxPacketToAttachedDevice",
        (_, NetOp::Drop) => s.contains("PhyRx") || s.contains("MacRx"),
    }
}

/// Dotted-quad IPv4 text (what `weft_model::event::fmt_ip` gives) without `format!`.
fn ip_string(ip: &[u8; 4]) -> String {
    let mut s = String::with_capacity(15);
    for (k, &b) in ip.iter().enumerate() {
        if k > 0 {
            s.push('.');
        }
        if b >= 100 {
            s.push((b'0' + b / 100) as char);
        }
        if b >= 10 {
            s.push((b'0' + b / 10 % 10) as char);
        }
        s.push((b'0' + b % 10) as char);
    }
    s
}

fn transport(p: u8) -> String {
    match p {
        1 => "icmp".to_owned(),
        6 => "tcp".to_owned(),
        17 => "udp".to_owned(),
        n => n.to_string(),
    }
}

impl NetWeaver {
    pub fn new(who: Ident, names: &BTreeMap<u32, String>, idle_ns: u64) -> Self {
        NetWeaver {
            who,
            names: names.clone(),
            node_comp: IdMap::default(),
            ports: IdMap::default(),
            links: IdMap::default(),
            journeys: IdMap::default(),
            next_journey: 1,
            by_uid: IdMap::default(),
            by_size: IdMap::default(),
            by_key: IdMap::default(),
            idle_ns,
            longest_hop_ns: 0,
            open: IdMap::default(),
            open_count: 0,
            held: VecDeque::new(),
            port_stats: IdMap::default(),
            wires: IdMap::default(),
        }
    }

    fn node_name(&self, node: u32) -> String {
        self.names.get(&node).cloned().unwrap_or_else(|| format!("node{node}"))
    }

    /// `<node>/dev<D>`.
    pub fn port_name(&self, node: u32, dev: u32) -> String {
        format!("{}/dev{dev}", self.node_name(node))
    }

    /// Declares that (node, device) is linked to eth link `link`; false if it already was.
    pub fn add_link(&mut self, node: u32, dev: u32, link: usize) -> bool {
        self.links.insert((node, dev), link).is_none()
    }

    fn comp(&mut self, node: u32) -> Arc<str> {
        if let Some(c) = self.node_comp.get(&node) {
            return c.clone();
        }
        let c: Arc<str> = Arc::from(format!("{}/{}", self.who.component, self.node_name(node)));
        self.node_comp.insert(node, c.clone());
        c
    }

    fn new_journey(&mut self, n: &NetEvent, now: u64) -> JourneyId {
        let id = self.next_journey;
        self.next_journey += 1;
        self.journeys.insert(
            id,
            Journey {
                uid: n.packet_uid,
                size: n.payload_size,
                addrs: addrs_of(n),
                hops: Vec::new(),
                open: 0,
                last_ns: now,
                at: None,
                flying: false,
                flight_ns: 0,
                flight_from: (0, 0),
            },
        );
        match n.packet_uid {
            Some(u) => self.by_uid.entry(u).or_default().push(id),
            None => {
                self.by_size.entry(n.payload_size).or_default().push(id);
                self.by_key.entry((n.payload_size, addrs_of(n))).or_default().push(id);
            }
        }
        if self.journeys.len() > MAX_JOURNEYS {
            self.sweep();
        }
        id
    }

    /// The window between two hops of a journey without uids: the configured idle time, or
    /// the longest a hop has been open so far if that is longer.
    fn between_hops_ns(&self) -> u64 {
        self.idle_ns.max(self.longest_hop_ns)
    }

    /// Journeys without uid that `n` may belong to, ascending: those of its payload size whose
    /// header is `n`'s or not known (all of its size if `n` has no header).
    fn uidless(&self, n: &NetEvent) -> Vec<JourneyId> {
        let size = n.payload_size;
        let Some(a) = addrs_of(n) else {
            return self.by_size.get(&size).cloned().unwrap_or_default();
        };
        let mut v: Vec<JourneyId> = Vec::new();
        for k in [(size, Some(a)), (size, None)] {
            v.extend(self.by_key.get(&k).into_iter().flatten());
        }
        v.sort_unstable();
        v
    }

    /// The journey an event belongs to: the most recent one of its uid (without uids: of its
    /// payload size, with an open hop or active within [`Self::between_hops_ns`]) whose
    /// header agrees.
    fn find_journey(&self, n: &NetEvent, now: u64) -> Option<JourneyId> {
        let window = self.between_hops_ns();
        let uidless;
        let list = match n.packet_uid {
            Some(u) => self.by_uid.get(&u)?,
            None => {
                uidless = self.uidless(n);
                &uidless
            }
        };
        let a = addrs_of(n);
        list.iter()
            .rev()
            .find(|j| {
                let Some(j) = self.journeys.get(j) else { return false };
                let same = match (a, j.addrs) {
                    (Some(x), Some(y)) => x == y,
                    _ => true,
                };
                same && (n.packet_uid.is_some() || j.open > 0 || now.saturating_sub(j.last_ns) <= window)
            })
            .copied()
    }

    /// Stock ns-3 without uids, a hop opening: the journey whose packet is where this hop
    /// begins. An ingress hop takes the journey in flight towards it that left first (a wire
    /// delivers in order), among those from a port already seen wired to this one if any; an
    /// egress hop the most recent journey that arrived at this node. None: a new packet.
    /// Also says whether an ingress hop's journey was the only candidate.
    fn find_by_position(&self, n: &NetEvent, now: u64) -> Option<(JourneyId, bool)> {
        let window = self.between_hops_ns();
        let list = self.uidless(n);
        let a = addrs_of(n);
        let candidates = list.iter().filter_map(|id| {
            let j = self.journeys.get(id)?;
            let same = match (a, j.addrs) {
                (Some(x), Some(y)) => x == y,
                _ => true,
            };
            same.then_some((*id, j))
        });
        if is_ingress(n) {
            let flying: Vec<(JourneyId, &Journey)> = candidates
                .filter(|(_, j)| {
                    j.flying
                        && j.flight_from.0 != n.node
                        && j.at != Some(n.node)
                        && now.saturating_sub(j.flight_ns) <= window
                })
                .collect();
            let wired = self.wires.get(&(n.node, n.device));
            let on_wire = |j: &Journey| wired.is_some_and(|w| w.contains(&j.flight_from));
            let known = flying.iter().any(|(_, j)| on_wire(j));
            flying
                .iter()
                .filter(|(_, j)| !known || on_wire(j))
                .min_by_key(|(id, j)| (j.flight_ns, *id))
                .map(|(id, _)| (*id, flying.len() == 1))
        } else {
            candidates
                .filter(|(_, j)| j.at == Some(n.node) && now.saturating_sub(j.last_ns) <= window)
                .max_by_key(|(id, j)| (j.last_ns, *id))
                .map(|(id, _)| (id, false))
        }
    }

    /// An ingress hop of a stock ns-3 journey: it arrived at `(node, dev)`; the wire it came
    /// by is learned when it was the only packet like it in flight.
    fn arrived(&mut self, jid: JourneyId, node: u32, dev: u32, only: bool) {
        let Some(j) = self.journeys.get_mut(&jid) else { return };
        j.at = Some(node);
        let from = j.flight_from;
        if only && j.flying && self.wires.len() < MAX_JOURNEYS {
            let w = self.wires.entry((node, dev)).or_default();
            if !w.contains(&from) && w.len() < MAX_WIRES_PER_PORT {
                w.push(from);
            }
        }
    }

    /// Forgets the oldest journeys that have no open hop (bounded memory).
    fn sweep(&mut self) {
        let mut idle: Vec<(u64, JourneyId)> =
            self.journeys.iter().filter(|(_, j)| j.open == 0).map(|(id, j)| (j.last_ns, *id)).collect();
        idle.sort_unstable();
        for (_, id) in idle.into_iter().take(MAX_JOURNEYS / 2) {
            if let Some(j) = self.journeys.remove(&id) {
                if let Some(u) = j.uid
                    && let Some(list) = self.by_uid.get_mut(&u)
                {
                    list.retain(|x| *x != id);
                    if list.is_empty() {
                        self.by_uid.remove(&u);
                    }
                }
                if j.uid.is_none()
                    && let Some(list) = self.by_size.get_mut(&j.size)
                {
                    list.retain(|x| *x != id);
                    if list.is_empty() {
                        self.by_size.remove(&j.size);
                    }
                }
                if j.uid.is_none() {
                    self.unindex(id, (j.size, j.addrs));
                }
            }
        }
    }

    fn unindex(&mut self, id: JourneyId, key: (u32, Option<Addrs>)) {
        if let Some(list) = self.by_key.get_mut(&key) {
            list.retain(|x| *x != id);
            if list.is_empty() {
                self.by_key.remove(&key);
            }
        }
    }

    fn release(&mut self, now_raw: u64, cx: &mut Cx) {
        while self.held.front().is_some_and(|(b, _)| b.start_raw < now_raw) {
            if let Some((b, comp)) = self.held.pop_front() {
                cx.close(b, &self.who, &comp);
            }
        }
    }

    pub fn on(&mut self, ev: &Event, n: &NetEvent, cx: &mut Cx) {
        self.release(ev.raw_time, cx);
        match n.op {
            NetOp::Enqueue => {
                self.open_hop(ev, n, cx, false);
            }
            NetOp::Receive => {
                self.open_hop(ev, n, cx, true);
            }
            NetOp::Dequeue | NetOp::Drop => self.close_hop(ev, n, cx),
        }
    }

    /// [`NetWeaver::port_name`], formatted once per port (bounded by the distinct ports).
    fn port(&mut self, node: u32, dev: u32) -> String {
        if let Some(p) = self.ports.get(&(node, dev)) {
            return p.clone();
        }
        let p = self.port_name(node, dev);
        if self.ports.len() < MAX_JOURNEYS {
            self.ports.insert((node, dev), p.clone());
        }
        p
    }

    fn hop_attrs(&mut self, b: &mut Building, n: &NetEvent, ingress: bool) {
        b.attr(conv::NET_NODE, int(n.node as u64));
        b.attr(conv::NET_DEVICE, int(n.device as u64));
        b.attr(conv::NET_DEVICE_TYPE, n.device_type.name());
        b.attr(conv::NET_PORT, self.port(n.node, n.device));
        b.attr(conv::NET_DIRECTION, if ingress { "ingress" } else { "egress" });
        if let Some(u) = n.packet_uid {
            b.attr(conv::NET_PACKET_UID, int(u));
        }
        if let Some(i) = n.interesting {
            b.attr(conv::NET_INTERESTING, i);
        }
        b.attr(conv::NET_PAYLOAD_SIZE, int(n.payload_size as u64));
        if let Some(ip) = &n.ipv4 {
            b.attr(conv::NETWORK_PROTOCOL, "ipv4");
            b.attr(conv::SOURCE_ADDRESS, ip_string(&ip.src_ip));
            b.attr(conv::DESTINATION_ADDRESS, ip_string(&ip.dst_ip));
            b.attr(conv::NET_IP_LENGTH, int(ip.length as u64));
            if ip.protocol != 0 {
                b.attr(conv::NETWORK_TRANSPORT, transport(ip.protocol));
            }
            if ip.src_port != 0 || ip.dst_port != 0 {
                b.attr(conv::SOURCE_PORT, int(ip.src_port as u64));
                b.attr(conv::DESTINATION_PORT, int(ip.dst_port as u64));
            }
        } else if let Some(a) = &n.arp {
            b.attr(conv::NETWORK_PROTOCOL, "arp");
            b.attr(conv::SOURCE_ADDRESS, ip_string(&a.src_ip));
            b.attr(conv::DESTINATION_ADDRESS, ip_string(&a.dst_ip));
        }
    }

    /// Counters of (node, dev); past `MAX_JOURNEYS` devices, one entry for all others.
    fn port_stats(&mut self, node: u32, dev: u32) -> &mut NetPortStats {
        let key = if self.port_stats.len() < MAX_JOURNEYS || self.port_stats.contains_key(&(node, dev)) {
            (node, dev)
        } else {
            OTHER_PORTS
        };
        self.port_stats.entry(key).or_default()
    }

    fn open_hop(&mut self, ev: &Event, n: &NetEvent, cx: &mut Cx, instant: bool) {
        self.port_stats(n.node, n.device).hops += 1;
        let ingress = is_ingress(n);
        let from_adapter = n.boundary == Boundary::FromAdapter;
        let to_adapter = n.device_type == DeviceType::Cosim && !ingress;
        let stock = n.packet_uid.is_none() && is_stock(n);
        let found = if stock {
            self.find_by_position(n, ev.time_ns)
        } else {
            self.find_journey(n, ev.time_ns).map(|j| (j, false))
        };
        let jid = match (from_adapter, found) {
            (false, Some((j, _))) => j,
            _ => self.new_journey(n, ev.time_ns),
        };
        if stock && ingress {
            self.arrived(jid, n.node, n.device, found.is_some_and(|(_, only)| only));
        }
        // Parent.
        let mut cause = None;
        let (parent, parent_node) = if from_adapter {
            let link = self.links.get(&(n.node, n.device)).copied();
            cause = link.and_then(|l| {
                let len = n.payload_size as u64;
                cx.links.eth[l].tx.take(ev.time_ns, |c| c.key == len, true)
            });
            (cause.map(|c| c.span), None)
        } else {
            let hops = self.journeys.get(&jid).map(|j| j.hops.as_slice()).unwrap_or(&[]);
            let pick = if ingress {
                hops.iter().rev().find(|h| !h.ingress && h.node != n.node && !h.to_adapter)
            } else {
                hops.iter().rev().find(|h| h.ingress && h.node == n.node).or(hops.last())
            };
            (pick.map(|h| h.id), pick.map(|h| h.node))
        };
        let id = cx.asm.open(parent);
        let mut b = Building::with_capacity(id, "NetDevice", ev, hop_attr_count(n));
        b.causes.extend(cause.map(|c| c.span));
        self.hop_attrs(&mut b, n, ingress);
        if from_adapter {
            b.attr(conv::NET_BOUNDARY, "from_adapter");
        }
        if let Some(a) = addrs_of(n)
            && let Some(j) = self.journeys.get_mut(&jid)
            && j.addrs.is_none()
        {
            j.addrs = Some(a);
            if j.uid.is_none() {
                let size = j.size;
                self.unindex(jid, (size, None));
                let list = self.by_key.entry((size, Some(a))).or_default();
                let at = list.partition_point(|x| *x < jid);
                list.insert(at, jid);
            }
        }
        let comp = self.comp(n.node);
        let Some(j) = self.journeys.get_mut(&jid) else { return };
        j.last_ns = ev.time_ns;
        // A point-to-point wire has one receiver; a shared medium's frame reaches several.
        if !ingress || n.device_type == DeviceType::PointToPoint {
            j.flying = false;
        }
        if ingress {
            // Egress hops of this node printed before this ingress at the same instant.
            for h in j.hops.iter_mut() {
                if h.node == n.node
                    && !h.ingress
                    && h.start_raw == ev.raw_time
                    && h.parent_node != Some(n.node)
                {
                    cx.asm.set_parent(h.id, Some(id));
                    h.parent_node = Some(n.node);
                }
            }
        }
        j.hops.push(HopRef { id, node: n.node, ingress, to_adapter, start_raw: ev.raw_time, parent_node });
        if j.hops.len() > MAX_HOPS_REMEMBERED {
            j.hops.remove(0);
        }
        if instant {
            self.held.push_back((b, comp));
            return;
        }
        j.open += 1;
        let key = PortKey { node: n.node, dev: n.device, ingress };
        let hop = OpenHop {
            b,
            node: n.node,
            to_adapter,
            journey: jid,
            uid: n.packet_uid,
            size: n.payload_size,
            addrs: addrs_of(n),
        };
        self.open.entry(key).or_default().push_back(hop);
        self.open_count += 1;
        if self.open_count > cx.max_open {
            self.evict_open(cx);
        }
    }

    fn close_hop(&mut self, ev: &Event, n: &NetEvent, cx: &mut Cx) {
        let drop = n.op == NetOp::Drop;
        let ingress = is_ingress(n);
        // The oldest open hop of this packet on this device (a queue gives packets back in
        // the order they came; with many look-alike packets the first one is the one).
        let a = addrs_of(n);
        let dirs: &[bool] = if drop { &[ingress, !ingress] } else { &[ingress] };
        let found = dirs.iter().find_map(|&d| {
            let key = PortKey { node: n.node, dev: n.device, ingress: d };
            let q = self.open.get_mut(&key)?;
            let i = q.iter().position(|h| h.is(n, a))?;
            let h = q.remove(i);
            if q.is_empty() {
                self.open.remove(&key);
            }
            h
        });
        let Some(mut h) = found else {
            // A stock receiver's PHY dropping a packet on a wire ends its journey there.
            let stock_rx = drop && ingress && n.packet_uid.is_none() && is_stock(n);
            let jid = if stock_rx {
                let found = self.find_by_position(n, ev.time_ns);
                if let Some((j, only)) = found {
                    self.arrived(j, n.node, n.device, only);
                    if let Some(j) = self.journeys.get_mut(&j) {
                        j.flying = false;
                    }
                }
                found.map(|(j, _)| j)
            } else {
                self.find_journey(n, ev.time_ns)
            };
            let ends_there = stock_rx || (drop && n.trace_source.ends_with("TxQueue/Drop"));
            let ps = self.port_stats(n.node, n.device);
            ps.hops += 1;
            if ends_there {
                ps.drops += 1;
            } else if drop {
                cx.anomaly("network drop of a packet not queued on that device (instant span)");
            } else {
                ps.unmatched += 1;
                cx.anomaly("network dequeue without enqueue (instant span, incomplete)");
            }
            let parent = jid.and_then(|j| self.journeys.get(&j)).and_then(|j| j.hops.last()).map(|h| h.id);
            let id = cx.asm.open(parent);
            let mut b = Building::with_capacity(id, "NetDevice", ev, hop_attr_count(n));
            self.hop_attrs(&mut b, n, ingress);
            if drop {
                b.attr(conv::NET_DROP, true);
            } else {
                b.incomplete = true;
            }
            // A packet leaving a device whose enqueue is missing goes on: its next hop still
            // finds its journey.
            if !drop
                && !ingress
                && let Some(j) = jid.and_then(|j| self.journeys.get_mut(&j))
            {
                j.last_ns = ev.time_ns;
                j.flying = true;
                j.flight_ns = ev.time_ns;
                j.flight_from = (n.node, n.device);
                let parent_node = j.hops.last().map(|h| h.node);
                j.hops.push(HopRef {
                    id,
                    node: n.node,
                    ingress,
                    to_adapter: false,
                    start_raw: ev.raw_time,
                    parent_node,
                });
                if j.hops.len() > MAX_HOPS_REMEMBERED {
                    j.hops.remove(0);
                }
            }
            let comp = self.comp(n.node);
            self.held.push_back((b, comp));
            return;
        };
        self.open_count -= 1;
        if let Some(j) = self.journeys.get_mut(&h.journey) {
            j.open = j.open.saturating_sub(1);
            j.last_ns = ev.time_ns;
            if !drop && !h.to_adapter && !is_ingress(n) {
                j.flying = true;
                j.flight_ns = ev.time_ns;
                j.flight_from = (n.node, n.device);
            }
        }
        self.longest_hop_ns = self.longest_hop_ns.max(ev.time_ns.saturating_sub(h.b.start_ns));
        h.b.add(ev, cx.max_events);
        if drop {
            h.b.attr(conv::NET_DROP, true);
        } else if n.boundary == Boundary::ToAdapter || h.to_adapter {
            h.b.attr(conv::NET_BOUNDARY, "to_adapter");
            if let Some(&l) = self.links.get(&(n.node, n.device)) {
                let q = &mut cx.links.eth[l].rx;
                q.push(Ctx { span: h.b.id, time_ns: ev.time_ns, key: n.payload_size as u64, aux: 0 });
            }
        }
        let comp = self.comp(h.node);
        self.held.push_back((h.b, comp));
    }

    /// Closes the oldest half of the open hops as incomplete (bounded memory).
    fn evict_open(&mut self, cx: &mut Cx) {
        let mut all: Vec<(u64, LocalId, PortKey)> = Vec::new();
        for (k, q) in &self.open {
            for h in q {
                all.push((h.b.start_raw, h.b.id, *k));
            }
        }
        all.sort_unstable_by_key(|(raw, id, _)| (*raw, *id));
        let n = all.len() / 2;
        cx.stats.anomalies.add("too many open network hops (oldest closed, incomplete)", n as u64);
        for (_, id, key) in all.into_iter().take(n) {
            let Some(q) = self.open.get_mut(&key) else { continue };
            let Some(i) = q.iter().position(|h| h.b.id == id) else { continue };
            let Some(mut h) = q.remove(i) else { continue };
            if q.is_empty() {
                self.open.remove(&key);
            }
            self.open_count -= 1;
            if let Some(j) = self.journeys.get_mut(&h.journey) {
                j.open = j.open.saturating_sub(1);
            }
            h.b.incomplete = true;
            self.port_stats(key.node, key.dev).evicted += 1;
            let comp = self.comp(h.node);
            cx.close(h.b, &self.who, &comp);
        }
    }

    pub fn finish(&mut self, cx: &mut Cx) {
        let mut rest: Vec<(PortKey, OpenHop)> =
            self.open.drain().flat_map(|(k, q)| q.into_iter().map(move |h| (k, h))).collect();
        rest.sort_by_key(|(_, h)| (h.b.start_raw, h.b.id));
        for (k, mut h) in rest {
            h.b.incomplete = true;
            self.port_stats(k.node, k.dev).open_at_end += 1;
            let comp = self.comp(h.node);
            self.held.push_back((h.b, comp));
        }
        self.open_count = 0;
        self.release(u64::MAX, cx);
        while let Some((b, comp)) = self.held.pop_front() {
            cx.close(b, &self.who, &comp);
        }
        let mut ports: Vec<((u32, u32), NetPortStats)> = self.port_stats.drain().collect();
        ports.sort_unstable_by_key(|(k, _)| *k);
        for ((node, dev), s) in ports {
            let port = if (node, dev) == OTHER_PORTS {
                "(other devices)".to_owned()
            } else {
                self.port_name(node, dev)
            };
            let name = format!("{}/{port}", self.who.component);
            cx.stats.net_ports.insert(name, s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_text_is_fmt_ip() {
        for ip in [[0, 0, 0, 0], [192, 168, 64, 1], [10, 0, 2, 255], [1, 22, 100, 9], [99, 100, 101, 250]] {
            assert_eq!(ip_string(&ip), weft_model::event::fmt_ip(&ip));
        }
    }
}
