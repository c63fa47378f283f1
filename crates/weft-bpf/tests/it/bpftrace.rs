//! bpftrace 0.17 as a peer (`-f json`), shared by the tests and the cost bench.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

/// A running bpftrace (`-f json`), attached.
pub struct Bpftrace {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Bpftrace {
    /// Starts `script` and waits until its probes fire. bpftrace 0.17 reports
    /// `attached_probes` before it has attached them, so `sentinel` (a probe that prints
    /// `ready`) goes last, and `poke` (what fires it) runs until bpftrace has printed it.
    pub fn start(script: &str, sentinel: &str, poke: impl Fn()) -> Bpftrace {
        let script = format!("{script} {sentinel}");
        let mut child = Command::new("bpftrace")
            .args(["-f", "json", "-e", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("bpftrace 0.17 (listed in .ci/apt-packages) must be installed");
        let out = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in out.lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let bt = Bpftrace { child, lines };
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            assert!(Instant::now() < deadline, "bpftrace did not attach: {script}");
            poke();
            match bt.lines.recv_timeout(Duration::from_millis(50)) {
                Ok(l) if l.contains("ready") => return bt,
                Ok(_) | Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => panic!("bpftrace exited: {script}"),
            }
        }
    }

    /// Stops it (SIGINT: it prints its maps) and returns `@name → JSON value`. bpftrace 0.17
    /// sometimes misses a SIGINT (seen while it still set up): it is sent again every 5 s.
    pub fn finish(self) -> BTreeMap<String, serde_json::Value> {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut maps = BTreeMap::new();
        // SAFETY: plain kill(2) on our child's pid.
        let interrupt = || unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        interrupt();
        loop {
            let l = match self.lines.recv_timeout(Duration::from_secs(5)) {
                Ok(l) => l,
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) if Instant::now() < deadline => {
                    interrupt();
                    continue;
                }
                Err(RecvTimeoutError::Timeout) => panic!("bpftrace did not stop on SIGINT"),
            };
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&l) else { continue };
            if let Some(data) = v.get("data").and_then(|d| d.as_object()) {
                for (k, v) in data {
                    maps.insert(k.clone(), v.clone());
                }
            }
        }
        maps
    }
}

impl Drop for Bpftrace {
    fn drop(&mut self) {
        // A failed test must not leave bpftrace attached (after `finish` it has exited).
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
