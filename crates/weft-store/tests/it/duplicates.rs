//! A client's retry stores a batch twice: reads and compaction give each span once.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use datafusion::arrow::array::{Array, Int64Array};
use weft_store::{Store, TraceQuery};

use crate::{block, canon, config, open, spans};

fn count(store: &Store, sql: &str) -> i64 {
    let r = block(store.sql(sql, 10)).unwrap();
    r.batches[0].column(0).as_any().downcast_ref::<Int64Array>().unwrap().value(0)
}

#[test]
fn a_batch_appended_twice_reads_once_and_compacts_to_once() {
    let dir = tempfile::tempdir().unwrap();
    let all = spans(31, 400);
    let mut other = all[7].clone();
    other.name = "same ids, other content".to_owned().into();
    // Events and links belong to ids, not to one of two spans sharing them: the first span of
    // those ids reads them back.
    other.events.clear();
    other.links.clear();
    {
        let store = open(dir.path());
        // Once into a segment, once into another, once in the WAL (replayed on open); and a
        // different span that collides on ids with one of them.
        for _ in 0..2 {
            store.append(&all).unwrap();
            store.flush().unwrap();
        }
        store.append(&all).unwrap();
        store.append(std::slice::from_ref(&other)).unwrap();
    }
    let mut c = config(dir.path());
    c.compaction_min_inputs = 2;
    let store = Store::open(c).unwrap();
    let traces: BTreeSet<_> = all.iter().map(|s| s.trace_id).collect();
    let check = |store: &Store| {
        for id in &traces {
            let mut want: Vec<_> = all.iter().filter(|s| s.trace_id == *id).cloned().collect();
            if *id == other.trace_id {
                want.push(other.clone());
            }
            assert_eq!(canon(store.trace(*id).unwrap()), canon(want), "trace {id}");
        }
        let found = block(store.search(&TraceQuery { limit: 1000, ..TraceQuery::default() })).unwrap();
        assert_eq!(found.len(), traces.len());
        assert_eq!(
            found.iter().map(|t| t.len()).sum::<usize>(),
            all.len() + 1,
            "search results hold each span once"
        );
    };
    check(&store);
    assert_eq!(count(&store, "SELECT count(*) FROM spans"), 3 * all.len() as i64 + 1, "SQL sees the copies");
    store.flush().unwrap();
    assert_eq!(store.segments().len(), 3);
    assert!(store.compact().unwrap());
    assert_eq!(store.segments().len(), 1);
    assert_eq!(store.metrics().spans_deduplicated.load(Ordering::Relaxed), 2 * all.len() as u64);
    assert_eq!(
        count(&store, "SELECT count(*) FROM spans"),
        all.len() as i64 + 1,
        "compacted: each span once"
    );
    let events: usize = all.iter().map(|s| s.events.len()).sum::<usize>() + other.events.len();
    assert_eq!(count(&store, "SELECT count(*) FROM span_events"), events as i64, "and its events once");
    check(&store);
}
