//! Stock ns-3 logs (no packet uids) with deep queues: packets that look alike and wait far
//! longer than `max_cause_age_ns` in a FIFO queue must each stay one journey, matched in
//! queue order, with their true waiting times.

use std::fmt::Write as _;

use weft_model::Span;

use crate::golden::weave_in;

const UDP: &str = "ns3::Ipv4Header (tos 0x0 DSCP Default ECN Not-ECT ttl 64 id 0 protocol 17 offset (bytes) 0 flags [none] length: 76 10.1.0.1 > 10.1.1.2) ns3::UdpHeader (length: 56 49153 > 123) Payload (size=48)";

fn dev(node: u32, d: u32) -> String {
    format!("/NodeList/{node}/DeviceList/{d}/$ns3::PointToPointNetDevice")
}

/// Seconds with 9 decimals (ns), as `std::setprecision` would print them.
fn secs(ns: u64) -> String {
    format!("{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000)
}

/// `n` identical UDP packets (same addresses, ports, IP id and size): host 0 sends one every
/// `gap_ns`, router 1 forwards them into a queue it drains one per `service_ns` (slower), host
/// 2 receives them. Returns the log and the expected wait of each packet in router 1's queue.
fn line_of_identical_packets(n: u64, gap_ns: u64, service_ns: u64) -> (String, Vec<u64>) {
    let mut ev: Vec<(u64, u32, String)> = Vec::new();
    let mut free_at = 0;
    let mut waits = Vec::new();
    let mut seq = 0;
    let mut push = |t: u64, line: String| {
        ev.push((t, seq, line));
        seq += 1;
    };
    for k in 0..n {
        let t = 1_000_000_000 + k * gap_ns;
        push(
            t,
            format!(
                "+ {} {}/TxQueue/Enqueue ns3::PppHeader (Point-to-Point Protocol: IP (0x0021)) {UDP}",
                secs(t),
                dev(0, 0)
            ),
        );
        push(
            t,
            format!(
                "- {} {}/TxQueue/Dequeue ns3::PppHeader (Point-to-Point Protocol: IP (0x0021)) {UDP}",
                secs(t),
                dev(0, 0)
            ),
        );
        let rx = t + 10_000;
        push(
            rx,
            format!(
                "r {} {}/MacRx ns3::PppHeader (Point-to-Point Protocol: IP (0x0021)) {UDP}",
                secs(rx),
                dev(1, 0)
            ),
        );
        push(
            rx,
            format!(
                "+ {} {}/TxQueue/Enqueue ns3::PppHeader (Point-to-Point Protocol: IP (0x0021)) {UDP}",
                secs(rx),
                dev(1, 1)
            ),
        );
        let out = free_at.max(rx);
        free_at = out + service_ns;
        waits.push(out - rx);
        push(
            out,
            format!(
                "- {} {}/TxQueue/Dequeue ns3::PppHeader (Point-to-Point Protocol: IP (0x0021)) {UDP}",
                secs(out),
                dev(1, 1)
            ),
        );
        let arrive = out + service_ns + 5_000;
        push(
            arrive,
            format!(
                "r {} {}/MacRx ns3::PppHeader (Point-to-Point Protocol: IP (0x0021)) {UDP}",
                secs(arrive),
                dev(2, 0)
            ),
        );
    }
    ev.sort_by_key(|(t, s, _)| (*t, *s));
    let mut log = String::new();
    for (_, _, l) in ev {
        let _ = writeln!(log, "{l}");
    }
    (log, waits)
}

fn int(s: &Span, key: &str) -> i64 {
    s.attributes.get(key).and_then(|v| v.as_i64()).unwrap_or(-1)
}

#[test]
fn identical_packets_waiting_long_in_a_fifo_stay_one_journey_each() {
    // 300 look-alike packets, one per ms into a queue served every 2 ms: waits grow to 300 ms,
    // thirty times the default max_cause_age_ns (10 ms).
    let (log, waits) = line_of_identical_packets(300, 1_000_000, 2_000_000);
    assert!(waits.iter().max().copied().unwrap_or(0) > 250_000_000, "the test needs long waits");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("line.tr"), log).unwrap();
    let toml = r#"
[[source]]
name = "ns3"
kind = "ns3-stock"
path = "line.tr"
nodes = { 0 = "h0", 1 = "r1", 2 = "h2" }
"#;
    let (_, rep, spans) = weave_in(toml, dir.path());
    assert_eq!(rep.weave.incomplete, 0, "anomalies: {:?}", rep.weave.anomalies);
    assert!(rep.weave.anomalies.0.is_empty(), "{:?}", rep.weave.anomalies);
    assert!(rep.weave.net_warnings().is_empty(), "{:?}", rep.weave.net_warnings());
    let r1 = &rep.weave.net_ports["ns3/r1/dev1"];
    assert_eq!((r1.hops, r1.broken()), (300, 0));

    // One trace per packet, each with its four hops (h0 egress, r1 in, r1 egress, h2 in) ...
    let mut traces: std::collections::BTreeMap<_, Vec<&Span>> = Default::default();
    for s in &spans {
        traces.entry(s.trace_id).or_default().push(s);
    }
    assert_eq!(traces.len(), 300);
    assert!(traces.values().all(|t| t.len() == 4), "every journey whole");
    // ... and router 1's queue gave them back in order: the k-th packet sent waited waits[k].
    let mut got: Vec<(u64, u64)> = spans
        .iter()
        .filter(|s| int(s, "weft.net.node") == 1 && int(s, "weft.net.device") == 1)
        .map(|s| (s.start_ns, s.end_ns - s.start_ns))
        .collect();
    got.sort_unstable();
    let got: Vec<u64> = got.into_iter().map(|(_, d)| d).collect();
    assert_eq!(got, waits);
    // The hop at host 2 belongs to the packet that left router 1 just before it.
    for t in traces.values() {
        let out = t.iter().find(|s| int(s, "weft.net.node") == 1 && int(s, "weft.net.device") == 1).unwrap();
        let rx = t.iter().find(|s| int(s, "weft.net.node") == 2).unwrap();
        assert_eq!(rx.start_ns - out.end_ns, 2_005_000);
    }
}

#[test]
fn a_dequeue_without_its_enqueue_is_counted_and_reported() {
    // The first 50 enqueues at router 1 are cut off the log: their dequeues match nothing.
    let (log, _) = line_of_identical_packets(200, 1_000_000, 2_000_000);
    let mut cut = 0;
    let log: String = log
        .lines()
        .filter(|l| {
            let drop = l.starts_with("+ ") && l.contains("/NodeList/1/DeviceList/1/") && cut < 50;
            cut += drop as u32;
            !drop
        })
        .map(|l| format!("{l}\n"))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("line.tr"), log).unwrap();
    let toml =
        "[[source]]\nname = \"ns3\"\nkind = \"ns3-stock\"\npath = \"line.tr\"\nnodes = { 1 = \"r1\" }\n";
    let (_, rep, _) = weave_in(toml, dir.path());
    let r1 = &rep.weave.net_ports["ns3/r1/dev1"];
    // Dequeues before the first remaining enqueue match nothing; later ones take the
    // look-alike packets in queue order: 200 dequeues for 150 enqueues leave 50 unmatched.
    assert_eq!(r1.unmatched, 50, "{r1:?}");
    let w = rep.weave.net_warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].starts_with("ns3/r1/dev1: 50 of 200 hops (25.0%) are incomplete"), "{}", w[0]);
    assert!(w[0].contains("dequeued without an enqueue"), "{}", w[0]);
}
