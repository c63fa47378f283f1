//! `weft weave`: files and OTLP/HTTP into a real collector (`weft serve`).

use std::io::BufReader;
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use weft_model::codec::stream::{Format, reader};
use weft_synth::simlog::Scenario;

const WEFT: &str = env!("CARGO_BIN_EXE_weft");

/// Two ping rounds (48 spans each) with their topology in `dir`.
fn ping(dir: &Path) -> std::path::PathBuf {
    let s = Scenario { rounds: 2, noise: 3, ..Scenario::default() };
    for (log, bytes) in s.generate() {
        std::fs::write(dir.join(log.file_name()), bytes).unwrap();
    }
    std::fs::write(dir.join("kernel.syms"), weft_synth::simlog::kernel_syms()).unwrap();
    std::fs::write(dir.join("i40e.syms"), weft_synth::simlog::i40e_syms()).unwrap();
    let t = dir.join("topology.toml");
    std::fs::write(&t, s.topology(".")).unwrap();
    t
}

fn count_spans(p: &Path, f: Format) -> usize {
    let mut r = reader(f, BufReader::new(std::fs::File::open(p).unwrap()), false).unwrap();
    let mut v = Vec::new();
    while r.next_batch(&mut v, 1000).unwrap() {}
    v.len()
}

#[test]
fn weave_writes_files_and_summarizes() {
    let dir = tempfile::tempdir().unwrap();
    let topo = ping(dir.path());
    let (z, o) = (dir.path().join("ping.zipkin.json"), dir.path().join("ping.otlp.json"));
    let out = Command::new(WEFT)
        .args(["weave", "--quiet", "--tree"])
        .arg(&topo)
        .arg("--out")
        .arg(&z)
        .arg("--out")
        .arg(&o)
        .arg("--out")
        .arg(dir.path().join("ping.chrome.json"))
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("wove 96 spans"), "{stderr}");
    assert!(stderr.contains("cross-component causality"), "{stderr}");
    assert!(stderr.contains("client ↔ client-nic"), "{stderr}");
    assert!(stdout.contains("└─ sendto  client  HostCall"), "{stdout}");
    assert_eq!(count_spans(&z, Format::ZipkinV2Json), 96);
    assert_eq!(count_spans(&o, Format::OtlpJson), 96);

    // A missing log is an error naming the key.
    std::fs::remove_file(dir.path().join("ns3.tr")).unwrap();
    let out = Command::new(WEFT).args(["weave", "--quiet"]).arg(&topo).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("topology.toml: source[2].path:") && err.contains("ns3.tr: no such file"), "{err}");
}

struct Serve(std::process::Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn weave_streams_otlp_http_into_weft_serve() {
    let dir = tempfile::tempdir().unwrap();
    let topo = ping(dir.path());
    let ports: Vec<u16> = (0..4).map(|_| weft_testkit::free_port()).collect();
    let addr = |p: u16| format!("127.0.0.1:{p}");
    let _serve = Serve(
        Command::new(WEFT)
            .args(["serve", "--data-dir"])
            .arg(dir.path().join("data"))
            .args(["--otlp-http", &addr(ports[0]), "--otlp-grpc", &addr(ports[1])])
            .args(["--zipkin", &addr(ports[2]), "--http", &addr(ports[3])])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let t0 = Instant::now();
    while TcpStream::connect(addr(ports[0])).is_err() {
        assert!(t0.elapsed() < Duration::from_secs(120), "weft serve did not listen on {}", addr(ports[0]));
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = Command::new(WEFT)
        .args(["weave", "--quiet", "--otlp"])
        .arg(format!("http://{}/v1/traces", addr(ports[0])))
        .arg(&topo)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("sink otlp-http") && stderr.contains(": 96 spans"), "{stderr}");
    let q = Command::new(WEFT)
        .args(["query", "--format", "csv", "--url"])
        .arg(format!("http://{}", addr(ports[3])))
        .arg("SELECT count(*) AS n, count(DISTINCT trace_id) AS t FROM spans")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&q.stdout);
    assert!(q.status.success(), "{}", String::from_utf8_lossy(&q.stderr));
    assert_eq!(text.lines().nth(1), Some("96,4"), "{text}");
}
