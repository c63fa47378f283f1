//! One query's share of DataFusion's memory pool.
//!
//! The store's pool ([`crate::StoreConfig::query_memory_bytes`]) is shared by every query, so
//! one query could take all of it. [`QueryMemory`] wraps it for one query: every reservation
//! still counts against the shared pool, and the query's own total may not pass its limit. A
//! spilling operator (a sort) spills at the limit; anything else fails the query with an error
//! naming the limit.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation};

/// A query's view of the shared pool, bounded to `limit` bytes.
#[derive(Debug)]
pub(crate) struct QueryMemory {
    shared: Arc<dyn MemoryPool>,
    limit: usize,
    /// What this query's reservations hold.
    used: AtomicUsize,
    /// Names the limit in the error (the setting a user changes).
    setting: &'static str,
}

impl QueryMemory {
    pub(crate) fn new(shared: Arc<dyn MemoryPool>, limit: usize, setting: &'static str) -> Self {
        QueryMemory { shared, limit, used: AtomicUsize::new(0), setting }
    }
}

impl std::fmt::Display for QueryMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "query memory: {} of {} bytes, in {}",
            self.used.load(Ordering::Relaxed),
            self.limit,
            self.shared
        )
    }
}

impl MemoryPool for QueryMemory {
    fn name(&self) -> &str {
        "weft-query-memory"
    }

    fn register(&self, consumer: &MemoryConsumer) {
        self.shared.register(consumer);
    }

    fn unregister(&self, consumer: &MemoryConsumer) {
        self.shared.unregister(consumer);
    }

    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.shared.grow(reservation, additional);
        self.used.fetch_add(additional, Ordering::Relaxed);
    }

    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.shared.shrink(reservation, shrink);
        self.used.fetch_sub(shrink, Ordering::Relaxed);
    }

    fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> DfResult<()> {
        // Claimed before the shared pool is asked, so concurrent reservations of one query
        // cannot pass the limit together.
        let before = self.used.fetch_add(additional, Ordering::Relaxed);
        if before.saturating_add(additional) > self.limit {
            self.used.fetch_sub(additional, Ordering::Relaxed);
            return Err(DataFusionError::ResourcesExhausted(format!(
                "the query needs more than its memory limit of {} bytes ({}; {} held, {} more asked by {})",
                self.limit,
                self.setting,
                before,
                additional,
                reservation.consumer().name()
            )));
        }
        self.shared.try_grow(reservation, additional).inspect_err(|_| {
            self.used.fetch_sub(additional, Ordering::Relaxed);
        })
    }

    fn reserved(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    fn memory_limit(&self) -> MemoryLimit {
        MemoryLimit::Finite(self.limit)
    }
}
