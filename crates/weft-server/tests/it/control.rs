//! The control API: token, validation and bounds, the agents' long poll, command results,
//! congestion reports on /metrics.

use std::time::{Duration, Instant};

use serde_json::Value;
use weft_control::proto::{
    AgentReport, CommandResult, PollRequest, PollResponse, ProcessOutcome, ProcessReport,
};

use crate::TestServer;

const TOKEN: &str = "tok-123";
const JSON: (&str, &str) = ("Content-Type", "application/json");
const AUTH: (&str, &str) = ("Authorization", "Bearer tok-123");

fn server() -> TestServer {
    TestServer::with(|_, cfg| cfg.control_token = Some(TOKEN.into()))
}

fn poll(
    s: &TestServer,
    agent: &str,
    after: Option<u64>,
    results: Vec<(u64, CommandResult)>,
    wait_ms: u64,
) -> PollResponse {
    let req =
        PollRequest { agent: agent.into(), host: "h".into(), after, results, wait_ms, ..Default::default() };
    let (st, _, body) = s.post("/api/control/poll", &[JSON, AUTH], &serde_json::to_vec(&req).unwrap());
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
    serde_json::from_slice(&body).unwrap()
}

fn json(b: &[u8]) -> Value {
    serde_json::from_slice(b).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(b)))
}

#[test]
fn without_a_token_the_control_api_is_off() {
    let s = TestServer::start();
    let (st, _, body) = s.post("/api/control/probes", &[JSON, AUTH], br#"{"op":"list"}"#);
    assert_eq!(st, 404);
    assert!(String::from_utf8_lossy(&body).contains("--control-token"));
    // agent reports are part of the control API: off too
    let rep = AgentReport { agent: "a".into(), ..AgentReport::default() };
    let (st, _, _) = s.post("/api/agents/report", &[JSON], &serde_json::to_vec(&rep).unwrap());
    assert_eq!(st, 404);
}

#[test]
fn tokens_validation_and_bounds() {
    let s = server();
    let cmd = br#"{"op":"enable","selector":"group:io"}"#;
    let (st, _, _) = s.post("/api/control/probes", &[JSON], cmd);
    assert_eq!(st, 401);
    let (st, _, _) = s.post("/api/control/probes", &[JSON, ("Authorization", "Bearer tok-12")], cmd);
    assert_eq!(st, 401);
    let (st, _, _) = s.post("/api/control/poll", &[JSON], b"{}");
    assert_eq!(st, 401, "agents need the token too");
    for (body, want) in [
        (&br#"{"op":"enable"}"#[..], "selector: required"),
        (br#"{"op":"enable","selector":"level:loud"}"#, "unknown level"),
        (br#"{"op":"reboot","selector":"x"}"#, "unknown variant"),
        (br#"{"op":"enable","selector":"x","pid":0}"#, "field pid"),
        (b"\xff\xfe", "not a valid command"),
    ] {
        let (st, _, b) = s.post("/api/control/probes", &[JSON, AUTH], body);
        assert_eq!(st, 400, "{}", String::from_utf8_lossy(&b));
        assert!(String::from_utf8_lossy(&b).contains(want), "{}: {}", want, String::from_utf8_lossy(&b));
    }
    let big = vec![b' '; 70_000];
    let (st, _, _) = s.post("/api/control/probes", &[JSON, AUTH], &big);
    assert_eq!(st, 413);
    let (st, _, _) = s.post("/api/control/probes?wait=lots", &[JSON, AUTH], cmd);
    assert_eq!(st, 400);
    assert_eq!(s.metric("weft_control_unauthorized_total"), 3.0);
    assert!(s.metric("weft_control_malformed_total") >= 6.0);
    // a valid command with no agent polling: accepted, nothing to wait for, says so
    let (st, _, b) = s.post("/api/control/probes", &[JSON, AUTH], cmd);
    assert_eq!(st, 200);
    let v = json(&b);
    assert_eq!(v["complete"], true);
    assert!(v["warning"].as_str().unwrap().contains("no agent"));
}

#[test]
fn agents_long_poll_for_commands_and_return_results() {
    let s = server();
    // first poll: only the cursor, no old commands
    let (st, _, _) = s.post("/api/control/probes", &[JSON, AUTH], br#"{"op":"list"}"#);
    assert_eq!(st, 200);
    let first = poll(&s, "node-a", None, vec![], 0);
    assert!(first.commands.is_empty());
    assert_eq!(first.cursor, 1);
    let _ = poll(&s, "node-b", None, vec![], 0);
    // an empty long poll waits, then answers with the same cursor
    let t = Instant::now();
    let idle = poll(&s, "node-a", Some(first.cursor), vec![], 300);
    assert!(idle.commands.is_empty());
    assert!(t.elapsed() >= Duration::from_millis(250));
    assert_eq!(idle.cursor, first.cursor);
    // a command issued while an agent waits wakes it
    let url = s.url("/api/control/probes?wait=10s");
    let submit = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
        let mut r = agent
            .post(&url)
            .header("Content-Type", "application/json")
            .header("Authorization", "Bearer tok-123")
            .send(&br#"{"op":"enable","selector":"group:blocker.io","agent":"node-*"}"#[..])
            .unwrap();
        (r.status().as_u16(), r.body_mut().read_to_vec().unwrap())
    });
    let t = Instant::now();
    let got = poll(&s, "node-a", Some(first.cursor), vec![], 20_000);
    assert!(t.elapsed() < Duration::from_secs(10), "woken by the new command");
    assert_eq!(got.commands.len(), 1);
    let cmd = &got.commands[0];
    assert_eq!(cmd.command.selector.as_deref(), Some("group:blocker.io"));
    let got_b = poll(&s, "node-b", Some(first.cursor), vec![], 5_000);
    assert_eq!(got_b.commands.len(), 1);
    // both return results; the submitter's wait ends complete
    let result = |agent: &str, pid| CommandResult {
        agent: agent.into(),
        host: "h".into(),
        processes: vec![ProcessOutcome {
            pid,
            service: "blocker".into(),
            segment: format!("{pid}-x.weft"),
            matched: 7,
            applied: true,
            error: None,
            tracepoints: vec![],
        }],
        error: None,
    };
    let _ = poll(&s, "node-a", Some(got.cursor), vec![(cmd.id, result("node-a", 10))], 0);
    let _ = poll(&s, "node-b", Some(got_b.cursor), vec![(cmd.id, result("node-b", 20))], 0);
    let (st, body) = submit.join().unwrap();
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
    let v = json(&body);
    assert_eq!(v["complete"], true, "{v}");
    assert_eq!(v["targets"].as_array().unwrap().len(), 2);
    assert_eq!(v["matched"], 14);
    assert_eq!(v["applied_processes"], 2);
    // and it can be read back
    let (st, b) = {
        let mut r = s
            .agent
            .get(&s.url(&format!("/api/control/probes/{}", cmd.id)))
            .header("Authorization", "Bearer tok-123")
            .call()
            .unwrap();
        (r.status().as_u16(), r.body_mut().read_to_vec().unwrap())
    };
    assert_eq!(st, 200);
    assert_eq!(json(&b)["results"].as_array().unwrap().len(), 2);
    // a command for other agents only is skipped by this one (but moves its cursor)
    let (st, _, _) = s.post("/api/control/probes", &[JSON, AUTH], br#"{"op":"list","agent":"elsewhere"}"#);
    assert_eq!(st, 200);
    let skip = poll(&s, "node-a", Some(got.cursor), vec![], 200);
    assert!(skip.commands.is_empty());
    assert!(skip.cursor > got.cursor);
}

#[test]
fn congestion_reports_show_on_metrics() {
    let s = server();
    let rep = AgentReport {
        agent: "node-a".into(),
        host: "h".into(),
        processes: vec![ProcessReport {
            pid: 42,
            service: "mapper".into(),
            max_occupancy: 0.75,
            dropped_ring_full: 9,
            pending_bytes: 1234,
            ..ProcessReport::default()
        }],
        ..AgentReport::default()
    };
    // issue 18: nobody without the token registers, forges or evicts an agent
    let body = serde_json::to_vec(&rep).unwrap();
    let (st, _, _) = s.post("/api/agents/report", &[JSON], &body);
    assert_eq!(st, 401);
    let (st, _, _) = s.post("/api/agents/report", &[JSON, ("Authorization", "Bearer tok-12")], &body);
    assert_eq!(st, 401);
    assert!(!s.get("/metrics").1.contains("agent=\"node-a\""), "an unauthenticated report was taken");
    let (st, _, _) = s.post("/api/agents/report", &[JSON, AUTH], &body);
    assert_eq!(st, 204);
    let labels = "{agent=\"node-a\",pid=\"42\",service=\"mapper\"}";
    assert_eq!(s.metric(&format!("weft_agent_process_ring_occupancy_max{labels}")), 0.75);
    assert_eq!(s.metric(&format!("weft_agent_process_dropped_ring_full{labels}")), 9.0);
    assert_eq!(s.metric(&format!("weft_agent_process_pending_bytes{labels}")), 1234.0);
    let (st, _, _) = s.post("/api/agents/report", &[JSON, AUTH], b"{\"agent\":");
    assert_eq!(st, 400);
    // oversized: 413 (or, if the server answered and closed before the client finished
    // sending, a broken pipe on the client side); the server is fine afterwards
    match s
        .agent
        .post(&s.url("/api/agents/report"))
        .header("Content-Type", "application/json")
        .header(AUTH.0, AUTH.1)
        .send(&vec![b' '; 2 << 20][..])
    {
        Ok(r) => assert_eq!(r.status().as_u16(), 413),
        Err(ureq::Error::Io(e)) => assert!(
            matches!(e.kind(), std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset),
            "{e}"
        ),
        Err(e) => panic!("{e}"),
    }
    let mut r =
        s.agent.get(&s.url("/api/control/agents")).header("Authorization", "Bearer tok-123").call().unwrap();
    let v = json(&r.body_mut().read_to_vec().unwrap());
    assert_eq!(v[0]["agent"], "node-a");
    assert_eq!(v[0]["report"]["processes"][0]["pid"], 42);
}

/// One raw HTTP/1.1 GET with the given `Host` header → status code.
fn get_with_host(s: &TestServer, host: &str, path: &str) -> u16 {
    use std::io::{Read, Write};
    let addr = s.url("").trim_start_matches("http://").to_string();
    let mut c = std::net::TcpStream::connect(&addr).unwrap();
    write!(c, "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").unwrap();
    let mut answer = String::new();
    c.read_to_string(&mut answer).unwrap();
    answer.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no status: {answer}"))
}

/// Issue 18: a web page that rebinds its own name to 127.0.0.1 reaches the server with its
/// name in `Host`; such requests are refused unless the name is allowed.
#[test]
fn requests_naming_another_host_are_refused() {
    let s = TestServer::start();
    let port = s.url("").rsplit(':').next().unwrap().to_string();
    assert_eq!(get_with_host(&s, &format!("127.0.0.1:{port}"), "/api/status"), 200);
    assert_eq!(get_with_host(&s, &format!("localhost:{port}"), "/api/status"), 200);
    assert_eq!(get_with_host(&s, &format!("[::1]:{port}"), "/api/status"), 200);
    assert_eq!(get_with_host(&s, &format!("attacker.example:{port}"), "/api/status"), 403);
    assert_eq!(get_with_host(&s, "attacker.example", "/api/sql?q=SELECT%201"), 403);
    // addresses are no rebinding vector: a listener bound to 0.0.0.0 is reached by its address
    assert_eq!(get_with_host(&s, "10.1.2.3:4318", "/api/status"), 200);
    let allowed = TestServer::with(|_, c| c.allowed_hosts = vec!["Collector.Internal".into()]);
    assert_eq!(get_with_host(&allowed, "collector.internal:4318", "/api/status"), 200);
    assert_eq!(get_with_host(&allowed, "attacker.example", "/api/status"), 403);
    let any = TestServer::with(|_, c| c.allowed_hosts = vec!["*".into()]);
    assert_eq!(get_with_host(&any, "attacker.example", "/api/status"), 200);
}

/// Issue 18: agents are remembered up to `max_agents` (keyed by input: the report's name); past
/// it the stalest are forgotten, counted.
#[test]
fn remembered_agents_are_bounded_and_evictions_counted() {
    let max = 16;
    let s = TestServer::with(|_, cfg| {
        cfg.control_token = Some(TOKEN.into());
        cfg.max_agents = max;
    });
    let n = max + 3;
    for i in 0..n {
        let rep = AgentReport { agent: format!("node-{i}"), host: "h".into(), ..AgentReport::default() };
        let (st, _, _) = s.post("/api/agents/report", &[JSON, AUTH], &serde_json::to_vec(&rep).unwrap());
        assert_eq!(st, 204);
    }
    assert_eq!(s.metric("weft_agents "), max as f64);
    assert_eq!(s.metric("weft_agents_evicted_total"), 3.0);
}

#[test]
fn captures_reach_the_polling_agents_and_their_outcomes_come_back() {
    use weft_control::proto::CaptureOutcome;
    let s = server();
    let cap = br#"{"pid":42,"period_ms":500,"functions":["handle_*"]}"#;
    let (st, _, _) = s.post("/api/control/captures", &[JSON], cap);
    assert_eq!(st, 401);
    for (body, want) in [
        (&br#"{"period_ms":500}"#[..], "exactly one target"),
        (br#"{"pid":42,"period_ms":5000}"#, "field period_ms"),
        (br#"{"pid":42,"period_ms":500,"backend":"magic"}"#, "field backend"),
    ] {
        let (st, _, b) = s.post("/api/control/captures", &[JSON, AUTH], body);
        assert_eq!(st, 400, "{}", String::from_utf8_lossy(&b));
        assert!(String::from_utf8_lossy(&b).contains(want), "{want}: {}", String::from_utf8_lossy(&b));
    }
    // An agent polls; a capture queued next reaches it (and a probe command with it).
    let first = poll(&s, "node-a", None, vec![], 0);
    let (st, _, b) = s.post("/api/control/captures", &[JSON, AUTH], cap);
    assert_eq!(st, 202, "{}", String::from_utf8_lossy(&b));
    let id = json(&b)["id"].as_u64().unwrap();
    assert_eq!(json(&b)["targets"], serde_json::json!(["node-a"]));
    let got = poll(&s, "node-a", Some(first.cursor), vec![], 0);
    assert_eq!(got.captures.len(), 1);
    assert_eq!((got.captures[0].id, got.captures[0].capture.pid), (id, Some(42)));
    assert!(got.cursor >= id);
    // Nothing is handed out twice.
    let again = poll(&s, "node-a", Some(got.cursor), vec![], 0);
    assert!(again.captures.is_empty());
    // The outcome comes back on the next poll and completes the capture.
    let out = CaptureOutcome { agent: "node-a".into(), calls: 7, spans: 7, ..CaptureOutcome::default() };
    let req = PollRequest {
        agent: "node-a".into(),
        host: "h".into(),
        after: Some(again.cursor),
        capture_results: vec![(id, out)],
        ..Default::default()
    };
    let (st, _, _) = s.post("/api/control/poll", &[JSON, AUTH], &serde_json::to_vec(&req).unwrap());
    assert_eq!(st, 200);
    let get = |path: &str| {
        let mut r = s.agent.get(&s.url(path)).header("Authorization", "Bearer tok-123").call().unwrap();
        (r.status().as_u16(), r.body_mut().read_to_vec().unwrap())
    };
    let (st, b) = get(&format!("/api/control/captures/{id}"));
    assert_eq!(st, 200);
    let v = json(&b);
    assert_eq!(v["complete"], true);
    assert_eq!(v["results"][0]["calls"], 7);
    assert_eq!(get("/api/control/captures/x").0, 400);
    assert_eq!(get("/api/control/captures/999").0, 404);
}

/// A partial that reaches the collector after its window closed (an agent starved or cut off
/// for longer than the grace) is counted late and still adds to the query's total and its
/// agent's total; the closed windows, already served, are left as they were.
#[test]
fn late_partials_count_in_the_totals_not_in_closed_windows() {
    use weft_control::live::{LiveSync, PartialReport};
    use weft_probe::agg::{Partial, State};

    let s = server();
    let sync = |req: &LiveSync| {
        let (st, _, body) = s.post("/api/control/live", &[JSON, AUTH], &serde_json::to_vec(req).unwrap());
        assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
    };
    let hello = LiveSync {
        agent: "n1".into(),
        host: "h".into(),
        tracepoints: Some(vec![("t.x".into(), "len:u64".into())]),
        ..LiveSync::default()
    };
    sync(&hello);
    let (st, _, b) =
        s.post("/api/control/queries", &[AUTH], b"SELECT count(*), sum(len) FROM tp('t.x') INTERVAL 1s");
    assert_eq!(st, 201, "{}", String::from_utf8_lossy(&b));
    let id = json(&b)["id"].as_u64().expect("id");
    let part = |n: u64| Partial {
        groups: [(vec![], vec![State::Count(n), State::Sum(10 * n as i128)])].into(),
        events: n,
        ..Partial::default()
    };
    let second = 1_000_000_000;
    let now = weft_probe::clock::realtime_ns();
    let old = now - now % second - 30 * second;
    let report = |start: u64, n: u64| PartialReport::new(id, "n1", start, second, &part(n));
    sync(&LiveSync { running: vec![id], reports: vec![report(old, 7)], ..hello.clone() });
    sync(&LiveSync { running: vec![id], reports: vec![report(old + second, 2)], ..hello.clone() });

    let mut req = s.agent.get(&s.url(&format!("/api/control/queries/{id}/results"))).header(AUTH.0, AUTH.1);
    req = req.header("Accept", "application/json");
    let mut r = req.call().unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let v = json(&r.body_mut().read_to_vec().unwrap());
    assert_eq!(v["late_partials"], 2, "{v}");
    assert_eq!(v["total"]["rows"], serde_json::json!([[9, 90]]), "{v}");
    assert_eq!(v["by_agent"]["n1"]["rows"], serde_json::json!([[9, 90]]), "{v}");
    assert_eq!(v["windows"], serde_json::json!([]), "no window holds them: {v}");
    assert_eq!(v["merge_errors"], 0, "{v}");
}
