//! Opening a data directory: the lock, the manifest's segments (other files are leftovers of
//! interrupted flushes and are deleted), and WAL replay into the buffers.

use std::collections::{BTreeSet, VecDeque};
use std::fs::{File, OpenOptions};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use datafusion::execution::memory_pool::FairSpillPool;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use parking_lot::{Condvar, Mutex, RwLock};

use super::{Frozen, Inner, State};
use crate::config::StoreConfig;
use crate::error::{self, Result, StoreError};
use crate::manifest;
use crate::memtable::MemTable;
use crate::metrics::Metrics;
use crate::query::FilesAt;
use crate::segment::Segment;
use crate::wal::{self, WalRecord, WalSync, WalWriter};

fn lock_dir(dir: &Path) -> Result<File> {
    let path = dir.join("LOCK");
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(error::io_err("open", &path))?;
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a valid, owned file descriptor.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r != 0 {
        return Err(StoreError::Locked(dir.to_owned()));
    }
    Ok(f)
}

impl Inner {
    /// Opens the directory of `cfg` (see [`crate::Store::open`]); the background threads are
    /// not started yet.
    pub(crate) fn open(cfg: StoreConfig) -> Result<Arc<Inner>> {
        let read_only = cfg.read_only;
        // A read-only store over a bucket keeps its cache of segment files in the directory.
        #[cfg(feature = "s3")]
        let union_reader = read_only && cfg.bucket.is_some();
        #[cfg(not(feature = "s3"))]
        let union_reader = false;
        if !read_only || union_reader {
            std::fs::create_dir_all(&cfg.dir).map_err(error::io_err("create directory", &cfg.dir))?;
        }
        let dir = std::fs::canonicalize(&cfg.dir).map_err(error::io_err("open directory", &cfg.dir))?;
        let lock = if read_only && !union_reader { None } else { Some(lock_dir(&dir)?) };
        let wal_dir = dir.join("wal");
        let seg_dir = dir.join("segments");
        if !read_only {
            for d in [&wal_dir, &seg_dir] {
                std::fs::create_dir_all(d).map_err(error::io_err("create directory", d))?;
            }
        }
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_pool(Arc::new(FairSpillPool::new(cfg.query_memory_bytes)))
            .build_arc()?;
        let metrics = Metrics::default();
        #[cfg(feature = "s3")]
        let (bucket, union) = match &cfg.bucket {
            Some(b) if read_only => {
                let (u, files_at) = super::union::Union::open(b, &dir, &runtime)?;
                (None, Some((u, files_at)))
            }
            Some(b) => (Some(super::remote::attach(b, &dir, &seg_dir)?), None),
            None => (None, None),
        };
        // A union reader's manifests are the collectors' (read below), none of its own.
        let manifest = if union_reader {
            manifest::Manifest::default()
        } else {
            manifest::open(&dir, &seg_dir, read_only)?
        };

        // Segments named by the manifest; anything else in segments/ is a leftover.
        let mut segments = Vec::new();
        for m in &manifest.segments {
            segments.push(Arc::new(Segment::open(&seg_dir, m.clone())?));
        }
        #[cfg(feature = "s3")]
        if let Some((u, _)) = &union {
            segments = u.load(&[], &runtime, &metrics, true)?;
            u.sweep(&segments);
        }
        if !read_only {
            let live: BTreeSet<&str> =
                manifest.segments.iter().flat_map(|s| s.files.iter().map(|f| f.file.as_str())).collect();
            if let Ok(rd) = std::fs::read_dir(&seg_dir) {
                for e in rd.flatten() {
                    let name = e.file_name();
                    let name = name.to_string_lossy();
                    if !live.contains(name.as_ref()) {
                        tracing::info!(file = %e.path().display(), "deleting segment file not in the manifest (interrupted flush)");
                        let _ = std::fs::remove_file(e.path());
                    }
                }
            }
        }

        // WAL replay (a union reader has no WAL: its directory is a cache).
        let wal_files =
            if wal_dir.is_dir() && !union_reader { wal::list_wal_files(&wal_dir)? } else { Vec::new() };
        let mut active = MemTable::default();
        let mut frozen = VecDeque::new();
        let mut last_id = manifest.wal_checkpoint;
        let quarantine = dir.join("quarantine");
        for (id, path) in &wal_files {
            if *id <= manifest.wal_checkpoint {
                if !read_only {
                    let _ = std::fs::remove_file(path);
                }
                continue;
            }
            let stats =
                wal::replay_file(path, (!read_only).then_some(quarantine.as_path()), |rec| match rec {
                    WalRecord::Spans(b) => active.push_spans(b),
                    WalRecord::Events(b) => active.push_events(b),
                })?;
            metrics.wal_records_replayed.fetch_add(stats.records, Ordering::Relaxed);
            metrics.wal_records_quarantined.fetch_add(stats.quarantined, Ordering::Relaxed);
            if let Some((offset, reason)) = &stats.torn {
                metrics.wal_records_torn.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    file = %path.display(), offset, reason = %reason,
                    "WAL ends in a torn or corrupt record; {}", if read_only { "ignored (read-only)" } else { "truncated there" }
                );
            }
            tracing::info!(file = %path.display(), records = stats.records, bytes = stats.bytes, "replayed WAL");
            last_id = last_id.max(*id);
            if active.bytes >= cfg.flush_bytes {
                frozen.push_back(Frozen { mem: Arc::new(std::mem::take(&mut active)), wal_upto: *id });
            }
        }
        let active_wal = last_id + 1;
        let (writer, sync) = if read_only {
            (None, WalSync::new(active_wal))
        } else {
            (Some(WalWriter::create(&wal_dir, active_wal, cfg.wal_files.clone())?), WalSync::new(active_wal))
        };
        if !active.is_empty() && !read_only {
            // Replayed data lives in older WAL files: freeze it so it is flushed promptly.
            frozen.push_back(Frozen { mem: Arc::new(std::mem::take(&mut active)), wal_upto: last_id });
        }

        #[cfg(feature = "s3")]
        let (files_at, union) = match (&bucket, union) {
            (Some(b), _) => (b.register(&runtime)?, None),
            (None, Some((u, files_at))) => (files_at, Some(u)),
            (None, None) => (FilesAt::local(&seg_dir), None),
        };
        #[cfg(not(feature = "s3"))]
        let files_at = FilesAt::local(&seg_dir);

        let inner = Arc::new(Inner {
            dir,
            wal_dir,
            seg_dir,
            wal: Mutex::new(writer),
            sync,
            state: RwLock::new(State { active, active_wal, frozen, segments }),
            manifest: Mutex::new(manifest),
            maint: Mutex::new(()),
            metrics,
            poisoned: Mutex::new(None),
            shutdown: AtomicBool::new(false),
            wake: (Mutex::new(false), Condvar::new()),
            runtime,
            files_at,
            #[cfg(feature = "s3")]
            bucket,
            #[cfg(feature = "s3")]
            retired: Mutex::new(Vec::new()),
            #[cfg(feature = "s3")]
            union,
            _lock: lock,
            cfg,
        });
        Ok(inner)
    }
}
