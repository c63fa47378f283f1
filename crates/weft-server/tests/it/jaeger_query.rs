//! The Jaeger query service's HTTP JSON API: a trace written from the facts of Jaeger's own
//! converter fixture (`ui_01.json`: 64-bit trace id `0000000000000001`, typed tags including an
//! int64 beyond JavaScript's safe integers and a binary blob, CHILD_OF / FOLLOWS_FROM
//! references, processes `p1`/`p2`, logs with an `event` field) is stored through OTLP and
//! read back as exactly the UI JSON Jaeger's query service answers; the requests Grafana's
//! Jaeger data source and Jaeger UI send are answered; bad parameters get Jaeger's error shape.

use std::sync::Arc;

use serde_json::{Value as J, json};
use weft_model::codec::otlp;
use weft_model::{
    Attributes, Link, LinkRelation, Resource, Scope, Span, SpanEvent, SpanId, SpanKind, Status, StatusCode,
    TraceId, Value,
};

use crate::TestServer;

/// `startTime` of the fixture's spans, µs since the epoch.
const T_US: u64 = 1_485_467_191_639_875;

fn tid(n: u128) -> TraceId {
    TraceId::from_u128(n)
}

fn sid(n: u64) -> SpanId {
    SpanId(n.to_be_bytes())
}

/// The fixture's trace: service-x calls service-y twice; one span has every tag type and two
/// logs (one without a name), one has a link to another trace and a FOLLOWS_FROM reference.
fn fixture_trace() -> Vec<Span> {
    let x = Arc::new(Resource::service("service-x"));
    let mut y = Resource::service("service-y");
    y.attributes.push("host.name", "host-y");
    let y = Arc::new(y);
    let scope = Arc::new(Scope::default());
    let span = |id: u64, parent: Option<u64>, name: &str, at_us: u64, dur_us: u64, r: &Arc<Resource>| Span {
        trace_id: tid(1),
        span_id: sid(id),
        parent_span_id: parent.map(sid),
        name: name.into(),
        start_ns: (T_US + at_us) * 1000,
        end_ns: (T_US + at_us + dur_us) * 1000,
        ..Span::with_context(r.clone(), scope.clone())
    };
    let mut a = span(2, None, "some-operation", 0, 5, &x);
    a.kind = SpanKind::Server;
    a.status = Status { code: StatusCode::Error, message: String::new() };
    let mut tags = Attributes::new();
    tags.push("peer.service", "service-y");
    tags.push("peer.ipv4", Value::I64(23456));
    tags.push("temperature", Value::F64(72.5));
    tags.push("javascript_limit", Value::I64(9_223_372_036_854_775_222));
    tags.push("blob", Value::Bytes(vec![0, 0, 0x30, 0x39]));
    a.attributes = tags;
    let mut xy = Attributes::new();
    xy.push("x", "y");
    a.events = vec![
        SpanEvent { time_ns: T_US * 1000, name: "some-event".into(), ..SpanEvent::default() },
        SpanEvent { time_ns: T_US * 1000, name: "".into(), attributes: xy, dropped_attributes_count: 0 },
    ];
    let mut b = span(3, Some(2), "some-operation", 1, 5, &y);
    b.kind = SpanKind::Server;
    let mut c = span(4, Some(2), "reference-test", 2, 5, &y);
    c.links = vec![
        Link { trace_id: tid(0xff), span_id: sid(0xff), relation: LinkRelation::ChildOf, ..Link::default() },
        Link { trace_id: tid(1), span_id: sid(2), relation: LinkRelation::FollowsFrom, ..Link::default() },
    ];
    let d = span(5, Some(4), "preserveParentID-test", 3, 4, &y);
    vec![a, b, c, d]
}

/// The UI JSON Jaeger's query service answers for [`fixture_trace`] (field names, nesting,
/// value types and the reference/process layout of Jaeger's `ui_01.json`).
fn expected_trace() -> J {
    let reference = |kind: &str, t: &str, s: &str| json!({"refType": kind, "traceID": t, "spanID": s});
    let span = |id: &str, name: &str, refs: J, at: u64, dur: u64, tags: J, logs: J, p: &str| {
        json!({
            "traceID": "0000000000000001", "spanID": id, "operationName": name, "references": refs,
            "startTime": T_US + at, "duration": dur, "tags": tags, "logs": logs, "processID": p,
            "warnings": null,
        })
    };
    let kind = |k: &str| json!({"key": "span.kind", "type": "string", "value": k});
    json!({
        "traceID": "0000000000000001",
        "spans": [
            span("0000000000000002", "some-operation", json!([]), 0, 5, json!([
                {"key": "peer.service", "type": "string", "value": "service-y"},
                {"key": "peer.ipv4", "type": "int64", "value": 23456},
                {"key": "temperature", "type": "float64", "value": 72.5},
                {"key": "javascript_limit", "type": "int64", "value": "9223372036854775222"},
                {"key": "blob", "type": "binary", "value": "AAAwOQ=="},
                kind("server"),
                {"key": "error", "type": "bool", "value": true},
                {"key": "otel.status_code", "type": "string", "value": "ERROR"},
            ]), json!([
                {"timestamp": T_US, "fields": [{"key": "event", "type": "string", "value": "some-event"}]},
                {"timestamp": T_US, "fields": [{"key": "x", "type": "string", "value": "y"}]},
            ]), "p1"),
            span("0000000000000003", "some-operation",
                json!([reference("CHILD_OF", "0000000000000001", "0000000000000002")]),
                1, 5, json!([kind("server")]), json!([]), "p2"),
            span("0000000000000004", "reference-test", json!([
                reference("CHILD_OF", "0000000000000001", "0000000000000002"),
                reference("CHILD_OF", "00000000000000ff", "00000000000000ff"),
                reference("FOLLOWS_FROM", "0000000000000001", "0000000000000002"),
            ]), 2, 5, json!([]), json!([]), "p2"),
            span("0000000000000005", "preserveParentID-test",
                json!([reference("CHILD_OF", "0000000000000001", "0000000000000004")]),
                3, 4, json!([]), json!([]), "p2"),
        ],
        "processes": {
            "p1": {"serviceName": "service-x", "tags": []},
            "p2": {"serviceName": "service-y", "tags": [{"key": "host.name", "type": "string", "value": "host-y"}]},
        },
        "warnings": null,
    })
}

fn load(s: &TestServer) {
    let (st, _, body) = s.post(
        "/v1/traces",
        &[("Content-Type", "application/x-protobuf")],
        &otlp::encode_proto(&fixture_trace()),
    );
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
}

/// Jaeger's envelope around `data`, with `errors`.
fn envelope(data: J, total: u64, errors: J) -> J {
    json!({"data": data, "total": total, "limit": 0, "offset": 0, "errors": errors})
}

/// `(start, end)` of a window around the fixture, in µs (as Jaeger UI and Grafana send).
fn window_us() -> (u64, u64) {
    (T_US - 3_600_000_000, T_US + 3_600_000_000)
}

#[test]
fn trace_is_jaegers_ui_json() {
    let s = TestServer::start();
    load(&s);
    let got = s.get_json("/api/traces/0000000000000001");
    assert_eq!(got, envelope(json!([expected_trace()]), 0, J::Null), "{got:#}");
    // The same trace by its 32-digit id, and through a search.
    assert_eq!(s.get_json("/api/traces/00000000000000000000000000000001"), got);
    let (start, end) = window_us();
    let found = s.get_json(&format!("/api/traces?service=service-x&start={start}&end={end}"));
    assert_eq!(found, got);
}

#[test]
fn grafana_requests_are_answered() {
    let s = TestServer::start();
    load(&s);
    // Services() and Operations(s): `data` is a list of names.
    assert_eq!(s.get_json("/api/services"), envelope(json!(["service-x", "service-y"]), 2, J::Null));
    assert_eq!(
        s.get_json("/api/services/service-y/operations"),
        envelope(json!(["preserveParentID-test", "reference-test", "some-operation"]), 3, J::Null)
    );
    // Search(query, start, end): url.Values.Encode() order, tags as JSON from logfmt, µs times.
    let (start, end) = window_us();
    let tags = "%7B%22peer.ipv4%22%3A%2223456%22%7D";
    let path = format!(
        "/api/traces?end={end}&limit=20&maxDuration=1s&minDuration=1us&operation=some-operation&service=service-x&start={start}&tags={tags}"
    );
    let v = s.get_json(&path);
    assert_eq!(v["data"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["data"][0]["traceID"], "0000000000000001");
    // A tag no span has, and a duration no span has, find nothing (an empty list, not null).
    let none =
        format!("/api/traces?service=service-x&start={start}&end={end}&tags=%7B%22peer.ipv4%22%3A%221%22%7D");
    assert_eq!(s.get_json(&none), envelope(json!([]), 0, J::Null));
    let none = format!("/api/traces?service=service-x&start={start}&end={end}&minDuration=1ms");
    assert_eq!(s.get_json(&none)["data"], json!([]));
    // Trace(id, from, to) with "trace ID time params" on sends ms; they do not narrow the lookup.
    let (ms0, ms1) = (start / 1000, end / 1000);
    let v = s.get_json(&format!("/api/traces/0000000000000001?end={ms1}&start={ms0}"));
    assert_eq!(v["data"][0], expected_trace());
    // Dependencies(from, to): endTs and lookback in ms; the links are the Zipkin API's.
    let deps = s.get_json(&format!("/api/dependencies?endTs={ms1}&lookback={}", ms1 - ms0));
    let zipkin = s.get_json(&format!("/api/v2/dependencies?endTs={ms1}&lookback={}", ms1 - ms0));
    let want: Vec<J> = zipkin
        .as_array()
        .unwrap()
        .iter()
        .map(|l| json!({"parent": l["parent"], "child": l["child"], "callCount": l["callCount"]}))
        .collect();
    assert!(!want.is_empty());
    assert_eq!(deps, envelope(J::Array(want), 0, J::Null));
    assert_eq!(deps["data"][0]["parent"], "service-x");
    assert_eq!(deps["data"][0]["child"], "service-y");
    // `service` narrows to links that touch it; a window without the trace has no links.
    assert_eq!(
        s.get_json(&format!("/api/dependencies?endTs={ms1}&lookback=3600000&service=nobody"))["data"],
        json!([])
    );
    assert_eq!(s.get_json("/api/dependencies?endTs=1000&lookback=1000")["data"], json!([]));

    // GrpcSearch / GrpcTrace of newer Grafana: api_v3 over HTTP, snake_case names, the times
    // appended unencoded (RFC 3339 with `+00:00`, whose `+` arrives as a space).
    let (t0, t1) = ("2017-01-26T20:46:31.639875+00:00", "2017-01-26T22:46:31.639875+00:00");
    let v = s.get_json(&format!(
        "/api/v3/traces?query.attributes={tags}&query.duration_max=1s&query.duration_min=1us&query.operation_name=some-operation&query.service_name=service-x&query.start_time_min={t0}&query.start_time_max={t1}"
    ));
    let got = otlp::decode_json(v["result"].to_string().as_bytes()).unwrap();
    assert_eq!(got.len(), 4, "{v}");
    assert!(got.iter().all(|x| x.trace_id == TraceId::from_u128(1)));
    let v =
        s.get_json(&format!("/api/v3/traces/00000000000000000000000000000001?start_time={t0}&end_time={t1}"));
    assert_eq!(otlp::decode_json(v["result"].to_string().as_bytes()).unwrap().len(), 4);
}

#[test]
fn jaeger_ui_requests_are_answered() {
    let s = TestServer::start();
    load(&s);
    // The operations of a service with their kinds, narrowed by spanKind.
    let v = s.get_json("/api/operations?service=service-y");
    assert_eq!(
        v["data"],
        json!([
            {"name": "preserveParentID-test", "spanKind": ""},
            {"name": "reference-test", "spanKind": ""},
            {"name": "some-operation", "spanKind": "server"},
        ])
    );
    assert_eq!(v["total"], 3);
    let v = s.get_json("/api/operations?service=service-y&spanKind=server");
    assert_eq!(v["data"], json!([{"name": "some-operation", "spanKind": "server"}]));
    // The search form: a lookback label beside explicit µs times, `tag=key:value` pairs.
    let (start, end) = window_us();
    let v = s.get_json(&format!(
        "/api/traces?service=service-y&operation=reference-test&limit=20&lookback=custom&start={start}&end={end}&tag=host.name:host-y&maxDuration=&minDuration="
    ));
    assert_eq!(v["data"].as_array().unwrap().len(), 1, "{v}");
    // `lookback` as a Go duration without `start`: the fixture lies years before now.
    assert_eq!(s.get_json("/api/traces?service=service-y&lookback=1h")["data"], json!([]));
    // Several ids: the known one in `data`, each unknown one an entry in `errors`.
    let v =
        s.get_json("/api/traces?traceID=1&traceID=00000000000000aa&traceID=ab00000000000000000000000000000a");
    assert_eq!(v["data"].as_array().unwrap().len(), 1);
    assert_eq!(v["data"][0]["traceID"], "0000000000000001");
    assert_eq!(
        v["errors"],
        json!([
            {"msg": "trace not found", "traceID": "00000000000000aa"},
            {"msg": "trace not found", "traceID": "ab00000000000000000000000000000a"},
        ])
    );
}

#[test]
fn errors_have_jaegers_shape_and_name_the_parameter() {
    let s = TestServer::start();
    load(&s);
    let (st, body) = s.get("/api/traces/00000000000000000000000000abcdef");
    assert_eq!(st, 404);
    let v: J = serde_json::from_str(&body).unwrap();
    assert_eq!(v, envelope(J::Null, 0, json!([{"code": 404, "msg": "trace not found"}])));
    for (path, param) in [
        ("/api/traces?start=yesterday", "start"),
        ("/api/traces?end=-5", "end"),
        ("/api/traces?limit=many", "limit"),
        ("/api/traces?minDuration=5parsecs", "minDuration"),
        ("/api/traces?maxDuration=1ms&minDuration=1s", "maxDuration"),
        ("/api/traces?tag=novalue", "tag"),
        ("/api/traces?tags=%7Bnot%20json", "tags"),
        ("/api/traces?tags=%7B%22a%22%3A1%7D", "tags"),
        ("/api/traces?traceID=xyz", "traceID"),
        ("/api/traces?raw=maybe", "raw"),
        ("/api/traces/xyz", "traceID"),
        ("/api/traces/1?start=soon", "start"),
        ("/api/operations", "service"),
        ("/api/operations?service=service-y&spanKind=sideways", "spanKind"),
        ("/api/dependencies?endTs=now", "endTs"),
        ("/api/dependencies?lookback=1h", "lookback"),
    ] {
        let (st, body) = s.get(path);
        assert_eq!(st, 400, "{path}: {body}");
        let v: J = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"));
        assert_eq!(v["data"], J::Null, "{path}");
        assert_eq!(v["errors"][0]["code"], 400, "{path}: {body}");
        let msg = v["errors"][0]["msg"].as_str().unwrap();
        assert!(msg.contains(param), "{path}: {msg:?} does not name {param}");
    }
}
