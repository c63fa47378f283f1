//! De-duplication of spans stored twice: a client that retries a request whose answer it
//! never got (the server wrote the WAL, then the connection broke) sends the same spans again,
//! and both copies are acknowledged.
//!
//! Two span rows are the same span when they have the same trace id, span id and content (a
//! hash of every column of the logical `spans` row); only the first is kept. Two different
//! spans that share ids (a buggy id generator) differ in content and are both kept. A span's
//! events and links live in other tables, keyed by (trace id, span id) only: when the span
//! rows of one id pair repeat, the most repeated content `m` times, each distinct event (link)
//! row of that pair is kept `ceil(c/m)` of its `c` times — exactly its own count when every
//! copy of the span was stored as often.

use std::collections::HashMap;

use datafusion::arrow::array::{Array, BooleanArray, FixedSizeBinaryArray, RecordBatch};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::common::hash_utils::{QualityRandomState, create_hashes};

use crate::error::{Result, StoreError};
use crate::schema;

/// The content hash (compared only within one call, never stored).
const HASHER: QualityRandomState = QualityRandomState::with_seed(0x7765_6674);

/// (trace id, span id) of a row.
type Ids = (u128, u64);

/// Batches of the three span tables, spans in the logical layout (resource columns, no
/// `resource_ref`).
pub(crate) type SpanTables = [Vec<RecordBatch>; 3];

/// Per (trace id, span id): how often its most repeated content was stored.
type Repeats = HashMap<Ids, u64, ahash::RandomState>;

fn ids_of(b: &RecordBatch, table: &str) -> Result<Vec<Ids>> {
    let col = |name: &str, width: i32| -> Result<&FixedSizeBinaryArray> {
        b.column_by_name(name)
            .and_then(|c| c.as_any().downcast_ref::<FixedSizeBinaryArray>())
            .filter(|a| a.value_length() == width)
            .ok_or_else(|| StoreError::Decode(format!("{table}: no {name} column of {width} bytes")))
    };
    let (tr, sp) = (col("trace_id", 16)?, col("span_id", 8)?);
    Ok((0..b.num_rows())
        .map(|i| {
            let t = <[u8; 16]>::try_from(tr.value(i)).map(u128::from_be_bytes).unwrap_or_default();
            let s = <[u8; 8]>::try_from(sp.value(i)).map(u64::from_be_bytes).unwrap_or_default();
            (t, s)
        })
        .collect())
}

/// A hash of each row's content: every column but the segment-local `resource_ref`.
fn row_hashes(b: &RecordBatch) -> Result<Vec<u64>> {
    let cols: Vec<&dyn Array> = b
        .schema()
        .fields()
        .iter()
        .zip(b.columns())
        .filter(|(f, _)| f.name() != schema::RESOURCE_REF)
        .map(|(_, c)| c.as_ref())
        .collect();
    let mut hashes = vec![0u64; b.num_rows()];
    create_hashes(cols, &HASHER, &mut hashes)?;
    Ok(hashes)
}

/// Drops repeated spans (and their repeated events and links); returns the tables and how
/// many span rows were dropped. Tables without a repeat come back as they were.
pub(crate) fn dedup_spans(tables: SpanTables) -> Result<(SpanTables, u64)> {
    let [spans, events, links] = tables;
    let mut copies: HashMap<(Ids, u64), u64, ahash::RandomState> = HashMap::default();
    let mut masks = Vec::with_capacity(spans.len());
    let mut dropped = 0u64;
    for b in &spans {
        let ids = ids_of(b, schema::SPANS)?;
        let hashes = row_hashes(b)?;
        let mask: BooleanArray = ids
            .iter()
            .zip(&hashes)
            .map(|(id, h)| {
                let n = copies.entry((*id, *h)).or_default();
                *n += 1;
                dropped += u64::from(*n > 1);
                Some(*n == 1)
            })
            .collect();
        masks.push(mask);
    }
    if dropped == 0 {
        return Ok(([spans, events, links], 0));
    }
    let mut repeats = Repeats::default();
    for ((id, _), n) in copies {
        if n > 1 {
            let m = repeats.entry(id).or_default();
            *m = (*m).max(n);
        }
    }
    let spans = spans.iter().zip(&masks).map(|(b, m)| filter_record_batch(b, m)).collect::<Result<_, _>>()?;
    let events = thin_children(events, &repeats, schema::SPAN_EVENTS)?;
    let links = thin_children(links, &repeats, schema::SPAN_LINKS)?;
    Ok(([spans, events, links], dropped))
}

/// Keeps `ceil(c/m)` of the `c` copies of each distinct child row of a span repeated `m` times.
fn thin_children(batches: Vec<RecordBatch>, collapsed: &Repeats, table: &str) -> Result<Vec<RecordBatch>> {
    let mut keys: Vec<Vec<Option<(Ids, u64)>>> = Vec::with_capacity(batches.len());
    let mut copies: HashMap<(Ids, u64), u64, ahash::RandomState> = HashMap::default();
    for b in &batches {
        let ids = ids_of(b, table)?;
        if !ids.iter().any(|id| collapsed.contains_key(id)) {
            keys.push(Vec::new());
            continue;
        }
        let hashes = row_hashes(b)?;
        let k: Vec<Option<(Ids, u64)>> = ids
            .into_iter()
            .zip(hashes)
            .map(|(id, h)| collapsed.contains_key(&id).then_some((id, h)))
            .collect();
        for key in k.iter().flatten() {
            *copies.entry(*key).or_default() += 1;
        }
        keys.push(k);
    }
    let mut taken: HashMap<(Ids, u64), u64, ahash::RandomState> = HashMap::default();
    batches
        .into_iter()
        .zip(keys)
        .map(|(b, k)| {
            if k.is_empty() {
                return Ok(b);
            }
            let mask: BooleanArray = k
                .iter()
                .map(|key| {
                    let Some(key) = key else { return Some(true) };
                    let want = copies[key].div_ceil(collapsed[&key.0]);
                    let n = taken.entry(*key).or_default();
                    *n += 1;
                    Some(*n <= want)
                })
                .collect();
            Ok(filter_record_batch(&b, &mask)?)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arrow_rows::{batches_to_spans, spans_to_batches};
    use crate::testutil::span;

    fn tables(spans: &[weft_model::Span]) -> SpanTables {
        let b = spans_to_batches(spans).unwrap();
        [vec![b.logical_spans().unwrap()], vec![b.events], vec![b.links]]
    }

    fn concat(a: SpanTables, b: SpanTables) -> SpanTables {
        let [mut s, mut e, mut l] = a;
        let [s2, e2, l2] = b;
        s.extend(s2);
        e.extend(e2);
        l.extend(l2);
        [s, e, l]
    }

    #[test]
    fn a_repeated_batch_reads_back_once_with_its_events_and_links_once() {
        let spans: Vec<_> = (0..10).map(span).collect();
        let twice = concat(tables(&spans), tables(&spans));
        let ([s, e, l], dropped) = dedup_spans(twice).unwrap();
        assert_eq!(dropped, 10);
        assert_eq!(batches_to_spans(&s, &e, &l).unwrap(), spans);
    }

    #[test]
    fn different_spans_sharing_ids_are_both_kept() {
        let a = span(1);
        let mut b = span(1);
        b.name = "another".to_owned().into();
        b.events.clear();
        let ([s, e, l], dropped) =
            dedup_spans(concat(tables(std::slice::from_ref(&a)), tables(&[b.clone(), a.clone()]))).unwrap();
        assert_eq!(dropped, 1);
        // Events go by ids: the first span of those ids gets them, once.
        assert_eq!(batches_to_spans(&s, &e, &l).unwrap(), vec![a, b]);
    }

    #[test]
    fn tables_without_repeats_come_back_untouched() {
        let spans: Vec<_> = (0..10).map(span).collect();
        let ([s, e, l], dropped) = dedup_spans(tables(&spans)).unwrap();
        assert_eq!(dropped, 0);
        assert_eq!(batches_to_spans(&s, &e, &l).unwrap(), spans);
    }
}
