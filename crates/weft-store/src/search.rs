//! Trace search: the criteria ([`TraceQuery`]), the SQL they become ([`search_sql`]) and
//! [`Store::search`].
//!
//! The indexed plan ([`SearchPlan::Indexed`], the default) searches the buffers and only the
//! segments that may hold a match (time range and operations from the manifest, durations
//! and a span attribute bloom filter from the segment's `search_index`, resource attributes
//! from its resources file), newest segments first in rounds of 1, 2, 4… segments, and stops
//! once the remaining segments are all older than the N-th trace found. The per-round top N
//! merged by each trace's latest matching span is exactly the top N of the whole store, so its
//! answer is the scan's ([`SearchPlan::Scan`]: the SQL of [`search_sql`] over everything,
//! kept as the reference).
//!
//! A round's segments that store their resources apart (the store's own: a reader's segments of
//! other collectors go through the `spans` view), and the buffers, are searched in the
//! files' layout (`search_spans`, [`file_layout_sql`]), never joined with their resources: an
//! attribute condition's resource side becomes `resource_ref IN (…)`, the resources that
//! match it found in the resources files beforehand, and its span side is dropped where the
//! bloom filters rule it out; row groups of a segment whose index rules them out are skipped;
//! Parquet evaluates the filters while decoding, so the other columns are decoded only for the
//! rows that pass them.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use datafusion::arrow::array::{Array, FixedSizeBinaryArray, TimestampNanosecondArray};
use weft_model::{Span, SpanKind, TraceId};

use crate::error::{Result, StoreError};
use crate::query::{Snapshot, sql_str};
use crate::search_index::{error_status_matches, resource_refs, span_side_may_hold};
use crate::segment::Segment;
use crate::{Store, arrow_rows, schema, search_index};

/// Most `resource_ref`s one condition of [`file_layout_sql`] lists; a round whose resources
/// match more is searched through the `spans` view.
const MAX_REFS: usize = 4096;

/// How a search finds its traces (the results are the same).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SearchPlan {
    /// Skip segments the indexes rule out, newest first, stop at N traces.
    #[default]
    Indexed,
    /// One SQL query over every segment and buffer (the reference).
    Scan,
}

/// Search criteria for traces (all given criteria must hold on one span).
#[derive(Debug, Clone, Default)]
pub struct TraceQuery {
    /// `service.name`.
    pub service: Option<String>,
    /// Span name.
    pub span_name: Option<String>,
    /// Span kind.
    pub span_kind: Option<SpanKind>,
    /// `key = value` on span or resource attributes; a key alone matches when the attribute
    /// exists or a span event has that name. The key `error` also matches error status.
    pub attributes: Vec<(String, Option<String>)>,
    /// Minimum span duration, ns.
    pub min_duration_ns: Option<u64>,
    /// Maximum span duration, ns.
    pub max_duration_ns: Option<u64>,
    /// Span start ≥ this, ns since the epoch.
    pub start_min_ns: Option<u64>,
    /// Span start ≤ this, ns since the epoch.
    pub start_max_ns: Option<u64>,
    /// Maximum number of traces (newest first).
    pub limit: usize,
}

impl Store {
    /// Trace ids matching `q`, newest first (by the latest matching span's start, ties by
    /// trace id, descending).
    pub async fn search_trace_ids(&self, q: &TraceQuery) -> Result<Vec<TraceId>> {
        self.search_trace_ids_with(q, SearchPlan::default()).await
    }

    /// [`Store::search_trace_ids`] by the given plan.
    pub async fn search_trace_ids_with(&self, q: &TraceQuery, plan: SearchPlan) -> Result<Vec<TraceId>> {
        let found = match plan {
            SearchPlan::Scan => self.search_part(self.snapshot()?, q).await?,
            SearchPlan::Indexed => self.search_indexed(q).await?,
        };
        Ok(found.into_iter().map(|(id, _)| id).collect())
    }

    /// The top `q.limit` (trace, latest matching start) of the segments and buffers of `snap`.
    async fn search_part(&self, snap: Arc<Snapshot>, q: &TraceQuery) -> Result<Vec<(TraceId, i64)>> {
        let ctx = self.session_of(snap, self.inner.runtime.clone())?;
        self.run_search(ctx, &search_sql(q), q).await
    }

    /// [`Store::search_part`] over segments that all store their resources apart (and
    /// buffers), in the files' layout.
    async fn search_files(&self, snap: Arc<Snapshot>, q: &TraceQuery) -> Result<Vec<(TraceId, i64)>> {
        let Some(sql) = file_layout_sql(q, &snap) else { return self.search_part(snap, q).await };
        // Row groups the segments' search indexes rule out are not read.
        let row_groups: Vec<Option<Vec<bool>>> =
            snap.segments.iter().map(|s| s.search_row_groups(q)).collect();
        let skipped = row_groups.iter().flatten().flatten().filter(|keep| !**keep).count();
        self.inner.metrics.search_row_groups_skipped.fetch_add(skipped as u64, Ordering::Relaxed);
        let ctx = self.search_session(snap, row_groups, self.inner.runtime.clone())?;
        self.run_search(ctx, &sql, q).await
    }

    /// Runs a search's SQL: rows of (trace id, latest matching start).
    async fn run_search(
        &self,
        ctx: datafusion::prelude::SessionContext,
        sql: &str,
        q: &TraceQuery,
    ) -> Result<Vec<(TraceId, i64)>> {
        let res = self.sql_in(ctx, sql, q.limit.max(1), usize::MAX).await?;
        let mut out = Vec::new();
        for b in &res.batches {
            let ids = b.column(0).as_any().downcast_ref::<FixedSizeBinaryArray>();
            let latest = b.column(1).as_any().downcast_ref::<TimestampNanosecondArray>();
            let (Some(ids), Some(latest)) = (ids, latest) else {
                return Err(StoreError::Decode("search returned no trace ids and times".into()));
            };
            for i in 0..ids.len() {
                out.push((arrow_rows::trace_id_at(ids, i), latest.value(i)));
            }
        }
        Ok(out)
    }

    async fn search_indexed(&self, q: &TraceQuery) -> Result<Vec<(TraceId, i64)>> {
        let snap = self.snapshot()?;
        let limit = q.limit.max(1);
        let mut segments: Vec<_> = snap
            .segments
            .iter()
            .filter(|s| search_index::may_match(&s.meta, s.search_index(), s.resources(), q))
            .cloned()
            .collect();
        let newest = |s: &Segment| s.meta.file(schema::SPANS).map_or(0, |f| f.max_time_ns);
        segments.sort_by_key(|s| std::cmp::Reverse(newest(s)));
        let mut best: HashMap<TraceId, i64> = HashMap::new();
        let (mut at, mut round) = (0usize, 1usize);
        let mut memory = Some((snap.memory.clone(), snap.memory_resources.clone()));
        loop {
            let group = segments[at..(at + round).min(segments.len())].to_vec();
            at += group.len();
            round *= 2;
            let (memory, memory_resources) = memory.take().unwrap_or_default();
            // Segments written before resources were stored apart, and other collectors'
            // segments of a read-only store over several (their files and `resource_ref`s are
            // their collector's, which only the `spans` view tells apart), go through the view.
            let (apart, legacy): (Vec<_>, Vec<_>) =
                group.into_iter().partition(|s| s.resources().is_some() && s.origin.is_none());
            let part = |segments, memory, memory_resources| {
                Arc::new(Snapshot { segments, memory, memory_resources, files_at: snap.files_at.clone() })
            };
            let mut found = self.search_files(part(apart, memory, memory_resources), q).await?;
            if !legacy.is_empty() {
                found.extend(self.search_part(part(legacy, Default::default(), Vec::new()), q).await?);
            }
            for (id, t) in found {
                let e = best.entry(id).or_insert(t);
                *e = (*e).max(t);
            }
            let Some(next) = segments.get(at) else { break };
            let ranked = rank(&best);
            if ranked.len() >= limit && i128::from(newest(next)) < i128::from(ranked[limit - 1].1) {
                break;
            }
        }
        let m = &self.inner.metrics;
        m.search_segments_read.fetch_add(at as u64, Ordering::Relaxed);
        m.search_segments_skipped.fetch_add((snap.segments.len() - at) as u64, Ordering::Relaxed);
        let mut ranked = rank(&best);
        ranked.truncate(limit);
        Ok(ranked)
    }

    /// Traces matching `q` (each ordered by start time), newest first.
    pub async fn search(&self, q: &TraceQuery) -> Result<Vec<Vec<Span>>> {
        self.search_bounded(q, usize::MAX).await
    }

    /// [`Store::search`] by the given plan.
    pub async fn search_with(&self, q: &TraceQuery, plan: SearchPlan) -> Result<Vec<Vec<Span>>> {
        self.search_bounded_with(q, usize::MAX, plan).await
    }

    /// [`Store::search`] returning only as many traces (newest first) as hold at most
    /// `max_spans` spans together; fails naming the limit when the newest alone holds more.
    pub async fn search_bounded(&self, q: &TraceQuery, max_spans: usize) -> Result<Vec<Vec<Span>>> {
        self.search_bounded_with(q, max_spans, SearchPlan::default()).await
    }

    async fn search_bounded_with(
        &self,
        q: &TraceQuery,
        max_spans: usize,
        plan: SearchPlan,
    ) -> Result<Vec<Vec<Span>>> {
        let ids = self.search_trace_ids_with(q, plan).await?;
        let store = self.clone();
        tokio::task::spawn_blocking(move || {
            let mut out = Vec::with_capacity(ids.len());
            let mut n = 0usize;
            for id in ids {
                // Reading stops past the spans left of the limit: a huge trace is not loaded.
                let read = store.trace_bounded(id, max_spans - n)?;
                if read.truncated {
                    if out.is_empty() {
                        return Err(StoreError::Query(format!(
                            "the newest matching trace holds more than the limit of {max_spans} spans"
                        )));
                    }
                    break;
                }
                let t = read.spans;
                n += t.len();
                if !t.is_empty() {
                    out.push(t);
                }
            }
            Ok(out)
        })
        .await
        .map_err(|e| StoreError::Query(format!("search task: {e}")))?
    }
}

/// (trace, latest) in the search's order: latest first, ties by trace id descending.
fn rank(best: &HashMap<TraceId, i64>) -> Vec<(TraceId, i64)> {
    let mut v: Vec<(TraceId, i64)> = best.iter().map(|(id, t)| (*id, *t)).collect();
    v.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(b.0.cmp(&a.0)));
    v
}

/// The SQL [`Store::search_trace_ids`] runs by [`SearchPlan::Scan`].
pub fn search_sql(q: &TraceQuery) -> String {
    search_sql_over("spans", q, |k, v| {
        let key = sql_str(k);
        match v.map(sql_str) {
            Some(v) => vec![format!("attributes[{key}] = {v}"), format!("resource_attributes[{key}] = {v}")],
            None => vec![
                format!("attributes[{key}] IS NOT NULL"),
                format!("resource_attributes[{key}] IS NOT NULL"),
                events_have(&key),
            ],
        }
    })
}

/// A span event of the span is named `key` (an SQL literal).
fn events_have(key: &str) -> String {
    format!(
        "EXISTS (SELECT 1 FROM span_events e WHERE e.trace_id = spans.trace_id AND e.span_id = spans.span_id AND e.name = {key})"
    )
}

/// The search's SQL over `search_spans` (the spans of `part`'s segments, which all store their
/// resources apart, and of its buffers): each attribute condition's span side only when a
/// bloom filter of `part` (or a buffer) may hold it, its resource side as the `resource_ref`s
/// of the resources that hold it. `None` when a condition's resources are more than
/// [`MAX_REFS`].
fn file_layout_sql(q: &TraceQuery, part: &Snapshot) -> Option<String> {
    let buffered = part.memory[crate::memtable::T_SPANS].iter().any(|b| b.num_rows() > 0);
    let mut too_many = false;
    let sql = search_sql_over("search_spans AS spans", q, |k, v| {
        let key = sql_str(k);
        let mut branches = Vec::new();
        if buffered || part.segments.iter().any(|s| span_side_may_hold(s.search_index(), k, v)) {
            branches.push(match v {
                Some(v) => format!("attributes[{key}] = {}", sql_str(v)),
                None => format!("(attributes[{key}] IS NOT NULL OR {})", events_have(&key)),
            });
        }
        let segments = part.segments.iter().filter_map(|s| Some((s.meta.id, s.resources()?)));
        let buffers = part.memory_resources.iter().map(|(id, r)| (*id, r));
        let refs: Vec<u64> = segments.chain(buffers).flat_map(|(id, r)| resource_refs(id, r, k, v)).collect();
        too_many |= refs.len() > MAX_REFS;
        if !refs.is_empty() {
            let list: Vec<String> = refs.iter().map(u64::to_string).collect();
            branches.push(format!("resource_ref IN ({})", list.join(", ")));
        }
        branches
    });
    (!too_many).then_some(sql)
}

/// The search's SQL over `table` (`spans` rows, or their files' layout): `attribute(key,
/// value)` gives the branches (ORed) of an attribute condition besides an error status.
fn search_sql_over(
    table: &str,
    q: &TraceQuery,
    mut attribute: impl FnMut(&str, Option<&str>) -> Vec<String>,
) -> String {
    let mut conds: Vec<String> = Vec::new();
    if let Some(s) = &q.service {
        conds.push(format!("service_name = {}", sql_str(s)));
    }
    if let Some(n) = &q.span_name {
        conds.push(format!("name = {}", sql_str(n)));
    }
    if let Some(k) = q.span_kind {
        conds.push(format!("kind = {}", sql_str(k.as_str())));
    }
    for (k, v) in &q.attributes {
        let mut branches = attribute(k, v.as_deref());
        if error_status_matches(k, v.as_deref()) {
            branches.push("status_code = 'error'".into());
        }
        conds.push(match branches.len() {
            0 => "FALSE".into(),
            _ => format!("({})", branches.join(" OR ")),
        });
    }
    if let Some(d) = q.min_duration_ns {
        conds.push(format!("duration_ns >= {}", d.min(i64::MAX as u64)));
    }
    if let Some(d) = q.max_duration_ns {
        conds.push(format!("duration_ns <= {}", d.min(i64::MAX as u64)));
    }
    if let Some(t) = q.start_min_ns {
        conds.push(format!("start_time >= to_timestamp_nanos({})", t.min(i64::MAX as u64)));
    }
    if let Some(t) = q.start_max_ns {
        conds.push(format!("start_time <= to_timestamp_nanos({})", t.min(i64::MAX as u64)));
    }
    let filter = if conds.is_empty() { String::new() } else { format!(" WHERE {}", conds.join(" AND ")) };
    format!(
        "SELECT trace_id, max(start_time) AS latest FROM {table}{filter} GROUP BY trace_id ORDER BY latest DESC, trace_id DESC LIMIT {}",
        q.limit.max(1)
    )
}
