//! The blocker: stores objects as local files (`<dir>/<object>`), reading and writing at the
//! requested offsets.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::gateway::{ANNOTATIONS, ENDPOINTS};
use crate::obs::Remote;
use crate::problems::{Problems, VARIANCE_DELAY, coin};
use crate::proto::{Msg, Op};
use crate::{ev, on, span, tp};

tp!(static BK_START = "blocker.start", Info, group = "blocker", fields = [dir: str], flags = [default_on]);
tp!(pub static BK_REQUEST = "blocker.request", Info, group = "blocker", flags = [span, always_on]);
tp!(pub static BK_WRITE = "blocker.io.write", Debug, group = "blocker.io", fields = [offset: u64, len: u64], flags = [span]);
tp!(pub static BK_READ = "blocker.io.read", Debug, group = "blocker.io", fields = [offset: u64, len: u64], flags = [span]);
tp!(pub static BK_SUBMIT = "blocker.io.submit", Debug, group = "blocker.io", fields = [object: str, offset: u64, len: u64]);
tp!(pub static BK_COMPLETE = "blocker.io.complete", Debug, group = "blocker.io", fields = [bytes: u64, ns: u64]);
tp!(static BK_SHORT = "blocker.io.short_read", Debug, group = "blocker.io", fields = [want: u64, got: u64]);
tp!(static BK_IO_ERROR = "blocker.io.error", Error, group = "blocker.io", fields = [object: str, error: str]);
tp!(static BK_FSYNC = "blocker.io.fsync", Info, group = "blocker.io", fields = [object: str, ns: u64]);
tp!(static BK_FD_OPEN = "blocker.fd.open", Debug, group = "blocker.fd", fields = [object: str, open: u64]);
tp!(static BK_FD_HIT = "blocker.fd.hit", Trace, group = "blocker.fd", fields = [object: str]);
tp!(static BK_FD_EVICT = "blocker.fd.evict", Debug, group = "blocker.fd", fields = [open: u64]);
tp!(static BK_NEW_OBJECT = "blocker.object.new", Info, group = "blocker", fields = [object: str]);
tp!(static BK_MISSING = "blocker.object.missing", Debug, group = "blocker", fields = [object: str]);
tp!(static BK_BAD_NAME = "blocker.object.bad_name", Warn, group = "blocker", fields = [object: str]);
tp!(static BK_REJECT = "blocker.reject", Warn, group = "blocker", fields = [reason: str]);
tp!(static BK_BYTES_W = "blocker.bytes.written", Trace, group = "blocker.stats", fields = [total: u64]);
tp!(static BK_BYTES_R = "blocker.bytes.read", Trace, group = "blocker.stats", fields = [total: u64]);
tp!(static BK_COUNT = "blocker.count", Trace, group = "blocker.stats", fields = [requests: u64]);
tp!(static BK_ZERO = "blocker.zero_write", Debug, group = "blocker", fields = [len: u64]);
tp!(static BK_EXTEND = "blocker.extend", Debug, group = "blocker", fields = [object: str, size: u64]);
tp!(static BK_PREPARE = "blocker.extent.prepare", Debug, group = "blocker.extent", flags = [span]);
tp!(static BK_LAYOUT = "blocker.extent.layout", Trace, group = "blocker.extent", flags = [span]);
tp!(static BK_CHECKSUM = "blocker.extent.checksum", Trace, group = "blocker.extent", flags = [span]);
tp!(static BK_ZONE = "blocker.extent.zone", Trace, group = "blocker.extent", flags = [span]);

/// Open files kept.
const MAX_OPEN: usize = 256;

pub struct Blocker {
    dir: PathBuf,
    files: Mutex<HashMap<String, Arc<File>>>,
    written: AtomicU64,
    read: AtomicU64,
    requests: AtomicU64,
    /// fsync every N writes (0 = never).
    fsync_every: u64,
    problems: Problems,
}

impl Blocker {
    pub fn new(dir: PathBuf, fsync_every: u64) -> std::io::Result<Blocker> {
        std::fs::create_dir_all(&dir)?;
        ev!(BK_START, dir = dir.to_string_lossy().as_ref());
        Ok(Blocker {
            dir,
            files: Mutex::new(HashMap::new()),
            written: AtomicU64::new(0),
            read: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            fsync_every,
            problems: Problems::default(),
        })
    }

    /// Injects `problems` (the blocker's: `variance`).
    pub fn with_problems(mut self, problems: Problems) -> Blocker {
        self.problems = problems;
        self
    }

    /// Prepares the extent a write lands in: its layout, checksum and zone.
    fn prepare(&self, data: &[u8]) {
        let _s = span!(BK_PREPARE);
        {
            let _l = span!(BK_LAYOUT);
        }
        {
            let _c = span!(BK_CHECKSUM);
            let sum = data.iter().fold(0u8, |a, &b| a.wrapping_add(b));
            if self.problems.variance && coin(self.requests.load(Ordering::Relaxed) ^ u64::from(sum)) {
                std::thread::sleep(VARIANCE_DELAY);
            }
        }
        let _z = span!(BK_ZONE);
    }

    fn file(&self, object: &str, create: bool) -> std::io::Result<Option<Arc<File>>> {
        let mut m = self.files.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = m.get(object) {
            ev!(BK_FD_HIT, object = object);
            return Ok(Some(f.clone()));
        }
        let path = self.dir.join(object);
        if !create && !path.exists() {
            ev!(BK_MISSING, object = object);
            return Ok(None);
        }
        if create && !path.exists() {
            ev!(BK_NEW_OBJECT, object = object);
        }
        let f =
            Arc::new(OpenOptions::new().read(true).write(true).create(create).truncate(false).open(&path)?);
        if m.len() >= MAX_OPEN {
            m.clear();
            ev!(BK_FD_EVICT, open = MAX_OPEN as u64);
        }
        m.insert(object.to_string(), f.clone());
        ev!(BK_FD_OPEN, object = object, open = m.len() as u64);
        Ok(Some(f))
    }

    pub fn handle(&self, msg: Msg) -> Msg {
        let n = self.requests.fetch_add(1, Ordering::Relaxed) + 1;
        ev!(BK_COUNT, requests = n);
        let _baggage = crate::obs::enter_baggage(msg.baggage.as_deref());
        let remote = Remote::extract(msg.traceparent.as_deref());
        let s = span!(BK_REQUEST, Server, remote);
        if on!(ANNOTATIONS) {
            s.annotate("sr");
        }
        if on!(ENDPOINTS) {
            s.endpoint("blocker", "127.0.0.1", 0);
        }
        let object = msg.volume.as_str();
        if object.is_empty() || object.contains('/') || object.starts_with('.') {
            ev!(BK_BAD_NAME, object = object);
            return Msg::error("blocker: bad object name");
        }
        let out = match msg.op {
            Op::Write => self.write(object, msg.offset, &msg.data),
            Op::Read => self.read(object, msg.offset, msg.len as usize),
            _ => {
                ev!(BK_REJECT, reason = "not a request");
                Err(std::io::Error::other("not a request"))
            }
        };
        if on!(ANNOTATIONS) {
            s.annotate("ss");
        }
        match out {
            Ok(data) => Msg::reply(data, None),
            Err(e) => {
                ev!(BK_IO_ERROR, object = object, error = e.to_string().as_str());
                Msg::error(&format!("blocker: {e}"))
            }
        }
    }

    fn write(&self, object: &str, offset: u64, data: &[u8]) -> std::io::Result<Vec<u8>> {
        let io = span!(BK_WRITE);
        io.kv_u64("offset", offset);
        io.kv_u64("len", data.len() as u64);
        self.prepare(data);
        let Some(f) = self.file(object, true)? else { return Err(std::io::Error::other("no file")) };
        if data.iter().all(|&b| b == 0) {
            ev!(BK_ZERO, len = data.len() as u64);
        }
        ev!(BK_SUBMIT, object = object, offset = offset, len = data.len() as u64);
        let t0 = std::time::Instant::now();
        f.write_all_at(data, offset)?;
        ev!(BK_COMPLETE, bytes = data.len() as u64, ns = t0.elapsed().as_nanos() as u64);
        if on!(BK_EXTEND) {
            let size = f.metadata().map(|m| m.len()).unwrap_or(0);
            if size == offset + data.len() as u64 {
                ev!(BK_EXTEND, object = object, size = size);
            }
        }
        let total = self.written.fetch_add(data.len() as u64, Ordering::Relaxed) + data.len() as u64;
        ev!(BK_BYTES_W, total = total);
        if self.fsync_every > 0 && self.requests.load(Ordering::Relaxed).is_multiple_of(self.fsync_every) {
            let t = std::time::Instant::now();
            f.sync_data()?;
            ev!(BK_FSYNC, object = object, ns = t.elapsed().as_nanos() as u64);
        }
        Ok(Vec::new())
    }

    fn read(&self, object: &str, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
        let io = span!(BK_READ);
        io.kv_u64("offset", offset);
        io.kv_u64("len", len as u64);
        let mut buf = vec![0u8; len];
        let Some(f) = self.file(object, false)? else { return Ok(buf) };
        ev!(BK_SUBMIT, object = object, offset = offset, len = len as u64);
        let t0 = std::time::Instant::now();
        let mut got = 0;
        while got < len {
            let n = f.read_at(&mut buf[got..], offset + got as u64)?;
            if n == 0 {
                break;
            }
            got += n;
        }
        ev!(BK_COMPLETE, bytes = got as u64, ns = t0.elapsed().as_nanos() as u64);
        if got < len {
            ev!(BK_SHORT, want = len as u64, got = got as u64);
        }
        let total = self.read.fetch_add(got as u64, Ordering::Relaxed) + got as u64;
        ev!(BK_BYTES_R, total = total);
        Ok(buf)
    }
}
