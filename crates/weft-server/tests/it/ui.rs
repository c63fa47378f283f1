//! The UI's assets and JSON API (`/`, `/ui/*`, `/api/ui/*`) — over real HTTP against a real
//! store loaded with shop traces and woven simulator requests.

use std::collections::{BTreeSet, HashMap};

use serde_json::Value as J;
use weft_model::codec::otlp;
use weft_model::{Span, TraceId};
use weft_server::demo::woven::{big_trace, woven_request};
use weft_server::ui::ASSETS;

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
    let html = r.body_mut().read_to_string().unwrap();
    assert!(html.contains("/ui/app.js") && html.contains("type=\"module\""));
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

#[test]
fn breakdown_splits_each_critical_path() {
    let s = TestServer::start();
    let now = weft_model::time::now_unix_nanos();
    let mut v = woven_request(70, now - 60_000_000_000);
    let shop = spans(34, 300);
    v.extend(shop.iter().cloned());
    post(&s, &v);
    let client = trace_named(&v, "host0", "rpc_call echo");
    let ids: Vec<String> =
        by_trace(&shop).keys().map(|t| t.to_string()).chain([client.to_string()]).collect();
    let r = s.get_json(&format!("/api/ui/breakdown?by=service&traces={}", ids.join(",")));
    let rows = r["traces"].as_array().unwrap();
    assert_eq!(rows.len(), ids.len());
    let mut total = 0;
    for t in rows {
        let parts: u64 = t["parts"].as_array().unwrap().iter().map(|p| p[1].as_u64().unwrap()).sum();
        assert_eq!(parts, t["criticalNs"].as_u64().unwrap(), "parts add up to the critical path");
        assert!(parts <= t["durationNs"].as_u64().unwrap());
        total += parts;
    }
    let totals: u64 = r["totals"].as_array().unwrap().iter().map(|p| p[1].as_u64().unwrap()).sum();
    assert_eq!(totals, total);
    let one = s.get_json(&format!("/api/ui/breakdown?by=component&traces={client}"));
    let keys: Vec<&str> = one["totals"].as_array().unwrap().iter().map(|p| p[0].as_str().unwrap()).collect();
    assert!(keys.contains(&"host0") && keys.contains(&"nic0"), "{keys:?}");
    assert_eq!(s.get("/api/ui/breakdown").0, 400);
    assert_eq!(s.get("/api/ui/breakdown?traces=zz").0, 400);
    let gone = s.get_json("/api/ui/breakdown?traces=0123456789abcdef0123456789abcdef");
    assert_eq!(gone["missing"].as_array().unwrap().len(), 1);
}
