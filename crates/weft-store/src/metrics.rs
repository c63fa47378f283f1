//! What a store reports about itself: counters ([`Metrics`]) and sizes ([`StoreStats`]).

use std::sync::atomic::AtomicU64;

/// Counters (monotonic since open).
#[derive(Debug, Default)]
pub struct Metrics {
    /// Spans appended (acknowledged).
    pub spans_appended: AtomicU64,
    /// Raw events appended.
    pub events_appended: AtomicU64,
    /// Append calls acknowledged.
    pub appends: AtomicU64,
    /// Bytes written to the WAL.
    pub wal_bytes_written: AtomicU64,
    /// Appends refused because the buffer was full.
    pub appends_overloaded: AtomicU64,
    /// Spans in appends refused because the buffer was full.
    pub spans_overloaded: AtomicU64,
    /// Segments written by flushes.
    pub flushes: AtomicU64,
    /// Flushes that failed (retried later).
    pub flush_errors: AtomicU64,
    /// Compactions done.
    pub compactions: AtomicU64,
    /// Repeated span rows (same ids and content, e.g. a client's retry) that compactions
    /// dropped.
    pub spans_deduplicated: AtomicU64,
    /// Segments deleted by age retention.
    pub retired_by_age: AtomicU64,
    /// Segments deleted by size retention.
    pub retired_by_size: AtomicU64,
    /// WAL records replayed on open.
    pub wal_records_replayed: AtomicU64,
    /// Torn or corrupt WAL records found (and cut) on open.
    pub wal_records_torn: AtomicU64,
    /// Appends refused because they exceeded `max_append_bytes` (nothing of them written).
    pub appends_too_large: AtomicU64,
    /// Bad WAL records kept aside (copied to `quarantine/`) and skipped on open.
    pub wal_records_quarantined: AtomicU64,
    /// Times the WAL went on in a new file after a failed write or fsync (acknowledgements
    /// resumed without a restart).
    pub wal_reopened: AtomicU64,
    /// Span rows trace lookups read (before duplicates were dropped; a bounded lookup stops
    /// reading at its limit).
    pub trace_rows_read: AtomicU64,
    /// Segments indexed searches read.
    pub search_segments_read: AtomicU64,
    /// A read-only store over a bucket: manifests, prefixes or segment files it could not
    /// read (each failed read counts; the rest is still served, and the next refresh tries
    /// again).
    pub bucket_read_errors: AtomicU64,
    /// A read-only store over a bucket: refreshes of the collectors' manifests done.
    pub bucket_refreshes: AtomicU64,
    /// Segments indexed searches skipped (ruled out by the indexes, or older than the N
    /// traces found).
    pub search_segments_skipped: AtomicU64,
    /// Row groups of the segments indexed searches read that they skipped (ruled out by the
    /// segment's search index).
    pub search_row_groups_skipped: AtomicU64,
}

/// A point-in-time view of the store's size.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct StoreStats {
    /// Live segments.
    pub segments: usize,
    /// Bytes of all segment files.
    pub segment_bytes: u64,
    /// Span rows in segments.
    pub segment_spans: u64,
    /// Raw event rows in segments.
    pub segment_events: u64,
    /// Buffered (unflushed) bytes, active + frozen.
    pub buffer_bytes: usize,
    /// Buffered span rows.
    pub buffer_spans: u64,
    /// Frozen buffers waiting for their flush.
    pub frozen_buffers: usize,
    /// Bytes of live WAL files.
    pub wal_bytes: u64,
    /// Memory held by the trace-id bloom filters.
    pub bloom_bytes: usize,
    /// Bytes of the segments' search indexes (in their spans files' footers, counted in
    /// `segment_bytes` too).
    pub search_index_bytes: u64,
    /// Segments the manifest names whose objects the bucket lacked when the store opened
    /// (deleted behind weft's back; left out of reads, see [`crate::Store::missing_objects`]).
    pub segments_missing: usize,
}
