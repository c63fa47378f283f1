//! The acknowledged write path: a WAL append (fsynced under [`FsyncPolicy::Always`]), the
//! rows joining the active buffer, freezing it when it is full, and going on in a new WAL
//! file after a failed write or fsync.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{Frozen, Inner, State};
use crate::error::{Result, StoreError};
use crate::memtable::MemTable;
use crate::wal::{FsyncPolicy, WalWriter};

/// A WAL payload buffer kept by each appending thread up to this capacity, so that appends
/// reuse warm memory instead of allocating (and faulting in) a fresh buffer per request.
const KEEP_PAYLOAD_BYTES: usize = 8 << 20;

thread_local! {
    static PAYLOAD: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `f` with this thread's cleared payload buffer, reserved for `capacity` bytes.
pub(crate) fn with_payload_buffer<R>(capacity: usize, f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    PAYLOAD.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            buf.clear();
            buf.reserve(capacity);
            let r = f(&mut buf);
            if buf.capacity() > KEEP_PAYLOAD_BYTES {
                *buf = Vec::new();
            }
            r
        }
        // Re-entered on this thread (cannot happen today): use a buffer of its own.
        Err(_) => f(&mut Vec::with_capacity(capacity)),
    })
}

impl Inner {
    pub(crate) fn check_writable(&self, spans: u64) -> Result<()> {
        if self.cfg.read_only {
            return Err(StoreError::ReadOnly);
        }
        if let Some(p) = self.poisoned.lock().as_ref() {
            return Err(StoreError::Poisoned(p.clone()));
        }
        let buffered = self.state.read().buffered_bytes();
        if buffered >= self.cfg.max_buffer_bytes {
            self.metrics.appends_overloaded.fetch_add(1, Ordering::Relaxed);
            self.metrics.spans_overloaded.fetch_add(spans, Ordering::Relaxed);
            self.wake_background();
            return Err(StoreError::Overloaded {
                buffered_bytes: buffered,
                limit_bytes: self.cfg.max_buffer_bytes,
            });
        }
        Ok(())
    }

    pub(crate) fn poison(&self, e: StoreError) -> StoreError {
        let mut poisoned = self.poisoned.lock();
        if poisoned.is_none() {
            let msg = e.to_string();
            tracing::error!(error = %msg, "WAL write failed; the store refuses writes until the WAL goes on in a new file");
            *poisoned = Some(msg);
        }
        e
    }

    /// Refuses one append whose in-memory size exceeds `max_append_bytes` (nothing written).
    pub(crate) fn check_append_size(&self, bytes: usize) -> Result<()> {
        let limit = self.cfg.max_append_bytes;
        if bytes > limit {
            self.metrics.appends_too_large.fetch_add(1, Ordering::Relaxed);
            return Err(StoreError::AppendTooLarge { bytes, limit, what: "max_append_bytes" });
        }
        Ok(())
    }

    /// Appends `payload` to the WAL and `push`es its rows into the active buffer; returns after
    /// the fsync when the policy is `Always` or `fsync` asks for one.
    pub(crate) fn commit(
        &self,
        payload: &[u8],
        fsync: bool,
        push: impl FnOnce(&mut MemTable) -> Result<()>,
    ) -> Result<()> {
        let (file, end, freeze) = {
            let mut wal = self.wal.lock();
            let w = wal.as_mut().ok_or(StoreError::ReadOnly)?;
            let (file, end) = w.append(payload, &self.sync).map_err(|e| match e {
                // Refused before a byte was written: this append alone fails.
                e @ StoreError::AppendTooLarge { .. } => e,
                e => self.poison(e),
            })?;
            let mut st = self.state.write();
            push(&mut st.active)?;
            let freeze = st.active.bytes >= self.cfg.flush_bytes;
            if freeze {
                self.freeze_locked(w, &mut st).map_err(|e| self.poison(e))?;
            }
            (file, end, freeze)
        };
        if freeze {
            self.wake_background();
        }
        if fsync || self.cfg.fsync == FsyncPolicy::Always {
            self.sync.sync_append(&file, end, self.cfg.fsync).map_err(|e| match e {
                // Its file broke and the WAL has gone on in a new one since: this append alone
                // fails (the failure that broke the file poisoned the store already).
                e @ StoreError::Poisoned(_) if self.sync.check().is_ok() => e,
                e => self.poison(e),
            })?;
        }
        self.metrics.appends.fetch_add(1, Ordering::Relaxed);
        self.metrics.wal_bytes_written.fetch_add(payload.len() as u64 + 8, Ordering::Relaxed);
        Ok(())
    }

    pub(crate) fn freeze_locked(&self, w: &mut WalWriter, st: &mut State) -> Result<()> {
        if st.active.is_empty() {
            return Ok(());
        }
        let next = st.active_wal + 1;
        w.rotate(next, self.cfg.fsync, &self.sync)?;
        let mem = std::mem::take(&mut st.active);
        st.frozen.push_back(Frozen { mem: Arc::new(mem), wal_upto: st.active_wal });
        st.active_wal = next;
        Ok(())
    }

    /// After a failed WAL write or fsync: cuts the broken WAL file back to its last whole
    /// record, goes on in a new one and takes appends again. The active buffer holds every
    /// record of the broken file (a failed write pushed nothing), so it is frozen with it: its
    /// flush makes those rows durable, and only then is the broken file deleted. Fails, still
    /// refusing appends, while the file system does (a full disk); the background retries.
    pub(crate) fn reopen_wal(&self) -> Result<()> {
        let mut wal = self.wal.lock();
        let Some(w) = wal.as_mut() else { return Ok(()) };
        if self.poisoned.lock().is_none() {
            return Ok(());
        }
        let mut st = self.state.write();
        let next = st.active_wal + 1;
        w.reopen(next, &self.sync)?;
        let mem = std::mem::take(&mut st.active);
        let broken = std::mem::replace(&mut st.active_wal, next);
        if !mem.is_empty() {
            st.frozen.push_back(Frozen { mem: Arc::new(mem), wal_upto: broken });
        }
        drop(st);
        if let Some(was) = self.poisoned.lock().take() {
            tracing::warn!(failure = %was, wal = next, "the WAL goes on in a new file; appends are acknowledged again");
        }
        self.metrics.wal_reopened.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    pub(crate) fn freeze(&self) -> Result<()> {
        let mut wal = self.wal.lock();
        let Some(w) = wal.as_mut() else { return Ok(()) };
        let mut st = self.state.write();
        self.freeze_locked(w, &mut st)
    }
}
