//! A read-only store over several collectors of one bucket (feature `s3`): the union of the
//! manifest at the store's URL and of every manifest one level down (`<url>/<name>/`), each
//! collector's segments read from its own `<prefix>/segments/`. Segment ids are per
//! collector, so a segment is known by (collector, id) ([`Origin`]).
//!
//! The data directory is a cache: the live segment files of every collector are fetched into
//! `bucket-cache/` when a manifest first names them (trace by id reads them there, as a
//! collector reads its local copy) and deleted once no manifest names them and no query holds
//! them. A refresh re-reads the manifests: new segments join, those no manifest names any
//! more (compacted or retired by their collector) leave; a query in flight keeps its own. A
//! manifest, prefix or segment that cannot be read is logged and counted
//! ([`crate::Metrics::bucket_read_errors`]); the rest is served, and a collector whose manifest
//! failed keeps the segments read before.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use datafusion::execution::runtime_env::RuntimeEnv;
use parking_lot::Mutex;

use super::Inner;
use crate::bucket::{Bucket, BucketConfig};
use crate::error::{Result, io_err};
use crate::manifest::SegmentMeta;
use crate::metrics::Metrics;
use crate::query::{FilesAt, Origin};
use crate::segment::Segment;

/// The cache of segment files under the data directory.
const CACHE: &str = "bucket-cache";

/// One prefix that may hold a collector's manifest.
struct Collector {
    bucket: Bucket,
    origin: Arc<Origin>,
    /// Where its segment files are cached.
    cache: PathBuf,
}

impl Collector {
    fn open(cfg: &BucketConfig, name: &str, cache_root: &Path, runtime: &RuntimeEnv) -> Result<Collector> {
        let bucket = Bucket::open(&cfg.child(name))?;
        let files_at = bucket.register(runtime)?;
        // Prefix names never hold a `/`; the `p-` keeps `.` and `..` plain names.
        let cache = cache_root.join(if name.is_empty() { "root".to_owned() } else { format!("p-{name}") });
        Ok(Collector { bucket, origin: Arc::new(Origin { name: name.to_owned(), files_at }), cache })
    }

    /// The segment `meta` of this collector, its files fetched into the cache.
    fn segment(&self, meta: SegmentMeta) -> Result<Segment> {
        std::fs::create_dir_all(&self.cache).map_err(io_err("create directory", &self.cache))?;
        self.bucket.download_missing(&self.cache, &meta)?;
        Ok(Segment::open(&self.cache, meta)?.with_origin(self.origin.clone()))
    }
}

fn origin_of(s: &Segment) -> &str {
    s.origin.as_ref().map_or("", |o| o.name.as_str())
}

/// The collectors of a read-only store over a bucket.
pub(crate) struct Union {
    cfg: BucketConfig,
    cache: PathBuf,
    /// By prefix name (`""`: the URL's own manifest); kept once seen.
    collectors: Mutex<BTreeMap<String, Collector>>,
}

impl Union {
    /// Connects to the bucket of `cfg` for the data directory `dir`; returns where the URL's
    /// own segment files are (SQL's default). No request yet.
    pub(crate) fn open(cfg: &BucketConfig, dir: &Path, runtime: &RuntimeEnv) -> Result<(Union, FilesAt)> {
        let cache = dir.join(CACHE);
        let root = Collector::open(cfg, "", &cache, runtime)?;
        let files_at = root.origin.files_at.clone();
        let collectors = Mutex::new(BTreeMap::from([(String::new(), root)]));
        Ok((Union { cfg: cfg.clone(), cache, collectors }, files_at))
    }

    /// The segments every manifest names now, reusing those of `current` still named. With
    /// `strict` (opening), a listing of the URL that fails is an error (a missing bucket,
    /// refused credentials); otherwise it is counted and `current` stays.
    pub(crate) fn load(
        &self,
        current: &[Arc<Segment>],
        runtime: &RuntimeEnv,
        metrics: &Metrics,
        strict: bool,
    ) -> Result<Vec<Arc<Segment>>> {
        let failed = |what: &str, name: &str, e: &dyn std::fmt::Display| {
            metrics.bucket_read_errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(url = %self.cfg.url, prefix = name, error = %e, "{what}; serving the rest");
        };
        let mut collectors = self.collectors.lock();
        let names = match collectors.get("").map(|root| root.bucket.children()) {
            Some(Ok(names)) => names,
            Some(Err(e)) if strict => return Err(e),
            Some(Err(e)) => {
                failed("cannot list the collectors' prefixes", "", &e);
                return Ok(current.to_vec());
            }
            None => Vec::new(),
        };
        for name in names {
            if !name.is_empty() && !collectors.contains_key(&name) {
                match Collector::open(&self.cfg, &name, &self.cache, runtime) {
                    Ok(c) => {
                        collectors.insert(name, c);
                    }
                    Err(e) => failed("cannot open a collector's prefix", &name, &e),
                }
            }
        }
        let have: HashMap<(&str, u64), &Arc<Segment>> =
            current.iter().map(|s| ((origin_of(s), s.meta.id), s)).collect();
        let mut next = Vec::with_capacity(current.len());
        for (name, c) in collectors.iter() {
            let manifest = match c.bucket.load_manifest() {
                Ok(m) => m.unwrap_or_default(),
                Err(e) => {
                    failed("cannot read a collector's manifest", name, &e);
                    next.extend(have.iter().filter(|((n, _), _)| n == name).map(|(_, s)| (*s).clone()));
                    continue;
                }
            };
            for meta in manifest.segments {
                match have.get(&(name.as_str(), meta.id)) {
                    Some(s) => next.push((*s).clone()),
                    None => match c.segment(meta) {
                        Ok(s) => next.push(Arc::new(s)),
                        Err(e) => failed("cannot read a collector's segment", name, &e),
                    },
                }
            }
        }
        next.sort_by(|a, b| (origin_of(a), a.meta.id).cmp(&(origin_of(b), b.meta.id)));
        Ok(next)
    }

    /// Deletes cached files no segment of `live` names (left by an earlier run).
    pub(crate) fn sweep(&self, live: &[Arc<Segment>]) {
        let keep: HashSet<PathBuf> = live.iter().flat_map(|s| s.paths().map(|(_, p, _)| p)).collect();
        let Ok(dirs) = std::fs::read_dir(&self.cache) else { return };
        for file in dirs.flatten().filter_map(|d| std::fs::read_dir(d.path()).ok()).flatten().flatten() {
            let path = file.path();
            if !keep.contains(&path) {
                tracing::debug!(path = %path.display(), "deleting a cached segment file no manifest names");
                let _ = std::fs::remove_file(&path);
            }
        }
    }
}

impl Inner {
    /// Re-reads the collectors' manifests of a read-only store over a bucket (nothing to do
    /// for another store): segments no manifest names any more are retired (their cached
    /// files go when the last query holding them ends).
    pub(crate) fn refresh(&self) -> Result<()> {
        let Some(u) = &self.union else { return Ok(()) };
        let _one = self.maint.lock();
        let current = self.state.read().segments.clone();
        let next = u.load(&current, &self.runtime, &self.metrics, false)?;
        let kept: BTreeSet<*const Segment> = next.iter().map(Arc::as_ptr).collect();
        let (mut added, mut dropped) = (next.len(), 0usize);
        for s in &current {
            if kept.contains(&Arc::as_ptr(s)) {
                added -= 1;
            } else {
                s.retire();
                dropped += 1;
            }
        }
        self.state.write().segments = next;
        self.metrics.bucket_refreshes.fetch_add(1, Ordering::Relaxed);
        if added + dropped > 0 {
            tracing::info!(added, dropped, url = %u.cfg.url, "collectors' segments refreshed");
        }
        Ok(())
    }

    /// The refresh thread of a read-only store over a bucket: every `refresh_interval`.
    pub(crate) fn refresher(&self) {
        loop {
            {
                let (m, cv) = &self.wake;
                let mut woken = m.lock();
                if !*woken {
                    cv.wait_for(&mut woken, self.cfg.refresh_interval);
                }
                *woken = false;
            }
            if self.shutdown.load(Ordering::Acquire) {
                return;
            }
            if let Err(e) = self.refresh() {
                tracing::warn!(error = %e, "refreshing the collectors' manifests failed");
            }
        }
    }
}
