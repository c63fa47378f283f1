//! Tracepoint control: executing a [`ProbeCommand`] against the local processes' segments, and
//! the agent's local control socket.
//!
//! Commands are applied through each segment's control area ([`weft_probe::consumer`]): the
//! agent writes one request byte per matched tracepoint, wakes the process's control thread and
//! waits (bounded) for its acknowledgement. The process never waits for the agent, and a stopped
//! or dying process only makes the command report `applied: false`.
//!
//! # Local socket
//!
//! `<segment dir>/agent.sock`: the segment directory is the user's own (mode 0700), the socket
//! is mode 0600, and every connection's peer uid (`SO_PEERCRED`) must be the agent's — so only
//! the same user can switch tracepoints. Protocol: one JSON [`ProbeCommand`] per line (at most
//! [`MAX_MESSAGE_BYTES`]), one JSON [`LocalReply`] per line back. A malformed line gets
//! `{"ok": false, "error": "..."}` naming the problem; the connection stays usable.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use weft_probe::consumer::{self, Segment};

use weft_control::proto::{
    CommandResult, LocalReply, MAX_MESSAGE_BYTES, ProbeCommand, ProcessOutcome, TracepointEntry,
};

/// File name of the agent's socket inside the segment directory.
pub const SOCKET_NAME: &str = "agent.sock";

/// The socket path for a segment directory.
pub fn socket_path(dir: &Path) -> PathBuf {
    dir.join(SOCKET_NAME)
}

/// Execute a validated-or-not command against every segment in `dir` it targets. Never panics;
/// refusals come back in [`CommandResult::error`] or per process.
pub fn execute(dir: &Path, cmd: &ProbeCommand, wait: Duration, agent: &str, host: &str) -> CommandResult {
    let mut res =
        CommandResult { agent: agent.to_string(), host: host.to_string(), ..CommandResult::default() };
    let sel = match cmd.validate() {
        Ok(s) => s,
        Err(e) => {
            res.error = Some(e.to_string());
            return res;
        }
    };
    let paths = match consumer::discover(dir) {
        Ok(p) => p,
        Err(e) => {
            res.error = Some(e.to_string());
            return res;
        }
    };
    let mut pending: Vec<(usize, Segment, u32)> = Vec::new();
    for path in paths {
        let segment = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let seg = match Segment::open_shared(&path) {
            Ok(s) => s,
            Err(e) => {
                res.processes.push(ProcessOutcome {
                    pid: 0,
                    service: String::new(),
                    segment,
                    matched: 0,
                    applied: false,
                    error: Some(e.to_string()),
                    tracepoints: Vec::new(),
                });
                continue;
            }
        };
        let (pid, service) = (seg.pid(), seg.service());
        if !cmd.targets(pid, &service) || !seg.producer_alive() {
            continue;
        }
        let mut out = ProcessOutcome {
            pid,
            service,
            segment,
            matched: 0,
            applied: false,
            error: None,
            tracepoints: Vec::new(),
        };
        match cmd.op.switch() {
            None => match seg.registry() {
                Ok(list) => {
                    out.tracepoints = list
                        .iter()
                        .filter(|t| sel.as_ref().is_none_or(|s| s.matches(&t.name, &t.group, t.level)))
                        .map(TracepointEntry::from)
                        .collect();
                    out.matched = out.tracepoints.len();
                    out.applied = true;
                }
                Err(e) => out.error = Some(e.to_string()),
            },
            Some(op) => match sel.as_ref() {
                Some(s) => match seg.switch(s, op) {
                    Ok((ids, seq)) => {
                        out.matched = ids.len();
                        pending.push((res.processes.len(), seg, seq));
                    }
                    Err(e) => out.error = Some(e.to_string()),
                },
                None => out.error = Some("no selector".into()),
            },
        }
        res.processes.push(out);
    }
    // every request is written; now wait (bounded, shared deadline) for the acknowledgements
    let deadline = Instant::now() + wait;
    for (i, seg, seq) in pending {
        let left = deadline.saturating_duration_since(Instant::now());
        let ok = seg.wait_applied(seq, left.max(Duration::from_millis(1)));
        if let Some(p) = res.processes.get_mut(i) {
            p.applied = ok;
            if !ok {
                p.error = Some(format!("the process did not acknowledge within {} ms", wait.as_millis()));
            }
        }
    }
    res
}

/// Errors of the local socket.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("{path}: another agent is already serving this segment directory")]
    AgentRunning { path: PathBuf },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: the agent's reply is not valid: {detail}")]
    Reply { path: PathBuf, detail: String },
}

/// Bind the control socket (refusing when a live agent already holds it; a stale socket file
/// is replaced).
pub fn bind(path: &Path) -> Result<UnixListener, SocketError> {
    let io = |source| SocketError::Io { path: path.to_path_buf(), source };
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(SocketError::AgentRunning { path: path.to_path_buf() });
        }
        std::fs::remove_file(path).map_err(io)?;
    }
    let l = UnixListener::bind(path).map_err(io)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
    l.set_nonblocking(true).map_err(io)?;
    Ok(l)
}

fn peer_uid(s: &UnixStream) -> Option<u32> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: valid fd, and `cred`/`len` describe a writable ucred.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (r == 0).then_some(cred.uid)
}

/// Read one line of at most `max` bytes (without the newline). `Ok(None)` at EOF.
fn read_line_bounded(r: &mut impl BufRead, max: usize) -> std::io::Result<Option<Result<Vec<u8>, usize>>> {
    let mut line = Vec::new();
    let mut too_long = 0usize;
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return Ok(if line.is_empty() && too_long == 0 { None } else { Some(Ok(line)) });
        }
        let (chunk, done) = match memchr_nl(buf) {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if too_long == 0 && line.len() + chunk.len() <= max {
            line.extend_from_slice(chunk);
        } else {
            too_long += line.len() + chunk.len();
            line.clear();
        }
        let n = done.unwrap_or(buf.len());
        r.consume(n);
        if done.is_some() {
            return Ok(Some(if too_long > 0 { Err(too_long) } else { Ok(line) }));
        }
    }
}

fn memchr_nl(b: &[u8]) -> Option<usize> {
    b.iter().position(|&c| c == b'\n')
}

/// Handle one control connection (a sequence of lines); refused messages are counted in
/// `refused`.
pub fn handle(stream: UnixStream, exec: &dyn Fn(&ProbeCommand) -> CommandResult, refused: &AtomicU64) {
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(10)));
    let mut w = match stream.try_clone() {
        Ok(w) => w,
        Err(_) => return,
    };
    let reply = |w: &mut UnixStream, r: &LocalReply| -> bool {
        let mut v = serde_json::to_vec(r).unwrap_or_else(|_| b"{\"ok\":false}".to_vec());
        v.push(b'\n');
        w.write_all(&v).is_ok()
    };
    if peer_uid(&stream) != Some(me) {
        refused.fetch_add(1, Ordering::Relaxed);
        reply(
            &mut w,
            &LocalReply {
                ok: false,
                error: Some("permission denied: not the agent's user".into()),
                result: None,
            },
        );
        return;
    }
    let mut r = BufReader::new(stream);
    loop {
        let line = match read_line_bounded(&mut r, MAX_MESSAGE_BYTES) {
            Ok(Some(l)) => l,
            Ok(None) | Err(_) => return,
        };
        let rep = match line {
            Err(n) => {
                refused.fetch_add(1, Ordering::Relaxed);
                LocalReply {
                    ok: false,
                    error: Some(format!(
                        "control message of {n} bytes exceeds the limit of {MAX_MESSAGE_BYTES} bytes"
                    )),
                    result: None,
                }
            }
            Ok(l) if l.iter().all(u8::is_ascii_whitespace) => continue,
            Ok(l) => match ProbeCommand::parse(&l) {
                Err(e) => {
                    refused.fetch_add(1, Ordering::Relaxed);
                    LocalReply { ok: false, error: Some(e.to_string()), result: None }
                }
                Ok(cmd) => {
                    let res = exec(&cmd);
                    LocalReply { ok: res.error.is_none(), error: res.error.clone(), result: Some(res) }
                }
            },
        };
        if !reply(&mut w, &rep) {
            return;
        }
    }
}

/// Serve the socket until `stop` is set (at most `max_conns` connections at once).
pub fn serve(
    listener: UnixListener,
    stop: Arc<AtomicBool>,
    max_conns: usize,
    exec: Arc<dyn Fn(&ProbeCommand) -> CommandResult + Send + Sync>,
    refused: Arc<AtomicU64>,
) {
    let active = Arc::new(AtomicUsize::new(0));
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((s, _)) => {
                let _ = s.set_nonblocking(false);
                if active.load(Ordering::Relaxed) >= max_conns {
                    let mut s = s;
                    let _ = s.write_all(b"{\"ok\":false,\"error\":\"too many control connections\"}\n");
                    continue;
                }
                active.fetch_add(1, Ordering::Relaxed);
                let (a, e, r) = (active.clone(), exec.clone(), refused.clone());
                let spawned = std::thread::Builder::new().name("weft-agent-ctl".into()).spawn(move || {
                    handle(s, &*e, &r);
                    a.fetch_sub(1, Ordering::Relaxed);
                });
                if spawned.is_err() {
                    active.fetch_sub(1, Ordering::Relaxed);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => {
                tracing::warn!(error = %e, "control socket accept failed");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

/// Send one command to the agent listening on `path` and read its reply.
pub fn request(path: &Path, cmd: &ProbeCommand, timeout: Duration) -> Result<LocalReply, SocketError> {
    let io = |source| SocketError::Io { path: path.to_path_buf(), source };
    let mut s = UnixStream::connect(path).map_err(io)?;
    s.set_read_timeout(Some(timeout)).map_err(io)?;
    s.set_write_timeout(Some(timeout)).map_err(io)?;
    let mut line = serde_json::to_vec(cmd).map_err(|e| io(std::io::Error::other(e)))?;
    line.push(b'\n');
    s.write_all(&line).map_err(io)?;
    let mut r = BufReader::new(s);
    match read_line_bounded(&mut r, 64 << 20).map_err(io)? {
        Some(Ok(l)) => serde_json::from_slice(&l)
            .map_err(|e| SocketError::Reply { path: path.to_path_buf(), detail: e.to_string() }),
        Some(Err(n)) => Err(SocketError::Reply {
            path: path.to_path_buf(),
            detail: format!("reply of {n} bytes is too long"),
        }),
        None => Err(SocketError::Reply {
            path: path.to_path_buf(),
            detail: "connection closed without a reply".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_lines() {
        let mut r = BufReader::with_capacity(4, &b"abc\nlonger-than-eight\nok\n"[..]);
        assert_eq!(read_line_bounded(&mut r, 8).unwrap(), Some(Ok(b"abc".to_vec())));
        assert!(matches!(read_line_bounded(&mut r, 8).unwrap(), Some(Err(n)) if n >= 16));
        assert_eq!(read_line_bounded(&mut r, 8).unwrap(), Some(Ok(b"ok".to_vec())));
        assert_eq!(read_line_bounded(&mut r, 8).unwrap(), None);
    }
}
