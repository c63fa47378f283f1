//! Running the tiers: one role per process ([`run_role`]), and a launcher that starts all four
//! as child processes and wires them together ([`Cluster`]).

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::problems::Problems;
use crate::{blocker, ev, gateway, mapper, net, obs, tp, vcomposer};

tp!(static ROLE_START = "archipelago.role.start", Info, group = "archipelago", fields = [role: str, pid: u64], flags = [default_on]);
tp!(static ROLE_STOP = "archipelago.role.stop", Info, group = "archipelago", fields = [role: str]);
tp!(static ROLE_ERROR = "archipelago.role.error", Error, group = "archipelago", fields = [role: str, error: str]);

/// A tier and its settings.
#[derive(Debug, Clone)]
pub enum Role {
    Gateway { listen: SocketAddr, next: SocketAddr },
    Vcomposer { listen: SocketAddr, next: SocketAddr, object_size: u64 },
    Mapper { listen: SocketAddr, next: SocketAddr, object_size: u64 },
    Blocker { listen: SocketAddr, dir: PathBuf, fsync_every: u64 },
}

impl Role {
    pub fn name(&self) -> &'static str {
        match self {
            Role::Gateway { .. } => "gateway",
            Role::Vcomposer { .. } => "vcomposer",
            Role::Mapper { .. } => "mapper",
            Role::Blocker { .. } => "blocker",
        }
    }

    /// Parse `<role> --listen A [--next B] [--dir D] [--object-size N] [--fsync-every N]`.
    pub fn parse(args: &[String]) -> Result<Role, String> {
        let role = args.first().ok_or("missing role")?.as_str();
        let mut opt = std::collections::HashMap::new();
        let mut it = args[1..].iter();
        while let Some(k) = it.next() {
            let k = k.strip_prefix("--").ok_or_else(|| format!("unexpected argument {k:?}"))?;
            let v = it.next().ok_or_else(|| format!("--{k} needs a value"))?;
            opt.insert(k.to_string(), v.clone());
        }
        let addr = |k: &str| -> Result<SocketAddr, String> {
            opt.get(k).ok_or_else(|| format!("--{k} is required"))?.parse().map_err(|e| format!("--{k}: {e}"))
        };
        let num = |k: &str, d: u64| -> Result<u64, String> {
            opt.get(k).map(|v| v.parse().map_err(|e| format!("--{k}: {e}"))).unwrap_or(Ok(d))
        };
        let listen = opt
            .get("listen")
            .map(|v| v.parse().map_err(|e| format!("--listen: {e}")))
            .unwrap_or(Ok(SocketAddr::from(([127, 0, 0, 1], 0))))?;
        Ok(match role {
            "gateway" => Role::Gateway { listen, next: addr("next")? },
            "vcomposer" => Role::Vcomposer {
                listen,
                next: addr("next")?,
                object_size: num("object-size", vcomposer::OBJECT_SIZE)?,
            },
            "mapper" => Role::Mapper {
                listen,
                next: addr("next")?,
                object_size: num("object-size", vcomposer::OBJECT_SIZE)?,
            },
            "blocker" => Role::Blocker {
                listen,
                dir: PathBuf::from(opt.get("dir").ok_or("--dir is required")?),
                fsync_every: num("fsync-every", 0)?,
            },
            other => return Err(format!("unknown role {other:?} (gateway, vcomposer, mapper, blocker)")),
        })
    }

    fn listen(&self) -> SocketAddr {
        match self {
            Role::Gateway { listen, .. }
            | Role::Vcomposer { listen, .. }
            | Role::Mapper { listen, .. }
            | Role::Blocker { listen, .. } => *listen,
        }
    }
}

/// Run one tier until SIGTERM/SIGINT: prints `LISTENING <addr>` once it accepts connections.
/// Injects the problems `ARCHIPELAGO_PROBLEMS` names ([`crate::problems`]).
pub fn run_role(role: Role) -> std::io::Result<()> {
    let problems = Problems::from_env().map_err(std::io::Error::other)?;
    net::install_signals();
    obs::init(role.name());
    ev!(ROLE_START, role = role.name(), pid = std::process::id() as u64);
    let l = TcpListener::bind(role.listen())?;
    let handler: net::Handler = match role.clone() {
        Role::Gateway { next, .. } => {
            let g = Arc::new(gateway::Gateway::new(next));
            Arc::new(move |m| g.handle(m))
        }
        Role::Vcomposer { next, object_size, .. } => {
            let c = Arc::new(vcomposer::Composer::new(next, object_size));
            Arc::new(move |m| c.handle(m))
        }
        Role::Mapper { next, object_size, .. } => {
            let c = Arc::new(mapper::Mapper::new(next, object_size).with_problems(problems));
            Arc::new(move |m| c.handle(m))
        }
        Role::Blocker { dir, fsync_every, .. } => {
            let b = Arc::new(blocker::Blocker::new(dir, fsync_every)?.with_problems(problems));
            Arc::new(move |m| b.handle(m))
        }
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "LISTENING {}", l.local_addr()?)?;
    out.flush()?;
    drop(out);
    let r = net::serve(l, handler);
    match &r {
        Ok(()) => ev!(ROLE_STOP, role = role.name()),
        Err(e) => ev!(ROLE_ERROR, role = role.name(), error = e.to_string().as_str()),
    }
    obs::shutdown();
    r
}

/// The four tiers as child processes.
pub struct Cluster {
    children: Vec<(&'static str, Child)>,
    pub gateway: SocketAddr,
}

fn await_listening(name: &str, child: &mut Child) -> std::io::Result<SocketAddr> {
    let out = child.stdout.take().ok_or_else(|| std::io::Error::other("no stdout"))?;
    let (tx, rx) = std::sync::mpsc::channel();
    let name = name.to_string();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            // (a test harness may print on the same line first)
            if !sent && let Some(i) = line.find("LISTENING ") {
                let _ = tx.send(line[i + "LISTENING ".len()..].trim().to_string());
                sent = true;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(a) = rx.recv_timeout(Duration::from_millis(100)) {
            return a.parse().map_err(|e| std::io::Error::other(format!("{name}: bad address {a:?}: {e}")));
        }
        if let Some(st) = child.try_wait()? {
            return Err(std::io::Error::other(format!("{name} exited before listening: {st}")));
        }
        if Instant::now() > deadline {
            return Err(std::io::Error::other(format!("{name} did not start listening within 60 s")));
        }
    }
}

impl Cluster {
    /// Start blocker, mapper, volume composer and gateway (in that order, each told where the
    /// next one listens). `command(role_args)` builds the command of one tier — e.g. this
    /// binary with the role's arguments.
    pub fn start(
        dir: &std::path::Path,
        mut command: impl FnMut(&[String]) -> Command,
    ) -> std::io::Result<Cluster> {
        let mut c = Cluster { children: Vec::new(), gateway: SocketAddr::from(([127, 0, 0, 1], 0)) };
        let mut next: Option<SocketAddr> = None;
        for role in ["blocker", "mapper", "vcomposer", "gateway"] {
            let mut args = vec![role.to_string(), "--listen".into(), "127.0.0.1:0".into()];
            match next {
                Some(n) => args.extend(["--next".to_string(), n.to_string()]),
                None => {
                    args.extend(["--dir".to_string(), dir.join("objects").to_string_lossy().into_owned()])
                }
            }
            let mut cmd = command(&args);
            cmd.stdout(Stdio::piped()).stdin(Stdio::null());
            let mut child = cmd.spawn()?;
            let addr = match await_listening(role, &mut child) {
                Ok(a) => a,
                Err(e) => {
                    let _ = child.kill();
                    return Err(e);
                }
            };
            c.children.push((role, child));
            next = Some(addr);
        }
        c.gateway = next.unwrap_or(c.gateway);
        Ok(c)
    }

    /// `(role, pid)` of every tier.
    pub fn pids(&self) -> Vec<(&'static str, u32)> {
        self.children.iter().map(|(r, c)| (*r, c.id())).collect()
    }

    /// CPU seconds (user + system) the tiers have used so far (`/proc/<pid>/stat`).
    pub fn cpu_seconds(&self) -> f64 {
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        self.children
            .iter()
            .filter_map(|(_, c)| {
                let s = std::fs::read_to_string(format!("/proc/{}/stat", c.id())).ok()?;
                let rest = &s[s.rfind(')')? + 1..];
                let f: Vec<&str> = rest.split_whitespace().collect();
                // fields 14 and 15 (utime, stime) are indices 11 and 12 after the state field
                Some((f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?) / hz)
            })
            .sum()
    }

    /// SIGTERM every tier and wait (SIGKILL after 10 s).
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        for (_, c) in &self.children {
            // SAFETY: plain kill(2) on our own child.
            unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for (_, c) in &mut self.children {
            loop {
                match c.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() > deadline => {
                        let _ = c.kill();
                        let _ = c.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        }
        self.children.clear();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop_inner();
    }
}
