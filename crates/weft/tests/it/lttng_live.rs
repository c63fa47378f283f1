//! `weft import ctf --live`: a real `lttng-relayd` and live sessions (lttng-tools), weft's
//! LTTng-UST test program emitting while weft is attached; babeltrace2's own live reader (`source.ctf.lttng-live`) on a
//! twin session (the relay daemon takes one viewer per session; both sessions record the same
//! events) is the peer; the relay daemon's copy of weft's session, read afterwards with
//! `weft import ctf DIR`, must give the same spans and events.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value as J;
use weft_sources::ctf::live::Viewer;
use weft_testkit::lttng::{LiveSessions, RecordOptions};

fn weft() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weft"))
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// Kills a child on drop.
struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits for a child at most `secs` (killing it then), and returns its output.
fn wait(mut c: Child, secs: u64, what: &str) -> Output {
    let t0 = Instant::now();
    while c.try_wait().expect("wait").is_none() {
        if t0.elapsed() > Duration::from_secs(secs) {
            let _ = c.kill();
            let out = c.wait_with_output().expect("output");
            panic!("{what} did not end after its session was destroyed:\n{}", text(&out));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    c.wait_with_output().expect("output")
}

/// The events of a JSON Lines file, as (name, BlkKin `event`/`key` field or the `i` of
/// `weft_test:small`).
fn events(path: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let v: J = serde_json::from_str(l).unwrap();
            let f = &v["fields"];
            let detail = [&f["event"], &f["key"], &f["v"], &f["i32"]]
                .into_iter()
                .find(|x| !x.is_null())
                .map(|x| x.as_str().map(str::to_owned).unwrap_or_else(|| x.to_string()))
                .unwrap_or_default();
            (v["name"].as_str().unwrap().to_owned(), detail)
        })
        .collect()
}

/// The same from babeltrace2's text output (`[time] (+delta) HOST NAME: { ... }, ...`).
fn bt2_events(out: &str, host: &str) -> Vec<(String, String)> {
    let field = |line: &str, k: &str| -> Option<String> {
        let at = line.find(&format!(" {k} = "))? + k.len() + 4;
        let rest = &line[at..];
        let v = match rest.strip_prefix('"') {
            Some(q) => &q[..q.find('"')?],
            None => &rest[..rest.find([',', ' '])?],
        };
        Some(v.to_owned())
    };
    out.lines()
        .filter(|l| l.starts_with('['))
        .map(|l| {
            let after = &l[l.find(&format!(" {host} ")).unwrap() + host.len() + 2..];
            let name = after[..after.find(": ").unwrap()].to_owned();
            let detail = ["event", "key", "v", "i32"].iter().find_map(|k| field(l, k)).unwrap_or_default();
            (name, detail)
        })
        .collect()
}

/// Spans of a Zipkin v2 JSON file, sorted, without what a reader cannot make identical.
fn spans(path: &Path) -> Vec<J> {
    let v: J = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let mut s = v.as_array().unwrap().clone();
    s.sort_by_key(|x| (x["traceId"].to_string(), x["id"].to_string(), x["kind"].to_string()));
    s
}

#[test]
fn live_session_read_like_babeltrace2_and_like_the_recording() {
    let opts = RecordOptions { all_types: 200, small: 3000, blkin: 1, ..Default::default() };
    let mut live = LiveSessions::start(2, &opts);
    let tmp = tempfile::tempdir().unwrap();
    let p = |n: &str| tmp.path().join(n);

    // A session the relay daemon does not have: the error lists what it has.
    let bad = format!("net://127.0.0.1:{}/host/{}/nosuch", live.live_port, live.hostname);
    let out = weft().args(["import", "ctf", "--live", &bad, "--to"]).arg(p("x.json")).output().unwrap();
    let err = text(&out);
    assert!(!out.status.success() && err.contains("no live session \"nosuch\""), "{err}");
    assert!(err.contains(&format!("{}/{}", live.hostname, live.sessions[0])), "{err}");

    let weft_live = weft()
        .args(["import", "ctf", "--live", &live.url(0), "--span-idle-ms", "200", "--to"])
        .arg(p("live.zipkin.json"))
        .arg("--events-to")
        .arg(p("live.jsonl"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let bt2 = Command::new("babeltrace2")
        .args(["--input-format=lttng-live", &live.url(1)])
        .stdout(std::fs::File::create(p("bt2.txt")).unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .expect("babeltrace2 (installed by .ci/test)");
    // Both attached before the program runs.
    let t0 = Instant::now();
    loop {
        let mut v = Viewer::connect("127.0.0.1", live.live_port, Duration::from_secs(10)).unwrap();
        let list = v.list_sessions().unwrap();
        if live.sessions.iter().all(|s| list.iter().any(|x| &x.name == s && x.clients > 0)) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the viewers did not attach: {list:?}\n{}",
            live.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // A second viewer of a session is refused, with the relay daemon's reason.
    let out =
        weft().args(["import", "ctf", "--live", &live.url(0), "--to"]).arg(p("y.json")).output().unwrap();
    assert!(
        text(&out).contains("ATTACH_SESSION: session") && text(&out).contains("ATTACH_ALREADY"),
        "{}",
        text(&out)
    );

    live.run_app_and_destroy();
    let out = wait(weft_live, 120, "weft import ctf --live");
    let summary = text(&out);
    assert!(out.status.success(), "{summary}");
    let total = opts.all_types + opts.small + 12;
    assert!(summary.contains(&format!(": {total} events, ")), "{summary}");
    assert!(summary.contains("BlkKin: 12 events → 4 spans"), "{summary}");
    // babeltrace2's live reader keeps waiting for a session of that name to come back: stop it
    // once it printed as many events as weft read (or after a minute).
    let mut bt2 = Kill(bt2);
    let t0 = Instant::now();
    let lines = || std::fs::read_to_string(p("bt2.txt")).unwrap_or_default().lines().count() as u64;
    while lines() < total && t0.elapsed() < Duration::from_secs(60) {
        if let Ok(Some(st)) = bt2.0.try_wait() {
            let mut err = String::new();
            let _ = std::io::Read::read_to_string(bt2.0.stderr.as_mut().unwrap(), &mut err);
            panic!("babeltrace2 ended ({st}) after {} events:\n{err}", lines());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    drop(bt2);

    // The peer: the same events in the same order, with the same BlkKin annotations.
    let ours = events(&p("live.jsonl"));
    let theirs = bt2_events(&std::fs::read_to_string(p("bt2.txt")).unwrap(), &live.hostname);
    assert_eq!(ours.len() as u64, total);
    assert_eq!(ours, theirs);

    // Afterwards: the relay daemon's copy of the same session, imported as a directory.
    let dir = live.trace_dir(0);
    let out = weft()
        .args(["import", "ctf", "--jobs", "1"])
        .arg(&dir)
        .arg("--to")
        .arg(p("after.zipkin.json"))
        .arg("--events-to")
        .arg(p("after.jsonl"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        std::fs::read_to_string(p("live.jsonl")).unwrap(),
        std::fs::read_to_string(p("after.jsonl")).unwrap()
    );
    let (a, b) = (spans(&p("live.zipkin.json")), spans(&p("after.zipkin.json")));
    assert_eq!(a.len(), 4);
    assert_eq!(a, b);
}

#[test]
fn a_relay_daemon_that_goes_away_is_a_clear_error_after_the_summary() {
    let mut live = LiveSessions::start(1, &RecordOptions::default());
    let tmp = tempfile::tempdir().unwrap();
    let child = weft()
        .args(["import", "ctf", "--live", &live.url(0), "--to"])
        .arg(tmp.path().join("spans.json"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    loop {
        let mut v = Viewer::connect("127.0.0.1", live.live_port, Duration::from_secs(10)).unwrap();
        if v.list_sessions().unwrap().iter().any(|x| x.clients > 0) {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "weft did not attach");
        std::thread::sleep(Duration::from_millis(100));
    }
    live.kill_relay_daemon();
    let out = wait(child, 60, "weft import ctf --live");
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    // What was received is reported and written, then the error names the relay daemon.
    assert!(t.contains("followed net://") && t.contains("wrote 0 spans to"), "{t}");
    assert!(t.contains(&format!("relay daemon 127.0.0.1:{}: ", live.live_port)), "{t}");
    assert!(t.contains("what was received is written"), "{t}");
}
