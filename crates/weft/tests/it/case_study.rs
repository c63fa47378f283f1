//! The ns-3 case study (Columbo's): an NTP-like exchange client – sw0 – sw1 – server, once
//! alone and once with bulk TCP traffic through the inter-switch link in the server → client
//! direction. Real ns-3 (`examples/ns3/ntp_congestion.py`, PyPI `ns3`) writes the logs in
//! this test run; they are woven into spans and `weft breakdown` must show that responses
//! spend far longer in the congested switch than requests — and that without the background
//! traffic they do not.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use weft_model::codec::stream::Format;
use weft_model::event::{EventKind, NetEvent, NetOp};
use weft_model::{Clock, Resource, SourceId, Span, SpanId, TraceId, conv};
use weft_sources::drive::Driver;
use weft_sources::reader::LineReader;
use weft_sources::sim::ns3::{Ns3Parser, Ns3Time};

use crate::common::{csv, run_ok, write_spans};

/// Simulated time 0 maps to this instant (2024-01-01T00:00:00Z).
const EPOCH_NS: u64 = 1_704_067_200_000_000_000;

/// The scenario's node names by ns-3 node id (printed by the script too; checked below).
const NODES: [&str; 6] = ["client", "sw0", "sw1", "server", "bg-sink", "bg-src"];

/// Directions by the hops' IPv4 addresses and UDP ports (the port keeps ARP out).
const RULES: [&str; 4] = [
    "-d",
    "request: source.address=10.0.0.1, destination.address=10.0.0.2, destination.port=123",
    "-d",
    "response: source.address=10.0.0.2, destination.address=10.0.0.1, source.port=123",
];

// --- TEMPORARY network weaving glue -------------------------------------------------------
// Stands in for weft-weave's network weaver until that lands on main: one span per device hop
// of a packet (enqueue/receive → dequeue/hand-over/drop on one device), a packet's hops
// chained parent → child, one trace per packet uid, resource `service.name` = "ns3",
// `weft.component` = "ns3/<node name>", hop attributes named as weft-weave's span conventions
// name them. The breakdown itself does not depend on how the spans were made.

fn ip(a: [u8; 4]) -> String {
    format!("{}.{}.{}.{}", a[0], a[1], a[2], a[3])
}

struct Hop {
    span: Span,
    closed: Option<u64>,
    opened_seq: u64,
}

fn weave_ns3_temporary(log: &Path) -> (Vec<Span>, u64) {
    let file = std::fs::File::open(log).expect("open ns-3 log");
    let parser = Ns3Parser::new(SourceId(1), Clock::simulated_picos(EPOCH_NS), Ns3Time::Auto);
    let mut driver = Driver::new(LineReader::new(file), parser, 8);
    let mut resource = Resource::service("ns3");
    resource.attributes.push(conv::COMPONENT_KIND, "network");
    resource.attributes.push(conv::SOURCE_TOOL, "ns-3");
    let resource = Arc::new(resource);
    let mut hops: Vec<Hop> = Vec::new();
    let mut open: HashMap<(u32, u32, u64), VecDeque<usize>> = HashMap::new();
    let mut by_uid: HashMap<u64, Vec<usize>> = HashMap::new();
    let mut events = Vec::new();
    let mut seq = 0u64;
    loop {
        events.clear();
        let more = driver.step(&mut events).expect("read ns-3 log");
        for ev in &events {
            let EventKind::Net(n) = &ev.kind else { continue };
            let NetEvent { op, node, device, packet_uid: Some(uid), .. } = n else { continue };
            let key = (*node, *device, *uid);
            match op {
                NetOp::Enqueue => {
                    seq += 1;
                    let mut s = Span {
                        trace_id: TraceId::from_u128(*uid as u128 + 1),
                        span_id: SpanId::from_u64(seq),
                        name: "NetDevice".into(),
                        start_ns: ev.time_ns,
                        end_ns: ev.time_ns,
                        resource: resource.clone(),
                        ..Span::default()
                    };
                    let name = NODES.get(*node as usize).copied().unwrap_or("node?");
                    s.attributes.push(conv::COMPONENT, format!("ns3/{name}"));
                    s.attributes.push("weft.span.type", "NetDevice");
                    s.attributes.push("weft.net.node", *node as i64);
                    s.attributes.push("weft.net.device", *device as i64);
                    s.attributes.push("weft.net.packet_uid", *uid as i64);
                    if let Some(h) = &n.ipv4 {
                        s.attributes.push("network.protocol.name", "ipv4");
                        s.attributes.push("source.address", ip(h.src_ip));
                        s.attributes.push("destination.address", ip(h.dst_ip));
                        s.attributes.push("source.port", h.src_port as i64);
                        s.attributes.push("destination.port", h.dst_port as i64);
                    }
                    // Parent: the hop of this packet that closed last at or before now.
                    let list = by_uid.entry(*uid).or_default();
                    let parent = list
                        .iter()
                        .filter(|&&i| hops[i].closed.is_some_and(|c| c <= ev.time_ns))
                        .max_by_key(|&&i| (hops[i].closed, hops[i].opened_seq))
                        .map(|&i| hops[i].span.span_id);
                    s.parent_span_id = parent;
                    list.push(hops.len());
                    open.entry(key).or_default().push_back(hops.len());
                    hops.push(Hop { span: s, closed: None, opened_seq: seq });
                }
                NetOp::Dequeue | NetOp::Drop => {
                    if let Some(i) = open.get_mut(&key).and_then(VecDeque::pop_front) {
                        hops[i].span.end_ns = ev.time_ns;
                        hops[i].closed = Some(ev.time_ns);
                        if *op == NetOp::Drop {
                            hops[i].span.attributes.push("weft.net.drop", true);
                        }
                    }
                }
                NetOp::Receive => {}
            }
        }
        if !more {
            break;
        }
    }
    let stats = driver.into_stats();
    assert_eq!(stats.rejected.count(), 0, "ns-3 lines rejected: {:?}", stats.rejected);
    let mut incomplete = 0;
    let spans = hops
        .into_iter()
        .map(|mut h| {
            if h.closed.is_none() {
                incomplete += 1;
                h.span.attributes.push(conv::INCOMPLETE, true);
            }
            h.span
        })
        .collect();
    (spans, incomplete)
}
// --- end of the temporary glue -------------------------------------------------------------

/// Mean ns of `row` in `direction` from `weft breakdown --csv` output.
fn mean(rows: &[Vec<String>], direction: &str, row: &str) -> f64 {
    let r = rows
        .iter()
        .find(|r| r[0] == direction && r[1] == row)
        .unwrap_or_else(|| panic!("no row {direction}/{row} in the breakdown"));
    r[7].parse().expect("mean_ns")
}

fn units(rows: &[Vec<String>], direction: &str) -> u64 {
    rows.iter()
        .find(|r| r[0] == direction && r[1] == "end-to-end")
        .map(|r| r[4].parse().expect("units"))
        .unwrap_or(0)
}

struct Run {
    rows: Vec<Vec<String>>,
    table: String,
}

fn breakdown(traces: &Path) -> Run {
    let p = traces.to_str().expect("utf-8 path");
    let mut args = vec!["breakdown", p, "--csv"];
    args.extend(RULES);
    let rows = csv(&String::from_utf8(run_ok(&args).stdout).expect("utf-8 csv"));
    let mut args = vec!["breakdown", p, "--ratio", "response/request"];
    args.extend(RULES);
    let table = String::from_utf8(run_ok(&args).stdout).expect("utf-8 table");
    Run { rows, table }
}

#[test]
fn responses_queue_in_the_congested_switch_and_requests_do_not() {
    let dir = tempfile::tempdir().expect("temp dir");
    let quiet_log = dir.path().join("quiet.tr");
    let busy_log = dir.path().join("congested.tr");
    let script = weft_testkit::workspace_root().join("examples/ns3/ntp_congestion.py");
    let t0 = Instant::now();
    let out = Command::new(weft_testkit::python())
        .arg(&script)
        .arg(format!("none:{}", quiet_log.display()))
        .arg(format!("tcp:{}", busy_log.display()))
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "{} failed ({}) — is the PyPI `ns3` wheel installed? (.ci/test installs .ci/requirements.txt)\n{}",
        script.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let summaries: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("summary json"))
        .collect();
    assert_eq!(summaries.len(), 2, "one summary per run: {summaries:?}");
    eprintln!("ns-3 (both runs, incl. start-up): {:.1} s wall", t0.elapsed().as_secs_f64());
    for s in &summaries {
        for (i, name) in NODES.iter().enumerate() {
            assert_eq!(s["nodes"][name], i, "node ids as the weaving glue assumes");
        }
        eprintln!("ns-3 run: {s}");
    }

    let mut runs = Vec::new();
    for (log, name) in [(&quiet_log, "quiet"), (&busy_log, "congested")] {
        let t = Instant::now();
        let (spans, incomplete) = weave_ns3_temporary(log);
        eprintln!(
            "{name}: {} hop spans woven from {} ({incomplete} incomplete) in {:.1} s",
            spans.len(),
            log.display(),
            t.elapsed().as_secs_f64()
        );
        let traces = dir.path().join(format!("{name}.otlp.json"));
        write_spans(&traces, Format::OtlpJson, &spans);
        let t = Instant::now();
        let run = breakdown(&traces);
        eprintln!("{name}: weft breakdown (twice) {:.1} s", t.elapsed().as_secs_f64());
        eprintln!("{name}:\n{}", run.table);
        runs.push(run);
    }
    let (quiet, busy) = (&runs[0].rows, &runs[1].rows);

    for rows in [quiet, busy] {
        assert!(units(rows, "request") >= 95, "requests woven: {}", units(rows, "request"));
        assert!(units(rows, "response") >= 95, "responses woven: {}", units(rows, "response"));
    }
    // Congested: responses wait behind the bulk traffic at sw1's port towards sw0.
    let (b_req, b_resp) = (mean(busy, "request", "ns3/sw1"), mean(busy, "response", "ns3/sw1"));
    let b_ratio = b_resp / b_req;
    // Quiet: both directions only pay the switch's forwarding latency.
    let (q_req, q_resp) = (mean(quiet, "request", "ns3/sw1"), mean(quiet, "response", "ns3/sw1"));
    let q_ratio = q_resp / q_req;
    eprintln!(
        "sw1 mean: quiet request {q_req:.0} ns, response {q_resp:.0} ns (ratio {q_ratio:.2}); \
         congested request {b_req:.0} ns, response {b_resp:.0} ns (ratio {b_ratio:.1})"
    );
    // Measured: 2407× (2.407 ms vs the 1 µs forwarding latency). 100× means a mean queue of
    // about one full-size packet at 100 Mbit/s — far below what saturating TCP builds, far above
    // anything an idle switch shows.
    assert!(b_ratio >= 100.0, "congested: responses should spend ≥ 100× longer in sw1 (ratio {b_ratio})");
    assert!((0.8..=1.25).contains(&q_ratio), "quiet: sw1 time should be alike both ways (ratio {q_ratio})");
    // The congested switch is where the responses' extra time goes ...
    let q_e2e = mean(quiet, "response", "end-to-end");
    let b_e2e = mean(busy, "response", "end-to-end");
    assert!(b_resp > 0.5 * b_e2e, "sw1 dominates congested responses ({b_resp} of {b_e2e} ns)");
    assert!(b_e2e - q_e2e > 0.9 * (b_resp - q_resp), "the extra end-to-end time is sw1's");
    // ... and the requests hardly notice (same path, same devices, no queue).
    let (q_req_e2e, b_req_e2e) = (mean(quiet, "request", "end-to-end"), mean(busy, "request", "end-to-end"));
    assert!(b_req_e2e < 1.5 * q_req_e2e, "requests: quiet {q_req_e2e} ns, congested {b_req_e2e} ns");
}
