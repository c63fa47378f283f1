//! Segments in an S3-compatible bucket (feature `s3`): a real SeaweedFS
//! ([`weft_testkit::seaweed`]) started by each test.

use std::path::Path;
use std::time::{Duration, Instant};

use datafusion::arrow::array::Int64Array;
use datafusion::object_store::path::Path as ObjPath;
use datafusion::object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use weft_store::{BucketConfig, Store, StoreConfig};
use weft_testkit::seaweed::{KEY, SECRET};

use crate::{block, canon, config, spans};

/// The test server, with a bucket that takes writes.
struct Seaweed(weft_testkit::seaweed::Seaweed);

impl std::ops::Deref for Seaweed {
    type Target = weft_testkit::seaweed::Seaweed;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Seaweed {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Seaweed {
    fn start() -> Seaweed {
        let s = Seaweed(weft_testkit::seaweed::Seaweed::start());
        s.wait_writable();
        s
    }

    /// Waits until the bucket takes a segment (the master grows its first volumes meanwhile).
    fn wait_writable(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let dir = tempfile::tempdir().unwrap();
        loop {
            let tried = Store::open(self.config(dir.path(), "s3://weft/ready")).and_then(|store| {
                store.append(&spans(1, 10))?;
                store.close()
            });
            match tried {
                Ok(()) => return,
                Err(e) => {
                    assert!(Instant::now() < deadline, "SeaweedFS takes no writes: {e}\n{}", self.log())
                }
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    fn config(&self, dir: &Path, url: &str) -> StoreConfig {
        let mut c = config(dir);
        c.bucket =
            Some(BucketConfig { url: url.into(), credentials_file: Some(self.credentials(KEY, SECRET)) });
        c
    }
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
    let s3 = Seaweed::start();
    let all = spans(40, 600);
    let first = tempfile::tempdir().unwrap();
    {
        let store = Store::open(s3.config(first.path(), "s3://weft/collector-1")).unwrap();
        store.append(&all[..300]).unwrap();
        store.flush().unwrap();
        store.append(&all[300..]).unwrap();
        store.close().unwrap();
    }
    // Another machine: an empty data directory, the same prefix.
    drop(first);
    let second = tempfile::tempdir().unwrap();
    let store = Store::open(s3.config(second.path(), "s3://weft/collector-1")).unwrap();
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
    let other = Store::open(s3.config(third.path(), "s3://weft/collector-2")).unwrap();
    assert_eq!(count(&other), 0);
}

#[test]
fn ingest_goes_on_while_the_bucket_is_down_and_nothing_is_lost() {
    let mut s3 = Seaweed::start();
    let all = spans(41, 900);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(s3.config(dir.path(), "s3://weft/outage")).unwrap();
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
    let store = Store::open(s3.config(fresh.path(), "s3://weft/outage")).unwrap();
    assert_eq!(count(&store), all.len() as i64);
}

#[test]
fn wrong_credentials_and_a_missing_bucket_name_the_object() {
    let s3 = Seaweed::start();
    let dir = tempfile::tempdir().unwrap();

    let mut c = s3.config(dir.path(), "s3://weft/p");
    c.bucket.as_mut().unwrap().credentials_file = Some(s3.credentials(KEY, "not-the-secret"));
    let err = Store::open(c).unwrap_err().to_string();
    assert!(err.contains("s3://weft/p/MANIFEST.json"), "{err}");
    assert!(!err.contains("not-the-secret"), "the secret is never shown: {err}");

    let err = Store::open(s3.config(dir.path(), "s3://no-such-bucket/p")).unwrap_err().to_string();
    assert!(err.contains("s3://no-such-bucket/p/MANIFEST.json"), "{err}");

    let mut c = s3.config(dir.path(), "s3://weft/p");
    let bad = dir.path().join("bad-credentials");
    std::fs::write(&bad, "AWS_SECRET_ACCESS_KEY\n").unwrap();
    c.bucket.as_mut().unwrap().credentials_file = Some(bad.clone());
    let err = Store::open(c).unwrap_err().to_string();
    assert!(err.contains(&format!("{}:1", bad.display())), "{err}");
}

/// A client of the test server's bucket `weft`, for changes behind weft's back.
fn raw_bucket(s3: &Seaweed) -> std::sync::Arc<dyn ObjectStore> {
    weft_store::s3_store("weft", Some(&s3.credentials(KEY, SECRET))).unwrap()
}

#[test]
fn a_manifest_of_a_newer_weft_is_refused_naming_the_object_and_versions() {
    let s3 = Seaweed::start();
    let newer = br#"{"version": 99, "next_segment_id": 1, "wal_checkpoint": 0, "segments": []}"#;
    block(raw_bucket(&s3).put(&ObjPath::from("newer/MANIFEST.json"), PutPayload::from_static(newer)))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let err = Store::open(s3.config(dir.path(), "s3://weft/newer")).unwrap_err().to_string();
    assert!(err.contains("s3://weft/newer/MANIFEST.json"), "{err}");
    assert!(err.contains("format version 99 (this weft reads 1 to 2)"), "{err}");
    // Nothing was written over it.
    let kept =
        block(async { raw_bucket(&s3).get(&ObjPath::from("newer/MANIFEST.json")).await?.bytes().await })
            .unwrap();
    assert_eq!(&kept[..], &newer[..]);
}

#[test]
fn a_segment_object_deleted_behind_weft_is_named_and_reads_go_on_over_the_rest() {
    let s3 = Seaweed::start();
    let all = spans(43, 900);
    let dir = tempfile::tempdir().unwrap();
    let url = "s3://weft/deleted";
    // Three segments (`spans` completes its last trace: a few more than asked).
    let parts: Vec<_> = all.chunks(all.len().div_ceil(3)).collect();
    {
        let store = Store::open(s3.config(dir.path(), url)).unwrap();
        for part in &parts {
            store.append(part).unwrap();
            store.flush().unwrap();
        }
        store.close().unwrap();
    }
    let manifest = weft_store::manifest::load(dir.path()).unwrap().unwrap();
    assert_eq!(manifest.segments.len(), 3);
    let gone = manifest.segments[1].file("spans").unwrap().file.clone();
    block(raw_bucket(&s3).delete(&ObjPath::from(format!("deleted/segments/{gone}")))).unwrap();
    let object = format!("s3://weft/deleted/segments/{gone}");

    // What is left: the first and the last part.
    let intact: Vec<_> = parts[0].iter().chain(parts[2]).cloned().collect();
    let id = all[0].trace_id;
    let want: Vec<_> = intact.iter().filter(|s| s.trace_id == id).cloned().collect();
    let check = |store: &Store| {
        assert_eq!(store.missing_objects(), vec![object.clone()]);
        assert_eq!(store.stats().segments_missing, 1);
        assert_eq!(store.segments().len(), 2);
        assert_eq!(count(store), intact.len() as i64);
        assert_eq!(canon(store.trace(id).unwrap()), canon(want.clone()));
    };

    // The same data directory (its copy of the segment is there): the object is still missing.
    let store = Store::open(s3.config(dir.path(), url)).unwrap();
    check(&store);
    // New data goes on; the missing segment stays named in both manifests, its local copy stays.
    let extra = spans(44, 50);
    store.append(&extra).unwrap();
    store.flush().unwrap();
    store.close().unwrap();
    drop(store);
    assert!(dir.path().join("segments").join(&gone).exists(), "the local copy is never deleted for it");
    let named = |m: &weft_store::Manifest| m.segments.iter().any(|s| s.id == manifest.segments[1].id);
    assert!(named(&weft_store::manifest::load(dir.path()).unwrap().unwrap()));
    let cfg = BucketConfig { url: url.into(), credentials_file: Some(s3.credentials(KEY, SECRET)) };
    assert!(named(&weft_store::read_manifest(&cfg).unwrap().0.unwrap()));

    // Another machine, an empty data directory: the same report, the rest answers.
    let fresh = tempfile::tempdir().unwrap();
    let store = Store::open(s3.config(fresh.path(), url)).unwrap();
    assert_eq!(store.missing_objects(), vec![object.clone()]);
    assert_eq!(count(&store), (intact.len() + extra.len()) as i64);
    assert_eq!(canon(store.trace(id).unwrap()), canon(want.clone()));
}

#[test]
fn a_compaction_whose_upload_fails_keeps_its_inputs() {
    let mut s3 = Seaweed::start();
    let all = spans(45, 600);
    let dir = tempfile::tempdir().unwrap();
    let url = "s3://weft/compact";
    let mut cfg = s3.config(dir.path(), url);
    cfg.compaction_min_inputs = 2;
    let store = Store::open(cfg).unwrap();
    for part in all.chunks(all.len().div_ceil(3)) {
        store.append(part).unwrap();
        store.flush().unwrap();
    }
    let before = weft_store::manifest::load(dir.path()).unwrap().unwrap();
    assert_eq!(before.segments.len(), 3);

    s3.stop();
    let err = store.compact().unwrap_err().to_string();
    assert!(err.contains("s3://weft/compact/segments/"), "{err}");
    // The inputs are live, named by the local manifest, and their files are all there.
    assert_eq!(weft_store::manifest::load(dir.path()).unwrap().unwrap(), before);
    assert_eq!(store.segments().len(), 3);
    for f in before.segments.iter().flat_map(|s| &s.files) {
        assert!(dir.path().join("segments").join(&f.file).exists(), "{} deleted", f.file);
    }

    s3.run();
    // The bucket kept them too: an empty directory reads everything back (once the restarted
    // server answers).
    let fresh = tempfile::tempdir().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let other = loop {
        match Store::open(s3.config(fresh.path(), url)) {
            Ok(store) => break store,
            Err(e) => assert!(Instant::now() < deadline, "the bucket never came back: {e}\n{}", s3.log()),
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(count(&other), all.len() as i64);
    assert!(other.missing_objects().is_empty());
    drop(other);
    // Once the bucket is back, the compaction goes through.
    loop {
        match store.compact() {
            Ok(done) => {
                assert!(done);
                break;
            }
            Err(e) => assert!(Instant::now() < deadline, "compaction never succeeded: {e}\n{}", s3.log()),
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(store.segments().len(), 1);
    assert_eq!(count(&store), all.len() as i64);
}
