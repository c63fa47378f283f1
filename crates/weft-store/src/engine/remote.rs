//! The bucket's copy of segments and manifests (cargo feature `s3`; without a bucket these
//! write the data directory only): a segment's files are uploaded before any manifest names
//! them, the bucket's manifest is put before the local one, and a retired segment's objects
//! are deleted once no manifest names them.

use std::sync::Weak;

use super::Inner;
use crate::error::Result;
use crate::manifest::{self, Manifest, SegmentMeta};
use crate::segment::Segment;

impl Inner {
    /// Uploads the files of a segment just written to the data directory.
    pub(crate) fn upload_segment(&self, meta: &SegmentMeta) -> Result<()> {
        #[cfg(feature = "s3")]
        if let Some(b) = &self.bucket {
            b.upload_segment(&self.seg_dir, meta)?;
        }
        #[cfg(not(feature = "s3"))]
        let _ = meta;
        Ok(())
    }

    /// Publishes `m`: in the bucket first, then in the data directory.
    pub(crate) fn store_manifest(&self, m: &Manifest) -> Result<()> {
        #[cfg(feature = "s3")]
        if let Some(b) = &self.bucket {
            b.store_manifest(m)?;
        }
        manifest::store(&self.dir, m)
    }

    /// Queues the bucket's objects of segments no manifest names any more, and deletes those
    /// of the queued ones no query holds any more (like the local files, which go when the
    /// last reader drops the segment).
    pub(crate) fn delete_uploaded(&self, removed: Vec<(Weak<Segment>, SegmentMeta)>) {
        #[cfg(feature = "s3")]
        if let Some(b) = &self.bucket {
            let mut retired = self.retired.lock();
            retired.extend(removed);
            retired.retain(|(seg, meta)| {
                let held = seg.strong_count() > 0;
                if !held {
                    b.delete_segment(meta);
                }
                held
            });
        }
        #[cfg(not(feature = "s3"))]
        let _ = removed;
    }
}

/// Opens the bucket of `cfg` for the data directory `dir` being opened: the bucket's manifest
/// is the durable one, so it replaces the local manifest and the live segment files the
/// directory lacks are fetched. A prefix without a manifest yet gets the local store's
/// segments uploaded and its manifest. Also returns the objects of the manifest's segments
/// that the bucket lacks (see [`open_segments`]).
#[cfg(feature = "s3")]
pub(crate) fn attach(
    cfg: &crate::bucket::BucketConfig,
    dir: &std::path::Path,
    seg_dir: &std::path::Path,
) -> Result<(crate::bucket::Bucket, Vec<(u64, String)>)> {
    let b = crate::bucket::Bucket::open(cfg)?;
    let mut missing = Vec::new();
    match b.load_manifest()? {
        Some(m) => {
            missing = b.missing_objects(&m)?;
            for s in m.segments.iter().filter(|s| !missing.iter().any(|(id, _)| *id == s.id)) {
                b.download_missing(seg_dir, s)?;
            }
            manifest::store(dir, &m)?;
            tracing::info!(segments = m.segments.len(), url = %cfg.url, "manifest read from the bucket");
        }
        None => {
            let local = manifest::load(dir)?.unwrap_or_default();
            for s in &local.segments {
                b.upload_segment(seg_dir, s)?;
            }
            b.store_manifest(&local)?;
            tracing::info!(segments = local.segments.len(), url = %cfg.url, "new prefix in the bucket");
        }
    }
    Ok((b, missing))
}

/// Opens the segments `m` names, except those with an object in `missing` (segment id,
/// object): each missing object is logged as a warning naming it, and its segment is left out
/// of every read, compaction and retention while it stays named in the manifest — nothing is
/// dropped from the manifest or deleted from the data directory because of it, and every open
/// reports it again.
pub(crate) fn open_segments(
    seg_dir: &std::path::Path,
    m: &Manifest,
    missing: &[(u64, String)],
) -> Result<Vec<std::sync::Arc<Segment>>> {
    for (id, object) in missing {
        tracing::warn!(segment = id, %object, "segment object missing from the bucket: the segment is left out of reads (kept in the manifest)");
    }
    let mut segments = Vec::new();
    for s in m.segments.iter().filter(|s| !missing.iter().any(|(id, _)| *id == s.id)) {
        segments.push(std::sync::Arc::new(Segment::open(seg_dir, s.clone())?));
    }
    Ok(segments)
}
