//! Retention and compaction.

use std::time::Duration;

use weft_store::Store;

use crate::{block, canon, config, spans};

#[test]
fn compaction_merges_small_segments_and_keeps_every_span() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.compaction_min_inputs = 3;
    let store = Store::open(c).unwrap();
    let all = spans(20, 600);
    for part in all.chunks(all.len() / 6 + 1) {
        store.append(part).unwrap();
        store.flush().unwrap();
    }
    let before = store.segments();
    assert_eq!(before.len(), 6);
    // A query holding the old segments keeps working while compaction retires them.
    let ctx = store.session().unwrap();
    assert!(store.compact().unwrap());
    let after = store.segments();
    assert!(after.len() < before.len(), "{} -> {}", before.len(), after.len());
    assert!(after.iter().any(|s| s.level == 1));
    // Compaction does not make its spans younger to retention.
    let newest_input = before.iter().map(|s| s.written_ns()).max().unwrap();
    for s in after.iter().filter(|s| s.level == 1) {
        assert!(s.written_ns() <= newest_input && s.written_ns() < s.created_ns, "{s:?}");
    }
    let df = block(ctx.sql("SELECT count(*) FROM spans")).unwrap();
    let old = block(df.collect()).unwrap();
    let n =
        old[0].column(0).as_any().downcast_ref::<datafusion::arrow::array::Int64Array>().unwrap().value(0);
    assert_eq!(n as usize, all.len(), "the old snapshot still reads its (retired) files");
    drop(ctx);
    // Retired files are gone once nobody reads them; every span is still there exactly once.
    let files: Vec<_> =
        std::fs::read_dir(dir.path().join("segments")).unwrap().map(|e| e.unwrap().file_name()).collect();
    let live: Vec<_> = after.iter().flat_map(|s| s.files.iter().map(|f| f.file.clone())).collect();
    assert_eq!(files.len(), live.len(), "{files:?} vs {live:?}");
    for t in [all[0].trace_id, all[599].trace_id] {
        let want: Vec<_> = all.iter().filter(|s| s.trace_id == t).cloned().collect();
        assert_eq!(canon(store.trace(t).unwrap()), canon(want));
    }
    let ops_before = block(store.operations_all()).unwrap();
    assert!(!ops_before.is_empty());
    drop(store);
    let store = Store::open(config(dir.path())).unwrap();
    assert_eq!(store.segments(), after);
    assert_eq!(block(store.operations_all()).unwrap(), ops_before);
}

#[test]
fn retention_by_age_and_by_size() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.retention_age = Some(Duration::from_secs(3600));
    let store = Store::open(c).unwrap();
    let now = weft_model::time::now_unix_nanos();
    let old = weft_store::synth::Synth::new(1, now - 3 * 3600 * 1_000_000_000, 1_000_000).spans(100);
    let fresh = weft_store::synth::Synth::new(2, now - 60 * 1_000_000_000, 1_000_000).spans(100);
    store.append(&old).unwrap();
    store.flush().unwrap();
    store.append(&fresh).unwrap();
    store.flush().unwrap();
    // Spans stamped 3 hours back (a skewed clock) were written just now: they stay.
    assert_eq!(store.apply_retention().unwrap(), 0);
    assert_eq!(store.segments().len(), 2);
    drop(store);
    // Age goes by when weft wrote them: as if the first segment had been written 3 hours ago.
    let path = dir.path().join(weft_store::manifest::MANIFEST);
    let mut m: weft_store::Manifest = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    m.segments[0].spans_written_ns = now - 3 * 3600 * 1_000_000_000;
    weft_store::manifest::store(dir.path(), &m).unwrap();
    let mut c = config(dir.path());
    c.retention_age = Some(Duration::from_secs(3600));
    let store = Store::open(c).unwrap();
    assert_eq!(store.apply_retention().unwrap(), 1);
    let segs = store.segments();
    assert_eq!(segs.len(), 1);
    assert!(store.trace(old[0].trace_id).unwrap().is_empty());
    assert!(!store.trace(fresh[0].trace_id).unwrap().is_empty());
    drop(store);

    // Size: keep the newest segments within the byte budget.
    let mut c = config(dir.path());
    let one = segs[0].files.iter().map(|f| f.bytes).sum::<u64>();
    c.retention_bytes = Some(one * 2 + one / 2);
    let store = Store::open(c).unwrap();
    for i in 0..3 {
        let s = weft_store::synth::Synth::new(10 + i, now - (50 - i) * 1_000_000_000, 1_000_000).spans(100);
        store.append(&s).unwrap();
        store.flush().unwrap();
    }
    store.apply_retention().unwrap();
    let total: u64 = store.segments().iter().map(|s| s.files.iter().map(|f| f.bytes).sum::<u64>()).sum();
    assert!(total <= one * 2 + one / 2 + one / 2, "{total}");
    assert!(store.segments().len() >= 2);
    assert!(store.trace(fresh[0].trace_id).unwrap().is_empty(), "the oldest went first");
}
