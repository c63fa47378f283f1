//! The volume composer: splits a volume request into per-object requests and sends each to
//! the mapper; reassembles reads.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::gateway::{ANNOTATIONS, ENDPOINTS};
use crate::net::Pool;
use crate::obs::Remote;
use crate::proto::{Msg, Op};
use crate::{ev, on, span, tp};

tp!(static VC_START = "vcomposer.start", Info, group = "vcomposer", fields = [object_size: u64], flags = [default_on]);
tp!(pub static VC_REQUEST = "vcomposer.request", Info, group = "vcomposer", flags = [span, always_on]);
tp!(pub static VC_OBJECT = "vcomposer.object", Info, group = "vcomposer", flags = [span, default_on]);
tp!(pub static VC_SPLIT = "vcomposer.split", Debug, group = "vcomposer.plan", flags = [span]);
tp!(static VC_PIECE = "vcomposer.piece", Debug, group = "vcomposer.plan", fields = [object: u64, offset: u64, len: u64]);
tp!(static VC_PIECES = "vcomposer.pieces", Debug, group = "vcomposer.plan", fields = [pieces: u64]);
tp!(static VC_CROSS = "vcomposer.crosses_objects", Info, group = "vcomposer.plan", fields = [first: u64, last: u64]);
tp!(static VC_ASSEMBLE = "vcomposer.assemble", Debug, group = "vcomposer.read", fields = [bytes: u64]);
tp!(static VC_SHORT = "vcomposer.short_read", Warn, group = "vcomposer.read", fields = [want: u64, got: u64]);
tp!(static VC_PIECE_ERROR = "vcomposer.piece.error", Error, group = "vcomposer", fields = [object: u64, error: str]);
tp!(static VC_QUEUE = "vcomposer.queue", Trace, group = "vcomposer.queue", fields = [depth: u64]);
tp!(static VC_DEQUEUE = "vcomposer.dequeue", Trace, group = "vcomposer.queue", fields = [depth: u64]);
tp!(static VC_BYTES_IN = "vcomposer.bytes.in", Trace, group = "vcomposer.stats", fields = [bytes: u64]);
tp!(static VC_BYTES_OUT = "vcomposer.bytes.out", Trace, group = "vcomposer.stats", fields = [bytes: u64]);
tp!(static VC_ZERO = "vcomposer.zero_fill", Debug, group = "vcomposer.read", fields = [bytes: u64]);
tp!(static VC_WRITE_DONE = "vcomposer.write.done", Debug, group = "vcomposer", fields = [pieces: u64, bytes: u64]);
tp!(static VC_READ_DONE = "vcomposer.read.done", Debug, group = "vcomposer", fields = [pieces: u64, bytes: u64]);
tp!(static VC_REJECT = "vcomposer.reject", Warn, group = "vcomposer", fields = [reason: str]);
tp!(static VC_OBJECT_REPLY = "vcomposer.object.reply", Trace, group = "vcomposer.plan", fields = [object: u64, op: u64]);
tp!(static VC_COUNT = "vcomposer.count", Trace, group = "vcomposer.stats", fields = [requests: u64]);
tp!(static VC_EMPTY = "vcomposer.empty", Debug, group = "vcomposer", fields = [volume: str]);
tp!(static VC_LARGE = "vcomposer.large", Info, group = "vcomposer", fields = [len: u64]);

/// Default object size (Archipelago maps volumes onto 4 MiB objects; smaller here so requests
/// cross objects often).
pub const OBJECT_SIZE: u64 = 64 * 1024;

pub struct Composer {
    next: Pool,
    object_size: u64,
    depth: AtomicU64,
    requests: AtomicU64,
}

impl Composer {
    pub fn new(next: SocketAddr, object_size: u64) -> Composer {
        ev!(VC_START, object_size = object_size);
        Composer {
            next: Pool::new(next),
            object_size: object_size.max(512),
            depth: AtomicU64::new(0),
            requests: AtomicU64::new(0),
        }
    }

    /// The (object index, offset in volume, length) pieces of `[offset, offset + len)`.
    pub fn plan(&self, offset: u64, len: u64) -> Vec<(u64, u64, u64)> {
        let _s = span!(VC_SPLIT);
        let mut out = Vec::new();
        let mut at = offset;
        let end = offset.saturating_add(len);
        while at < end {
            let obj = at / self.object_size;
            let stop = ((obj + 1) * self.object_size).min(end);
            ev!(VC_PIECE, object = obj, offset = at, len = stop - at);
            out.push((obj, at, stop - at));
            at = stop;
        }
        ev!(VC_PIECES, pieces = out.len() as u64);
        if out.len() > 1 {
            ev!(VC_CROSS, first = out[0].0, last = out[out.len() - 1].0);
        }
        out
    }

    pub fn handle(&self, msg: Msg) -> Msg {
        let count = self.requests.fetch_add(1, Ordering::Relaxed) + 1;
        ev!(VC_COUNT, requests = count);
        let d = self.depth.fetch_add(1, Ordering::Relaxed) + 1;
        ev!(VC_QUEUE, depth = d);
        let r = self.handle_inner(msg);
        let d = self.depth.fetch_sub(1, Ordering::Relaxed) - 1;
        ev!(VC_DEQUEUE, depth = d);
        r
    }

    fn handle_inner(&self, msg: Msg) -> Msg {
        let _baggage = crate::obs::enter_baggage(msg.baggage.as_deref());
        let remote = Remote::extract(msg.traceparent.as_deref());
        let s = span!(VC_REQUEST, Server, remote);
        if on!(ANNOTATIONS) {
            s.annotate("sr");
        }
        if on!(ENDPOINTS) {
            s.endpoint("vcomposer", "127.0.0.1", 0);
        }
        ev!(VC_BYTES_IN, bytes = msg.data.len() as u64);
        if msg.volume.is_empty() {
            ev!(VC_EMPTY, volume = msg.volume.as_str());
        }
        if msg.len as u64 > 16 * self.object_size {
            ev!(VC_LARGE, len = msg.len as u64);
        }
        if !matches!(msg.op, Op::Read | Op::Write) {
            ev!(VC_REJECT, reason = "not a request");
            return Msg::error("vcomposer: not a request");
        }
        let pieces = self.plan(msg.offset, msg.len as u64);
        let mut data = Vec::new();
        for &(obj, at, len) in &pieces {
            let o = span!(VC_OBJECT, Client, Remote::NONE);
            o.kv_u64("object", obj);
            if on!(ANNOTATIONS) {
                o.annotate("cs");
            }
            let body = match msg.op {
                Op::Write => {
                    let from = (at - msg.offset) as usize;
                    msg.data[from..from + len as usize].to_vec()
                }
                _ => Vec::new(),
            };
            ev!(VC_BYTES_OUT, bytes = body.len() as u64);
            let req = Msg {
                op: msg.op,
                traceparent: o.traceparent(),
                baggage: crate::obs::baggage(),
                volume: msg.volume.clone(),
                offset: at,
                len: len as u32,
                data: body,
            };
            let reply = self.next.call(&req);
            if on!(ANNOTATIONS) {
                o.annotate("cr");
            }
            match reply {
                Ok(r) if r.op == Op::Reply => {
                    ev!(VC_OBJECT_REPLY, object = obj, op = r.op as u64);
                    if msg.op == Op::Read {
                        if (r.data.len() as u64) < len {
                            ev!(VC_SHORT, want = len, got = r.data.len() as u64);
                        }
                        let mut d = r.data;
                        d.resize(len as usize, 0);
                        data.extend_from_slice(&d);
                    }
                }
                Ok(r) => {
                    let e = String::from_utf8_lossy(&r.data).into_owned();
                    ev!(VC_PIECE_ERROR, object = obj, error = e.as_str());
                    return Msg::error(&e);
                }
                Err(e) => {
                    ev!(VC_PIECE_ERROR, object = obj, error = e.to_string().as_str());
                    return Msg::error(&format!("mapper: {e}"));
                }
            }
        }
        if on!(ANNOTATIONS) {
            s.annotate("ss");
        }
        match msg.op {
            Op::Read => {
                ev!(VC_ASSEMBLE, bytes = data.len() as u64);
                if data.iter().all(|&b| b == 0) {
                    ev!(VC_ZERO, bytes = data.len() as u64);
                }
                ev!(VC_READ_DONE, pieces = pieces.len() as u64, bytes = data.len() as u64);
            }
            _ => ev!(VC_WRITE_DONE, pieces = pieces.len() as u64, bytes = msg.data.len() as u64),
        }
        Msg::reply(data, None)
    }
}
