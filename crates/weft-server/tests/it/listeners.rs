//! Issue 18: what each listener serves, and how it holds up against slow or idle connections.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

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
