//! The network weaver (ns-3): one `NetDevice` span per device hop of a packet (spec §6
//! "Network", with a per-packet path instead of Columbo's "last completed span").
//!
//! **Hops.** An enqueue-side event opens a hop, the matching dequeue or drop on the same
//! device, in the same direction, of the same packet closes it (first in, first out):
//!
//! | device | ingress hop (packet arrives at the node) | egress hop (packet leaves the node) |
//! |---|---|---|
//! | SimpleNetDevice (fork) | `RxPacketFromNetwork` → `TxPacketToAttachedDevice` / `PhyRxDrop` | `TxQueue/Enqueue` → `TxQueue/Dequeue` / `TxQueue/Drop` |
//! | CosimNetDevice (fork) | `RxPacketFromAdapter` → `TxPacketToNetwork` (the packet enters from a NIC) | `RxPacketFromNetwork` → `TxPacketToAdapter` (it leaves towards a NIC) / `DropPacket` |
//! | stock ns-3 | `r` (`MacRx`): an instant | `+` `TxQueue/Enqueue` → `-` `TxQueue/Dequeue` / `d` |
//!
//! **Packets.** A *journey* is one packet's way through the network. With ns-3 packet uids,
//! a hop joins the most recent journey of its uid whose IPv4 header (addresses, protocol,
//! ports, IP id) or ARP addresses agree (lines without them join the uid's most recent
//! journey); a uid seen with a new header starts a new journey — an echo server sending the
//! received packet object back, or TCP segments cut from one buffered packet (they keep its
//! uid). Without uids (stock ns-3, the fork's 2023 layout) the same holds among the recent
//! journeys (active within the maximum cause age) of the same payload size. A packet entering
//! from a NIC (`RxPacketFromAdapter`) always starts a new journey.
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

use super::links::Ctx;
use super::{Building, Cx, Ident, int};
use crate::assemble::LocalId;
use weft_model::id::IdMap;

type JourneyId = u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Addrs {
    Ip { src: [u8; 4], dst: [u8; 4], proto: u8, sport: u16, dport: u16, ident: u16 },
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
}

struct OpenHop {
    b: Building,
    node: u32,
    to_adapter: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct DevKey {
    node: u32,
    dev: u32,
    ingress: bool,
    journey: JourneyId,
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
    idle_ns: u64,
    open: IdMap<DevKey, VecDeque<OpenHop>>,
    open_count: usize,
    held: VecDeque<(Building, Arc<str>)>,
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
        });
    }
    n.arp.as_ref().map(|a| Addrs::Arp { src: a.src_ip, dst: a.dst_ip, req: a.is_request })
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
            idle_ns,
            open: IdMap::default(),
            open_count: 0,
            held: VecDeque::new(),
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
            },
        );
        match n.packet_uid {
            Some(u) => self.by_uid.entry(u).or_default().push(id),
            None => self.by_size.entry(n.payload_size).or_default().push(id),
        }
        if self.journeys.len() > MAX_JOURNEYS {
            self.sweep();
        }
        id
    }

    /// The journey an event belongs to: the most recent one of its uid (without uids: of its
    /// payload size, active within the idle time) whose header agrees.
    fn find_journey(&self, n: &NetEvent, now: u64) -> Option<JourneyId> {
        let list = match n.packet_uid {
            Some(u) => self.by_uid.get(&u)?,
            None => self.by_size.get(&n.payload_size)?,
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
                same && (n.packet_uid.is_some() || now.saturating_sub(j.last_ns) <= self.idle_ns)
            })
            .copied()
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

    fn open_hop(&mut self, ev: &Event, n: &NetEvent, cx: &mut Cx, instant: bool) {
        let ingress = is_ingress(n);
        let from_adapter = n.boundary == Boundary::FromAdapter;
        let to_adapter = n.device_type == DeviceType::Cosim && !ingress;
        let jid = match (from_adapter, self.find_journey(n, ev.time_ns)) {
            (false, Some(j)) => j,
            _ => self.new_journey(n, ev.time_ns),
        };
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
        let comp = self.comp(n.node);
        let Some(j) = self.journeys.get_mut(&jid) else { return };
        j.last_ns = ev.time_ns;
        if j.addrs.is_none() {
            j.addrs = addrs_of(n);
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
        let key = DevKey { node: n.node, dev: n.device, ingress, journey: jid };
        self.open.entry(key).or_default().push_back(OpenHop { b, node: n.node, to_adapter });
        self.open_count += 1;
        if self.open_count > cx.max_open {
            self.evict_open(cx);
        }
    }

    fn close_hop(&mut self, ev: &Event, n: &NetEvent, cx: &mut Cx) {
        let drop = n.op == NetOp::Drop;
        let ingress = is_ingress(n);
        let jid = self.find_journey(n, ev.time_ns);
        let found = jid.and_then(|jid| {
            let dirs: &[bool] = if drop { &[ingress, !ingress] } else { &[ingress] };
            dirs.iter().find_map(|&d| {
                let key = DevKey { node: n.node, dev: n.device, ingress: d, journey: jid };
                let q = self.open.get_mut(&key)?;
                let h = q.pop_front();
                if q.is_empty() {
                    self.open.remove(&key);
                }
                h
            })
        });
        let Some(mut h) = found else {
            cx.anomaly(if drop {
                "network drop of a packet not queued on that device (instant span)"
            } else {
                "network dequeue without enqueue (instant span, incomplete)"
            });
            let parent = jid.and_then(|j| self.journeys.get(&j)).and_then(|j| j.hops.last()).map(|h| h.id);
            let id = cx.asm.open(parent);
            let mut b = Building::with_capacity(id, "NetDevice", ev, hop_attr_count(n));
            self.hop_attrs(&mut b, n, ingress);
            if drop {
                b.attr(conv::NET_DROP, true);
            } else {
                b.incomplete = true;
            }
            let comp = self.comp(n.node);
            self.held.push_back((b, comp));
            return;
        };
        self.open_count -= 1;
        if let Some(j) = jid.and_then(|j| self.journeys.get_mut(&j)) {
            j.open = j.open.saturating_sub(1);
            j.last_ns = ev.time_ns;
        }
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
        let mut all: Vec<(u64, LocalId, DevKey)> = Vec::new();
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
            if let Some(j) = self.journeys.get_mut(&key.journey) {
                j.open = j.open.saturating_sub(1);
            }
            h.b.incomplete = true;
            let comp = self.comp(h.node);
            cx.close(h.b, &self.who, &comp);
        }
    }

    pub fn finish(&mut self, cx: &mut Cx) {
        let mut rest: Vec<OpenHop> = self.open.drain().flat_map(|(_, q)| q).collect();
        rest.sort_by_key(|h| (h.b.start_raw, h.b.id));
        for mut h in rest {
            h.b.incomplete = true;
            let comp = self.comp(h.node);
            self.held.push_back((h.b, comp));
        }
        self.open_count = 0;
        self.release(u64::MAX, cx);
        while let Some((b, comp)) = self.held.pop_front() {
            cx.close(b, &self.who, &comp);
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
