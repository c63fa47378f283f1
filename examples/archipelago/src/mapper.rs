//! The mapper: resolves (volume, object index) to the name of the object that holds it —
//! allocating objects on first write, answering holes with zeros — and forwards the I/O to the
//! blocker.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::gateway::{ANNOTATIONS, ENDPOINTS};
use crate::net::Pool;
use crate::obs::Remote;
use crate::problems::{KEY_DELAY_PER_KIB, Problems, SLOW_DELAY};
use crate::proto::{Msg, Op};
use crate::{ev, on, span, tp};

tp!(static MP_START = "mapper.start", Info, group = "mapper", fields = [object_size: u64], flags = [default_on]);
tp!(pub static MP_REQUEST = "mapper.request", Info, group = "mapper", flags = [span, always_on]);
tp!(pub static MP_FORWARD = "mapper.forward", Info, group = "mapper", flags = [span, default_on]);
tp!(pub static MP_LOOKUP = "mapper.lookup", Debug, group = "mapper.map", flags = [span]);
tp!(static MP_HIT = "mapper.map.hit", Debug, group = "mapper.map", fields = [object: str]);
tp!(static MP_MISS = "mapper.map.miss", Debug, group = "mapper.map", fields = [volume: str, index: u64]);
tp!(static MP_ALLOC = "mapper.map.alloc", Info, group = "mapper.map", fields = [object: str, objects: u64]);
tp!(static MP_HOLE = "mapper.hole", Debug, group = "mapper.map", fields = [volume: str, index: u64, len: u64]);
tp!(static MP_LOCK_WAIT = "mapper.lock.wait", Trace, group = "mapper.lock", fields = [ns: u64]);
tp!(static MP_LOCK_HELD = "mapper.lock.held", Trace, group = "mapper.lock", fields = [ns: u64]);
tp!(static MP_EPOCH = "mapper.epoch", Info, group = "mapper", fields = [epoch: u64]);
tp!(static MP_TRANSLATE = "mapper.translate", Debug, group = "mapper.map", fields = [offset: u64, object_offset: u64]);
tp!(static MP_FORWARD_ERROR = "mapper.forward.error", Error, group = "mapper", fields = [error: str]);
tp!(static MP_REJECT = "mapper.reject", Warn, group = "mapper", fields = [reason: str]);
tp!(static MP_VOLUMES = "mapper.volumes", Debug, group = "mapper.stats", fields = [volumes: u64]);
tp!(static MP_OBJECTS = "mapper.objects", Debug, group = "mapper.stats", fields = [objects: u64]);
tp!(static MP_COUNT = "mapper.count", Trace, group = "mapper.stats", fields = [requests: u64]);
tp!(static MP_READ = "mapper.op.read", Trace, group = "mapper.ops", fields = [object: str, len: u64]);
tp!(static MP_WRITE = "mapper.op.write", Trace, group = "mapper.ops", fields = [object: str, len: u64]);
tp!(static MP_REPLY = "mapper.reply", Trace, group = "mapper", fields = [op: u64, bytes: u64]);
tp!(static MP_JOURNAL = "mapper.journal.append", Debug, group = "mapper.journal", flags = [span]);
tp!(static MP_JOURNAL_ENCODE = "mapper.journal.encode", Trace, group = "mapper.journal", flags = [span]);
tp!(static MP_JOURNAL_LOCK = "mapper.journal.lock", Trace, group = "mapper.journal", flags = [span]);
tp!(static MP_JOURNAL_SEAL = "mapper.journal.seal", Trace, group = "mapper.journal", flags = [span]);
tp!(static MP_HOLE_FILL = "mapper.hole.fill", Debug, group = "mapper.hole", flags = [span]);
tp!(static MP_HOLE_CHECK = "mapper.hole.check", Trace, group = "mapper.hole", flags = [span]);
tp!(static MP_HOLE_TEMPLATE = "mapper.hole.template", Trace, group = "mapper.hole", flags = [span]);
tp!(static MP_HOLE_BUILD = "mapper.hole.template.build", Trace, group = "mapper.hole", flags = [span]);
tp!(static MP_HOLE_COPY = "mapper.hole.copy", Trace, group = "mapper.hole", flags = [span]);
tp!(static MP_SPANS_OBJECTS = "mapper.spans_objects", Warn, group = "mapper", fields = [offset: u64, len: u64]);

pub struct Mapper {
    next: Pool,
    object_size: u64,
    map: Mutex<HashMap<(String, u64), String>>,
    epoch: u64,
    requests: AtomicU64,
    problems: Problems,
}

impl Mapper {
    pub fn new(next: SocketAddr, object_size: u64) -> Mapper {
        ev!(MP_START, object_size = object_size);
        let epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        ev!(MP_EPOCH, epoch = epoch);
        Mapper {
            next: Pool::new(next),
            object_size: object_size.max(512),
            map: Mutex::new(HashMap::new()),
            epoch,
            requests: AtomicU64::new(0),
            problems: Problems::default(),
        }
    }

    /// Injects `problems` (the mapper's: `slow`, `key`).
    pub fn with_problems(mut self, problems: Problems) -> Mapper {
        self.problems = problems;
        self
    }

    /// Appends a write of `len` bytes to the volume's journal.
    fn journal(&self, len: u64) {
        let _s = span!(MP_JOURNAL);
        {
            let _e = span!(MP_JOURNAL_ENCODE);
        }
        {
            let _l = span!(MP_JOURNAL_LOCK);
            if self.problems.key {
                std::thread::sleep(KEY_DELAY_PER_KIB * (len / 1024) as u32);
            }
        }
        let _x = span!(MP_JOURNAL_SEAL);
    }

    /// The zeros a read of a hole (block `index` of `volume`, never written) answers with.
    fn fill_hole(&self, volume: &str, index: u64, len: usize) -> Vec<u8> {
        let _s = span!(MP_HOLE_FILL);
        {
            let _c = span!(MP_HOLE_CHECK);
            ev!(MP_HOLE, volume = volume, index = index, len = len as u64);
        }
        {
            let _t = span!(MP_HOLE_TEMPLATE);
            let _b = span!(MP_HOLE_BUILD);
            if self.problems.slow {
                std::thread::sleep(SLOW_DELAY);
            }
        }
        let _c = span!(MP_HOLE_COPY);
        vec![0; len]
    }

    /// The object holding block `index` of `volume`; `None` for a hole (read of unwritten data).
    fn resolve(&self, volume: &str, index: u64, allocate: bool) -> Option<String> {
        let _s = span!(MP_LOOKUP);
        let t0 = std::time::Instant::now();
        let mut m = self.map.lock().unwrap_or_else(|e| e.into_inner());
        ev!(MP_LOCK_WAIT, ns = t0.elapsed().as_nanos() as u64);
        let t1 = std::time::Instant::now();
        let key = (volume.to_string(), index);
        let out = match m.get(&key) {
            Some(o) => {
                ev!(MP_HIT, object = o.as_str());
                Some(o.clone())
            }
            None => {
                ev!(MP_MISS, volume = volume, index = index);
                if allocate {
                    let name = format!("{volume}_{index:08}_{:x}", self.epoch);
                    m.insert(key, name.clone());
                    ev!(MP_ALLOC, object = name.as_str(), objects = m.len() as u64);
                    if on!(MP_VOLUMES) {
                        let vols: std::collections::HashSet<&String> = m.keys().map(|(v, _)| v).collect();
                        ev!(MP_VOLUMES, volumes = vols.len() as u64);
                    }
                    Some(name)
                } else {
                    None
                }
            }
        };
        ev!(MP_OBJECTS, objects = m.len() as u64);
        ev!(MP_LOCK_HELD, ns = t1.elapsed().as_nanos() as u64);
        out
    }

    pub fn handle(&self, msg: Msg) -> Msg {
        let n = self.requests.fetch_add(1, Ordering::Relaxed) + 1;
        ev!(MP_COUNT, requests = n);
        let _baggage = crate::obs::enter_baggage(msg.baggage.as_deref());
        let remote = Remote::extract(msg.traceparent.as_deref());
        let s = span!(MP_REQUEST, Server, remote);
        s.kv_u64("len", msg.len as u64);
        if on!(ANNOTATIONS) {
            s.annotate("sr");
        }
        if on!(ENDPOINTS) {
            s.endpoint("mapper", "127.0.0.1", 0);
        }
        if !matches!(msg.op, Op::Read | Op::Write) {
            ev!(MP_REJECT, reason = "not a request");
            return Msg::error("mapper: not a request");
        }
        let index = msg.offset / self.object_size;
        let in_obj = msg.offset % self.object_size;
        if in_obj + msg.len as u64 > self.object_size {
            ev!(MP_SPANS_OBJECTS, offset = msg.offset, len = msg.len as u64);
            return Msg::error("mapper: request crosses an object boundary");
        }
        ev!(MP_TRANSLATE, offset = msg.offset, object_offset = in_obj);
        let Some(object) = self.resolve(&msg.volume, index, msg.op == Op::Write) else {
            let zeros = self.fill_hole(&msg.volume, index, msg.len as usize);
            if on!(ANNOTATIONS) {
                s.annotate("ss");
            }
            return Msg::reply(zeros, None);
        };
        if msg.op == Op::Write {
            self.journal(msg.len as u64);
        }
        s.kv_str("object", &object);
        match msg.op {
            Op::Read => ev!(MP_READ, object = object.as_str(), len = msg.len as u64),
            _ => ev!(MP_WRITE, object = object.as_str(), len = msg.len as u64),
        }
        let reply = {
            let f = span!(MP_FORWARD, Client, Remote::NONE);
            if on!(ANNOTATIONS) {
                f.annotate("cs");
            }
            let req = Msg {
                op: msg.op,
                traceparent: f.traceparent(),
                baggage: crate::obs::baggage(),
                volume: object,
                offset: in_obj,
                len: msg.len,
                data: msg.data,
            };
            let reply = self.next.call(&req);
            if on!(ANNOTATIONS) {
                f.annotate("cr");
            }
            reply
        };
        if on!(ANNOTATIONS) {
            s.annotate("ss");
        }
        match reply {
            Ok(r) => {
                ev!(MP_REPLY, op = r.op as u64, bytes = r.data.len() as u64);
                r
            }
            Err(e) => {
                ev!(MP_FORWARD_ERROR, error = e.to_string().as_str());
                Msg::error(&format!("blocker: {e}"))
            }
        }
    }
}
