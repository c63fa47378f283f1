//! Live queries end to end: `weft serve` (the cluster level), three `weft agent`s with distinct
//! node names (the machine level), each over its own segment directory holding two small
//! processes (this test binary re-run as [`emitter_role`]) whose weft-probe tracepoint emits a
//! known number of events with known field values once the query is installed in them — so the
//! expected aggregate is exact.
//!
//! * the cluster's result equals the expected aggregate, the merge of the per-agent results,
//!   and (a second run) a single agent's result over all six processes;
//! * an invalid query gets 400 naming line, column and reason; no token gets 401;
//! * an agent killed mid-query is reported late (missing from the windows that close without
//!   it), nothing waits for it, and its processes drop the query when its lease runs out;
//! * `weft query` runs a live query to its DURATION and prints the exact total; `weft query
//!   'EXPLAIN …'` plans against this machine's processes;
//! * removing the query detaches it in every process of the live agents: each process sees
//!   its query gone, and collecting it there answers nothing;
//! * a query kept under a name (`?keep=NAME`, `weft query --keep NAME`) has its windows in the
//!   collector's store: SQL over `live_NAME` (the server's SQL API and `weft query --data-dir`)
//!   returns exactly the windows' rows the results API returned, also after a restart of the
//!   server; a bad name gets 400 naming it.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::agent::{http, wait_for};

pub const TOKEN: &str = "live-s3cret";
const WEFT: &str = env!("CARGO_BIN_EXE_weft");
pub const KINDS: [&str; 3] = ["read", "write", "sync"];
pub const QUERY: &str =
    "SELECT kind, count(*), sum(len), min(len), max(len) FROM tp('livetest.op') GROUP BY kind INTERVAL 1s";

weft_probe::tracepoint!(static OP = "livetest.op", Debug, fields = [kind: str, len: u64]);

/// One traced process, when this binary is re-run as one: `LIVE_EMITTER=n:seed:marker-dir`.
/// Waits for a live query, emits `n` events (`kind` cycling over [`KINDS`], `len = seed * 1000
/// + i`), then waits until the query is removed and checks that collecting it answers nothing.
#[test]
fn emitter_role() {
    let Ok(spec) = std::env::var("LIVE_EMITTER") else { return };
    let parts: Vec<&str> = spec.splitn(3, ':').collect();
    let (n, seed): (u64, u64) = (parts[0].parse().expect("n"), parts[1].parse().expect("seed"));
    let markers = Path::new(parts[2]);
    weft_probe::init_from_env();
    let pid = std::process::id();
    let t0 = Instant::now();
    let id = loop {
        if let Some((id, _)) = weft_probe::query::installed().first() {
            break *id;
        }
        if t0.elapsed() > Duration::from_secs(180) {
            std::process::exit(2);
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    for i in 0..n {
        weft_probe::event!(OP, kind = KINDS[(i % 3) as usize], len = seed * 1000 + i);
    }
    std::fs::write(markers.join(format!("{pid}.emitted")), b"").expect("marker");
    while !weft_probe::query::installed().is_empty() {
        if t0.elapsed() > Duration::from_secs(300) {
            std::process::exit(3);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let freed = weft_probe::query::collect(id).is_none();
    std::fs::write(markers.join(format!("{pid}.detached")), if freed { "freed" } else { "kept" })
        .expect("marker");
    std::process::exit(0);
}

pub struct Kill(pub Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn emitter(probe_dir: &Path, markers: &Path, n: u64, seed: u64) -> Kill {
    let exe = std::env::current_exe().expect("test binary");
    Kill(
        Command::new(exe)
            .args(["--exact", "live_query::emitter_role", "--nocapture", "--test-threads=1"])
            .env("LIVE_EMITTER", format!("{n}:{seed}:{}", markers.display()))
            .env("WEFT_PROBE_DIR", probe_dir)
            .env("WEFT_PROBE_MODE", "shm")
            .env("WEFT_PROBE_SERVICE", format!("emitter-{seed}"))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn an emitter"),
    )
}

/// `weft serve`; returns the OTLP/HTTP base (the agents' `--collector`) and the query
/// listener's base (the control API).
pub fn collector(data: &Path) -> (Kill, String, String) {
    let (port, query_port) = (weft_testkit::free_port(), weft_testkit::free_port());
    let child = Command::new(WEFT)
        .args(["serve", "--otlp-grpc", "off", "--zipkin", "off"])
        .arg("--data-dir")
        .arg(data)
        .args(["--otlp-http", &format!("127.0.0.1:{port}")])
        .args(["--http", &format!("127.0.0.1:{query_port}")])
        .args(["--control-token", TOKEN])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn weft serve");
    let base = format!("http://127.0.0.1:{query_port}");
    let url = format!("{base}/api/status");
    wait_for("weft serve to answer", Duration::from_secs(120), || {
        http().get(&url).call().is_ok_and(|r| r.status().as_u16() == 200)
    });
    (Kill(child), format!("http://127.0.0.1:{port}"), base)
}

/// `weft agent` over `probe_dir`, shipping to `otlp`, in the control exchange of `base` with `token`.
pub fn agent(probe_dir: &Path, spool: &Path, (otlp, base): (&str, &str), name: &str, token: &str) -> Kill {
    Kill(
        Command::new(WEFT)
            .arg("agent")
            .arg("--probe-dir")
            .arg(probe_dir)
            .arg("--spool-dir")
            .arg(spool)
            .args(["--collector", otlp, "--control-url", base, "--control-token", token])
            .args(["--name", name, "--linger", "0s"])
            .args(["--metrics", &format!("127.0.0.1:{}", weft_testkit::free_port())])
            .env("WEFT_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn weft agent"),
    )
}

pub fn call(method: &str, url: &str, token: Option<&str>, body: Option<&str>) -> (u16, Value) {
    let h = http();
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut r = match (method, body) {
        ("POST", b) => {
            let mut q = h.post(url);
            if let Some(a) = &auth {
                q = q.header("Authorization", a);
            }
            q.send(b.unwrap_or(""))
        }
        ("DELETE", _) => {
            let mut q = h.delete(url);
            if let Some(a) = &auth {
                q = q.header("Authorization", a);
            }
            q.call()
        }
        _ => {
            let mut q = h.get(url);
            if let Some(a) = &auth {
                q = q.header("Authorization", a);
            }
            q.call()
        }
    }
    .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let status = r.status().as_u16();
    let text = r.body_mut().read_to_string().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// kind → (count, sum, min, max).
type Agg = BTreeMap<String, (u64, i64, i64, i64)>;

fn expected(specs: &[(u64, u64)]) -> Agg {
    let mut out = Agg::new();
    for &(n, seed) in specs {
        for i in 0..n {
            let v = (seed * 1000 + i) as i64;
            let e = out.entry(KINDS[(i % 3) as usize].to_string()).or_insert((0, 0, i64::MAX, i64::MIN));
            e.0 += 1;
            e.1 += v;
            e.2 = e.2.min(v);
            e.3 = e.3.max(v);
        }
    }
    out
}

fn rows(result: &Value) -> Agg {
    let rows = result["rows"].as_array().unwrap_or_else(|| panic!("no rows in {result}"));
    rows.iter()
        .map(|r| {
            let i = |k: usize| r[k].as_i64().unwrap_or_else(|| panic!("column {k} of {r}"));
            (r[0].as_str().expect("kind").to_string(), (i(1) as u64, i(2), i(3), i(4)))
        })
        .collect()
}

fn merge(a: &mut Agg, b: &Agg) {
    for (k, v) in b {
        let e = a.entry(k.clone()).or_insert((0, 0, i64::MAX, i64::MIN));
        e.0 += v.0;
        e.1 += v.1;
        e.2 = e.2.min(v.2);
        e.3 = e.3.max(v.3);
    }
}

fn total_events(a: &Agg) -> u64 {
    a.values().map(|v| v.0).sum()
}

pub fn markers(dir: &Path, suffix: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().ends_with(suffix))
                .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
                .collect()
        })
        .unwrap_or_default()
}

/// Wait until every one of `agents` takes part in the collector's live exchange.
pub fn wait_agents(base: &str, agents: &[&str]) {
    wait_for("every agent in the live exchange", Duration::from_secs(60), || {
        let v = call("GET", &format!("{base}/api/control/queries"), Some(TOKEN), None).1;
        let live: Vec<&str> = v["agents"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["dead"] == false)
            .filter_map(|a| a["agent"].as_str())
            .collect();
        agents.iter().all(|a| live.contains(a))
    });
}

/// Deploy [`QUERY`] once the collector knows the tracepoint; the results once every expected
/// event is in closed windows.
fn run_query(
    base: &str,
    want: &Agg,
    marker_dir: &Path,
    processes: usize,
    agents: &[&str],
    keep: Option<&str>,
) -> (u64, Value) {
    wait_for("the agents to report the tracepoint's schema", Duration::from_secs(60), || {
        call("POST", &format!("{base}/api/control/queries"), Some(TOKEN), Some(&format!("EXPLAIN {QUERY}"))).0
            == 200
    });
    wait_agents(base, agents);
    let keep = keep.map(|k| format!("&keep={k}")).unwrap_or_default();
    let (st, v) =
        call("POST", &format!("{base}/api/control/queries?wait=5s{keep}"), Some(TOKEN), Some(QUERY));
    assert_eq!(st, 201, "{v}");
    let id = v["id"].as_u64().expect("query id");
    eprintln!("live query {id}: submit → running per agent (ms): {}", v["started_ms"]);
    for a in agents {
        assert!(v["started_ms"][a].is_u64(), "{a} runs the query when the submission returns: {v}");
    }
    wait_for("every process to emit", Duration::from_secs(60), || {
        markers(marker_dir, ".emitted").len() == processes
    });
    let url = format!("{base}/api/control/queries/{id}/results?windows=600");
    let mut last = Value::Null;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let (st, v) = call("GET", &url, Some(TOKEN), None);
        assert_eq!(st, 200, "{v}");
        last = v;
        if last["total"]["events"].as_u64() == Some(total_events(want)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    (id, last)
}

#[test]
fn three_agents_sum_to_the_cluster_and_to_one_agent() {
    let tmp = tempfile::tempdir().expect("tmp");
    let marks = tmp.path().join("markers");
    std::fs::create_dir_all(&marks).expect("markers dir");
    let data = tmp.path().join("data");
    let (serve, otlp, base) = collector(&data);

    // refused before anything runs: no token, and (below, once schemas are known) bad queries
    let (st, _) = call("POST", &format!("{base}/api/control/queries"), None, Some(QUERY));
    assert_eq!(st, 401);

    let nodes =
        [("node-a", [(30u64, 1u64), (7, 2)]), ("node-b", [(11, 3), (50, 4)]), ("node-c", [(1, 5), (24, 6)])];
    let mut procs = Vec::new();
    let mut agents = Vec::new();
    for (name, specs) in &nodes {
        let dir = tmp.path().join(name);
        std::fs::create_dir_all(&dir).expect("probe dir");
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).expect("chmod");
        for (n, seed) in specs {
            procs.push(emitter(&dir, &marks, *n, *seed));
        }
        agents.push(agent(&dir, &tmp.path().join(format!("spool-{name}")), (&otlp, &base), name, TOKEN));
    }
    let all: Vec<(u64, u64)> = nodes.iter().flat_map(|(_, s)| s.iter().copied()).collect();
    let want = expected(&all);

    // an invalid query: 400 naming the position and the reason
    wait_for("the tracepoint's schema at the collector", Duration::from_secs(60), || {
        call("POST", &format!("{base}/api/control/queries"), Some(TOKEN), Some(&format!("EXPLAIN {QUERY}"))).0
            == 200
    });
    let bad = "SELECT kind, count(*) FROM tp('livetest.op') WHERE size > 3 GROUP BY kind";
    let (st, v) = call("POST", &format!("{base}/api/control/queries"), Some(TOKEN), Some(bad));
    assert_eq!(st, 400, "{v}");
    assert_eq!((v["line"].as_u64(), v["column"].as_u64()), (Some(1), Some(52)), "{v}");
    assert!(v["reason"].as_str().is_some_and(|r| r.contains("size")), "{v}");
    let (st, v) =
        call("POST", &format!("{base}/api/control/queries"), Some(TOKEN), Some(&format!("EXPLAIN {QUERY}")));
    assert_eq!(st, 200);
    let explain = v["explain"].as_str().unwrap_or_default();
    for level in ["probe level", "machine level", "cluster level"] {
        assert!(explain.contains(level), "{explain}");
    }

    // a name a result table cannot have: 400 naming it
    let (st, v) =
        call("POST", &format!("{base}/api/control/queries?keep=Bad-Name"), Some(TOKEN), Some(QUERY));
    assert_eq!(st, 400, "{v}");
    assert!(v["error"]["message"].as_str().is_some_and(|m| m.contains("\"Bad-Name\"")), "{v}");

    let (id, res) = run_query(&base, &want, &marks, procs.len(), &["node-a", "node-b", "node-c"], None);
    assert_eq!(rows(&res["total"]), want, "cluster result: {res}");
    let mut per_agent = Agg::new();
    for (name, specs) in &nodes {
        let mine = rows(&res["by_agent"][*name]);
        assert_eq!(mine, expected(specs), "{name}'s result: {res}");
        merge(&mut per_agent, &mine);
    }
    assert_eq!(per_agent, want, "the per-agent results sum to the cluster's");
    assert_eq!(res["late_partials"].as_u64(), Some(0), "{res}");
    assert_eq!(res["failures"].as_array().map(Vec::len), Some(0), "{res}");
    let states: Vec<&str> =
        res["agents"].as_array().expect("agents").iter().filter_map(|a| a["state"].as_str()).collect();
    assert_eq!(states, ["running"; 3], "{res}");
    let (reports, bytes) = (res["reports"].as_u64().unwrap_or(0), res["partial_bytes"].as_u64().unwrap_or(0));
    // a ring record of this event: 48-byte header, `kind` (8 + 8 bytes), `len` (8 + 8 bytes)
    let raw = total_events(&want) * (48 + 16 + 16);
    eprintln!(
        "shipped {bytes} bytes of partials in {reports} reports ({:.1} bytes/report) for {} events; raw records: {raw} bytes",
        bytes as f64 / reports.max(1) as f64,
        total_events(&want)
    );

    // an agent that dies is reported, and windows keep closing without it
    drop(agents.pop());
    let url = format!("{base}/api/control/queries/{id}/results?windows=1");
    let mut last = Value::Null;
    wait_for("node-c to be reported late", Duration::from_secs(30), || {
        last = call("GET", &url, Some(TOKEN), None).1;
        last["agents"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|a| a["agent"] == "node-c" && a["state"] == "late")
    });
    assert_eq!(last["windows"][0]["agents"], serde_json::json!(["node-a", "node-b"]), "{last}");
    assert_eq!(last["windows"][0]["missing"], serde_json::json!(["node-c"]), "{last}");
    assert_eq!(rows(&last["total"]), want, "nothing was added or lost meanwhile: {last}");

    // removal detaches it everywhere its agents live: every process sees its query gone and
    // its tables freed
    let (st, v) = call("DELETE", &format!("{base}/api/control/queries/{id}"), Some(TOKEN), None);
    assert_eq!(st, 200, "{v}");
    wait_for("the live agents' processes to see the query removed", Duration::from_secs(30), || {
        markers(&marks, ".detached").len() == 4
    });
    assert!(markers(&marks, ".detached").iter().all(|m| m == "freed"), "a removed query still collects");
    let res = call("GET", &url, Some(TOKEN), None).1;
    assert_eq!(res["state"], "removed");
    for a in res["agents"].as_array().expect("agents") {
        let ok: &[&str] = if a["agent"] == "node-c" { &["late", "dead"] } else { &["stopped"] };
        assert!(a["state"].as_str().is_some_and(|s| ok.contains(&s)), "{res}");
    }
    // the killed agent's processes free their tables by themselves once its lease runs out
    wait_for("node-c's processes to drop the query", Duration::from_secs(60), || {
        markers(&marks, ".detached").len() == procs.len()
    });
    assert!(markers(&marks, ".detached").iter().all(|m| m == "freed"));
    assert_eq!(res["refused_partials"].as_u64(), Some(0), "{res}");
    drop(agents);
    drop(procs);

    // the same processes under one agent
    let solo = tmp.path().join("solo");
    let marks2 = tmp.path().join("markers2");
    std::fs::create_dir_all(&marks2).expect("markers dir");
    std::fs::create_dir_all(&solo).expect("probe dir");
    std::fs::set_permissions(&solo, std::os::unix::fs::PermissionsExt::from_mode(0o700)).expect("chmod");
    let procs: Vec<Kill> = all.iter().map(|(n, s)| emitter(&solo, &marks2, *n, *s)).collect();
    let _solo_agent = agent(&solo, &tmp.path().join("spool-solo"), (&otlp, &base), "solo", TOKEN);
    let (id, res) = run_query(&base, &want, &marks2, procs.len(), &["solo"], Some("solo_run"));
    assert_eq!(rows(&res["total"]), want, "single-agent result: {res}");
    assert_eq!(rows(&res["by_agent"]["solo"]), want, "{res}");
    let (st, v) = call("DELETE", &format!("{base}/api/control/queries/{id}?wait=5s"), Some(TOKEN), None);
    assert_eq!((st, &v["still_running_on"]), (200, &serde_json::json!([])), "{v}");
    wait_for("the query removed", Duration::from_secs(30), || {
        markers(&marks2, ".detached").len() == procs.len()
    });
    drop(procs);
    // its windows, once all closed and written, are the rows of live_solo_run
    let url = format!("{base}/api/control/queries/{id}/results?windows=600");
    let mut res = Value::Null;
    wait_for("every window of the kept query written", Duration::from_secs(30), || {
        res = call("GET", &url, Some(TOKEN), None).1;
        res["windows_open"] == 0
            && res["kept"]["waiting"] == 0
            && res["kept"]["windows"] == res["windows_closed"]
    });
    assert_eq!(
        (&res["kept"]["table"], &res["kept"]["errors"]),
        (&Value::from("live_solo_run"), &Value::from(0))
    );
    assert_eq!(rows(&res["total"]), want, "{res}");
    let kept = kept_rows(&res);
    assert_eq!(kept.iter().map(|r| r[2].as_u64().unwrap_or(0)).sum::<u64>(), total_events(&want));
    assert_eq!(sql_rows(&base, KEPT_SQL), kept, "live_solo_run holds the windows the results API returned");

    // `weft query`: EXPLAIN planned against this machine's processes, and a live query with its
    // own DURATION, whose final total is the one process's aggregate
    let marks3 = tmp.path().join("markers3");
    std::fs::create_dir_all(&marks3).expect("markers dir");
    let _one = emitter(&solo, &marks3, 40, 9);
    let token_file = tmp.path().join("token");
    std::fs::write(&token_file, TOKEN).expect("token file");
    let explain = |sql: &str| {
        Command::new(WEFT).args(["query", sql]).env("WEFT_PROBE_DIR", &solo).output().expect("weft query")
    };
    wait_for("weft query EXPLAIN against the local process", Duration::from_secs(30), || {
        explain(&format!("EXPLAIN {QUERY}")).status.success()
    });
    let out = String::from_utf8_lossy(&explain(&format!("EXPLAIN {QUERY}")).stdout).into_owned();
    assert!(out.contains("probe level") && out.contains("cluster level"), "{out}");
    let out = Command::new(WEFT)
        .args(["query", "--collector", &base, "--keep", "cli_run", "--control-token-file"])
        .arg(&token_file)
        .arg(format!("{QUERY} DURATION 3s"))
        .env_remove("WEFT_CONTROL_TOKEN")
        .output()
        .expect("weft query");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let total: Agg = text
        .split("total over")
        .nth(1)
        .unwrap_or_else(|| panic!("no total in {text}"))
        .lines()
        .skip(3)
        .filter_map(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            let n = |i: usize| c.get(i)?.parse::<i64>().ok();
            Some((c.first()?.to_string(), (n(1)? as u64, n(2)?, n(3)?, n(4)?)))
        })
        .collect();
    assert_eq!(total, expected(&[(40, 9)]), "{text}");
    // … and kept by `--keep`: its windows add up to the same total
    let by_kind =
        "SELECT kind, sum(count), sum(sum_len), min(min_len), max(max_len) FROM live_cli_run GROUP BY kind";
    wait_for("the CLI's kept windows", Duration::from_secs(30), || {
        let got: Agg = sql_rows(&base, by_kind)
            .iter()
            .map(|r| {
                let i = |k: usize| r[k].as_i64().unwrap_or(-1);
                (r[0].as_str().unwrap_or_default().to_string(), (i(1) as u64, i(2), i(3), i(4)))
            })
            .collect();
        got == expected(&[(40, 9)])
    });

    // the kept rows survive a restart of the server, and the embedded path reads them too
    drop(serve);
    let (_serve, _, base) = collector(&data);
    assert_eq!(sql_rows(&base, KEPT_SQL), kept, "after a restart");
    let out = Command::new(WEFT)
        .args(["query", "--format", "json", "--data-dir"])
        .arg(&data)
        .arg(KEPT_SQL)
        .output()
        .expect("weft query --data-dir");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["rows"].as_array().cloned().unwrap_or_default(), kept, "weft query --data-dir");
}

/// A kept [`QUERY`]'s rows, in [`kept_rows`]' order.
const KEPT_SQL: &str = "SELECT arrow_cast(window_start, 'Int64'), kind, count, sum_len, min_len, max_len, \
     agents_contributing, agents_missing FROM live_solo_run ORDER BY 1, 2";

/// The windows of a results answer as [`KEPT_SQL`]'s rows: start, the row's cells, agents
/// contributing and missing.
fn kept_rows(res: &Value) -> Vec<Value> {
    let mut windows: Vec<&Value> = res["windows"].as_array().expect("windows").iter().collect();
    windows.sort_by_key(|w| w["start_ns"].as_u64());
    let mut out = Vec::new();
    for w in windows {
        let n = |k: &str| Value::from(w[k].as_array().map_or(0, Vec::len));
        for r in w["result"]["rows"].as_array().expect("rows") {
            let mut row = vec![w["start_ns"].clone()];
            row.extend(r.as_array().expect("row").iter().cloned());
            row.extend([n("agents"), n("missing")]);
            out.push(Value::Array(row));
        }
    }
    out
}

/// The rows of `sql` through the server's SQL API.
fn sql_rows(base: &str, sql: &str) -> Vec<Value> {
    let (st, v) = call("POST", &format!("{base}/api/sql?format=json"), None, Some(sql));
    assert_eq!(st, 200, "{sql}: {v}");
    v["rows"].as_array().cloned().unwrap_or_default()
}

/// Pivot Tracing's happened-before join on archipelago, live: the collector deploys the
/// query's two halves through an agent; the gateway packs each write's volume (one per
/// client) into the request's baggage, which travels gateway → volume composer → mapper →
/// blocker; the blocker's `blocker.io.submit` sums bytes by it. Every client writes a known
/// number of writes of known sizes, so the per-client totals at the blocker are exact.
#[test]
fn happened_before_join_on_archipelago() {
    const HB: &str = "SELECT g.volume, sum(b.len), count(*) FROM tp('gateway.op.write') AS g \
                      JOIN tp('blocker.io.submit') AS b ON g -> b GROUP BY g.volume INTERVAL 1s";
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("probes");
    std::fs::create_dir_all(&dir).expect("probe dir");
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).expect("chmod");
    let (_serve, otlp, base) = collector(&tmp.path().join("data"));
    let cluster = crate::agent::cluster_with(tmp.path(), &dir, "");
    let _agent = agent(&dir, &tmp.path().join("spool"), (&otlp, &base), "node-hb", TOKEN);
    wait_for("the tracepoints' schemas at the collector", Duration::from_secs(60), || {
        call("POST", &format!("{base}/api/control/queries"), Some(TOKEN), Some(&format!("EXPLAIN {HB}"))).0
            == 200
    });
    let (st, v) = call("POST", &format!("{base}/api/control/queries?wait=5s"), Some(TOKEN), Some(HB));
    assert_eq!(st, 201, "{v}");
    assert!(v["started_ms"]["node-hb"].is_u64(), "the agent runs the query: {v}");
    let id = v["id"].as_u64().expect("query id");

    // client i writes `writes` blocks of `size` bytes to its own volume; one also reads
    // (reads reach the blocker without the gateway's pack: not joined)
    let clients: [(&str, u64, usize); 3] =
        [("client-a", 5, 4096), ("client-b", 3, 1536), ("client-c", 8, 512)];
    let want: BTreeMap<String, (i64, u64)> =
        clients.iter().map(|(c, n, size)| (c.to_string(), ((*n as usize * size) as i64, *n))).collect();
    std::thread::scope(|s| {
        for (volume, n, size) in clients {
            let gw = cluster.gateway;
            s.spawn(move || {
                let mut c = archipelago::client::Client::connect(gw).expect("connect");
                for i in 0..n {
                    let r = c.write(volume, i * size as u64, &vec![i as u8 + 1; size]).expect("write");
                    assert!(r.ok, "write {i} of {volume}: {:?}", r.error);
                }
                let r = c.read(volume, 0, size as u32).expect("read");
                assert!(r.ok, "read of {volume}: {:?}", r.error);
            });
        }
    });
    let url = format!("{base}/api/control/queries/{id}/results?windows=600");
    let mut got = BTreeMap::new();
    let mut last = Value::Null;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let (st, v) = call("GET", &url, Some(TOKEN), None);
        assert_eq!(st, 200, "{v}");
        last = v.clone();
        let rows = v["total"]["rows"].as_array().cloned().unwrap_or_default();
        got = rows
            .iter()
            .map(|r| {
                let volume = r[0].as_str().unwrap_or_else(|| panic!("volume in {r}")).to_string();
                (volume, (r[1].as_i64().expect("sum"), r[2].as_u64().expect("count")))
            })
            .collect();
        if got == want {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // (partials that reach the collector after their window closed still count in the total)
    assert_eq!(got, want, "per-client bytes at the blocker; the last answer: {last}");
    let (st, _) = call("DELETE", &format!("{base}/api/control/queries/{id}?wait=5s"), Some(TOKEN), None);
    assert_eq!(st, 200);
    cluster.stop();
}
