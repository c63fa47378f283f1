//! The agent as a library: its local control socket (permissions, malformed and oversized
//! messages, one agent per directory) and its metrics listener.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use weft_agent::{Agent, AgentConfig, AgentError};
use weft_control::proto::LocalReply;

fn line(s: &mut BufReader<UnixStream>) -> LocalReply {
    let mut l = String::new();
    s.read_line(&mut l).expect("reply");
    serde_json::from_str(&l).unwrap_or_else(|e| panic!("{e}: {l}"))
}

#[test]
fn local_socket_and_metrics() {
    let d = tempfile::tempdir().unwrap();
    let probes = d.path().join("probes");
    let mut cfg = AgentConfig::new(&probes, d.path().join("spool"));
    cfg.metrics_addr = Some("127.0.0.1:0".parse().unwrap());
    let agent = Agent::start(cfg.clone()).expect("start");
    // the directory is created closed to others; the socket is the user's only
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&probes), 0o700);
    let sock = weft_agent::control::socket_path(&probes);
    assert_eq!(mode(&sock), 0o600);
    // a second agent on the same directory is refused
    match Agent::start(cfg) {
        Err(AgentError::Socket(e)) => assert!(e.to_string().contains("another agent"), "{e}"),
        Err(e) => panic!("unexpected error: {e}"),
        Ok(_) => panic!("two agents on one directory"),
    }
    let s = UnixStream::connect(&sock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    // malformed, unknown and oversized messages get clear errors; the connection stays usable
    w.write_all(b"this is not json\n").unwrap();
    let rep = line(&mut r);
    assert!(!rep.ok && rep.error.as_deref().unwrap().contains("not a valid command"), "{rep:?}");
    w.write_all(b"{\"op\":\"enable\"}\n").unwrap();
    assert!(line(&mut r).error.unwrap().contains("selector: required"));
    w.write_all(b"{\"op\":\"enable\",\"selector\":\"level:loud\"}\n").unwrap();
    assert!(line(&mut r).error.unwrap().contains("unknown level"));
    let mut big = vec![b'x'; 100_000];
    big.push(b'\n');
    w.write_all(&big).unwrap();
    assert!(line(&mut r).error.unwrap().contains("exceeds the limit"));
    w.write_all(b"\n{\"op\":\"list\"}\n").unwrap();
    let rep = line(&mut r);
    assert!(rep.ok, "{rep:?}");
    assert!(rep.result.unwrap().processes.is_empty());
    // through the client helper too
    let rep = weft_agent::control::request(
        &sock,
        &serde_json::from_str(r#"{"op":"disable","selector":"all"}"#).unwrap(),
        Duration::from_secs(5),
    )
    .unwrap();
    assert!(rep.ok);
    // metrics
    let addr = agent.metrics_addr().expect("metrics listener");
    let get = |path: &str| {
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        write!(c, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut s = String::new();
        c.read_to_string(&mut s).unwrap();
        s
    };
    let m = get("/metrics");
    assert!(m.starts_with("HTTP/1.1 200"), "{m}");
    assert!(m.contains("weft_agent_control_errors_total 4"), "the four refused messages are counted: {m}");
    assert!(m.contains("weft_agent_control_requests_total 2"), "{m}");
    assert!(m.contains("weft_agent_spool_limit_bytes 268435456"), "{m}");
    assert!(get("/nope").starts_with("HTTP/1.1 404"));
    agent.join();
    assert!(!sock.exists(), "the socket is removed at exit");
}
