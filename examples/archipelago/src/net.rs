//! TCP plumbing shared by the tiers: a thread-per-connection server and an upstream
//! connection pool.

use std::io::{self, BufReader, BufWriter, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::proto::{Msg, read_frame, write_msg};
use crate::{ev, tp};

tp!(static NET_LISTEN = "net.listen", Info, group = "net", fields = [port: u64], flags = [default_on]);
tp!(static NET_ACCEPT = "net.accept", Debug, group = "net.conn", fields = [peer: str, open: u64]);
tp!(static NET_CLOSE = "net.close", Debug, group = "net.conn", fields = [requests: u64]);
tp!(static NET_FRAME_IN = "net.frame.in", Trace, group = "net.frame", fields = [bytes: u64]);
tp!(static NET_FRAME_OUT = "net.frame.out", Trace, group = "net.frame", fields = [bytes: u64]);
tp!(static NET_BAD_FRAME = "net.frame.bad", Warn, group = "net.frame", fields = [error: str]);
tp!(static NET_POOL_HIT = "net.pool.hit", Trace, group = "net.pool", fields = [idle: u64]);
tp!(static NET_POOL_CONNECT = "net.pool.connect", Debug, group = "net.pool", fields = [upstream: str]);
tp!(static NET_POOL_RETURN = "net.pool.return", Trace, group = "net.pool", fields = [idle: u64]);
tp!(static NET_UPSTREAM_ERROR = "net.upstream.error", Error, group = "net", fields = [upstream: str, error: str]);
tp!(static NET_UPSTREAM_RETRY = "net.upstream.retry", Warn, group = "net", fields = [attempt: u64]);

/// Set by SIGTERM/SIGINT (see [`install_signals`]).
pub static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// SIGTERM and SIGINT set [`STOP`]; servers notice within 50 ms.
pub fn install_signals() {
    // SAFETY: the handler only stores to an atomic (async-signal-safe).
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
    }
}

pub type Handler = Arc<dyn Fn(Msg) -> Msg + Send + Sync>;

/// Serve `l` (one thread per connection) until [`STOP`].
pub fn serve(l: TcpListener, handler: Handler) -> io::Result<()> {
    let port = l.local_addr()?.port();
    ev!(NET_LISTEN, port = port as u64);
    l.set_nonblocking(true)?;
    let open = Arc::new(AtomicU64::new(0));
    while !STOP.load(Ordering::Relaxed) {
        match l.accept() {
            Ok((s, peer)) => {
                s.set_nonblocking(false)?;
                let _ = s.set_nodelay(true);
                let n = open.fetch_add(1, Ordering::Relaxed) + 1;
                ev!(NET_ACCEPT, peer = peer.to_string().as_str(), open = n);
                let (h, open) = (handler.clone(), open.clone());
                std::thread::spawn(move || {
                    let served = connection(s, &h);
                    open.fetch_sub(1, Ordering::Relaxed);
                    ev!(NET_CLOSE, requests = served);
                });
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn connection(s: TcpStream, h: &Handler) -> u64 {
    let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
    let Ok(w) = s.try_clone() else { return 0 };
    let mut r = BufReader::new(s);
    let mut w = BufWriter::new(w);
    let mut buf = Vec::new();
    let mut served = 0u64;
    loop {
        let n = match read_frame(&mut r, &mut buf) {
            Ok(Some(n)) => n,
            Ok(None) => return served,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                if STOP.load(Ordering::Relaxed) {
                    return served;
                }
                continue;
            }
            Err(_) => return served,
        };
        ev!(NET_FRAME_IN, bytes = n as u64);
        let reply = match Msg::decode(&buf) {
            Ok(m) => h(m),
            Err(e) => {
                ev!(NET_BAD_FRAME, error = e.as_str());
                Msg::error(&e)
            }
        };
        match write_msg(&mut w, &reply).and_then(|n| w.flush().map(|_| n)) {
            Ok(n) => ev!(NET_FRAME_OUT, bytes = n as u64),
            Err(_) => return served,
        }
        served += 1;
    }
}

/// Persistent connections to the next tier.
pub struct Pool {
    addr: SocketAddr,
    name: String,
    idle: Mutex<Vec<(BufReader<TcpStream>, TcpStream)>>,
}

impl Pool {
    pub fn new(addr: SocketAddr) -> Pool {
        Pool { addr, name: addr.to_string(), idle: Mutex::new(Vec::new()) }
    }

    fn take(&self) -> io::Result<(BufReader<TcpStream>, TcpStream)> {
        let got = {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            let c = idle.pop();
            if c.is_some() {
                ev!(NET_POOL_HIT, idle = idle.len() as u64);
            }
            c
        };
        if let Some(c) = got {
            return Ok(c);
        }
        ev!(NET_POOL_CONNECT, upstream = self.name.as_str());
        let s = TcpStream::connect_timeout(&self.addr, Duration::from_secs(5))?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok((BufReader::new(s.try_clone()?), s))
    }

    /// Send `m`, wait for the reply (one retry on a fresh connection if a pooled one was dead).
    pub fn call(&self, m: &Msg) -> io::Result<Msg> {
        let frame = m.encode();
        let mut buf = Vec::new();
        for attempt in 0..2u64 {
            if attempt > 0 {
                ev!(NET_UPSTREAM_RETRY, attempt = attempt);
            }
            let (mut r, mut w) = self.take()?;
            let res = w.write_all(&frame).and_then(|_| read_frame(&mut r, &mut buf));
            match res {
                Ok(Some(_)) => {
                    let reply =
                        Msg::decode(&buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                    let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
                    idle.push((r, w));
                    ev!(NET_POOL_RETURN, idle = idle.len() as u64);
                    return Ok(reply);
                }
                Ok(None) | Err(_) if attempt == 0 => continue,
                Ok(None) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "upstream closed")),
                Err(e) => {
                    ev!(NET_UPSTREAM_ERROR, upstream = self.name.as_str(), error = e.to_string().as_str());
                    return Err(e);
                }
            }
        }
        Err(io::Error::other("unreachable"))
    }
}
