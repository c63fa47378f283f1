//! The gateway: the entry point clients talk to. Validates requests, applies a per-volume
//! in-flight quota, and forwards them to the volume composer.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::net::Pool;
use crate::obs::{self, Remote};
use crate::proto::{Msg, Op};
use crate::{ev, on, span, tp};

tp!(static GW_START = "gateway.start", Info, group = "gateway", fields = [next: str], flags = [default_on]);
tp!(pub static GW_REQUEST = "gateway.request", Info, group = "gateway", flags = [span, always_on]);
tp!(pub static GW_FORWARD = "gateway.forward", Info, group = "gateway", flags = [span, default_on]);
tp!(static GW_PARSE = "gateway.parse", Debug, group = "gateway.proto", fields = [op: u64, bytes: u64]);
tp!(static GW_VALIDATE = "gateway.validate", Debug, group = "gateway.proto", fields = [volume: str, offset: u64, len: u64]);
tp!(static GW_REJECT = "gateway.reject", Warn, group = "gateway.proto", fields = [reason: str]);
tp!(static GW_ALIGN = "gateway.unaligned", Debug, group = "gateway.proto", fields = [offset: u64, len: u64]);
tp!(static GW_QUOTA_CHECK = "gateway.quota.check", Debug, group = "gateway.quota", fields = [volume: str, inflight: u64]);
tp!(static GW_QUOTA_EXCEEDED = "gateway.quota.exceeded", Warn, group = "gateway.quota", fields = [volume: str, inflight: u64]);
tp!(static GW_QUOTA_RELEASE = "gateway.quota.release", Trace, group = "gateway.quota", fields = [volume: str, inflight: u64]);
tp!(static GW_ROUTE = "gateway.route", Debug, group = "gateway.route", fields = [upstream: str]);
tp!(static GW_UPSTREAM_ERROR = "gateway.upstream.error", Error, group = "gateway", fields = [error: str]);
tp!(static GW_REPLY = "gateway.reply", Debug, group = "gateway.proto", fields = [op: u64, bytes: u64]);
tp!(static GW_LATENCY = "gateway.latency", Debug, group = "gateway.stats", fields = [ns: u64, op: u64]);
tp!(static GW_SLOW = "gateway.slow", Warn, group = "gateway.stats", fields = [ns: u64, volume: str]);
tp!(static GW_READ = "gateway.op.read", Trace, group = "gateway.ops", fields = [volume: str, len: u64]);
tp!(static GW_WRITE = "gateway.op.write", Trace, group = "gateway.ops", fields = [volume: str, len: u64]);
tp!(static GW_CONTEXT_IN = "gateway.context.in", Debug, group = "gateway.context", fields = [traceparent: str]);
tp!(static GW_CONTEXT_NEW = "gateway.context.new", Trace, group = "gateway.context");
tp!(static GW_VOLUME_NEW = "gateway.volume.new", Info, group = "gateway", fields = [volume: str, volumes: u64]);
tp!(static GW_COUNT = "gateway.count", Trace, group = "gateway.stats", fields = [requests: u64]);
tp!(pub static GW_STAT = "gateway.stat", Info, group = "gateway", flags = [span, always_on]);
tp!(static GW_PAYLOAD = "gateway.payload", Trace, group = "gateway.proto", fields = [head: bytes]);

/// Largest request (bytes).
pub const MAX_IO: u32 = 4 << 20;
/// In-flight requests per volume.
pub const QUOTA: u64 = 256;
/// What a `stat` costs (it stands for a fixed-cost metadata read).
pub const STAT_COST: std::time::Duration = std::time::Duration::from_millis(100);

pub struct Gateway {
    next: Pool,
    next_name: String,
    inflight: Mutex<HashMap<String, u64>>,
    requests: AtomicU64,
}

impl Gateway {
    pub fn new(next: SocketAddr) -> Gateway {
        ev!(GW_START, next = next.to_string().as_str());
        Gateway {
            next: Pool::new(next),
            next_name: next.to_string(),
            inflight: Mutex::new(HashMap::new()),
            requests: AtomicU64::new(0),
        }
    }

    fn admit(&self, volume: &str) -> Result<(), u64> {
        let mut m = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
        let known = m.len() as u64;
        let n = m.entry(volume.to_string()).or_insert_with(|| {
            ev!(GW_VOLUME_NEW, volume = volume, volumes = known + 1);
            0
        });
        ev!(GW_QUOTA_CHECK, volume = volume, inflight = *n);
        if *n >= QUOTA {
            ev!(GW_QUOTA_EXCEEDED, volume = volume, inflight = *n);
            return Err(*n);
        }
        *n += 1;
        Ok(())
    }

    fn release(&self, volume: &str) {
        let mut m = self.inflight.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = m.get_mut(volume) {
            *n = n.saturating_sub(1);
            ev!(GW_QUOTA_RELEASE, volume = volume, inflight = *n);
        }
    }

    /// A volume's in-flight requests (u64 LE).
    fn stat(&self, msg: &Msg) -> Msg {
        let s = span!(GW_STAT, Server, Remote::extract(msg.traceparent.as_deref()));
        s.kv_str("volume", &msg.volume);
        std::thread::sleep(STAT_COST);
        let n = self.inflight.lock().unwrap_or_else(|e| e.into_inner()).get(&msg.volume).copied();
        Msg::reply(n.unwrap_or(0).to_le_bytes().to_vec(), s.traceparent())
    }

    pub fn handle(&self, msg: Msg) -> Msg {
        if msg.op == Op::Stat {
            return self.stat(&msg);
        }
        let _baggage = obs::enter_baggage(msg.baggage.as_deref());
        let t0 = Instant::now();
        let count = self.requests.fetch_add(1, Ordering::Relaxed) + 1;
        ev!(GW_COUNT, requests = count);
        ev!(GW_PARSE, op = msg.op as u64, bytes = msg.data.len() as u64);
        match msg.traceparent.as_deref() {
            Some(tp) => ev!(GW_CONTEXT_IN, traceparent = tp),
            None => ev!(GW_CONTEXT_NEW),
        }
        let remote = Remote::extract(msg.traceparent.as_deref());
        let s = span!(GW_REQUEST, Server, remote);
        if on!(ANNOTATIONS) {
            s.annotate("sr");
        }
        if on!(ENDPOINTS) {
            s.endpoint("gateway", "127.0.0.1", 0);
        }
        s.kv_str("volume", &msg.volume);
        ev!(GW_VALIDATE, volume = msg.volume.as_str(), offset = msg.offset, len = msg.len as u64);
        let bad = match msg.op {
            _ if msg.volume.is_empty() => Some("empty volume name"),
            Op::Write if msg.data.len() != msg.len as usize => Some("data length differs from the header"),
            Op::Read | Op::Write if msg.len == 0 || msg.len > MAX_IO => Some("length outside 1..=4MiB"),
            Op::Reply | Op::Error => Some("not a request"),
            _ => None,
        };
        if let Some(reason) = bad {
            ev!(GW_REJECT, reason = reason);
            return Msg::error(reason);
        }
        if !(msg.offset.is_multiple_of(512) && msg.len.is_multiple_of(512)) {
            ev!(GW_ALIGN, offset = msg.offset, len = msg.len as u64);
        }
        match msg.op {
            Op::Read => ev!(GW_READ, volume = msg.volume.as_str(), len = msg.len as u64),
            _ => ev!(GW_WRITE, volume = msg.volume.as_str(), len = msg.len as u64),
        }
        ev!(GW_PAYLOAD, head = &msg.data[..msg.data.len().min(16)]);
        if let Err(n) = self.admit(&msg.volume) {
            return Msg::error(&format!("volume {} has {n} requests in flight", msg.volume));
        }
        ev!(GW_ROUTE, upstream = self.next_name.as_str());
        let volume = msg.volume.clone();
        let op = msg.op;
        let reply = {
            let fwd = span!(GW_FORWARD, Client, Remote::NONE);
            if on!(ANNOTATIONS) {
                fwd.annotate("cs");
            }
            let out = Msg { traceparent: fwd.traceparent(), baggage: obs::baggage(), ..msg };
            let r = self.next.call(&out);
            if on!(ANNOTATIONS) {
                fwd.annotate("cr");
            }
            r
        };
        self.release(&volume);
        let mut reply = match reply {
            Ok(r) => r,
            Err(e) => {
                ev!(GW_UPSTREAM_ERROR, error = e.to_string().as_str());
                Msg::error(&format!("upstream: {e}"))
            }
        };
        if on!(ANNOTATIONS) {
            s.annotate("ss");
        }
        reply.traceparent = s.traceparent();
        ev!(GW_REPLY, op = reply.op as u64, bytes = reply.data.len() as u64);
        let ns = t0.elapsed().as_nanos() as u64;
        ev!(GW_LATENCY, ns = ns, op = op as u64);
        if ns > 100_000_000 {
            ev!(GW_SLOW, ns = ns, volume = volume.as_str());
        }
        reply
    }
}

tp!(pub static ANNOTATIONS = "archipelago.annotations", Info, group = "zipkin");
tp!(pub static ENDPOINTS = "archipelago.endpoints", Info, group = "zipkin");
