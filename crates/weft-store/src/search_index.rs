//! Per-segment search index: what [`crate::Store::search`] needs to skip a segment, or a row
//! group of its spans file, that cannot hold a match without reading it.
//!
//! Written into the footer of a segment's spans file (Parquet key-value metadata under
//! [`FOOTER_KEY`]) by every flush and compaction, so it lives and dies with the segment. It
//! holds the span durations' range; bloom filters of the span attributes' keys and
//! `key=value` pairs and of error statuses (whether a span has one, and a span of which
//! service), kept per row group of the spans file with its row count, so that a search can
//! skip row groups as well as segments (see [`SearchIndex`]); and one of the segment's span
//! event names. Resource attributes are not in it: a search matches them against the segment's resources
//! file (a few rows, in memory) and, knowing which resources match, reads only
//! `resource_ref` for the resource side of a condition ([`resource_refs`]). Time range and
//! (service, span name, kind) come from the manifest entry. Segments without the key (written
//! before it existed, or with [`crate::WriteOptions::search_index`] off) are only pruned by
//! the manifest's facts.
//!
//! Versions 1 and 2 (still read) had one bloom filter for the whole file, span event names in
//! it, and no error statuses by service; a segment with one of them is skipped or read whole.
//! Version 1 also held the resource attributes, and the error status as the `error` key and
//! `error=true` / `error=` pairs: more than version 2 says, never less.
//!
//! A bloom filter has no false negatives, so a skipped segment or row group never held a
//! match; each is sized at 12 bits per distinct item (a search asks up to one filter per row
//! group and the shared one), capped at [`MAX_BITS_PER_SPAN`] per span.

use std::collections::HashSet;

use base64::Engine;
use base64::engine::general_purpose::STANDARD_NO_PAD;
use datafusion::arrow::array::{Array, AsArray, Int64Array, MapArray, StringArray};
use datafusion::arrow::datatypes::UInt64Type;
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::{Result, StoreError};
use crate::manifest::SegmentMeta;
use crate::schema;
use crate::search::TraceQuery;

/// Key of the index in the spans file's Parquet key-value metadata.
pub(crate) const FOOTER_KEY: &str = "weft.search_index";
/// Bloom bits per span at most (the index stays under 2 B/span, ~5 % of a segment).
const MAX_BITS_PER_SPAN: usize = 16;
const BITS_PER_ITEM: usize = 12;
const VERSION: u8 = 3;
/// Version, hash count (versions 1-2) or flags, duration range.
const HEADER: usize = 1 + 1 + 8 + 8;

/// A bloom filter over 64-bit item hashes (no words: holds nothing).
#[derive(Debug, Clone, PartialEq)]
struct Bloom {
    hashes: u8,
    bits: Vec<u64>,
}

impl Bloom {
    /// A filter of `items`, [`BITS_PER_ITEM`] bits each, at most `cap_bits` (at least 64 when there are any).
    fn of(items: &HashSet<u64>, cap_bits: usize) -> Bloom {
        if items.is_empty() {
            return Bloom { hashes: 1, bits: Vec::new() };
        }
        let words = (items.len() * BITS_PER_ITEM).min(cap_bits).max(64).div_ceil(64);
        let per_item = (words * 64) as f64 / items.len() as f64;
        let hashes = (per_item * std::f64::consts::LN_2).round().clamp(1.0, 8.0) as u8;
        let mut b = Bloom { hashes, bits: vec![0; words] };
        for &h in items {
            for bit in b.positions(h) {
                b.bits[bit / 64] |= 1 << (bit % 64);
            }
        }
        b
    }

    fn positions(&self, h: u64) -> impl Iterator<Item = usize> + use<> {
        let n = ((self.bits.len() * 64) as u64).max(1);
        let (h1, h2) = (h, h.rotate_left(32) | 1);
        (0..u64::from(self.hashes)).map(move |i| (h1.wrapping_add(i.wrapping_mul(h2)) % n) as usize)
    }

    fn may_hold(&self, item: u64) -> bool {
        !self.bits.is_empty() && self.positions(item).all(|bit| self.bits[bit / 64] & (1 << (bit % 64)) != 0)
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.hashes);
        out.extend((self.bits.len() as u32).to_le_bytes());
        for w in &self.bits {
            out.extend(w.to_le_bytes());
        }
    }
}

/// One row group of the spans file: its rows (0 in versions 1-2: the whole file, row count
/// unknown) and the bloom filter of the items only it holds.
#[derive(Debug, Clone, PartialEq)]
struct Group {
    rows: u64,
    only: Bloom,
}

/// The index of one segment.
///
/// An item (a span attribute key or `key=value` pair, an error status) is in one filter: that
/// of its row group when only one row group holds it, else `shared`. So a row group may hold
/// an item when `shared` or its own filter may, and the index is no larger than one filter of
/// the segment's distinct items, whatever the number of row groups.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SearchIndex {
    min_duration_ns: i64,
    max_duration_ns: i64,
    groups: Vec<Group>,
    /// Items of several row groups.
    shared: Bloom,
    /// Span event names (versions 1-2: none, the names are in the one group's filter).
    events: Bloom,
    /// Error statuses are indexed per service too (version 3 on).
    errors_by_service: bool,
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

/// Some span of the group has an error status.
fn error_status_item() -> u64 {
    hash(3, "error", None)
}

/// Some span of service `service` in the group has an error status.
fn service_error_item(service: &str) -> u64 {
    hash(3, "error", Some(service))
}

/// The item of a condition's span attribute side: `k = v`, or the key alone.
fn attribute_item(k: &str, v: Option<&str>) -> u64 {
    v.map_or_else(|| key_item(k), |v| pair_item(k, v))
}

/// Adds the items of row `row` of `map` (its keys and `key=value` pairs).
fn row_items(map: &MapArray, keys: &StringArray, values: &StringArray, row: usize, items: &mut HashSet<u64>) {
    if map.is_null(row) {
        return;
    }
    let o = map.value_offsets();
    for i in o[row] as usize..o[row + 1] as usize {
        let k = keys.value(i);
        items.insert(key_item(k));
        if values.is_valid(i) {
            items.insert(pair_item(k, values.value(i)));
        }
    }
}

/// A map column with string keys and values, as its parts.
fn string_map<'a>(
    b: &'a RecordBatch,
    name: &str,
) -> Option<(&'a MapArray, &'a StringArray, &'a StringArray)> {
    let m = b.column_by_name(name)?.as_any().downcast_ref::<MapArray>()?;
    let keys = m.keys().as_any().downcast_ref::<StringArray>()?;
    let values = m.values().as_any().downcast_ref::<StringArray>()?;
    Some((m, keys, values))
}

impl SearchIndex {
    /// Builds the index of a segment from the batches its spans file is written from (either
    /// layout: resource attributes on the rows are indexed too; in the files' layout a row's
    /// service is that of the row of `resources` its `resource_ref` names), `order` — the
    /// (batch, row) of each written row in file order, cut into row groups of
    /// `row_group_rows` — and its span events.
    pub(crate) fn build(
        spans: &[&RecordBatch],
        resources: &RecordBatch,
        order: &[(usize, usize)],
        row_group_rows: usize,
        events: &[RecordBatch],
    ) -> Result<Self> {
        let per_group = row_group_rows.max(1);
        let n_groups = order.len().div_ceil(per_group);
        let mut group_of: Vec<Vec<u32>> = spans.iter().map(|b| vec![0; b.num_rows()]).collect();
        for (p, &(b, r)) in order.iter().enumerate() {
            let slot = group_of.get_mut(b).and_then(|g| g.get_mut(r));
            let slot =
                slot.ok_or_else(|| StoreError::Decode(format!("sort order names row {r} of batch {b}")))?;
            *slot = (p / per_group) as u32;
        }
        let resource_services =
            resources.column_by_name("service_name").and_then(|c| c.as_string_opt::<i32>());
        let mut items: Vec<HashSet<u64>> = vec![HashSet::new(); n_groups];
        let (mut lo, mut hi) = (i64::MAX, i64::MIN);
        let mut by_service = true;
        for (b, groups) in spans.iter().zip(&group_of) {
            let dur = b
                .column_by_name("duration_ns")
                .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
                .ok_or_else(|| StoreError::Decode("spans batch without duration_ns".into()))?;
            for &d in dur.values() {
                (lo, hi) = (lo.min(d), hi.max(d));
            }
            for name in ["attributes", "resource_attributes"] {
                if let Some((m, keys, values)) = string_map(b, name) {
                    for (row, &g) in groups.iter().enumerate() {
                        row_items(m, keys, values, row, &mut items[g as usize]);
                    }
                }
            }
            let Some(st) = b.column_by_name("status_code").and_then(|c| c.as_string_opt::<i32>()) else {
                continue;
            };
            let own = b.column_by_name("service_name").and_then(|c| c.as_string_opt::<i32>());
            let refs =
                b.column_by_name(schema::RESOURCE_REF).and_then(|c| c.as_primitive_opt::<UInt64Type>());
            let service = |row: usize| match (own, refs, resource_services) {
                (Some(s), _, _) => s.is_valid(row).then(|| s.value(row)),
                (None, Some(refs), Some(s)) => {
                    let at = (refs.value(row) & 0xffff_ffff) as usize;
                    (at < s.len() && s.is_valid(at)).then(|| s.value(at))
                }
                _ => None,
            };
            for (row, &g) in groups.iter().enumerate() {
                if st.is_valid(row) && st.value(row) == "error" {
                    let items = &mut items[g as usize];
                    items.insert(error_status_item());
                    // A row without a known service: errors are not indexed by service.
                    match service(row) {
                        Some(s) => _ = items.insert(service_error_item(s)),
                        None => by_service = false,
                    }
                }
            }
        }
        let mut names = HashSet::new();
        for b in events {
            if let Some(n) = b.column_by_name("name").and_then(|c| c.as_string_opt::<i32>()) {
                names.extend(n.iter().flatten().map(key_item));
            }
        }
        // Each item goes to its row group's filter when no other row group holds it.
        let mut groups_holding: std::collections::HashMap<u64, u32> = std::collections::HashMap::new();
        for set in &items {
            for &h in set {
                *groups_holding.entry(h).or_default() += 1;
            }
        }
        let mut shared = HashSet::new();
        let groups = items
            .into_iter()
            .enumerate()
            .map(|(g, mut set)| {
                set.retain(|h| {
                    let only_here = groups_holding[h] == 1;
                    if !only_here {
                        shared.insert(*h);
                    }
                    only_here
                });
                let rows = per_group.min(order.len() - g * per_group);
                Group { rows: rows as u64, only: Bloom::of(&set, rows * MAX_BITS_PER_SPAN) }
            })
            .collect();
        let empty = order.is_empty();
        Ok(SearchIndex {
            min_duration_ns: if empty { 0 } else { lo },
            max_duration_ns: if empty { 0 } else { hi },
            groups,
            shared: Bloom::of(&shared, order.len() * MAX_BITS_PER_SPAN),
            events: Bloom::of(&names, order.len() * MAX_BITS_PER_SPAN),
            errors_by_service: by_service,
        })
    }

    fn group_holds(&self, g: &Group, item: u64) -> bool {
        self.shared.may_hold(item) || g.only.may_hold(item)
    }

    fn any_group_holds(&self, item: u64) -> bool {
        self.shared.may_hold(item) || self.groups.iter().any(|g| g.only.may_hold(item))
    }

    /// The item of an error status of a span of `service` (any service: `None`).
    fn error_item(&self, service: Option<&str>) -> u64 {
        match service.filter(|_| self.errors_by_service) {
            Some(s) => service_error_item(s),
            None => error_status_item(),
        }
    }

    /// Whether the span side of the condition `k` (`= v`) may hold in group `g`, for spans of
    /// `service` (any: `None`): its span attributes, an error status when the condition
    /// matches one, and for a key alone the segment's span event names.
    fn group_may_hold(&self, g: &Group, service: Option<&str>, k: &str, v: Option<&str>) -> bool {
        self.group_holds(g, attribute_item(k, v))
            || (error_status_matches(k, v) && self.group_holds(g, self.error_item(service)))
            || (v.is_none() && self.events.may_hold(key_item(k)))
    }

    /// Whether the span attributes of any group (or for a key alone, the span event names)
    /// may hold `k` (`= v`).
    fn attributes_may_hold(&self, k: &str, v: Option<&str>) -> bool {
        self.any_group_holds(attribute_item(k, v)) || (v.is_none() && self.events.may_hold(key_item(k)))
    }

    /// Whether a span of `service` (any: `None`) may have an error status.
    fn may_have_error(&self, service: Option<&str>) -> bool {
        self.any_group_holds(self.error_item(service))
    }

    /// Bytes the index takes in the footer.
    pub(crate) fn encoded_len(&self) -> usize {
        let blooms = self.groups.iter().map(|g| 8 + 5 + g.only.bits.len() * 8).sum::<usize>();
        let rest = 5 + self.shared.bits.len() * 8 + 5 + self.events.bits.len() * 8;
        ((HEADER + 4 + blooms + rest) * 4).div_ceil(3)
    }

    fn raw(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(self.encoded_len() * 3 / 4 + 1);
        b.extend([VERSION, u8::from(self.errors_by_service)]);
        b.extend(self.min_duration_ns.to_le_bytes());
        b.extend(self.max_duration_ns.to_le_bytes());
        b.extend((self.groups.len() as u32).to_le_bytes());
        for g in &self.groups {
            b.extend(g.rows.to_le_bytes());
            g.only.encode(&mut b);
        }
        self.shared.encode(&mut b);
        self.events.encode(&mut b);
        b
    }

    /// The footer value (base64 of: version, flags (1: errors by service), duration range,
    /// the row groups — rows, hash count, words, bits — and the shared and event names'
    /// filters).
    pub(crate) fn encode(&self) -> String {
        STANDARD_NO_PAD.encode(self.raw())
    }

    /// Reads a footer value; the error says what is wrong with it.
    pub(crate) fn decode(text: &str) -> std::result::Result<Self, String> {
        let b = STANDARD_NO_PAD.decode(text).map_err(|e| format!("not base64: {e}"))?;
        if b.len() < HEADER {
            return Err(format!("{} bytes, shorter than the header", b.len()));
        }
        if !(1..=VERSION).contains(&b[0]) {
            return Err(format!("version {} (this weft reads 1 to {VERSION})", b[0]));
        }
        let mut r = Reader { b: &b, at: 2 };
        let (min_duration_ns, max_duration_ns) = (r.u64()? as i64, r.u64()? as i64);
        let none = || Bloom { hashes: 1, bits: Vec::new() };
        if b[0] < 3 {
            if !(b.len() - HEADER).is_multiple_of(8) || b.len() == HEADER {
                return Err(format!("{} bytes, not a header and whole 64-bit words", b.len()));
            }
            let only = Bloom { hashes: hashes(b[1])?, bits: r.words((b.len() - HEADER) / 8)? };
            return Ok(SearchIndex {
                min_duration_ns,
                max_duration_ns,
                groups: vec![Group { rows: 0, only }],
                shared: none(),
                events: none(),
                errors_by_service: false,
            });
        }
        if b[1] > 1 {
            return Err(format!("flags {:#x} (this weft knows 0x1)", b[1]));
        }
        let n = r.u32()? as usize;
        // Each group takes at least 13 bytes: a count beyond the text is refused before use.
        if n > (b.len() - r.at) / 13 {
            return Err(format!("{n} row groups in {} bytes", b.len()));
        }
        let mut groups = Vec::with_capacity(n);
        for _ in 0..n {
            let rows = r.u64()?;
            groups.push(Group { rows, only: r.bloom()? });
        }
        let (shared, events) = (r.bloom()?, r.bloom()?);
        if r.at != b.len() {
            return Err(format!("{} bytes after the index", b.len() - r.at));
        }
        Ok(SearchIndex {
            min_duration_ns,
            max_duration_ns,
            groups,
            shared,
            events,
            errors_by_service: b[1] == 1,
        })
    }
}

fn hashes(n: u8) -> std::result::Result<u8, String> {
    if (1..=8).contains(&n) { Ok(n) } else { Err(format!("{n} hash functions (1 to 8 are written)")) }
}

/// A cursor over an index's bytes; reading past the end is an error naming the offset.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> std::result::Result<&[u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let end = end.ok_or_else(|| format!("cut short at byte {} of {}", self.at, self.b.len()))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn u64(&mut self) -> std::result::Result<u64, String> {
        let mut w = [0u8; 8];
        w.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(w))
    }

    fn u32(&mut self) -> std::result::Result<u32, String> {
        let mut w = [0u8; 4];
        w.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(w))
    }

    fn words(&mut self, n: usize) -> std::result::Result<Vec<u64>, String> {
        if n > (self.b.len() - self.at) / 8 {
            return Err(format!("{n} words at byte {} of {}", self.at, self.b.len()));
        }
        (0..n).map(|_| self.u64()).collect()
    }

    fn bloom(&mut self) -> std::result::Result<Bloom, String> {
        let hashes = hashes(self.take(1)?[0])?;
        let n = self.u32()? as usize;
        Ok(Bloom { hashes, bits: self.words(n)? })
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
            || (error_status_matches(k, v) && idx.may_have_error(q.service.as_deref()))
            || resources.is_some_and(|r| resources_match(r, k, v).any(|m| m))
    })
}

/// Whether the span attributes (or, for a key alone, the span event names) of a segment with
/// index `index` may hold `k` (`= v`); true without an index.
pub(crate) fn span_side_may_hold(index: Option<&SearchIndex>, k: &str, v: Option<&str>) -> bool {
    index.is_none_or(|idx| idx.attributes_may_hold(k, v))
}

/// Which row groups of a segment's spans file (of `file_rows` rows each) a search for `q` has
/// to read, by the segment's index and resources; `None`: all of them (the index does not
/// describe these row groups, or rules none out).
pub(crate) fn row_groups_to_read(
    idx: &SearchIndex,
    file_rows: &[u64],
    resources: Option<&RecordBatch>,
    q: &TraceQuery,
) -> Option<Vec<bool>> {
    let same =
        idx.groups.len() == file_rows.len() && idx.groups.iter().zip(file_rows).all(|(g, &n)| g.rows == n);
    if !same {
        return None;
    }
    // A condition whose resource side matches some resource of the segment may hold on any row.
    let conds: Vec<(&str, Option<&str>)> = (q.attributes.iter())
        .map(|(k, v)| (k.as_str(), v.as_deref()))
        .filter(|&(k, v)| resources.is_none_or(|r| !resources_match(r, k, v).any(|m| m)))
        .collect();
    let keep: Vec<bool> = idx
        .groups
        .iter()
        .map(|g| conds.iter().all(|&(k, v)| idx.group_may_hold(g, q.service.as_deref(), k, v)))
        .collect();
    keep.contains(&false).then_some(keep)
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
    let kv = string_map(resources, "resource_attributes");
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
    use std::sync::Arc;

    use datafusion::arrow::array::{ArrayRef, MapBuilder, StringBuilder, UInt64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn bloom_of(items: impl IntoIterator<Item = u64>) -> Bloom {
        Bloom::of(&items.into_iter().collect(), 1 << 20)
    }

    /// Two row groups: `k` = 0..20 only in the first, 20..40 only in the second, `k` = 99 and
    /// the key `k` in both; an error of service `cart` in the second.
    fn sample() -> SearchIndex {
        let group = |lo: usize, rows: u64, more: &[u64]| Group {
            rows,
            only: bloom_of((lo..lo + 20).map(|i| pair_item("k", &i.to_string())).chain(more.iter().copied())),
        };
        SearchIndex {
            min_duration_ns: 3,
            max_duration_ns: 9,
            groups: vec![
                group(0, 100, &[]),
                group(20, 40, &[error_status_item(), service_error_item("cart")]),
            ],
            shared: bloom_of([key_item("k"), pair_item("k", "99")]),
            events: bloom_of([key_item("retry")]),
            errors_by_service: true,
        }
    }

    fn q(service: Option<&str>, k: &str, v: Option<&str>) -> TraceQuery {
        TraceQuery {
            service: service.map(Into::into),
            attributes: vec![(k.into(), v.map(Into::into))],
            ..Default::default()
        }
    }

    #[test]
    fn round_trip_and_bad_footers() {
        let idx = sample();
        let text = idx.encode();
        assert_eq!(text.len(), idx.encoded_len());
        let back = SearchIndex::decode(&text).unwrap();
        assert_eq!(back, idx);
        assert!((0..40).chain([99]).all(|i| back.attributes_may_hold("k", Some(&i.to_string()))));
        assert!(back.attributes_may_hold("retry", None) && back.attributes_may_hold("k", None));
        for bad in ["%%%", "AAAA", &text[..text.len() - 3], &format!("{text}AAAA")] {
            assert!(SearchIndex::decode(bad).is_err(), "{bad}");
        }
        let mut raw = STANDARD_NO_PAD.decode(&text).unwrap();
        raw[HEADER..HEADER + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        let e = SearchIndex::decode(&STANDARD_NO_PAD.encode(&raw)).unwrap_err();
        assert!(e.contains("row groups in"), "{e}");
        raw[1] = 4;
        let e = SearchIndex::decode(&STANDARD_NO_PAD.encode(&raw)).unwrap_err();
        assert!(e.contains("flags 0x4"), "{e}");
        raw[0] = 9;
        let e = SearchIndex::decode(&STANDARD_NO_PAD.encode(&raw)).unwrap_err();
        assert!(e.contains("version 9"), "{e}");
    }

    /// Versions 1 and 2: one filter for the file (event names in it), no row counts, error
    /// statuses not by service.
    #[test]
    fn older_versions_read_as_one_group_of_unknown_rows() {
        let bloom = bloom_of([pair_item("k", "v"), key_item("retry"), error_status_item()]);
        for version in [1, 2] {
            let mut raw = vec![version, bloom.hashes];
            raw.extend(5i64.to_le_bytes());
            raw.extend(7i64.to_le_bytes());
            bloom.bits.iter().for_each(|w| raw.extend(w.to_le_bytes()));
            let idx = SearchIndex::decode(&STANDARD_NO_PAD.encode(&raw)).unwrap();
            assert_eq!(idx.groups, [Group { rows: 0, only: bloom.clone() }]);
            assert!(idx.attributes_may_hold("k", Some("v")) && idx.attributes_may_hold("retry", None));
            assert!(idx.may_have_error(Some("any service")));
            assert_eq!(row_groups_to_read(&idx, &[10], None, &q(None, "k", Some("w"))), None);
        }
    }

    #[test]
    fn row_groups_are_skipped_only_when_the_index_describes_them() {
        let idx = sample();
        let rows = [100, 40];
        let read = |q: &TraceQuery| row_groups_to_read(&idx, &rows, None, q);
        assert_eq!(read(&q(None, "k", Some("25"))), Some(vec![false, true]));
        assert_eq!(read(&q(None, "k", Some("3"))), Some(vec![true, false]));
        // Held by both (the shared filter), or by neither.
        assert_eq!(read(&q(None, "k", Some("99"))), None);
        assert_eq!(read(&q(None, "k", None)), None);
        assert_eq!(read(&q(None, "k", Some("no such value"))), Some(vec![false, false]));
        // An event name is known for the segment only: no group is ruled out.
        assert_eq!(read(&q(None, "retry", None)), None);
        // Error statuses, by service.
        assert_eq!(read(&q(None, "error", Some("true"))), Some(vec![false, true]));
        assert_eq!(read(&q(Some("cart"), "error", None)), Some(vec![false, true]));
        assert_eq!(read(&q(Some("currency"), "error", Some("true"))), Some(vec![false, false]));
        assert!(idx.may_have_error(Some("cart")) && !idx.may_have_error(Some("currency")));
        // Other row counts: the file is not the one the index describes.
        assert_eq!(row_groups_to_read(&idx, &[70, 70], None, &q(None, "k", Some("25"))), None);
        assert_eq!(row_groups_to_read(&idx, &[140], None, &q(None, "k", Some("25"))), None);
    }

    /// Built from spans in the files' layout: items only one row group holds are in its filter,
    /// the others in the shared one; an error's service comes from the resource row.
    #[test]
    fn build_splits_items_between_row_groups_and_the_shared_filter() {
        let mut attrs = MapBuilder::new(None, StringBuilder::new(), StringBuilder::new());
        for row in 0..6 {
            attrs.keys().append_value("k");
            attrs.values().append_value(if row % 2 == 0 { "every".to_owned() } else { format!("v{row}") });
            attrs.append(true).unwrap();
        }
        let attrs = attrs.finish();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(vec![5, 6, 7, 8, 9, 10])),
            Arc::new(attrs.clone()),
            Arc::new(StringArray::from(vec!["ok", "ok", "ok", "ok", "error", "ok"])),
            Arc::new(UInt64Array::from(vec![0, 0, 0, 0, 1, 0])),
        ];
        let schema = Schema::new(vec![
            Field::new("duration_ns", DataType::Int64, false),
            Field::new("attributes", attrs.data_type().clone(), true),
            Field::new("status_code", DataType::Utf8, false),
            Field::new(schema::RESOURCE_REF, DataType::UInt64, false),
        ]);
        let spans = RecordBatch::try_new(Arc::new(schema), columns).unwrap();
        let services: ArrayRef = Arc::new(StringArray::from(vec!["frontend", "cart"]));
        let resources = RecordBatch::try_from_iter([("service_name", services)]).unwrap();
        // File order: rows 5, 4, 3 | 2, 1, 0 (groups of 3).
        let order: Vec<(usize, usize)> = (0..6).rev().map(|r| (0, r)).collect();
        let idx = SearchIndex::build(&[&spans], &resources, &order, 3, &[]).unwrap();
        assert_eq!(idx.groups.iter().map(|g| g.rows).collect::<Vec<_>>(), [3, 3]);
        assert_eq!((idx.min_duration_ns, idx.max_duration_ns), (5, 10));
        assert!(idx.shared.may_hold(pair_item("k", "every")) && idx.shared.may_hold(key_item("k")));
        let rows = [3, 3];
        let read = |q: &TraceQuery| row_groups_to_read(&idx, &rows, None, q);
        assert_eq!(read(&q(None, "k", Some("v5"))), Some(vec![true, false]));
        assert_eq!(read(&q(None, "k", Some("v1"))), Some(vec![false, true]));
        assert_eq!(read(&q(None, "k", Some("every"))), None);
        assert_eq!(read(&q(Some("cart"), "error", None)), Some(vec![true, false]));
        assert!(!idx.may_have_error(Some("frontend")) && idx.may_have_error(None));
        assert_eq!(SearchIndex::decode(&idx.encode()).unwrap(), idx);
    }

    #[test]
    fn pairs_and_keys_differ() {
        assert_ne!(pair_item("a", "bc"), pair_item("ab", "c"));
        assert_ne!(key_item("a"), pair_item("a", ""));
        assert_ne!(error_status_item(), service_error_item(""));
    }
}
