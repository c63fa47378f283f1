//! Trace search: the criteria ([`TraceQuery`]), the SQL they become ([`search_sql`]) and
//! [`Store::search`].

use datafusion::arrow::array::{Array, FixedSizeBinaryArray};
use weft_model::{Span, SpanKind, TraceId};

use crate::error::{Result, StoreError};
use crate::query::sql_str;
use crate::{Store, arrow_rows};

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
    /// Trace ids matching `q`, newest first (by the latest matching span's start).
    pub async fn search_trace_ids(&self, q: &TraceQuery) -> Result<Vec<TraceId>> {
        let sql = search_sql(q);
        let res = self.sql(&sql, q.limit.max(1)).await?;
        let mut out = Vec::new();
        for b in &res.batches {
            let ids = b
                .column(0)
                .as_any()
                .downcast_ref::<FixedSizeBinaryArray>()
                .ok_or_else(|| StoreError::Decode("search returned no trace ids".into()))?;
            for i in 0..ids.len() {
                out.push(arrow_rows::trace_id_at(ids, i));
            }
        }
        Ok(out)
    }

    /// Traces matching `q` (each ordered by start time), newest first.
    pub async fn search(&self, q: &TraceQuery) -> Result<Vec<Vec<Span>>> {
        self.search_bounded(q, usize::MAX).await
    }

    /// [`Store::search`] returning only as many traces (newest first) as hold at most
    /// `max_spans` spans together; fails naming the limit when the newest alone holds more.
    pub async fn search_bounded(&self, q: &TraceQuery, max_spans: usize) -> Result<Vec<Vec<Span>>> {
        let ids = self.search_trace_ids(q).await?;
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

/// The SQL [`Store::search_trace_ids`] runs.
pub fn search_sql(q: &TraceQuery) -> String {
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
        let key = sql_str(k);
        match v {
            Some(v) => {
                let val = sql_str(v);
                let mut c = format!("(attributes[{key}] = {val} OR resource_attributes[{key}] = {val}");
                if k == "error" && (v == "true" || v.is_empty()) {
                    c.push_str(" OR status_code = 'error'");
                }
                c.push(')');
                conds.push(c);
            }
            None => {
                let mut c = format!(
                    "(attributes[{key}] IS NOT NULL OR resource_attributes[{key}] IS NOT NULL OR EXISTS (SELECT 1 FROM span_events e WHERE e.trace_id = spans.trace_id AND e.span_id = spans.span_id AND e.name = {key})"
                );
                if k == "error" {
                    c.push_str(" OR status_code = 'error'");
                }
                c.push(')');
                conds.push(c);
            }
        }
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
        "SELECT trace_id, max(start_time) AS latest FROM spans{filter} GROUP BY trace_id ORDER BY latest DESC LIMIT {}",
        q.limit.max(1)
    )
}
