//! The web UI in a real browser: starts the real `weft serve`, loads OpenTelemetry-SDK-like shop
//! traces, generated woven simulator requests (host → NIC → network → NIC → host, `caused_by`
//! links across four traces), really woven traces (`weft weave` — the binary — on the synthetic
//! SimBricks ping's logs, sent with its OTLP/HTTP sink) and one 100,000-span trace over
//! OTLP/HTTP, and `weft explore`'s hypothesis forest (a replay run over weft-synth's VAIF
//! checkout traces, which are imported too, publishing to the server), then runs
//! `ui_browser.mjs` in node with playwright-core driving Debian's headless Chromium. Screenshots go to `<target>/ui-screenshots/`; the large-trace timings are printed
//! (not asserted).
//!
//! Peers (installed by `.ci/test`): `chromium` (.ci/apt-packages), `playwright-core`
//! (.ci/package.json), node.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use weft_model::{Span, TraceId};

use crate::live_query;

const BIG_SPANS: usize = 100_000;

struct Server {
    child: Child,
    /// The query listener (UI, reads).
    url: String,
    /// The OTLP/HTTP listener.
    otlp: String,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The control token `weft serve` runs with (the forest is published through the control API).
const TOKEN: &str = "ui-test-token";
/// Events the live query's traced process emits.
const LIVE_EVENTS: u64 = 30;
/// The agent's name.
const LIVE_AGENT: &str = "ui-agent";

fn start_server() -> Server {
    let dir = tempfile::tempdir().expect("temp dir");
    let token = dir.path().join("control-token");
    std::fs::write(&token, TOKEN).expect("token file");
    let (http, otlp) = (weft_testkit::free_port(), weft_testkit::free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["serve", "--data-dir"])
        .arg(dir.path())
        .args(["--http", &format!("127.0.0.1:{http}")])
        .args(["--otlp-http", &format!("127.0.0.1:{otlp}")])
        .args(["--otlp-grpc", "off", "--zipkin", "off", "--fsync", "never", "--control-token-file"])
        .arg(&token)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn weft serve");
    let server = Server {
        child,
        url: format!("http://127.0.0.1:{http}"),
        otlp: format!("http://127.0.0.1:{otlp}"),
        _dir: dir,
    };
    let agent = agent();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(r) = agent.get(&format!("{}/api/status", server.url)).call()
            && r.status() == 200
        {
            break;
        }
        assert!(Instant::now() < deadline, "weft serve did not answer on {} within 60 s", server.url);
        std::thread::sleep(Duration::from_millis(100));
    }
    server
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).build().into()
}

/// POSTs spans as OTLP protobuf, in requests of at most `chunk` spans.
fn post(otlp_url: &str, spans: &[Span], chunk: usize) {
    let agent = agent();
    for part in spans.chunks(chunk) {
        let body = weft_model::codec::otlp::encode_proto(part);
        let mut r = agent
            .post(otlp_url)
            .header("content-type", "application/x-protobuf")
            .send(&body[..])
            .expect("POST /v1/traces");
        let status = r.status().as_u16();
        let text = r.body_mut().read_to_string().unwrap_or_default();
        assert_eq!(status, 200, "OTLP export refused: {text}");
    }
}

/// Ping rounds `weave_ping` weaves.
const PING_ROUNDS: u64 = 8;

/// Writes the synthetic SimBricks ping's logs (gem5 + nicbm client and server, ns-3 with two
/// switches; `weft_synth::simlog`) with simulated time shown from `first_ns` on, runs
/// `weft weave` on them with an OTLP/HTTP sink to `otlp_url` and a file, and returns the ping
/// traces' ids (the 47-span ones, in time order).
fn weave_ping(dir: &Path, otlp_url: &str, first_ns: u64) -> Vec<TraceId> {
    use weft_synth::simlog::Scenario;
    // Rounds 20 s apart; sw0's queueing varies per round (the synth's `q`).
    let s = Scenario { rounds: PING_ROUNDS, period_ps: 20_000_000_000_000, ..Scenario::default() };
    for (log, bytes) in s.generate() {
        std::fs::write(dir.join(log.file_name()), bytes).expect("write log");
    }
    std::fs::write(dir.join("kernel.syms"), weft_synth::simlog::kernel_syms()).expect("write syms");
    std::fs::write(dir.join("i40e.syms"), weft_synth::simlog::i40e_syms()).expect("write syms");
    let epoch = first_ns - s.start_ps / 1000;
    let topo = dir.join("topology.toml");
    std::fs::write(&topo, format!("[run]\nepoch_ns = {epoch}\n\n{}", s.topology("."))).expect("topology");
    let out_file = dir.join("ping.otlp.json");
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["weave", "--quiet", "--otlp", otlp_url, "--out"])
        .arg(&out_file)
        .arg(&topo)
        .output()
        .expect("run weft weave");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "weft weave failed: {stderr}");
    let want = format!("wove {} spans", PING_ROUNDS * 48);
    assert!(stderr.contains(&want), "{want} in: {stderr}");
    assert!(stderr.contains("sink otlp-http"), "{stderr}");
    let file = std::fs::File::open(&out_file).expect("woven file");
    let mut r = weft_model::codec::stream::reader(
        weft_model::codec::stream::Format::OtlpJson,
        std::io::BufReader::new(file),
        false,
    )
    .expect("OTLP JSON reader");
    let mut spans = Vec::new();
    while r.next_batch(&mut spans, 1000).expect("woven spans") {}
    let mut per: std::collections::HashMap<TraceId, (usize, u64)> = Default::default();
    for sp in &spans {
        let e = per.entry(sp.trace_id).or_insert((0, u64::MAX));
        e.0 += 1;
        e.1 = e.1.min(sp.start_ns);
    }
    let mut ping: Vec<(u64, TraceId)> =
        per.into_iter().filter(|(_, (n, _))| *n > 1).map(|(t, (_, s))| (s, t)).collect();
    ping.sort();
    assert_eq!(ping.len() as u64, PING_ROUNDS, "one ping trace per round");
    ping.into_iter().map(|x| x.1).collect()
}

/// `weft explore`'s forest on the server: weft-synth's VAIF checkout traces (the exhaustive
/// ones the explore CLI test replays) are imported, a replay run over them publishes its forest
/// to the server (`--publish`), and `weft explore show --collector` reads it back. Returns the
/// three problems' tracepoints (variance, slow, key).
fn explore_forest(dir: &Path, server: &Server, otlp_url: &str) -> [String; 3] {
    use weft_model::codec::stream::Format;
    use weft_synth::vaif::{Generator, Shape};
    let shape = Shape { depth: 3, fanout: 2 };
    let problems = shape.problems();
    let learn: Vec<Span> = Generator::new(shape, 1).take(200).flatten().collect();
    let replay: Vec<Span> = Generator::new(shape, 2).take(1500).flatten().collect();
    crate::common::write_spans(&dir.join("learn.otlp.json"), Format::OtlpJson, &learn);
    crate::common::write_spans(&dir.join("replay.pb"), Format::OtlpProto, &replay);
    std::fs::write(dir.join("token"), TOKEN).expect("token file");
    post(otlp_url, &replay, 10_000);
    let p = |n: &str| dir.join(n).display().to_string();
    // A replay run publishing to the server: state directory, epochs, token file.
    let run = |state: &str, epochs: &str, token: &str| -> Vec<String> {
        let (replay, learn, state, token) = (p("replay.pb"), p("learn.otlp.json"), p(state), p(token));
        [
            "explore",
            "run",
            "--replay",
            &replay,
            "--learn",
            &learn,
            "--state",
            &state,
            "--traces-per-epoch",
            "100",
            "--max-epochs",
            epochs,
            "--publish",
            &server.url,
            "--control-token-file",
            &token,
        ]
        .map(String::from)
        .into()
    };
    let args = run("state", "30", "token");
    crate::common::run_ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    // A wrong token: the run ends, then fails saying the forest was not published.
    std::fs::write(dir.join("wrong-token"), "nope").expect("token file");
    let args = run("state-wrong", "1", "wrong-token");
    let e = crate::common::run_err(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        e.contains("the forest could not be published") && e.contains("refused the control token"),
        "{e}"
    );
    let show = crate::common::run_ok(&["explore", "show", "--collector", &server.url]);
    let show = String::from_utf8_lossy(&show.stdout);
    let local = crate::common::run_ok(&["explore", "show", "--state", &p("state")]);
    assert_eq!(show, String::from_utf8_lossy(&local.stdout), "the collector's forest is the run's");
    for tp in [&problems.variance, &problems.slow, &problems.key] {
        assert!(show.contains(&format!("enable {tp}")), "{tp} in {show}");
    }
    // Why, for the key finding's group representative, from the collector's forest.
    let mut r = agent().get(&format!("{}/api/ui/explore", server.url)).call().expect("GET /api/ui/explore");
    let v: serde_json::Value =
        serde_json::from_str(&r.body_mut().read_to_string().expect("body")).expect("JSON");
    let rep = v["forest"]["trees"]
        .as_object()
        .into_iter()
        .flat_map(|t| t.values())
        .flat_map(|t| t["findings"].as_array().into_iter().flatten())
        .find(|f| f["principle"] == "key")
        .and_then(|f| f["group"].as_str())
        .expect("a key finding with its group")
        .to_owned();
    let why = crate::common::run_ok(&["explore", "why", &rep, "--collector", &server.url]);
    let why = String::from_utf8_lossy(&why.stdout);
    assert!(why.contains(&format!("{}: hypothesis #", problems.key)), "{why}");
    [problems.variance, problems.slow, problems.key]
}

fn trace_of(spans: &[Span], pred: impl Fn(&Span) -> bool) -> TraceId {
    spans.iter().find(|s| pred(s)).map(|s| s.trace_id).expect("generated span")
}

/// The UI's trace and breakdown endpoints next to the Zipkin v2 trace endpoint for the same
/// 100K-span trace, and the breakdown of the 300 shop traces next to Zipkin's `traceMany` of
/// the same traces, in the same run (second reads: all warm).
fn peer_figures(url: &str, id: &TraceId, shop: &[String]) -> Vec<String> {
    let agent = agent();
    let mut out = Vec::new();
    let shop = shop.join(",");
    for (what, path) in [
        ("big_trace_ui_trace_api", format!("/api/ui/trace/{id}")),
        ("big_trace_ui_breakdown_api", format!("/api/ui/breakdown?traces={id}")),
        ("big_trace_zipkin_v2_trace_api", format!("/api/v2/trace/{id}")),
        ("shop_300_ui_breakdown_api", format!("/api/ui/breakdown?by=service&traces={shop}")),
        ("shop_300_zipkin_v2_tracemany_api", format!("/api/v2/traceMany?traceIds={shop}")),
    ] {
        let mut best = f64::MAX;
        let mut bytes = 0;
        for _ in 0..2 {
            let t = Instant::now();
            if let Ok(mut r) = agent.get(&format!("{url}{path}")).call() {
                bytes = r.body_mut().with_config().limit(1 << 30).read_to_vec().map(|b| b.len()).unwrap_or(0);
            }
            best = best.min(t.elapsed().as_secs_f64() * 1e3);
        }
        out.push(format!("metric {what}_ms {best:.1}"));
        out.push(format!("metric {what}_kb {:.1}", bytes as f64 / 1e3));
    }
    out
}

fn screenshots_dir() -> PathBuf {
    // target/debug/weft → target/ui-screenshots
    let exe = Path::new(env!("CARGO_BIN_EXE_weft"));
    exe.parent()
        .and_then(Path::parent)
        .map(|t| t.join("ui-screenshots"))
        .unwrap_or_else(|| "ui-screenshots".into())
}

#[test]
fn web_ui_in_headless_chromium() {
    let chromium =
        PathBuf::from(std::env::var("WEFT_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into()));
    assert!(
        chromium.exists(),
        "{} is missing: run .ci/test once (it installs Debian's chromium from .ci/apt-packages)",
        chromium.display()
    );
    let node_modules = weft_testkit::node_modules();
    assert!(
        node_modules.join("playwright-core").is_dir(),
        "playwright-core is missing from {}: run .ci/test once (it installs .ci/package.json)",
        node_modules.display()
    );

    let server = start_server();
    let otlp_url = format!("{}/v1/traces", server.otlp);
    let now = weft_model::time::now_unix_nanos();

    // OpenTelemetry-SDK-like shop traffic: 300 requests over the last 20 minutes.
    let mut synth = weft_synth::shop::Shop::new(7, now - 20 * 60 * 1_000_000_000, 4_000_000_000);
    let mut shop: Vec<Vec<Span>> = (0..300).map(|_| synth.trace()).collect();
    shop.retain(|t| !t.is_empty());
    let shop_spans: Vec<Span> = shop.iter().flatten().cloned().collect();
    post(&otlp_url, &shop_spans, 5_000);

    // Two checkout requests to compare: the shortest and the longest of one route.
    let root_of = |t: &Vec<Span>| t.iter().find(|s| s.parent_span_id.is_none()).cloned();
    let mut checkout: Vec<(u64, TraceId)> = shop
        .iter()
        .filter_map(root_of)
        .filter(|r| r.name == "POST /api/checkout")
        .map(|r| (r.duration_ns(), r.trace_id))
        .collect();
    checkout.sort();
    assert!(checkout.len() >= 2, "the shop generator made checkout requests");
    let compare = [checkout[0].1.to_string(), checkout[checkout.len() - 1].1.to_string()];

    // Woven simulator requests.
    let mut woven = Vec::new();
    for i in 0..12u64 {
        woven.extend(weft_synth::demo::woven::woven_request(
            100 + i,
            now - 10 * 60 * 1_000_000_000 + i * 20_000_000_000,
        ));
    }
    post(&otlp_url, &woven, 5_000);
    let first = &woven[..woven
        .iter()
        .position(|s| s.name == "rpc_call echo" && s.trace_id != woven[0].trace_id)
        .unwrap_or(woven.len())];
    let client = trace_of(first, |s| s.name == "rpc_call echo");
    let request_net = trace_of(first, |s| s.name == "packet host0 → host1");
    let server_tr = trace_of(first, |s| s.name == "rx" && s.service_name() == "nic1");
    let response_net = trace_of(first, |s| s.name == "packet host1 → host0");

    // Really woven traces: `weft weave` on the synthetic SimBricks ping, 8 minutes ago.
    let ping_dir = tempfile::tempdir().expect("ping dir");
    let ping = weave_ping(ping_dir.path(), &otlp_url, now - 8 * 60 * 1_000_000_000);

    // One 100,000-span trace.
    let big = weft_synth::demo::woven::big_trace(3, BIG_SPANS, now - 5 * 60 * 1_000_000_000);
    let big_id = big[0].trace_id;
    post(&otlp_url, &big, 10_000);

    // The hypothesis forest of a replay run over imported traces.
    let explore_dir = tempfile::tempdir().expect("explore dir");
    let findings = explore_forest(explore_dir.path(), &server, &otlp_url);

    // Control actions: one agent over one traced process (live_query's emitter), which emits
    // LIVE_EVENTS events once the live query the browser starts is installed in it, then
    // waits for the browser's Stop to detach it. Captures go to the same agent.
    let live_dir = tempfile::tempdir().expect("live dir");
    let (probes, marks) = (live_dir.path().join("probes"), live_dir.path().join("markers"));
    for d in [&probes, &marks] {
        std::fs::create_dir_all(d).expect("live dirs");
    }
    std::fs::set_permissions(&probes, std::os::unix::fs::PermissionsExt::from_mode(0o700)).expect("chmod");
    let _emitter = live_query::emitter(&probes, &marks, LIVE_EVENTS, 1);
    let spool = live_dir.path().join("spool");
    let _agent = live_query::agent(&probes, &spool, (&server.otlp, &server.url), LIVE_AGENT, TOKEN);
    crate::agent::wait_for("the agent to report the emitter's tracepoint", Duration::from_secs(60), || {
        let explain = format!("EXPLAIN {}", live_query::QUERY);
        live_query::call("POST", &format!("{}/api/control/queries", server.url), Some(TOKEN), Some(&explain))
            .0
            == 200
    });
    // A SERVER span of a checkout trace: its service is what the Capture buttons target.
    let capture = shop
        .iter()
        .flatten()
        .find(|s| s.trace_id.to_string() == compare[0] && s.kind == weft_model::SpanKind::Server)
        .expect("a checkout trace has a SERVER span");

    let shots = screenshots_dir();
    let profile = tempfile::tempdir().expect("profile dir");
    let cfg = serde_json::json!({
        "url": server.url,
        "shots": shots,
        "profile": profile.path(),
        "chromium": chromium,
        "big": big_id.to_string(),
        "bigSpans": BIG_SPANS,
        "compare": compare,
        "explore": findings,
        "live": {
            "token": TOKEN,
            "query": live_query::QUERY,
            "events": LIVE_EVENTS,
            "kinds": live_query::KINDS,
            "agent": LIVE_AGENT,
        },
        "capture": {
            "trace": capture.trace_id.to_string(),
            "span": capture.span_id.to_string(),
            "service": capture.service_name(),
        },
        "ping": {
            "rounds": PING_ROUNDS,
            "trace": ping[1].to_string(),
            "traces": ping.iter().map(|t| t.to_string()).collect::<Vec<_>>(),
        },
        "woven": {
            "client": client.to_string(),
            "requestNet": request_net.to_string(),
            "server": server_tr.to_string(),
            "responseNet": response_net.to_string(),
        },
    });
    if let Some(secs) = std::env::var("WEFT_UI_HOLD").ok().and_then(|v| v.parse::<u64>().ok()) {
        // Development: keep the loaded server up to look at by hand.
        eprintln!("holding {} for {secs} s: {cfg}", server.url);
        std::thread::sleep(Duration::from_secs(secs));
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/ui_browser.mjs");
    let mut child = Command::new("node")
        .arg(&script)
        .env("WEFT_UI_TEST", cfg.to_string())
        .env("WEFT_NODE_MODULES", &node_modules)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("node is needed for the UI tests (installed with .ci/test's peers)");
    let mut lines = Vec::new();
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            println!("ui: {line}");
            lines.push(line);
        }
    }
    let status = child.wait().expect("node");
    // Measurements go to stderr directly (past the test harness's capture, so a passing run
    // shows them too) and to a file beside the screenshots.
    let mut report: Vec<String> = lines.iter().filter(|l| l.starts_with("metric ")).cloned().collect();
    let shop_ids: Vec<String> =
        shop.iter().filter_map(|t| t.first()).map(|s| s.trace_id.to_string()).collect();
    report.extend(peer_figures(&server.url, &big_id, &shop_ids));
    report.push(format!("screenshots {}", shots.display()));
    let text: String = report.iter().map(|l| format!("ui: {l}\n")).collect();
    {
        use std::io::Write;
        let _ = std::io::stderr().write_all(text.as_bytes());
    }
    let _ = std::fs::write(shots.join("metrics.txt"), &text);
    assert!(
        status.success() && lines.iter().any(|l| l == "UI BROWSER TESTS PASSED"),
        "browser tests failed (see the output above and {}/zz-failure.png)",
        shots.display()
    );
    // The browser's Stop detached the query in the traced process (its tables freed); its two
    // Capture clicks reached the control API with the service and the periods chosen.
    crate::agent::wait_for("the emitter to see its query removed", Duration::from_secs(30), || {
        !live_query::markers(&marks, ".detached").is_empty()
    });
    assert_eq!(live_query::markers(&marks, ".detached"), ["freed"]);
    let (st, caps) =
        live_query::call("GET", &format!("{}/api/control/captures", server.url), Some(TOKEN), None);
    assert_eq!(st, 200, "{caps}");
    let mut periods: Vec<u64> = caps
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["capture"]["service"] == capture.service_name())
        .filter_map(|c| c["capture"]["period_ms"].as_u64())
        .collect();
    periods.sort_unstable();
    assert_eq!(periods, [300, 500], "{caps}");
    let passed = lines.iter().filter(|l| l.starts_with("ok ")).count();
    assert!(passed >= 20, "only {passed} browser steps reported ok");
}
