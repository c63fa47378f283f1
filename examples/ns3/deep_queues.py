#!/usr/bin/env python3
"""Deep router queues on stock ns-3: UDP echo exchanges behind bulk TCP on 10 Mbit/s links
with 200-packet DropTail queues, traced with ns-3's own AsciiTraceHelper (`+`/`-`/`d`/`r`).

Requires the PyPI wheel `ns3` (3.44; `.ci/requirements.txt` lists it):

    python deep_queues.py OUTPUT.tr

Topology (node ids in brackets; every link a PointToPoint pair):

    client1 [0] --\\                                      /-- server [5]
                  r0 [2] ===== r1 [3] ===== r2 [4] ----/
    client2 [1] --/

Edge links run at --edge-rate (100 Mbit/s), the two core links r0–r1 and r1–r2 at
--core-rate (10 Mbit/s) with --queue (200-packet) DropTail transmit queues. No queue disc:
packets go straight to the device queue, so every wait and every drop is in the trace.

Traffic: both clients (ns-3's UdpEchoClient) send 48-byte requests to the server's
UdpEchoServer on port 123, one every --interval-ms each. Two bulk TCP flows share the core
queues with them: server → client1 (its data queues at r2 towards r1, with the responses) and
client2 → server (its data queues at r0 towards r1, with the requests); each flow's ACKs
share the other's queue. client2 loses --loss of what it receives (`d` PhyRxDrop lines;
ns-3's flow control keeps a full device queue from dropping in the trace). Traffic stops
0.5 s before the end so the queues drain.

Output: the ascii trace (ns-3's default precision: 6 significant digits of seconds) and one
JSON summary line on stdout (node ids, addresses, lines).

Written for weft (not copied from any other project).
"""
import argparse
import json
import sys
import time

from ns import ns  # PyPI `ns3` wheel

NAMES = ["client1", "client2", "r0", "r1", "r2", "server"]
C1, C2, R0, R1, R2, SERVER = range(6)
ECHO_PORT = 123
BULK_PORT = 5000


def link_helper(rate, delay_us, queue):
    h = ns.PointToPointHelper()
    h.SetDeviceAttribute("DataRate", ns.StringValue(rate))
    h.SetChannelAttribute("Delay", ns.StringValue(f"{delay_us}us"))
    if queue:
        h.SetQueue("ns3::DropTailQueue", "MaxSize", ns.StringValue(queue))
    return h


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("output", help="the ascii trace to write")
    ap.add_argument("--seconds", type=float, default=3.0, help="simulated time (default 3)")
    ap.add_argument("--interval-ms", type=float, default=20.0, help="between requests (default 20)")
    ap.add_argument("--edge-rate", default="100Mbps", help="host links (default 100Mbps)")
    ap.add_argument("--core-rate", default="10Mbps", help="router links (default 10Mbps)")
    ap.add_argument("--delay-us", type=int, default=100, help="propagation delay per link")
    ap.add_argument("--queue", default="200p", help="core transmit queues (default 200p)")
    ap.add_argument("--loss", type=float, default=0.003,
                    help="packet loss rate on receipt at client2 (default 0.003)")
    args = ap.parse_args()

    nodes = ns.NodeContainer()
    nodes.Create(len(NAMES))
    edge = link_helper(args.edge_rate, args.delay_us, None)
    core = link_helper(args.core_rate, args.delay_us, args.queue)
    links = [
        edge.Install(nodes.Get(C1), nodes.Get(R0)),
        edge.Install(nodes.Get(C2), nodes.Get(R0)),
        core.Install(nodes.Get(R0), nodes.Get(R1)),
        core.Install(nodes.Get(R1), nodes.Get(R2)),
        edge.Install(nodes.Get(R2), nodes.Get(SERVER)),
    ]
    ns.InternetStackHelper().Install(nodes)
    addr = ns.Ipv4AddressHelper()
    ifaces = []
    for k, devs in enumerate(links):
        addr.SetBase(ns.Ipv4Address(f"10.1.{k}.0"), ns.Ipv4Mask("255.255.255.0"))
        ifaces.append(addr.Assign(devs))
    # Assign installed the default queue disc; without it packets go to the device queue.
    tch = ns.TrafficControlHelper()
    for devs in links:
        tch.Uninstall(devs)
    ns.Ipv4GlobalRoutingHelper.PopulateRoutingTables()
    ip = {C1: ifaces[0].GetAddress(0), C2: ifaces[1].GetAddress(0), SERVER: ifaces[4].GetAddress(1)}

    stop = args.seconds
    server = ns.UdpEchoServerHelper(ECHO_PORT)
    server.Install(nodes.Get(SERVER)).Start(ns.Seconds(0.0))
    for k, c in enumerate((C1, C2)):
        client = ns.UdpEchoClientHelper(ip[SERVER].ConvertTo(), ECHO_PORT)
        client.SetAttribute("MaxPackets", ns.UintegerValue(1_000_000))
        client.SetAttribute("Interval", ns.TimeValue(ns.MicroSeconds(int(args.interval_ms * 1000))))
        client.SetAttribute("PacketSize", ns.UintegerValue(48))
        apps = client.Install(nodes.Get(c))
        apps.Start(ns.Seconds(0.5 + 0.003 * k))
        apps.Stop(ns.Seconds(stop - 0.5))
    for src, dst in ((SERVER, C1), (C2, SERVER)):
        sink = ns.PacketSinkHelper("ns3::TcpSocketFactory",
                                   ns.InetSocketAddress(ns.Ipv4Address.GetAny(), BULK_PORT).ConvertTo())
        sink.Install(nodes.Get(dst)).Start(ns.Seconds(0.0))
        bulk = ns.BulkSendHelper("ns3::TcpSocketFactory",
                                 ns.InetSocketAddress(ip[dst], BULK_PORT).ConvertTo())
        bulk.SetAttribute("MaxBytes", ns.UintegerValue(0))
        apps = bulk.Install(nodes.Get(src))
        apps.Start(ns.Seconds(0.1))
        apps.Stop(ns.Seconds(stop - 0.6))

    # Losses on receipt at client2 — its flow's ACKs (cumulative: TCP hardly notices) and
    # echo responses; ns-3's flow control stops the IP layer before a full device queue would
    # drop, so the trace has no queue drops: `d` PhyRxDrop lines.
    em = ns.CreateObject[ns.RateErrorModel]()
    em.SetAttribute("ErrorRate", ns.DoubleValue(args.loss))
    em.SetAttribute("ErrorUnit", ns.StringValue("ERROR_UNIT_PACKET"))
    links[1].Get(0).SetAttribute("ReceiveErrorModel", ns.PointerValue(em))

    stream = ns.AsciiTraceHelper().CreateFileStream(args.output)
    core.EnableAsciiAll(stream)  # every PointToPoint device of every node

    t0 = time.monotonic()
    ns.Simulator.Stop(ns.Seconds(stop))
    ns.Simulator.Run()
    ns.Simulator.Destroy()
    stream.GetStream().flush()
    print(json.dumps({
        "output": args.output,
        "simulated_s": stop,
        "wall_s": round(time.monotonic() - t0, 3),
        "nodes": {NAMES[i]: i for i in range(len(NAMES))},
        "ips": {NAMES[k]: str(v) for k, v in ip.items()},
    }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
