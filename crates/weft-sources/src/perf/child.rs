//! Starting a command held before `exec`, so per-task events can be attached to it first
//! (`weft record --exec`): the child blocks reading a pipe; [`StoppedChild::release`] lets it
//! `exec`. Everything the child does between `fork` and `exec` is async-signal-safe (it
//! only calls `read`, `close`, `execv`, `write` and `_exit`); argv and the program path are
//! prepared before `fork`.

use std::ffi::CString;
use std::io;
use std::path::{Path, PathBuf};

use super::error::PerfError;

/// A forked child waiting to `exec`.
#[derive(Debug)]
pub struct StoppedChild {
    /// The child's pid.
    pub pid: u32,
    gate: Option<i32>,
    reaped: Option<i32>,
}

fn resolve(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Some(PathBuf::from(program));
    }
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(program)).find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata().map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}

impl StoppedChild {
    /// Forks `argv[0]` (looked up on `PATH`) with `argv`; the child waits for [`release`].
    ///
    /// [`release`]: StoppedChild::release
    pub fn spawn(argv: &[String]) -> Result<StoppedChild, PerfError> {
        let prog = argv.first().ok_or_else(|| PerfError::Config("--exec needs a command".into()))?;
        let path =
            resolve(prog).ok_or_else(|| PerfError::Config(format!("{prog}: command not found on PATH")))?;
        let cpath = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| PerfError::Config(format!("{prog}: contains a NUL byte")))?;
        let cargs: Vec<CString> = argv
            .iter()
            .map(|a| {
                CString::new(a.as_bytes())
                    .map_err(|_| PerfError::Config(format!("argument {a:?} contains a NUL byte")))
            })
            .collect::<Result<_, _>>()?;
        let mut ptrs: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        let mut fds = [0i32; 2];
        // SAFETY: pipe2 writes two fds.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
            return Err(PerfError::Sys {
                op: "pipe2",
                what: prog.clone(),
                source: io::Error::last_os_error(),
            });
        }
        let msg = b"weft record: exec failed\n";
        // SAFETY: after fork the child only calls async-signal-safe functions on data
        // prepared before the fork, then execs or exits.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(PerfError::Sys {
                op: "fork",
                what: prog.clone(),
                source: io::Error::last_os_error(),
            });
        }
        if pid == 0 {
            // SAFETY: child side, see above.
            unsafe {
                libc::close(fds[1]);
                let mut b = 0u8;
                let n = libc::read(fds[0], &mut b as *mut u8 as *mut libc::c_void, 1);
                if n == 1 {
                    libc::execv(cpath.as_ptr(), ptrs.as_ptr());
                    libc::write(2, msg.as_ptr() as *const libc::c_void, msg.len());
                    libc::_exit(127);
                }
                // The parent went away without releasing us.
                libc::_exit(126);
            }
        }
        // SAFETY: parent closes its copy of the read end.
        unsafe { libc::close(fds[0]) };
        Ok(StoppedChild { pid: pid as u32, gate: Some(fds[1]), reaped: None })
    }

    /// Lets the child `exec`.
    pub fn release(&mut self) -> Result<(), PerfError> {
        if let Some(fd) = self.gate.take() {
            let b = [1u8];
            // SAFETY: writing one byte to our pipe end, then closing it.
            let n = unsafe { libc::write(fd, b.as_ptr() as *const libc::c_void, 1) };
            let e = io::Error::last_os_error();
            // SAFETY: closing our own fd.
            unsafe { libc::close(fd) };
            if n != 1 {
                return Err(PerfError::Sys {
                    op: "release child",
                    what: format!("pid {}", self.pid),
                    source: e,
                });
            }
        }
        Ok(())
    }

    /// The exit status once the child ended (non-blocking); `Some(code)` (128 + signal for a
    /// signal).
    pub fn try_wait(&mut self) -> Option<i32> {
        if self.reaped.is_some() {
            return self.reaped;
        }
        let mut status = 0;
        // SAFETY: waits only for our own child, without blocking.
        let r = unsafe { libc::waitpid(self.pid as i32, &mut status, libc::WNOHANG) };
        if r == self.pid as i32 {
            let code = if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else if libc::WIFSIGNALED(status) {
                128 + libc::WTERMSIG(status)
            } else {
                return None;
            };
            self.reaped = Some(code);
        } else if r < 0 {
            self.reaped = Some(-1);
        }
        self.reaped
    }
}

impl Drop for StoppedChild {
    fn drop(&mut self) {
        // An unreleased child exits by itself when the gate closes.
        if let Some(fd) = self.gate.take() {
            // SAFETY: closing our own fd.
            unsafe { libc::close(fd) };
        }
    }
}
