//! Segments in an S3-compatible bucket (feature `s3`): a real SeaweedFS
//! ([`weft_testkit::seaweed`]) started by each test.

use std::path::Path;
use std::time::{Duration, Instant};

use datafusion::arrow::array::Int64Array;
use weft_store::{BucketConfig, Store, StoreConfig};
use weft_testkit::seaweed::{KEY, SECRET, Seaweed};

use crate::{block, canon, spans};

/// A SeaweedFS server with the bucket `weft`, once it takes writes.
fn seaweed() -> Seaweed {
    let s3 = Seaweed::start("weft");
    let dir = tempfile::tempdir().unwrap();
    s3.wait_writable(|| {
        let tried = Store::open(config(&s3, dir.path(), "s3://weft/ready")).and_then(|store| {
            store.append(&spans(1, 10))?;
            store.close()
        });
        tried.map_err(|e| e.to_string())
    });
    s3
}

/// A store config with segments under `url` in `s3`'s bucket.
fn config(s3: &Seaweed, dir: &Path, url: &str) -> StoreConfig {
    let mut c = crate::config(dir);
    c.bucket = Some(BucketConfig { url: url.into(), credentials_file: Some(s3.credentials(KEY, SECRET)) });
    c
}

fn scalar(store: &Store, sql: &str) -> i64 {
    let r = block(store.sql(sql, 10)).unwrap();
    r.batches[0].column(0).as_any().downcast_ref::<Int64Array>().unwrap().value(0)
}

/// The spans in the store, each once.
fn count(store: &Store) -> i64 {
    let twice = "SELECT count(*) FROM (SELECT trace_id, span_id FROM spans GROUP BY trace_id, span_id HAVING count(*) > 1)";
    assert_eq!(scalar(store, twice), 0, "no span twice");
    scalar(store, "SELECT count(*) FROM spans")
}

#[test]
fn segments_come_back_from_the_bucket_into_an_empty_directory() {
    let s3 = seaweed();
    let all = spans(40, 600);
    let first = tempfile::tempdir().unwrap();
    {
        let store = Store::open(config(&s3, first.path(), "s3://weft/collector-1")).unwrap();
        store.append(&all[..300]).unwrap();
        store.flush().unwrap();
        store.append(&all[300..]).unwrap();
        store.close().unwrap();
    }
    // Another machine: an empty data directory, the same prefix.
    drop(first);
    let second = tempfile::tempdir().unwrap();
    let store = Store::open(config(&s3, second.path(), "s3://weft/collector-1")).unwrap();
    assert_eq!(store.segments().len(), 2);
    assert_eq!(count(&store), all.len() as i64);
    let id = all[450].trace_id;
    let want: Vec<_> = all.iter().filter(|s| s.trace_id == id).cloned().collect();
    assert_eq!(canon(store.trace(id).unwrap()), canon(want));
    // SQL reads the segment files from the bucket, not the directory's copy.
    for f in std::fs::read_dir(second.path().join("segments")).unwrap() {
        std::fs::remove_file(f.unwrap().path()).unwrap();
    }
    assert_eq!(count(&store), all.len() as i64);
    // Another prefix of the same bucket is another store.
    let third = tempfile::tempdir().unwrap();
    let other = Store::open(config(&s3, third.path(), "s3://weft/collector-2")).unwrap();
    assert_eq!(count(&other), 0);
}

#[test]
fn ingest_goes_on_while_the_bucket_is_down_and_nothing_is_lost() {
    let mut s3 = seaweed();
    let all = spans(41, 900);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(&s3, dir.path(), "s3://weft/outage")).unwrap();
    store.append(&all[..300]).unwrap();
    store.flush().unwrap();

    s3.stop();
    // Acknowledged into the local WAL while the bucket is unreachable.
    store.append(&all[300..600]).unwrap();
    let err = store.flush().unwrap_err().to_string();
    assert!(err.contains("s3://weft/outage/segments/"), "{err}");
    store.append(&all[600..]).unwrap();
    let wal_files = std::fs::read_dir(dir.path().join("wal")).unwrap().count();
    assert!(wal_files >= 2, "the WAL is kept until the upload succeeds ({wal_files} files)");

    s3.run();
    let deadline = Instant::now() + Duration::from_secs(120);
    while let Err(e) = store.flush() {
        assert!(Instant::now() < deadline, "the upload never succeeded: {e}\n{}", s3.log());
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(count(&store), all.len() as i64);
    drop(store);

    // Everything acknowledged is in the bucket: an empty directory reads it all back.
    let fresh = tempfile::tempdir().unwrap();
    let store = Store::open(config(&s3, fresh.path(), "s3://weft/outage")).unwrap();
    assert_eq!(count(&store), all.len() as i64);
}

#[test]
fn wrong_credentials_and_a_missing_bucket_name_the_object() {
    let s3 = seaweed();
    let dir = tempfile::tempdir().unwrap();

    let mut c = config(&s3, dir.path(), "s3://weft/p");
    c.bucket.as_mut().unwrap().credentials_file = Some(s3.credentials(KEY, "not-the-secret"));
    let err = Store::open(c).unwrap_err().to_string();
    assert!(err.contains("s3://weft/p/MANIFEST.json"), "{err}");
    assert!(!err.contains("not-the-secret"), "the secret is never shown: {err}");

    let err = Store::open(config(&s3, dir.path(), "s3://no-such-bucket/p")).unwrap_err().to_string();
    assert!(err.contains("s3://no-such-bucket/p/MANIFEST.json"), "{err}");

    let mut c = config(&s3, dir.path(), "s3://weft/p");
    let bad = dir.path().join("bad-credentials");
    std::fs::write(&bad, "AWS_SECRET_ACCESS_KEY\n").unwrap();
    c.bucket.as_mut().unwrap().credentials_file = Some(bad.clone());
    let err = Store::open(c).unwrap_err().to_string();
    assert!(err.contains(&format!("{}:1", bad.display())), "{err}");
}
