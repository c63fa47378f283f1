//! `GET /api/ui/breakdown`: where the time of one trace or of a search result went, per
//! component, service or operation, with the wire between components and an optional split by
//! request direction. The numbers are [`weft_analyze::breakdown`]'s — the project's one way of
//! computing breakdowns (`weft breakdown` prints the same): per trace
//! [`trace_breakdown`] (span count, total, self and timeline time per row; the timeline rows
//! add up to the trace's end-to-end time), over all traces a [`BreakdownBuilder`] split by the
//! direction rules (per direction and row: mean, median, p95, min, max, share).
//!
//! | parameter | meaning |
//! |---|---|
//! | `traces` | trace ids, comma-separated (1 to [`MAX_TRACES`]) |
//! | `by` | row key: `component` (default: `weft.component`, else `service.name`), `service`, `operation`, `attr:KEY` |
//! | `wire` | `total` (default: one `wire` row) or `link` (one row per link, `wire A→B`) |
//! | `rules` | direction rules separated by `;` or new lines, each `LABEL: COND, COND, ...` ([`weft_analyze::breakdown::Rule`]); none: one direction, `all` |
//! | `adjust` | read-time clock-skew adjustment, as for the trace view |
//!
//! Answer (times in ns):
//!
//! ```text
//! { by, wire, rules: [text], labels: [direction],
//!   traces: [{traceId, startMs, durationNs, spans, root, rootName, from, to, rows: [TraceRow]}],
//!   directions: [DirectionBreakdown], traceCount, spanCount, unclassifiedSpans,
//!   unclassifiedTraces, duplicateSpanIds, sampled,
//!   flows: [{source, destination, spans, firstOffsetNs}], missing: [id], skipped: [id],
//!   elapsedMs }
//! ```
//!
//! `from` / `to` are the groups of each trace's first-starting and last-ending span (what the
//! `from=` / `to=` rule conditions compare); `flows` are the distinct `source.address` →
//! `destination.address` pairs on the spans (network hops of woven traces), earliest in their
//! trace first — the UI offers them, and the root span names, as ready-made rules. Traces the
//! store no longer has are listed in `missing`; once [`MAX_SPANS`] spans have been broken down,
//! the remaining traces are not read and are listed in `skipped`.
//!
//! Memory: one trace's spans at a time (traces the trace view has prepared are read from its
//! cache without copying), plus the builder's per-direction sums and samples.

use std::collections::HashMap;
use std::time::Instant;

use axum::extract::{Query, State};
use axum::response::Response;
use serde_json::{Value as J, json};
use weft_analyze::breakdown::{BreakdownBuilder, Classifier, GroupBy, Options, WireMode, trace_breakdown};
use weft_model::{Span, TraceId, Value, conv};

use weft_store::StoreError;

use crate::api::{ApiError, json_bytes};
use crate::metrics::Api;
use crate::params::{self, ParamError, Params};
use crate::state::AppState;

/// Most traces one request may break down.
pub const MAX_TRACES: usize = 500;
/// Spans broken down per request before the remaining traces are skipped (and listed).
pub const MAX_SPANS: usize = 2_000_000;
/// Flows (address pairs) reported.
pub const MAX_FLOWS: usize = 16;
/// Distinct flows tracked while scanning (bounded memory on many addresses).
const MAX_FLOWS_TRACKED: usize = 4096;

/// A parsed breakdown request.
#[derive(Debug, Clone)]
pub struct Request {
    /// Traces, in the given order (duplicates removed).
    pub ids: Vec<TraceId>,
    /// Row key and wire rows.
    pub opts: Options,
    /// The direction rules' text, as given.
    pub rules: Vec<String>,
    /// The parsed rules.
    pub classifier: Classifier,
    /// Clock-skew adjustment.
    pub adjust: bool,
}

/// The `by` parameter's canonical text.
pub fn group_name(g: &GroupBy) -> String {
    match g {
        GroupBy::Component => "component".into(),
        GroupBy::Service => "service".into(),
        GroupBy::Operation => "operation".into(),
        GroupBy::Attribute(k) => format!("attr:{k}"),
    }
}

/// Reads the query parameters (every error names its parameter).
pub fn parse(p: &Params) -> Result<Request, ParamError> {
    let nonempty = |k: &str| p.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
    let group_by = match nonempty("by") {
        None => GroupBy::Component,
        Some(v) => GroupBy::parse(v).ok_or_else(|| {
            ParamError(format!("malformed parameter by: {v:?} (component, service, operation or attr:KEY)"))
        })?,
    };
    let wire = match nonempty("wire") {
        None | Some("total") => WireMode::Total,
        Some("link") => WireMode::PerLink,
        Some(v) => return Err(ParamError(format!("malformed parameter wire: {v:?} (total or link)"))),
    };
    let rules: Vec<String> = nonempty("rules")
        .map(|v| v.split([';', '\n']).map(str::trim).filter(|r| !r.is_empty()).map(str::to_owned).collect())
        .unwrap_or_default();
    let classifier =
        Classifier::parse(&rules).map_err(|e| ParamError(format!("malformed parameter rules: {e}")))?;
    let mut ids: Vec<TraceId> = Vec::new();
    for x in nonempty("traces").unwrap_or("").split(',').map(str::trim).filter(|x| !x.is_empty()) {
        let id = params::trace_id_param("traces", x)?;
        if !ids.contains(&id) {
            ids.push(id);
        }
        if ids.len() > MAX_TRACES {
            return Err(ParamError(format!(
                "malformed parameter traces: more than {MAX_TRACES} traces at once"
            )));
        }
    }
    if ids.is_empty() {
        return Err(ParamError("breakdown needs trace ids: ?traces=a,b,...".into()));
    }
    let adjust = match params::get(p, &["adjust", "adjustClockSkew"]) {
        Some((v, name)) => params::bool_param(name, v)?,
        None => false,
    };
    Ok(Request { ids, opts: Options { group_by, wire }, rules, classifier, adjust })
}

/// The text form of an attribute, if the span (or its resource) has it.
fn text(span: &Span, key: &str) -> Option<String> {
    match span.attributes.get(key).or_else(|| span.resource.attributes.get(key))? {
        Value::Str(s) if s.is_empty() => None,
        Value::Str(s) => Some(s.to_string()),
        v => Some(v.to_string()),
    }
}

#[derive(Default)]
struct Flows {
    /// (source, destination) → (spans, earliest offset in its trace).
    seen: HashMap<(String, String), (u64, u64)>,
    /// Spans with a flow not tracked because the table was full.
    untracked: u64,
}

impl Flows {
    fn scan(&mut self, spans: &[Span], start_ns: u64) {
        for s in spans {
            let (Some(src), Some(dst)) = (text(s, conv::SOURCE_ADDRESS), text(s, conv::DESTINATION_ADDRESS))
            else {
                continue;
            };
            let off = s.start_ns.saturating_sub(start_ns);
            let full = self.seen.len() >= MAX_FLOWS_TRACKED;
            match self.seen.get_mut(&(src.clone(), dst.clone())) {
                Some(e) => {
                    e.0 += 1;
                    e.1 = e.1.min(off);
                }
                None if full => self.untracked += 1,
                None => {
                    self.seen.insert((src, dst), (1, off));
                }
            }
        }
    }

    fn json(self) -> J {
        let mut v: Vec<((String, String), (u64, u64))> = self.seen.into_iter().collect();
        v.sort_by(|a, b| a.1.1.cmp(&b.1.1).then(b.1.0.cmp(&a.1.0)).then(a.0.cmp(&b.0)));
        J::Array(
            v.into_iter()
                .take(MAX_FLOWS)
                .map(|((s, d), (n, off))| json!({"source": s, "destination": d, "spans": n, "firstOffsetNs": off}))
                .collect(),
        )
    }
}

/// One trace's row of the answer: its own breakdown and what the rule presets need.
fn trace_json(id: TraceId, spans: &[Span], opts: &Options) -> J {
    let tb = trace_breakdown(spans, opts);
    let root = spans
        .iter()
        .filter(|s| s.parent_span_id.is_none())
        .min_by_key(|s| s.start_ns)
        .or_else(|| spans.iter().min_by_key(|s| s.start_ns));
    let first = spans.iter().min_by_key(|s| s.start_ns);
    let last = spans.iter().max_by_key(|s| (s.end_ns.max(s.start_ns), s.start_ns));
    let group = |s: Option<&Span>| s.map(|s| opts.group_by.key(s).into_owned());
    json!({
        "traceId": id.to_string(),
        "startMs": tb.start_ns as f64 / 1e6,
        "durationNs": tb.duration_ns,
        "spans": tb.spans,
        "root": root.map(|r| format!("{}: {}", r.service_name(), r.name)),
        "rootName": root.map(|r| r.name.clone()),
        "from": group(first),
        "to": group(last),
        "rows": serde_json::to_value(&tb.rows).unwrap_or(J::Null),
    })
}

/// The handler.
pub async fn handler(State(state): State<AppState>, Query(p): Query<Params>) -> Result<Response, ApiError> {
    let _t = state.metrics.time(Api::Other);
    let t0 = Instant::now();
    let req = parse(&p)?;
    let st = state.clone();
    // A read slot on the SQL runtime, like the other read APIs: not the receivers' workers.
    let body = crate::api::read(&state, Api::Other, move |_| async move {
        let task = tokio::task::spawn_blocking(move || compute(&st, req, t0));
        task.await.map_err(|e| StoreError::Query(format!("breakdown task: {e}")))?
    })
    .await?;
    Ok(json_bytes(body))
}

fn compute(state: &AppState, req: Request, t0: Instant) -> Result<Vec<u8>, StoreError> {
    let Request { ids, opts, rules, classifier, adjust } = req;
    let labels: Vec<String> = classifier.labels().into_iter().map(str::to_owned).collect();
    let mut builder = BreakdownBuilder::new(classifier, opts.clone());
    let mut traces = Vec::with_capacity(ids.len());
    let (mut missing, mut skipped) = (Vec::new(), Vec::new());
    let mut flows = Flows::default();
    let mut spans_done = 0usize;
    for id in ids {
        if spans_done >= MAX_SPANS {
            skipped.push(id.to_string());
            continue;
        }
        // A trace the trace view prepared is reused without a copy; others are read and
        // dropped after use, so one trace's spans are in memory at a time.
        let cached = state.ui_cache.get(id, adjust);
        let owned: Vec<Span>;
        let spans: &[Span] = match &cached {
            Some(p) => &p.spans,
            None => {
                let read = state.store.trace(id)?;
                owned = crate::zipkin::maybe_adjust(read, adjust);
                &owned
            }
        };
        if spans.is_empty() {
            missing.push(id.to_string());
            continue;
        }
        spans_done += spans.len();
        let row = trace_json(id, spans, &opts);
        let start = spans.iter().map(|s| s.start_ns).min().unwrap_or(0);
        flows.scan(spans, start);
        builder.add_trace(spans);
        traces.push(row);
    }
    let all = builder.finish();
    if flows.untracked > 0 {
        tracing::debug!(untracked = flows.untracked, "breakdown: more distinct flows than tracked");
    }
    let body = json!({
        "by": group_name(&opts.group_by),
        "wire": if opts.wire == WireMode::PerLink { "link" } else { "total" },
        "rules": rules,
        "labels": labels,
        "traces": traces,
        "directions": serde_json::to_value(&all.directions).unwrap_or(J::Null),
        "traceCount": all.traces,
        "spanCount": all.spans,
        "unclassifiedSpans": all.unclassified_spans,
        "unclassifiedTraces": all.unclassified_traces,
        "duplicateSpanIds": all.duplicate_span_ids,
        "sampled": all.sampled,
        "flows": flows.json(),
        "missing": missing,
        "skipped": skipped,
        "elapsedMs": t0.elapsed().as_secs_f64() * 1e3,
    });
    Ok(serde_json::to_vec(&body).unwrap_or_default())
}
