//! Stock ns-3 with deep queues (`examples/ns3/deep_queues.py`, real ns-3 from the PyPI `ns3`
//! wheel): UDP echo exchanges through three routers whose 10 Mbit/s links carry bulk TCP in
//! both directions, 200-packet DropTail queues, waits of tens of ms, losses on one link.
//! `weft weave` (defaults) and `weft breakdown` must give, per router and direction, the
//! queueing delay ns-3's own `+`/`-` lines of the same run give (paired first in, first out
//! per device) — packets that wait longer than `max_cause_age_ns` included.

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::common::{csv, run_ns3, run_ok, weft};

const ROUTERS: [(u32, &str); 3] = [(2, "r0"), (3, "r1"), (4, "r2")];

/// Direction of an echo packet's line: requests go to port 123, responses come from it.
fn direction(line: &str) -> Option<&'static str> {
    let udp = line.find("ns3::UdpHeader (length: ").map(|i| &line[i..])?;
    if udp.contains(" > 123)") {
        Some("request")
    } else if udp.contains(": 56 123 > ") {
        Some("response")
    } else {
        None
    }
}

/// `(kind, ns, node, device)` of an ascii trace line.
fn fields(line: &str) -> (char, u64, u32, u32) {
    let mut it = line.split(' ');
    let kind = it.next().and_then(|k| k.chars().next()).expect("kind");
    let secs: f64 = it.next().expect("time").parse().expect("seconds");
    let path = it.next().expect("path");
    let num = |key: &str| -> u32 {
        let at = path.find(key).expect("context path") + key.len();
        path[at..].split('/').next().expect("number").parse().expect("number")
    };
    (kind, (secs * 1e9).round() as u64, num("NodeList/"), num("DeviceList/"))
}

/// From ns-3's trace: per direction, the echo packets sent (`+` at their first device) and
/// per router the summed waits (`+` to `-`, first in first out per device, every packet
/// counted so the order is ns-3's) of that direction's packets; and the longest wait.
struct Ns3 {
    sent: BTreeMap<&'static str, u64>,
    wait: BTreeMap<(&'static str, u32), u64>,
    longest_ns: u64,
    drops: u64,
}

/// A device's queue: enqueue time and direction of each packet, oldest first.
type Queue = VecDeque<(u64, Option<&'static str>)>;

fn from_ns3(trace: &str) -> Ns3 {
    let mut queues: HashMap<(u32, u32), Queue> = HashMap::new();
    let mut r = Ns3 { sent: BTreeMap::new(), wait: BTreeMap::new(), longest_ns: 0, drops: 0 };
    for line in trace.lines() {
        let (kind, t, node, dev) = fields(line);
        let dir = direction(line);
        match kind {
            '+' => {
                queues.entry((node, dev)).or_default().push_back((t, dir));
                if let Some(d) = dir
                    && [0, 1, 5].contains(&node)
                {
                    *r.sent.entry(d).or_default() += 1;
                }
            }
            '-' => {
                let (t0, d0) =
                    queues.get_mut(&(node, dev)).and_then(|q| q.pop_front()).expect("a '-' after its '+'");
                assert_eq!(d0, dir, "ns-3's queue is first in, first out: {line}");
                r.longest_ns = r.longest_ns.max(t - t0);
                if let Some(d) = dir {
                    *r.wait.entry((d, node)).or_default() += t - t0;
                }
            }
            'd' => r.drops += 1,
            _ => {}
        }
    }
    r
}

/// Mean ns of `row` in `direction` and its units, from `weft breakdown --csv`.
fn row(rows: &[Vec<String>], direction: &str, row: &str) -> Option<(f64, u64)> {
    let r = rows.iter().find(|r| r[0] == direction && r[1] == row)?;
    Some((r[7].parse().expect("mean_ns"), r[4].parse().expect("units")))
}

#[test]
fn router_queueing_matches_ns3_with_waits_beyond_the_cause_age() {
    let dir = tempfile::tempdir().expect("temp dir");
    let trace_path = dir.path().join("deep.tr");
    let out = run_ns3("deep_queues.py", &[trace_path.display().to_string()]);
    let summary: serde_json::Value = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("summary json"))
        .expect("a summary line");
    for (id, name) in ROUTERS {
        assert_eq!(summary["nodes"][name], id, "node ids: {summary}");
    }
    let trace = std::fs::read_to_string(&trace_path).expect("read trace");
    let ns3 = from_ns3(&trace);
    eprintln!("ns-3: {summary}; longest wait {:.1} ms, {} drops", ns3.longest_ns as f64 / 1e6, ns3.drops);
    // The scenario is what it claims: waits far beyond weave's 10 ms cause age, and losses.
    assert!(ns3.longest_ns > 30_000_000, "longest wait {} ns", ns3.longest_ns);
    assert!(ns3.drops > 0, "the lossy link dropped nothing");

    let topology = dir.path().join("topology.toml");
    std::fs::write(
        &topology,
        format!(
            "[[source]]\nname = \"ns3\"\nkind = \"ns3-stock\"\npath = \"{}\"\n\
             nodes = {{ 0 = \"client1\", 1 = \"client2\", 2 = \"r0\", 3 = \"r1\", 4 = \"r2\", 5 = \"server\" }}\n",
            trace_path.display()
        ),
    )
    .expect("write topology");
    let traces = dir.path().join("deep.otlp.json");
    let res =
        weft().arg("weave").arg(&topology).arg("--out").arg(&traces).output().expect("spawn weft weave");
    let weave_summary = String::from_utf8_lossy(&res.stderr).into_owned();
    eprintln!("{weave_summary}");
    assert!(res.status.success(), "weft weave failed:\n{weave_summary}");
    assert!(!weave_summary.contains("rejected:"), "{weave_summary}");
    assert!(!weave_summary.contains("without enqueue"), "no hop may lose its enqueue:\n{weave_summary}");
    assert!(!weave_summary.contains("warning: network hops were cut"), "{weave_summary}");

    let p = traces.to_str().expect("utf-8 path");
    let rules = ["-d", "request: destination.port=123", "-d", "response: source.port=123"];
    let mut args = vec!["breakdown", p, "--csv"];
    args.extend(rules);
    let rows = csv(&String::from_utf8(run_ok(&args).stdout).expect("utf-8 csv"));
    let mut args = vec!["breakdown", p];
    args.extend(rules);
    let table = run_ok(&args);
    eprintln!("{}", String::from_utf8_lossy(&table.stdout));
    assert!(!String::from_utf8_lossy(&table.stdout).contains("(!)"), "no row from a cut journey");

    for d in ["request", "response"] {
        let (_, units) = row(&rows, d, "end-to-end").expect("end-to-end row");
        assert_eq!(units, ns3.sent[d], "{d}: one unit per packet ns-3 sent");
        for (node, name) in ROUTERS {
            let want = ns3.wait.get(&(d, node)).copied().unwrap_or(0) as f64 / units as f64;
            let got = row(&rows, d, &format!("ns3/{name}")).map(|r| r.0).unwrap_or(0.0);
            eprintln!("{d} at {name}: ns-3 {:.3} ms, weft {:.3} ms", want / 1e6, got / 1e6);
            assert!(
                (got - want).abs() <= 0.01 * want + 1_000.0,
                "{d} at {name}: weft {got} ns, ns-3 {want} ns"
            );
        }
    }
    // Where the queues are: requests wait at r0 (behind client2's TCP data), responses at r2
    // (behind the server's), both for longer than the 10 ms cause age on average.
    let mean = |d: &str, r: &str| row(&rows, d, r).map(|r| r.0).unwrap_or(0.0);
    assert!(mean("request", "ns3/r0") > 10e6, "requests at r0: {} ns", mean("request", "ns3/r0"));
    assert!(mean("response", "ns3/r2") > 10e6, "responses at r2: {} ns", mean("response", "ns3/r2"));

    // The same log with every tenth enqueue at r2 towards r1 missing: weave says which device
    // lost what, breakdown marks the rows from cut journeys.
    let mut k = 0;
    let cut: String = trace
        .lines()
        .filter(|l| {
            let drop = l.starts_with("+ ") && l.contains("/NodeList/4/DeviceList/0/") && {
                k += 1;
                k % 10 == 0
            };
            !drop
        })
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&trace_path, cut).expect("write cut trace");
    let res =
        weft().arg("weave").arg(&topology).arg("--out").arg(&traces).output().expect("spawn weft weave");
    let weave_summary = String::from_utf8_lossy(&res.stderr).into_owned();
    assert!(res.status.success(), "weft weave failed:\n{weave_summary}");
    let warning = weave_summary.lines().find(|l| l.contains("ns3/r2/dev0:")).unwrap_or_else(|| {
        panic!("no warning about r2's device 0:\n{weave_summary}");
    });
    eprintln!("{warning}");
    assert!(weave_summary.contains("warning: network hops were cut on 1 device(s)"), "{weave_summary}");
    assert!(warning.contains("dequeued without an enqueue"), "{warning}");
    let mut args = vec!["breakdown", p];
    args.extend(rules);
    let out = run_ok(&args);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("ns3/r2 (!)"), "{table}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("contain incomplete spans"), "breakdown warns");
}
