//! Segments store each distinct resource once (a `span_resources` file); every read — trace
//! lookups, SQL, compaction — sees the resource on each span, also for segments written before.

use std::collections::{BTreeMap, BTreeSet};

use datafusion::arrow::util::display::array_value_to_string;
use weft_model::Span;
use weft_store::Store;

use crate::{block, canon, config, spans};

/// Rows of a query as text, one `Vec<String>` per row.
fn rows(store: &Store, sql: &str) -> Vec<Vec<String>> {
    let ctx = store.session().unwrap();
    let batches = block(async { ctx.sql(sql).await.unwrap().collect().await.unwrap() });
    let mut out = Vec::new();
    for b in &batches {
        for r in 0..b.num_rows() {
            out.push((0..b.num_columns()).map(|c| array_value_to_string(b.column(c), r).unwrap()).collect());
        }
    }
    out
}

/// A span's resource and instrumentation scope, which segments store once per distinct pair.
fn resource_key(s: &Span) -> String {
    format!(
        "{:?}",
        (&s.resource.attributes, &s.resource.schema_url, s.resource.dropped_attributes_count, &s.scope)
    )
}

/// Everything a reader can ask about resources agrees with the spans that were appended.
fn check(store: &Store, all: &[Span]) {
    // SQL, grouped by resource attributes.
    let mut want: BTreeMap<(String, String), usize> = BTreeMap::new();
    for s in all {
        let get = |k: &str| s.resource.attributes.get(k).map(|v| v.to_string()).unwrap_or_default();
        *want.entry((get("service.name"), get("process.pid"))).or_default() += 1;
    }
    let got: BTreeMap<(String, String), usize> = rows(
        store,
        "SELECT resource_attributes['service.name'], resource_attributes['process.pid'], count(*) \
         FROM spans GROUP BY 1, 2",
    )
    .into_iter()
    .map(|r| ((r[0].clone(), r[1].clone()), r[2].parse().unwrap()))
    .collect();
    assert_eq!(got, want);
    // A filter on a resource column, with and without resource columns in the output.
    let host = "app-1";
    let n = all
        .iter()
        .filter(|s| s.resource.attributes.get("host.name").map(|v| v.to_string()) == Some(host.into()))
        .count();
    assert!(n > 0);
    let q = format!("SELECT count(*) FROM spans WHERE resource_attributes['host.name'] = '{host}'");
    assert_eq!(rows(store, &q), vec![vec![n.to_string()]]);
    let q = format!(
        "SELECT span_id, resource_schema_url FROM spans WHERE resource_attributes['host.name'] = '{host}'"
    );
    assert_eq!(rows(store, &q).len(), n);
    assert_eq!(rows(store, "SELECT count(*) FROM spans"), vec![vec![all.len().to_string()]]);
    // Every column, as stored.
    let full = rows(store, "SELECT * FROM spans");
    assert_eq!(full.len(), all.len());
    // Trace lookups return the resources exactly (first, middle and last trace).
    for t in [all[0].trace_id, all[all.len() / 2].trace_id, all[all.len() - 1].trace_id] {
        let want: Vec<_> = all.iter().filter(|s| s.trace_id == t).cloned().collect();
        assert_eq!(canon(store.trace(t).unwrap()), canon(want));
    }
}

fn has_resources_file(s: &weft_store::SegmentMeta) -> bool {
    s.files.iter().any(|f| f.table == "span_resources")
}

#[test]
fn each_distinct_resource_is_stored_once_and_read_back_on_every_span() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(config(dir.path())).unwrap();
    // Two generators: their resources differ (process ids), and requests interleave them.
    let (a, b) = (spans(3, 3000), spans(4, 1000));
    let mut all = Vec::new();
    for (x, y) in a.chunks(97).zip(b.chunks(33)) {
        store.append(x).unwrap();
        store.append(y).unwrap();
        all.extend_from_slice(x);
        all.extend_from_slice(y);
    }
    // Buffered: appends bring their resources along, the buffer keeps each once.
    check(&store, &all);
    // After a restart that replays the WAL into a new buffer.
    drop(store);
    let store = Store::open(config(dir.path())).unwrap();
    assert!(store.metrics().wal_records_replayed.load(std::sync::atomic::Ordering::Relaxed) > 0);
    assert_eq!(store.stats().buffer_spans as usize, all.len());
    check(&store, &all);
    store.flush().unwrap();
    let segs = store.segments();
    assert_eq!(segs.len(), 1);
    let distinct: BTreeSet<String> = all.iter().map(resource_key).collect();
    assert!(distinct.len() > 10, "{} resources", distinct.len());
    let file = segs[0].files.iter().find(|f| f.table == "span_resources").expect("a resources file");
    assert_eq!(file.rows as usize, distinct.len(), "one row per distinct resource and scope");
    check(&store, &all);
    // And after a restart (the resources are loaded with the segment).
    drop(store);
    let store = Store::open(config(dir.path())).unwrap();
    check(&store, &all);
}

#[test]
fn segments_written_before_resource_files_are_read_and_compacted_into_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut old_layout = config(dir.path());
    old_layout.write.resource_table = false;
    let store = Store::open(old_layout).unwrap();
    let mut all = spans(5, 1500);
    for part in all.chunks(500) {
        store.append(part).unwrap();
        store.flush().unwrap();
    }
    let legacy = store.segments().len();
    assert!(legacy >= 3);
    drop(store);
    // As a weft of that layout left it: manifest format version 1.
    let manifest = dir.path().join("MANIFEST.json");
    let text = std::fs::read_to_string(&manifest).unwrap();
    assert!(text.contains("\"version\": 2"), "{text}");
    std::fs::write(&manifest, text.replacen("\"version\": 2", "\"version\": 1", 1)).unwrap();
    let mut c = config(dir.path());
    c.compaction_min_inputs = 3;
    let store = Store::open(c).unwrap();
    let newer = spans(6, 800);
    store.append(&newer).unwrap();
    store.flush().unwrap();
    all.extend(newer);
    let segs = store.segments();
    assert_eq!(segs.iter().filter(|s| !has_resources_file(s)).count(), legacy);
    assert_eq!(segs.iter().filter(|s| has_resources_file(s)).count(), 1);
    check(&store, &all);
    let text = std::fs::read_to_string(&manifest).unwrap();
    assert!(text.contains("\"version\": 2"), "a manifest naming the new layout is version 2");
    // Compaction reads both layouts and writes the new one.
    assert!(store.compact().unwrap());
    let segs = store.segments();
    assert!(segs.len() < legacy + 1);
    assert!(segs.iter().all(has_resources_file), "{segs:?}");
    check(&store, &all);
}

/// SQL over the scope columns gives, per scope, the spans appended with it.
fn check_scopes(store: &Store, all: &[Span]) {
    let mut want: BTreeMap<(String, String, String), usize> = BTreeMap::new();
    for s in all {
        let attrs =
            format!("{:?}", s.scope.attributes.0.iter().map(|kv| kv.key.to_string()).collect::<Vec<_>>());
        *want.entry((s.scope.name.clone(), s.scope.version.clone(), attrs)).or_default() += 1;
    }
    let got: BTreeMap<(String, String, String), usize> = rows(
        store,
        "SELECT scope_name, scope_version, map_keys(scope_attributes), count(*) FROM spans GROUP BY 1, 2, 3",
    )
    .into_iter()
    .map(|r| {
        let keys: Vec<String> =
            r[2].trim_matches(['[', ']']).split(", ").filter(|k| !k.is_empty()).map(String::from).collect();
        ((r[0].clone(), r[1].clone(), format!("{keys:?}")), r[3].parse().unwrap())
    })
    .collect();
    assert_eq!(got, want);
}

#[test]
fn segments_written_before_scopes_were_stored_once_read_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let mut old_layout = config(dir.path());
    old_layout.write.scopes_apart = false;
    let store = Store::open(old_layout).unwrap();
    let mut all = spans(8, 1200);
    for part in all.chunks(400) {
        store.append(part).unwrap();
        store.flush().unwrap();
    }
    let legacy = store.segments().len();
    assert!(legacy >= 3);
    drop(store);
    let mut c = config(dir.path());
    c.compaction_min_inputs = 3;
    let store = Store::open(c).unwrap();
    let newer = spans(9, 600);
    store.append(&newer).unwrap();
    store.flush().unwrap();
    all.extend(newer);
    let scopes_in_resources = |store: &Store| {
        store
            .segments()
            .iter()
            .map(|s| {
                let f = s.files.iter().find(|f| f.table == "span_resources").unwrap();
                let batches = read_parquet(&dir.path().join("segments").join(&f.file));
                batches[0].schema().index_of("scope_name").is_ok()
            })
            .collect::<Vec<bool>>()
    };
    let layouts = scopes_in_resources(&store);
    assert_eq!(layouts.iter().filter(|&&b| !b).count(), legacy, "{layouts:?}");
    assert_eq!(layouts.iter().filter(|&&b| b).count(), 1, "{layouts:?}");
    check(&store, &all);
    check_scopes(&store, &all);
    // Compaction reads both layouts and writes the new one.
    assert!(store.compact().unwrap());
    assert!(scopes_in_resources(&store).iter().all(|&b| b));
    check(&store, &all);
    check_scopes(&store, &all);
}

fn read_parquet(path: &std::path::Path) -> Vec<datafusion::arrow::array::RecordBatch> {
    let f = std::fs::File::open(path).unwrap();
    datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
        .unwrap()
        .build()
        .unwrap()
        .map(Result::unwrap)
        .collect()
}
