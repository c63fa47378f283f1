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

/// Every object under `prefix` with its bytes.
fn objects(s3: &Seaweed, prefix: &str) -> Vec<(String, Vec<u8>)> {
    use futures::TryStreamExt;
    let c = raw_bucket(s3);
    block(async {
        let prefix = ObjPath::from(prefix);
        let mut listed: Vec<_> = c.list(Some(&prefix)).try_collect().await.unwrap();
        listed.sort_by(|a, b| a.location.cmp(&b.location));
        let mut out = Vec::new();
        for m in listed {
            let bytes = c.get(&m.location).await.unwrap().bytes().await.unwrap();
            out.push((m.location.to_string(), bytes.to_vec()));
        }
        out
    })
}

fn put(s3: &Seaweed, key: &str, bytes: &[u8]) {
    let c = raw_bucket(s3);
    block(c.put(&ObjPath::from(key), PutPayload::from(bytes.to_vec()))).unwrap();
}

/// (span rows, distinct (trace id, span id)) of a store.
fn rows(store: &Store) -> (i64, i64) {
    let distinct = "SELECT count(*) FROM (SELECT DISTINCT trace_id, span_id FROM spans)";
    (scalar(store, "SELECT count(*) FROM spans"), scalar(store, distinct))
}

/// A read-only store over `s3://weft/root`.
fn reader(s3: &Seaweed, dir: &Path) -> Store {
    let mut c = s3.config(dir, "s3://weft/root");
    c.read_only = true;
    c.refresh_interval = Duration::from_millis(100);
    Store::open(c).unwrap()
}

#[test]
fn a_read_only_store_reads_every_collector_under_the_url_as_one() {
    let s3 = Seaweed::start();
    let all = spans(42, 900);
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let url = |i: usize| format!("s3://weft/root/c{}", i + 1);
    let writers: Vec<Store> =
        dirs.iter().enumerate().map(|(i, d)| Store::open(s3.config(d.path(), &url(i))).unwrap()).collect();
    // Round-robin senders: every trace's spans end up with all three collectors, in two
    // segments each.
    let (first, second) = all.split_at(all.len() / 2);
    for half in [first, second] {
        for (i, w) in writers.iter().enumerate() {
            let mine: Vec<_> = half.iter().skip(i).step_by(3).cloned().collect();
            w.append(&mine).unwrap();
            w.flush().unwrap();
        }
    }
    // A sender retried a request to another collector after the first died unanswered: span 5
    // (sent to c3) is stored by c1 too.
    writers[0].append(&all[5..6]).unwrap();
    writers[0].flush().unwrap();

    let rdir = tempfile::tempdir().unwrap();
    let reader = reader(&s3, rdir.path());
    assert_eq!(reader.segments().len(), 7);
    // SQL sees the stored rows (the retried copy too), each span id once more than stored.
    assert_eq!(rows(&reader), (all.len() as i64 + 1, all.len() as i64));
    // Resource columns come from each collector's own resources files (segment ids repeat
    // across collectors).
    let host = |s: &weft_model::Span| {
        let kv = s.resource.attributes.0.iter().find(|kv| &*kv.key == "host.name");
        kv.map(|kv| kv.value.to_string()).unwrap_or_default()
    };
    let mut want = std::collections::BTreeMap::<(String, String), i64>::new();
    for s in all.iter().chain(&all[5..6]) {
        *want.entry((s.service_name().to_owned(), host(s))).or_default() += 1;
    }
    let sql = "SELECT service_name, resource_attributes['host.name'], count(*) FROM spans GROUP BY 1, 2";
    let r = block(reader.sql(sql, 100)).unwrap();
    let mut got = std::collections::BTreeMap::new();
    for b in &r.batches {
        let text =
            |i: usize| b.column(i).as_any().downcast_ref::<datafusion::arrow::array::StringArray>().unwrap();
        let n = b.column(2).as_any().downcast_ref::<Int64Array>().unwrap();
        for i in 0..b.num_rows() {
            got.insert((text(0).value(i).to_owned(), text(1).value(i).to_owned()), n.value(i));
        }
    }
    assert_eq!(got, want);
    // Trace by id: every trace whole and each span once, from all three collectors.
    let traces: std::collections::BTreeSet<_> = all.iter().map(|s| s.trace_id).collect();
    assert!(traces.len() > 10, "{} traces", traces.len());
    for id in &traces {
        let want: Vec<_> = all.iter().filter(|s| s.trace_id == *id).cloned().collect();
        assert_eq!(canon(reader.trace(*id).unwrap()), canon(want), "trace {id}");
    }
    // Search finds the trace whose span was stored twice, whole, once.
    let s = &all[5];
    let q = weft_store::TraceQuery {
        service: Some(s.service_name().to_owned()),
        span_name: Some(s.name.to_string()),
        start_min_ns: Some(s.start_ns),
        start_max_ns: Some(s.start_ns),
        limit: 1000,
        ..Default::default()
    };
    let found = block(reader.search(&q)).unwrap();
    let want: Vec<_> = all.iter().filter(|x| x.trace_id == s.trace_id).cloned().collect();
    let got = found.into_iter().find(|t| t[0].trace_id == s.trace_id).expect("the trace is found");
    assert_eq!(canon(got), canon(want));
    // A reader refuses writes and maintenance.
    assert!(reader.append(&all[..1]).is_err());
    assert!(reader.compact().is_err());

    // A manifest that does not parse is counted; the others are still served.
    put(&s3, "root/broken/MANIFEST.json", b"{not json");
    reader.refresh().unwrap();
    assert!(reader.metrics().bucket_read_errors.load(std::sync::atomic::Ordering::Relaxed) >= 1);
    assert_eq!(rows(&reader), (all.len() as i64 + 1, all.len() as i64));

    // c2 writes more in small segments, then compacts them and applies retention; c1's and
    // c3's objects stay as they were, byte for byte.
    let others = || [objects(&s3, "root/c1"), objects(&s3, "root/c3")];
    let before = others();
    assert!(before.iter().all(|o| o.len() >= 3), "manifest and segment files of c1 and c3");
    let more = spans(43, 400);
    for part in more.chunks(100) {
        writers[1].append(part).unwrap();
        writers[1].flush().unwrap();
    }
    let total = (all.len() + more.len()) as i64;
    // The refresh thread picks the new segments up.
    let deadline = Instant::now() + Duration::from_secs(60);
    while rows(&reader) != (total + 1, total) {
        assert!(Instant::now() < deadline, "the reader never saw c2's new spans: {:?}", rows(&reader));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(writers[1].compact().unwrap(), "c2's small segments are merged");
    reader.refresh().unwrap();
    assert_eq!(rows(&reader), (total + 1, total), "nothing lost or doubled by c2's compaction");
    let id = more[250].trace_id;
    let want: Vec<_> = more.iter().filter(|s| s.trace_id == id).cloned().collect();
    assert_eq!(canon(reader.trace(id).unwrap()), canon(want));
    // Cached files of the compacted segments are gone: the cache holds the live ones only.
    let cached: usize = std::fs::read_dir(rdir.path().join("bucket-cache"))
        .unwrap()
        .map(|d| std::fs::read_dir(d.unwrap().path()).unwrap().count())
        .sum();
    assert_eq!(cached, reader.segments().iter().map(|s| s.files.len()).sum::<usize>());

    // c2 with a size limit: retention deletes its oldest segments, the reader drops them.
    let mut writers = writers;
    let w2 = writers.remove(1);
    w2.close().unwrap();
    drop(w2);
    let mut c = s3.config(dirs[1].path(), &url(1));
    c.retention_bytes = Some(1);
    let c2 = Store::open(c).unwrap();
    assert!(c2.apply_retention().unwrap() > 0);
    reader.refresh().unwrap();
    let stored: i64 = [&writers[0], &c2, &writers[1]].iter().map(|w| rows(w).0).sum();
    assert!(stored < total, "retention deleted spans");
    assert_eq!(rows(&reader).0, stored, "the reader holds what the collectors hold");
    assert_eq!(others(), before, "c2's compaction and retention left c1 and c3 alone");
}
