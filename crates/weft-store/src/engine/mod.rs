//! The store's engine behind [`crate::Store`]: the shared state (active and frozen buffers,
//! live segments, manifest), the background threads and the jobs they run.
//!
//! * [`open`] — locking the directory, dropping leftovers, replaying the WAL;
//! * [`write`] — the acknowledged write path: WAL append, buffer, freezing, a new WAL file
//!   after a failed write (retried by the background thread every `wal_retry_interval`);
//! * [`flush`] — frozen buffers become segments;
//! * [`retention`] — segments deleted by age and total size;
//! * [`compact`] — runs of small segments merged into larger ones;
//! * [`remote`] — the bucket's copy of segments and manifests (feature `s3`);
//! * [`union`] — a read-only store over several collectors' prefixes of a bucket (feature
//!   `s3`): their manifests re-read by a refresh thread instead of flushes and maintenance.
//!
//! Flushes, retention and compaction each publish a new manifest; they are serialized by
//! [`Inner::maint`].

mod compact;
mod flush;
mod open;
mod remote;
mod retention;
#[cfg(feature = "s3")]
mod union;
mod write;

use std::collections::VecDeque;
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use datafusion::execution::runtime_env::RuntimeEnv;
use parking_lot::{Condvar, Mutex, RwLock};

pub(crate) use write::with_payload_buffer;

use crate::config::StoreConfig;
use crate::error::Result;
use crate::manifest::{Manifest, SegmentMeta};
use crate::memtable::MemTable;
use crate::metrics::Metrics;
use crate::query::FilesAt;
use crate::segment::Segment;
use crate::wal::{FsyncPolicy, WalSync, WalWriter};

/// A buffer that takes no more rows, waiting for its flush.
pub(crate) struct Frozen {
    pub(crate) mem: Arc<MemTable>,
    /// Every WAL file up to this id is contained in `mem` (or earlier segments).
    pub(crate) wal_upto: u64,
}

/// Buffers and live segments.
pub(crate) struct State {
    pub(crate) active: MemTable,
    /// WAL file the active buffer appends to.
    pub(crate) active_wal: u64,
    pub(crate) frozen: VecDeque<Frozen>,
    pub(crate) segments: Vec<Arc<Segment>>,
}

impl State {
    pub(crate) fn buffered_bytes(&self) -> usize {
        self.active.bytes + self.frozen.iter().map(|f| f.mem.bytes).sum::<usize>()
    }
}

/// What every [`crate::Store`] handle and background thread shares.
pub(crate) struct Inner {
    pub(crate) cfg: StoreConfig,
    pub(crate) dir: PathBuf,
    pub(crate) wal_dir: PathBuf,
    pub(crate) seg_dir: PathBuf,
    pub(crate) wal: Mutex<Option<WalWriter>>,
    pub(crate) sync: WalSync,
    pub(crate) state: RwLock<State>,
    pub(crate) manifest: Mutex<Manifest>,
    /// Serializes flushes, compactions and retention (manifest writers).
    pub(crate) maint: Mutex<()>,
    pub(crate) metrics: Metrics,
    pub(crate) poisoned: Mutex<Option<String>>,
    pub(crate) shutdown: AtomicBool,
    pub(crate) wake: (Mutex<bool>, Condvar),
    pub(crate) runtime: Arc<RuntimeEnv>,
    /// Where SQL reads segment files (the bucket when there is one).
    pub(crate) files_at: FilesAt,
    /// Where segments and manifests are kept besides the data directory.
    #[cfg(feature = "s3")]
    pub(crate) bucket: Option<crate::bucket::Bucket>,
    /// Retired segments whose objects are deleted from the bucket once no query holds them.
    #[cfg(feature = "s3")]
    pub(crate) retired: Mutex<Vec<(std::sync::Weak<Segment>, SegmentMeta)>>,
    /// A read-only store over a bucket: the collectors whose manifests it reads.
    #[cfg(feature = "s3")]
    pub(crate) union: Option<union::Union>,
    pub(crate) _lock: Option<File>,
}

/// The background threads (flush and maintenance; the WAL syncer under
/// [`FsyncPolicy::Interval`]); they stop when this is dropped.
pub(crate) struct Background {
    inner: Arc<Inner>,
    handles: Mutex<Vec<JoinHandle<()>>>,
}

impl Background {
    /// No threads yet for `inner`.
    pub(crate) fn new(inner: Arc<Inner>) -> Background {
        Background { inner, handles: Mutex::new(Vec::new()) }
    }

    /// Starts the threads.
    pub(crate) fn start(&self) {
        let mut threads = self.handles.lock();
        let inner = self.inner.clone();
        #[cfg(feature = "s3")]
        let (name, job): (&str, fn(&Inner)) = if self.inner.is_union() {
            ("weft-store-refresh", Inner::refresher)
        } else {
            ("weft-store-flush", Inner::background)
        };
        #[cfg(not(feature = "s3"))]
        let (name, job): (&str, fn(&Inner)) = ("weft-store-flush", Inner::background);
        threads.push(
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || job(&inner))
                .unwrap_or_else(|e| panic!("cannot start the store's background thread: {e}")),
        );
        if let FsyncPolicy::Interval(period) = self.inner.cfg.fsync
            && !self.inner.cfg.read_only
        {
            let inner = self.inner.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("weft-store-fsync".into())
                    .spawn(move || inner.syncer(period))
                    .unwrap_or_else(|e| panic!("cannot start the store's fsync thread: {e}")),
            );
        }
    }

    pub(crate) fn stop(&self) {
        self.inner.shutdown.store(true, Ordering::Release);
        self.inner.wake_background();
        for t in self.handles.lock().drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Inner {
    /// Whether this is a read-only store over several collectors' prefixes of a bucket.
    pub(crate) fn is_union(&self) -> bool {
        #[cfg(feature = "s3")]
        return self.union.is_some();
        #[cfg(not(feature = "s3"))]
        false
    }

    /// Re-reads the collectors' manifests (a read-only store over a bucket; nothing otherwise).
    pub(crate) fn refresh_now(&self) -> Result<()> {
        #[cfg(feature = "s3")]
        return self.refresh();
        #[cfg(not(feature = "s3"))]
        Ok(())
    }

    pub(crate) fn wake_background(&self) {
        let (m, cv) = &self.wake;
        *m.lock() = true;
        cv.notify_all();
    }

    /// Publishes a manifest without `remove` and with `add`, and swaps the live segments.
    fn replace_segments(&self, remove: &[u64], add: Option<(SegmentMeta, Arc<Segment>)>) -> Result<()> {
        {
            let mut m = self.manifest.lock();
            let mut next_m = m.clone();
            next_m.segments.retain(|s| !remove.contains(&s.id));
            if let Some((meta, _)) = &add {
                next_m.segments.push(meta.clone());
                next_m.segments.sort_by_key(|s| s.id);
                next_m.next_segment_id = next_m.next_segment_id.max(meta.id + 1);
            }
            self.store_manifest(&next_m)?;
            *m = next_m;
        }
        let mut st = self.state.write();
        let mut kept = Vec::with_capacity(st.segments.len());
        let mut removed = Vec::new();
        for s in st.segments.drain(..) {
            if remove.contains(&s.meta.id) {
                s.retire();
                removed.push((Arc::downgrade(&s), s.meta.clone()));
            } else {
                kept.push(s);
            }
        }
        if let Some((_, seg)) = add {
            kept.push(seg);
            kept.sort_by_key(|s| s.meta.id);
        }
        st.segments = kept;
        drop(st);
        self.delete_uploaded(removed);
        Ok(())
    }

    fn background(&self) {
        let mut last_maint = Instant::now();
        let mut backoff = Duration::from_millis(0);
        let mut wal_retry = Instant::now();
        loop {
            {
                let mut wait = Duration::from_millis(500).max(backoff);
                if self.poisoned.lock().is_some() {
                    wait = wait.min(wal_retry.saturating_duration_since(Instant::now()));
                }
                let (m, cv) = &self.wake;
                let mut woken = m.lock();
                if !*woken {
                    cv.wait_for(&mut woken, wait);
                }
                *woken = false;
            }
            if self.shutdown.load(Ordering::Acquire) {
                return;
            }
            if self.poisoned.lock().is_some() && Instant::now() >= wal_retry {
                wal_retry = Instant::now() + self.cfg.wal_retry_interval;
                if let Err(e) = self.reopen_wal() {
                    tracing::debug!(error = %e, "the WAL cannot go on in a new file yet; will retry");
                }
            }
            let old = {
                let st = self.state.read();
                st.active.first_append.is_some_and(|t| t.elapsed() >= self.cfg.flush_interval)
            };
            if old && let Err(e) = self.freeze() {
                // The WAL's rotation failed: refuse appends until the WAL goes on in a new file.
                self.poison(e);
            }
            match self.flush_frozen() {
                Ok(()) => backoff = Duration::ZERO,
                Err(e) => {
                    self.metrics.flush_errors.fetch_add(1, Ordering::Relaxed);
                    backoff = (backoff * 2).clamp(Duration::from_millis(500), Duration::from_secs(30));
                    tracing::error!(error = %e, retry_in_ms = backoff.as_millis() as u64, "flush failed; will retry");
                }
            }
            if last_maint.elapsed() >= self.cfg.maintenance_interval {
                last_maint = Instant::now();
                if let Err(e) = self.retention(weft_model::time::now_unix_nanos()) {
                    tracing::error!(error = %e, "retention failed");
                }
                match self.compact_once() {
                    Ok(true) => self.wake_background(),
                    Ok(false) => {}
                    Err(e) => tracing::error!(error = %e, "compaction failed"),
                }
                self.delete_uploaded(Vec::new());
            }
        }
    }

    fn syncer(&self, period: Duration) {
        while !self.shutdown.load(Ordering::Acquire) {
            std::thread::sleep(period);
            let f = match self.wal.lock().as_ref() {
                Some(w) => w.current().clone(),
                None => return,
            };
            if let Err(e) = self.sync.sync_current(&f) {
                self.poison(e);
            }
        }
    }
}
