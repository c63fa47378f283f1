//! Durability: every acknowledged append survives a crash exactly once.

use std::sync::atomic::Ordering;

use datafusion::arrow::array::{Array, Int64Array};
use weft_store::{FsyncPolicy, Store, StoreError};

use crate::{block, canon, config, open, spans};

fn count(store: &Store, sql: &str) -> i64 {
    let r = block(store.sql(sql, 10)).unwrap();
    r.batches[0].column(0).as_any().downcast_ref::<Int64Array>().unwrap().value(0)
}

fn assert_exactly(store: &Store, n: usize) {
    assert_eq!(count(store, "SELECT count(*) FROM spans"), n as i64);
    assert_eq!(
        count(
            store,
            "SELECT count(*) FROM (SELECT trace_id, span_id FROM spans GROUP BY trace_id, span_id HAVING count(*) > 1)"
        ),
        0,
        "no span twice"
    );
}

#[test]
fn unflushed_appends_survive_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let all = spans(10, 500);
    {
        let store = open(dir.path());
        store.append(&all[..250]).unwrap();
        store.flush().unwrap();
        store.append(&all[250..]).unwrap();
        // Dropped without close(): no final flush, like a killed process.
    }
    let store = open(dir.path());
    assert_eq!(store.metrics().wal_records_replayed.load(Ordering::Relaxed), 1);
    assert_exactly(&store, all.len());
    let id = all[300].trace_id;
    let want: Vec<_> = all.iter().filter(|s| s.trace_id == id).cloned().collect();
    assert_eq!(canon(store.trace(id).unwrap()), canon(want));
    // The replayed buffer is flushed in the background; a second crash loses nothing either.
    store.flush().unwrap();
    drop(store);
    let store = open(dir.path());
    assert_exactly(&store, all.len());
}

#[test]
fn torn_tail_is_cut_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let all = spans(11, 200);
    {
        let store = open(dir.path());
        store.append(&all[..100]).unwrap();
        store.append(&all[100..]).unwrap();
    }
    // Tear the last record as a crash in the middle of a write would.
    let wal = std::fs::read_dir(dir.path().join("wal")).unwrap().map(|e| e.unwrap().path()).max().unwrap();
    let len = std::fs::metadata(&wal).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&wal).unwrap().set_len(len - 100).unwrap();
    let store = open(dir.path());
    assert_eq!(store.metrics().wal_records_torn.load(Ordering::Relaxed), 1);
    assert_eq!(store.metrics().wal_records_replayed.load(Ordering::Relaxed), 1);
    assert_exactly(&store, 100);
}

#[test]
fn wal_files_already_in_segments_are_not_replayed_twice() {
    let dir = tempfile::tempdir().unwrap();
    let all = spans(12, 300);
    let saved;
    {
        let store = open(dir.path());
        store.append(&all).unwrap();
        // Keep a copy of the WAL as it was before the flush deleted it...
        let wal =
            std::fs::read_dir(dir.path().join("wal")).unwrap().map(|e| e.unwrap().path()).min().unwrap();
        saved = (wal.clone(), std::fs::read(&wal).unwrap());
        store.flush().unwrap();
        assert!(!wal.exists(), "flushed WAL deleted");
    }
    // ...and put it back: a crash between the manifest update and the WAL deletion.
    std::fs::write(&saved.0, &saved.1).unwrap();
    // Plus a segment file of an interrupted flush that never reached the manifest.
    let orphan = dir.path().join("segments").join("seg-0000009999-spans.parquet");
    std::fs::write(&orphan, b"partial").unwrap();
    let store = open(dir.path());
    assert_eq!(store.metrics().wal_records_replayed.load(Ordering::Relaxed), 0);
    assert!(!saved.0.exists(), "covered WAL file removed on open");
    assert!(!orphan.exists(), "orphan segment file removed on open");
    assert_exactly(&store, all.len());
}

#[test]
fn concurrent_appends_with_group_commit() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.fsync = FsyncPolicy::Always;
    c.flush_bytes = 256 << 10; // several flushes (and WAL rotations) during the run
    let store = Store::open(c).unwrap();
    let all = spans(13, 2000);
    std::thread::scope(|s| {
        for chunk in all.chunks(all.len() / 4 + 1) {
            let store = store.clone();
            s.spawn(move || {
                for part in chunk.chunks(25) {
                    store.append(part).unwrap();
                }
            });
        }
    });
    assert!(store.metrics().flushes.load(Ordering::Relaxed) + store.stats().frozen_buffers as u64 >= 1);
    assert_exactly(&store, all.len());
    drop(store);
    let store = open(dir.path());
    assert_exactly(&store, all.len());
}

#[test]
fn overload_refuses_and_counts_instead_of_growing() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.flush_bytes = usize::MAX; // never flush by size
    c.max_buffer_bytes = 200 << 10;
    let store = Store::open(c).unwrap();
    let batch = spans(14, 200);
    let mut refused = 0;
    for _ in 0..50 {
        match store.append(&batch) {
            Ok(()) => {}
            Err(StoreError::Overloaded { .. }) => refused += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(refused > 0);
    assert_eq!(store.metrics().appends_overloaded.load(Ordering::Relaxed), refused);
    assert_eq!(store.metrics().spans_overloaded.load(Ordering::Relaxed), refused * batch.len() as u64);
    let buffered = store.stats().buffer_bytes;
    assert!(buffered < (200 << 10) + (1 << 20), "buffer stays bounded: {buffered}");
    // Flushing frees the buffer and appends are accepted again.
    store.flush().unwrap();
    store.append(&batch).unwrap();
}

#[test]
fn one_writer_per_directory_and_read_only_readers() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.append(&spans(15, 100)).unwrap();
    match Store::open(config(dir.path())) {
        Err(StoreError::Locked(_)) => {}
        other => panic!("expected Locked, got {other:?}"),
    }
    let mut ro = config(dir.path());
    ro.read_only = true;
    let reader = Store::open(ro).unwrap();
    assert_eq!(count(&reader, "SELECT count(*) FROM spans"), store.stats().buffer_spans as i64);
    assert!(matches!(reader.append(&spans(16, 1)), Err(StoreError::ReadOnly)));
}
