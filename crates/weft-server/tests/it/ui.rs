//! The UI's assets and JSON API (`/`, `/ui/*`, `/api/ui/*`) — over real HTTP against a real
//! store loaded with shop traces and woven simulator requests.

use std::collections::{BTreeSet, HashMap};

use serde_json::Value as J;
use weft_model::codec::otlp;
use weft_model::{Span, TraceId};
use weft_server::ui::ASSETS;
use weft_synth::demo::woven::{big_trace, woven_request};

use crate::{TestServer, spans};

fn post(s: &TestServer, v: &[Span]) {
    let (st, _, b) =
        s.post("/v1/traces", &[("Content-Type", "application/x-protobuf")], &otlp::encode_proto(v));
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&b));
}

fn by_trace(v: &[Span]) -> HashMap<TraceId, Vec<Span>> {
    let mut m: HashMap<TraceId, Vec<Span>> = HashMap::new();
    for s in v {
        m.entry(s.trace_id).or_default().push(s.clone());
    }
    m
}

/// Percent-encodes a query value.
fn enc(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn trace_named(v: &[Span], service: &str, name: &str) -> TraceId {
    v.iter().find(|s| s.service_name() == service && s.name == name).map(|s| s.trace_id).unwrap()
}

#[test]
fn assets_are_embedded_served_and_complete() {
    // Every file of ui/ is in the embedded list, and nothing else.
    let dir = weft_testkit::workspace_root().join("ui");
    let on_disk: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let listed: BTreeSet<String> = ASSETS.iter().map(|a| a.0.to_owned()).collect();
    assert_eq!(on_disk, listed, "ui/ and weft_server::ui::ASSETS differ: add the new file to ASSETS");
    for (name, _, bytes) in ASSETS {
        assert_eq!(**bytes, std::fs::read(dir.join(name)).unwrap()[..], "{name} is stale");
    }

    let s = TestServer::start();
    let mut r = s.agent.get(&s.url("/")).call().unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
    let etag = r.headers()["etag"].to_str().unwrap().to_owned();
    let csp = r.headers()["content-security-policy"].to_str().unwrap().to_owned();
    assert!(csp.contains("default-src 'self'") && !csp.contains("unsafe-inline"), "{csp}");
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    let html = r.body_mut().read_to_string().unwrap();
    assert!(html.contains("/ui/app.js") && html.contains("type=\"module\""));
    // the policy allows no inline script: every script is a file
    assert!(!html.contains("<script>") && html.contains("<script src=\"/ui/theme.js\">"), "{html}");
    // every answer of the query listener carries both headers, errors included
    for path in ["/api/status", "/api/sql?q=SELECT%201", "/metrics", "/nope"] {
        let r = s.agent.get(&s.url(path)).call().unwrap();
        assert_eq!(r.headers()["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(r.headers()["content-security-policy"], csp.as_str(), "{path}");
    }
    // no HTML is built from data: innerHTML only ever takes a constant string literal
    for (name, _, bytes) in ASSETS.iter().filter(|a| a.0.ends_with(".js")) {
        let js = String::from_utf8_lossy(bytes);
        for (n, line) in js.lines().enumerate() {
            if let Some((_, rhs)) = line.split_once("innerHTML =") {
                let rhs = rhs.trim();
                let literal = rhs.is_empty() || (rhs.starts_with('\'') && !rhs.contains("${"));
                assert!(literal, "{name}:{}: innerHTML built from data: {line}", n + 1);
            }
        }
    }
    let r = s.agent.get(&s.url("/ui/trace.js")).call().unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/javascript; charset=utf-8");
    let r = s.agent.get(&s.url("/")).header("if-none-match", &etag).call().unwrap();
    assert_eq!(r.status(), 304);
    assert_eq!(s.get("/ui/nope.js").0, 404);
    assert_eq!(s.get("/ui/..%2FCargo.toml").0, 404);
    // Every module the page imports is served.
    let (_, app) = s.get("/ui/app.js");
    for imp in app.lines().filter_map(|l| l.split("from './").nth(1)).map(|r| r.trim_end_matches("';")) {
        assert_eq!(s.get(&format!("/ui/{imp}")).0, 200, "import {imp}");
    }
}

#[test]
fn search_returns_summary_rows() {
    let s = TestServer::start();
    let shop = spans(31, 3000);
    post(&s, &shop);
    let traces = by_trace(&shop);
    let r = s.get_json("/api/ui/search?lookback=all&limit=1000");
    let rows = r["traces"].as_array().unwrap();
    assert_eq!(rows.len(), traces.len());
    for row in rows {
        let id = TraceId::from_hex(row["traceId"].as_str().unwrap()).unwrap();
        let t = &traces[&id];
        assert_eq!(row["spanCount"].as_u64().unwrap() as usize, t.len());
        let root = t.iter().find(|s| s.parent_span_id.is_none()).unwrap();
        assert_eq!(row["rootName"], root.name.as_str());
        assert_eq!(row["rootService"], root.service_name());
        let start = t.iter().map(|s| s.start_ns).min().unwrap();
        let end = t.iter().map(|s| s.end_ns).max().unwrap();
        assert_eq!(row["durationNs"].as_u64().unwrap(), end - start);
        let errs = t.iter().filter(|s| s.status.code == weft_model::StatusCode::Error).count();
        assert_eq!(row["errors"].as_u64().unwrap() as usize, errs);
        let per: u64 = row["services"].as_array().unwrap().iter().map(|x| x[1].as_u64().unwrap()).sum();
        assert_eq!(per as usize, t.len());
    }
    // Criteria: service, attribute terms (quoted), duration, limit; bad input is a 400.
    let r = s.get_json("/api/ui/search?lookback=all&service=payment&limit=1000");
    let want = traces.values().filter(|t| t.iter().any(|s| s.service_name() == "payment")).count();
    assert_eq!(r["traces"].as_array().unwrap().len(), want);
    let r = s.get_json(
        "/api/ui/search?lookback=all&limit=1000&attrs=http.route%3D%22%2Fapi%2Fcheckout%22%20error",
    );
    let want = traces
        .values()
        .filter(|t| {
            t.iter().any(|s| {
                s.attributes.get_str("http.route") == Some("/api/checkout")
                    && (s.status.code == weft_model::StatusCode::Error || s.attributes.get("error").is_some())
            })
        })
        .count();
    assert_eq!(r["traces"].as_array().unwrap().len(), want);
    for row in r["traces"].as_array().unwrap() {
        assert!(row["errors"].as_u64().unwrap() > 0);
        assert_eq!(row["rootName"], "POST /api/checkout");
    }
    let r = s.get_json("/api/ui/search?lookback=all&minDuration=8ms&limit=1000");
    for row in r["traces"].as_array().unwrap() {
        assert!(row["durationNs"].as_u64().unwrap() >= 8_000_000);
    }
    assert_eq!(s.get_json("/api/ui/search?lookback=all&limit=3")["traces"].as_array().unwrap().len(), 3);
    assert_eq!(s.get_json("/api/ui/search?lookback=1ms")["traces"].as_array().unwrap().len(), 0);
    for bad in ["minDuration=fast", "attrs=k%3D%22open", "limit=-1", "lookback=yesterday"] {
        let (st, body) = s.get(&format!("/api/ui/search?{bad}"));
        assert_eq!(st, 400, "{bad}: {body}");
        assert!(body.contains("malformed parameter"), "{body}");
    }
}

#[test]
fn trace_is_columnar_in_tree_order_with_critical_path_and_links() {
    let s = TestServer::start();
    let woven = woven_request(9, weft_model::time::now_unix_nanos() - 60_000_000_000);
    post(&s, &woven);
    let client = trace_named(&woven, "host0", "rpc_call echo");
    let net = trace_named(&woven, "ns3", "packet host0 → host1");
    let t = s.get_json(&format!("/api/ui/trace/{client}"));
    let n = t["spanCount"].as_u64().unwrap() as usize;
    assert_eq!(n, woven.iter().filter(|s| s.trace_id == client).count());
    let rows = &t["rows"];
    let col =
        |k: &str| -> Vec<i64> { rows[k].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect() };
    let (parent, depth, end, start, dur) =
        (col("parent"), col("depth"), col("end"), col("start"), col("dur"));
    assert!(
        ["id", "svc", "name", "comp", "kind", "err"].iter().all(|k| rows[k].as_array().unwrap().len() == n)
    );
    // Depth-first: a parent comes before its children, whose subtree lies inside the parent's.
    assert_eq!(parent[0], -1);
    for i in 1..n {
        let p = parent[i];
        if p >= 0 {
            let p = p as usize;
            assert!(p < i && end[p] >= end[i] && depth[i] == depth[p] + 1);
        }
    }
    assert_eq!(end[0] as usize, n);
    // Critical path sections are ordered, disjoint, and cover the whole request.
    let cp = t["critical"].as_array().unwrap();
    let mut last = 0;
    for c in cp {
        let (a, b) = (c[1].as_i64().unwrap(), c[2].as_i64().unwrap());
        assert!(a >= last && b >= a);
        last = b;
    }
    assert_eq!(t["criticalNs"].as_i64().unwrap(), start[0] + dur[0] - start[0]);
    // Same-trace caused_by links point at rows; the network trace's root links in from outside.
    let names: Vec<String> =
        t["names"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect();
    let name_of = |row: usize| names[rows["name"][row].as_u64().unwrap() as usize].clone();
    let links = t["links"].as_array().unwrap();
    let tx_to_mmio = links.iter().any(|l| {
        name_of(l[0].as_u64().unwrap() as usize) == "tx"
            && l[4].as_i64().unwrap() >= 0
            && name_of(l[4].as_u64().unwrap() as usize) == "mmio_write TDT"
    });
    assert!(tx_to_mmio, "{links:?}");
    let incoming = t["incoming"].as_array().unwrap();
    assert!(incoming.iter().any(|l| name_of(l[0].as_u64().unwrap() as usize) == "eth_tx" && l[1] == net.to_string().as_str()));
    assert_eq!(t["events"].as_array().unwrap().len(), 2, "cs and cr on the root");

    // Span detail: links out with the target's names, links in from the network trace.
    let eth = woven.iter().find(|s| s.trace_id == client && s.name == "eth_tx").unwrap();
    let d = s.get_json(&format!("/api/ui/span/{client}/{}", eth.span_id));
    assert_eq!(d["service"], "nic0");
    let inc = d["incoming"].as_array().unwrap();
    assert_eq!(inc.len(), 1);
    assert_eq!(inc[0]["traceId"], net.to_string().as_str());
    assert_eq!(inc[0]["relation"], "caused_by");
    assert_eq!(inc[0]["name"], "packet host0 → host1");
    let root = woven.iter().find(|s| s.trace_id == net && s.parent_span_id.is_none()).unwrap();
    let d = s.get_json(&format!("/api/ui/span/{net}/{}", root.span_id));
    assert_eq!(d["links"][0]["service"], "nic0");
    assert_eq!(d["links"][0]["name"], "eth_tx");
    assert!(d["attributes"].as_array().unwrap().iter().any(|a| a[0] == "ip.bytes" && a[2] == "int"));
    assert_eq!(
        d["resource"].as_array().unwrap().iter().find(|a| a[0] == "weft.component.kind").unwrap()[1],
        "network"
    );

    // Errors: unknown trace, unknown span, malformed ids.
    assert_eq!(s.get("/api/ui/trace/0123456789abcdef0123456789abcdef").0, 404);
    assert_eq!(s.get(&format!("/api/ui/span/{client}/0000000000000001")).0, 404);
    assert_eq!(s.get("/api/ui/trace/xyz").0, 400);
    assert_eq!(s.get(&format!("/api/ui/span/{client}/xyz")).0, 400);
}

#[test]
fn big_trace_endpoint_keeps_every_span() {
    let s = TestServer::start();
    let big = big_trace(5, 20_000, weft_model::time::now_unix_nanos() - 60_000_000_000);
    post(&s, &big[..10_000]);
    post(&s, &big[10_000..]);
    let id = big[0].trace_id;
    let (st, body) = s.get(&format!("/api/ui/trace/{id}"));
    assert_eq!(st, 200);
    let t: J = serde_json::from_str(&body).unwrap();
    assert_eq!(t["spanCount"], 20_000);
    assert_eq!(t["rows"]["id"].as_array().unwrap().len(), 20_000);
    // Columnar: far smaller than the same trace as Zipkin JSON.
    let (_, zipkin) = s.get(&format!("/api/v2/trace/{id}"));
    assert!(body.len() * 2 < zipkin.len(), "{} vs {}", body.len(), zipkin.len());
    // Cached for the span details that follow, so they do not read the trace again.
    assert!(s.state().ui_cache.get(id, false).is_some());
    let d = s.get_json(&format!("/api/ui/span/{id}/{}", big[0].span_id));
    assert_eq!(d["descendants"], 19_999);
}

#[test]
fn dependencies_by_service_and_component_and_compare() {
    let s = TestServer::start();
    let now = weft_model::time::now_unix_nanos();
    let mut v = Vec::new();
    for i in 0..3 {
        v.extend(woven_request(40 + i, now - 60_000_000_000 + i * 1_000_000_000));
    }
    let shop = spans(33, 400);
    v.extend(shop.iter().cloned());
    post(&s, &v);
    let g = s.get_json("/api/ui/dependencies?lookback=all");
    assert_eq!(g["by"], "service");
    let edge = |g: &J, from: &str, to: &str, kind: &str| -> Option<u64> {
        g["edges"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["from"] == from && e["to"] == to && e["kind"] == kind)
            .map(|e| e["count"].as_u64().unwrap())
    };
    assert_eq!(edge(&g, "host0", "nic0", "caused_by"), Some(3), "MMIO write → NIC tx");
    assert_eq!(edge(&g, "nic0", "ns3", "caused_by"), Some(3), "NIC eth_tx → network");
    assert_eq!(edge(&g, "ns3", "nic1", "caused_by"), Some(3), "network → NIC rx");
    assert!(edge(&g, "frontend", "frontend", "call").is_none(), "no self edges");
    assert!(edge(&g, "checkout", "checkout", "call").is_none());
    assert!(g["nodes"].as_array().unwrap().iter().any(|n| n["id"] == "nic1" && n["kind"] == "nic"));
    let g = s.get_json("/api/ui/dependencies?by=component&lookback=all");
    // Request and response packets: two crossings per request.
    assert_eq!(edge(&g, "ns3/link h-sw0", "ns3/sw0", "caused_by"), Some(6), "hop to hop inside ns-3");
    assert!(edge(&g, "ns3", "ns3/sw0", "call").is_some());
    assert_eq!(s.get("/api/ui/dependencies?by=host").0, 400);
    assert_eq!(s.get_json("/api/ui/dependencies?lookback=1ms")["nodes"].as_array().unwrap().len(), 0);

    // Compare two checkout requests.
    let traces = by_trace(&shop);
    let mut checkout: Vec<(u64, TraceId)> = traces
        .values()
        .filter_map(|t| t.iter().find(|s| s.parent_span_id.is_none() && s.name == "POST /api/checkout"))
        .map(|r| (r.duration_ns(), r.trace_id))
        .collect();
    checkout.sort();
    let (a, b) = (checkout[0].1, checkout[checkout.len() - 1].1);
    let c = s.get_json(&format!("/api/ui/compare?a={a}&b={b}"));
    assert_eq!(c["a"]["spans"].as_u64().unwrap() as usize, traces[&a].len());
    let nodes = c["nodes"].as_array().unwrap();
    assert_eq!(nodes[0]["name"], "POST /api/checkout");
    assert_eq!(nodes[0]["depth"], 0);
    let total_a: u64 = nodes.iter().filter_map(|n| n["a"]["count"].as_u64()).sum();
    assert_eq!(total_a as usize, traces[&a].len());
    assert!(nodes.iter().all(|n| n["a"]["spanId"].is_string() || n["a"].is_null()));
    let same = s.get_json(&format!("/api/ui/compare?a={a}&b={a}"));
    assert!(same["nodes"].as_array().unwrap().iter().all(|n| n["change"] == "same"));
    assert_eq!(s.get(&format!("/api/ui/compare?a={a}")).0, 400);
    assert_eq!(s.get(&format!("/api/ui/compare?a={a}&b=0123456789abcdef0123456789abcdef")).0, 404);
}

#[test]
fn services_lists_components_and_operations() {
    let s = TestServer::start();
    post(&s, &woven_request(1, weft_model::time::now_unix_nanos() - 60_000_000_000));
    let r = s.get_json("/api/ui/services");
    let svcs: Vec<&str> = r["services"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(svcs, ["host0", "host1", "nic0", "nic1", "ns3"]);
    let comps: Vec<&str> = r["components"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert!(comps.contains(&"ns3/sw0") && comps.contains(&"ns3/sw1"));
    assert!(r["operations"]["nic0"].as_array().unwrap().iter().any(|v| v == "eth_tx"));
}

#[test]
fn attribute_terms_parse() {
    use weft_server::ui::api::parse_attrs;
    let t = parse_attrs(r#"http.route=/a  error k="a b=c" x="" y=1=2"#).unwrap();
    let s = |a: &str, b: Option<&str>| (a.to_owned(), b.map(str::to_owned));
    assert_eq!(
        t,
        vec![
            s("http.route", Some("/a")),
            s("error", None),
            s("k", Some("a b=c")),
            s("x", Some("")),
            s("y", Some("1=2"))
        ]
    );
    assert!(parse_attrs("=v").is_err());
    assert!(parse_attrs("k=\"open").is_err());
    assert!(parse_attrs("   ").unwrap().is_empty());
}

/// Three rounds of the synthetic SimBricks ping, woven by weft-weave (as `weft serve --demo`
/// does), a minute ago: 3 ping traces of 47 spans and 3 one-span `recvfrom` traces.
fn ping() -> Vec<Span> {
    let start = weft_model::time::now_unix_nanos() - 60_000_000_000;
    let p = weft_synth::demo::ping::woven_ping(3, start, 2_000_000, 5).unwrap();
    assert_eq!((p.rejected_lines, p.unmatched), (0, 0));
    p.spans
}

fn ping_ids(v: &[Span]) -> Vec<TraceId> {
    let mut ids: Vec<(u64, TraceId)> = by_trace(v)
        .into_iter()
        .filter(|(_, t)| t.len() > 1)
        .map(|(id, t)| (t.iter().map(|s| s.start_ns).min().unwrap(), id))
        .collect();
    ids.sort();
    ids.into_iter().map(|x| x.1).collect()
}

fn list(ids: &[TraceId]) -> String {
    ids.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(",")
}

fn names(rows: &J) -> Vec<(String, u64)> {
    rows.as_array()
        .unwrap()
        .iter()
        .map(|r| (r["name"].as_str().unwrap().to_owned(), r["timelineNs"].as_u64().unwrap()))
        .collect()
}

#[test]
fn demo_weaves_the_synthetic_ping_with_the_real_pipeline() {
    let start = 1_700_000_000_000_000_000;
    let p = weft_synth::demo::ping::woven_ping(4, start, 5_000_000, 9).unwrap();
    assert_eq!((p.rejected_lines, p.unmatched), (0, 0));
    let traces = by_trace(&p.spans);
    assert_eq!(traces.len(), 8, "a ping trace and a recvfrom trace per round");
    assert_eq!(p.spans.iter().map(|s| s.start_ns).min(), Some(start), "round 0 starts at `first_ns`");
    let big: Vec<&Vec<Span>> = traces.values().filter(|t| t.len() > 1).collect();
    assert_eq!(big.len(), 4);
    for t in big {
        assert_eq!(t.len(), 47);
        let comps: BTreeSet<&str> =
            t.iter().map(|s| s.attributes.get_str("weft.component").unwrap_or("")).collect();
        for c in ["client", "client-nic", "ns3/sw0", "ns3/sw1", "server-nic", "server"] {
            assert!(comps.contains(c), "{c} in {comps:?}");
        }
        // Every hand-over between components is a caused_by link to the parent.
        let caused = t.iter().filter(|s| s.links.iter().any(|l| Some(l.span_id) == s.parent_span_id)).count();
        assert!(caused >= 10, "{caused} caused_by links");
    }
    // Rounds one period apart (the first span of each ping trace).
    let mut starts: Vec<u64> = traces
        .values()
        .filter(|t| t.len() > 1)
        .map(|t| t.iter().map(|s| s.start_ns).min().unwrap())
        .collect();
    starts.sort();
    assert_eq!(starts, (0..4).map(|i| start + i * 5_000_000).collect::<Vec<_>>());
}

#[test]
fn breakdown_is_weft_analyze_per_trace_and_over_all() {
    use weft_analyze::breakdown::{Classifier, GroupBy, Options, WireMode, breakdown, trace_breakdown};
    let s = TestServer::start();
    let woven = ping();
    let shop = spans(34, 300);
    post(&s, &woven);
    post(&s, &shop);
    let ids = ping_ids(&woven);
    assert_eq!(ids.len(), 3);
    let traces = by_trace(&woven);
    let r = s.get_json(&format!("/api/ui/breakdown?traces={}", list(&ids)));
    assert_eq!((r["by"].as_str(), r["wire"].as_str()), (Some("component"), Some("total")));
    let rows = r["traces"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    for (row, id) in rows.iter().zip(&ids) {
        assert_eq!(row["traceId"], id.to_string().as_str());
        let want = trace_breakdown(&traces[id], &Options::default());
        assert_eq!(row["durationNs"].as_u64(), Some(want.duration_ns));
        assert_eq!(row["rows"], serde_json::to_value(&want.rows).unwrap(), "per trace = trace_breakdown");
        let got = names(&row["rows"]);
        assert_eq!(got.iter().map(|r| r.1).sum::<u64>(), want.duration_ns, "rows add up to end-to-end");
        for c in ["client", "client-nic", "ns3/sw0", "ns3/sw1", "server-nic", "server", "wire"] {
            assert!(got.iter().any(|r| r.0 == c), "{c} in {got:?}");
        }
        let wire = row["rows"].as_array().unwrap().iter().find(|r| r["name"] == "wire").unwrap();
        assert_eq!(wire["kind"], "wire");
        assert!(wire["timelineNs"].as_u64().unwrap() > 0, "PCIe and link latency are wire time");
        assert_eq!((row["from"].as_str(), row["to"].as_str()), (Some("client"), Some("client")));
        assert_eq!(row["root"], "client: sendto");
    }
    // Over all: weft_analyze::breakdown on the same spans, one direction.
    let picked: Vec<Span> = ids.iter().flat_map(|id| traces[id].iter().cloned()).collect();
    let want = breakdown(&picked, &Classifier::none(), &Options::default());
    assert_eq!(r["directions"], serde_json::to_value(&want.directions).unwrap());
    assert_eq!(r["labels"], serde_json::json!(["all"]));
    assert_eq!((r["traceCount"].as_u64(), r["spanCount"].as_u64()), (Some(3), Some(141)));
    // Flows: the request's packets first, then the reply's.
    let flows = r["flows"].as_array().unwrap();
    assert_eq!(flows.len(), 2, "{flows:?}");
    assert_eq!(
        (flows[0]["source"].as_str(), flows[0]["destination"].as_str()),
        (Some("10.0.0.1"), Some("10.0.0.2"))
    );
    assert_eq!(
        (flows[1]["source"].as_str(), flows[1]["destination"].as_str()),
        (Some("10.0.0.2"), Some("10.0.0.1"))
    );

    // Directions: request and response packets, the client's sending side as a fallback.
    let rules = "request: source.address=10.0.0.1; response: source.address=10.0.0.2\nrequest: from=client";
    let q = format!("/api/ui/breakdown?traces={}&rules={}", list(&ids), enc(rules));
    let r = s.get_json(&q);
    assert_eq!(r["labels"], serde_json::json!(["request", "response"]));
    let cls = Classifier::parse(&[
        "request: source.address=10.0.0.1",
        "response: source.address=10.0.0.2",
        "request: from=client",
    ])
    .unwrap();
    let want = breakdown(&picked, &cls, &Options::default());
    assert_eq!(r["directions"], serde_json::to_value(&want.directions).unwrap());
    let dirs = r["directions"].as_array().unwrap();
    for d in dirs {
        assert_eq!(d["units"], 3);
        let comps: Vec<&str> =
            d["components"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert!(
            comps.contains(&"ns3/sw0") && comps.contains(&"ns3/sw1") && comps.contains(&"wire"),
            "{comps:?}"
        );
        let share: f64 =
            d["components"].as_array().unwrap().iter().map(|c| c["share"].as_f64().unwrap()).sum();
        assert!((share - 1.0).abs() < 1e-9);
    }
    assert_eq!(r["unclassifiedSpans"], 0);

    // Per link wire rows: in the whole trace, the NIC's completion DMAs overlap the packet's
    // flight (the timeline gives that time to the NIC); the request packet's own spans (no
    // fallback rule for the sending side) give the sw0 → sw1 link its own row.
    let r = s.get_json(&format!("/api/ui/breakdown?traces={}&wire=link", ids[0]));
    let want = trace_breakdown(&traces[&ids[0]], &Options { wire: WireMode::PerLink, ..Options::default() });
    assert_eq!(r["traces"][0]["rows"], serde_json::to_value(&want.rows).unwrap());
    let rows = names(&r["traces"][0]["rows"]);
    let wires: Vec<&str> = rows.iter().map(|x| x.0.as_str()).filter(|n| n.starts_with("wire ")).collect();
    assert!(
        wires.contains(&"wire client→client-nic") && wires.contains(&"wire server-nic→server"),
        "{wires:?}"
    );
    assert!(wires.iter().all(|w| w.contains('→')), "{wires:?}");
    let total_wire = trace_breakdown(&traces[&ids[0]], &Options::default()).row("wire").unwrap().timeline_ns;
    assert_eq!(rows.iter().filter(|x| x.0.starts_with("wire ")).map(|x| x.1).sum::<u64>(), total_wire);
    let packets = "request: source.address=10.0.0.1; response: source.address=10.0.0.2";
    let r = s.get_json(&format!("/api/ui/breakdown?traces={}&wire=link&rules={}", list(&ids), enc(packets)));
    assert_eq!(r["unclassifiedTraces"], 0);
    assert!(r["unclassifiedSpans"].as_u64().unwrap() > 0, "the sending side is in no direction");
    let req = r["directions"][0]["components"].as_array().unwrap();
    let names_req: Vec<&str> = req.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert!(names_req.contains(&"wire ns3/sw0→ns3/sw1"), "{names_req:?}");
    assert!(req.iter().filter(|c| c["kind"] == "wire").all(|c| c["componentKind"].is_null()));
    assert!(req.iter().filter(|c| c["kind"] == "group").all(|c| c["componentKind"].is_string()));
    let r = s.get_json(&format!("/api/ui/breakdown?traces={}&by=service", ids[0]));
    let got: Vec<String> = names(&r["traces"][0]["rows"]).into_iter().map(|x| x.0).collect();
    assert!(got.contains(&"ns3".to_owned()) && !got.contains(&"ns3/sw0".to_owned()), "{got:?}");
    let r = s.get_json(&format!("/api/ui/breakdown?traces={}&by=operation", ids[0]));
    let want =
        trace_breakdown(&traces[&ids[0]], &Options { group_by: GroupBy::Operation, ..Options::default() });
    assert_eq!(r["traces"][0]["rows"], serde_json::to_value(&want.rows).unwrap());
    assert_eq!(r["by"], "operation");

    // Shop traces (OTel-SDK-like): rows by service add up; per root-name directions.
    let shop_ids: Vec<TraceId> = by_trace(&shop).into_keys().collect();
    let roots: BTreeSet<String> =
        shop.iter().filter(|s| s.parent_span_id.is_none()).map(|s| s.name.to_string()).collect();
    let rules: Vec<String> = roots.iter().map(|n| format!("{n}: root.name={n}")).collect();
    let r = s.get_json(&format!(
        "/api/ui/breakdown?by=service&traces={}&rules={}",
        list(&shop_ids),
        enc(&rules.join(";"))
    ));
    assert_eq!(r["traces"].as_array().unwrap().len(), shop_ids.len());
    for t in r["traces"].as_array().unwrap() {
        assert_eq!(names(&t["rows"]).iter().map(|x| x.1).sum::<u64>(), t["durationNs"].as_u64().unwrap());
    }
    let units: u64 = r["directions"].as_array().unwrap().iter().map(|d| d["units"].as_u64().unwrap()).sum();
    assert_eq!(units, shop_ids.len() as u64, "every shop trace in the direction of its root name");
    assert_eq!(r["unclassifiedTraces"], 0);

    // A prepared (cached) trace gives the same answer as one read from the store.
    let cold = s.get_json(&format!("/api/ui/breakdown?traces={}", ids[1]));
    s.get_json(&format!("/api/ui/trace/{}", ids[1]));
    let warm = s.get_json(&format!("/api/ui/breakdown?traces={}", ids[1]));
    assert_eq!(cold["traces"], warm["traces"]);
    assert_eq!(cold["directions"], warm["directions"]);

    // Unknown traces are listed, bad parameters are 400s naming the parameter.
    let gone = s.get_json(&format!("/api/ui/breakdown?traces={},0123456789abcdef0123456789abcdef", ids[0]));
    assert_eq!(gone["missing"], serde_json::json!(["0123456789abcdef0123456789abcdef"]));
    assert_eq!(gone["traces"].as_array().unwrap().len(), 1);
    let many: Vec<String> = (1..=501u64).map(|i| format!("{i:032x}")).collect();
    for (bad, needle) in [
        (String::new(), "needs trace ids"),
        ("traces=zz".to_owned(), "traces"),
        (format!("traces={}", many.join(",")), "more than 500"),
        (format!("traces={}&by=colour", ids[0]), "parameter by"),
        (format!("traces={}&wire=some", ids[0]), "parameter wire"),
        (format!("traces={}&rules={}", ids[0], enc("no label here")), "parameter rules"),
        (format!("traces={}&rules={}", ids[0], enc("x: a")), "not key=value"),
    ] {
        let (st, body) = s.get(&format!("/api/ui/breakdown?{bad}"));
        assert_eq!(st, 400, "{bad}: {body}");
        assert!(body.contains(needle), "{bad}: {body}");
    }
}

#[test]
fn breakdown_parameters() {
    use weft_analyze::breakdown::{GroupBy, WireMode};
    use weft_server::ui::breakdown::{group_name, parse};
    let p = |q: &[(&str, &str)]| parse(&q.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
    let a = "0123456789abcdef0123456789abcdef";
    let r = p(&[("traces", &format!(" {a} ,{a},,ff"))]).unwrap();
    assert_eq!(r.ids.len(), 2, "duplicates and empty entries dropped");
    assert_eq!(
        (r.opts.group_by.clone(), r.opts.wire, r.adjust),
        (GroupBy::Component, WireMode::Total, false)
    );
    assert_eq!(r.classifier.labels(), vec!["all"]);
    let r = p(&[
        ("traces", a),
        ("by", "attr:net.peer.ip"),
        ("wire", "link"),
        ("rules", " up: name=a* ;\n\n down: from=x|y ; up: to=z "),
        ("adjust", "true"),
    ])
    .unwrap();
    assert_eq!(group_name(&r.opts.group_by), "attr:net.peer.ip");
    assert_eq!((r.opts.wire, r.adjust), (WireMode::PerLink, true));
    assert_eq!(r.rules, ["up: name=a*", "down: from=x|y", "up: to=z"]);
    assert_eq!(r.classifier.labels(), vec!["up", "down"]);
    for g in ["component", "service", "operation", "attr:k"] {
        assert_eq!(group_name(&p(&[("traces", a), ("by", g)]).unwrap().opts.group_by), g);
    }
    let e = p(&[("traces", a), ("by", "attr:")]).unwrap_err();
    assert!(e.0.contains("malformed parameter by"), "{}", e.0);
    let too_many: Vec<String> = (0..64).map(|i| format!("r{i}: a=b")).chain(["last: a=b".into()]).collect();
    let e = p(&[("traces", a), ("rules", &too_many.join(";"))]).unwrap_err();
    assert!(e.0.contains("at most 64 rules"), "{}", e.0);
}

proptest::proptest! {
    /// Any text in any parameter is a request or an error naming that parameter, never a panic.
    #[test]
    fn breakdown_parameters_never_panic(
        key in proptest::sample::select(vec!["by", "wire", "rules", "traces", "adjust"]),
        v in "[ -~\n→]{0,60}",
    ) {
        use weft_server::ui::breakdown::parse;
        let mut p: HashMap<String, String> = HashMap::new();
        p.insert("traces".into(), "0123456789abcdef0123456789abcdef".into());
        p.insert(key.to_owned(), v.clone());
        match parse(&p) {
            Ok(r) => {
                proptest::prop_assert!(!r.ids.is_empty() && r.ids.len() <= 500);
                proptest::prop_assert!(!r.classifier.labels().is_empty());
            }
            Err(e) => {
                let names_it = e.0.contains(&format!("parameter {key}"))
                    || (key == "traces" && e.0.contains("needs trace ids"));
                proptest::prop_assert!(names_it, "{key}={v:?}: {}", e.0);
            }
        }
    }
}
