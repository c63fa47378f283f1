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

/// The test server's bucket as an `object_store` client (to look at and put objects directly).
fn client(s3: &Seaweed) -> object_store::aws::AmazonS3 {
    object_store::aws::AmazonS3Builder::new()
        .with_endpoint(s3.endpoint())
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_access_key_id(KEY)
        .with_secret_access_key(SECRET)
        .with_bucket_name("weft")
        .build()
        .unwrap()
}

/// Every object under `prefix` with its bytes.
fn objects(s3: &Seaweed, prefix: &str) -> Vec<(String, Vec<u8>)> {
    use futures::TryStreamExt;
    use object_store::{ObjectStore, ObjectStoreExt};
    let c = client(s3);
    block(async {
        let prefix = object_store::path::Path::from(prefix);
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
    use object_store::ObjectStoreExt;
    let c = client(s3);
    block(c.put(&object_store::path::Path::from(key), bytes.to_vec().into())).unwrap();
}

/// (span rows, distinct (trace id, span id)) of a store.
fn rows(store: &Store) -> (i64, i64) {
    let distinct = "SELECT count(*) FROM (SELECT DISTINCT trace_id, span_id FROM spans)";
    (scalar(store, "SELECT count(*) FROM spans"), scalar(store, distinct))
}

/// A read-only store over `s3://weft/root`.
fn reader(s3: &Seaweed, dir: &Path) -> Store {
    let mut c = config(s3, dir, "s3://weft/root");
    c.read_only = true;
    c.refresh_interval = Duration::from_millis(100);
    Store::open(c).unwrap()
}

#[test]
fn a_read_only_store_reads_every_collector_under_the_url_as_one() {
    let s3 = seaweed();
    let all = spans(42, 900);
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let url = |i: usize| format!("s3://weft/root/c{}", i + 1);
    let writers: Vec<Store> =
        dirs.iter().enumerate().map(|(i, d)| Store::open(config(&s3, d.path(), &url(i))).unwrap()).collect();
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
    let mut c = config(&s3, dirs[1].path(), &url(1));
    c.retention_bytes = Some(1);
    let c2 = Store::open(c).unwrap();
    assert!(c2.apply_retention().unwrap() > 0);
    reader.refresh().unwrap();
    let stored: i64 = [&writers[0], &c2, &writers[1]].iter().map(|w| rows(w).0).sum();
    assert!(stored < total, "retention deleted spans");
    assert_eq!(rows(&reader).0, stored, "the reader holds what the collectors hold");
    assert_eq!(others(), before, "c2's compaction and retention left c1 and c3 alone");
}
