//! # weft-testkit
//!
//! Test support shared by weft's crates (a dev-dependency only):
//!
//! * [`shared_dir`] / [`fixture`]: the project's `../shared/` directory (fixtures from public
//!   projects live there and are never copied into the repository);
//! * [`peers_dir`], [`python`], [`node_modules`]: the real peers `.ci/test` installs (the
//!   OpenTelemetry Python SDK, py_zipkin, ns-3, playwright-core, ...);
//! * [`free_port`]: a loopback port nobody listens on;
//! * [`http`]: a scripted HTTP receiver (statuses and `Retry-After` in turn) for exporter tests;
//! * [`seaweed`]: a real S3-compatible server (SeaweedFS, from the peers' venv) for the bucket
//!   tests;
//! * [`lttng`]: real LTTng-UST recordings of weft's test program (every field type, BlkKin);
//! * `cpu` (feature `criterion`): criterion benchmarks timed in the thread's CPU time.
//!
//! A test that needs a peer **fails** with a message naming `.ci/test` when the peer is
//! missing — it never skips silently.

use std::path::{Path, PathBuf};

#[cfg(feature = "criterion")]
pub mod cpu;
pub mod http;
pub mod lttng;
pub mod seaweed;

/// The `shared/` directory beside the repository: `$WEFT_SHARED`, else the first `shared`
/// directory found next to an ancestor of this crate (the repository's parent in a checkout).
pub fn shared_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("WEFT_SHARED") {
        return PathBuf::from(p);
    }
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    for dir in here.ancestors() {
        let cand = dir.join("shared");
        if cand.join("fixtures").is_dir() {
            return cand;
        }
    }
    panic!("cannot find ../shared (fixtures) above {}; set WEFT_SHARED to its path", here.display())
}

/// A file or directory under `shared/fixtures/`; panics (failing the test) when missing.
pub fn fixture(rel: &str) -> PathBuf {
    let p = shared_dir().join("fixtures").join(rel);
    assert!(p.exists(), "fixture {} is missing", p.display());
    p
}

/// Where `.ci/test` installs the real peers: `$WEFT_PEERS`, else `$HOME/.cache/weft-peers`.
pub fn peers_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("WEFT_PEERS") {
        return PathBuf::from(p);
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/tmp"));
    home.join(".cache").join("weft-peers")
}

/// The Python interpreter of the peers' virtualenv (packages in `.ci/requirements.txt`).
pub fn python() -> PathBuf {
    let p = peers_dir().join("venv").join("bin").join("python");
    assert!(
        p.exists(),
        "the peers' Python ({}) is missing: run .ci/test once, which installs .ci/requirements.txt",
        p.display()
    );
    p
}

/// The peers' `node_modules` directory (packages in `.ci/package.json`).
pub fn node_modules() -> PathBuf {
    let p = peers_dir().join("node").join("node_modules");
    assert!(p.is_dir(), "the peers' node_modules ({}) is missing: run .ci/test once", p.display());
    p
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local addr").port()
}

/// The workspace root (the directory holding the top-level `Cargo.toml`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Compiles the C program `src` (relative to the workspace root, e.g.
/// `examples/kernel/workload.c`) with the system C compiler into `out_dir`, returning the
/// binary's path. Panics, naming `.ci/test`, when no compiler is installed.
pub fn compile_c(src: &str, out_dir: &Path) -> PathBuf {
    let src_path = workspace_root().join(src);
    let stem = Path::new(src).file_stem().and_then(|s| s.to_str()).unwrap_or("prog");
    let out = out_dir.join(stem);
    let status = std::process::Command::new("cc")
        .args(["-O1", "-g", "-Wall", "-o"])
        .arg(&out)
        .arg(&src_path)
        .arg("-lpthread")
        .status()
        .unwrap_or_else(|e| {
            panic!("cannot run cc ({e}): install gcc (listed in .ci/apt-packages; run .ci/test)")
        });
    assert!(status.success(), "cc failed on {}", src_path.display());
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn finds_shared_fixtures() {
        assert!(super::fixture("simulators/PROVENANCE.md").is_file());
        assert!(super::workspace_root().join("Cargo.toml").is_file());
    }
}
