//! Reads: a trace by id, SQL over a snapshot of segments and buffers, the service and
//! operation lists, and spans of a time window one trace at a time.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use datafusion::arrow::array::{Array, StringArray};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::prelude::{SQLOptions, SessionConfig, SessionContext};
use futures::StreamExt;
use weft_model::{Span, SpanKind, TraceId};

use crate::error::{Result, StoreError};
use crate::query::{Snapshot, SnapshotTable};
use crate::query_memory::QueryMemory;
use crate::{RecordBatch, Store, arrow_rows, batches_to_spans, dedup, memtable, resources, schema};

/// What one query may return and hold ([`Store::sql_bounded`]).
#[derive(Debug, Clone)]
pub struct SqlLimits {
    /// Rows returned at most (`truncated` says when more existed).
    pub max_rows: usize,
    /// Arrow bytes the result may hold.
    pub max_bytes: usize,
    /// Bytes of the store's memory pool the query may hold while it runs.
    pub max_memory: usize,
    /// The setting that sets `max_memory`, named in the error past it.
    pub memory_setting: &'static str,
}

/// Result of a SQL query.
#[derive(Debug, Clone)]
pub struct SqlResult {
    /// Output schema.
    pub schema: SchemaRef,
    /// Output rows.
    pub batches: Vec<RecordBatch>,
    /// True when rows past the caller's row limit were cut.
    pub truncated: bool,
}

/// Span event and span link rows a bounded trace read takes per span of its limit.
pub const EVENT_ROWS_PER_SPAN: usize = 16;

/// What [`Store::trace_bounded`] read.
#[derive(Debug, Default)]
pub struct TraceRead {
    /// The spans read, ordered by start time.
    pub spans: Vec<Span>,
    /// Whether the trace had more rows than the limit (those were not read).
    pub truncated: bool,
}

impl Store {
    pub(crate) fn snapshot(&self) -> Result<Arc<Snapshot>> {
        let st = self.inner.state.read();
        let mut memory: [Vec<RecordBatch>; 4] = Default::default();
        let mut memory_resources = Vec::with_capacity(st.frozen.len() + 1);
        for f in &st.frozen {
            for (t, m) in memory.iter_mut().enumerate() {
                m.extend(f.mem.tables[t].iter().cloned());
            }
            memory_resources.push((u64::from(f.mem.resources.id()), f.mem.resources.batch()?));
        }
        let active = st.active.snapshot();
        for (t, m) in memory.iter_mut().enumerate() {
            m.extend(active[t].iter().cloned());
        }
        memory_resources.push((u64::from(st.active.resources.id()), st.active.resources.batch()?));
        Ok(Arc::new(Snapshot {
            segments: st.segments.clone(),
            files_at: self.inner.files_at.clone(),
            memory,
            memory_resources,
        }))
    }

    /// All spans of a trace, ordered by start time (empty when unknown).
    pub fn trace(&self, id: TraceId) -> Result<Vec<Span>> {
        Ok(self.trace_bounded(id, usize::MAX)?.spans)
    }

    /// At most `max_spans` spans of a trace, ordered by start time: reading stops once more
    /// than `max_spans` span rows (or [`EVENT_ROWS_PER_SPAN`] times as many span event or
    /// link rows) have been read, so a huge trace costs no more memory than the limit;
    /// `truncated` says when it stopped so.
    pub fn trace_bounded(&self, id: TraceId, max_spans: usize) -> Result<TraceRead> {
        let snap = self.snapshot()?;
        // One row past the limit tells a trace of exactly `max_spans` spans from a larger one.
        let spans_limit = max_spans.saturating_add(1);
        let limits = [
            spans_limit,
            spans_limit.saturating_mul(EVENT_ROWS_PER_SPAN),
            spans_limit.saturating_mul(EVENT_ROWS_PER_SPAN),
        ];
        let mut parts: [Vec<RecordBatch>; 3] = Default::default();
        let rows = |p: &[RecordBatch]| p.iter().map(RecordBatch::num_rows).sum::<usize>();
        let left = |parts: &[Vec<RecordBatch>; 3]| -> [usize; 3] {
            std::array::from_fn(|t| limits[t] - rows(&parts[t]))
        };
        for seg in &snap.segments {
            let budget = left(&parts);
            if budget.contains(&0) {
                break;
            }
            if let Some(found) = seg.read_trace(&id, budget)? {
                for (p, f) in parts.iter_mut().zip(found) {
                    p.extend(f);
                }
            }
        }
        for (t, p) in parts.iter_mut().enumerate() {
            let mut found = Vec::new();
            let mut budget = limits[t] - rows(p);
            for b in &snap.memory[t] {
                if budget == 0 {
                    break;
                }
                if let Some(f) = arrow_rows::filter_trace(b, &id)? {
                    let f = if f.num_rows() > budget { f.slice(0, budget) } else { f };
                    budget -= f.num_rows();
                    found.push(f);
                }
            }
            if t == memtable::T_SPANS && !found.is_empty() {
                // Buffered spans name their resources; put the columns back.
                let lookup =
                    resources::ResourceLookup::new(snap.memory_resources.iter().map(|(i, b)| (*i, b)))?;
                found = resources::expand_all(found, &lookup)?;
            }
            p.extend(found);
        }
        let truncated = left(&parts).contains(&0);
        self.inner.metrics.trace_rows_read.fetch_add(rows(&parts[0]) as u64, Ordering::Relaxed);
        // A span acknowledged twice (a client's retry) is stored twice: read it once.
        let ([spans, events, links], _) = dedup::dedup_spans(parts)?;
        let mut spans = batches_to_spans(&spans, &events, &links)?;
        spans.sort_by(|a, b| a.start_ns.cmp(&b.start_ns).then(a.span_id.cmp(&b.span_id)));
        spans.truncate(max_spans);
        Ok(TraceRead { spans, truncated })
    }

    /// A DataFusion session over a fresh snapshot: tables `spans`, `span_events`,
    /// `span_links`, `events`, and the result tables as `live_NAME` ([`crate::results`]). The
    /// snapshot (and the segment files it names) lives as long as the context.
    pub fn session(&self) -> Result<SessionContext> {
        self.session_in(self.inner.runtime.clone())
    }

    /// [`Store::session`] whose queries may hold at most `max_memory` bytes of the shared
    /// memory pool between them (`setting` names the limit in the error past it).
    pub fn session_bounded(&self, max_memory: usize, setting: &'static str) -> Result<SessionContext> {
        let shared = &self.inner.runtime;
        let pool = QueryMemory::new(shared.memory_pool.clone(), max_memory, setting);
        let runtime =
            RuntimeEnvBuilder::from_runtime_env(shared).with_memory_pool(Arc::new(pool)).build_arc()?;
        self.session_in(runtime)
    }

    fn session_in(&self, runtime: Arc<RuntimeEnv>) -> Result<SessionContext> {
        self.session_of(self.snapshot()?, runtime)
    }

    /// A session over `snap` (a part of a snapshot, for search).
    pub(crate) fn session_of(&self, snap: Arc<Snapshot>, runtime: Arc<RuntimeEnv>) -> Result<SessionContext> {
        self.session_with(snap, runtime, session_config())
    }

    /// A session over `snap` for search: the tables of [`Store::session_of`], with the Parquet
    /// filters evaluated while decoding (the columns a search reads besides its filters' are
    /// decoded only for the rows that pass them), and `search_spans`, the spans of `snap`'s
    /// segments with their resources apart (and of its buffers) in the files' layout, reading
    /// only the row groups `row_groups` names (see [`crate::query::FileLayoutSpans`]).
    pub(crate) fn search_session(
        &self,
        snap: Arc<Snapshot>,
        row_groups: Vec<Option<Vec<bool>>>,
        runtime: Arc<RuntimeEnv>,
    ) -> Result<SessionContext> {
        let mut config = session_config();
        let parquet = &mut config.options_mut().execution.parquet;
        (parquet.pushdown_filters, parquet.reorder_filters) = (true, true);
        let ctx = self.session_with(snap.clone(), runtime, config)?;
        ctx.register_table(
            "search_spans",
            Arc::new(crate::query::FileLayoutSpans { snapshot: snap, row_groups }),
        )?;
        Ok(ctx)
    }

    fn session_with(
        &self,
        snap: Arc<Snapshot>,
        runtime: Arc<RuntimeEnv>,
        config: SessionConfig,
    ) -> Result<SessionContext> {
        let ctx = SessionContext::new_with_config_rt(config, runtime);
        for (t, name) in schema::TABLE_NAMES.iter().enumerate() {
            let table = SnapshotTable { snapshot: snap.clone(), table: t, schema: schema::schema_of(t) };
            ctx.register_table(*name, Arc::new(table))?;
        }
        crate::results::register(self.dir(), &ctx)?;
        Ok(ctx)
    }

    /// Runs one read-only SQL statement (no DDL, DML or `SET`); at most `max_rows` rows are
    /// returned (`truncated` says whether more existed).
    pub async fn sql(&self, sql: &str, max_rows: usize) -> Result<SqlResult> {
        self.sql_in(self.session()?, sql, max_rows, usize::MAX).await
    }

    /// [`Store::sql`] bounded by `limits`: the result may hold at most `max_bytes` of Arrow
    /// memory (one row can be huge: `repeat('x', 100000000)`), and the query at most
    /// `max_memory` of the shared memory pool while it runs; past either it fails with
    /// [`StoreError::Query`] naming the limit.
    pub async fn sql_bounded(&self, sql: &str, limits: &SqlLimits) -> Result<SqlResult> {
        let ctx = self.session_bounded(limits.max_memory, limits.memory_setting)?;
        self.sql_in(ctx, sql, limits.max_rows, limits.max_bytes).await
    }

    pub(crate) async fn sql_in(
        &self,
        ctx: SessionContext,
        sql: &str,
        max_rows: usize,
        max_bytes: usize,
    ) -> Result<SqlResult> {
        let opts = SQLOptions::new().with_allow_ddl(false).with_allow_dml(false).with_allow_statements(false);
        let df = ctx.sql_with_options(sql, opts).await.map_err(|e| StoreError::Query(e.to_string()))?;
        let schema: SchemaRef = Arc::new(df.schema().as_arrow().clone());
        let mut stream = df.execute_stream().await.map_err(|e| StoreError::Query(e.to_string()))?;
        let mut batches = Vec::new();
        let mut rows = 0usize;
        let mut truncated = false;
        let mut bytes = 0usize;
        while let Some(b) = stream.next().await {
            let b = b.map_err(|e| StoreError::Query(e.to_string()))?;
            bytes = bytes.saturating_add(b.get_array_memory_size());
            if bytes > max_bytes {
                return Err(StoreError::Query(format!(
                    "the result exceeds the limit of {max_bytes} bytes: select fewer or smaller columns, or fewer rows"
                )));
            }
            if rows + b.num_rows() > max_rows {
                let keep = max_rows - rows;
                if keep > 0 {
                    batches.push(b.slice(0, keep));
                }
                truncated = true;
                break;
            }
            rows += b.num_rows();
            batches.push(b);
        }
        Ok(SqlResult { schema, batches, truncated })
    }

    /// Distinct (service, span name, kind) triples, sorted. Served from per-segment lists in
    /// the manifest and the buffers; falls back to SQL when a list was too long to keep.
    pub async fn operations_all(&self) -> Result<Vec<(String, String, String)>> {
        let (mut set, complete) = {
            let st = self.inner.state.read();
            let mut set: BTreeSet<(String, String, String)> = BTreeSet::new();
            let mut complete = st.active.operations_complete;
            set.extend(st.active.operations_sorted());
            for f in &st.frozen {
                complete &= f.mem.operations_complete;
                set.extend(f.mem.operations_sorted());
            }
            for s in &st.segments {
                complete &= s.meta.operations_complete;
                set.extend(s.meta.operations.iter().cloned());
            }
            (set, complete)
        };
        if !complete {
            let r = self.sql("SELECT DISTINCT service_name, name, kind FROM spans", 1_000_000).await?;
            for b in &r.batches {
                let col = |i: usize| b.column(i).as_any().downcast_ref::<StringArray>().cloned();
                let (Some(a), Some(n), Some(k)) = (col(0), col(1), col(2)) else { continue };
                for i in 0..b.num_rows() {
                    set.insert((a.value(i).to_owned(), n.value(i).to_owned(), k.value(i).to_owned()));
                }
            }
        }
        Ok(std::mem::take(&mut set).into_iter().collect())
    }

    /// Service names, sorted.
    pub async fn services(&self) -> Result<Vec<String>> {
        let ops = self.operations_all().await?;
        let set: BTreeSet<String> = ops.into_iter().map(|o| o.0).collect();
        Ok(set.into_iter().collect())
    }

    /// (span name, kind) of a service (all services when `None`), sorted.
    pub async fn operations(&self, service: Option<&str>) -> Result<Vec<(String, SpanKind)>> {
        let ops = self.operations_all().await?;
        let mut m: BTreeMap<(String, &'static str), SpanKind> = BTreeMap::new();
        for (s, n, k) in ops {
            if service.is_none_or(|want| want == s) {
                let kind = SpanKind::parse(&k).unwrap_or_default();
                m.insert((n, kind.as_str()), kind);
            }
        }
        Ok(m.into_iter().map(|((n, _), k)| (n, k)).collect())
    }

    /// Spans (without events and links) that started in `[from_ns, to_ns]`, delivered one
    /// trace at a time (`f` gets all of a trace's spans in the window). Memory stays bounded by
    /// DataFusion's sort (which spills).
    pub async fn for_each_trace_in_window(
        &self,
        from_ns: u64,
        to_ns: u64,
        mut f: impl FnMut(&[Span]) + Send,
    ) -> Result<u64> {
        let sql = format!(
            "SELECT * FROM spans WHERE start_time >= to_timestamp_nanos({}) AND start_time <= to_timestamp_nanos({}) ORDER BY trace_id",
            from_ns.min(i64::MAX as u64),
            to_ns.min(i64::MAX as u64)
        );
        let ctx = self.session()?;
        let df = ctx.sql(&sql).await.map_err(|e| StoreError::Query(e.to_string()))?;
        let mut stream = df.execute_stream().await.map_err(|e| StoreError::Query(e.to_string()))?;
        let mut pending: Vec<Span> = Vec::new();
        let mut traces = 0u64;
        while let Some(b) = stream.next().await {
            let b = b.map_err(|e| StoreError::Query(e.to_string()))?;
            for s in batches_to_spans(std::slice::from_ref(&b), &[], &[])? {
                if pending.last().is_some_and(|p| p.trace_id != s.trace_id) {
                    f(&pending);
                    traces += 1;
                    pending.clear();
                }
                pending.push(s);
            }
        }
        if !pending.is_empty() {
            f(&pending);
            traces += 1;
        }
        Ok(traces)
    }
}

fn session_config() -> SessionConfig {
    SessionConfig::new()
        .with_target_partitions(std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2))
        .with_information_schema(true)
}
