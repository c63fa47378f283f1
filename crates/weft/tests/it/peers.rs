//! Real clients: the official OpenTelemetry Python SDK through its OTLP/HTTP protobuf (gzip),
//! OTLP/HTTP JSON and OTLP/gRPC exporters, and py_zipkin through its HTTP transport (Zipkin v2
//! JSON), each sending to a `weft serve` child. The spans are read back through the Zipkin v2
//! API, the Jaeger api_v3 API and SQL (`weft query`), and compared field by field with what the
//! client recorded sending.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

use serde_json::{Value as J, json};

use crate::WeftServe;

fn peer_script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests").join("peers").join(name)
}

/// Runs a peer script with the peers' Python; its stdout is JSON.
fn run_peer(script: &str, args: &[String]) -> J {
    let py = weft_testkit::python();
    let out = Command::new(&py).arg(peer_script(script)).args(args).output().expect("run the peer script");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{script} {args:?} failed ({}): {stderr}\n(its packages come from .ci/requirements.txt, installed by .ci/test)",
        out.status
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{script} printed no JSON ({e}): {}", String::from_utf8_lossy(&out.stdout))
    })
}

fn s(v: &J) -> &str {
    v.as_str().unwrap_or_else(|| panic!("expected a string, got {v}"))
}

fn u(v: &J) -> u64 {
    v.as_u64()
        .or_else(|| v.as_str().and_then(|t| t.parse().ok()))
        .unwrap_or_else(|| panic!("expected a u64, got {v}"))
}

/// A field that may be absent, with the value absence stands for.
fn or<'a>(v: &'a J, key: &str, absent: &'a J) -> &'a J {
    match v.get(key) {
        None | Some(J::Null) => absent,
        Some(x) => x,
    }
}

static EMPTY_LIST: J = J::Array(Vec::new());
static EMPTY_STR: J = J::Null;

fn str_or_empty<'a>(v: &'a J, key: &str) -> &'a str {
    or(v, key, &EMPTY_STR).as_str().unwrap_or("")
}

// ---- the SDK's typed values, in each read API's form ------------------------------------

/// OTLP/JSON `AnyValue` (ints as decimal strings, as the OTLP JSON encoding requires).
fn otlp_any(t: &J) -> J {
    let v = &t["value"];
    match s(&t["type"]) {
        "string" => json!({"stringValue": v}),
        "int" => json!({"intValue": v.as_i64().expect("int").to_string()}),
        "double" => json!({"doubleValue": v}),
        "bool" => json!({"boolValue": v}),
        "array" => {
            json!({"arrayValue": {"values": v.as_array().expect("array").iter().map(otlp_any).collect::<Vec<_>>()}})
        }
        other => panic!("unexpected type {other}"),
    }
}

fn otlp_attrs(list: &J) -> J {
    J::Array(
        list.as_array()
            .expect("attribute list")
            .iter()
            .map(|a| json!({"key": a["key"], "value": otlp_any(a)}))
            .collect(),
    )
}

/// The plain JSON of a value (arrays of plain values).
fn plain(t: &J) -> J {
    match s(&t["type"]) {
        "array" => J::Array(t["value"].as_array().expect("array").iter().map(plain).collect()),
        _ => t["value"].clone(),
    }
}

/// Text of a value, as weft's SQL maps and Zipkin tags hold it: strings as they are, numbers
/// and booleans as literals (doubles in shortest round-trip form), arrays as compact JSON.
fn text(t: &J) -> String {
    match s(&t["type"]) {
        "string" => s(&t["value"]).to_owned(),
        "double" => t["value"].as_f64().expect("double").to_string(),
        "array" => plain(t).to_string(),
        _ => t["value"].to_string(),
    }
}

fn type_tag(t: &J) -> char {
    match s(&t["type"]) {
        "string" => 's',
        "int" => 'i',
        "double" => 'd',
        "bool" => 'b',
        "array" => 'a',
        other => panic!("unexpected type {other}"),
    }
}

fn text_map(list: &J) -> BTreeMap<String, String> {
    list.as_array().expect("attributes").iter().map(|a| (s(&a["key"]).to_owned(), text(a))).collect()
}

fn type_tags(list: &J) -> String {
    list.as_array().expect("attributes").iter().map(type_tag).collect()
}

fn find_attr<'a>(list: &'a J, key: &str) -> Option<&'a J> {
    list.as_array()?.iter().find(|a| a["key"] == key)
}

fn otlp_kind(k: &str) -> u64 {
    match k {
        "INTERNAL" => 1,
        "SERVER" => 2,
        "CLIENT" => 3,
        "PRODUCER" => 4,
        "CONSUMER" => 5,
        _ => 0,
    }
}

fn otlp_status(code: &str) -> u64 {
    match code {
        "OK" => 1,
        "ERROR" => 2,
        _ => 0,
    }
}

// ---- Jaeger api_v3 ----------------------------------------------------------------------

/// Every span of a Jaeger api_v3 `traces/{id}` answer, flattened with its resource and scope.
fn jaeger_spans(srv: &WeftServe, trace_id: &str) -> BTreeMap<String, (J, J, J)> {
    let v = srv.get_json(srv.http, &format!("/api/v3/traces/{trace_id}"));
    let mut out = BTreeMap::new();
    for rs in v["result"]["resourceSpans"].as_array().expect("resourceSpans") {
        for ss in rs["scopeSpans"].as_array().expect("scopeSpans") {
            for sp in ss["spans"].as_array().expect("spans") {
                assert_eq!(s(&sp["traceId"]), trace_id);
                out.insert(
                    s(&sp["spanId"]).to_owned(),
                    (sp.clone(), rs["resource"].clone(), ss["scope"].clone()),
                );
            }
        }
    }
    out
}

fn check_jaeger_otel(srv: &WeftServe, want: &[J]) {
    let traces: BTreeSet<&str> = want.iter().map(|w| s(&w["trace_id"])).collect();
    let mut got = BTreeMap::new();
    for t in &traces {
        got.extend(jaeger_spans(srv, t));
    }
    assert_eq!(got.len(), want.len(), "Jaeger: span count");
    for w in want {
        let id = s(&w["span_id"]);
        let (sp, res, scope) = got.get(id).unwrap_or_else(|| panic!("Jaeger: span {id} missing"));
        let ctx = format!("Jaeger span {id} ({})", w["name"]);
        assert_eq!(sp["traceId"], w["trace_id"], "{ctx}: traceId");
        assert_eq!(
            str_or_empty(sp, "parentSpanId"),
            w["parent_span_id"].as_str().unwrap_or(""),
            "{ctx}: parentSpanId"
        );
        assert_eq!(str_or_empty(sp, "traceState"), s(&w["trace_state"]), "{ctx}: traceState");
        assert_eq!(sp["name"], w["name"], "{ctx}: name");
        assert_eq!(u(&sp["kind"]), otlp_kind(s(&w["kind"])), "{ctx}: kind");
        assert_eq!(u(&sp["startTimeUnixNano"]), u(&w["start_ns"]), "{ctx}: start");
        assert_eq!(u(&sp["endTimeUnixNano"]), u(&w["end_ns"]), "{ctx}: end");
        assert_eq!(or(sp, "attributes", &EMPTY_LIST), &otlp_attrs(&w["attributes"]), "{ctx}: attributes");
        let status = or(sp, "status", &J::Null);
        assert_eq!(
            status.get("code").map(u).unwrap_or(0),
            otlp_status(s(&w["status_code"])),
            "{ctx}: status code"
        );
        assert_eq!(str_or_empty(status, "message"), s(&w["status_message"]), "{ctx}: status message");
        let events = or(sp, "events", &EMPTY_LIST).as_array().expect("events");
        let want_events = w["events"].as_array().expect("events");
        assert_eq!(events.len(), want_events.len(), "{ctx}: events");
        for (e, we) in events.iter().zip(want_events) {
            assert_eq!(e["name"], we["name"], "{ctx}: event name");
            assert_eq!(u(&e["timeUnixNano"]), u(&we["time_ns"]), "{ctx}: event time");
            assert_eq!(
                or(e, "attributes", &EMPTY_LIST),
                &otlp_attrs(&we["attributes"]),
                "{ctx}: event attributes"
            );
        }
        let links = or(sp, "links", &EMPTY_LIST).as_array().expect("links");
        let want_links = w["links"].as_array().expect("links");
        assert_eq!(links.len(), want_links.len(), "{ctx}: links");
        for (l, wl) in links.iter().zip(want_links) {
            assert_eq!(l["traceId"], wl["trace_id"], "{ctx}: link traceId");
            assert_eq!(l["spanId"], wl["span_id"], "{ctx}: link spanId");
            assert_eq!(str_or_empty(l, "traceState"), s(&wl["trace_state"]), "{ctx}: link traceState");
            assert_eq!(
                or(l, "attributes", &EMPTY_LIST),
                &otlp_attrs(&wl["attributes"]),
                "{ctx}: link attributes"
            );
        }
        assert_eq!(or(res, "attributes", &EMPTY_LIST), &otlp_attrs(&w["resource"]), "{ctx}: resource");
        assert_eq!(scope["name"], w["scope_name"], "{ctx}: scope name");
        assert_eq!(str_or_empty(scope, "version"), s(&w["scope_version"]), "{ctx}: scope version");
        assert_eq!(
            or(scope, "attributes", &EMPTY_LIST),
            &otlp_attrs(&w["scope_attributes"]),
            "{ctx}: scope attributes"
        );
    }
    // The service and its operations are listed.
    let service =
        s(&find_attr(&want[0]["resource"], "service.name").expect("service.name")["value"]).to_owned();
    let services = srv.get_json(srv.http, "/api/v3/services");
    assert!(
        services["services"].as_array().expect("services").iter().any(|x| x == service.as_str()),
        "{services}"
    );
    let ops = srv.get_json(srv.http, &format!("/api/v3/operations?service={service}"));
    let names: BTreeSet<&str> =
        ops["operations"].as_array().expect("operations").iter().map(|o| s(&o["name"])).collect();
    let want_names: BTreeSet<&str> = want.iter().map(|w| s(&w["name"])).collect();
    assert_eq!(names, want_names, "Jaeger operations of {service}");
}

// ---- Zipkin v2 --------------------------------------------------------------------------

/// What the Zipkin v2 API must answer for a span the SDK recorded (weft's documented mapping,
/// which is OpenTelemetry's: µs times, tags as text, arrays as JSON, events as annotations with
/// `{"name":{attributes}}` values, status as `error`/`otel.status_code`, scope as tags,
/// `peer.service` as the remote endpoint).
fn zipkin_expected(w: &J) -> J {
    let start = u(&w["start_ns"]);
    let end = u(&w["end_ns"]);
    let ts = start / 1000;
    let mut z = json!({
        "traceId": w["trace_id"],
        "id": w["span_id"],
        "name": w["name"],
        "timestamp": ts,
        "duration": (end / 1000 - ts).max(1),
        "localEndpoint": {"serviceName": find_attr(&w["resource"], "service.name").expect("service.name")["value"]},
    });
    if let Some(p) = w["parent_span_id"].as_str() {
        z["parentId"] = p.into();
    }
    if s(&w["kind"]) != "INTERNAL" {
        z["kind"] = w["kind"].clone();
    }
    let mut tags = serde_json::Map::new();
    for a in w["attributes"].as_array().expect("attributes") {
        if a["key"] == "peer.service" {
            z["remoteEndpoint"] = json!({"serviceName": a["value"]});
        } else {
            tags.insert(s(&a["key"]).to_owned(), text(a).into());
        }
    }
    match s(&w["status_code"]) {
        "OK" => {
            tags.insert("otel.status_code".into(), "OK".into());
        }
        "ERROR" => {
            tags.insert("error".into(), w["status_message"].clone());
        }
        _ => {}
    }
    tags.insert("otel.scope.name".into(), w["scope_name"].clone());
    tags.insert("otel.scope.version".into(), w["scope_version"].clone());
    z["tags"] = J::Object(tags);
    let annotations: Vec<J> = w["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| {
            let attrs = e["attributes"].as_array().expect("attributes");
            let value = if attrs.is_empty() {
                e["name"].clone()
            } else {
                let m: serde_json::Map<String, J> =
                    attrs.iter().map(|a| (s(&a["key"]).to_owned(), plain(a))).collect();
                json!({ s(&e["name"]): m }).to_string().into()
            };
            json!({"timestamp": u(&e["time_ns"]) / 1000, "value": value})
        })
        .collect();
    if !annotations.is_empty() {
        z["annotations"] = J::Array(annotations);
    }
    z
}

/// The spans of a Zipkin `trace/{id}` answer by span id.
fn zipkin_trace(srv: &WeftServe, trace_id: &str) -> BTreeMap<String, J> {
    let v = srv.get_json(srv.http, &format!("/api/v2/trace/{trace_id}"));
    v.as_array()
        .expect("a Zipkin trace is a list")
        .iter()
        .map(|sp| (s(&sp["id"]).to_owned(), sp.clone()))
        .collect()
}

/// Zipkin objects compared key by key (annotation values that are JSON compared as JSON).
fn assert_zipkin_eq(got: &J, want: &J, ctx: &str) {
    let (g, w) = (got.as_object().expect("object"), want.as_object().expect("object"));
    let keys: BTreeSet<&String> = g.keys().chain(w.keys()).collect();
    for k in keys {
        let (gv, wv) = (g.get(k).unwrap_or(&J::Null), w.get(k).unwrap_or(&J::Null));
        if k == "annotations" {
            let (ga, wa) =
                (or(got, k, &EMPTY_LIST).as_array().unwrap(), or(want, k, &EMPTY_LIST).as_array().unwrap());
            assert_eq!(ga.len(), wa.len(), "{ctx}: annotations: {gv} vs {wv}");
            for (a, b) in ga.iter().zip(wa) {
                assert_eq!(a["timestamp"], b["timestamp"], "{ctx}: annotation time");
                let parse =
                    |x: &J| serde_json::from_str::<J>(s(&x["value"])).unwrap_or_else(|_| x["value"].clone());
                assert_eq!(parse(a), parse(b), "{ctx}: annotation value");
            }
        } else {
            assert_eq!(gv, wv, "{ctx}: field {k}");
        }
    }
}

fn check_zipkin_otel(srv: &WeftServe, want: &[J]) {
    let traces: BTreeSet<&str> = want.iter().map(|w| s(&w["trace_id"])).collect();
    let mut got = BTreeMap::new();
    for t in &traces {
        got.extend(zipkin_trace(srv, t));
    }
    assert_eq!(got.len(), want.len(), "Zipkin: span count");
    for w in want {
        let id = s(&w["span_id"]);
        let g = got.get(id).unwrap_or_else(|| panic!("Zipkin: span {id} missing"));
        assert_zipkin_eq(g, &zipkin_expected(w), &format!("Zipkin span {id} ({})", w["name"]));
    }
    let service = find_attr(&want[0]["resource"], "service.name").expect("service.name")["value"].clone();
    let services = srv.get_json(srv.http, "/api/v2/services");
    assert!(services.as_array().expect("services").contains(&service), "{services}");
}

// ---- SQL --------------------------------------------------------------------------------

fn map_of(v: &J) -> BTreeMap<String, String> {
    v.as_object()
        .unwrap_or_else(|| panic!("expected a map, got {v}"))
        .iter()
        .map(|(k, v)| (k.clone(), s(v).to_owned()))
        .collect()
}

/// A `span_events` row: span id, time, name, attributes as text, type tags.
type EventRow = (String, u64, String, BTreeMap<String, String>, String);

fn check_sql_otel(srv: &WeftServe, want: &[J]) {
    let traces: BTreeSet<&str> = want.iter().map(|w| s(&w["trace_id"])).collect();
    let in_list = traces.iter().map(|t| format!("decode('{t}', 'hex')")).collect::<Vec<_>>().join(", ");
    let rows = srv.query(&format!(
        "SELECT encode(span_id, 'hex'), encode(trace_id, 'hex'), encode(parent_span_id, 'hex'), trace_state, name, kind, \
         CAST(start_time AS BIGINT), duration_ns, status_code, status_message, service_name, attributes, attribute_types, \
         resource_attributes, resource_attribute_types, scope_name, scope_version, scope_attributes, scope_attribute_types \
         FROM spans WHERE trace_id IN ({in_list})"
    ));
    assert_eq!(rows.len(), want.len(), "SQL: span rows");
    let by_id: BTreeMap<&str, &Vec<J>> = rows.iter().map(|r| (s(&r[0]), r)).collect();
    for w in want {
        let id = s(&w["span_id"]);
        let r = by_id.get(id).unwrap_or_else(|| panic!("SQL: span {id} missing"));
        let ctx = format!("SQL span {id} ({})", w["name"]);
        assert_eq!(r[1], w["trace_id"], "{ctx}: trace_id");
        assert_eq!(r[2].as_str(), w["parent_span_id"].as_str(), "{ctx}: parent_span_id");
        assert_eq!(r[3], w["trace_state"], "{ctx}: trace_state");
        assert_eq!(r[4], w["name"], "{ctx}: name");
        assert_eq!(s(&r[5]), s(&w["kind"]).to_ascii_lowercase(), "{ctx}: kind");
        assert_eq!(r[6].as_i64().map(|x| x as u64), Some(u(&w["start_ns"])), "{ctx}: start_time");
        assert_eq!(r[7].as_u64(), Some(u(&w["end_ns"]) - u(&w["start_ns"])), "{ctx}: duration_ns");
        assert_eq!(s(&r[8]), s(&w["status_code"]).to_ascii_lowercase(), "{ctx}: status_code");
        assert_eq!(r[9], w["status_message"], "{ctx}: status_message");
        let svc = find_attr(&w["resource"], "service.name").expect("service.name");
        assert_eq!(r[10], svc["value"], "{ctx}: service_name");
        assert_eq!(map_of(&r[11]), text_map(&w["attributes"]), "{ctx}: attributes");
        assert_eq!(s(&r[12]), type_tags(&w["attributes"]), "{ctx}: attribute_types");
        assert_eq!(map_of(&r[13]), text_map(&w["resource"]), "{ctx}: resource_attributes");
        assert_eq!(s(&r[14]), type_tags(&w["resource"]), "{ctx}: resource_attribute_types");
        assert_eq!(r[15], w["scope_name"], "{ctx}: scope_name");
        assert_eq!(r[16], w["scope_version"], "{ctx}: scope_version");
        assert_eq!(map_of(&r[17]), text_map(&w["scope_attributes"]), "{ctx}: scope_attributes");
        assert_eq!(s(&r[18]), type_tags(&w["scope_attributes"]), "{ctx}: scope_attribute_types");
    }

    let events = srv.query(&format!(
        "SELECT encode(span_id, 'hex'), CAST(time AS BIGINT), name, attributes, attribute_types FROM span_events \
         WHERE trace_id IN ({in_list}) ORDER BY 1, 2"
    ));
    let mut want_events: Vec<EventRow> = want
        .iter()
        .flat_map(|w| {
            w["events"].as_array().expect("events").iter().map(move |e| {
                (
                    s(&w["span_id"]).to_owned(),
                    u(&e["time_ns"]),
                    s(&e["name"]).to_owned(),
                    text_map(&e["attributes"]),
                    type_tags(&e["attributes"]),
                )
            })
        })
        .collect();
    want_events.sort();
    let got_events: Vec<_> = events
        .iter()
        .map(|r| {
            (
                s(&r[0]).to_owned(),
                r[1].as_i64().unwrap_or(-1) as u64,
                s(&r[2]).to_owned(),
                map_of(&r[3]),
                s(&r[4]).to_owned(),
            )
        })
        .collect();
    assert_eq!(got_events, want_events, "SQL: span_events");

    let links = srv.query(&format!(
        "SELECT encode(span_id, 'hex'), encode(linked_trace_id, 'hex'), encode(linked_span_id, 'hex'), trace_state, \
         attributes, attribute_types FROM span_links WHERE trace_id IN ({in_list})"
    ));
    let mut want_links: Vec<_> = want
        .iter()
        .flat_map(|w| {
            w["links"].as_array().expect("links").iter().map(move |l| {
                (
                    s(&w["span_id"]).to_owned(),
                    s(&l["trace_id"]).to_owned(),
                    s(&l["span_id"]).to_owned(),
                    s(&l["trace_state"]).to_owned(),
                    text_map(&l["attributes"]),
                    type_tags(&l["attributes"]),
                )
            })
        })
        .collect();
    want_links.sort();
    let mut got_links: Vec<_> = links
        .iter()
        .map(|r| {
            (
                s(&r[0]).to_owned(),
                s(&r[1]).to_owned(),
                s(&r[2]).to_owned(),
                s(&r[3]).to_owned(),
                map_of(&r[4]),
                s(&r[5]).to_owned(),
            )
        })
        .collect();
    got_links.sort();
    assert_eq!(got_links, want_links, "SQL: span_links");
}

// ---- the OpenTelemetry SDK --------------------------------------------------------------

fn otel_round_trip(mode: &str) {
    let dir = tempfile::tempdir().unwrap();
    let srv = WeftServe::start(dir.path(), &[]);
    let target = match mode {
        "grpc" => srv.otlp_grpc.to_string(),
        _ => format!("http://{}/v1/traces", srv.otlp_http),
    };
    let sent = run_peer("otel_send.py", &[mode.to_owned(), target]);
    let want = sent["spans"].as_array().expect("spans").clone();
    assert_eq!(want.len(), 5, "the script's workload");
    // The workload really covers what the comparison claims to.
    let kinds: BTreeSet<&str> = want.iter().map(|w| s(&w["kind"])).collect();
    assert_eq!(kinds.len(), 5, "{kinds:?}");
    assert!(want.iter().any(|w| !w["links"].as_array().unwrap().is_empty()));
    assert!(want.iter().any(|w| !s(&w["trace_state"]).is_empty()));
    let receiver = if mode == "grpc" { "otlp_grpc" } else { "otlp_http" };
    assert_eq!(
        srv.metric(&format!("weft_spans_accepted_total{{receiver=\"{receiver}\"}}")),
        want.len() as f64
    );

    check_jaeger_otel(&srv, &want);
    check_zipkin_otel(&srv, &want);
    check_sql_otel(&srv, &want);

    // After a clean restart the same answers come from a Parquet segment instead of the buffer.
    let out = srv.stop();
    assert!(out.iter().any(|l| l.starts_with("stopped:")), "{out:?}");
    let srv = WeftServe::start(dir.path(), &[]);
    check_jaeger_otel(&srv, &want);
    check_sql_otel(&srv, &want);
}

#[test]
fn otel_python_sdk_otlp_http_protobuf() {
    otel_round_trip("http-proto");
}

#[test]
fn otel_python_sdk_otlp_http_json() {
    otel_round_trip("http-json");
}

#[test]
fn otel_python_sdk_otlp_grpc() {
    otel_round_trip("grpc");
}

// ---- py_zipkin --------------------------------------------------------------------------

#[test]
fn py_zipkin_v2_json() {
    let dir = tempfile::tempdir().unwrap();
    let srv = WeftServe::start(dir.path(), &[]);
    let sent = run_peer("zipkin_send.py", &[srv.zipkin.ip().to_string(), srv.zipkin.port().to_string()]);
    let want: Vec<J> = sent["payloads"]
        .as_array()
        .expect("payloads")
        .iter()
        .flat_map(|p| p.as_array().unwrap().clone())
        .collect();
    assert_eq!(want.len(), 3, "{want:?}");
    assert_eq!(srv.metric("weft_spans_accepted_total{receiver=\"zipkin\"}"), 3.0);
    let trace = s(&want[0]["traceId"]).to_owned();
    assert_eq!(trace.len(), 32, "128-bit trace ids");

    // Zipkin API: exactly what py_zipkin sent.
    let got = zipkin_trace(&srv, &trace);
    assert_eq!(got.len(), want.len());
    for w in &want {
        let id = s(&w["id"]);
        assert_zipkin_eq(
            got.get(id).unwrap_or_else(|| panic!("span {id} missing")),
            w,
            &format!("Zipkin span {id}"),
        );
    }
    let names: BTreeSet<String> =
        serde_json::from_value(srv.get_json(srv.http, "/api/v2/spans?serviceName=py-zipkin-frontend"))
            .unwrap();
    assert_eq!(names, want.iter().map(|w| s(&w["name"]).to_owned()).collect());
    let remote: Vec<String> = serde_json::from_value(
        srv.get_json(srv.http, "/api/v2/remoteServices?serviceName=py-zipkin-frontend"),
    )
    .unwrap();
    assert_eq!(remote, vec!["redis".to_owned()]);

    // Jaeger api_v3: the Zipkin fields in OTLP form (endpoints as net.* / peer.service
    // attributes, the error tag as an error status, annotations as events).
    let jaeger = jaeger_spans(&srv, &trace);
    assert_eq!(jaeger.len(), want.len());
    for w in &want {
        let id = s(&w["id"]);
        let (sp, res, _) = &jaeger[id];
        let ctx = format!("Jaeger span {id}");
        assert_eq!(sp["name"], w["name"], "{ctx}");
        assert_eq!(str_or_empty(sp, "parentSpanId"), str_or_empty(w, "parentId"), "{ctx}");
        let kind = w.get("kind").and_then(J::as_str).unwrap_or("");
        assert_eq!(u(&sp["kind"]), otlp_kind(kind), "{ctx}: kind");
        let ts = u(&w["timestamp"]);
        assert_eq!(u(&sp["startTimeUnixNano"]), ts * 1000, "{ctx}: start");
        assert_eq!(u(&sp["endTimeUnixNano"]), (ts + u(&w["duration"])) * 1000, "{ctx}: end");
        assert_eq!(
            res["attributes"],
            json!([{"key": "service.name", "value": {"stringValue": w["localEndpoint"]["serviceName"]}}]),
            "{ctx}: resource"
        );
        let mut want_attrs: Vec<J> = Vec::new();
        let mut error = None;
        for (k, v) in w["tags"].as_object().expect("tags") {
            if k == "error" {
                error = Some(v.clone());
            } else {
                want_attrs.push(json!({"key": k, "value": {"stringValue": v}}));
            }
        }
        let le = &w["localEndpoint"];
        want_attrs.push(json!({"key": "net.host.ip", "value": {"stringValue": le["ipv4"]}}));
        want_attrs.push(json!({"key": "net.host.port", "value": {"intValue": le["port"].to_string()}}));
        if let Some(re) = w.get("remoteEndpoint") {
            want_attrs.push(json!({"key": "peer.service", "value": {"stringValue": re["serviceName"]}}));
            want_attrs.push(json!({"key": "net.peer.ip", "value": {"stringValue": re["ipv4"]}}));
            want_attrs.push(json!({"key": "net.peer.port", "value": {"intValue": re["port"].to_string()}}));
        }
        let got_attrs: BTreeSet<String> =
            or(sp, "attributes", &EMPTY_LIST).as_array().unwrap().iter().map(J::to_string).collect();
        let want_set: BTreeSet<String> = want_attrs.iter().map(J::to_string).collect();
        assert_eq!(got_attrs, want_set, "{ctx}: attributes");
        let status = or(sp, "status", &J::Null);
        match &error {
            Some(msg) => {
                assert_eq!(u(&status["code"]), 2, "{ctx}: status");
                assert_eq!(status["message"], *msg, "{ctx}: status message");
            }
            None => assert_eq!(status.get("code").map(u).unwrap_or(0), 0, "{ctx}: status"),
        }
        let events: Vec<(u64, String)> = or(sp, "events", &EMPTY_LIST)
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (u(&e["timeUnixNano"]), s(&e["name"]).to_owned()))
            .collect();
        let want_events: Vec<(u64, String)> = or(w, "annotations", &EMPTY_LIST)
            .as_array()
            .unwrap()
            .iter()
            .map(|a| (u(&a["timestamp"]) * 1000, s(&a["value"]).to_owned()))
            .collect();
        assert_eq!(events, want_events, "{ctx}: events");
    }

    // SQL.
    let rows = srv.query(&format!(
        "SELECT encode(span_id, 'hex'), name, kind, CAST(start_time AS BIGINT), duration_ns, service_name, status_code, \
         status_message, attributes['http.method'], attributes['net.peer.ip'], attributes['db.system'] \
         FROM spans WHERE trace_id = decode('{trace}', 'hex')"
    ));
    assert_eq!(rows.len(), want.len());
    for r in &rows {
        let w = want.iter().find(|w| w["id"] == r[0]).unwrap_or_else(|| panic!("SQL row {r:?} was not sent"));
        let ctx = format!("SQL span {}", r[0]);
        assert_eq!(r[1], w["name"], "{ctx}");
        let kind = w.get("kind").and_then(J::as_str).unwrap_or("unspecified").to_ascii_lowercase();
        assert_eq!(s(&r[2]), kind, "{ctx}");
        assert_eq!(r[3].as_u64(), Some(u(&w["timestamp"]) * 1000), "{ctx}");
        assert_eq!(r[4].as_u64(), Some(u(&w["duration"]) * 1000), "{ctx}");
        assert_eq!(r[5], w["localEndpoint"]["serviceName"], "{ctx}");
        let err = w["tags"].get("error");
        assert_eq!(s(&r[6]), if err.is_some() { "error" } else { "unset" }, "{ctx}");
        assert_eq!(r[7].as_str(), Some(err.and_then(J::as_str).unwrap_or("")), "{ctx}");
        assert_eq!(r[8], *w["tags"].get("http.method").unwrap_or(&J::Null), "{ctx}");
        assert_eq!(r[9], *w.get("remoteEndpoint").map(|e| &e["ipv4"]).unwrap_or(&J::Null), "{ctx}");
        assert_eq!(r[10], *w["tags"].get("db.system").unwrap_or(&J::Null), "{ctx}");
    }
    let ann =
        srv.query(&format!("SELECT count(*) FROM span_events WHERE trace_id = decode('{trace}', 'hex')"));
    let n_ann: u64 =
        want.iter().map(|w| or(w, "annotations", &EMPTY_LIST).as_array().unwrap().len() as u64).sum();
    assert_eq!(ann[0][0].as_u64(), Some(n_ann));
}
