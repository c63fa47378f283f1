//! Indexed search against the scan it replaces: same answers over random queries, on a store
//! with segments written before the index existed, indexed segments of several row groups,
//! compacted segments and buffered spans; and segments the index rules out are not read.

use std::sync::atomic::Ordering;

use weft_model::{Span, SpanKind};
use weft_store::{SearchPlan, Store, TraceQuery};
use weft_synth::shop::{Rng, Shop};

use super::{block, config};

const CHUNK: usize = 400;
const OLD_SEGMENTS: usize = 4;
const NEW_SEGMENTS: usize = 8;

/// A random query drawn from the stored spans (so most of them match something).
fn random_query(rng: &mut Rng, all: &[Span]) -> TraceQuery {
    let pick = |rng: &mut Rng| &all[rng.below(all.len() as u64) as usize];
    let mut q = TraceQuery { limit: 1 + rng.below(25) as usize, ..TraceQuery::default() };
    let s = pick(rng);
    if rng.chance(0.5) {
        q.service = Some(s.service_name().to_owned());
    }
    if rng.chance(0.3) {
        q.span_name = Some(s.name.to_string());
    }
    if rng.chance(0.15) {
        q.span_kind = Some(if rng.chance(0.8) { s.kind } else { SpanKind::Consumer });
    }
    for _ in 0..rng.below(3) {
        let s = pick(rng);
        let attrs = if rng.chance(0.7) { &s.attributes.0 } else { &s.resource.attributes.0 };
        q.attributes.push(match rng.below(6) {
            0 if !s.events.is_empty() => (s.events[0].name.to_string(), None),
            1 => ("error".into(), rng.chance(0.5).then(|| "true".into())),
            2 => ("client.address".into(), Some("198.51.100.7".into())),
            _ if !attrs.is_empty() => {
                let kv = &attrs[rng.below(attrs.len() as u64) as usize];
                (kv.key.to_string(), rng.chance(0.8).then(|| kv.value.to_string()))
            }
            _ => ("no.such.key".into(), None),
        });
    }
    if rng.chance(0.25) {
        q.min_duration_ns = Some(pick(rng).duration_ns());
    }
    if rng.chance(0.15) {
        q.max_duration_ns = Some(pick(rng).duration_ns());
    }
    if rng.chance(0.5) {
        let from = pick(rng).start_ns;
        q.start_min_ns = Some(from);
        q.start_max_ns = Some(from + rng.below(2_000_000_000));
    }
    q
}

/// Row groups of a segment's spans file.
fn spans_row_groups(dir: &std::path::Path, seg: &weft_store::SegmentMeta) -> usize {
    use datafusion::parquet::file::reader::{FileReader, SerializedFileReader};
    let name = &seg.file("spans").unwrap().file;
    let file = std::fs::File::open(dir.join("segments").join(name)).unwrap();
    SerializedFileReader::new(file).unwrap().metadata().num_row_groups()
}

fn compare(store: &Store, all: &[Span], seed: u64, queries: usize) {
    let mut rng = Rng::new(seed);
    let mut matched = 0;
    for _ in 0..queries {
        let q = random_query(&mut rng, all);
        let scan = block(store.search_trace_ids_with(&q, SearchPlan::Scan)).unwrap();
        let indexed = block(store.search_trace_ids_with(&q, SearchPlan::Indexed)).unwrap();
        assert_eq!(indexed, scan, "{q:?}");
        matched += !scan.is_empty() as usize;
    }
    assert!(matched > queries / 3, "only {matched} of {queries} queries matched anything");
}

#[test]
fn indexed_search_answers_as_the_scan_does() {
    let dir = tempfile::tempdir().unwrap();
    let mut shop = Shop::new(11, 1_700_000_000_000_000_000, 20_000_000);
    let mut all = Vec::new();
    // Segments written before the index existed, every other one also before resources were
    // stored apart (searched through the `spans` view, not in the files' layout).
    for i in 0..OLD_SEGMENTS {
        let mut cfg = config(dir.path());
        (cfg.write.search_index, cfg.write.resource_table) = (false, i % 2 == 1);
        let store = Store::open(cfg).unwrap();
        let s = shop.spans(CHUNK);
        store.append(&s).unwrap();
        store.flush().unwrap();
        all.extend(s);
        assert_eq!(store.stats().search_index_bytes, 0);
        store.close().unwrap();
    }

    let old_spans = all.len();

    // Indexed segments of several row groups each (a query splits a file's scan between
    // them), the others of one, as segments were written before.
    let mut cfg = config(dir.path());
    cfg.write.row_group_rows = CHUNK / 3;
    let store = Store::open(cfg).unwrap();
    for _ in 0..NEW_SEGMENTS {
        let s = shop.spans(CHUNK);
        store.append(&s).unwrap();
        store.flush().unwrap();
        all.extend(s);
    }
    let indexed_spans = all.len();
    let s = shop.spans(300);
    store.append(&s).unwrap(); // stays buffered
    all.extend(s);
    let st = store.stats();
    assert_eq!(st.segments, OLD_SEGMENTS + NEW_SEGMENTS);
    let row_groups: Vec<usize> = store.segments().iter().map(|s| spans_row_groups(dir.path(), s)).collect();
    assert_eq!(row_groups[..OLD_SEGMENTS], [1; OLD_SEGMENTS]);
    assert!(row_groups[OLD_SEGMENTS..].iter().all(|&n| n > 1), "{row_groups:?}");
    assert!(st.search_index_bytes > 0 && st.search_index_bytes * 10 < st.segment_bytes, "{st:?}");
    compare(&store, &all, 1, 80);

    // An attribute value no segment holds: the indexed segments are skipped, the old ones read.
    let m = store.metrics();
    let (read0, skipped0) =
        (m.search_segments_read.load(Ordering::Relaxed), m.search_segments_skipped.load(Ordering::Relaxed));
    let q = TraceQuery {
        attributes: vec![("client.address".into(), Some("198.51.100.7".into()))],
        limit: 20,
        ..TraceQuery::default()
    };
    assert!(block(store.search_trace_ids(&q)).unwrap().is_empty());
    let read = m.search_segments_read.load(Ordering::Relaxed) - read0;
    let skipped = m.search_segments_skipped.load(Ordering::Relaxed) - skipped0;
    assert_eq!((read, skipped), (OLD_SEGMENTS as u64, NEW_SEGMENTS as u64));

    // A span only an old segment holds is found through it.
    let (old, kv) = all[CHUNK..CHUNK * OLD_SEGMENTS]
        .iter()
        .find_map(|s| Some((s, s.attributes.0.iter().find(|kv| kv.key == "client.address")?)))
        .unwrap();
    let q = TraceQuery {
        attributes: vec![(kv.key.to_string(), Some(kv.value.to_string()))],
        start_max_ns: Some(all[CHUNK * OLD_SEGMENTS - 1].start_ns),
        limit: 100,
        ..TraceQuery::default()
    };
    let ids = block(store.search_trace_ids(&q)).unwrap();
    assert!(ids.contains(&old.trace_id), "{q:?}: {ids:?}");
    assert_eq!(ids, block(store.search_trace_ids_with(&q, SearchPlan::Scan)).unwrap());

    // A value one span of an indexed segment holds (and no resource): the row groups of its
    // segment that cannot hold it are skipped, and its trace is found.
    let mut seen = std::collections::HashMap::<(&str, String), usize>::new();
    for s in &all {
        for kv in s.attributes.0.iter().chain(&s.resource.attributes.0) {
            *seen.entry((&*kv.key, kv.value.to_string())).or_default() += 1;
        }
    }
    let (span, kv) = all[old_spans..indexed_spans]
        .iter()
        .find_map(|s| {
            Some((s, s.attributes.0.iter().find(|kv| seen[&(&*kv.key, kv.value.to_string())] == 1)?))
        })
        .expect("a span attribute value held once");
    let q = TraceQuery {
        attributes: vec![(kv.key.to_string(), Some(kv.value.to_string()))],
        limit: 20,
        ..TraceQuery::default()
    };
    let (read0, rg0) =
        (m.search_segments_read.load(Ordering::Relaxed), m.search_row_groups_skipped.load(Ordering::Relaxed));
    let ids = block(store.search_trace_ids(&q)).unwrap();
    assert_eq!(ids, [span.trace_id], "{q:?}");
    let read = m.search_segments_read.load(Ordering::Relaxed) - read0;
    let rg_skipped = m.search_row_groups_skipped.load(Ordering::Relaxed) - rg0;
    // The old segments are read whole; an indexed one has 4 row groups (3 of CHUNK / 3 rows and
    // the rest), and one read for a bloom filter's false positive may have all of them skipped.
    assert!(
        read > OLD_SEGMENTS as u64 && rg_skipped >= 3,
        "{read} segments read, {rg_skipped} row groups skipped"
    );

    // Newest first stops early: the newest segment holds the 5 newest traces of a service.
    let (read0, skipped0) =
        (m.search_segments_read.load(Ordering::Relaxed), m.search_segments_skipped.load(Ordering::Relaxed));
    store.flush().unwrap();
    let q = TraceQuery { service: Some("frontend".into()), limit: 5, ..TraceQuery::default() };
    let ids = block(store.search_trace_ids(&q)).unwrap();
    assert_eq!(ids.len(), 5);
    assert_eq!(ids, block(store.search_trace_ids_with(&q, SearchPlan::Scan)).unwrap());
    assert_eq!(m.search_segments_read.load(Ordering::Relaxed) - read0, 1);
    assert!(
        m.search_segments_skipped.load(Ordering::Relaxed) - skipped0 >= (OLD_SEGMENTS + NEW_SEGMENTS) as u64
    );

    // Compaction writes indexes too (old segments merged become indexed).
    while store.compact().unwrap() {}
    let st = store.stats();
    assert!(st.segments < OLD_SEGMENTS + NEW_SEGMENTS + 1, "{st:?}");
    assert!(store.segments().len() == st.segments);
    compare(&store, &all, 2, 30);
    drop(store);
    let store = Store::open(config(dir.path())).unwrap();
    let reopened = store.stats();
    assert_eq!(reopened.search_index_bytes, st.search_index_bytes, "the index is read back from the footers");
    compare(&store, &all, 3, 20);
}
