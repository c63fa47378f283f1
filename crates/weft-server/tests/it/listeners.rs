//! Issue 18: what each listener serves, and how it holds up against slow or idle connections.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use weft_model::codec::{otlp, zipkin};

use crate::{TestServer, spans};

/// One raw HTTP/1.1 request → status code.
fn status(addr: SocketAddr, method: &str, path: &str, headers: &str, body: &[u8]) -> u16 {
    let mut c = TcpStream::connect(addr).unwrap();
    write!(
        c,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {}\r\n{headers}\r\n",
        body.len()
    )
    .unwrap();
    c.write_all(body).unwrap();
    let mut answer = Vec::new();
    let _ = c.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    answer.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no status: {answer}"))
}

/// An ingest port bound to a public address must not expose SQL, the UI, the read APIs, the
/// control API or agent reports; the query port takes no spans.
#[test]
fn each_listener_serves_only_its_routes() {
    let s = TestServer::with(|_, c| c.control_token = Some("tok".into()));
    let pb = "Content-Type: application/x-protobuf\r\n";
    let json = "Content-Type: application/json\r\n";
    let auth = "Authorization: Bearer tok\r\nContent-Type: application/json\r\n";
    let (a, b) = (spans(1, 10), spans(2, 10));
    let (otlp_body, zipkin_body) = (otlp::encode_proto(&a), zipkin::encode_v2_json(&b));

    assert_eq!(status(s.otlp, "POST", "/v1/traces", pb, &otlp_body), 200);
    assert_eq!(status(s.zipkin, "POST", "/api/v2/spans", json, &zipkin_body), 202);
    for ingest in [s.otlp, s.zipkin] {
        for (method, path, headers) in [
            ("GET", "/", ""),
            ("GET", "/ui/app.js", ""),
            ("GET", "/api/status", ""),
            ("GET", "/api", ""),
            ("GET", "/metrics", ""),
            ("GET", "/api/sql?q=SELECT%201", ""),
            ("POST", "/api/sql", ""),
            ("GET", "/api/v2/services", ""),
            ("GET", "/api/v3/services", ""),
            ("GET", "/api/ui/services", ""),
            ("GET", "/api/control/agents", auth),
            ("POST", "/api/agents/report", auth),
        ] {
            assert_eq!(
                status(ingest, method, path, headers, b"SELECT 1"),
                404,
                "{method} {path} on {ingest}"
            );
        }
    }
    assert_eq!(status(s.otlp, "POST", "/api/v2/spans", json, &zipkin_body), 404);
    assert_eq!(status(s.zipkin, "POST", "/v1/traces", pb, &otlp_body), 404);

    assert_eq!(status(s.http, "POST", "/v1/traces", pb, &otlp_body), 404);
    assert_eq!(status(s.http, "POST", "/api/v2/spans", json, &zipkin_body), 405);
    for path in
        ["/", "/api/status", "/metrics", "/api/sql?q=SELECT%201", "/api/v2/services", "/api/v3/services"]
    {
        assert_eq!(status(s.http, "GET", path, "", b""), 200, "GET {path}");
    }
    assert_eq!(status(s.http, "GET", "/api/control/agents", auth, b""), 200);
    assert_eq!(
        s.store.stats().buffer_spans,
        (a.len() + b.len()) as u64,
        "only the two ingest requests stored spans"
    );
}

/// Starts a request to `path` whose body of `len` bytes then trickles one byte per `pause`
/// until the server stops reading (at most `bytes` bytes); returns what the server answered.
fn trickle(addr: SocketAddr, len: usize, bytes: usize, pause: Duration) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    write!(
        c,
        "POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-protobuf\r\nContent-Length: {len}\r\n\r\n"
    )
    .unwrap();
    for _ in 0..bytes {
        std::thread::sleep(pause);
        if c.write_all(&[0x0a]).is_err() {
            break;
        }
        // the answer (408) may come while we still write
        c.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 1];
        let answered = !matches!(c.peek(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
        c.set_nonblocking(false).unwrap();
        if answered {
            break;
        }
    }
    let mut answer = Vec::new();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = c.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

/// Slowloris on the body: 16 connections that declare a body and trickle it hold the whole
/// in-flight budget; the body timeout cuts them (408) and a normal client gets through.
#[test]
fn trickling_bodies_are_cut_and_give_back_the_inflight_budget() {
    let s = TestServer::with(|_, c| {
        c.max_request_bytes = 1 << 20;
        c.max_inflight_bytes = 16 << 20;
        c.body_timeout = Duration::from_secs(2);
    });
    let otlp = s.otlp;
    let tricklers: Vec<_> = (0..16)
        .map(|_| std::thread::spawn(move || trickle(otlp, 1 << 20, 600, Duration::from_millis(100))))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while s.metric("weft_connections_open{listener=\"otlp_http\"}") < 16.0 {
        assert!(Instant::now() < deadline, "the tricklers did not connect");
        std::thread::sleep(Duration::from_millis(20));
    }
    let body = otlp::encode_proto(&spans(3, 5));
    let pb = ("Content-Type", "application/x-protobuf");
    // Without the body timeout the tricklers hold the budget for the whole minute they trickle.
    loop {
        let (st, _, _) = s.post("/v1/traces", &[pb], &body);
        if st == 200 {
            break;
        }
        assert_eq!(st, 429);
        assert!(
            tricklers.iter().any(|t| !t.is_finished()),
            "the tricklers ended before the budget came back"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    for t in tricklers {
        let answer = t.join().unwrap();
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("--body-timeout"), "{answer}");
    }
    assert_eq!(s.metric("weft_requests_timed_out_total{receiver=\"otlp_http\"}"), 16.0);
}

/// Whether the server closed `c` before we wrote `max` more bytes, one per `pause`.
fn closed_while_writing(c: &mut TcpStream, max: usize, pause: Duration) -> bool {
    c.set_read_timeout(Some(pause)).unwrap();
    for _ in 0..max {
        let mut buf = [0u8; 256];
        match c.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return true,
        }
        if c.write_all(b"a").is_err() {
            return true;
        }
    }
    false
}

/// Slowloris on the headers (a byte at a time) and idle keep-alive connections are closed;
/// past the connection cap a connection is closed at once and counted.
#[test]
fn slow_headers_idle_connections_and_excess_connections_are_closed() {
    let s = TestServer::with(|_, c| {
        c.header_timeout = Duration::from_secs(1);
        c.max_connections = 4;
    });
    let mut slow = TcpStream::connect(s.otlp).unwrap();
    slow.write_all(b"POST /v1/traces HTTP/1.1\r\nX-Slow: ").unwrap();
    assert!(closed_while_writing(&mut slow, 300, Duration::from_millis(200)), "slow headers were not cut");

    // idle keep-alive: one request, then silence
    let mut idle = TcpStream::connect(s.http).unwrap();
    idle.write_all(b"GET /api/status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match idle.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) => panic!("the idle keep-alive connection was not closed: {e}"),
        }
    }
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"));

    // the cap: four idle connections, a fifth is closed at once
    let held: Vec<_> = (0..4).map(|_| TcpStream::connect(s.zipkin).unwrap()).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while s.metric("weft_connections_open{listener=\"zipkin\"}") < 4.0 {
        assert!(Instant::now() < deadline, "the four connections were not accepted");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut fifth = TcpStream::connect(s.zipkin).unwrap();
    fifth.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let closed = matches!(fifth.read(&mut buf), Ok(0) | Err(_))
        && s.metric("weft_connections_refused_total{listener=\"zipkin\"}") == 1.0;
    assert!(closed, "the fifth connection was kept");
    drop(held);
}

/// Shutdown waits for requests in progress only up to its deadline.
#[test]
fn shutdown_does_not_wait_for_a_stuck_request() {
    let mut s = TestServer::with(|_, c| {
        c.body_timeout = Duration::from_secs(600);
        c.shutdown_timeout = Duration::from_millis(500);
    });
    let otlp = s.otlp;
    let trickler = std::thread::spawn(move || trickle(otlp, 1 << 20, 600, Duration::from_millis(100)));
    let deadline = Instant::now() + Duration::from_secs(60);
    while s.metric("weft_connections_open{listener=\"otlp_http\"}") < 1.0 {
        assert!(Instant::now() < deadline, "the trickler did not connect");
        std::thread::sleep(Duration::from_millis(20));
    }
    let running = s.running.take().unwrap();
    s.rt.block_on(running.shutdown());
    assert!(!trickler.is_finished(), "shutdown waited for the stuck request (a minute of trickling)");
    let _ = trickler.join();
}

/// Reads `c` until the server closes it, answering HTTP/2 SETTINGS and PINGs like a live client
/// that sends no request; false when it is still open after a minute.
fn closed_while_answering_pings(c: &mut TcpStream) -> bool {
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut pending = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = match c.read(&mut buf) {
            Ok(0) => return true,
            Ok(n) => n,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return false;
            }
            Err(_) => return true,
        };
        pending.extend_from_slice(&buf[..n]);
        // frames: 3-byte length, type, flags, 4-byte stream id, payload
        while pending.len() >= 9 {
            let len = usize::from(pending[0]) << 16 | usize::from(pending[1]) << 8 | usize::from(pending[2]);
            if pending.len() < 9 + len {
                break;
            }
            let (kind, flags) = (pending[3], pending[4]);
            let answer = match (kind, flags & 1) {
                (4, 0) => Some([&[0, 0, 0, 4, 1, 0, 0, 0, 0][..]].concat()),
                (6, 0) => Some([&[0, 0, 8, 6, 1, 0, 0, 0, 0][..], &pending[9..9 + len]].concat()),
                _ => None,
            };
            if let Some(a) = answer
                && c.write_all(&a).is_err()
            {
                return true;
            }
            pending.drain(..9 + len);
        }
    }
}

/// A connection that never starts a request is closed after the header timeout: one that sends
/// nothing (gRPC and HTTP/1 ports), and an HTTP/2 client that sends the preface, answers the
/// server's pings, but no request's headers.
#[test]
fn connections_without_a_request_are_closed() {
    let s = TestServer::with(|_, c| c.header_timeout = Duration::from_secs(1));
    for addr in [s.grpc, s.otlp] {
        let mut silent = TcpStream::connect(addr).unwrap();
        silent.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let closed = match silent.read(&mut [0u8; 64]) {
            Ok(n) => n == 0,
            Err(e) => !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
        };
        assert!(closed, "a silent connection to {addr} was kept");
    }
    let mut preface = TcpStream::connect(s.grpc).unwrap();
    preface.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").unwrap();
    preface.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).unwrap();
    assert!(closed_while_answering_pings(&mut preface), "an HTTP/2 connection without a request was kept");
}
