//! Read APIs: Zipkin v2, Jaeger api_v3, SQL, metrics — against data sent through receivers.

use std::collections::{BTreeMap, BTreeSet};

use weft_model::codec::{otlp, zipkin};
use weft_model::{Span, SpanKind, StatusCode, conv};

use crate::{TestServer, canon, spans};

fn load(s: &TestServer, n: usize) -> Vec<Span> {
    let sent = spans(20, n);
    let (st, _, _) =
        s.post("/v1/traces", &[("Content-Type", "application/x-protobuf")], &otlp::encode_proto(&sent));
    assert_eq!(st, 200);
    sent
}

fn enc(s: &str) -> String {
    let mut o = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            o.push(b as char);
        } else {
            o.push_str(&format!("%{b:02X}"));
        }
    }
    o
}

#[test]
fn zipkin_read_api() {
    let s = TestServer::start();
    let sent = load(&s, 3000); // enough traffic for ~3 % failed requests to occur
    s.store.flush().unwrap(); // half the reads from a segment...
    let more = {
        let m = spans(21, 100);
        let (st, _, _) =
            s.post("/api/v2/spans", &[("Content-Type", "application/json")], &zipkin::encode_v2_json(&m));
        assert_eq!(st, 202);
        m
    }; // ...and Zipkin-sent spans from the buffer.

    let services = s.get_json("/api/v2/services");
    let services: BTreeSet<String> = serde_json::from_value(services).unwrap();
    let want: BTreeSet<String> = sent.iter().map(|x| x.service_name().to_owned()).collect();
    assert_eq!(services, want);

    let names: Vec<String> = serde_json::from_value(s.get_json("/api/v2/spans?serviceName=cart")).unwrap();
    let want: BTreeSet<String> =
        sent.iter().chain(&more).filter(|x| x.service_name() == "cart").map(|x| x.name.to_string()).collect();
    assert_eq!(names.into_iter().collect::<BTreeSet<_>>(), want);
    assert_eq!(s.get("/api/v2/spans").0, 400, "serviceName is required");

    // One trace by id: what Zipkin's encoder makes of the stored spans.
    let t = &sent[0].trace_id;
    let (st, body) = s.get(&format!("/api/v2/trace/{t}"));
    assert_eq!(st, 200);
    let got = canon(zipkin::decode_v2_json(body.as_bytes()).unwrap());
    let want_spans: Vec<Span> = sent.iter().filter(|x| x.trace_id == *t).cloned().collect();
    let want = canon(zipkin::decode_v2_json(&zipkin::encode_v2_json(&want_spans)).unwrap());
    assert_eq!(got, want);
    assert_eq!(s.get("/api/v2/trace/00000000000000000000000000abcdef").0, 404);
    assert_eq!(s.get("/api/v2/trace/nothex").0, 400);

    // Search: service + annotationQuery + minDuration, compared with a brute-force filter. The
    // query is taken from a failed span of the data, so it matches at least that span's trace.
    let probe = sent
        .iter()
        .find(|x| {
            x.status.code == StatusCode::Error
                && x.duration_ns() >= 2_000
                && x.attributes.iter().any(|kv| kv.value.as_str().is_some_and(|v| !v.contains([' ', '='])))
        })
        .expect("the synthetic traffic has failed spans with string attributes");
    let (key, value) = probe
        .attributes
        .iter()
        .find_map(|kv| {
            kv.value.as_str().filter(|v| !v.contains([' ', '='])).map(|v| (kv.key.clone(), v.to_owned()))
        })
        .unwrap();
    let service = probe.service_name().to_owned();
    let min_us = probe.duration_ns() / 2_000;
    let end_ms = weft_model::time::now_unix_nanos() / 1_000_000;
    let path = format!(
        "/api/v2/traces?serviceName={service}&annotationQuery={}&minDuration={min_us}&endTs={end_ms}&lookback=3600000&limit=1000",
        enc(&format!("error and {key}={value}"))
    );
    let traces: Vec<serde_json::Value> = serde_json::from_value(s.get_json(&path)).unwrap();
    let want: BTreeSet<String> = sent
        .iter()
        .filter(|x| {
            x.service_name() == service
                && x.status.code == StatusCode::Error
                && x.attributes.get_str(&key) == Some(value.as_str())
                && x.duration_ns() >= min_us * 1_000
        })
        .map(|x| x.trace_id.to_string())
        .collect();
    assert!(!want.is_empty());
    let got: BTreeSet<String> = traces.iter().map(|t| t[0]["traceId"].as_str().unwrap().to_owned()).collect();
    assert_eq!(got, want);
    let limited: Vec<serde_json::Value> =
        serde_json::from_value(s.get_json("/api/v2/traces?limit=2")).unwrap();
    assert_eq!(limited.len(), 2);
    assert_eq!(s.get("/api/v2/traces?limit=x").0, 400);

    // traceMany keeps order and skips unknown ids.
    let ids = format!(
        "{},{},{}",
        sent[0].trace_id,
        "00000000000000000000000000abcdef",
        sent.last().unwrap().trace_id
    );
    let many: Vec<serde_json::Value> =
        serde_json::from_value(s.get_json(&format!("/api/v2/traceMany?traceIds={ids}"))).unwrap();
    assert_eq!(many.len(), 2);

    // Dependencies: the shop's call graph.
    let deps: Vec<serde_json::Value> =
        serde_json::from_value(s.get_json(&format!("/api/v2/dependencies?endTs={end_ms}&lookback=86400000")))
            .unwrap();
    let pairs: BTreeSet<(String, String)> = deps
        .iter()
        .map(|d| (d["parent"].as_str().unwrap().to_owned(), d["child"].as_str().unwrap().to_owned()))
        .collect();
    assert!(pairs.contains(&("frontend".into(), "product-catalog".into())), "{pairs:?}");
    assert!(pairs.contains(&("checkout".into(), "payment".into())), "{pairs:?}");
    let pay = deps.iter().find(|d| d["child"] == "payment").unwrap();
    assert!(pay["errorCount"].as_u64().unwrap() > 0, "{pay}");
    assert!(pay["callCount"].as_u64().unwrap() >= pay["errorCount"].as_u64().unwrap());

    let keys: Vec<String> = serde_json::from_value(s.get_json("/api/v2/autocompleteKeys")).unwrap();
    assert!(keys.contains(&"rpc.method".to_string()));
    let vals: Vec<String> =
        serde_json::from_value(s.get_json("/api/v2/autocompleteValues?key=db.system")).unwrap();
    assert_eq!(vals, vec!["postgresql".to_string(), "redis".to_string()]);
    let remote: Vec<String> =
        serde_json::from_value(s.get_json("/api/v2/remoteServices?serviceName=cart")).unwrap();
    assert!(remote.is_empty(), "OTel spans name no peer.service: {remote:?}");
}

#[test]
fn jaeger_api_v3_returns_otlp_losslessly() {
    let s = TestServer::start();
    let sent = load(&s, 300);
    let v = s.get_json("/api/v3/services");
    assert!(v["services"].as_array().unwrap().iter().any(|x| x == "checkout"));
    let v = s.get_json("/api/v3/operations?service=frontend&spanKind=server");
    let ops = v["operations"].as_array().unwrap();
    assert!(!ops.is_empty());
    assert!(ops.iter().all(|o| o["spanKind"] == "server"), "{v}");

    // Trace by id: OTLP JSON carries everything weft stores.
    let t = sent[5].trace_id;
    let (st, body) = s.get(&format!("/api/v3/traces/{t}"));
    assert_eq!(st, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let got = otlp::decode_json(v["result"].to_string().as_bytes()).unwrap();
    let want: Vec<Span> = sent.iter().filter(|x| x.trace_id == t).cloned().collect();
    assert_eq!(canon(got), canon(want));
    let (st, body) = s.get("/api/v3/traces/00000000000000000000000000abcdef");
    assert_eq!(st, 404);
    assert!(body.contains("\"httpCode\":404"), "{body}");

    // Search with attributes and a time window.
    let attrs = enc(r#"{"db.system":"postgresql"}"#);
    let path = format!(
        "/api/v3/traces?query.serviceName=product-catalog&query.attributes={attrs}&query.startTimeMin=2000-01-01T00:00:00Z&query.startTimeMax=2100-01-01T00:00:00Z&query.searchDepth=1000&query.durationMin=1us"
    );
    let v = s.get_json(&path);
    let got = otlp::decode_json(v["result"].to_string().as_bytes()).unwrap();
    let got_traces: BTreeSet<_> = got.iter().map(|x| x.trace_id).collect();
    let want: BTreeSet<_> = sent
        .iter()
        .filter(|x| {
            x.service_name() == "product-catalog" && x.attributes.get_str("db.system") == Some("postgresql")
        })
        .map(|x| x.trace_id)
        .collect();
    assert_eq!(got_traces, want);
    // Deprecated snake_case names work too; bad values name the parameter.
    let v = s.get_json("/api/v3/traces?query.service_name=ad&query.num_traces=3");
    let n: BTreeSet<_> =
        otlp::decode_json(v["result"].to_string().as_bytes()).unwrap().iter().map(|x| x.trace_id).collect();
    assert!(n.len() <= 3 && !n.is_empty());
    let (st, body) = s.get("/api/v3/traces?query.startTimeMin=yesterday");
    assert_eq!(st, 400);
    assert!(body.contains("query.startTimeMin"), "{body}");
    assert_eq!(s.get("/api/v3/traces?query.serviceName=nobody").0, 404);
}

#[test]
fn clock_skew_adjustment_is_opt_in_and_marked() {
    let s = TestServer::start();
    let sent = load(&s, 400);
    // A trace through shipping, whose host clock runs 4 ms ahead.
    let t =
        sent.iter().find(|x| x.service_name() == "shipping" && x.kind == SpanKind::Server).unwrap().trace_id;
    let raw = otlp::decode_json(s.get_json(&format!("/api/v3/traces/{t}"))["result"].to_string().as_bytes())
        .unwrap();
    assert!(raw.iter().all(|x| x.attributes.get(conv::SKEW_ADJUSTED_NS).is_none()));
    let adj = otlp::decode_json(
        s.get_json(&format!("/api/v3/traces/{t}?adjustClockSkew=true"))["result"].to_string().as_bytes(),
    )
    .unwrap();
    let shifted: Vec<&Span> =
        adj.iter().filter(|x| x.attributes.get(conv::SKEW_ADJUSTED_NS).is_some()).collect();
    assert!(shifted.iter().any(|x| x.service_name() == "shipping"), "shipping's spans are moved back");
    for x in &shifted {
        let d = x.attributes.get(conv::SKEW_ADJUSTED_NS).unwrap().as_i64().unwrap();
        // The half-difference rule shifts by the skew give or take half the latency asymmetry.
        assert!((d + 4_000_000).abs() < 500_000, "shift {d} undoes the 4 ms skew");
    }
    // Zipkin API: same switch; stored data never changes.
    let z = zipkin::decode_v2_json(s.get(&format!("/api/v2/trace/{t}?adjustClockSkew=true")).1.as_bytes())
        .unwrap();
    assert!(z.iter().any(|x| x.attributes.get_str(conv::SKEW_ADJUSTED_NS).is_some()));
    assert_eq!(
        canon(s.store.trace(t).unwrap()),
        canon(sent.iter().filter(|x| x.trace_id == t).cloned().collect())
    );
}

#[test]
fn sql_api_formats_limits_and_refusals() {
    let s = TestServer::with(|_, c| c.sql_max_rows = 5);
    let sent = load(&s, 200);
    let (st, _, body) =
        s.post("/api/sql", &[("Content-Type", "text/plain")], b"SELECT count(*) AS n FROM spans");
    assert_eq!(st, 200);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["rows"][0][0], sent.len() as u64);
    assert_eq!(v["columns"][0]["name"], "n");
    assert_eq!(v["truncated"], false);

    let q = serde_json::json!({"query": "SELECT service_name, name FROM spans ORDER BY service_name", "format": "csv"});
    let (st, _, body) = s.post("/api/sql", &[("Content-Type", "application/json")], q.to_string().as_bytes());
    assert_eq!(st, 200);
    let text = String::from_utf8(body).unwrap();
    assert_eq!(text.lines().count(), 6, "header + 5 rows (limit): {text}");

    let (st, body) = s.get(&format!(
        "/api/sql?format=table&q={}",
        enc("SELECT encode(trace_id, 'hex') AS t FROM spans LIMIT 1")
    ));
    assert_eq!(st, 200);
    assert!(body.contains("| t "), "{body}");

    let (st, body) = s.get(&format!("/api/sql?q={}", enc("SELECT attributes['rpc.method'] AS m, count(*) FROM spans WHERE attributes['rpc.method'] IS NOT NULL GROUP BY 1")));
    assert_eq!(st, 200, "{body}");

    let (st, _, body) = s.post("/api/sql", &[], b"DROP TABLE spans");
    assert_eq!(st, 400, "{}", String::from_utf8_lossy(&body));
    let (st, _, body) = s.post("/api/sql", &[], b"SELECT nope FROM spans");
    assert_eq!(st, 400);
    assert!(String::from_utf8_lossy(&body).contains("nope"));
    assert!(s.metric("weft_query_errors_total{api=\"sql\"}") >= 2.0);
}

#[test]
fn metrics_and_status() {
    let s = TestServer::start();
    load(&s, 50);
    s.get_json("/api/v3/services");
    let (st, text) = s.get("/metrics");
    assert_eq!(st, 200);
    for name in [
        "weft_spans_accepted_total",
        "weft_spans_rejected_total",
        "weft_spans_dropped_total",
        "weft_wal_bytes ",
        "weft_segments ",
        "weft_query_duration_seconds_bucket{api=\"jaeger\",le=\"+Inf\"} 1",
    ] {
        assert!(text.contains(name), "{name} missing");
    }
    assert!(s.metric("weft_wal_bytes ") > 0.0);
    let v = s.get_json("/api/status");
    assert!(v["store"]["buffer_spans"].as_u64().unwrap() >= 50);
    let (st, _) = s.get("/no/such/thing");
    assert_eq!(st, 404);
}

/// Issue 18: SQL cannot take the server: one huge row is refused naming the limit, a query
/// past the timeout is cancelled (504), queries past the concurrency limit get 503 with
/// `Retry-After`, and ingest keeps acknowledging while a heavy query runs.
#[test]
fn sql_is_bounded_in_bytes_time_and_concurrency() {
    let s = TestServer::with(|_, c| {
        c.query_timeout = std::time::Duration::from_secs(3);
        c.sql_concurrency = 1;
        c.sql_max_bytes = 1 << 20;
    });
    load(&s, 2000);
    let (st, _, body) = s.post("/api/sql", &[], b"SELECT repeat('x', 8000000) AS x");
    let body = String::from_utf8_lossy(&body).into_owned();
    assert_eq!(st, 400, "{body}");
    assert!(body.contains("limit of 1048576 bytes"), "{body}");

    let url = s.url("/api/sql");
    let heavy = std::thread::spawn(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
        let mut r = agent.post(&url).send("SELECT count(*) FROM spans a, spans b, spans c WHERE a.duration_ns + b.duration_ns > c.duration_ns").unwrap();
        (r.status().as_u16(), r.body_mut().read_to_string().unwrap())
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while s.metric("weft_sql_running") < 1.0 {
        assert!(!heavy.is_finished(), "the heavy query ended early: {:?}", heavy.join().unwrap());
        assert!(std::time::Instant::now() < deadline, "the heavy query did not start");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let (st, retry, body) = s.post("/api/sql", &[], b"SELECT 1");
    assert_eq!(st, 503, "{}", String::from_utf8_lossy(&body));
    let busy = (retry, String::from_utf8_lossy(&body).into_owned());
    assert_eq!(busy.0.as_deref(), Some("1"));
    assert!(busy.1.contains("--sql-concurrency"), "{}", busy.1);
    // ingest is not starved by the heavy query
    let more = spans(21, 50);
    let (st, _, _) =
        s.post("/v1/traces", &[("Content-Type", "application/x-protobuf")], &otlp::encode_proto(&more));
    assert_eq!(st, 200);
    let (st, body) = heavy.join().unwrap();
    assert_eq!(st, 504, "{body}");
    assert!(body.contains("--query-timeout"), "{body}");
    // the slot is free again
    let (st, _, _) = s.post("/api/sql", &[], b"SELECT 1");
    assert_eq!(st, 200);
}

/// Issue 18: one SQL query holds at most `--sql-query-memory` of the shared pool: a join whose
/// build side needs more gets 400 naming the flag, and the server takes the next query.
#[test]
fn one_sql_query_holds_at_most_its_own_memory() {
    let s = TestServer::with(|_, c| c.sql_query_memory = 64 << 10);
    load(&s, 2000);
    let (st, _, body) =
        s.post("/api/sql", &[], b"SELECT count(*) FROM spans a JOIN spans b ON a.span_id = b.span_id");
    let body = String::from_utf8_lossy(&body).into_owned();
    assert_eq!(st, 400, "{body}");
    assert!(body.contains("memory limit of 65536 bytes") && body.contains("--sql-query-memory"), "{body}");
    let (st, _, _) = s.post("/api/sql", &[], b"SELECT count(*) FROM spans");
    assert_eq!(st, 200);
}

/// Issue 18: the read APIs' store work runs on the SQL runtime in slots of its own: while a
/// heavy read (`traceMany` of a thousand traces) holds the only read slot, another read gets
/// 503 with `Retry-After`, while `/api/sql` (its own slots) answers and ingest acknowledges.
/// `traceMany` takes at most `MAX_TRACE_MANY_IDS` ids and returns at most `read_max_spans`.
#[test]
fn heavy_reads_have_their_own_slots_and_do_not_stop_ingest() {
    let s = TestServer::with(|_, c| {
        c.read_concurrency = 1;
        c.read_max_spans = 1_000_000;
    });
    let ids = load_many(&s);
    let many: Vec<String> = ids.iter().take(weft_server::zipkin::MAX_TRACE_MANY_IDS).cloned().collect();
    let heavy_url = s.url(&format!("/api/v2/traceMany?traceIds={}", many.join(",")));
    let refused = while_slot_held(&s, &heavy_url, || {
        let r = s.agent.get(&s.url("/api/v2/traces?limit=10")).call().unwrap();
        if r.status().as_u16() != 503 {
            return None;
        }
        let retry = r.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_owned);
        // Meanwhile SQL has its own slots and ingest is not held up.
        let (sql, _, _) = s.post("/api/sql", &[], b"SELECT count(*) FROM spans");
        let (acked, _, _) = s.post(
            "/v1/traces",
            &[("Content-Type", "application/x-protobuf")],
            &otlp::encode_proto(&spans(99, 50)),
        );
        Some((retry, sql, acked))
    });
    let (retry, sql, acked) = refused.expect("the heavy read never held the read slot when probed");
    assert_eq!(retry.as_deref(), Some("1"));
    assert_eq!((sql, acked), (200, 200));
    // Bounds: too many ids, too many spans.
    let too_many: Vec<String> =
        ids.iter().take(weft_server::zipkin::MAX_TRACE_MANY_IDS + 1).cloned().collect();
    let (st, body) = s.get(&format!("/api/v2/traceMany?traceIds={}", too_many.join(",")));
    assert_eq!(st, 400, "{body}");
    let small = TestServer::with(|_, c| c.read_max_spans = 10);
    let sent = load(&small, 200);
    let mut per_trace: BTreeMap<weft_model::TraceId, usize> = BTreeMap::new();
    for sp in &sent {
        *per_trace.entry(sp.trace_id).or_default() += 1;
    }
    let (tid, n) = per_trace.into_iter().max_by_key(|(_, n)| *n).unwrap();
    assert!(n > 10, "{n}");
    let (st, body) = small.get(&format!("/api/v2/traceMany?traceIds={tid}"));
    assert_eq!(st, 400, "{body}");
    assert!(body.contains("--read-max-spans"), "{body}");
    let (st, body) = small.get("/api/v2/traces?limit=100");
    assert_eq!(st, 200, "{body}");
    let got: serde_json::Value = serde_json::from_str(&body).unwrap();
    let spans_back: usize = got.as_array().unwrap().iter().map(|t| t.as_array().unwrap().len()).sum();
    assert!(spans_back <= 10, "{spans_back} spans past read_max_spans");
}

/// Spans of eight seeds (2500 each) sent; their trace ids.
fn load_many(s: &TestServer) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    for seed in 0..8 {
        let sent = spans(100 + seed, 2500);
        ids.extend(sent.iter().map(|sp| sp.trace_id.to_string()));
        let (st, _, _) =
            s.post("/v1/traces", &[("Content-Type", "application/x-protobuf")], &otlp::encode_proto(&sent));
        assert_eq!(st, 200);
    }
    ids
}

/// The first `Some` of `probe` in 20 tries, each while a `traceMany` of `heavy_url` holds the
/// only read slot (it may finish before the probe: then the probe is tried again).
fn while_slot_held<T>(s: &TestServer, heavy_url: &str, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    for _ in 0..20 {
        let url = heavy_url.to_owned();
        let heavy = std::thread::spawn(move || {
            let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
            agent.get(&url).call().unwrap().status().as_u16()
        });
        while s.metric("weft_reads_running") < 1.0 && !heavy.is_finished() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let got = probe();
        assert_eq!(heavy.join().unwrap(), 200);
        if got.is_some() {
            return got;
        }
    }
    None
}

/// Issue 18: the UI's breakdown and compare do their work in read slots like the other read
/// APIs (not on the receivers' workers): with the read slots taken they answer 503, also for
/// traces the trace view has already read (and cached).
#[test]
fn breakdown_and_compare_take_read_slots() {
    let s = TestServer::with(|_, c| {
        c.read_concurrency = 1;
        c.read_max_spans = 1_000_000;
    });
    let ids: Vec<String> = load_many(&s).into_iter().collect();
    let (a, b) = (&ids[0], &ids[1]);
    for id in [a, b] {
        let (st, body) = s.get(&format!("/api/ui/trace/{id}"));
        assert_eq!(st, 200, "{body}");
    }
    let many = ids[2..].iter().take(weft_server::zipkin::MAX_TRACE_MANY_IDS).cloned().collect::<Vec<_>>();
    let heavy = s.url(&format!("/api/v2/traceMany?traceIds={}", many.join(",")));
    for probe in [format!("/api/ui/breakdown?traces={a},{b}"), format!("/api/ui/compare?a={a}&b={b}")] {
        let (st, body) = s.get(&probe);
        assert_eq!(st, 200, "{probe}: {body}");
        let refused = while_slot_held(&s, &heavy, || match s.get(&probe) {
            (503, _) => Some(()),
            (200, _) => None,
            (st, body) => panic!("{probe}: {st} {body}"),
        });
        assert!(refused.is_some(), "{probe} ran while the read slot was taken");
    }
}
