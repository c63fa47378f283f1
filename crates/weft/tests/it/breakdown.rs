//! `weft breakdown` on trace files built here: table, CSV, JSON, one trace, rules, errors.

use std::sync::Arc;

use weft_model::codec::stream::Format;
use weft_model::{Resource, Span, SpanId, TraceId, conv};

use crate::common::{csv, run_err, run_ok, write_spans};

fn hop(trace: u128, id: u64, parent: Option<u64>, node: &str, start: u64, end: u64, src: &str) -> Span {
    let mut r = Resource::service("ns3");
    r.attributes.push(conv::COMPONENT_KIND, "network");
    let mut s = Span {
        trace_id: TraceId::from_u128(trace),
        span_id: SpanId::from_u64(id),
        parent_span_id: parent.map(SpanId::from_u64),
        name: "hop".into(),
        start_ns: start,
        end_ns: end,
        resource: Arc::new(r),
        ..Span::default()
    };
    s.attributes.push(conv::COMPONENT, format!("ns3/{node}"));
    s.attributes.push("ip.src", src);
    s
}

/// Requests a → sw → b (sw holds them 100 ns) and responses b → sw → a (sw holds them
/// 1000 + 100·i ns), 10 exchanges; wire 50 ns per link.
fn exchanges() -> Vec<Span> {
    let mut v = Vec::new();
    for i in 0..10u64 {
        let t = 1_000_000 * (i + 1);
        let q = (2 * i + 1) as u128;
        v.push(hop(q, 1, None, "a", t, t + 10, "10.0.0.1"));
        v.push(hop(q, 2, Some(1), "sw", t + 60, t + 160, "10.0.0.1"));
        v.push(hop(q, 3, Some(2), "b", t + 210, t + 220, "10.0.0.1"));
        let r = q + 1;
        let t = t + 500;
        let hold = 1000 + 100 * i;
        v.push(hop(r, 1, None, "b", t, t + 10, "10.0.0.2"));
        v.push(hop(r, 2, Some(1), "sw", t + 60, t + 60 + hold, "10.0.0.2"));
        v.push(hop(r, 3, Some(2), "a", t + 110 + hold, t + 120 + hold, "10.0.0.2"));
    }
    v
}

const RULES: [&str; 4] = ["-d", "request: ip.src=10.0.0.1", "-d", "response: ip.src=10.0.0.2"];

#[test]
fn csv_has_a_row_per_direction_and_component_that_adds_up() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("x.otlp.json");
    write_spans(&f, Format::OtlpJson, &exchanges());
    let mut args = vec!["breakdown", f.to_str().unwrap(), "--csv"];
    args.extend(RULES);
    let out = run_ok(&args);
    let rows = csv(&String::from_utf8(out.stdout).unwrap());
    assert_eq!(
        rows[0].join(","),
        "direction,row,kind,component_kind,units,present,sum_ns,mean_ns,median_ns,p95_ns,min_ns,max_ns,share"
    );
    let get =
        |d: &str, r: &str| rows.iter().find(|x| x[0] == d && x[1] == r).unwrap_or_else(|| panic!("{d}/{r}"));
    let req = get("request", "ns3/sw");
    assert_eq!((req[4].as_str(), req[7].as_str(), req[8].as_str()), ("10", "100.000", "100"));
    let resp = get("response", "ns3/sw");
    // 1000..1900 in steps of 100: mean 1450, median (lower middle) 1400, p95 1900.
    assert_eq!((resp[7].as_str(), resp[8].as_str(), resp[9].as_str()), ("1450.000", "1400", "1900"));
    let wire = get("response", "wire");
    assert_eq!((wire[2].as_str(), wire[7].as_str()), ("wire", "100.000"));
    let e2e = get("response", "end-to-end");
    assert_eq!(e2e[7], "1570.000");
    let shares: f64 = rows
        .iter()
        .filter(|x| x[0] == "response" && x[1] != "end-to-end")
        .map(|x| x[12].parse::<f64>().unwrap())
        .sum();
    assert!((shares - 1.0).abs() < 1e-5, "{shares}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("20 traces, 60 spans; 20 units in 2 direction(s)"));
}

#[test]
fn table_json_ratio_per_link_and_formats() {
    let dir = tempfile::tempdir().unwrap();
    // OTLP protobuf here (Zipkin's µs timestamps would round these ns times).
    let f = dir.path().join("x.pb");
    write_spans(&f, Format::OtlpProto, &exchanges());
    let p = f.to_str().unwrap();
    let mut args = vec!["breakdown", p, "--ratio", "response/request"];
    args.extend(RULES);
    let out = String::from_utf8(run_ok(&args).stdout).unwrap();
    assert!(out.contains("ns3/sw") && out.contains("1.450 µs") && out.contains("end-to-end"), "{out}");
    assert!(out.contains("14.50×"), "the ratio table: {out}");

    let mut args = vec!["breakdown", p, "--json", "--per-link"];
    args.extend(RULES);
    let j: serde_json::Value = serde_json::from_slice(&run_ok(&args).stdout).unwrap();
    let comps = &j["directions"][1]["components"];
    let names: Vec<&str> = comps.as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["ns3/b", "wire ns3/b→ns3/sw", "ns3/sw", "wire ns3/sw→ns3/a", "ns3/a"]);

    // Grouped by service, everything is the network.
    let out = String::from_utf8(run_ok(&["breakdown", p, "--group-by", "service", "--csv"]).stdout).unwrap();
    let rows = csv(&out);
    assert_eq!(rows.len(), 3, "{out}");
    assert_eq!((rows[1][0].as_str(), rows[1][1].as_str(), rows[1][4].as_str()), ("all", "ns3", "20"));
}

#[test]
fn one_trace_shows_total_self_and_timeline() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("t.json");
    write_spans(&f, Format::OtlpJson, &exchanges());
    let p = f.to_str().unwrap();
    let id = TraceId::from_u128(2).to_string();
    let rows = csv(&String::from_utf8(run_ok(&["breakdown", p, "--trace", &id, "--csv"]).stdout).unwrap());
    assert_eq!(rows[0][0], "row");
    let sw = rows.iter().find(|r| r[0] == "ns3/sw").unwrap();
    assert_eq!(&sw[3..7], ["1", "1000", "1000", "1000"]);
    assert_eq!(rows.last().unwrap()[..2], ["end-to-end".to_owned(), "total".to_owned()]);
    assert_eq!(rows.last().unwrap()[6], "1120");
    let table = String::from_utf8(run_ok(&["breakdown", p, "--trace", &id]).stdout).unwrap();
    assert!(table.contains("timeline") && table.contains("1.120 µs"), "{table}");
    let err = run_err(&["breakdown", p, "--trace", "abc123"]);
    assert!(
        err.contains("trace 00000000000000000000000000abc123 is not in the input (60 spans read)"),
        "{err}"
    );
}

#[test]
fn bad_arguments_and_inputs_are_explained() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("t.json");
    write_spans(&f, Format::OtlpJson, &exchanges());
    let p = f.to_str().unwrap();
    let e = run_err(&["breakdown", p, "-d", "request ip.src=1"]);
    assert!(e.contains("direction rule \"request ip.src=1\": expected 'LABEL: key=value, ...'"), "{e}");
    let e = run_err(&["breakdown", p, "--group-by", "colour"]);
    assert!(e.contains("--group-by \"colour\""), "{e}");
    let e = run_err(&["breakdown", p, "--format", "chrome"]);
    assert!(e.contains("not a format weft reads"), "{e}");
    let e = run_err(&["breakdown", p, "--ratio", "a/b"]);
    assert!(e.contains("--ratio: no direction \"a\" (directions: all)"), "{e}");
    let junk = dir.path().join("junk.txt");
    std::fs::write(&junk, "hello").unwrap();
    let e = run_err(&["breakdown", junk.to_str().unwrap()]);
    assert!(e.contains("cannot tell the trace format"), "{e}");
    let e = run_err(&["breakdown", dir.path().join("nope.json").to_str().unwrap()]);
    assert!(e.contains("opening") && e.contains("nope.json"), "{e}");
    let empty = dir.path().join("empty.zipkin.json");
    std::fs::write(&empty, "[]").unwrap();
    let e = run_err(&["breakdown", empty.to_str().unwrap()]);
    assert!(e.contains("no spans in the input"), "{e}");
}

#[test]
fn spans_beyond_the_limit_are_dropped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("t.json");
    write_spans(&f, Format::OtlpJson, &exchanges());
    let out = run_ok(&["breakdown", f.to_str().unwrap(), "--max-spans", "12", "--csv"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("48 spans dropped beyond --max-spans 12"), "{err}");
    assert!(err.contains("traces, 12 spans"), "{err}");
}

#[test]
fn reads_stdin_with_the_format_detected() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("t.json");
    write_spans(&f, Format::OtlpJson, &exchanges());
    let out = crate::common::weft()
        .args(["breakdown", "-", "--csv"])
        .stdin(std::fs::File::open(&f).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows = csv(&String::from_utf8(out.stdout).unwrap());
    let e2e = rows.iter().find(|r| r[1] == "end-to-end").unwrap();
    assert_eq!((e2e[0].as_str(), e2e[4].as_str()), ("all", "20"));
}
