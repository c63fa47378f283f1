//! The breakdown of one trace: rows with span count, total, self and timeline time.

use std::collections::HashMap;

use weft_model::{Span, TraceId};

use super::options::{Options, RowKind, WireMode};
use super::rules::Classifier;
use super::timeline::{Slot, collapse, row_name, self_times, share, timeline};
use super::tree::{Groups, Item, Tree, item};

/// One row of a [`TraceBreakdown`].
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TraceRow {
    /// Group name, or `wire` / `wire A→B`.
    pub name: String,
    /// Group or wire.
    pub kind: RowKind,
    /// The group's `weft.component.kind` (from its first span), if any.
    pub component_kind: Option<String>,
    /// Spans in the group (0 for wire).
    pub spans: u64,
    /// Sum of the spans' durations.
    pub total_ns: u64,
    /// Sum of the spans' self times.
    pub self_ns: u64,
    /// Timeline (wall-clock) attribution; all rows add up to the trace's duration.
    pub timeline_ns: u64,
    /// `timeline_ns` / the trace's duration (0 for a zero-length trace).
    pub share: f64,
    /// Offset from the trace start where the row's time (or first span) begins.
    pub first_offset_ns: u64,
}

/// Where one trace's time went (see the [`breakdown`](super) docs).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TraceBreakdown {
    /// The trace id of the first span (invalid for no spans).
    pub trace_id: TraceId,
    /// First span start.
    pub start_ns: u64,
    /// Last span end.
    pub end_ns: u64,
    /// `end_ns - start_ns`.
    pub duration_ns: u64,
    /// Spans.
    pub spans: u64,
    /// Spans whose span id repeats an earlier span's (the first one owns the id).
    pub duplicate_span_ids: u64,
    /// Rows in order of first appearance; with [`WireMode::Total`] the wire row comes last.
    pub rows: Vec<TraceRow>,
}

impl TraceBreakdown {
    /// The row named `name`.
    pub fn row(&self, name: &str) -> Option<&TraceRow> {
        self.rows.iter().find(|r| r.name == name)
    }
}

/// The breakdown of one trace: all of `spans` are taken as one trace (their trace ids are not
/// compared).
pub fn trace_breakdown(spans: &[Span], opts: &Options) -> TraceBreakdown {
    let mut groups = Groups::default();
    let none = Classifier::none();
    let items: Vec<Item> = spans.iter().map(|s| item(s, &mut groups, &opts.group_by, &none)).collect();
    let tree = Tree::new(&items);
    let selft = self_times(&items, &tree);
    #[derive(Default, Clone)]
    struct Acc {
        spans: u64,
        total: u64,
        selft: u64,
        timeline: u64,
        first: Option<u64>,
    }
    // Groups are interned per call: a dense table; wires by link.
    let mut by_group: Vec<Acc> = vec![Acc::default(); groups.names.len()];
    let mut wires: HashMap<Slot, Acc> = HashMap::new();
    let members: Vec<usize> = (0..items.len()).collect();
    let (start, end) = timeline(&items, &members, &tree.depth, |slot, dt, off| {
        let a = match slot {
            Slot::Group(g) => &mut by_group[g as usize],
            Slot::Wire(..) => wires.entry(collapse(slot, opts.wire)).or_default(),
        };
        a.timeline += dt;
        a.first = Some(a.first.map_or(off, |f| f.min(off)));
    });
    for (i, it) in items.iter().enumerate() {
        let a = &mut by_group[it.group as usize];
        a.spans += 1;
        a.total = a.total.saturating_add(it.end - it.start);
        a.selft = a.selft.saturating_add(selft[i]);
        let off = it.start - start;
        a.first = Some(a.first.map_or(off, |f| f.min(off)));
    }
    let acc = by_group
        .into_iter()
        .enumerate()
        .filter(|(_, a)| a.spans > 0)
        .map(|(g, a)| (Slot::Group(g as u32), a))
        .chain(wires);
    let duration = end - start;
    let mut rows: Vec<TraceRow> = acc
        .map(|(slot, a)| {
            let (name, kind, component_kind) = row_name(slot, &groups, opts.wire);
            TraceRow {
                name,
                kind,
                component_kind,
                spans: a.spans,
                total_ns: a.total,
                self_ns: a.selft,
                timeline_ns: a.timeline,
                share: share(a.timeline, duration),
                first_offset_ns: a.first.unwrap_or(0),
            }
        })
        .collect();
    rows.sort_by(|a, b| {
        // The summed wire row goes last; per-link wires sit where they happen.
        let la = opts.wire == WireMode::Total && a.kind == RowKind::Wire;
        let lb = opts.wire == WireMode::Total && b.kind == RowKind::Wire;
        la.cmp(&lb).then(a.first_offset_ns.cmp(&b.first_offset_ns)).then(a.name.cmp(&b.name))
    });
    TraceBreakdown {
        trace_id: spans.first().map(|s| s.trace_id).unwrap_or_default(),
        start_ns: start,
        end_ns: end,
        duration_ns: duration,
        spans: items.len() as u64,
        duplicate_span_ids: tree.duplicates,
        rows,
    }
}
