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
    let old = weft_synth::shop::Shop::new(1, now - 3 * 3600 * 1_000_000_000, 1_000_000).spans(100);
    let fresh = weft_synth::shop::Shop::new(2, now - 60 * 1_000_000_000, 1_000_000).spans(100);
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
        let s = weft_synth::shop::Shop::new(10 + i, now - (50 - i) * 1_000_000_000, 1_000_000).spans(100);
        store.append(&s).unwrap();
        store.flush().unwrap();
    }
    store.apply_retention().unwrap();
    let total: u64 = store.segments().iter().map(|s| s.files.iter().map(|f| f.bytes).sum::<u64>()).sum();
    assert!(total <= one * 2 + one / 2 + one / 2, "{total}");
    assert!(store.segments().len() >= 2);
    assert!(store.trace(fresh[0].trace_id).unwrap().is_empty(), "the oldest went first");
}

/// Rewrites segment `file` without its `name` column, as weft wrote events before it had one,
/// and fixes the file's size in the manifest.
fn drop_name_column(dir: &std::path::Path, file: &str) {
    use datafusion::parquet::arrow::ArrowWriter;
    use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let path = dir.join("segments").join(file);
    let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&path).unwrap())
        .unwrap()
        .build()
        .unwrap();
    let batches: Vec<_> = reader.map(Result::unwrap).collect();
    let schema = batches[0].schema();
    let keep: Vec<usize> = (0..schema.fields().len()).filter(|&i| schema.field(i).name() != "name").collect();
    let old_schema = std::sync::Arc::new(schema.project(&keep).unwrap());
    let mut w = ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), old_schema, None).unwrap();
    for b in &batches {
        w.write(&b.project(&keep).unwrap()).unwrap();
    }
    w.close().unwrap();
    let bytes = std::fs::metadata(&path).unwrap().len();
    let manifest = dir.join("MANIFEST.json");
    let mut m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    for seg in m["segments"].as_array_mut().unwrap() {
        for f in seg["files"].as_array_mut().unwrap() {
            if f["file"] == file {
                f["bytes"] = bytes.into();
            }
        }
    }
    std::fs::write(&manifest, serde_json::to_string_pretty(&m).unwrap()).unwrap();
}

#[test]
fn events_segments_written_before_the_name_column_are_read_and_compacted_with_it() {
    use datafusion::arrow::array::{Array, StringArray};
    use weft_model::event::{EventKind, TracepointEvent};
    use weft_model::{Attributes, Event, SourceId};
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path())).unwrap();
    // Events as the previous conversion stored them: the event's name first in its fields.
    let old_style = |i: u64, first: bool| {
        let mut fields = Attributes::new();
        if first {
            fields.push("name", "app:login");
        }
        fields.push("name", format!("user{i}"));
        Event {
            time_ns: 1_000 + i,
            raw_time: i,
            source: SourceId(0),
            kind: EventKind::Tracepoint(TracepointEvent {
                name: "app:login".into(),
                cpu: None,
                pid: None,
                tid: None,
                fields,
            }),
        }
    };
    for part in [0..10u64, 10..20] {
        store.append_events(&part.map(|i| old_style(i, true)).collect::<Vec<_>>()).unwrap();
        store.flush().unwrap();
    }
    let files: Vec<String> = store
        .segments()
        .iter()
        .flat_map(|s| s.files.iter().filter(|f| f.table == "events").map(|f| f.file.clone()))
        .collect();
    assert_eq!(files.len(), 2);
    drop(store);
    for f in &files {
        drop_name_column(dir.path(), f);
    }
    let mut c = config(dir.path());
    c.compaction_min_inputs = 2;
    let store = Store::open(c).unwrap();
    store.append_events(&(20..30).map(|i| old_style(i, false)).collect::<Vec<_>>()).unwrap();
    let names = |store: &Store| -> Vec<(Option<String>, String)> {
        let r = block(store.sql("SELECT name, fields['name'] FROM events ORDER BY time", 100)).unwrap();
        let mut out = Vec::new();
        for b in &r.batches {
            let n = b.column(0).as_any().downcast_ref::<StringArray>().unwrap();
            let f = b.column(1).as_any().downcast_ref::<StringArray>().unwrap();
            for i in 0..b.num_rows() {
                out.push((n.is_valid(i).then(|| n.value(i).to_owned()), f.value(i).to_owned()));
            }
        }
        out
    };
    // Readable as they are (without a name until compacted), next to buffered events.
    let got = names(&store);
    assert_eq!(got.len(), 30);
    assert!(got[..20].iter().all(|(n, _)| n.is_none()), "{got:?}");
    assert_eq!(got[25], (Some("app:login".to_owned()), "user25".to_owned()));
    // Compaction gives them their name, which leaves their fields.
    assert!(store.compact().unwrap());
    let got = names(&store);
    let want: Vec<_> = (0..30).map(|i| (Some("app:login".to_owned()), format!("user{i}"))).collect();
    assert_eq!(got, want);
    let r = block(store.sql("SELECT max(cardinality(fields)) FROM events", 10)).unwrap();
    let n = r.batches[0]
        .column(0)
        .as_any()
        .downcast_ref::<datafusion::arrow::array::UInt64Array>()
        .map(|a| a.value(0));
    assert_eq!(n, Some(1));
}
