//! Per-segment search index: what [`crate::Store::search`] needs to skip a segment that
//! cannot hold a match without reading it.
//!
//! Written into the footer of a segment's spans file (Parquet key-value metadata under
//! [`FOOTER_KEY`]) by every flush and compaction, so it lives and dies with the segment. It
//! holds the span durations' range and a bloom filter of the span attributes' keys and
//! `key=value` pairs, span event names, and whether a span has an error status. Resource
//! attributes are not in it: a search matches them against the segment's resources file (a
//! few rows, in memory) and, knowing which resources match, reads only `resource_ref` for the
//! resource side of a condition ([`resource_refs`]). Time range and (service, span name, kind)
//! come from the manifest entry. Segments without the key (written before it existed, or with
//! [`crate::WriteOptions::search_index`] off) are only pruned by the manifest's facts.
//!
//! Version 1 indexes (still read) held the resource attributes too, and the error status as
//! the `error` key and `error=true` / `error=` pairs: more than version 2 says, never less.
//!
//! A bloom filter has no false negatives, so a skipped segment never held a match; it is
//! sized at 10 bits per distinct item, capped at [`MAX_BITS_PER_SPAN`] per span.

use std::collections::HashSet;

use base64::Engine;
use base64::engine::general_purpose::STANDARD_NO_PAD;
use datafusion::arrow::array::{Array, AsArray, Int64Array, MapArray, StringArray};
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::{Result, StoreError};
use crate::manifest::SegmentMeta;
use crate::schema;
use crate::search::TraceQuery;

/// Key of the index in the spans file's Parquet key-value metadata.
pub(crate) const FOOTER_KEY: &str = "weft.search_index";
/// Bloom bits per span at most (the index stays under 2 B/span, ~5 % of a segment).
const MAX_BITS_PER_SPAN: usize = 16;
const BITS_PER_ITEM: usize = 10;
const VERSION: u8 = 2;
const HEADER: usize = 1 + 1 + 8 + 8;

/// The index of one segment.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SearchIndex {
    min_duration_ns: i64,
    max_duration_ns: i64,
    hashes: u8,
    bits: Vec<u64>,
}

/// A stable 64-bit hash (FNV-1a, then a splitmix64 finaliser): the index outlives processes
/// and weft versions, so no seeded or version-dependent hasher.
fn hash(tag: u8, key: &str, value: Option<&str>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |b: u8| {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    };
    eat(tag);
    key.bytes().for_each(&mut eat);
    if let Some(v) = value {
        eat(0xff); // never in UTF-8: `a=bc` and `ab=c` differ
        v.bytes().for_each(&mut eat);
    }
    let mut z = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn key_item(key: &str) -> u64 {
    hash(1, key, None)
}

fn pair_item(key: &str, value: &str) -> u64 {
    hash(2, key, Some(value))
}

/// Some span of the segment has an error status.
fn error_status_item() -> u64 {
    hash(3, "error", None)
}

fn map_items(map: &MapArray, items: &mut HashSet<u64>) {
    let keys = map.keys().as_any().downcast_ref::<StringArray>();
    let values = map.values().as_any().downcast_ref::<StringArray>();
    let (Some(keys), Some(values)) = (keys, values) else { return };
    for i in 0..keys.len() {
        let k = keys.value(i);
        items.insert(key_item(k));
        if values.is_valid(i) {
            items.insert(pair_item(k, values.value(i)));
        }
    }
}

fn map_col<'a>(b: &'a RecordBatch, name: &str) -> Option<&'a MapArray> {
    b.column_by_name(name).and_then(|c| c.as_any().downcast_ref::<MapArray>())
}

impl SearchIndex {
    /// Builds the index of a segment from the batches it is written from: spans (either
    /// layout: resource attributes on the rows are indexed too) and span events.
    pub(crate) fn build(spans: &[RecordBatch], events: &[RecordBatch]) -> Result<Self> {
        let mut items = HashSet::new();
        let (mut lo, mut hi, mut rows) = (i64::MAX, i64::MIN, 0usize);
        for b in spans.iter().filter(|b| b.num_rows() > 0) {
            rows += b.num_rows();
            let dur = b
                .column_by_name("duration_ns")
                .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
                .ok_or_else(|| StoreError::Decode("spans batch without duration_ns".into()))?;
            for &d in dur.values() {
                (lo, hi) = (lo.min(d), hi.max(d));
            }
            for name in ["attributes", "resource_attributes"] {
                if let Some(m) = map_col(b, name) {
                    map_items(m, &mut items);
                }
            }
            if let Some(st) = b.column_by_name("status_code").and_then(|c| c.as_string_opt::<i32>())
                && st.iter().any(|s| s == Some("error"))
            {
                items.insert(error_status_item());
            }
        }
        for b in events {
            if let Some(names) = b.column_by_name("name").and_then(|c| c.as_string_opt::<i32>()) {
                items.extend(names.iter().flatten().map(key_item));
            }
        }
        let want = (items.len() * BITS_PER_ITEM).min(rows * MAX_BITS_PER_SPAN).max(64);
        let words = want.div_ceil(64);
        let nbits = words * 64;
        let per_item = nbits as f64 / items.len().max(1) as f64;
        let hashes = (per_item * std::f64::consts::LN_2).round().clamp(1.0, 8.0) as u8;
        let mut idx = SearchIndex {
            min_duration_ns: if rows == 0 { 0 } else { lo },
            max_duration_ns: if rows == 0 { 0 } else { hi },
            hashes,
            bits: vec![0; words],
        };
        for h in items {
            for bit in idx.positions(h) {
                idx.bits[bit / 64] |= 1 << (bit % 64);
            }
        }
        Ok(idx)
    }

    fn positions(&self, h: u64) -> impl Iterator<Item = usize> + use<> {
        let n = (self.bits.len() * 64) as u64;
        let (h1, h2) = (h, h.rotate_left(32) | 1);
        (0..u64::from(self.hashes)).map(move |i| (h1.wrapping_add(i.wrapping_mul(h2)) % n) as usize)
    }

    fn may_hold(&self, item: u64) -> bool {
        self.positions(item).all(|bit| self.bits[bit / 64] & (1 << (bit % 64)) != 0)
    }

    /// Bytes the index takes in the footer.
    pub(crate) fn encoded_len(&self) -> usize {
        ((HEADER + self.bits.len() * 8) * 4).div_ceil(3)
    }

    /// The footer value (base64 of version, hash count, duration range, bits).
    pub(crate) fn encode(&self) -> String {
        let mut b = Vec::with_capacity(HEADER + self.bits.len() * 8);
        b.extend([VERSION, self.hashes]);
        b.extend(self.min_duration_ns.to_le_bytes());
        b.extend(self.max_duration_ns.to_le_bytes());
        for w in &self.bits {
            b.extend(w.to_le_bytes());
        }
        STANDARD_NO_PAD.encode(b)
    }

    /// Reads a footer value; the error says what is wrong with it.
    pub(crate) fn decode(text: &str) -> std::result::Result<Self, String> {
        let b = STANDARD_NO_PAD.decode(text).map_err(|e| format!("not base64: {e}"))?;
        if b.len() < HEADER + 8 || !(b.len() - HEADER).is_multiple_of(8) {
            return Err(format!("{} bytes, not a header and whole 64-bit words", b.len()));
        }
        if !(1..=VERSION).contains(&b[0]) {
            return Err(format!("version {} (this weft reads 1 to {VERSION})", b[0]));
        }
        if !(1..=8).contains(&b[1]) {
            return Err(format!("{} hash functions (1 to 8 are written)", b[1]));
        }
        let word = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[at..at + 8]);
            w
        };
        Ok(SearchIndex {
            hashes: b[1],
            min_duration_ns: i64::from_le_bytes(word(2)),
            max_duration_ns: i64::from_le_bytes(word(10)),
            bits: (HEADER..b.len()).step_by(8).map(|at| u64::from_le_bytes(word(at))).collect(),
        })
    }
}

/// False when a segment (its manifest entry, index and resources, if it has them) cannot hold
/// a span matching `q`.
pub(crate) fn may_match(
    meta: &SegmentMeta,
    index: Option<&SearchIndex>,
    resources: Option<&RecordBatch>,
    q: &TraceQuery,
) -> bool {
    let Some(f) = meta.file(schema::SPANS) else { return false };
    if q.start_min_ns.is_some_and(|t| f.max_time_ns < t) || q.start_max_ns.is_some_and(|t| f.min_time_ns > t)
    {
        return false;
    }
    if meta.operations_complete
        && (q.service.is_some() || q.span_name.is_some() || q.span_kind.is_some())
        && !meta.operations.iter().any(|(s, n, k)| {
            q.service.as_ref().is_none_or(|w| w == s)
                && q.span_name.as_ref().is_none_or(|w| w == n)
                && q.span_kind.is_none_or(|w| w.as_str() == k)
        })
    {
        return false;
    }
    let Some(idx) = index else { return true };
    let clamp = |d: u64| d.min(i64::MAX as u64) as i64;
    if q.min_duration_ns.is_some_and(|d| idx.max_duration_ns < clamp(d))
        || q.max_duration_ns.is_some_and(|d| idx.min_duration_ns > clamp(d))
    {
        return false;
    }
    q.attributes.iter().all(|(k, v)| {
        let v = v.as_deref();
        span_side_may_hold(Some(idx), k, v)
            || (error_status_matches(k, v) && idx.may_hold(error_status_item()))
            || resources.is_some_and(|r| resources_match(r, k, v).any(|m| m))
    })
}

/// Whether the span attributes (or, for a key alone, the span event names) of a segment with
/// index `index` may hold `k` (`= v`); true without an index.
pub(crate) fn span_side_may_hold(index: Option<&SearchIndex>, k: &str, v: Option<&str>) -> bool {
    index.is_none_or(|idx| match v {
        Some(v) => idx.may_hold(pair_item(k, v)),
        None => idx.may_hold(key_item(k)),
    })
}

/// Whether an error status matches the search condition `k` (`= v`).
pub(crate) fn error_status_matches(k: &str, v: Option<&str>) -> bool {
    k == "error" && v.is_none_or(|v| v == "true" || v.is_empty())
}

/// For each row of a resources batch, whether its `resource_attributes[k]` is `v` (a key
/// alone: is not null), as SQL sees it: the first entry with that key counts.
fn resources_match<'a>(
    resources: &'a RecordBatch,
    k: &'a str,
    v: Option<&'a str>,
) -> impl Iterator<Item = bool> + 'a {
    let map = map_col(resources, "resource_attributes");
    let kv = map.and_then(|m| {
        let keys = m.keys().as_any().downcast_ref::<StringArray>()?;
        let values = m.values().as_any().downcast_ref::<StringArray>()?;
        Some((m, keys, values))
    });
    (0..resources.num_rows()).map(move |r| {
        let Some((m, keys, values)) = kv else { return false };
        if m.is_null(r) {
            return false;
        }
        let o = m.value_offsets();
        let first = (o[r] as usize..o[r + 1] as usize).find(|&e| keys.is_valid(e) && keys.value(e) == k);
        first.is_some_and(|e| values.is_valid(e) && v.is_none_or(|v| values.value(e) == v))
    })
}

/// The `resource_ref`s (`id << 32 | row`) of the rows of `resources` (the resources of segment
/// or buffer `id`) whose `resource_attributes[k]` is `v` (a key alone: is not null).
pub(crate) fn resource_refs(id: u64, resources: &RecordBatch, k: &str, v: Option<&str>) -> Vec<u64> {
    let rows = resources_match(resources, k, v).enumerate();
    rows.filter(|(_, m)| *m).map(|(row, _)| crate::resources::segment_ref(id, row as u64)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_bad_footers() {
        let mut idx = SearchIndex { min_duration_ns: 3, max_duration_ns: 9, hashes: 3, bits: vec![0; 4] };
        for i in 0..20 {
            for bit in idx.positions(pair_item("k", &i.to_string())) {
                idx.bits[bit / 64] |= 1 << (bit % 64);
            }
        }
        let text = idx.encode();
        assert_eq!(text.len(), idx.encoded_len());
        let back = SearchIndex::decode(&text).unwrap();
        assert_eq!(back, idx);
        assert!((0..20).all(|i| back.may_hold(pair_item("k", &i.to_string()))));
        for bad in ["%%%", "AAAA", &text[..text.len() - 3]] {
            assert!(SearchIndex::decode(bad).is_err(), "{bad}");
        }
        // Version 1 (resource attributes and error statuses as pairs) has the same layout.
        let mut other = STANDARD_NO_PAD.decode(&text).unwrap();
        other[0] = 1;
        assert_eq!(SearchIndex::decode(&STANDARD_NO_PAD.encode(&other)).unwrap(), idx);
        other[0] = 9;
        let e = SearchIndex::decode(&STANDARD_NO_PAD.encode(other)).unwrap_err();
        assert!(e.contains("version 9"), "{e}");
    }

    #[test]
    fn pairs_and_keys_differ() {
        assert_ne!(pair_item("a", "bc"), pair_item("ab", "c"));
        assert_ne!(key_item("a"), pair_item("a", ""));
    }
}
