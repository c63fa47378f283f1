//! `weft exist capture` on a real target (root, as `weft record`'s tests): the request server
//! `examples/exist/requests.c` writes its request spans (with `thread.id`) while weft traces its
//! functions for 500 ms; the function spans must land inside the right request spans.

use std::collections::HashMap;
use std::process::{Child, Command};

use std::time::Duration;

use weft_model::{Span, SpanId, Value};

use super::common::{read_otlp_json as read_spans, weft};

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn cores() -> String {
    std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap().trim().to_owned()
}

fn thread(s: &Span) -> Option<i64> {
    s.attributes.get("thread.id").and_then(Value::as_i64)
}

#[test]
fn function_spans_inside_the_requests_that_ran_them() {
    let dir = tempfile::tempdir().unwrap();
    let bin = weft_testkit::compile_c("examples/exist/requests.c", dir.path());
    let app = dir.path().join("requests.jsonl");
    let server = Server(Command::new(&bin).arg(&app).args(["--seconds", "4"]).spawn().unwrap());
    std::thread::sleep(Duration::from_millis(100));
    let out = dir.path().join("exist.otlp.json");
    let sched = dir.path().join("sched.bin");
    let o = weft()
        .args(["exist", "capture", "--pid", &server.0.id().to_string(), "--period", "500ms"])
        .args(["--functions", "handle_request,parse_request,lookup,compute", "--cores", &cores()])
        .args(["--budget", "64MiB", "--weave"])
        .arg(&app)
        .arg("--out")
        .arg(&out)
        .arg("--sched-out")
        .arg(&sched)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    println!("{err}");
    assert!(o.status.success(), "{err}");
    assert!(err.contains("start latency") && err.contains("stop latency"), "{err}");

    let spans = read_spans(&out);
    let by_id: HashMap<SpanId, &Span> = spans.iter().map(|s| (s.span_id, s)).collect();
    let requests: Vec<&Span> = spans.iter().filter(|s| s.name == "GET /item").collect();
    let calls: Vec<&Span> = spans
        .iter()
        .filter(|s| ["handle_request", "parse_request", "lookup", "compute"].contains(&&*s.name))
        .collect();
    assert!(requests.len() > 20 && calls.len() > 20, "{} requests, {} calls", requests.len(), calls.len());
    let mut inside = 0;
    let mut gap = 0;
    for c in &calls {
        let Some(p) = c.parent_span_id.and_then(|p| by_id.get(&p)) else { continue };
        let want = match &*c.name {
            "handle_request" => "GET /item",
            "parse_request" | "lookup" => "handle_request",
            _ => "lookup",
        };
        if p.name.starts_with("thread ") {
            // Outside any request span written so far (the request still ran when the file
            // was read, or it began before the capture): only handle_request is left there.
            continue;
        }
        if p.name == "GET /item" && want != "GET /item" {
            // Its enclosing call began in the controller's moment before the core's tracer
            // was on (see below): the call is still inside its request, one level up.
            gap += 1;
            assert_eq!(c.trace_id, p.trace_id);
            continue;
        }
        assert_eq!(p.name, want, "{} under {}", c.name, p.name);
        assert_eq!(c.trace_id, p.trace_id);
        assert!(p.start_ns <= c.start_ns && c.end_ns <= p.end_ns, "{} outside {}", c.name, p.name);
        assert_eq!(thread(c), thread(p));
        // The request's service owns what it did inside.
        assert_eq!(c.resource.service_name(), "requests");
        inside += 1;
    }
    assert!(inside * 10 >= calls.len() * 8, "{inside} of {} calls inside requests", calls.len());
    assert!(gap * 50 <= calls.len(), "{gap} of {} calls one level up (enclosing call missed)", calls.len());
    // The requests inside the capture have their handle_request — but for the few a
    // worker served on a core in the moment between its first switch-in there and the
    // controller switching that core's tracer on (at most a poll interval, once per core).
    let window = spans
        .iter()
        .filter(|s| s.name.starts_with("thread "))
        .fold((u64::MAX, 0), |w, s| (w.0.min(s.start_ns), w.1.max(s.end_ns)));
    let within: Vec<&&Span> =
        requests.iter().filter(|r| r.start_ns > window.0 && r.end_ns < window.1).collect();
    let missed = within
        .iter()
        .filter(|r| !calls.iter().any(|c| c.name == "handle_request" && c.parent_span_id == Some(r.span_id)))
        .count();
    println!("{missed} of {} requests inside the capture without their calls", within.len());
    assert!(within.len() > 20 && missed * 20 <= within.len(), "{missed} of {} missed", within.len());
    // The 24-byte scheduler records.
    let len = std::fs::metadata(&sched).unwrap().len();
    assert!(len > 16 && (len - 16).is_multiple_of(24), "{len}");
}

/// A series in one process: `--every`/`--rounds`, each round's file, the module's symbols read
/// once, each round's CPU and the series' peak memory reported.
#[test]
fn a_series_of_captures_in_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let bin = weft_testkit::compile_c("examples/exist/requests.c", dir.path());
    // (killed when the test ends; long enough for both rounds on a loaded machine)
    let server = Server(
        Command::new(&bin).arg(dir.path().join("r.jsonl")).args(["--seconds", "120"]).spawn().unwrap(),
    );
    std::thread::sleep(Duration::from_millis(100));
    let out = dir.path().join("exist.otlp.json");
    let o = weft()
        .args(["exist", "capture", "--pid", &server.0.id().to_string(), "--period", "200ms"])
        .args(["--functions", "handle_request", "--every", "1s", "--rounds", "2", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    println!("{err}");
    assert!(o.status.success(), "{err}");
    for n in [1, 2] {
        let f = dir.path().join(format!("exist.{n}.otlp.json"));
        assert!(read_spans(&f).iter().any(|s| s.name == "handle_request"), "round {n}");
    }
    assert!(!out.exists());
    let cpu: Vec<&str> = err.lines().filter(|l| l.starts_with("weft exist: CPU: ")).collect();
    assert_eq!(cpu.len(), 2, "{err}");
    assert!(cpu[0].ends_with("resolved from the module's symbols") && cpu[1].ends_with("functions cached"));
    let series =
        err.lines().find(|l| l.starts_with("weft exist: series: 2 of 2 rounds")).expect("series line");
    let rss: u64 =
        series.split("peak RSS ").nth(1).and_then(|x| x.split(' ').next()).unwrap().parse().unwrap();
    assert!(rss > 1 << 20, "{series}");
    assert!(series.contains("peak capture buffers"), "{series}");

    // A target that goes away ends the series with its error, its figures still reported.
    let short =
        Server(Command::new(&bin).arg(dir.path().join("s.jsonl")).args(["--seconds", "1"]).spawn().unwrap());
    std::thread::sleep(Duration::from_millis(100));
    let o = weft()
        .args(["exist", "capture", "--pid", &short.0.id().to_string(), "--period", "200ms"])
        .args(["--functions", "handle_request", "--every", "1s", "--rounds", "5", "--out"])
        .arg(dir.path().join("short.pb"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    // (an exited child not reaped yet is a zombie: its executable is gone)
    assert!(
        err.contains(&format!("process {}", short.0.id())) && err.contains("of 5: capture refused"),
        "{err}"
    );
    assert!(err.contains("weft exist: series: ") && !err.contains("series: 5 of 5"), "{err}");
    drop(short);

    // A series needs its interval, and an interval at least the period.
    let e =
        weft().args(["exist", "capture", "--pid", "1", "--rounds", "2", "--out"]).arg(&out).output().unwrap();
    assert!(String::from_utf8_lossy(&e.stderr).contains("--rounds 2 needs --every"));
    let e = weft()
        .args(["exist", "capture", "--pid", "1", "--period", "2s", "--every", "1s", "--rounds", "2", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&e.stderr).contains("is shorter than --period"));
}

#[test]
fn refusals_name_their_reason() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.json");
    let me = std::process::id().to_string();
    let run = |extra: &[&str]| {
        let o = weft().args(["exist", "capture", "--out"]).arg(&out).args(extra).output().unwrap();
        assert!(!o.status.success());
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let e = run(&["--pid", &me, "--backend", "intel-pt"]);
    assert!(e.contains("use the software backend"), "{e}");
    assert!(e.contains("no Intel PT") || e.contains("has Intel PT"), "{e}");
    let e = run(&["--pid", &me, "--period", "3s"]);
    assert!(e.contains("a period of 3000 ms is outside 100-2000 ms (--force allows it)"), "{e}");
    let e = run(&["--pid", "999999999"]);
    assert!(e.contains("no process 999999999 on this node"), "{e}");
    let e = run(&["--pid", &me, "--budget", "1MiB"]);
    assert!(e.contains("below one minimum per-core buffer"), "{e}");
    let e = run(&["--pid", &me, "--cores", "x-y"]);
    assert!(e.contains("--cores \"x-y\""), "{e}");
    assert!(!out.exists());

    // Without root: refused before anything is opened, saying what is missing.
    let bin = dir.path().join("weft");
    std::fs::copy(env!("CARGO_BIN_EXE_weft"), &bin).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&bin)
        .args(["exist", "capture", "--pid", &me, "--out"])
        .arg(dir.path().join("np.json"))
        .output()
        .expect("setpriv (util-linux)");
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(e.contains("capture refused: no permission for perf events") && e.contains("needs root"), "{e}");
    assert!(e.contains("perf_event_paranoid is"), "{e}");
}

/// Through the collector: a capture request on the control API (token) reaches the agent,
/// which runs it and ships the function spans on its OTLP path into the store.
#[test]
fn a_capture_requested_through_the_collector_lands_in_the_store() {
    use super::agent::{AgentProc, Collector, TOKEN, http, wait_for};
    let dir = tempfile::tempdir().unwrap();
    let collector = Collector::start(&dir.path().join("data"));
    let probe_dir = dir.path().join("probes");
    let _agent = AgentProc::start(&probe_dir, &dir.path().join("spool"), &collector, &[]);
    let bin = weft_testkit::compile_c("examples/exist/requests.c", dir.path());
    let server = Server(
        Command::new(&bin).arg(dir.path().join("app.jsonl")).args(["--seconds", "30"]).spawn().unwrap(),
    );
    let pid = server.0.id();
    let post = |token: Option<&str>, body: &str| {
        let mut req = http().post(&format!("{}/api/control/captures?wait=20s", collector.query()));
        if let Some(t) = token {
            req = req.header("Authorization", &format!("Bearer {t}"));
        }
        let mut r = req.send(body).unwrap();
        let st = r.status().as_u16();
        (
            st,
            serde_json::from_str::<serde_json::Value>(&r.body_mut().read_to_string().unwrap())
                .unwrap_or_default(),
        )
    };
    let body = format!(r#"{{"pid":{pid},"period_ms":300,"functions":["handle_request","lookup"]}}"#);
    assert_eq!(post(None, &body).0, 401);
    // The agent polls once before it takes commands.
    let mut v = serde_json::Value::Null;
    wait_for("the agent to run a capture", Duration::from_secs(60), || {
        let (st, got) = post(Some(TOKEN), &body);
        v = got;
        st == 200 && v["results"].as_array().is_some_and(|r| !r.is_empty())
    });
    println!("capture through the collector: {v}");
    let r = &v["results"][0];
    assert!(r["error"].is_null(), "{r}");
    assert!(r["calls"].as_u64().unwrap() > 10, "{r}");
    assert!(r["spans"].as_u64().unwrap() >= r["calls"].as_u64().unwrap());
    assert!(r["stop_latency_us"].is_u64() && r["start_latency_us"].is_u64());
    wait_for("the function spans in the store", Duration::from_secs(60), || {
        collector.count("SELECT count(*) FROM spans WHERE name = 'handle_request'") > 10
    });
    // A bad request comes back refused with its reason, nothing traced.
    let (st, v) = post(Some(TOKEN), r#"{"pid":999999999,"period_ms":300}"#);
    assert_eq!(st, 200, "{v}");
    assert!(v["results"][0]["error"].as_str().unwrap().contains("no process 999999999"), "{v}");
}

/// EXIST's cluster level on this machine: four `weft agent`s (nodes `node-0`..`node-3`), each
/// with one replica of `requests --mix K` (the request mix shifts every 250 ms, replica K
/// K phases ahead), one collector. A long capture of one replica is the exhaustive reference;
/// one profiling round through the optimizer captures every replica briefly (the overhead cap
/// sets the period); the replicas' merged profile is at least as accurate as each alone. Then
/// slow server spans of `requests` fire the anomaly rule, which captures all four replicas,
/// once per cooldown.
#[test]
fn merged_replicas_fill_each_others_gaps_and_anomalies_capture_every_replica() {
    use super::agent::{AgentProc, Collector, TOKEN, http, wait_for};
    use serde_json::Value as J;
    use weft_server::exist::Profile;
    const N: usize = 4;
    const FUNCS: [&str; 7] =
        ["handle_request", "parse_request", "get_item", "put_item", "scan_items", "delete_item", "compute"];
    let dir = tempfile::tempdir().unwrap();
    // Cap: 1 % of a 60 s round at 4x reference overhead = 150 ms.
    let collector = Collector::start_with(
        &dir.path().join("data"),
        &[
            "--exist-rule",
            "service=requests p99>50ms window=1s cooldown=600s functions=handle_request,compute",
            "--exist-priority",
            "requests=1",
            "--exist-sample",
            "1",
            "--exist-overhead",
            "4",
        ],
    );
    let bin = weft_testkit::compile_c("examples/exist/requests.c", dir.path());
    let mut agents = Vec::new();
    let mut servers = Vec::new();
    for k in 0..N {
        let probes = dir.path().join(format!("probes-{k}"));
        let name = format!("node-{k}");
        agents.push(AgentProc::start(
            &probes,
            &dir.path().join(format!("spool-{k}")),
            &collector,
            &["--name", &name],
        ));
        servers.push(Server(
            Command::new(&bin)
                .arg(dir.path().join(format!("app-{k}.jsonl")))
                .args(["--seconds", "120", "--mix", &k.to_string()])
                .env("WEFT_PROBE_DIR", &probes)
                .env("WEFT_PROBE_SERVICE", "requests")
                .spawn()
                .unwrap(),
        ));
    }
    let get = |path: &str| control_get(&collector, path);
    let post = |path: &str, body: &str| -> (u16, J) {
        let mut r = http()
            .post(&format!("{}{path}", collector.query()))
            .header("Authorization", &format!("Bearer {TOKEN}"))
            .send(body)
            .unwrap();
        (
            r.status().as_u16(),
            serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap_or_default(),
        )
    };
    wait_for("every agent polling and reporting its replica", Duration::from_secs(60), || {
        let a = get("/api/control/agents");
        a.as_array().is_some_and(|a| {
            a.iter()
                .filter(|x| {
                    x["polling"] == true && x["report"]["targets"].as_array().is_some_and(|t| t.len() == 1)
                })
                .count()
                == N
        })
    });
    let funcs = serde_json::to_string(&FUNCS).unwrap();
    let profile = |o: &J| {
        let counts: Vec<(String, u64)> = serde_json::from_value(o["functions"].clone()).unwrap_or_default();
        Profile::from_counts(&counts)
    };

    // The exhaustive reference: 4 s (16 phases) of replica 0.
    let pid0 = servers[0].0.id();
    let body =
        format!(r#"{{"pid":{pid0},"agent":"node-0","period_ms":4000,"force":true,"functions":{funcs}}}"#);
    // A capture's outcome: waited for without dispatching anything again (a request that
    // timed out leaves its capture running; asking again would find that replica busy).
    let outcome = |id: u64| -> J {
        let mut e = J::Null;
        wait_for(&format!("capture {id}'s outcome"), Duration::from_secs(180), || {
            e = get(&format!("/api/control/captures/{id}"));
            e["complete"] == true
        });
        e
    };
    let (st, v) = post("/api/control/captures?wait=30s", &body);
    assert_eq!(st, 200, "{v}");
    let v = outcome(v["id"].as_u64().expect("capture id"));
    assert!(
        v["results"].as_array().is_some_and(|r| r.len() == 1) && v["results"][0]["error"].is_null(),
        "{v}"
    );
    let reference = profile(&v["results"][0]);
    assert!(reference.total() > 0, "{v}");
    println!("reference (4 s of node-0): {:?}", reference.0);

    // One profiling round through the optimizer.
    // (the collector's merge is in the round's answer: a round whose captures outlast the
    // request's wait is let finish, then asked again)
    let mut round = J::Null;
    wait_for("a complete profiling round", Duration::from_secs(300), || {
        let (st, v) =
            post("/api/control/exist/plan?wait=30s", &format!(r#"{{"seed":7,"functions":{funcs}}}"#));
        assert_eq!(st, 200, "{v}");
        round = v;
        if round["complete"] == true {
            return round["captures"].as_array().is_some_and(|c| c.len() == N);
        }
        for c in round["captures"].as_array().into_iter().flatten() {
            outcome(c["id"].as_u64().expect("capture id"));
        }
        false
    });
    let plan = &round["plan"]["captures"][0];
    assert_eq!(plan["service"], "requests", "{round}");
    assert_eq!(plan["replicas"].as_array().unwrap().len(), N, "{round}");
    assert!(plan["period_ms"].as_u64().unwrap() <= 150, "the overhead cap: {round}");
    let mut singles = Vec::new();
    for c in round["captures"].as_array().unwrap() {
        assert!(c["reason"].as_str().unwrap().starts_with("profiling"), "{c}");
        let o = &c["results"][0];
        assert!(o["error"].is_null(), "{c}");
        let p = profile(o);
        assert!(p.total() > 0, "{c}");
        singles.push((o["agent"].as_str().unwrap().to_owned(), p));
    }
    singles.sort_by(|a, b| a.0.cmp(&b.0));
    let mut merged = Profile::default();
    let mut line = String::new();
    for (k, (agent, p)) in singles.iter().enumerate() {
        merged.merge(p);
        line += &format!(
            "  {agent}: alone {:.1} %, merged 1..{} {:.1} %\n",
            100.0 * p.accuracy(&reference),
            k + 1,
            100.0 * merged.accuracy(&reference)
        );
    }
    println!("accuracy against the reference ({} ms captures):\n{line}", plan["period_ms"]);
    let served: Profile = serde_json::from_value(round["merged"][0]["profile"].clone()).map(Profile).unwrap();
    assert_eq!(served, merged, "the collector's merge");
    for (agent, p) in &singles {
        assert!(
            merged.accuracy(&reference) >= p.accuracy(&reference),
            "{agent}: merged worse than alone\n{line}"
        );
    }

    // The anomaly rule: fast traffic does nothing; a slow period captures every replica.
    let otlp = |ms: u64| {
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
        let spans: Vec<String> = (0..10)
            .map(|i| {
                format!(
                    r#"{{"traceId":"{:032x}","spanId":"{:016x}","name":"GET /item","kind":2,"startTimeUnixNano":"{}","endTimeUnixNano":"{}"}}"#,
                    now + i,
                    now + i,
                    now - ms * 1_000_000,
                    now
                )
            })
            .collect();
        let body = format!(
            r#"{{"resourceSpans":[{{"resource":{{"attributes":[{{"key":"service.name","value":{{"stringValue":"requests"}}}}]}},"scopeSpans":[{{"spans":[{}]}}]}}]}}"#,
            spans.join(",")
        );
        let r = http()
            .post(&format!("{}/v1/traces", collector.base()))
            .header("Content-Type", "application/json")
            .send(&body)
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
    };
    let anomalies = || -> Vec<J> {
        get("/api/control/captures")
            .as_array()
            .map(|a| {
                a.iter()
                    .filter(|c| c["reason"].as_str().is_some_and(|r| r.starts_with("anomaly")))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    };
    for _ in 0..15 {
        otlp(5);
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(anomalies().is_empty(), "fired on fast traffic: {:?}", anomalies());
    wait_for("the anomaly rule to fire", Duration::from_secs(30), || {
        otlp(100);
        std::thread::sleep(Duration::from_millis(100));
        !anomalies().is_empty()
    });
    let fired = anomalies();
    println!("anomaly: {}", fired[0]["reason"]);
    assert_eq!(fired.len(), N, "{fired:?}");
    let mut targeted: Vec<&str> = fired.iter().map(|c| c["capture"]["agent"].as_str().unwrap()).collect();
    targeted.sort_unstable();
    assert_eq!(targeted, ["node-0", "node-1", "node-2", "node-3"]);
    assert!(fired.iter().all(|c| c["round"] == fired[0]["round"]));
    for c in &fired {
        let id = c["id"].as_u64().unwrap();
        wait_for("the anomaly capture's outcome", Duration::from_secs(30), || {
            get(&format!("/api/control/captures/{id}"))["complete"] == true
        });
        let v = get(&format!("/api/control/captures/{id}"));
        assert!(v["results"][0]["error"].is_null() && v["results"][0]["calls"].as_u64() > Some(0), "{v}");
    }
    // Still slow, within the cooldown: no second round.
    for _ in 0..25 {
        otlp(100);
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(anomalies().len(), N, "rate limit");
    drop(agents);
}

/// A GET on the collector's control API (with the token), its JSON answer.
fn control_get(collector: &super::agent::Collector, path: &str) -> serde_json::Value {
    let mut r = super::agent::http()
        .get(&format!("{}{path}", collector.query()))
        .header("Authorization", &format!("Bearer {}", super::agent::TOKEN))
        .call()
        .unwrap();
    serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap_or_default()
}

/// The pid of the `weft agent` serving `probe_dir` (from /proc).
fn agent_pid(probe_dir: &std::path::Path) -> u32 {
    let want = probe_dir.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|p| {
            let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            let args: Vec<String> =
                cmd.split(|&b| b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
            args.iter().any(|a| a == "agent") && args.contains(&want)
        })
        .expect("the agent's process")
}

/// `weft exist plan`: a dry run prints the plan; timed rounds (`--every`, `--rounds`) capture
/// the replica once per round; a long series stops on SIGINT between rounds, nothing more is
/// dispatched, and the agent holds no perf event afterwards.
#[test]
fn timed_profiling_rounds_through_weft_exist_plan() {
    use super::agent::{AgentProc, Collector, TOKEN, wait_for};
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let collector = Collector::start(&dir.path().join("data"));
    let probes = dir.path().join("probes");
    let _agent = AgentProc::start(&probes, &dir.path().join("spool"), &collector, &["--name", "plan-node"]);
    let bin = weft_testkit::compile_c("examples/exist/requests.c", dir.path());
    let server = Server(
        Command::new(&bin)
            .arg(dir.path().join("app.jsonl"))
            .args(["--seconds", "120"])
            .env("WEFT_PROBE_DIR", &probes)
            .env("WEFT_PROBE_SERVICE", "requests")
            .spawn()
            .unwrap(),
    );
    let pid = server.0.id();
    let get = |path: &str| control_get(&collector, path);
    wait_for("the agent polling and reporting its replica", Duration::from_secs(60), || {
        get("/api/control/agents").as_array().is_some_and(|a| {
            a.iter().any(|x| {
                x["polling"] == true && x["report"]["targets"].as_array().is_some_and(|t| t.len() == 1)
            })
        })
    });
    let plan = |args: &[&str]| {
        let mut c = Command::new(super::agent::WEFT);
        c.args(["exist", "plan", "--collector", &collector.query(), "--functions", "handle_request,lookup"])
            .args(args)
            .env("WEFT_CONTROL_TOKEN", TOKEN);
        c
    };
    let captures = || get("/api/control/captures").as_array().map_or(0, Vec::len);

    let out = plan(&["--dry-run"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    println!("{text}");
    assert!(text.contains("dry run"), "{text}");
    assert!(
        text.contains("requests: ") && text.contains(&format!("on 1 replica(s): plan-node/pid {pid}")),
        "{text}"
    );
    assert_eq!(captures(), 0, "a dry run dispatches nothing");

    // Two rounds, 2 s apart, each capturing the replica.
    // (the longest wait the collector grants: a loaded machine delays the outcomes)
    let out = plan(&["--every", "2s", "--rounds", "2", "--wait", "30s"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    println!("{text}");
    for r in ["round 1 ", "round 2 "] {
        assert!(text.contains(r), "{text}");
    }
    let calls: Vec<u64> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("plan-node: ")?.split(' ').next()?.parse().ok())
        .collect();
    assert!(calls.len() == 2 && calls.iter().all(|&c| c > 0), "{calls:?}\n{text}");
    assert_eq!(captures(), 2);

    // A long series, stopped after its first round.
    let mut child = plan(&["--every", "3s", "--rounds", "1000"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.starts_with("round 3 "), "{first}");
    // The round's outcome lines, then SIGINT while it waits for the next.
    for l in lines.by_ref() {
        if l.unwrap().contains("plan-node:") {
            break;
        }
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    // Under load a round can outlast the 3 s period, so the next one may have begun before
    // the signal came: the stop is honest if no round follows the count it reports.
    let done: usize = err
        .split("interrupted after ")
        .nth(1)
        .and_then(|r| r.split(" of 1000 rounds").next()?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no interruption count: {err}"));
    assert!((1..1000).contains(&done), "{err}");
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(captures(), 2 + done, "no round after the stop\n{err}");
    // The agent released its events.
    let fds = std::fs::read_dir(format!("/proc/{}/fd", agent_pid(&probes)))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| l.to_string_lossy().contains("perf_event"))
        .count();
    assert_eq!(fds, 0);
}

/// `scripts/exist-overhead.sh MODE=windows` measures a window's cost inside one run with
/// `scripts/exist-windows.py`; its estimator recovers a known effect from a synthetic run, and
/// finds none at its control points.
#[test]
fn the_within_run_overhead_estimator_recovers_a_known_effect() {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/exist-windows.py");
    let out = Command::new("python3").arg(&script).arg("selftest").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("selftest: ok"), "{text}");
}
