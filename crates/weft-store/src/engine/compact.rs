//! Compaction: the oldest run of small consecutive segments is merged into one segment of
//! the next level.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::Inner;
use crate::RecordBatch;
use crate::error::Result;
use crate::segment::{self, Segment};
use crate::{dedup, memtable, resources, schema, wal};

impl Inner {
    /// Merges the oldest run of small consecutive segments. Returns true when it did.
    pub(crate) fn compact_once(&self) -> Result<bool> {
        let _m = self.maint.lock();
        let segs: Vec<Arc<Segment>> = self.state.read().segments.clone();
        // The oldest run of consecutive small segments, up to the target size.
        let mut run: Vec<Arc<Segment>> = Vec::new();
        let mut size = 0u64;
        let mut chosen: Option<Vec<Arc<Segment>>> = None;
        for s in segs {
            let small = s.meta.mem_bytes < self.cfg.compaction_small_bytes;
            if small && size + s.meta.mem_bytes <= self.cfg.compaction_target_bytes {
                size += s.meta.mem_bytes;
                run.push(s);
                continue;
            }
            if run.len() >= self.cfg.compaction_min_inputs {
                chosen = Some(std::mem::take(&mut run));
                break;
            }
            run.clear();
            size = 0;
            if small {
                size = s.meta.mem_bytes;
                run.push(s);
            }
        }
        if chosen.is_none() && run.len() >= self.cfg.compaction_min_inputs.max(2) {
            chosen = Some(run);
        }
        let Some(best) = chosen else { return Ok(false) };
        let mut tables: [Vec<RecordBatch>; 4] = Default::default();
        let mut ops: BTreeSet<(String, String, String)> = BTreeSet::new();
        let mut complete = true;
        let mut level = 0;
        for s in &best {
            for (t, path, _) in s.paths() {
                let Some(ti) = schema::TABLE_NAMES.iter().position(|n| *n == t) else { continue };
                let rows = segment::read_all(&path)?;
                tables[ti].extend(match ti {
                    memtable::T_SPANS => s.spans_rows(rows)?,
                    memtable::T_EVENTS => {
                        rows.into_iter().map(crate::arrow_rows::events_rows).collect::<Result<_>>()?
                    }
                    _ => rows,
                });
            }
            ops.extend(s.meta.operations.iter().cloned());
            complete &= s.meta.operations_complete;
            level = level.max(s.meta.level);
        }
        if ops.len() > memtable::MAX_OPERATIONS {
            complete = false;
            ops.clear();
        }
        // A span acknowledged twice (a client's retry) is written once.
        let [spans, events, links, raw] = tables;
        let ([logical, events, links], repeated) = dedup::dedup_spans([spans, events, links])?;
        let mut tables = [Vec::new(), events, links, raw];
        // The inputs' distinct resources, numbered again for the merged segment.
        let (spans, resources) = resources::normalize(&logical.iter().collect::<Vec<_>>())?;
        drop(logical);
        tables[memtable::T_SPANS] = spans;
        let id = {
            let mut m = self.manifest.lock();
            let id = m.next_segment_id;
            m.next_segment_id += 1;
            id
        };
        let mut meta = segment::write_segment(
            &self.seg_dir,
            id,
            level + 1,
            &tables,
            &resources,
            (ops.into_iter().collect(), complete),
            &self.cfg.write,
        )?;
        // Its spans are as old (to retention) as when they were first written.
        meta.spans_written_ns = best.iter().map(|s| s.meta.written_ns()).max().unwrap_or(meta.created_ns);
        wal::fsync_dir(&self.seg_dir)?;
        self.upload_segment(&meta)?;
        let seg = Arc::new(Segment::open(&self.seg_dir, meta.clone())?);
        let inputs: Vec<u64> = best.iter().map(|s| s.meta.id).collect();
        tracing::info!(inputs = ?inputs, output = id, "compacted segments");
        drop(best);
        self.replace_segments(&inputs, Some((meta, seg)))?;
        self.metrics.compactions.fetch_add(1, Ordering::Relaxed);
        self.metrics.spans_deduplicated.fetch_add(repeated, Ordering::Relaxed);
        Ok(true)
    }
}
