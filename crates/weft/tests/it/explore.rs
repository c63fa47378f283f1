//! `weft explore` end to end: learn a search space from exhaustive traces (OTLP JSON), replay
//! others (OTLP protobuf) through the loop, read the report, show the forest, ask why;
//! malformed inputs. Live: archipelago's tiers with its three injected problems, `weft agent`
//! and `weft serve` — learn from an all-on period read back from the collector, a refused
//! token, the loop with short epochs localizing each problem to its function (a quiet request
//! type finds nothing) and publishing its forest to the collector, Ctrl-C, and a crashed run's
//! leftovers cleaned up; the enabled set ends as it began.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use archipelago::client::Client;
use weft_control::client::Collector;
use weft_control::proto::{ProbeCommand, ProbeOp};
use weft_model::codec::stream::Format;
use weft_synth::vaif::{CHECKOUT, Generator, KEY, Shape};

use crate::agent::{
    AgentProc, Collector as AgentCollector, TOKEN, WEFT, cluster_with, http, segments, temp, wait_for,
};
use crate::common::{run_err, run_ok, write_spans};

#[test]
fn learn_run_show_why() {
    let dir = std::env::temp_dir().join(format!("weft-explore-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = |n: &str| dir.join(n).display().to_string();
    let shape = Shape { depth: 3, fanout: 2 };
    let problems = shape.problems();
    let learn: Vec<_> = Generator::new(shape, 1).take(200).flatten().collect();
    write_spans(&dir.join("learn.otlp.json"), Format::OtlpJson, &learn);
    let replay: Vec<_> = Generator::new(shape, 2).take(1500).flatten().collect();
    write_spans(&dir.join("replay.pb"), Format::OtlpProto, &replay);

    run_ok(&["explore", "learn", &p("learn.otlp.json"), "-o", &p("space.toml")]);
    let space = std::fs::read_to_string(dir.join("space.toml")).unwrap();
    assert!(space.contains("always_on") && space.contains(&problems.variance), "{space}");

    let (replay, space_file, state) = (p("replay.pb"), p("space.toml"), p("state"));
    let run = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> =
            ["explore", "run", "--replay", &replay, "--state", &state].map(String::from).into();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let args = run(&[
        "--space",
        &space_file,
        "--traces-per-epoch",
        "100",
        "--report",
        &p("report.json"),
        "--max-epochs",
        "30",
    ]);
    let out = run_ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap();
    let findings = report["findings"].as_array().unwrap();
    let top = |principle: &str| {
        findings
            .iter()
            .find(|f| f["principle"] == principle)
            .unwrap_or_else(|| panic!("no {principle} finding in {report:#}"))
    };
    assert_eq!(top("variance")["tracepoints"][0], problems.variance.as_str());
    assert_eq!(top("slow")["tracepoints"][0], problems.slow.as_str());
    assert_eq!(top("key")["tracepoints"][0], problems.key.as_str());
    assert_eq!(top("key")["key"], KEY);
    assert!(top("variance")["share_of_variance"].as_f64().is_some_and(|s| s > 0.1), "{report:#}");
    assert!(report["tracepoints_enabled"].as_u64().unwrap() < report["tracepoints_total"].as_u64().unwrap());
    assert!(report["epochs"].as_u64().unwrap() >= 3);
    assert!(stdout.contains(&format!("{CHECKOUT} [slow]: {}", problems.slow)), "{stdout}");

    let show = run_ok(&["explore", "show", "--state", &p("state")]);
    let show = String::from_utf8_lossy(&show.stdout);
    assert!(show.contains(&format!("enable {}", problems.key)) && show.contains("finding (key"), "{show}");

    // Why, for the key finding's group representative: from the forest alone and from the file.
    let rep = top("key")["group"].as_str().unwrap().to_owned();
    let why = run_ok(&["explore", "why", &rep, "--state", &p("state")]);
    let why = String::from_utf8_lossy(&why.stdout);
    assert!(why.contains(&format!("{}: hypothesis #", problems.key)), "{why}");
    let why = run_ok(&["explore", "why", &rep, "--state", &p("state"), "--traces", &p("replay.pb")]);
    let why = String::from_utf8_lossy(&why.stdout);
    assert!(why.contains("cart.load: always on") && why.contains("not enabled by weft explore"), "{why}");

    // Malformed inputs: named errors.
    let args = run(&["--space", &space_file, "--request-type", "PUT /nope"]);
    let e = run_err(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(e.contains("request type \"PUT /nope\" is not in the search space"), "{e}");
    std::fs::write(dir.join("bad.toml"), space.replacen("bins = []", "bins = [3.0, 3.0]", 1)).unwrap();
    let args = run(&["--space", &p("bad.toml")]);
    let e = run_err(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(e.contains("bad.toml") && e.contains("keys[0].bins"), "{e}");
    let e = run_err(&["explore", "why", "00000000000000000000000000000abc", "--state", &p("state")]);
    assert!(e.contains("not a group representative"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn cmd(op: ProbeOp, selector: &str) -> ProbeCommand {
    ProbeCommand { op, selector: Some(selector.into()), pid: None, service: None, agent: None }
}

/// The tracepoints enabled in any process.
fn enabled(c: &Collector) -> BTreeSet<String> {
    let list = ProbeCommand { op: ProbeOp::List, selector: None, pid: None, service: None, agent: None };
    let st = c.submit(&list, Duration::from_secs(20)).expect("list");
    assert!(st.complete, "{st:?}");
    st.results
        .iter()
        .flat_map(|r| &r.processes)
        .flat_map(|p| &p.tracepoints)
        .filter(|t| t.enabled)
        .map(|t| t.name.clone())
        .collect()
}

/// Requests through the gateway until `stop`, from two clients: writes of 4–32 KiB (the `key`
/// problem's `len`; half of them meet the `variance` problem), one in 32 a read of a hole (the
/// rare `slow` path) and one in 10 a `stat` (the quiet request type). Returns the count.
fn mixed_load(gw: std::net::SocketAddr, stop: Arc<AtomicBool>) -> Vec<JoinHandle<u64>> {
    (0..2u64)
        .map(|t| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut c = Client::connect(gw).expect("connect to the gateway");
                let mut i = t;
                while !stop.load(Ordering::Relaxed) {
                    let r = if i % 10 == 9 {
                        c.stat("vol0")
                    } else if i % 32 == 5 {
                        c.read(&format!("hole{i}"), 0, 4096)
                    } else {
                        let len = 4096 * (1 + (i.wrapping_mul(7919) >> 3) % 8) as usize;
                        c.write(&format!("vol{}", i % 3), (i % 8) * 4096, &vec![(i % 251) as u8 + 1; len])
                    };
                    let r = r.expect("request");
                    assert!(r.ok, "request {i} failed: {:?}", r.error);
                    i += 2;
                    std::thread::sleep(Duration::from_millis(1));
                }
                i / 2
            })
        })
        .collect()
}

fn stop_load(stop: &AtomicBool, load: Vec<JoinHandle<u64>>) -> u64 {
    stop.store(true, Ordering::Relaxed);
    load.into_iter().map(|h| h.join().expect("load thread")).sum()
}

/// The collector's traces of a request type (OTLP JSON), written to `path`.
fn save_traces(base: &str, request_type: &str, n: usize, path: &str) {
    let url = format!("{base}/api/v3/traces?query.operationName={request_type}&query.searchDepth={n}");
    let mut r = http().get(&url).call().expect("GET traces");
    let v: serde_json::Value = serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
    std::fs::write(path, serde_json::to_vec(&v["result"]).unwrap()).unwrap();
}

#[test]
fn live_loop_localizes_archipelagos_problems() {
    let (work, data, spool, dir) = (temp(), temp(), temp(), temp());
    let probes = work.path().join("probes");
    let collector = AgentCollector::start(data.path());
    let base = collector.query();
    let _agent = AgentProc::start(&probes, spool.path(), &collector, &["--batch-interval", "200ms"]);
    let tiers = cluster_with(work.path(), &probes, "variance,slow,key");
    wait_for("four segments", Duration::from_secs(30), || segments(&probes) == 4);
    let control = Collector::new(&base, Some(TOKEN.into()));
    wait_for("the agent polling the control API", Duration::from_secs(60), || {
        control.agents().is_ok_and(|a| a.iter().any(|x| x.polling))
    });
    let original = enabled(&control);
    assert!(original.contains("gateway.request") && original.len() < 30, "{original:?}");
    let p = |n: &str| dir.path().join(n).display().to_string();

    // An exhaustive period (every tracepoint on), read back from the collector.
    let st = control.submit(&cmd(ProbeOp::Enable, "all"), Duration::from_secs(20)).expect("enable all");
    assert!(st.complete && st.matched > 100, "{st:?}");
    let tracepoints = enabled(&control).len();
    assert!(tracepoints > 100, "archipelago has over 100 tracepoints: {tracepoints}");
    let stop = Arc::new(AtomicBool::new(false));
    let load = mixed_load(tiers.gateway, stop.clone());
    std::thread::sleep(Duration::from_secs(4));
    let requests = stop_load(&stop, load);
    std::thread::sleep(Duration::from_secs(2));
    save_traces(&base, "gateway.request", 400, &p("learn.otlp.json"));
    save_traces(&base, "gateway.stat", 60, &p("learn-stat.otlp.json"));
    run_ok(&["explore", "learn", &p("learn.otlp.json"), &p("learn-stat.otlp.json"), "-o", &p("space.toml")]);
    let space = std::fs::read_to_string(p("space.toml")).unwrap();
    for f in ["blocker.extent.checksum", "mapper.hole.template.build", "mapper.journal.lock"] {
        assert!(space.contains(&format!("\"{f}:entry\"")), "{requests} requests; {f} on a path: {space}");
    }
    control.submit(&cmd(ProbeOp::Disable, "all"), Duration::from_secs(20)).expect("disable all");
    for name in &original {
        control
            .submit(&cmd(ProbeOp::Enable, &format!("name:{name}")), Duration::from_secs(20))
            .expect("enable");
    }
    assert_eq!(enabled(&control), original);

    let run = |token_file: &str, extra: &[&str]| -> Command {
        let mut c = Command::new(WEFT);
        c.args(["explore", "run", "--collector", &base, "--control-token-file", token_file])
            .args(["--space", &p("space.toml"), "--state", &p("state"), "--settle", "500ms"])
            .args(["--epoch", "4s", "--check-interval", "1s", "--traces-per-epoch", "300", "--cv", "0.2"])
            .args(["--min-share", "0.2"])
            .args(extra);
        c
    };
    // A refused token: a clear error before anything is switched.
    std::fs::write(p("wrong"), "not-the-token\n").unwrap();
    let out = run(&p("wrong"), &[]).output().expect("weft explore run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("refused the control token"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    std::fs::write(p("token"), format!("{TOKEN}\n")).unwrap();

    // A crashed run left a tracepoint on: the next run disables it first.
    std::fs::create_dir_all(p("state")).unwrap();
    std::fs::write(p("state/enabled.json"), r#"{"blocker.io.fsync":["blocker.io.write/blocker.io.fsync"]}"#)
        .unwrap();
    control.submit(&cmd(ProbeOp::Enable, "name:blocker.io.fsync"), Duration::from_secs(20)).expect("enable");
    assert_ne!(enabled(&control), original);

    // The loop, with traffic.
    let stop = Arc::new(AtomicBool::new(false));
    let load = mixed_load(tiers.gateway, stop.clone());
    let out = run(&p("token"), &["--max-epochs", "20", "--report", &p("report.json")])
        .output()
        .expect("weft explore run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("disabled 1 tracepoints a previous run had left enabled"), "{stderr}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(p("report.json")).unwrap()).unwrap();
    let findings = report["findings"].as_array().unwrap();
    eprintln!("{stdout}{stderr}");
    for (problem, function) in [
        ("variance", "blocker.extent.checksum"),
        ("slow", "mapper.hole.template.build"),
        ("key", "mapper.journal.lock"),
    ] {
        let f = findings
            .iter()
            .find(|f| f["tracepoints"][0] == function)
            .unwrap_or_else(|| panic!("{problem}: {function} not localized: {report:#}"));
        eprintln!(
            "localized {problem}: {function} by {} in epoch {} ({} tracepoints enabled for {})",
            f["principle"], f["epoch"], f["enabled"], f["request_type"]
        );
    }
    assert!(findings.iter().all(|f| f["request_type"] != "gateway.stat"), "the quiet type: {report:#}");
    let stat = report["request_types"].as_array().unwrap().iter().find(|t| t["name"] == "gateway.stat");
    assert!(stat.is_some_and(|t| t["traces"].as_u64() > Some(0)), "{report:#}");
    let on = report["tracepoints_enabled"].as_u64().unwrap() as usize;
    assert!(on * 10 <= tracepoints, "{on} of {tracepoints} tracepoints enabled: {report:#}");
    assert_eq!(enabled(&control), original, "the run disabled what it enabled and nothing else");
    assert!(!dir.path().join("state/enabled.json").exists());
    // The run published its forest to the collector, which keeps it next to the traces.
    let at_collector = run_ok(&["explore", "show", "--collector", &base]);
    let local = run_ok(&["explore", "show", "--state", &p("state")]);
    assert_eq!(String::from_utf8_lossy(&at_collector.stdout), String::from_utf8_lossy(&local.stdout));
    assert!(data.path().join("explore/forest.json").is_file());

    // Ctrl-C in a second run.
    std::fs::remove_file(p("state/forest.json")).unwrap();
    let child = run(&p("token"), &["--max-epochs", "50"]).stderr(Stdio::piped()).spawn().expect("spawn");
    wait_for("the first epoch", Duration::from_secs(60), || dir.path().join("state/forest.json").exists());
    // SAFETY: kill(2) on our child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.contains("interrupted"), "{stderr}");
    stop_load(&stop, load);
    assert_eq!(enabled(&control), original, "Ctrl-C disabled what the run enabled and nothing else");
    tiers.stop();
}
