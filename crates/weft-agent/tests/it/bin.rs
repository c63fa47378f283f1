//! The `weft-agent` binary: its options reach the agent (name, spool bound, metrics listener),
//! it answers on its control socket, and SIGTERM stops it cleanly with its summary; a bad
//! `--lttng-live` URL is refused before anything starts.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn binary_runs_answers_and_stops_on_sigterm() {
    let d = tempfile::tempdir().unwrap();
    let probes = d.path().join("probes");
    let mut child = Command::new(env!("CARGO_BIN_EXE_weft-agent"))
        .args(["--quiet", "--collector", "off", "--metrics", "127.0.0.1:0", "--name", "it-agent"])
        .args(["--spool-size", "1MiB", "--probe-dir"])
        .arg(&probes)
        .arg("--spool-dir")
        .arg(d.path().join("spool"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("run weft-agent");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut banner = String::new();
    let metrics = loop {
        let mut l = String::new();
        assert!(out.read_line(&mut l).unwrap() > 0, "weft-agent exited early: {banner}");
        banner.push_str(&l);
        if let Some(url) = l.trim().strip_prefix("metrics    http://") {
            break url.trim_end_matches("/metrics").to_string();
        }
    };
    assert!(banner.contains("collector  off"), "{banner}");

    let rep = weft_agent::control::request(
        &weft_agent::control::socket_path(&probes),
        &serde_json::from_str(r#"{"op":"list"}"#).unwrap(),
        Duration::from_secs(5),
    )
    .unwrap();
    let result = rep.result.expect("a list result");
    assert_eq!(result.agent, "it-agent");
    assert!(result.processes.is_empty());

    let mut c = std::net::TcpStream::connect(&metrics).unwrap();
    write!(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut m = String::new();
    c.read_to_string(&mut m).unwrap();
    assert!(m.contains("weft_agent_spool_limit_bytes 1048576"), "{m}");
    assert!(m.contains("weft_agent_control_requests_total 1"), "{m}");

    // SAFETY: signals our own child, still running (not yet waited for).
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) }, 0);
    let status = child.wait().unwrap();
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert!(status.success(), "{status}: {rest}");
    assert!(rest.contains("stopped: 0 records read"), "{rest}");
    assert!(!weft_agent::control::socket_path(&probes).exists(), "the socket is removed at exit");
}

#[test]
fn a_bad_lttng_live_url_is_refused_naming_the_option() {
    let d = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_weft-agent"))
        .args(["--quiet", "--collector", "off", "--metrics", "off", "--no-socket"])
        .args(["--lttng-live", "net://127.0.0.1:5344", "--lttng-live", "http://relay/host/h/s"])
        .arg("--probe-dir")
        .arg(d.path().join("probes"))
        .arg("--spool-dir")
        .arg(d.path().join("spool"))
        .output()
        .expect("run weft-agent");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("--lttng-live http://relay/host/h/s") && err.contains("not a net:// URL"), "{err}");
}
