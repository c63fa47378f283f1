//! Live queries in the kernel's probe level, end to end: `weft serve` and two `weft agent`s
//! (distinct node names, on this machine), a uprobe query on a C program the test builds
//! (weft-bpf's workload: `weft_work(i % 300)` called 1000 times once it reads a line).
//!
//! * a probe that cannot attach (no such symbol) fails the query on every agent, reported to
//!   the collector with the reason, and leaves no eBPF or perf fd open in the agents;
//! * both agents attach the query (the same kernel: each sees every call), each agent's result
//!   is exactly the known calls (count, sum and log2 histogram of the argument) summed over
//!   the windows it read and reset, and the cluster's is their sum;
//! * removing the query detaches it: the agents' eBPF and perf fds are back to what they were.
//!
//! Needs root (or CAP_BPF + CAP_PERFMON), as weft-bpf's own tests.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::agent::wait_for;
use crate::live_query::{Kill, TOKEN, agent, call, collector, wait_agents};

const CALLS: u64 = 1000;

/// eBPF maps/programs and perf events among `pid`'s fds.
fn bpf_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|rd| {
            rd.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter(|l| {
                    let l = l.to_string_lossy();
                    l.starts_with("anon_inode:bpf") || l.contains("perf_event")
                })
                .count()
        })
        .unwrap_or(0)
}

fn log2_bucket(v: i64) -> i64 {
    match v {
        i64::MIN..=-1 => 0,
        0 => 1,
        v => 2 + (63 - v.leading_zeros() as i64),
    }
}

/// Submit `sql` (201) and return its id, once it runs (or failed) on every agent.
fn submit(base: &str, sql: &str) -> (u64, Value) {
    let (st, v) = call("POST", &format!("{base}/api/control/queries?wait=5s"), Some(TOKEN), Some(sql));
    assert_eq!(st, 201, "{v}");
    (v["id"].as_u64().expect("query id"), v)
}

#[test]
fn agents_run_uprobe_queries_in_the_kernel_and_free_everything_on_removal() {
    let tmp = tempfile::tempdir().expect("tmp");
    let bin = weft_testkit::compile_c("crates/weft-bpf/tests/it/workload.c", tmp.path());
    let (_serve, otlp, base) = collector(&tmp.path().join("data"));
    let names = ["node-a", "node-b"];
    let agents: Vec<Kill> = names
        .iter()
        .map(|name| {
            let dir = tmp.path().join(name);
            std::fs::create_dir_all(&dir).expect("probe dir");
            std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
                .expect("chmod");
            agent(&dir, &tmp.path().join(format!("spool-{name}")), (&otlp, &base), name, TOKEN)
        })
        .collect();
    wait_agents(&base, &names);
    let before: Vec<usize> = agents.iter().map(|a| bpf_fds(a.0.id())).collect();

    // no such symbol: refused on every agent, with the reason, nothing left attached
    let b = bin.display();
    let (id, _) = submit(&base, &format!("SELECT count(*) FROM uprobe('{b}', 'no_such_fn') INTERVAL 1s"));
    let url = format!("{base}/api/control/queries/{id}/results?windows=600");
    let mut res = Value::Null;
    wait_for("both agents to report the refusal", Duration::from_secs(30), || {
        res = call("GET", &url, Some(TOKEN), None).1;
        res["failures"].as_array().is_some_and(|f| f.len() == 2)
    });
    for f in res["failures"].as_array().into_iter().flatten() {
        assert!(f["error"].as_str().is_some_and(|e| e.contains("no_such_fn")), "{res}");
    }
    assert_eq!(call("DELETE", &format!("{base}/api/control/queries/{id}"), Some(TOKEN), None).0, 200);
    let after: Vec<usize> = agents.iter().map(|a| bpf_fds(a.0.id())).collect();
    assert_eq!(after, before, "a refused probe leaves no fd behind");

    let mut child = Command::new(&bin).stdin(Stdio::piped()).stdout(Stdio::null()).spawn().expect("workload");
    let pid = child.id();
    let sql = format!(
        "SELECT count(*), sum(arg0), hist(arg0) FROM uprobe('{b}', 'weft_work') WHERE pid = {pid} INTERVAL 1s"
    );
    let (id, v) = submit(&base, &sql);
    for a in names {
        assert!(v["started_ms"][a].is_u64(), "{a} runs the query when the submission returns: {v}");
    }
    let attached: Vec<usize> = agents.iter().map(|a| bpf_fds(a.0.id())).collect();
    assert!(
        attached.iter().zip(&before).all(|(a, b)| a > b),
        "probes attached: {attached:?} over {before:?}"
    );
    child.stdin.take().expect("stdin").write_all(b"go\n").expect("go");
    assert!(child.wait().expect("workload").success());

    let args: Vec<i64> = (0..CALLS as i64).map(|i| i % 300).collect();
    let mut hist = BTreeMap::new();
    for a in &args {
        *hist.entry(log2_bucket(*a)).or_insert(0u64) += 1;
    }
    let hist: Vec<Value> = hist.into_iter().map(|(k, n)| json!([k, n])).collect();
    let want = json!([[CALLS, args.iter().sum::<i64>(), hist]]);
    let url = format!("{base}/api/control/queries/{id}/results?windows=600");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        res = call("GET", &url, Some(TOKEN), None).1;
        if res["total"]["rows"][0][0].as_u64() == Some(2 * CALLS) || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    for a in names {
        assert_eq!(res["by_agent"][a]["rows"], want, "{a}'s result: {res}");
    }
    let doubled = |v: &Value| v.as_u64().map(|n| n * 2);
    let total = &res["total"]["rows"][0];
    assert_eq!(total[0].as_u64(), doubled(&want[0][0]), "the cluster sums both agents: {res}");
    assert_eq!(total[1].as_u64(), doubled(&want[0][1]), "{res}");
    assert_eq!(res["failures"].as_array().map(Vec::len), Some(0), "{res}");
    let windows = res["windows"].as_array().map_or(0, Vec::len);
    eprintln!("kernel query over {windows} windows: {}", res["total"]);

    let (st, v) = call("DELETE", &format!("{base}/api/control/queries/{id}?wait=5s"), Some(TOKEN), None);
    assert_eq!((st, &v["still_running_on"]), (200, &json!([])), "{v}");
    wait_for("the agents to detach and free the maps", Duration::from_secs(10), || {
        agents.iter().map(|a| bpf_fds(a.0.id())).collect::<Vec<_>>() == before
    });
}
