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
//! [`LiveSessions`] does the same with `lttng-relayd` and live sessions, for live viewers.
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
    let tmp = compile_app();
    let w = tmp.path();
    let script = script(w, opts);
    std::fs::write(w.join("record.sh"), script).expect("write script");
    let out = script_command(w, "record.sh").output().expect("run the LTTng recording script");
    let log = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "recording with LTTng failed:\n{log}");
    let trace = w.join("trace");
    assert!(trace.is_dir(), "LTTng wrote no trace:\n{log}");
    Recording { trace, log, _tmp: tmp }
}

/// Checks the tools, and compiles the test program into a new temporary directory.
fn compile_app() -> tempfile::TempDir {
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
    tmp
}

/// `sh W/SCRIPT` in a private mount namespace as root (or taking turns on a lock file).
fn script_command(w: &Path, script: &str) -> Command {
    let mut cmd;
    let root = is_root();
    if root && have_unshare() {
        cmd = Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "sh"])
            .arg(w.join(script))
            .env("WEFT_LTTNG_PRIVATE_MOUNTS", "1");
    } else if root {
        cmd = Command::new("flock");
        cmd.arg(std::env::temp_dir().join("weft-lttng-root.lock")).arg("sh").arg(w.join(script));
    } else {
        cmd = Command::new("sh");
        cmd.arg(w.join(script));
    }
    cmd
}

fn have_unshare() -> bool {
    Command::new("unshare")
        .args(["--mount", "--propagation", "private", "true"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// The start of every script: strict mode, the work directory `W`, private mounts of LTTng's
/// run-time directories when asked (`WEFT_LTTNG_PRIVATE_MOUNTS=1`) and a private `LTTNG_HOME`.
fn preamble(w: &Path) -> String {
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
export LTTNG_UST_REGISTER_TIMEOUT=10000"#,
        w = w.display()
    )
}

fn script(w: &Path, o: &RecordOptions) -> String {
    let preamble = preamble(w);
    let ctx = if o.contexts { "lttng add-context -u -c ch -t vtid -t vpid -t procname" } else { ":" };
    format!(
        r#"{preamble}
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

/// Live sessions: a private `lttng-sessiond` and `lttng-relayd` (on free ports) with live
/// sessions (`lttng create --live`) that record weft's test program when told to. Every
/// session records the same events (each has its own buffers), so different viewers can each
/// attach to one: the relay daemon takes one viewer per session.
pub struct LiveSessions {
    /// The relay daemon's live (viewer) port.
    pub live_port: u16,
    /// The traced host's name, as the relay daemon lists it.
    pub hostname: String,
    /// The sessions' names.
    pub sessions: Vec<String>,
    /// The relay daemon's output directory (`HOSTNAME/SESSION-DATE/` below it, afterwards).
    pub relay_output: PathBuf,
    dir: PathBuf,
    child: Option<std::process::Child>,
    _tmp: tempfile::TempDir,
}

impl LiveSessions {
    /// Starts the daemons and `n` live sessions (live timer 100 ms) enabling the `zipkin` and
    /// `weft_test` events; waits until they are listed.
    pub fn start(n: usize, opts: &RecordOptions) -> LiveSessions {
        assert!(have("lttng-relayd", "--version"), "`lttng-relayd` is missing: run .ci/test");
        let tmp = compile_app();
        let w = tmp.path().to_path_buf();
        let ports = [crate::free_port(), crate::free_port(), crate::free_port()];
        let sessions: Vec<String> = (0..n).map(|i| format!("weft-live-{i}")).collect();
        std::fs::write(w.join("live.sh"), live_script(&w, &ports, &sessions, opts)).expect("write script");
        let child = script_command(&w, "live.sh")
            .stdout(std::fs::File::create(w.join("live.log")).expect("log file"))
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("run the LTTng live script");
        let mut s = LiveSessions {
            live_port: ports[2],
            hostname: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_owned())
                .unwrap_or_default(),
            sessions,
            relay_output: w.join("relay"),
            dir: w,
            child: Some(child),
            _tmp: tmp,
        };
        s.wait_for("ready");
        s
    }

    /// `net://127.0.0.1:PORT/host/HOSTNAME/SESSION` of session `i`.
    pub fn url(&self, i: usize) -> String {
        format!("net://127.0.0.1:{}/host/{}/{}", self.live_port, self.hostname, self.sessions[i])
    }

    /// What the script printed so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("live.log")).unwrap_or_default()
    }

    fn wait_for(&mut self, file: &str) {
        let t0 = std::time::Instant::now();
        while !self.dir.join(file).exists() {
            if let Some(c) = &mut self.child
                && let Ok(Some(st)) = c.try_wait()
            {
                panic!("the LTTng live script ended ({st}) before '{file}':\n{}", self.log());
            }
            assert!(
                t0.elapsed().as_secs() < 120,
                "the LTTng live script did not reach '{file}':\n{}",
                self.log()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Runs the test program (as configured), stops and destroys the sessions; returns when
    /// they are destroyed (the relay daemon keeps serving what it has to its viewers).
    pub fn run_app_and_destroy(&mut self) {
        std::fs::write(self.dir.join("go"), "").expect("write go");
        self.wait_for("destroyed");
    }

    /// Stops the relay daemon (before the program runs), as a crash or restart would.
    pub fn kill_relay_daemon(&mut self) {
        std::fs::write(self.dir.join("kill-relayd"), "").expect("write kill-relayd");
        self.wait_for("relayd-killed");
    }

    /// The relay daemon's copy of session `i` (its output directory), once destroyed.
    pub fn trace_dir(&self, i: usize) -> PathBuf {
        let host = self.relay_output.join(&self.hostname);
        let prefix = format!("{}-", self.sessions[i]);
        std::fs::read_dir(&host)
            .unwrap_or_else(|e| panic!("{}: {e}\n{}", host.display(), self.log()))
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&prefix)))
            .unwrap_or_else(|| panic!("no output of {} under {}", self.sessions[i], host.display()))
    }
}

impl Drop for LiveSessions {
    fn drop(&mut self) {
        // Tells the script to kill its daemons (it waits for this file), then reaps it.
        let _ = std::fs::write(self.dir.join("done"), "");
        if let Some(mut c) = self.child.take() {
            let t0 = std::time::Instant::now();
            while t0.elapsed().as_secs() < 30 {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn live_script(w: &Path, ports: &[u16; 3], sessions: &[String], o: &RecordOptions) -> String {
    let preamble = preamble(w);
    let [c, d, l] = ports;
    let mut per_session = String::new();
    for s in sessions {
        let ctx = if o.contexts {
            format!("lttng add-context -s {s} -u -c ch -t vtid -t vpid -t procname")
        } else {
            ":".into()
        };
        per_session += &format!(
            r#"i=0
until lttng create {s} --live 100000 --set-url net://127.0.0.1:{c}:{d}; do
  i=$((i+1)); [ $i -lt 100 ] || exit 1; sleep 0.1
done
lttng enable-channel -s {s} -u ch --subbuf-size={subbuf} --num-subbuf={nsub}
lttng enable-event -s {s} -u -c ch 'weft_test:*'
lttng enable-event -s {s} -u -c ch 'zipkin:*'
{ctx}
lttng start {s}
"#,
            subbuf = o.subbuf_size,
            nsub = o.num_subbuf,
        );
    }
    // Destroyed together: lttng-tools 2.13's `lttng destroy` of one live session waits while
    // another session of the same relay daemon lives.
    let mut stop: String =
        sessions.iter().map(|s| format!("lttng destroy {s} &\nd=\"${{d:-}} $!\"\n")).collect();
    stop += "wait $d\n";
    format!(
        r#"{preamble}
stop_pid() {{
  kill "$1" 2>/dev/null || true
  i=0
  while kill -0 "$1" 2>/dev/null && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
}}
cleanup() {{
  [ -f "$W/sessiond.pid" ] && stop_pid "$(cat "$W/sessiond.pid")"
  [ -n "${{relayd:-}}" ] && stop_pid "$relayd"
}}
trap cleanup EXIT
lttng-sessiond --daemonize --no-kernel --pidfile="$W/sessiond.pid"
lttng-relayd -C tcp://127.0.0.1:{c} -D tcp://127.0.0.1:{d} -L tcp://127.0.0.1:{l} -o "$W/relay" >"$W/relayd.log" 2>&1 &
relayd=$!
{per_session}touch "$W/ready"
i=0
while [ ! -f "$W/go" ] && [ ! -f "$W/done" ]; do
  i=$((i+1)); [ $i -lt 2400 ] || exit 1; sleep 0.05
  if [ -f "$W/kill-relayd" ] && [ ! -f "$W/relayd-killed" ]; then
    stop_pid "$relayd"; relayd=; touch "$W/relayd-killed"
  fi
done
[ -f "$W/done" ] && exit 0
"$W/app" {all} {small} {blkin}
{stop}touch "$W/destroyed"
i=0
while [ ! -f "$W/done" ] && [ $i -lt 2400 ]; do i=$((i+1)); sleep 0.05; done
"#,
        all = o.all_types,
        small = o.small,
        blkin = o.blkin,
    )
}
