//! A spool chunk left on disk (torn by a crash, or damaged) is untrusted: opening the spool
//! cuts what does not check out, every batch read back is intact and in order, the bound holds,
//! and nothing panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::time::Duration;
use weft_agent::spool::{Spool, SpoolConfig};

fuzz_target!(|data: &[u8]| {
    let Ok(dir) = tempfile::tempdir() else { return };
    // first byte: where the cursor points; the rest: the chunk
    let (cur, chunk) = data.split_first().map(|(c, r)| (*c as u64, r)).unwrap_or((0, &[][..]));
    if std::fs::write(dir.path().join("0000000000000001.chunk"), chunk).is_err() {
        return;
    }
    let _ = std::fs::write(dir.path().join("cursor"), format!("v1 1 {} 0\n", cur * 8));
    let cfg = SpoolConfig::new(dir.path(), 1 << 20);
    let Ok(s) = Spool::open(cfg) else { return };
    let pending = s.stats().pending_batches;
    let mut read = 0u64;
    let mut bytes = 0usize;
    while let Ok(Some(b)) = s.next(Duration::ZERO) {
        read += 1;
        bytes += b.payload.len() + 24;
        s.ack(&b).expect("ack");
    }
    // what open() counted is exactly what comes out, and it fits in the chunk
    assert_eq!(read, pending);
    assert!(bytes <= chunk.len());
    assert_eq!(s.stats().pending_batches, 0);
    drop(s);
    // acknowledged means gone: a reopened spool has nothing pending
    let Ok(s) = Spool::open(SpoolConfig::new(dir.path(), 1 << 20)) else { return };
    assert_eq!(s.stats().pending_batches, 0);
    let _ = s.append(b"after", 1, false);
    assert!(s.stats().bytes <= 1 << 20);
});
