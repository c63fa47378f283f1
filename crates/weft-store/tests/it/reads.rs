//! Reads: trace by id, search, services/operations, SQL — from the buffer and from segments.

use std::collections::BTreeMap;

use datafusion::arrow::array::{Array, Int64Array, StringArray};
use weft_model::{SpanKind, StatusCode, TraceId};
use weft_store::TraceQuery;

use crate::{block, canon, open, spans};

fn by_trace(v: &[weft_model::Span]) -> BTreeMap<TraceId, Vec<weft_model::Span>> {
    let mut m: BTreeMap<TraceId, Vec<weft_model::Span>> = BTreeMap::new();
    for s in v {
        m.entry(s.trace_id).or_default().push(s.clone());
    }
    m
}

#[test]
fn traces_read_back_identically_from_buffer_and_segments() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let a = spans(1, 300);
    let b = spans(2, 300);
    store.append(&a[..100]).unwrap();
    store.append(&a[100..]).unwrap();
    store.flush().unwrap(); // a: in a segment
    store.append(&b).unwrap(); // b: in the buffer
    assert_eq!(store.stats().segments, 1);
    for (id, want) in by_trace(&a).into_iter().chain(by_trace(&b)) {
        let got = store.trace(id).unwrap();
        assert_eq!(canon(got), canon(want), "trace {id}");
    }
    assert!(store.trace(TraceId::from_u128(42)).unwrap().is_empty());
}

#[test]
fn search_services_operations_and_sql() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let all = spans(3, 600);
    store.append(&all[..300]).unwrap();
    store.flush().unwrap();
    store.append(&all[300..]).unwrap();

    let services = block(store.services()).unwrap();
    assert!(
        services.contains(&"frontend".to_string()) && services.contains(&"payment".to_string()),
        "{services:?}"
    );
    let ops = block(store.operations(Some("frontend"))).unwrap();
    assert!(ops.iter().any(|(n, k)| n.starts_with("GET ") && *k == SpanKind::Server), "{ops:?}");
    assert!(ops.iter().all(|(n, _)| !n.starts_with("SELECT")), "frontend runs no SQL: {ops:?}");

    // Search by service + attribute + duration: compare with a brute-force filter.
    let q = TraceQuery {
        service: Some("cart".into()),
        attributes: vec![("db.system".into(), Some("redis".into()))],
        min_duration_ns: Some(100_000),
        limit: 1000,
        ..TraceQuery::default()
    };
    let mut want: Vec<TraceId> = all
        .iter()
        .filter(|s| {
            s.service_name() == "cart"
                && s.attributes.get_str("db.system") == Some("redis")
                && s.duration_ns() >= 100_000
        })
        .map(|s| s.trace_id)
        .collect();
    want.sort();
    want.dedup();
    let mut got = block(store.search_trace_ids(&q)).unwrap();
    got.sort();
    assert!(!want.is_empty());
    assert_eq!(got, want);

    // Error traces through the `error` key (status error), full traces come back.
    let q = TraceQuery { attributes: vec![("error".into(), None)], limit: 1000, ..TraceQuery::default() };
    let traces = block(store.search(&q)).unwrap();
    let want_err: std::collections::BTreeSet<TraceId> =
        all.iter().filter(|s| s.status.code == StatusCode::Error).map(|s| s.trace_id).collect();
    assert_eq!(traces.iter().map(|t| t[0].trace_id).collect::<std::collections::BTreeSet<_>>(), want_err);
    for t in &traces {
        assert_eq!(
            canon(t.clone()),
            canon(all.iter().filter(|s| s.trace_id == t[0].trace_id).cloned().collect())
        );
    }

    // Limit and newest-first order.
    let q = TraceQuery { limit: 3, ..TraceQuery::default() };
    assert_eq!(block(store.search_trace_ids(&q)).unwrap().len(), 3);

    // SQL over segment + buffer: counts per service equal the input.
    let r = block(store.sql(
        "SELECT service_name, count(*) AS n FROM spans GROUP BY service_name ORDER BY service_name",
        1000,
    ))
    .unwrap();
    let mut got = BTreeMap::new();
    for b in &r.batches {
        let s = b.column(0).as_any().downcast_ref::<StringArray>().unwrap();
        let n = b.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
        for i in 0..b.num_rows() {
            got.insert(s.value(i).to_string(), n.value(i));
        }
    }
    let mut want = BTreeMap::new();
    for s in &all {
        *want.entry(s.service_name().to_string()).or_insert(0i64) += 1;
    }
    assert_eq!(got, want);

    // Attribute access, event join and raw events table exist.
    let r = block(store.sql(
        "SELECT count(*) FROM spans s JOIN span_events e ON s.trace_id = e.trace_id AND s.span_id = e.span_id \
         WHERE e.name = 'exception' AND s.attributes['rpc.method'] = 'Charge'",
        10,
    ))
    .unwrap();
    let n = r.batches[0].column(0).as_any().downcast_ref::<Int64Array>().unwrap().value(0);
    let want = all.iter().filter(|s| s.events.iter().any(|e| e.name == "exception")).count() as i64;
    assert!(want > 0);
    assert_eq!(n, want);
    block(store.sql("SELECT * FROM events", 10)).unwrap();
    block(store.sql("SELECT * FROM span_links", 10)).unwrap();
}

#[test]
fn sql_is_read_only_and_errors_are_clear() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    for bad in [
        "DROP TABLE spans",
        "CREATE TABLE x AS SELECT 1",
        "SET datafusion.execution.batch_size = 1",
        "INSERT INTO spans SELECT * FROM spans",
    ] {
        let e = block(store.sql(bad, 10)).unwrap_err().to_string();
        assert!(e.contains("not") || e.contains("Unsupported") || e.contains("unsupported"), "{bad}: {e}");
    }
    let e = block(store.sql("SELECT nope FROM spans", 10)).unwrap_err().to_string();
    assert!(e.contains("nope"), "{e}");
    // Row limit.
    store.append(&spans(4, 50)).unwrap();
    let r = block(store.sql("SELECT * FROM spans", 7)).unwrap();
    assert_eq!(r.batches.iter().map(|b| b.num_rows()).sum::<usize>(), 7);
    assert!(r.truncated);
}

#[test]
fn raw_events_are_stored_and_queryable() {
    use weft_model::event::{EventKind, HostEvent, KernelEvent};
    use weft_model::{Event, SourceId};
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let events: Vec<Event> = (0..100u64)
        .map(|i| Event {
            time_ns: 1_000 + i,
            raw_time: i * 1000,
            source: SourceId((i % 2) as u32),
            kind: if i % 2 == 0 {
                EventKind::Host(HostEvent::MmioW {
                    id: i,
                    addr: 0xc000_0000 + i,
                    size: 4,
                    bar: 0,
                    offset: i,
                    posted: true,
                })
            } else {
                EventKind::Kernel(KernelEvent::SchedWakeup { cpu: 1, pid: 7, tid: 8, target_cpu: 0 })
            },
        })
        .collect();
    store.append_events(&events[..50]).unwrap();
    store.flush().unwrap();
    store.append_events(&events[50..]).unwrap();
    let r = block(store.sql(
        "SELECT type, count(*), min(fields['addr']) FROM events WHERE component = 'host' GROUP BY type",
        10,
    ))
    .unwrap();
    let b = &r.batches[0];
    assert_eq!(b.column(0).as_any().downcast_ref::<StringArray>().unwrap().value(0), "HostMmioW");
    assert_eq!(b.column(1).as_any().downcast_ref::<Int64Array>().unwrap().value(0), 50);
    let r = block(store.sql("SELECT count(*) FROM events WHERE tid = 8 AND pid = 7", 10)).unwrap();
    assert_eq!(r.batches[0].column(0).as_any().downcast_ref::<Int64Array>().unwrap().value(0), 50);
}

#[test]
fn dependency_window_streams_whole_traces() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let all = spans(5, 400);
    store.append(&all[..200]).unwrap();
    store.flush().unwrap();
    store.append(&all[200..]).unwrap();
    let mut seen = BTreeMap::new();
    let n = block(store.for_each_trace_in_window(0, u64::MAX / 2, |t| {
        assert!(t.iter().all(|s| s.trace_id == t[0].trace_id));
        assert!(seen.insert(t[0].trace_id, t.len()).is_none(), "each trace once");
    }))
    .unwrap();
    let want = by_trace(&all);
    assert_eq!(n as usize, want.len());
    for (id, v) in want {
        assert_eq!(seen[&id], v.len());
    }
}

#[test]
fn segments_keep_statistics_where_they_prune_and_not_on_text() {
    use datafusion::parquet::file::reader::{FileReader, SerializedFileReader};
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.append(&spans(7, 200)).unwrap();
    store.flush().unwrap();
    let file = std::fs::read_dir(dir.path().join("segments"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with("-spans.parquet"))
        .expect("a spans segment");
    let r = SerializedFileReader::new(std::fs::File::open(&file).unwrap()).unwrap();
    let rg = r.metadata().row_group(0);
    let stats: BTreeMap<String, bool> =
        rg.columns().iter().map(|c| (c.column_path().string(), c.statistics().is_some())).collect();
    for pruning in ["trace_id", "span_id", "start_time", "duration_ns"] {
        assert_eq!(stats.get(pruning), Some(&true), "{pruning}: {stats:?}");
    }
    for none in [
        "flags",
        "dropped_attributes_count",
        "service_name",
        "name",
        "attributes.entries.keys",
        "attributes.entries.values",
        "scope_attributes.entries.values",
        "attribute_types",
    ] {
        assert_eq!(stats.get(none), Some(&false), "{none}: {stats:?}");
    }
    // Resources live in the segment's resources file; span rows name them.
    assert_eq!(stats.get("resource_ref"), Some(&true), "{stats:?}");
    assert!(!stats.keys().any(|k| k.starts_with("resource_attributes")), "{stats:?}");
}

/// Reads every row of the segment file of `table` in `dir` (exactly one segment expected).
fn segment_rows(dir: &std::path::Path, table: &str) -> datafusion::arrow::array::RecordBatch {
    use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let file = std::fs::read_dir(dir.join("segments"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(&format!("-{table}.parquet")))
        .expect("a segment file");
    let r = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(file).unwrap())
        .unwrap()
        .build()
        .unwrap();
    let batches: Vec<_> = r.map(Result::unwrap).collect();
    datafusion::arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap()
}

#[test]
fn a_flush_of_many_appends_is_sorted_and_keeps_event_order() {
    use datafusion::arrow::array::{FixedSizeBinaryArray, TimestampNanosecondArray};
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    // Many small appends (several coalesced runs and leftovers), so the flush merges batches.
    let all = spans(11, 30_000);
    for chunk in all.chunks(97) {
        store.append(chunk).unwrap();
    }
    store.flush().unwrap();
    let b = segment_rows(dir.path(), "spans");
    assert_eq!(b.num_rows(), all.len());
    let ids = b.column_by_name("trace_id").unwrap().as_any().downcast_ref::<FixedSizeBinaryArray>().unwrap();
    let start =
        b.column_by_name("start_time").unwrap().as_any().downcast_ref::<TimestampNanosecondArray>().unwrap();
    for i in 1..b.num_rows() {
        let (prev, cur) =
            ((ids.value(i - 1), start.value(i - 1) as u64), (ids.value(i), start.value(i) as u64));
        assert!(prev <= cur, "row {i} out of order");
    }
    // Span events: grouped by trace, and within a span in the order they were sent.
    let e = segment_rows(dir.path(), "span_events");
    let want: usize = all.iter().map(|s| s.events.len()).sum();
    assert!(want > 0);
    assert_eq!(e.num_rows(), want);
    let eids = e.column_by_name("trace_id").unwrap().as_any().downcast_ref::<FixedSizeBinaryArray>().unwrap();
    let espan = e.column_by_name("span_id").unwrap().as_any().downcast_ref::<FixedSizeBinaryArray>().unwrap();
    let etime =
        e.column_by_name("time").unwrap().as_any().downcast_ref::<TimestampNanosecondArray>().unwrap();
    let mut got: BTreeMap<(Vec<u8>, Vec<u8>), Vec<u64>> = BTreeMap::new();
    for i in 0..e.num_rows() {
        assert!(i == 0 || eids.value(i - 1) <= eids.value(i), "event row {i} out of order");
        got.entry((eids.value(i).to_vec(), espan.value(i).to_vec())).or_default().push(etime.value(i) as u64);
    }
    for s in &all {
        if s.events.is_empty() {
            continue;
        }
        let sent: Vec<u64> = s.events.iter().map(|e| e.time_ns).collect();
        assert_eq!(got.get(&(s.trace_id.0.to_vec(), s.span_id.0.to_vec())), Some(&sent));
    }
    // And everything reads back.
    let back = canon(store.trace(all[0].trace_id).unwrap());
    let sent = canon(all.iter().filter(|s| s.trace_id == all[0].trace_id).cloned().collect());
    assert_eq!(back, sent);
}

/// Issue 18: each bounded query holds at most its own share of the shared memory pool. A join
/// whose build side needs more than the per-query limit (but far less than the pool) fails
/// naming the limit; the same query unbounded, and a small one bounded, run.
#[test]
fn a_query_past_its_own_memory_limit_fails_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.append(&spans(70, 3000)).unwrap();
    let join =
        "SELECT count(*) FROM spans a JOIN spans b ON a.trace_id = b.trace_id AND a.span_id = b.span_id";
    let limits = |max_memory| weft_store::SqlLimits {
        max_rows: 10,
        max_bytes: usize::MAX,
        max_memory,
        memory_setting: "the test's limit",
    };
    let err = block(store.sql_bounded(join, &limits(64 << 10))).unwrap_err().to_string();
    assert!(err.contains("memory limit of 65536 bytes") && err.contains("the test's limit"), "{err}");
    let all = block(store.sql_bounded(join, &limits(usize::MAX))).unwrap();
    let n = all.batches[0].column(0).as_any().downcast_ref::<Int64Array>().unwrap().value(0);
    assert!(n >= 3000, "{n}");
    block(store.sql_bounded("SELECT count(*) FROM spans", &limits(64 << 10))).unwrap();
}

/// Issue 18: a bounded trace read stops at its limit, in segments and in the buffer: it reads
/// (counted) hardly more rows than the limit of a trace ten times larger, and says it was
/// truncated; a trace within the limit is read whole and not marked.
#[test]
fn bounded_trace_reads_stop_at_the_limit() {
    use std::sync::atomic::Ordering;
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let big: Vec<_> = spans(7, 2000)
        .into_iter()
        .map(|mut s| {
            s.trace_id = TraceId::from_u128(7);
            s
        })
        .collect();
    let total = big.len();
    store.append(&big[..total / 2]).unwrap();
    store.flush().unwrap();
    store.append(&big[total / 2..]).unwrap();
    for (limit, truncated) in [(100, true), (total - 1, true), (total, false)] {
        let before = store.metrics().trace_rows_read.load(Ordering::Relaxed);
        let read = store.trace_bounded(TraceId::from_u128(7), limit).unwrap();
        let rows = store.metrics().trace_rows_read.load(Ordering::Relaxed) - before;
        assert_eq!(read.truncated, truncated, "limit {limit}: {rows} rows, {} spans", read.spans.len());
        assert_eq!(read.spans.len(), limit, "limit {limit}");
        assert!(rows <= limit as u64 + 1, "{rows} rows read for a limit of {limit}");
    }
    assert_eq!(store.trace(TraceId::from_u128(7)).unwrap().len(), total);
}
