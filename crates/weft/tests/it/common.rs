//! Helpers shared by the integration tests.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use weft_model::Span;
use weft_model::codec::stream::{self, Format, WriterOptions};

/// The `weft` binary under test.
pub fn weft() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weft"))
}

/// Runs `weft ARGS`, panicking with its stderr when it fails.
pub fn run_ok(args: &[&str]) -> Output {
    let out = weft().args(args).output().expect("spawn weft");
    assert!(
        out.status.success(),
        "weft {args:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `weft ARGS`, expecting a failure; returns stderr.
pub fn run_err(args: &[&str]) -> String {
    let out = weft().args(args).output().expect("spawn weft");
    assert!(
        !out.status.success(),
        "weft {args:?} should fail but printed:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Writes `spans` to `path` in `format`.
pub fn write_spans(path: &Path, format: Format, spans: &[Span]) {
    let f = std::io::BufWriter::new(std::fs::File::create(path).expect("create trace file"));
    let mut w = stream::writer(format, f, WriterOptions::default()).expect("writer");
    w.write(spans).expect("write spans");
    w.finish().expect("finish");
}

/// Parses CSV without quoted fields into rows of cells (header included).
pub fn csv(text: &str) -> Vec<Vec<String>> {
    text.lines().map(|l| l.split(',').map(str::to_owned).collect()).collect()
}

/// An HTTP client that returns error statuses as answers (60 s per request).
pub fn http() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into()
}

/// Poll `f` until it holds; panics naming `what` after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
