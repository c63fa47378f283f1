//! `weft serve` as a child process (CARGO_BIN_EXE_weft) with every listener on a free loopback
//! port, for tests that drive it with real clients.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The `weft` binary under test.
pub fn weft_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_weft"))
}

/// A `weft serve` child process with every listener on a free loopback port.
pub struct WeftServe {
    child: Option<Child>,
    /// OTLP/HTTP listener (`0.0.0.0:0`, not bound, on a `--read-only` server; so the two below).
    pub otlp_http: SocketAddr,
    /// OTLP/gRPC listener.
    pub otlp_grpc: SocketAddr,
    /// Zipkin listener.
    pub zipkin: SocketAddr,
    /// Query listener (Jaeger api_v3, SQL, metrics).
    pub http: SocketAddr,
    /// What the server printed on stdout (its banner, then its exit summary).
    pub stdout: mpsc::Receiver<String>,
    pub agent: ureq::Agent,
}

fn addr_after(line: &str, label: &str) -> Option<SocketAddr> {
    let rest = line.trim_start().strip_prefix(label)?.trim_start();
    let word = rest.split_whitespace().next()?;
    let word = word.strip_prefix("http://").unwrap_or(word);
    word.split('/').next()?.parse().ok()
}

impl WeftServe {
    /// Starts `weft serve --data-dir DIR` plus `extra` flags, every listener on port 0, and
    /// waits for its banner (printed once every listener is bound).
    pub fn start(dir: &Path, extra: &[&str]) -> WeftServe {
        let any: SocketAddr = ([127, 0, 0, 1], 0).into();
        WeftServe::start_on(dir, [any; 4], extra)
    }

    /// As [`WeftServe::start`], on the given listeners (OTLP/HTTP, OTLP/gRPC, Zipkin, query:
    /// the order of [`WeftServe::listeners`]) — a server restarted where its senders expect it.
    pub fn start_on(dir: &Path, listeners: [SocketAddr; 4], extra: &[&str]) -> WeftServe {
        let mut cmd = Command::new(weft_bin());
        cmd.arg("serve").arg("--data-dir").arg(dir);
        for (l, a) in ["--otlp-http", "--otlp-grpc", "--zipkin", "--http"].into_iter().zip(listeners) {
            cmd.arg(l).arg(a.to_string());
        }
        cmd.args(extra).arg("--quiet").stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::inherit());
        let mut child = cmd.spawn().expect("spawn weft serve");
        let out = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let (mut grpc, mut http, mut zipkin, mut query) = (None, None, None, None);
        let mut banner = Vec::new();
        loop {
            let line = match rx.recv_timeout(Duration::from_secs(120)) {
                Ok(l) => l,
                Err(e) => {
                    let _ = child.kill();
                    panic!("weft serve did not finish starting ({e}); it printed:\n{}", banner.join("\n"))
                }
            };
            grpc = grpc.or(addr_after(&line, "OTLP/gRPC"));
            http = http.or(addr_after(&line, "OTLP/HTTP"));
            zipkin = zipkin.or(addr_after(&line, "Zipkin"));
            query = query.or(addr_after(&line, "Jaeger"));
            let done = line.starts_with("Ctrl-C stops");
            banner.push(line);
            if done {
                break;
            }
        }
        let missing = || panic!("a listener is missing from the banner:\n{}", banner.join("\n"));
        // A --read-only server binds no ingest listener.
        let ingest = |a: Option<SocketAddr>| match a {
            None if extra.contains(&"--read-only") => SocketAddr::from(([0, 0, 0, 0], 0)),
            a => a.unwrap_or_else(missing),
        };
        WeftServe {
            child: Some(child),
            otlp_http: ingest(http),
            otlp_grpc: ingest(grpc),
            zipkin: ingest(zipkin),
            http: query.unwrap_or_else(missing),
            stdout: rx,
            agent: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_secs(60)))
                .build()
                .into(),
        }
    }

    /// GET on the query listener → JSON (asserting 200).
    pub fn get_json(&self, addr: SocketAddr, path: &str) -> serde_json::Value {
        let url = format!("http://{addr}{path}");
        let mut r = self.agent.get(&url).call().unwrap_or_else(|e| panic!("GET {url}: {e}"));
        let status = r.status().as_u16();
        let body = r.body_mut().read_to_string().unwrap_or_default();
        assert_eq!(status, 200, "GET {url}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {url}: {e}: {body}"))
    }

    /// SQL through `weft query --url` (the CLI against this server), JSON rows.
    pub fn query(&self, sql: &str) -> Vec<Vec<serde_json::Value>> {
        let out = Command::new(weft_bin())
            .args(["query", "--quiet", "--format", "json", "--url"])
            .arg(format!("http://{}", self.http))
            .arg(sql)
            .output()
            .expect("run weft query");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "weft query {sql:?} failed: {}{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("weft query output is not JSON ({e}): {stdout}"));
        serde_json::from_value(v["rows"].clone()).unwrap_or_else(|e| panic!("rows: {e}: {v}"))
    }

    /// A Prometheus counter from `/metrics` (sum of the lines starting with `prefix`).
    pub fn metric(&self, prefix: &str) -> f64 {
        let url = format!("http://{}/metrics", self.http);
        let text = self.agent.get(&url).call().expect("GET /metrics").body_mut().read_to_string().unwrap();
        text.lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// The listeners' addresses: OTLP/HTTP, OTLP/gRPC, Zipkin, query.
    pub fn listeners(&self) -> [SocketAddr; 4] {
        [self.otlp_http, self.otlp_grpc, self.zipkin, self.http]
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }

    /// SIGKILL (std's `Child::kill` on Unix), no chance to flush anything; reaps the child.
    pub fn kill9(mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill(); // fails only when it is already dead
            let _ = c.wait();
        }
    }

    /// SIGTERM: the server flushes and exits; returns what it printed on the way out.
    pub fn stop(mut self) -> Vec<String> {
        let mut c = self.child.take().expect("running");
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
        let status = c.wait().expect("wait for weft serve");
        assert!(status.success(), "weft serve exited with {status}");
        // Everything it printed, up to the reader's end of file: the reader thread may not have
        // passed the last lines on yet when the process is gone (a loaded machine showed it).
        let mut out = Vec::new();
        while let Ok(line) = self.stdout.recv_timeout(Duration::from_secs(30)) {
            out.push(line);
        }
        out
    }
}

impl Drop for WeftServe {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Without the `cluster` feature, `weft query --cluster` says where distributed SQL lives.
#[cfg(not(feature = "cluster"))]
#[test]
fn query_cluster_without_the_feature_says_how() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(weft_bin())
        .args(["query", "--cluster", "df://127.0.0.1:50050", "--data-dir"])
        .arg(tmp.path())
        .arg("SELECT count(*) FROM spans")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("weft-cluster query") && err.contains("--features cluster"), "{err}");
}
