//! The ns-3 case study (Columbo's): an NTP-like exchange client – sw0 – sw1 – server, once
//! alone and once with bulk TCP traffic through the inter-switch link in the server → client
//! direction. Real ns-3 (`examples/ns3/ntp_congestion.py`, PyPI `ns3`) writes the logs in
//! this test run; `weft weave` turns them into spans and `weft breakdown` must show that responses
//! spend far longer in the congested switch than requests — and that without the background
//! traffic they do not.

use std::path::Path;
use std::time::Instant;

use crate::common::{csv, run_ns3, run_ok, weft};

/// The scenario's node names by ns-3 node id, as `examples/ns3/topology.toml` names them
/// (the script prints its ids; checked below).
const NODES: [&str; 6] = ["client", "sw0", "sw1", "server", "bg-sink", "bg-src"];

/// Directions by the hops' IPv4 addresses and UDP ports (the port keeps ARP out).
const RULES: [&str; 4] = [
    "-d",
    "request: source.address=10.0.0.1, destination.address=10.0.0.2, destination.port=123",
    "-d",
    "response: source.address=10.0.0.2, destination.address=10.0.0.1, source.port=123",
];

/// Weaves one ns-3 log with `weft weave examples/ns3/topology.toml` into an OTLP/JSON file;
/// returns weave's closing summary (stderr).
fn weave(log: &Path, out: &Path) -> String {
    let topology = weft_testkit::workspace_root().join("examples/ns3/topology.toml");
    let res = weft()
        .arg("weave")
        .arg(&topology)
        .arg("--out")
        .arg(out)
        .env("NS3_LOG", log)
        .output()
        .expect("spawn weft weave");
    let summary = String::from_utf8_lossy(&res.stderr).into_owned();
    assert!(res.status.success(), "weft weave {} failed ({}):\n{summary}", log.display(), res.status);
    assert!(!summary.contains("rejected:"), "weft weave rejected lines of {}:\n{summary}", log.display());
    summary
}

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
    let t0 = Instant::now();
    let out = run_ns3(
        "ntp_congestion.py",
        &[format!("none:{}", quiet_log.display()), format!("tcp:{}", busy_log.display())],
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
            assert_eq!(s["nodes"][name], i, "node ids as the topology names them");
        }
        eprintln!("ns-3 run: {s}");
    }

    let mut runs = Vec::new();
    for (log, name) in [(&quiet_log, "quiet"), (&busy_log, "congested")] {
        let t = Instant::now();
        let traces = dir.path().join(format!("{name}.otlp.json"));
        let summary = weave(log, &traces);
        eprintln!("{name}: weft weave {:.1} s\n{summary}", t.elapsed().as_secs_f64());
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
