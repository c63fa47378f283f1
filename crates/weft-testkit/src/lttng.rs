//! Real LTTng-UST recordings for tests: compiles weft's test program (`lttng/app.c`: a
//! provider with every LTTng-UST field type, and a BlkKin-style `zipkin` provider) with gcc,
//! runs it under a private `lttng-sessiond --daemonize --no-kernel`, and returns the trace.
//!
//! Each recording has its own `LTTNG_HOME` (and so its own session daemon, sockets and shared
//! memory) in a temporary directory. As root, the system-wide run directory `/var/run/lttng`
//! and `/dev/shm` would be shared by parallel tests, so the recording runs in a private mount
//! namespace (`unshare --mount`) with its own tmpfs there; where that is not allowed, root
//! recordings take turns on a lock file. The daemon is killed (by its pid file) afterwards.
//!
//! Needs `lttng-tools`, `liblttng-ust-dev` and `gcc` (`.ci/apt-packages`); a missing one fails
//! the test with a message naming `.ci/test`.

use std::path::{Path, PathBuf};
use std::process::Command;

const APP_C: &str = include_str!("../lttng/app.c");
const WEFT_TP_H: &str = include_str!("../lttng/weft_tp.h");
const BLKIN_TP_H: &str = include_str!("../lttng/blkin_tp.h");

/// What to record.
#[derive(Debug, Clone)]
pub struct RecordOptions {
    /// `weft_test:all_types` events to emit.
    pub all_types: u64,
    /// `weft_test:small` events to emit.
    pub small: u64,
    /// Times to run the BlkKin scenario (see `lttng/app.c`).
    pub blkin: u32,
    /// Add the `vtid`, `vpid` and `procname` contexts.
    pub contexts: bool,
    /// Sub-buffer size (`--subbuf-size`), e.g. `"1M"`.
    pub subbuf_size: String,
    /// Sub-buffers per stream (`--num-subbuf`).
    pub num_subbuf: u32,
}

impl Default for RecordOptions {
    fn default() -> Self {
        RecordOptions {
            all_types: 100,
            small: 0,
            blkin: 1,
            contexts: true,
            subbuf_size: "1M".into(),
            num_subbuf: 4,
        }
    }
}

/// A recorded trace; the directory is removed on drop.
pub struct Recording {
    /// The session's output directory (holds `ust/uid/<uid>/64-bit/`).
    pub trace: PathBuf,
    /// What the recording script printed.
    pub log: String,
    _tmp: tempfile::TempDir,
}

fn have(cmd: &str, arg: &str) -> bool {
    Command::new(cmd).arg(arg).output().map(|o| o.status.success()).unwrap_or(false)
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Records weft's test program under LTTng (see the module docs).
pub fn record(opts: &RecordOptions) -> Recording {
    for (cmd, arg) in [("lttng", "--version"), ("lttng-sessiond", "--version"), ("gcc", "--version")] {
        assert!(
            have(cmd, arg),
            "`{cmd}` is missing: run .ci/test (it installs lttng-tools, liblttng-ust-dev and gcc from .ci/apt-packages)"
        );
    }
    let tmp = tempfile::Builder::new().prefix("weft-lttng-").tempdir().expect("temporary directory");
    let w = tmp.path();
    for (name, text) in [("app.c", APP_C), ("weft_tp.h", WEFT_TP_H), ("blkin_tp.h", BLKIN_TP_H)] {
        std::fs::write(w.join(name), text).expect("write test program");
    }
    let out = Command::new("gcc")
        .args(["-O1", "-I"])
        .arg(w)
        .arg("-o")
        .arg(w.join("app"))
        .arg(w.join("app.c"))
        .args(["-llttng-ust", "-ldl"])
        .output()
        .expect("run gcc");
    assert!(
        out.status.success(),
        "compiling the LTTng test program failed (is liblttng-ust-dev installed? run .ci/test):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let script = script(w, opts);
    std::fs::write(w.join("record.sh"), script).expect("write script");
    let mut cmd;
    let root = is_root();
    if root && have_unshare() {
        cmd = Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "sh"])
            .arg(w.join("record.sh"))
            .env("WEFT_LTTNG_PRIVATE_MOUNTS", "1");
    } else if root {
        cmd = Command::new("flock");
        cmd.arg(std::env::temp_dir().join("weft-lttng-root.lock")).arg("sh").arg(w.join("record.sh"));
    } else {
        cmd = Command::new("sh");
        cmd.arg(w.join("record.sh"));
    }
    let out = cmd.output().expect("run the LTTng recording script");
    let log = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "recording with LTTng failed:\n{log}");
    let trace = w.join("trace");
    assert!(trace.is_dir(), "LTTng wrote no trace:\n{log}");
    Recording { trace, log, _tmp: tmp }
}

fn have_unshare() -> bool {
    Command::new("unshare")
        .args(["--mount", "--propagation", "private", "true"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn script(w: &Path, o: &RecordOptions) -> String {
    let w = w.display();
    let ctx = if o.contexts { "lttng add-context -u -c ch -t vtid -t vpid -t procname" } else { ":" };
    format!(
        r#"set -eu
W='{w}'
if [ "${{WEFT_LTTNG_PRIVATE_MOUNTS:-}}" = 1 ]; then
  mount -t tmpfs none /var/run
  mkdir -p /var/run/lttng
  mount -t tmpfs none /dev/shm
fi
export LTTNG_HOME="$W/home"
mkdir -p "$LTTNG_HOME"
export LTTNG_UST_REGISTER_TIMEOUT=10000
cleanup() {{
  if [ -f "$W/sessiond.pid" ]; then
    pid=$(cat "$W/sessiond.pid")
    kill "$pid" 2>/dev/null || true
    i=0
    while kill -0 "$pid" 2>/dev/null && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
  fi
}}
trap cleanup EXIT
lttng-sessiond --daemonize --no-kernel --pidfile="$W/sessiond.pid"
lttng create weft --output="$W/trace"
lttng enable-channel -u ch --subbuf-size={subbuf} --num-subbuf={nsub}
lttng enable-event -u -c ch 'weft_test:*'
lttng enable-event -u -c ch 'zipkin:*'
{ctx}
lttng start
"$W/app" {all} {small} {blkin}
lttng stop
lttng destroy
"#,
        subbuf = o.subbuf_size,
        nsub = o.num_subbuf,
        all = o.all_types,
        small = o.small,
        blkin = o.blkin,
    )
}
