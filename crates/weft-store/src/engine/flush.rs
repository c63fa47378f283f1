//! Flushing: each frozen buffer becomes a segment, the manifest names it, and the WAL files
//! it covers are deleted.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::Inner;
use crate::error::Result;
use crate::segment::{self, Segment};
use crate::{schema, wal};

impl Inner {
    /// Flushes every frozen buffer, oldest first.
    pub(crate) fn flush_frozen(&self) -> Result<()> {
        let _m = self.maint.lock();
        loop {
            let next = {
                let st = self.state.read();
                st.frozen.front().map(|f| (f.mem.clone(), f.wal_upto))
            };
            let Some((mem, wal_upto)) = next else { return Ok(()) };
            let started = Instant::now();
            let id = self.manifest.lock().next_segment_id;
            let meta = segment::write_segment(
                &self.seg_dir,
                id,
                0,
                &mem.tables,
                &mem.resources.batch()?,
                (mem.operations_sorted(), mem.operations_complete),
                &self.cfg.write,
            )?;
            wal::fsync_dir(&self.seg_dir)?;
            self.upload_segment(&meta)?;
            let seg = Arc::new(Segment::open(&self.seg_dir, meta.clone())?);
            {
                let mut m = self.manifest.lock();
                let mut next_m = m.clone();
                next_m.segments.push(meta.clone());
                next_m.next_segment_id = id + 1;
                next_m.wal_checkpoint = next_m.wal_checkpoint.max(wal_upto);
                self.store_manifest(&next_m)?;
                *m = next_m;
            }
            {
                let mut st = self.state.write();
                st.frozen.pop_front();
                st.segments.push(seg);
            }
            self.sync.forget_broken(wal_upto);
            for (wid, path) in wal::list_wal_files(&self.wal_dir)? {
                if wid <= wal_upto
                    && let Err(e) = std::fs::remove_file(&path)
                {
                    tracing::warn!(file = %path.display(), error = %e, "could not delete flushed WAL file");
                }
            }
            self.metrics.flushes.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                segment = id,
                spans = meta.rows(schema::SPANS),
                bytes = meta.bytes(),
                ms = started.elapsed().as_millis() as u64,
                "flushed segment"
            );
        }
    }
}
