//! Retention: segments older than [`crate::StoreConfig::retention_age`], then the oldest
//! while all exceed [`crate::StoreConfig::retention_bytes`], are deleted.

use std::sync::atomic::Ordering;

use super::Inner;
use crate::error::Result;
use crate::manifest::SegmentMeta;

impl Inner {
    pub(crate) fn retention(&self, now_ns: u64) -> Result<usize> {
        let _m = self.maint.lock();
        let segs: Vec<SegmentMeta> = self.state.read().segments.iter().map(|s| s.meta.clone()).collect();
        let mut victims: Vec<u64> = Vec::new();
        if let Some(age) = self.cfg.retention_age {
            let cutoff = now_ns.saturating_sub(age.as_nanos().min(u64::MAX as u128) as u64);
            for s in &segs {
                if s.written_ns() < cutoff {
                    victims.push(s.id);
                }
            }
            self.metrics.retired_by_age.fetch_add(victims.len() as u64, Ordering::Relaxed);
        }
        if let Some(limit) = self.cfg.retention_bytes {
            let mut rest: Vec<&SegmentMeta> = segs.iter().filter(|s| !victims.contains(&s.id)).collect();
            rest.sort_by_key(|s| (s.written_ns(), s.id));
            let mut total: u64 = rest.iter().map(|s| s.bytes()).sum();
            let mut by_size = 0;
            for s in rest {
                if total <= limit {
                    break;
                }
                total -= s.bytes();
                victims.push(s.id);
                by_size += 1;
            }
            self.metrics.retired_by_size.fetch_add(by_size, Ordering::Relaxed);
        }
        if victims.is_empty() {
            return Ok(0);
        }
        tracing::info!(segments = victims.len(), "retention deletes segments");
        self.replace_segments(&victims, None)?;
        Ok(victims.len())
    }
}
