//! Helpers shared by the integration tests.

use std::path::Path;
use std::process::{Command, Output};

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

/// Reads an OTLP/JSON span file whole.
pub fn read_otlp_json(p: &Path) -> Vec<Span> {
    let f = std::fs::File::open(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let mut r = stream::reader(Format::OtlpJson, std::io::BufReader::new(f), false).unwrap();
    let mut v = Vec::new();
    while r.next_batch(&mut v, 10_000).unwrap() {}
    v
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

/// Runs one of `examples/ns3`'s scenarios with real ns-3 (the PyPI `ns3` wheel) and returns
/// its output; fails the test, with ns-3's stderr, if the script fails.
pub fn run_ns3(script: &str, args: &[String]) -> Output {
    let script = weft_testkit::workspace_root().join("examples/ns3").join(script);
    let out = Command::new(weft_testkit::python()).arg(&script).args(args).output().expect("run python");
    assert!(
        out.status.success(),
        "{} failed ({}) — is the PyPI `ns3` wheel installed? (.ci/test installs .ci/requirements.txt)\n{}",
        script.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
