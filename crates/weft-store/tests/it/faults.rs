//! Faults: damaged WAL records, failed fsyncs (through the WAL's file seam), a lost manifest.
//! Nothing acknowledged is lost, and nothing is acknowledged that a failure may have lost.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use datafusion::arrow::array::{Array, Int64Array};
use weft_store::wal::{OsFiles, WalFiles, WalIo};
use weft_store::{FsyncPolicy, Store, StoreError};

use crate::{block, config, open, spans};

fn count(store: &Store) -> i64 {
    let r = block(store.sql("SELECT count(*) FROM spans", 10)).unwrap();
    r.batches[0].column(0).as_any().downcast_ref::<Int64Array>().unwrap().value(0)
}

fn only_wal_file(dir: &Path) -> std::path::PathBuf {
    let files: Vec<_> = std::fs::read_dir(dir.join("wal")).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files[0].clone()
}

#[test]
fn a_corrupt_record_in_the_middle_of_a_wal_loses_only_itself() {
    let dir = tempfile::tempdir().unwrap();
    let all = spans(30, 400);
    {
        let store = open(dir.path());
        for part in all.chunks(100) {
            store.append(part).unwrap();
        }
    }
    // Flip a byte inside the second record: [8-byte file header][len][crc][payload]...
    let wal = only_wal_file(dir.path());
    let mut bytes = std::fs::read(&wal).unwrap();
    let first_len = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
    let second = 8 + 8 + first_len;
    bytes[second + 8 + 100] ^= 0x40;
    std::fs::write(&wal, &bytes).unwrap();

    let store = open(dir.path());
    let want = (all.len() - 100) as i64;
    assert_eq!(count(&store), want, "the records after the bad one are replayed");
    let m = store.metrics();
    assert_eq!(m.wal_records_replayed.load(Ordering::Relaxed), all.chunks(100).count() as u64 - 1);
    assert_eq!(m.wal_records_quarantined.load(Ordering::Relaxed), 1);
    assert_eq!(m.wal_records_torn.load(Ordering::Relaxed), 0);
    let kept: Vec<_> =
        std::fs::read_dir(dir.path().join("quarantine")).unwrap().map(|e| e.unwrap()).collect();
    assert_eq!(kept.len(), 1);
    let name = kept[0].file_name().into_string().unwrap();
    let wal_name = wal.file_name().unwrap().to_str().unwrap();
    assert_eq!(name, format!("{wal_name}.{second:012}.bad"));
    store.flush().unwrap();
    drop(store);
    assert_eq!(count(&open(dir.path())), want);
}

/// What the fake file system does to the WAL's fsyncs.
#[derive(Debug, Default)]
struct Faults {
    /// The next fsync fails, after waiting while `hold` is set. The one after it succeeds, as
    /// Linux's does after a failure (the dirty pages it dropped are lost all the same).
    fail_next_sync: AtomicBool,
    hold: Mutex<bool>,
    released: Condvar,
    /// A failing fsync has started.
    failing: AtomicBool,
    writes: AtomicUsize,
    syncs: AtomicUsize,
    /// Writes fail as on a full disk (ENOSPC) while set, after writing half their bytes (as a
    /// short write on a filling disk does).
    disk_full: AtomicBool,
    /// The lengths WAL files were cut to.
    cuts: Mutex<Vec<u64>>,
}

#[derive(Debug, Clone, Default)]
struct FaultyFiles(Arc<Faults>);

struct FaultyFile {
    file: Box<dyn WalIo>,
    faults: Arc<Faults>,
}

impl WalFiles for FaultyFiles {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WalIo>> {
        Ok(Box::new(FaultyFile { file: OsFiles.create(path)?, faults: self.0.clone() }))
    }
}

impl WalIo for FaultyFile {
    fn write_all(&self, buf: &[u8]) -> io::Result<()> {
        self.faults.writes.fetch_add(1, Ordering::SeqCst);
        if self.faults.disk_full.load(Ordering::SeqCst) {
            self.file.write_all(&buf[..buf.len() / 2])?;
            return Err(io::Error::new(io::ErrorKind::StorageFull, "No space left on device (injected)"));
        }
        self.file.write_all(buf)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.faults.syncs.fetch_add(1, Ordering::SeqCst);
        if self.faults.fail_next_sync.swap(false, Ordering::SeqCst) {
            self.faults.failing.store(true, Ordering::SeqCst);
            let mut held = self.faults.hold.lock().unwrap();
            while *held {
                held = self.faults.released.wait(held).unwrap();
            }
            return Err(io::Error::other("injected fsync failure (EIO)"));
        }
        self.file.sync_data()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.faults.cuts.lock().unwrap().push(len);
        self.file.set_len(len)
    }
}

fn faulty_store(dir: &Path, fsync: FsyncPolicy) -> (Store, Arc<Faults>) {
    let mut c = config(dir);
    c.fsync = fsync;
    faulty_store_with(c)
}

fn faulty_store_with(mut c: weft_store::StoreConfig) -> (Store, Arc<Faults>) {
    let files = FaultyFiles::default();
    c.wal_files = Arc::new(files.clone());
    (Store::open(c).unwrap(), files.0)
}

fn wait_for(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(20), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// An appender waiting for someone else's fsync that fails must not sync again itself,
/// succeed, and acknowledge: its record may be in the pages the failed fsync dropped.
#[test]
fn a_failed_fsync_is_not_masked_by_a_waiting_appender() {
    let dir = tempfile::tempdir().unwrap();
    let all = spans(31, 300);
    {
        let (store, faults) = faulty_store(dir.path(), FsyncPolicy::Always);
        store.append(&all[..100]).unwrap();
        *faults.hold.lock().unwrap() = true;
        faults.fail_next_sync.store(true, Ordering::SeqCst);
        std::thread::scope(|s| {
            let a = s.spawn(|| store.append(&all[100..200]));
            wait_for("the first appender's fsync", || faults.failing.load(Ordering::SeqCst));
            let writes = faults.writes.load(Ordering::SeqCst);
            let b = s.spawn(|| store.append(&all[200..]));
            wait_for("the second appender's write", || faults.writes.load(Ordering::SeqCst) > writes);
            // Let it reach the wait for the fsync in flight.
            std::thread::sleep(Duration::from_millis(200));
            *faults.hold.lock().unwrap() = false;
            faults.released.notify_all();
            assert!(a.join().unwrap().is_err(), "the failed fsync is reported");
            let b = b.join().unwrap();
            assert!(b.is_err(), "an append covered by a failed fsync was acknowledged: {b:?}");
        });
        let later = store.append(&all[..1]);
        assert!(matches!(later, Err(StoreError::Poisoned(_))), "{later:?}");
    }
    // Reopened, the WAL accepts appends again; what was acknowledged is there.
    let store = open(dir.path());
    assert!(count(&store) >= 100);
    store.append(&all[..1]).unwrap();
}

/// A failed fsync of the old file when the WAL rotates (freezing the buffer for a flush):
/// nothing is acknowledged after it, although the next fsync would succeed.
#[test]
fn a_failed_fsync_at_rotation_stops_acknowledgements() {
    let dir = tempfile::tempdir().unwrap();
    let all = spans(32, 200);
    {
        let (store, faults) = faulty_store(dir.path(), FsyncPolicy::Always);
        store.append(&all[..100]).unwrap();
        faults.fail_next_sync.store(true, Ordering::SeqCst);
        assert!(store.flush().is_err(), "the rotation's fsync failed");
        let later = store.append(&all[100..]);
        assert!(
            matches!(later, Err(StoreError::Poisoned(_))),
            "acknowledged after a failed fsync: {later:?}"
        );
    }
    let store = open(dir.path());
    assert_eq!(count(&store), 100);
    store.append(&all[100..]).unwrap();
    assert_eq!(count(&store), all.len() as i64);
}

fn segment_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir.join("segments"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

/// A lost MANIFEST.json never makes open delete the segments: it refuses, naming the
/// directory and the files; with the manifest back, every span is there.
#[test]
fn a_missing_manifest_deletes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let all = spans(33, 300);
    {
        let store = open(dir.path());
        store.append(&all[..150]).unwrap();
        store.flush().unwrap();
        store.append(&all[150..]).unwrap();
        store.close().unwrap();
    }
    let files = segment_files(dir.path());
    assert!(files.len() >= 2, "{files:?}");
    let manifest = dir.path().join("MANIFEST.json");
    let saved = std::fs::read(&manifest).unwrap();
    std::fs::remove_file(&manifest).unwrap();
    match Store::open(config(dir.path())) {
        Err(e) => {
            let e = e.to_string();
            assert!(e.contains("MANIFEST.json") && e.contains("segments") && e.contains(&files[0]), "{e}");
        }
        Ok(s) => panic!("opened without its manifest: {} spans", count(&s)),
    }
    assert_eq!(segment_files(dir.path()), files, "no segment file deleted");
    std::fs::write(&manifest, saved).unwrap();
    assert_eq!(count(&open(dir.path())), all.len() as i64);
}

/// A new store writes its manifest at once: a crash in its first flush (segment files
/// written, manifest not yet replaced) still opens, the WAL holding the data.
#[test]
fn a_new_store_has_a_manifest_before_its_first_segment() {
    let dir = tempfile::tempdir().unwrap();
    let all = spans(34, 100);
    {
        let store = open(dir.path());
        assert!(dir.path().join("MANIFEST.json").exists());
        store.append(&all).unwrap();
    }
    let orphan = dir.path().join("segments").join("seg-0000000001-spans.parquet");
    std::fs::write(&orphan, b"partial").unwrap();
    let store = open(dir.path());
    assert_eq!(count(&store), all.len() as i64);
    assert!(!orphan.exists(), "leftover of the interrupted flush removed");
}

/// Issue 18 item 1: a request of tiny spans that all share one large instrumentation scope
/// expands far beyond its wire size (the scope is a column of every span row). Such an append
/// is refused alone, before anything is written; the store is not poisoned and takes the
/// next append.
#[test]
fn an_append_past_the_per_append_limit_is_refused_alone() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.max_append_bytes = 1 << 20;
    let store = Store::open(cfg).unwrap();
    let scope = Arc::new(weft_model::Scope { name: "x".repeat(4096), ..weft_model::Scope::default() });
    let mut bomb = spans(32, 2000);
    for s in &mut bomb {
        s.scope = Arc::clone(&scope);
    }
    match store.append(&bomb) {
        Err(StoreError::AppendTooLarge { bytes, limit, .. }) => assert!(bytes > limit && limit == 1 << 20),
        other => panic!("expected AppendTooLarge, got {other:?}"),
    }
    assert_eq!(store.metrics().appends_too_large.load(Ordering::Relaxed), 1);
    let fine = spans(33, 100);
    store.append(&fine).unwrap();
    assert_eq!(count(&store), fine.len() as i64);
    drop(store);
    // Nothing of the refused append reached the WAL.
    assert_eq!(count(&open(dir.path())), fine.len() as i64);
}

/// Issue 18 item 8: `append_synced` returns only after an fsync of the WAL holding its spans,
/// whatever the policy — also under `Never` (nothing else fsyncs then), when its own append
/// filled the buffer and rotated the WAL (a rotation under `Never` does not fsync the file it
/// leaves).
#[test]
fn append_synced_is_fsynced_even_under_never() {
    for rotate in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let mut c = config(dir.path());
        c.fsync = FsyncPolicy::Never;
        if rotate {
            c.flush_bytes = 1;
        }
        let (store, faults) = faulty_store_with(c);
        let batch = spans(60, 20);
        let opened = faults.syncs.load(Ordering::SeqCst);
        store.append(&batch).unwrap();
        let before = faults.syncs.load(Ordering::SeqCst);
        if !rotate {
            assert_eq!(before, opened, "a plain append under Never is not fsynced");
        }
        store.append_synced(&batch).unwrap();
        assert!(faults.syncs.load(Ordering::SeqCst) > before, "rotating {rotate}: not fsynced");
    }
}

/// Issue 18 item 4: a full disk (ENOSPC on a WAL write, through the file seam) stops the
/// acknowledgements — the failing append and every one after it fail (the receivers answer 503)
/// — and loses nothing acknowledged before it. Reopening the store (a restart of weft serve)
/// takes appends again, with everything acknowledged still there.
#[test]
fn a_full_disk_stops_acknowledgements_and_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let all = spans(61, 300);
    let (store, faults) = faulty_store(dir.path(), FsyncPolicy::Always);
    store.append(&all[..100]).unwrap();
    faults.disk_full.store(true, Ordering::SeqCst);
    assert!(store.append(&all[100..200]).is_err(), "acknowledged on a full disk");
    faults.disk_full.store(false, Ordering::SeqCst);
    // Space is back, but what the failed write left in the WAL is unknown: still refused.
    assert!(matches!(store.append(&all[100..200]), Err(StoreError::Poisoned(_))));
    drop(store);
    let store = open(dir.path());
    assert_eq!(count(&store), 100, "the acknowledged spans, and nothing of the refused ones");
    store.append(&all[100..]).unwrap();
    assert_eq!(count(&store), 300);
}

/// Issue 18: when space returns the store takes appends again by itself, without a restart.
/// The failed write left half a record in the WAL; it is cut when the WAL goes on in a new
/// file (never replayed), and a later open finds every acknowledged span once.
#[test]
fn after_a_full_disk_appends_resume_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let all = spans(62, 400);
    let mut c = config(dir.path());
    c.fsync = FsyncPolicy::Always;
    c.wal_retry_interval = Duration::from_millis(10);
    let (store, faults) = faulty_store_with(c);
    store.append(&all[..100]).unwrap();
    let wal = only_wal_file(dir.path());
    let whole = std::fs::metadata(&wal).unwrap().len();
    faults.disk_full.store(true, Ordering::SeqCst);
    assert!(store.append(&all[100..200]).is_err(), "acknowledged on a full disk");
    assert!(std::fs::metadata(&wal).unwrap().len() > whole, "half a record written");
    // The background retries fail while the disk is full (the new file's header cannot be
    // written), and appends are refused meanwhile.
    let writes = faults.writes.load(Ordering::SeqCst);
    wait_for("two retries on the full disk", || faults.writes.load(Ordering::SeqCst) >= writes + 2);
    assert!(matches!(store.append(&all[100..200]), Err(StoreError::Poisoned(_))));
    let reopened = || store.metrics().wal_reopened.load(Ordering::SeqCst);
    assert_eq!(reopened(), 0);
    faults.disk_full.store(false, Ordering::SeqCst);
    wait_for("the WAL to go on in a new file", || reopened() == 1);
    let cuts = faults.cuts.lock().unwrap().clone();
    assert!(
        !cuts.is_empty() && cuts.iter().all(|c| *c == whole),
        "cut back to its last whole record: {cuts:?}"
    );
    store.append(&all[100..]).unwrap();
    assert_eq!(count(&store), all.len() as i64);
    drop(store);
    let store = open(dir.path());
    assert_eq!(count(&store), all.len() as i64, "the acknowledged spans, once");
    let m = store.metrics();
    assert_eq!(m.wal_records_torn.load(Ordering::Relaxed), 0);
    assert_eq!(m.wal_records_quarantined.load(Ordering::Relaxed), 0);
}

/// A tmpfs of 2 MiB, unmounted on drop (mounting needs root: `None` otherwise).
struct SmallDisk(tempfile::TempDir);

impl SmallDisk {
    fn mount() -> Option<SmallDisk> {
        let dir = tempfile::tempdir().ok()?;
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=2m", "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(SmallDisk(dir))
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(self.0.path()).status();
    }
}

/// The same on a real full file system: a 2 MiB tmpfs filled by a ballast file and the WAL.
/// Appends fail with ENOSPC and nothing is acknowledged; once the ballast is deleted the store
/// acknowledges again by itself, and a reopen finds every acknowledged span, once. Skipped
/// unless the tests run as root.
#[test]
fn a_real_full_disk_recovers_when_space_returns() {
    let Some(disk) = SmallDisk::mount() else {
        eprintln!("skipped: mounting a tmpfs needs root");
        return;
    };
    let data = disk.0.path().join("data");
    let ballast = disk.0.path().join("ballast");
    std::fs::write(&ballast, vec![1u8; 1536 << 10]).unwrap();
    let mut c = config(&data);
    c.fsync = FsyncPolicy::Always;
    c.wal_retry_interval = Duration::from_millis(10);
    let store = Store::open(c.clone()).unwrap();
    let all = spans(63, 20_000);
    let mut acked = 0;
    let refused = all.chunks(100).position(|part| match store.append(part) {
        Ok(()) => {
            acked += part.len();
            false
        }
        Err(_) => true,
    });
    assert!(refused.is_some() && acked > 0, "the disk never filled ({acked} spans taken)");
    assert!(store.append(&all[acked..acked + 100]).is_err(), "acknowledged on a full disk");
    std::fs::remove_file(&ballast).unwrap();
    wait_for("the WAL to go on in a new file", || store.metrics().wal_reopened.load(Ordering::SeqCst) >= 1);
    store.append(&all[acked..acked + 100]).unwrap();
    assert_eq!(count(&store), acked as i64 + 100);
    drop(store);
    let store = Store::open(c).unwrap();
    assert_eq!(count(&store), acked as i64 + 100, "every acknowledged span, once");
    assert_eq!(store.metrics().wal_records_torn.load(Ordering::Relaxed), 0);
}
