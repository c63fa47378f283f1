//! weft-probe integration tests (one binary). Tests that touch the process-wide runtime take
//! [`lock`] so that drains of one test never consume another test's records.

mod capture;
mod consumer;
mod multiprocess;
mod props;
mod query;
mod recording;
mod registry;
mod spans;
mod tracing_layer;

use std::sync::{Mutex, MutexGuard, OnceLock};
use weft_probe::consumer::Segment;

static LOCK: Mutex<()> = Mutex::new(());
static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();

/// Serialise runtime tests and make sure the process segment exists (shared mode, in a
/// private temporary directory, 1 MiB rings).
pub fn lock() -> MutexGuard<'static, ()> {
    let g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let dir = DIR.get_or_init(|| {
        let d = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(d.path(), std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .expect("chmod");
        d
    });
    weft_probe::init(weft_probe::Config {
        mode: weft_probe::Mode::Shm,
        dir: Some(dir.path().to_path_buf()),
        rings: 16,
        ring_size: 1 << 20,
        service: Some("weft-probe-tests".into()),
        ..Default::default()
    });
    g
}

/// A consumer on this process's segment (through the shared file, as an agent would).
pub fn own_segment() -> Segment {
    let path = weft_probe::segment::segment_path().expect("the tests run in shared mode");
    Segment::open(&path).expect("attach to our own segment")
}

/// Drain everything pending and drop it.
pub fn drain_all(seg: &mut Segment) {
    let rep = seg.drain(|_| {});
    assert!(rep.errors.is_empty(), "{:?}", rep.errors);
}
