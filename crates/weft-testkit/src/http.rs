//! A scripted HTTP receiver for exporter tests: answers requests in turn with the statuses and
//! headers it was given (then 200), one request per connection, and records when each came.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// One scripted answer.
#[derive(Debug, Clone)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// Extra headers (`Retry-After`, ...).
    pub headers: Vec<(String, String)>,
}

impl Answer {
    /// An answer with `status` and no extra header.
    pub fn status(status: u16) -> Answer {
        Answer { status, headers: Vec::new() }
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Answer {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }
}

/// A request the receiver answered.
#[derive(Debug, Clone)]
pub struct Seen {
    /// When its head was read.
    pub at: Instant,
    /// The request line (`POST /v1/traces HTTP/1.1`).
    pub line: String,
    /// Its headers (names lower-cased), in order.
    pub headers: Vec<(String, String)>,
    /// Body length.
    pub body_len: usize,
    /// The status answered.
    pub status: u16,
}

/// The receiver: listens on a loopback port until the test ends.
pub struct Scripted {
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Scripted {
    /// Starts answering `script` in order, then 200 to everything.
    pub fn start(script: Vec<Answer>) -> Scripted {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = l.local_addr().expect("local address").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            let mut script = script.into_iter();
            for c in l.incoming() {
                let Ok(c) = c else { return };
                let answer = script.next().unwrap_or(Answer::status(200));
                // Logged before the answer goes out: a client that has its answer sees its request.
                answer_one(c, &answer, |s| {
                    if let Ok(mut v) = log.lock() {
                        v.push(s);
                    }
                });
            }
        });
        Scripted { port, seen }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The requests answered so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

fn answer_one(c: TcpStream, a: &Answer, log: impl FnOnce(Seen)) -> Option<()> {
    let mut r = BufReader::new(c.try_clone().ok()?);
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let at = Instant::now();
    let mut len = 0usize;
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().ok()?;
            }
            headers.push((k.to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).ok()?;
    let mut head = format!("HTTP/1.1 {} Scripted\r\ncontent-length: 0\r\nconnection: close\r\n", a.status);
    for (k, v) in &a.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    log(Seen { at, line: line.trim_end().to_owned(), headers, body_len: len, status: a.status });
    let mut c = c;
    c.write_all(head.as_bytes()).ok()
}
