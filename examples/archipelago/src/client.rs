//! A client of the gateway, and a closed-loop load generator.

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::proto::{Msg, Op, read_frame};

/// One connection to the gateway.
pub struct Client {
    r: BufReader<TcpStream>,
    w: TcpStream,
    buf: Vec<u8>,
}

/// What a request gave.
#[derive(Debug, Clone)]
pub struct Reply {
    pub ok: bool,
    pub data: Vec<u8>,
    /// The gateway's server span, as W3C traceparent (`None` when probes are off).
    pub traceparent: Option<String>,
    pub error: Option<String>,
}

impl Reply {
    /// The 32-hex-digit trace id, if the request was traced.
    pub fn trace_id(&self) -> Option<&str> {
        self.traceparent.as_deref().and_then(|t| t.split('-').nth(1))
    }
}

impl Client {
    pub fn connect(addr: SocketAddr) -> std::io::Result<Client> {
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(Client { r: BufReader::new(s.try_clone()?), w: s, buf: Vec::new() })
    }

    pub fn call(&mut self, m: &Msg) -> std::io::Result<Reply> {
        self.w.write_all(&m.encode())?;
        match read_frame(&mut self.r, &mut self.buf)? {
            None => {
                Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "gateway closed the connection"))
            }
            Some(_) => {
                let r = Msg::decode(&self.buf)
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
                let ok = r.op == Op::Reply;
                let error = (!ok).then(|| String::from_utf8_lossy(&r.data).into_owned());
                Ok(Reply { ok, data: r.data, traceparent: r.traceparent, error })
            }
        }
    }

    /// The gateway's count of `volume`'s in-flight requests.
    pub fn stat(&mut self, volume: &str) -> std::io::Result<Reply> {
        self.call(&Msg {
            op: Op::Stat,
            traceparent: None,
            baggage: None,
            volume: volume.to_string(),
            offset: 0,
            len: 0,
            data: Vec::new(),
        })
    }

    pub fn write(&mut self, volume: &str, offset: u64, data: &[u8]) -> std::io::Result<Reply> {
        self.call(&Msg {
            op: Op::Write,
            traceparent: None,
            baggage: None,
            volume: volume.into(),
            offset,
            len: data.len() as u32,
            data: data.to_vec(),
        })
    }

    pub fn read(&mut self, volume: &str, offset: u64, len: u32) -> std::io::Result<Reply> {
        self.call(&Msg {
            op: Op::Read,
            traceparent: None,
            baggage: None,
            volume: volume.into(),
            offset,
            len,
            data: Vec::new(),
        })
    }
}

/// Load settings.
#[derive(Debug, Clone)]
pub struct Load {
    pub clients: usize,
    pub duration: Duration,
    /// Bytes per request.
    pub size: u32,
    /// Fraction of reads.
    pub reads: f64,
    pub volumes: u32,
    /// Volume size (offsets are drawn below it).
    pub volume_bytes: u64,
}

impl Default for Load {
    fn default() -> Self {
        Load {
            clients: 8,
            duration: Duration::from_secs(10),
            size: 4096,
            reads: 0.3,
            volumes: 4,
            volume_bytes: 64 << 20,
        }
    }
}

/// What a load run measured.
#[derive(Debug, Clone, Default)]
pub struct LoadReport {
    pub ops: u64,
    pub errors: u64,
    pub elapsed: Duration,
    pub p50_us: f64,
    pub p99_us: f64,
}

impl LoadReport {
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// Closed-loop load: `clients` connections, each issuing its next request when the previous
/// one returned, for `duration`.
pub fn run_load(gateway: SocketAddr, cfg: &Load) -> std::io::Result<LoadReport> {
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::new();
    for _ in 0..cfg.clients.max(1) {
        clients.push(Client::connect(gateway)?);
    }
    let t0 = Instant::now();
    let handles: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, mut c)| {
            let (stop, ops, errors, cfg) = (stop.clone(), ops.clone(), errors.clone(), cfg.clone());
            std::thread::spawn(move || {
                let mut lat = Vec::new();
                let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ (i as u64 + 1).wrapping_mul(0xd6e8_feb8_6659_fd93);
                let data = vec![(i as u8).wrapping_add(1); cfg.size as usize];
                let blocks = (cfg.volume_bytes / cfg.size as u64).max(1);
                while !stop.load(Ordering::Relaxed) {
                    let vol = format!("vol{}", xorshift(&mut seed) % cfg.volumes.max(1) as u64);
                    let off = (xorshift(&mut seed) % blocks) * cfg.size as u64;
                    let read = (xorshift(&mut seed) % 1000) as f64 / 1000.0 < cfg.reads;
                    let t = Instant::now();
                    let r = if read { c.read(&vol, off, cfg.size) } else { c.write(&vol, off, &data) };
                    match r {
                        Ok(r) if r.ok => {
                            ops.fetch_add(1, Ordering::Relaxed);
                            lat.push(t.elapsed().as_nanos() as u64);
                        }
                        _ => {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                lat
            })
        })
        .collect();
    std::thread::sleep(cfg.duration);
    stop.store(true, Ordering::Relaxed);
    let elapsed = t0.elapsed();
    let mut lat: Vec<u64> = handles.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect();
    lat.sort_unstable();
    let q = |p: f64| lat.get(((lat.len() as f64 - 1.0) * p) as usize).copied().unwrap_or(0) as f64 / 1000.0;
    Ok(LoadReport {
        ops: ops.load(Ordering::Relaxed),
        errors: errors.load(Ordering::Relaxed),
        elapsed,
        p50_us: q(0.5),
        p99_us: q(0.99),
    })
}
