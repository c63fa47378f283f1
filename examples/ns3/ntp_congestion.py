#!/usr/bin/env python3
"""weft's ns-3 case study: an NTP-like exchange across two switches, with and without bulk
background traffic on the inter-switch link (Columbo's case study, on real ns-3).

Requires the PyPI wheel `ns3` (3.44, cppyy bindings; `.ci/requirements.txt` lists it):

    python ntp_congestion.py none:quiet.tr tcp:congested.tr

Each positional argument is one run, `BACKGROUND:OUTPUT` with BACKGROUND one of `none`,
`tcp` (bulk TCP, as in Columbo's case study) or `udp` (constant-rate UDP above the
bottleneck rate). Runs execute one after another in this process (ns-3's start-up cost is
paid once). A JSON summary line per run goes to stdout.

Topology (node ids in brackets; every link a SimpleNetDevice pair on a SimpleChannel):

    client [0] --- sw0 [1] ===== sw1 [2] --- server [3]
    bg-sink [4] ---/                  \\--- bg-src [5]

Edge links run at --edge-rate, the inter-switch link at --core-rate (the bottleneck). The
switches are small learning L2 switches written here (below) with a fixed forwarding latency
(--switch-latency): a frame received on a port is handed to the egress port's transmit queue
that much later. ns-3's own BridgeNetDevice forwards in zero time, which would leave nothing
to compare when no queue builds up.

Traffic: the client (ns-3's UdpEchoClient) sends --rounds UDP requests of 48 bytes (an NTP
packet's size) to the server's port 123, one every --interval; the server (a small NTP-like
responder written here) answers each with a new 48-byte datagram. Background
traffic flows bg-src -> bg-sink, i.e. through the inter-switch link in the server -> client
direction, so NTP *responses* queue behind it at sw1's port towards sw0 while requests do not.

Output: one line per packet event in the layout of the SimBricks ns-3 fork's trace helper
(what weft-sources' ns-3 parser reads, Columbo's NS3Parser format):

    <+|-|d> <time ps> /$ns3::NodeListPriv/NodeList/<n>/$ns3::Node/DeviceList/<d>/$ns3::SimpleNetDevice/<source>
        Packet-Uid=<uid> Intersting=<true|false> [ns3::ArpHeader(...)] [ns3::Ipv4Header(...)] <packet print>

with sources TxQueue/Enqueue (+), TxQueue/Dequeue (-), TxQueue/Drop (d) on every device, and
on receipt RxPacketFromNetwork (+) / TxPacketToAttachedDevice (-) — on a switch port the
latter when the frame leaves the port for the egress queue (after the forwarding latency), on
a host at once. The fork's manual EthernetHeader print is left out: SimpleNetDevice frames
carry no Ethernet header (the fork prints garbage there). Packets entering the network at the
client's or the server's device are "interesting" (Intersting=true), background traffic and
ARP from the background hosts are not.

Written for weft (not copied from any other project).
"""
import argparse
import json
import sys
import time

from ns import ns  # PyPI `ns3` wheel

SINKS = r"""
#include "ns3/core-module.h"
#include "ns3/network-module.h"
#include "ns3/internet-module.h"
#include <fstream>
#include <map>
#include <set>
#include <vector>

namespace weftns3 {
using namespace ns3;

// Function-local statics only: cling (cppyy) may not run global static initializers.
struct State {
  std::ofstream out;
  std::set<uint64_t> interestingUids;
  std::set<std::pair<uint32_t, uint32_t>> interestingDevs;
  uint64_t lines = 0;
  uint64_t drops = 0;
};
inline State &S() { static State *s = new State(); return *s; }

inline void Open(const std::string &path) {
  State &s = S();
  s.out.open(path);
  s.interestingUids.clear();
  s.interestingDevs.clear();
  s.lines = 0;
  s.drops = 0;
}
inline uint64_t Lines() { return S().lines; }
inline uint64_t Drops() { return S().drops; }
inline bool Close() { S().out.flush(); bool ok = S().out.good(); S().out.close(); return ok; }
inline void AddInterestingDevice(uint32_t node, uint32_t dev) { S().interestingDevs.insert({node, dev}); }

inline void Write(char kind, uint32_t node, uint32_t dev, const char *source, Ptr<const Packet> p) {
  State &s = S();
  bool interesting = s.interestingUids.count(p->GetUid()) > 0;
  if (!interesting && kind == '+' && std::string(source) == "TxQueue/Enqueue" &&
      s.interestingDevs.count({node, dev}) > 0) {
    interesting = true;
    s.interestingUids.insert(p->GetUid());
  }
  std::ostream &o = s.out;
  o << kind << ' ' << Simulator::Now().GetPicoSeconds() << " /$ns3::NodeListPriv/NodeList/" << node
    << "/$ns3::Node/DeviceList/" << dev << "/$ns3::SimpleNetDevice/" << source
    << " Packet-Uid=" << p->GetUid() << " Intersting=" << (interesting ? "true" : "false");
  ArpHeader arp;
  if (p->PeekHeader(arp)) { o << " ns3::ArpHeader("; arp.Print(o); o << ")"; }
  else {
    Ipv4Header ip;
    if (p->PeekHeader(ip)) { o << " ns3::Ipv4Header("; ip.Print(o); o << ")"; }
  }
  o << ' ' << *p << '\n';
  ++s.lines;
  if (kind == 'd') ++s.drops;
}

// Transmit-queue trace sinks of one device.
class TxTap : public SimpleRefCount<TxTap> {
 public:
  TxTap(uint32_t node, uint32_t dev) : node_(node), dev_(dev) {}
  void Enq(Ptr<const Packet> p) { Write('+', node_, dev_, "TxQueue/Enqueue", p); }
  void Deq(Ptr<const Packet> p) { Write('-', node_, dev_, "TxQueue/Dequeue", p); }
  void Drop(Ptr<const Packet> p) { Write('d', node_, dev_, "TxQueue/Drop", p); }
 private:
  uint32_t node_, dev_;
};

// Receive tap of a host device: the frame reaches the host at once.
class HostRxTap : public SimpleRefCount<HostRxTap> {
 public:
  HostRxTap(uint32_t node, uint32_t dev) : node_(node), dev_(dev) {}
  void Rx(Ptr<NetDevice>, Ptr<const Packet> p, uint16_t, const Address &, const Address &,
          NetDevice::PacketType type) {
    if (type == NetDevice::PACKET_OTHERHOST) return;
    Write('+', node_, dev_, "RxPacketFromNetwork", p);
    Write('-', node_, dev_, "TxPacketToAttachedDevice", p);
  }
 private:
  uint32_t node_, dev_;
};

// A learning L2 switch with a fixed forwarding latency.
class Switch : public SimpleRefCount<Switch> {
 public:
  Switch(Ptr<Node> node, Time latency) : node_(node), latency_(latency) {}
  void AddPort(Ptr<NetDevice> dev) {
    ports_.push_back(dev);
    node_->RegisterProtocolHandler(MakeCallback(&Switch::Rx, this), 0, dev, true);
  }
  void Rx(Ptr<NetDevice> in, Ptr<const Packet> p, uint16_t proto, const Address &from,
          const Address &to, NetDevice::PacketType) {
    Write('+', node_->GetId(), in->GetIfIndex(), "RxPacketFromNetwork", p);
    Mac48Address src = Mac48Address::ConvertFrom(from);
    Mac48Address dst = Mac48Address::ConvertFrom(to);
    table_[src] = in;
    Simulator::Schedule(latency_, &Switch::Forward, this, in, p->Copy(), proto, src, dst);
  }
  void Forward(Ptr<NetDevice> in, Ptr<Packet> p, uint16_t proto, Mac48Address src, Mac48Address dst) {
    Write('-', node_->GetId(), in->GetIfIndex(), "TxPacketToAttachedDevice", p);
    auto it = table_.find(dst);
    if (!dst.IsBroadcast() && !dst.IsGroup() && it != table_.end()) {
      if (it->second != in) it->second->SendFrom(p, src, dst, proto);
      return;
    }
    for (auto &port : ports_) {
      if (port != in) port->SendFrom(p->Copy(), src, dst, proto);
    }
  }
 private:
  Ptr<Node> node_;
  Time latency_;
  std::vector<Ptr<NetDevice>> ports_;
  std::map<Mac48Address, Ptr<NetDevice>> table_;
};

// NTP-like server: answers every datagram with a new 48-byte datagram (a new ns-3 packet,
// so the response has its own packet uid, as a real server's reply would).
class NtpServer : public SimpleRefCount<NtpServer> {
 public:
  explicit NtpServer(Ptr<Socket> socket) : socket_(socket) {}
  void HandleRead(Ptr<Socket> socket) {
    Address from;
    while (Ptr<Packet> p = socket->RecvFrom(from)) {
      ++answered_;
      socket->SendTo(Create<Packet>(48), 0, from);
    }
  }
  uint64_t answered_ = 0;
 private:
  Ptr<Socket> socket_;
};

struct Keep {
  std::vector<Ptr<TxTap>> tx;
  std::vector<Ptr<HostRxTap>> rx;
  std::vector<Ptr<Switch>> switches;
  std::vector<Ptr<NtpServer>> servers;
};
inline Keep &K() { static Keep *k = new Keep(); return *k; }
inline void Release() { K().tx.clear(); K().rx.clear(); K().switches.clear(); K().servers.clear(); }

inline void InstallNtpServer(Ptr<Node> node, uint16_t port) {
  Ptr<Socket> sock = Socket::CreateSocket(node, UdpSocketFactory::GetTypeId());
  sock->Bind(InetSocketAddress(Ipv4Address::GetAny(), port));
  Ptr<NtpServer> srv = Create<NtpServer>(sock);
  sock->SetRecvCallback(MakeCallback(&NtpServer::HandleRead, srv));
  K().servers.push_back(srv);
}
inline uint64_t Answered() {
  uint64_t n = 0;
  for (auto &s : K().servers) n += s->answered_;
  return n;
}

inline void TapTx(Ptr<Node> node, uint32_t dev) {
  Ptr<SimpleNetDevice> d = DynamicCast<SimpleNetDevice>(node->GetDevice(dev));
  if (!d) return;  // e.g. the loopback device of a host with an IP stack
  Ptr<TxTap> t = Create<TxTap>(node->GetId(), dev);
  K().tx.push_back(t);
  Ptr<Queue<Packet>> q = d->GetQueue();
  q->TraceConnectWithoutContext("Enqueue", MakeCallback(&TxTap::Enq, t));
  q->TraceConnectWithoutContext("Dequeue", MakeCallback(&TxTap::Deq, t));
  q->TraceConnectWithoutContext("Drop", MakeCallback(&TxTap::Drop, t));
}

inline void TapHostRx(Ptr<Node> node, uint32_t dev) {
  Ptr<HostRxTap> t = Create<HostRxTap>(node->GetId(), dev);
  K().rx.push_back(t);
  node->RegisterProtocolHandler(MakeCallback(&HostRxTap::Rx, t), 0, node->GetDevice(dev), true);
}

inline void MakeSwitch(Ptr<Node> node, double latency_ns) {
  Ptr<Switch> s = Create<Switch>(node, NanoSeconds(latency_ns));
  K().switches.push_back(s);
  for (uint32_t i = 0; i < node->GetNDevices(); ++i) {
    if (DynamicCast<SimpleNetDevice>(node->GetDevice(i))) s->AddPort(node->GetDevice(i));
  }
}
}  // namespace weftns3
"""

NAMES = ["client", "sw0", "sw1", "server", "bg-sink", "bg-src"]
CLIENT, SW0, SW1, SERVER, BG_SINK, BG_SRC = range(6)
IPS = {CLIENT: "10.0.0.1", SERVER: "10.0.0.2", BG_SINK: "10.0.0.3", BG_SRC: "10.0.0.4"}
NTP_PORT = 123
BG_PORT = 5000


def pair(nodes, a, b):
    nc = ns.NodeContainer()
    nc.Add(nodes.Get(a))
    nc.Add(nodes.Get(b))
    return nc


def link_helper(rate, delay_ns, queue):
    h = ns.SimpleNetDeviceHelper()
    h.SetDeviceAttribute("DataRate", ns.DataRateValue(ns.DataRate(rate)))
    h.SetChannelAttribute("Delay", ns.TimeValue(ns.NanoSeconds(delay_ns)))
    # Not point-to-point mode: in that mode IPv4 skips ARP and sends every frame to the
    # broadcast address, which switches flood.
    h.SetNetDevicePointToPointMode(False)
    h.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", ns.StringValue(queue))
    return h


def run(w, args, background, out):
    nodes = ns.NodeContainer()
    nodes.Create(len(NAMES))
    edge = link_helper(args.edge_rate, args.link_delay_ns, args.queue)
    core = link_helper(args.core_rate, args.link_delay_ns, args.queue)
    # Device indices follow from this order: sw0 ports client=0, sw1=1, bg-sink=2;
    # sw1 ports sw0=0, server=1, bg-src=2; every host has device 0.
    host_devs = {}
    host_devs[CLIENT] = edge.Install(pair(nodes, CLIENT, SW0)).Get(0)
    core.Install(pair(nodes, SW0, SW1))
    host_devs[SERVER] = edge.Install(pair(nodes, SW1, SERVER)).Get(1)
    host_devs[BG_SINK] = edge.Install(pair(nodes, SW0, BG_SINK)).Get(1)
    host_devs[BG_SRC] = edge.Install(pair(nodes, SW1, BG_SRC)).Get(1)

    hosts = ns.NodeContainer()
    devs = ns.NetDeviceContainer()
    for h in (CLIENT, SERVER, BG_SINK, BG_SRC):
        hosts.Add(nodes.Get(h))
        devs.Add(host_devs[h])
    ns.InternetStackHelper().Install(hosts)
    ns.Ipv4AddressGenerator.Reset()
    addr = ns.Ipv4AddressHelper()
    addr.SetBase(ns.Ipv4Address("10.0.0.0"), ns.Ipv4Mask("255.255.255.0"))
    ifs = addr.Assign(devs)
    for i, h in enumerate((CLIENT, SERVER, BG_SINK, BG_SRC)):
        got = str(ifs.GetAddress(i))
        if got != IPS[h]:
            raise SystemExit(f"{NAMES[h]} got address {got}, expected {IPS[h]}")

    w.Open(out)
    w.AddInterestingDevice(CLIENT, 0)
    w.AddInterestingDevice(SERVER, 0)
    for n in range(len(NAMES)):
        node = nodes.Get(n)
        for d in range(node.GetNDevices()):
            w.TapTx(node, d)
    for h in (CLIENT, SERVER, BG_SINK, BG_SRC):
        w.TapHostRx(nodes.Get(h), 0)
    w.MakeSwitch(nodes.Get(SW0), float(args.switch_latency_ns))
    w.MakeSwitch(nodes.Get(SW1), float(args.switch_latency_ns))

    ntp_start = args.ntp_start_ms / 1000.0
    last_request = ntp_start + (args.rounds - 1) * args.interval_ms / 1000.0
    # Background traffic runs from 1 ms until 1 ms after the last request; the simulation
    # goes on until every queue has drained.
    bg_stop = last_request + 0.001
    stop = last_request + args.drain_ms / 1000.0
    w.InstallNtpServer(nodes.Get(SERVER), NTP_PORT)
    client = ns.UdpEchoClientHelper(ns.Ipv4Address(IPS[SERVER]).ConvertTo(), NTP_PORT)
    client.SetAttribute("MaxPackets", ns.UintegerValue(args.rounds))
    client.SetAttribute("Interval", ns.TimeValue(ns.MicroSeconds(int(args.interval_ms * 1000))))
    client.SetAttribute("PacketSize", ns.UintegerValue(48))
    capps = client.Install(nodes.Get(CLIENT))
    capps.Start(ns.Seconds(ntp_start))
    capps.Stop(ns.Seconds(stop))

    sink_addr = ns.InetSocketAddress(ns.Ipv4Address(IPS[BG_SINK]), BG_PORT).ConvertTo()
    if background == "tcp":
        sink = ns.PacketSinkHelper("ns3::TcpSocketFactory",
                                   ns.InetSocketAddress(ns.Ipv4Address.GetAny(), BG_PORT).ConvertTo())
        sink.Install(nodes.Get(BG_SINK)).Start(ns.Seconds(0.0))
        bulk = ns.BulkSendHelper("ns3::TcpSocketFactory", sink_addr)
        bulk.SetAttribute("MaxBytes", ns.UintegerValue(0))
        bulk.SetAttribute("SendSize", ns.UintegerValue(1448))
        apps = bulk.Install(nodes.Get(BG_SRC))
        apps.Start(ns.Seconds(0.001))
        apps.Stop(ns.Seconds(bg_stop))
    elif background == "udp":
        sink = ns.PacketSinkHelper("ns3::UdpSocketFactory",
                                   ns.InetSocketAddress(ns.Ipv4Address.GetAny(), BG_PORT).ConvertTo())
        sink.Install(nodes.Get(BG_SINK)).Start(ns.Seconds(0.0))
        onoff = ns.OnOffHelper("ns3::UdpSocketFactory", sink_addr)
        onoff.SetConstantRate(ns.DataRate(args.udp_rate), 1400)
        apps = onoff.Install(nodes.Get(BG_SRC))
        apps.Start(ns.Seconds(0.001))
        apps.Stop(ns.Seconds(bg_stop))
    elif background != "none":
        raise SystemExit(f"unknown background {background!r} (none, tcp or udp)")

    t0 = time.monotonic()
    ns.Simulator.Stop(ns.Seconds(stop))
    ns.Simulator.Run()
    ns.Simulator.Destroy()
    ok = w.Close()
    answered = int(w.Answered())
    w.Release()
    summary = {
        "output": out,
        "background": background,
        "requests": args.rounds,
        "answered": answered,
        "lines": int(w.Lines()),
        "drops": int(w.Drops()),
        "simulated_s": round(stop, 6),
        "wall_s": round(time.monotonic() - t0, 3),
        "nodes": {NAMES[i]: i for i in range(len(NAMES))},
        "ips": {NAMES[k]: v for k, v in IPS.items()},
    }
    if not ok:
        raise SystemExit(f"writing {out} failed")
    return summary


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", metavar="BACKGROUND:OUTPUT",
                    help="one run each: none|tcp|udp, a colon, the trace file to write")
    ap.add_argument("--rounds", type=int, default=100, help="NTP requests (default 100)")
    ap.add_argument("--interval-ms", type=float, default=0.5, help="between requests (default 0.5)")
    ap.add_argument("--ntp-start-ms", type=float, default=10.0,
                    help="first request (background starts at 1 ms; default 10)")
    ap.add_argument("--drain-ms", type=float, default=50.0,
                    help="simulated time after the last request (default 50)")
    ap.add_argument("--edge-rate", default="1Gbps", help="host links (default 1Gbps)")
    ap.add_argument("--core-rate", default="100Mbps", help="inter-switch link (default 100Mbps)")
    ap.add_argument("--link-delay-ns", type=int, default=1000, help="propagation delay per link")
    ap.add_argument("--switch-latency-ns", type=int, default=1000, help="switch forwarding latency")
    ap.add_argument("--queue", default="100p", help="transmit queue size per device (default 100p)")
    ap.add_argument("--udp-rate", default="150Mbps", help="udp background rate (default 150Mbps)")
    args = ap.parse_args()
    runs = []
    for r in args.runs:
        bg, sep, out = r.partition(":")
        if not sep or not out or bg not in ("none", "tcp", "udp"):
            ap.error(f"run {r!r}: expected none|tcp|udp:OUTPUT")
        runs.append((bg, out))

    import cppyy
    cppyy.cppdef(SINKS)
    w = cppyy.gbl.weftns3
    ns.Packet.EnablePrinting()  # '<packet print>' shows the headers and Payload (size=N)
    # ARP answers at once (ns-3 waits up to 10 ms by default, and meanwhile keeps only 3
    # packets per destination: early requests would be lost before they reach the network).
    ns.Config.SetDefault("ns3::ArpL3Protocol::RequestJitter",
                         ns.StringValue("ns3::ConstantRandomVariable[Constant=0.0]"))
    for bg, out in runs:
        print(json.dumps(run(w, args, bg, out)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
