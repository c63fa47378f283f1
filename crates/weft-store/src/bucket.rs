//! Segments, resource files and manifests in an S3-compatible bucket (cargo feature `s3`).
//!
//! The bucket holds the durable copy of everything a flush or compaction writes: each
//! segment's files under `<prefix>/segments/` and the manifest as `<prefix>/MANIFEST.json`.
//! SQL and search read the segment files there (the bucket is registered in DataFusion's
//! object-store registry). The data directory keeps the WAL, the lock and a copy of the live
//! segment files (trace by id reads it; fetched from the bucket when missing). Order of a flush: the segment's
//! files are uploaded, then the bucket's manifest naming them is put, then the local manifest,
//! and only then the WAL files it covers are deleted — a failed upload leaves the WAL and the
//! buffer as they are, and the flush is retried with backoff. On open, the objects of the
//! manifest's segments are listed once: a segment whose object is gone (deleted behind weft's
//! back) is named and left out of reads, never dropped from the manifest.
//!
//! Endpoint, region and credentials come from the standard AWS environment variables
//! (`AWS_ENDPOINT`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_ALLOW_HTTP`, …) and, over them, from an optional file of `NAME=value` lines with the
//! same names. Their values are never logged.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::runtime_env::RuntimeEnv;
use futures::StreamExt;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::buffered::BufWriter;
use object_store::path::Path as ObjPath;
use object_store::{BackoffConfig, ClientConfigKey, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig};
use tokio::io::AsyncWriteExt;

use crate::error::{Result, StoreError, io_err};
use crate::manifest::{MANIFEST, Manifest, SegmentMeta};
use crate::query::FilesAt;

/// Where a store keeps its segments and manifest in a bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct BucketConfig {
    /// `s3://bucket/prefix` (the prefix may be empty).
    pub url: String,
    /// `NAME=value` lines (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_ENDPOINT`, …)
    /// read over the environment's.
    pub credentials_file: Option<PathBuf>,
}

impl BucketConfig {
    /// The prefix `name` one level below this URL (`<url>/<name>`; `""`: this URL), with the
    /// same credentials.
    pub(crate) fn child(&self, name: &str) -> BucketConfig {
        let url = if name.is_empty() {
            self.url.clone()
        } else {
            format!("{}/{name}", self.url.trim_end_matches('/'))
        };
        BucketConfig { url, credentials_file: self.credentials_file.clone() }
    }
}

/// An open bucket: the client and the runtime its requests run on.
pub(crate) struct Bucket {
    store: Arc<dyn ObjectStore>,
    bucket: String,
    prefix: String,
    rt: Option<tokio::runtime::Runtime>,
}

fn bucket_err(op: &'static str, object: String) -> impl FnOnce(object_store::Error) -> StoreError {
    move |e| StoreError::Bucket { op, object, reason: chain(&e) }
}

/// An error with its causes (the HTTP client's own reason is often only there).
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}

/// Applies a credentials file's `NAME=value` lines to `b` (blank lines and `#` comments
/// skipped); an unknown name is an error naming the file and line, a value is never shown.
fn apply_file(mut b: AmazonS3Builder, path: &Path) -> Result<AmazonS3Builder> {
    let text = std::fs::read_to_string(path).map_err(io_err("read", path))?;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |reason: String| StoreError::Config(format!("{}:{}: {reason}", path.display(), n + 1));
        let (name, value) = line.split_once('=').ok_or_else(|| bad("expected NAME=value".into()))?;
        let key = AmazonS3ConfigKey::from_str(&name.trim().to_ascii_lowercase())
            .map_err(|_| bad(format!("unknown setting {:?}", name.trim())))?;
        b = b.with_config(key, value.trim());
    }
    Ok(b)
}

/// The bucket and the prefix of `s3://bucket/prefix`.
fn split_url(url: &str) -> Result<(&str, &str)> {
    let rest = url.strip_prefix("s3://").ok_or_else(|| {
        StoreError::Config(format!("segments URL {url:?}: only s3://bucket/prefix is supported"))
    })?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(StoreError::Config(format!("segments URL {url:?} names no bucket")));
    }
    Ok((bucket, prefix))
}

/// A client of `bucket` configured as a store's (the AWS environment, then the credentials
/// file over it; the same timeouts and retries): for other readers of a store's bucket, such
/// as a cluster's nodes. No request is made.
pub fn s3_store(bucket: &str, credentials_file: Option<&Path>) -> Result<Arc<dyn ObjectStore>> {
    // Timeouts go in as settings: client options set as a whole would drop the
    // environment's and the file's (AWS_ALLOW_HTTP among them).
    let mut b = AmazonS3Builder::from_env()
        .with_config(AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout), "5s")
        .with_config(AmazonS3ConfigKey::Client(ClientConfigKey::Timeout), "60s")
        .with_bucket_name(bucket);
    if let Some(f) = credentials_file {
        b = apply_file(b, f)?;
    }
    // Short per-request retries: the flush loop retries a failed upload with its own
    // backoff while the bucket is unreachable, and ingest goes on into the WAL meanwhile.
    let retry = RetryConfig {
        backoff: BackoffConfig::default(),
        max_retries: 3,
        retry_timeout: Duration::from_secs(10),
    };
    let store =
        b.with_retry(retry).build().map_err(|e| StoreError::Config(format!("bucket {bucket}: {e}")))?;
    Ok(Arc::new(store))
}

/// The manifest in the bucket of `cfg` (`None` when its prefix has none), and where its
/// segment files are (`s3://bucket/prefix/segments/`): for readers other than a store.
pub fn read_manifest(cfg: &BucketConfig) -> Result<(Option<Manifest>, String)> {
    let b = Bucket::open(cfg)?;
    let segments = b.shown(&b.key("segments/"));
    Ok((b.load_manifest()?, segments))
}

/// The prefixes whose manifests a read-only store over `cfg` serves as one: the URL itself,
/// then every name one level below it (`<url>/<name>`), each whether or not it holds a
/// manifest ([`read_manifest`] tells). One listing; a missing bucket or refused credentials
/// fail, naming the URL.
pub fn collector_prefixes(cfg: &BucketConfig) -> Result<Vec<BucketConfig>> {
    let names = Bucket::open(cfg)?.children()?;
    Ok(std::iter::once("").chain(names.iter().map(String::as_str)).map(|n| cfg.child(n)).collect())
}

impl Bucket {
    /// Connects to the bucket of `cfg` (no request yet: [`Bucket::load_manifest`] is the first).
    pub(crate) fn open(cfg: &BucketConfig) -> Result<Bucket> {
        let (bucket, prefix) = split_url(&cfg.url)?;
        let store = s3_store(bucket, cfg.credentials_file.as_deref())?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("weft-store-s3")
            .enable_all()
            .build()
            .map_err(io_err("start the runtime for", Path::new(&cfg.url)))?;
        Ok(Bucket {
            store,
            bucket: bucket.to_owned(),
            prefix: prefix.trim_matches('/').to_owned(),
            rt: Some(rt),
        })
    }

    /// Registers the bucket in DataFusion's object-store registry of `runtime` (as
    /// `s3://bucket/`): where SQL reads the segment files.
    pub(crate) fn register(&self, runtime: &RuntimeEnv) -> Result<FilesAt> {
        let url = ObjectStoreUrl::parse(format!("s3://{}/", self.bucket))?;
        runtime.register_object_store(url.as_ref(), self.store.clone());
        Ok(FilesAt { url, base: self.key("segments") })
    }

    /// The key of `name` (a manifest or `segments/…` file) under the prefix.
    fn key(&self, name: &str) -> String {
        if self.prefix.is_empty() { name.to_owned() } else { format!("{}/{name}", self.prefix) }
    }

    fn segment_key(&self, file: &str) -> String {
        self.key(&format!("segments/{file}"))
    }

    fn shown(&self, key: &str) -> String {
        format!("s3://{}/{key}", self.bucket)
    }

    /// Runs `fut` on the bucket's runtime and waits (callable from any thread, inside another
    /// runtime too).
    fn run<T: Send + 'static>(
        &self,
        what: String,
        fut: impl Future<Output = Result<T>> + Send + 'static,
    ) -> Result<T> {
        let rt =
            self.rt.as_ref().ok_or_else(|| StoreError::Config("the bucket's runtime is stopped".into()))?;
        futures::executor::block_on(rt.spawn(fut)).map_err(|e| StoreError::Bucket {
            op: "request",
            object: what,
            reason: e.to_string(),
        })?
    }

    /// The bucket's manifest (`None` when the prefix has none yet). A missing bucket or
    /// refused credentials fail here, naming the object.
    pub(crate) fn load_manifest(&self) -> Result<Option<Manifest>> {
        let key = self.key(MANIFEST);
        let shown = self.shown(&key);
        let store = self.store.clone();
        let s = shown.clone();
        let bytes = self.run(shown.clone(), async move {
            match store.get(&ObjPath::from(key)).await {
                Ok(r) => r.bytes().await.map(Some).map_err(bucket_err("read", s)),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(bucket_err("read", s)(e)),
            }
        })?;
        bytes.map(|b| crate::manifest::parse(&b, PathBuf::from(shown))).transpose()
    }

    /// The objects of `m`'s segments that the bucket lacks (deleted behind weft's back), as
    /// (segment id, `s3://bucket/key`); one listing of the segments' prefix.
    pub(crate) fn missing_objects(&self, m: &Manifest) -> Result<Vec<(u64, String)>> {
        let base = self.segment_key("");
        let shown = self.shown(&base);
        let store = self.store.clone();
        let s = shown.clone();
        let present: std::collections::HashSet<String> = self.run(shown, async move {
            let mut keys = std::collections::HashSet::new();
            let mut list = store.list(Some(&ObjPath::from(base)));
            while let Some(o) = list.next().await {
                let o = o.map_err(bucket_err("list", s.clone()))?;
                keys.insert(o.location.to_string());
            }
            Ok(keys)
        })?;
        let mut missing = Vec::new();
        for seg in &m.segments {
            for f in &seg.files {
                let key = self.segment_key(&f.file);
                if !present.contains(&key) {
                    missing.push((seg.id, self.shown(&key)));
                }
            }
        }
        Ok(missing)
    }

    /// Puts the manifest (one PUT: readers see the old or the new one).
    pub(crate) fn store_manifest(&self, m: &Manifest) -> Result<()> {
        let key = self.key(MANIFEST);
        let shown = self.shown(&key);
        let text = serde_json::to_vec_pretty(m)
            .map_err(|e| StoreError::Manifest { path: PathBuf::from(&shown), reason: e.to_string() })?;
        let store = self.store.clone();
        self.run(shown.clone(), async move {
            store
                .put(&ObjPath::from(key), PutPayload::from(text))
                .await
                .map_err(bucket_err("write", shown))?;
            Ok(())
        })
    }

    /// Uploads the files of segment `meta` from `dir` (multipart for large ones, streamed).
    pub(crate) fn upload_segment(&self, dir: &Path, meta: &SegmentMeta) -> Result<()> {
        for f in &meta.files {
            let local = dir.join(&f.file);
            let key = self.segment_key(&f.file);
            let shown = self.shown(&key);
            let store = self.store.clone();
            self.run(shown.clone(), async move {
                let mut src = tokio::fs::File::open(&local).await.map_err(io_err("open", &local))?;
                let mut w = BufWriter::new(store, ObjPath::from(key));
                let copied = tokio::io::copy(&mut src, &mut w).await;
                let done = match copied {
                    Ok(_) => w.shutdown().await,
                    Err(e) => {
                        let _ = w.abort().await;
                        Err(e)
                    }
                };
                done.map_err(|e| StoreError::Bucket { op: "upload", object: shown, reason: chain(&e) })
            })?;
        }
        tracing::debug!(segment = meta.id, bucket = %self.bucket, "uploaded segment");
        Ok(())
    }

    /// Fetches the files of `meta` that `dir` lacks (written to a temporary name, then renamed).
    pub(crate) fn download_missing(&self, dir: &Path, meta: &SegmentMeta) -> Result<()> {
        for f in &meta.files {
            let local = dir.join(&f.file);
            if local.exists() {
                continue;
            }
            let key = self.segment_key(&f.file);
            let shown = self.shown(&key);
            let store = self.store.clone();
            let tmp = dir.join(format!("{}.download", f.file));
            self.run(shown.clone(), async move {
                let r = store.get(&ObjPath::from(key)).await.map_err(bucket_err("read", shown.clone()))?;
                let mut out = tokio::fs::File::create(&tmp).await.map_err(io_err("create", &tmp))?;
                let mut chunks = r.into_stream();
                while let Some(c) = chunks.next().await {
                    let c = c.map_err(bucket_err("read", shown.clone()))?;
                    out.write_all(&c).await.map_err(io_err("write", &tmp))?;
                }
                out.sync_all().await.map_err(io_err("fsync", &tmp))?;
                tokio::fs::rename(&tmp, &local).await.map_err(io_err("rename", &tmp))
            })?;
            tracing::info!(file = %f.file, bucket = %self.bucket, "fetched segment file from the bucket");
        }
        Ok(())
    }

    /// Deletes the objects of a segment no manifest names any more; failures are logged (an
    /// object left behind is garbage, never data).
    pub(crate) fn delete_segment(&self, meta: &SegmentMeta) {
        for f in &meta.files {
            let key = self.segment_key(&f.file);
            let shown = self.shown(&key);
            let store = self.store.clone();
            let r = self.run(shown.clone(), async move {
                store.delete(&ObjPath::from(key)).await.map_err(bucket_err("delete", shown))
            });
            if let Err(e) = r {
                tracing::warn!(error = %e, "could not delete a retired segment's object");
            }
        }
    }
}

impl Bucket {
    /// The names one level below the prefix (`<prefix>/<name>/…`): where other collectors may
    /// keep their manifests. A missing bucket or refused credentials fail, naming the prefix.
    pub(crate) fn children(&self) -> Result<Vec<String>> {
        let shown = self.shown(&self.key(""));
        let prefix = (!self.prefix.is_empty()).then(|| ObjPath::from(self.prefix.as_str()));
        let store = self.store.clone();
        let s = shown.clone();
        let listed = self.run(shown, async move {
            store.list_with_delimiter(prefix.as_ref()).await.map_err(bucket_err("list", s))
        })?;
        Ok(listed.common_prefixes.iter().filter_map(|p| p.filename().map(str::to_owned)).collect())
    }
}

impl Drop for Bucket {
    fn drop(&mut self) {
        // Dropping a runtime inside another one's context panics; this never blocks.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}
