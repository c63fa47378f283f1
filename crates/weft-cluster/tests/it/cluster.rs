//! A scheduler and two executors (processes of the `weft-cluster` binary on 127.0.0.1) answer
//! SQL over a store's segments as `Store::sql` does.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;
use weft_cluster::StoreAt;
use weft_store::{Store, StoreConfig, render};
use weft_synth::shop::Shop;
use weft_testkit::seaweed::{KEY, SECRET, Seaweed};

const BIN: &str = env!("CARGO_BIN_EXE_weft-cluster");

/// Child processes killed when the test ends, however it ends.
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn spawn(args: &[&str], env: &[(&str, String)], log: &Path) -> Child {
    let out = std::fs::File::create(log).unwrap();
    Command::new(BIN)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(out)
        .spawn()
        .unwrap()
}

fn wait_listening(port: u16) {
    let t0 = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(t0.elapsed() < Duration::from_secs(60), "nothing listens on port {port}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The rows of a result as CSV lines, sorted (the header stays first).
fn sorted_csv(res: &weft_store::SqlResult) -> Vec<String> {
    let text = render::to_csv(&res.schema, &res.batches);
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    if lines.len() > 1 {
        lines[1..].sort();
    }
    lines
}

/// Files anywhere under `dir`.
fn files_under(dir: &Path) -> usize {
    let Ok(rd) = std::fs::read_dir(dir) else { return 0 };
    rd.flatten()
        .map(|e| {
            let p: PathBuf = e.path();
            if p.is_dir() { files_under(&p) } else { 1 }
        })
        .sum()
}

/// A scheduler and two executors (with `env`, logs and work dirs under `tmp`): the processes,
/// the scheduler's URL and the executors' work dirs.
fn start_cluster(tmp: &Path, env: &[(&str, String)]) -> (Procs, String, Vec<PathBuf>) {
    let (sched, f1, g1, f2, g2) = (
        weft_testkit::free_port(),
        weft_testkit::free_port(),
        weft_testkit::free_port(),
        weft_testkit::free_port(),
        weft_testkit::free_port(),
    );
    let mut procs = Procs(Vec::new());
    let bind = format!("127.0.0.1:{sched}");
    procs.0.push(spawn(
        &["scheduler", "--bind", &bind, "--external-host", "127.0.0.1"],
        env,
        &tmp.join("scheduler.log"),
    ));
    wait_listening(sched);
    let mut work_dirs = Vec::new();
    for (i, (flight, grpc)) in [(f1, g1), (f2, g2)].into_iter().enumerate() {
        let work = tmp.join(format!("work{i}"));
        std::fs::create_dir_all(&work).unwrap();
        let (flight, grpc) = (flight.to_string(), grpc.to_string());
        procs.0.push(spawn(
            &[
                "executor",
                "--scheduler",
                &bind,
                "--bind-host",
                "127.0.0.1",
                "--external-host",
                "127.0.0.1",
                "--port",
                &flight,
                "--grpc-port",
                &grpc,
                "--concurrent-tasks",
                "2",
                "--work-dir",
                work.to_str().unwrap(),
            ],
            env,
            &tmp.join(format!("executor{i}.log")),
        ));
        work_dirs.push(work);
    }
    wait_listening(f1);
    wait_listening(f2);
    assert!(work_dirs.iter().all(|w| files_under(w) == 0));

    (procs, format!("df://127.0.0.1:{sched}"), work_dirs)
}

/// The cluster's answer to `sql` has the rows of `local` (on failure: the nodes' logs in `tmp`).
fn compare(
    sql: &str,
    local: &weft_store::SqlResult,
    remote: weft_cluster::Result<weft_store::SqlResult>,
    tmp: &Path,
) {
    let remote = remote.unwrap_or_else(|e| {
        let logs = ["scheduler.log", "executor0.log", "executor1.log"]
            .map(|f| std::fs::read_to_string(tmp.join(f)).unwrap_or_default());
        panic!("{sql}: {e}\n{}", logs.join("\n----\n"))
    });
    let (l, r) = (sorted_csv(local), sorted_csv(&remote));
    assert!(l.len() > 1, "{sql}: no rows to compare");
    assert_eq!(l, r, "{sql}");
}

const QUERIES: &[&str] = &[
    "SELECT service_name, count(*) AS n FROM spans GROUP BY service_name",
    "SELECT name, count(*) AS n, avg(duration_ns) AS avg_ns, median(duration_ns) AS p50, \
     min(duration_ns) AS lo, max(duration_ns) AS hi FROM spans GROUP BY name",
    "SELECT s.service_name, e.name, count(*) AS n FROM spans s JOIN span_events e \
     ON s.trace_id = e.trace_id AND s.span_id = e.span_id GROUP BY 1, 2",
    "SELECT attributes['http.route'] AS route, attributes['http.response.status_code'] AS code, count(*) AS n \
     FROM spans WHERE attributes['http.route'] IS NOT NULL GROUP BY 1, 2",
    "SELECT encode(trace_id, 'hex') AS t, encode(span_id, 'hex') AS s, resource_attributes['host.name'] AS host, \
     scope_name, start_time FROM spans WHERE status_code = 'error'",
    "SELECT count(*) AS n FROM span_links",
    "SELECT count(*) AS n FROM events",
];

#[test]
fn cluster_answers_as_the_single_node_store() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    // Several segments (no compaction), so that the scans have several files to spread over
    // the executors.
    let mut cfg = StoreConfig::new(&data);
    cfg.compaction_small_bytes = 0;
    let store = Store::open(cfg).unwrap();
    let mut shop = Shop::new(7, 1_700_000_000_000_000_000, 5_000_000);
    for _ in 0..4 {
        store.append(&shop.spans(5_000)).unwrap();
        store.flush().unwrap();
    }
    store.close().unwrap();
    drop(store);
    assert_eq!(weft_store::manifest::load(&data).unwrap().unwrap().segments.len(), 4);

    let (_procs, url, work_dirs) = start_cluster(tmp.path(), &[]);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let mut cfg = StoreConfig::new(&data);
    cfg.read_only = true;
    let single = Store::open(cfg).unwrap();
    let at = StoreAt::Dir(data.clone());
    for sql in QUERIES {
        let local = rt.block_on(single.sql(sql, 1_000_000)).unwrap();
        compare(sql, &local, rt.block_on(weft_cluster::query(&url, &at, sql, 1_000_000)), tmp.path());
    }

    // The executors ran the tasks (both of them): each task writes its output under its
    // executor's work dir.
    let per_executor: Vec<usize> = work_dirs.iter().map(|w| files_under(w)).collect();
    eprintln!("task output files per executor: {per_executor:?}");
    assert!(per_executor.iter().all(|n| *n > 0), "an executor ran no task: {per_executor:?}");

    // The binary's `query` gives the same answer as the library.
    let out = Command::new(BIN)
        .args(["query", "--cluster", &url, "--data", data.to_str().unwrap(), "--format", "csv", QUERIES[0]])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut got: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect();
    got[1..].sort();
    let want = sorted_csv(&rt.block_on(single.sql(QUERIES[0], 1_000_000)).unwrap());
    assert_eq!(got, want);

    // One bigger query, timed both ways (reported, never asserted).
    let big = QUERIES[2];
    let t0 = Instant::now();
    rt.block_on(single.sql(big, 1_000_000)).unwrap();
    let t_single = t0.elapsed();
    let t0 = Instant::now();
    rt.block_on(weft_cluster::query(&url, &at, big, 1_000_000)).unwrap();
    let t_cluster = t0.elapsed();
    eprintln!("join query over 20k spans: single node {t_single:?}, cluster {t_cluster:?}");
}

/// A collector writing to `url` (its own data directory, shared with no other process):
/// `segments` segments of `spans` shop spans each (`seed`).
fn bucket_writer(s3: &Seaweed, url: &str, seed: u64, segments: usize, spans: usize) -> (TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = StoreConfig::new(dir.path());
    cfg.compaction_small_bytes = 0;
    cfg.bucket = Some(weft_store::BucketConfig {
        url: url.into(),
        credentials_file: Some(s3.credentials(KEY, SECRET)),
    });
    let writer = Store::open(cfg).unwrap();
    let mut shop = Shop::new(seed, 1_700_000_000_000_000_000, 5_000_000);
    for _ in 0..segments {
        writer.append(&shop.spans(spans)).unwrap();
        // The bucket's first volumes may still be growing: the first flush is retried.
        let deadline = Instant::now() + Duration::from_secs(60);
        while let Err(e) = writer.flush() {
            assert!(Instant::now() < deadline, "SeaweedFS takes no writes: {e}\n{}", s3.log());
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    assert_eq!(writer.segments().len(), segments);
    (dir, writer)
}

#[test]
fn cluster_reads_the_segments_from_the_bucket() {
    let s3 = Seaweed::start();
    let url = "s3://weft/cluster";
    let (_writer_dir, writer) = bucket_writer(&s3, url, 11, 4, 3_000);

    // The cluster: other directories; the bucket's endpoint and credentials from the
    // environment (the client's from a credentials file).
    let nodes = tempfile::tempdir().unwrap();
    let (_procs, cluster, work_dirs) = start_cluster(nodes.path(), &s3.env(KEY, SECRET));
    let at = StoreAt::parse(url, Some(s3.credentials(KEY, SECRET)));
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    for sql in QUERIES {
        let local = rt.block_on(writer.sql(sql, 1_000_000)).unwrap();
        compare(sql, &local, rt.block_on(weft_cluster::query(&cluster, &at, sql, 1_000_000)), nodes.path());
    }
    let per_executor: Vec<usize> = work_dirs.iter().map(|w| files_under(w)).collect();
    assert!(per_executor.iter().all(|n| *n > 0), "an executor ran no task: {per_executor:?}");

    // The binary's `query` over the bucket.
    let out = Command::new(BIN)
        .args(["query", "--cluster", &cluster, "--data", url, "--format", "csv", QUERIES[0]])
        .arg("--credentials-file")
        .arg(s3.credentials(KEY, SECRET))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut got: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect();
    got[1..].sort();
    assert_eq!(got, sorted_csv(&rt.block_on(writer.sql(QUERIES[0], 1_000_000)).unwrap()));

    // A prefix without a manifest is named.
    let empty = StoreAt::parse("s3://weft/nothing-here", Some(s3.credentials(KEY, SECRET)));
    let e = rt.block_on(weft_cluster::query(&cluster, &empty, QUERIES[0], 10)).unwrap_err().to_string();
    assert!(e.contains("s3://weft/nothing-here") && e.contains("MANIFEST.json"), "{e}");
}

#[test]
fn cluster_reads_every_collector_under_a_bucket_url() {
    let s3 = Seaweed::start();
    // Three collectors under one root: one at the root itself, two a level down. Each has
    // segments 1 and 2 (segment ids, and so `resource_ref`s, repeat across collectors), and
    // its own services and hosts (seeds).
    let root = "s3://weft/root";
    let writers: Vec<(TempDir, Store)> =
        [(root.to_owned(), 21), (format!("{root}/c1"), 22), (format!("{root}/c2"), 23)]
            .iter()
            .map(|(url, seed)| bucket_writer(&s3, url, *seed, 2, 1_500))
            .collect();

    // Single node: a read-only store over the root serves the union.
    let reader_dir = tempfile::tempdir().unwrap();
    let mut cfg = StoreConfig::new(reader_dir.path());
    cfg.read_only = true;
    cfg.bucket = Some(weft_store::BucketConfig {
        url: root.into(),
        credentials_file: Some(s3.credentials(KEY, SECRET)),
    });
    let union = Store::open(cfg).unwrap();
    assert_eq!(union.segments().len(), 6);

    let nodes = tempfile::tempdir().unwrap();
    let (_procs, cluster, _work_dirs) = start_cluster(nodes.path(), &s3.env(KEY, SECRET));
    let at = StoreAt::parse(root, Some(s3.credentials(KEY, SECRET)));
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    // A resource column grouped by: a span joined with another collector's resources shows
    // as rows too many, or under another host.
    let by_resource = "SELECT service_name, resource_attributes['host.name'] AS host, \
                       resource_dropped_attributes_count AS dropped, count(*) AS n FROM spans GROUP BY 1, 2, 3";
    // The tables in a local session first: the same rows.
    let ctx = weft_store::datafusion::prelude::SessionContext::new();
    let reg = weft_cluster::register_store(&ctx, &at).unwrap();
    assert_eq!((reg.manifests, reg.segments), (3, 6));
    let want = rt.block_on(union.sql(by_resource, 1_000_000)).unwrap();
    let batches = rt.block_on(async { ctx.sql(by_resource).await?.collect().await }).unwrap();
    let got = weft_store::SqlResult { schema: want.schema.clone(), batches, truncated: false };
    assert_eq!(sorted_csv(&want), sorted_csv(&got));
    for sql in QUERIES.iter().chain(&[by_resource]) {
        let local = rt.block_on(union.sql(sql, 1_000_000)).unwrap();
        compare(sql, &local, rt.block_on(weft_cluster::query(&cluster, &at, sql, 1_000_000)), nodes.path());
    }
    // The union is the collectors' spans, each once.
    let count = "SELECT count(*) AS n FROM spans";
    let n = |r: weft_store::SqlResult| sorted_csv(&r)[1].parse::<u64>().unwrap();
    let per_writer: Vec<u64> =
        writers.iter().map(|(_, w)| n(rt.block_on(w.sql(count, 10)).unwrap())).collect();
    assert!(per_writer.iter().all(|c| *c >= 3_000), "{per_writer:?}");
    let all = n(rt.block_on(weft_cluster::query(&cluster, &at, count, 10)).unwrap());
    assert_eq!(all, per_writer.iter().sum::<u64>());

    // A collector whose manifest cannot be read fails the query, named (the read-only store
    // would serve the others).
    use weft_store::datafusion::object_store::ObjectStoreExt;
    let store = weft_store::s3_store("weft", Some(&s3.credentials(KEY, SECRET))).unwrap();
    let path = weft_store::datafusion::object_store::path::Path::from("root/broken/MANIFEST.json");
    rt.block_on(store.put(&path, b"{not json".to_vec().into())).unwrap();
    let e = rt.block_on(weft_cluster::query(&cluster, &at, count, 10)).unwrap_err().to_string();
    assert!(e.contains("s3://weft/root/broken") && e.contains("MANIFEST.json"), "{e}");
}

#[test]
fn tables_registered_in_a_local_session_answer_as_the_store() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(StoreConfig::new(tmp.path())).unwrap();
    let mut shop = Shop::new(3, 1_700_000_000_000_000_000, 5_000_000);
    for _ in 0..2 {
        store.append(&shop.spans(500)).unwrap();
        store.flush().unwrap();
    }
    store.close().unwrap();
    let ctx = weft_store::datafusion::prelude::SessionContext::new();
    let reg = weft_cluster::register_store(&ctx, &StoreAt::Dir(tmp.path().to_owned())).unwrap();
    assert_eq!(reg.segments, 2);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    for sql in QUERIES.iter().chain(&["SELECT * FROM spans", "SELECT * FROM span_events"]) {
        let want = rt.block_on(store.sql(sql, 1_000_000)).unwrap();
        let batches = rt.block_on(async { ctx.sql(sql).await?.collect().await }).unwrap();
        let got = weft_store::SqlResult { schema: want.schema.clone(), batches, truncated: false };
        assert_eq!(sorted_csv(&want), sorted_csv(&got), "{sql}");
    }
}

#[test]
fn a_directory_without_manifest_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let ctx = weft_store::datafusion::prelude::SessionContext::new();
    let e = weft_cluster::register_store(&ctx, &StoreAt::Dir(tmp.path().to_owned())).unwrap_err().to_string();
    assert!(e.contains(&tmp.path().display().to_string()) && e.contains("MANIFEST.json"), "{e}");
}
