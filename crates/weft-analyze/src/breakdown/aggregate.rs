//! Many traces, per direction: units, per-group statistics and the reservoir behind medians
//! and percentiles.

use std::collections::HashMap;

use weft_model::id::SplitMix64;
use weft_model::{Span, TraceId};

use super::options::{Options, RowKind, WireMode};
use super::rules::{Classifier, Condition};
use super::timeline::{Slot, collapse, row_name, timeline};
use super::tree::{Groups, Item, Tree, item};
use super::{DEFAULT_MAX_PENDING_SPANS, DEFAULT_SAMPLE_CAP};

/// Distribution of a per-unit time (ns).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    /// Units.
    pub count: u64,
    /// Sum over units.
    pub sum_ns: u64,
    /// Mean.
    pub mean_ns: f64,
    /// Median (nearest rank, lower middle).
    pub median_ns: u64,
    /// 95th percentile (nearest rank).
    pub p95_ns: u64,
    /// Minimum.
    pub min_ns: u64,
    /// Maximum.
    pub max_ns: u64,
}

/// One row of a direction: a group or wire.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ComponentStats {
    /// Group name, or `wire` / `wire A→B`.
    pub name: String,
    /// Group or wire.
    pub kind: RowKind,
    /// The group's `weft.component.kind`, if any.
    pub component_kind: Option<String>,
    /// Units in which the row has spans or time.
    pub present: u64,
    /// Per-unit timeline time (0 in units where it is absent).
    pub time: Stats,
    /// The row's summed time / the direction's summed end-to-end time.
    pub share: f64,
    /// Mean offset from the unit start where the row first appears (over units where present).
    pub mean_first_offset_ns: f64,
    /// Units in which the row is present and some span of the unit is incomplete
    /// (`weft.incomplete`): the row's time there comes from a cut journey.
    pub incomplete_units: u64,
}

/// The breakdown of one direction over all its units.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DirectionBreakdown {
    /// Direction label.
    pub direction: String,
    /// Units (trace, direction pairs).
    pub units: u64,
    /// Spans in those units.
    pub spans: u64,
    /// End-to-end time per unit (first start to last end of the unit's spans).
    pub end_to_end: Stats,
    /// Units with an incomplete span (`weft.incomplete`).
    pub incomplete_units: u64,
    /// Rows in path order (mean first offset; the summed wire row last).
    pub components: Vec<ComponentStats>,
}

impl DirectionBreakdown {
    /// The row named `name`.
    pub fn component(&self, name: &str) -> Option<&ComponentStats> {
        self.components.iter().find(|c| c.name == name)
    }
}

/// Breakdown of many traces per direction (see the [`breakdown`](super) docs).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Breakdown {
    /// One entry per direction label, in rule order (including labels no span matched).
    pub directions: Vec<DirectionBreakdown>,
    /// Traces seen.
    pub traces: u64,
    /// Spans seen (excluding dropped ones).
    pub spans: u64,
    /// Spans no rule classified (directly, by inheritance or by a trace rule).
    pub unclassified_spans: u64,
    /// Traces with no classified span.
    pub unclassified_traces: u64,
    /// Spans refused by [`BreakdownBuilder::push`] beyond its span limit.
    pub dropped_spans: u64,
    /// Spans whose id repeats an earlier span's in the same trace.
    pub duplicate_span_ids: u64,
    /// True when some direction had more units than the reservoir holds: medians and p95 are
    /// then estimates from a uniform sample (means, shares, min and max stay exact).
    pub sampled: bool,
}

impl Breakdown {
    /// The direction labelled `label`.
    pub fn direction(&self, label: &str) -> Option<&DirectionBreakdown> {
        self.directions.iter().find(|d| d.direction == label)
    }

    /// Mean time of `component` in direction `a` divided by that in `b`; `None` when either is
    /// missing or `b`'s mean is 0.
    pub fn ratio(&self, a: &str, b: &str, component: &str) -> Option<f64> {
        let ma = self.direction(a)?.component(component)?.time.mean_ns;
        let mb = self.direction(b)?.component(component)?.time.mean_ns;
        if mb > 0.0 { Some(ma / mb) } else { None }
    }
}

#[derive(Debug, Default, Clone)]
struct SlotAcc {
    sum: u128,
    present: u64,
    min_present: u64,
    max: u64,
    offset_sum: u128,
    incomplete: u64,
}

#[derive(Debug, Default, Clone)]
struct DirAcc {
    units: u64,
    spans: u64,
    e2e_sum: u128,
    e2e_min: u64,
    e2e_max: u64,
    incomplete_units: u64,
    slots: HashMap<Slot, SlotAcc>,
    /// Reservoir of (end-to-end, per-slot times) per unit.
    samples: Vec<(u64, Vec<(Slot, u64)>)>,
}

/// Accumulates a [`Breakdown`] over many traces.
#[derive(Debug, Clone)]
pub struct BreakdownBuilder {
    cls: Classifier,
    opts: Options,
    groups: Groups,
    dirs: Vec<DirAcc>,
    pending: HashMap<TraceId, Vec<Item>>,
    pending_order: Vec<TraceId>,
    pending_spans: usize,
    max_pending: usize,
    sample_cap: usize,
    /// Deterministic, so the same input gives the same percentiles.
    rng: SplitMix64,
    traces: u64,
    spans: u64,
    unclassified_spans: u64,
    unclassified_traces: u64,
    dropped: u64,
    duplicates: u64,
    sampled: bool,
}

impl BreakdownBuilder {
    /// A builder classifying with `cls`.
    pub fn new(cls: Classifier, opts: Options) -> BreakdownBuilder {
        let n = cls.labels().len();
        BreakdownBuilder {
            cls,
            opts,
            groups: Groups::default(),
            dirs: vec![DirAcc::default(); n],
            pending: HashMap::new(),
            pending_order: Vec::new(),
            pending_spans: 0,
            max_pending: DEFAULT_MAX_PENDING_SPANS,
            sample_cap: DEFAULT_SAMPLE_CAP,
            rng: SplitMix64::new(SplitMix64::GAMMA),
            traces: 0,
            spans: 0,
            unclassified_spans: 0,
            unclassified_traces: 0,
            dropped: 0,
            duplicates: 0,
            sampled: false,
        }
    }

    /// Units kept per direction for medians and percentiles (at least 1).
    pub fn with_sample_cap(mut self, cap: usize) -> Self {
        self.sample_cap = cap.max(1);
        self
    }

    /// Spans [`BreakdownBuilder::push`] holds before it drops (and counts) more.
    pub fn with_max_pending_spans(mut self, max: usize) -> Self {
        self.max_pending = max;
        self
    }

    /// Spans dropped so far by [`BreakdownBuilder::push`].
    pub fn dropped_spans(&self) -> u64 {
        self.dropped
    }

    /// Adds one complete trace (all of `spans` are taken as one trace).
    pub fn add_trace(&mut self, spans: &[Span]) {
        self.add_trace_refs(spans);
    }

    /// Adds one complete trace given as span references (e.g. one trace's spans picked out of
    /// a larger slice).
    pub fn add_trace_refs<'a>(&mut self, spans: impl IntoIterator<Item = &'a Span>) {
        let items: Vec<Item> =
            spans.into_iter().map(|s| item(s, &mut self.groups, &self.opts.group_by, &self.cls)).collect();
        self.process(&items);
    }

    /// Adds one span of any trace, in any order; traces are broken down at
    /// [`BreakdownBuilder::finish`]. Returns false (and counts the span as dropped) beyond the
    /// span limit.
    pub fn push(&mut self, span: &Span) -> bool {
        if self.pending_spans >= self.max_pending {
            self.dropped += 1;
            return false;
        }
        let it = item(span, &mut self.groups, &self.opts.group_by, &self.cls);
        let v = self.pending.entry(span.trace_id).or_insert_with(|| {
            self.pending_order.push(span.trace_id);
            Vec::new()
        });
        v.push(it);
        self.pending_spans += 1;
        true
    }

    fn process(&mut self, items: &[Item]) {
        if items.is_empty() {
            return;
        }
        self.traces += 1;
        self.spans += items.len() as u64;
        let tree = Tree::new(items);
        self.duplicates += tree.duplicates;
        let dir = self.classify(items, &tree);
        let ndirs = self.dirs.len();
        let mut members: Vec<Vec<usize>> = vec![Vec::new(); ndirs];
        let mut unclassified = 0u64;
        for (i, d) in dir.iter().enumerate() {
            match d {
                Some(d) => members[*d].push(i),
                None => unclassified += 1,
            }
        }
        self.unclassified_spans += unclassified;
        if unclassified == items.len() as u64 {
            self.unclassified_traces += 1;
        }
        for (d, m) in members.iter().enumerate() {
            if !m.is_empty() {
                self.unit(d, items, m, &tree.depth);
            }
        }
    }

    /// Direction index per item.
    fn classify(&self, items: &[Item], tree: &Tree) -> Vec<Option<usize>> {
        let n = items.len();
        if self.cls.rules.is_empty() {
            return vec![Some(0); n];
        }
        // Trace-level facts.
        let mut root_mask = 0u64;
        for (i, it) in items.iter().enumerate() {
            if tree.parent[i].is_none() {
                root_mask |= it.root_mask;
            }
        }
        let first = (0..n).min_by_key(|&i| (items[i].start, tree.depth[i], i));
        let last = (0..n).max_by_key(|&i| (items[i].end, items[i].start, tree.depth[i], i));
        let gname = |i: Option<usize>| i.map(|i| self.groups.names[items[i].group as usize].as_str());
        let (from, to) = (gname(first), gname(last));
        let trace_ok: Vec<bool> = self
            .cls
            .rules
            .iter()
            .enumerate()
            .map(|(r, rule)| {
                root_mask & (1 << r) != 0
                    && rule.conditions.iter().all(|c| match c {
                        Condition::From(p) => from.is_some_and(|g| p.matches(g)),
                        Condition::To(p) => to.is_some_and(|g| p.matches(g)),
                        _ => true,
                    })
            })
            .collect();
        let fallback = self
            .cls
            .rules
            .iter()
            .enumerate()
            .find(|(r, rule)| !rule.has_span_conditions() && trace_ok[*r])
            .map(|(r, _)| self.cls.label_of[r]);
        let own = |it: &Item| {
            self.cls
                .rules
                .iter()
                .enumerate()
                .find(|(r, rule)| rule.has_span_conditions() && trace_ok[*r] && it.span_mask & (1 << r) != 0)
                .map(|(r, _)| self.cls.label_of[r])
        };
        let mut dir: Vec<Option<usize>> = vec![None; n];
        for &i in &tree.order {
            dir[i] = own(&items[i]).or_else(|| tree.parent[i].and_then(|p| dir[p]));
        }
        for d in dir.iter_mut() {
            if d.is_none() {
                *d = fallback;
            }
        }
        dir
    }

    fn unit(&mut self, d: usize, items: &[Item], members: &[usize], depth: &[u32]) {
        let wire = self.opts.wire;
        let mut times: HashMap<Slot, (u64, u64)> = HashMap::new();
        let (start, end) = timeline(items, members, depth, |slot, dt, off| {
            let e = times.entry(collapse(slot, wire)).or_insert((0, off));
            e.0 += dt;
            e.1 = e.1.min(off);
        });
        for &i in members {
            let off = items[i].start - start;
            let e = times.entry(Slot::Group(items[i].group)).or_insert((0, off));
            e.1 = e.1.min(off);
        }
        let e2e = end - start;
        let cut = members.iter().any(|&i| items[i].incomplete);
        let acc = &mut self.dirs[d];
        acc.units += 1;
        acc.incomplete_units += cut as u64;
        acc.spans += members.len() as u64;
        acc.e2e_sum += e2e as u128;
        acc.e2e_min = if acc.units == 1 { e2e } else { acc.e2e_min.min(e2e) };
        acc.e2e_max = acc.e2e_max.max(e2e);
        let mut values: Vec<(Slot, u64)> = Vec::with_capacity(times.len());
        for (slot, (t, off)) in times {
            let s = acc.slots.entry(slot).or_default();
            s.min_present = if s.present == 0 { t } else { s.min_present.min(t) };
            s.present += 1;
            s.sum += t as u128;
            s.max = s.max.max(t);
            s.offset_sum += off as u128;
            s.incomplete += cut as u64;
            values.push((slot, t));
        }
        values.sort_unstable();
        let units = acc.units;
        let cap = self.sample_cap;
        if self.dirs[d].samples.len() < cap {
            self.dirs[d].samples.push((e2e, values));
        } else {
            // Algorithm R: keep each unit with probability cap / units.
            self.sampled = true;
            let j = self.rng.next_u64() % units;
            if (j as usize) < cap {
                self.dirs[d].samples[j as usize] = (e2e, values);
            }
        }
    }

    /// Breaks down the traces still pending from [`BreakdownBuilder::push`] and returns the
    /// result.
    pub fn finish(mut self) -> Breakdown {
        let order = std::mem::take(&mut self.pending_order);
        for t in order {
            if let Some(items) = self.pending.remove(&t) {
                self.process(&items);
            }
        }
        let labels: Vec<String> = self.cls.labels().into_iter().map(str::to_owned).collect();
        let mut directions = Vec::with_capacity(labels.len());
        for (label, acc) in labels.into_iter().zip(std::mem::take(&mut self.dirs)) {
            directions.push(self.direction(label, acc));
        }
        Breakdown {
            directions,
            traces: self.traces,
            spans: self.spans,
            unclassified_spans: self.unclassified_spans,
            unclassified_traces: self.unclassified_traces,
            dropped_spans: self.dropped,
            duplicate_span_ids: self.duplicates,
            sampled: self.sampled,
        }
    }

    fn direction(&self, label: String, acc: DirAcc) -> DirectionBreakdown {
        let e2e_samples: Vec<u64> = acc.samples.iter().map(|s| s.0).collect();
        let end_to_end = stats(acc.units, acc.e2e_sum, acc.e2e_min, acc.e2e_max, e2e_samples);
        let mut components: Vec<ComponentStats> = acc
            .slots
            .iter()
            .map(|(&slot, s)| {
                let samples: Vec<u64> = acc
                    .samples
                    .iter()
                    .map(|(_, v)| v.binary_search_by(|x| x.0.cmp(&slot)).map(|k| v[k].1).unwrap_or(0))
                    .collect();
                let min = if s.present < acc.units { 0 } else { s.min_present };
                let (name, kind, component_kind) = row_name(slot, &self.groups, self.opts.wire);
                ComponentStats {
                    name,
                    kind,
                    component_kind,
                    present: s.present,
                    time: stats(acc.units, s.sum, min, s.max, samples),
                    share: if acc.e2e_sum == 0 { 0.0 } else { s.sum as f64 / acc.e2e_sum as f64 },
                    mean_first_offset_ns: if s.present == 0 {
                        0.0
                    } else {
                        s.offset_sum as f64 / s.present as f64
                    },
                    incomplete_units: s.incomplete,
                }
            })
            .collect();
        components.sort_by(|a, b| {
            let la = self.opts.wire == WireMode::Total && a.kind == RowKind::Wire;
            let lb = self.opts.wire == WireMode::Total && b.kind == RowKind::Wire;
            la.cmp(&lb)
                .then(a.mean_first_offset_ns.total_cmp(&b.mean_first_offset_ns))
                .then(a.name.cmp(&b.name))
        });
        DirectionBreakdown {
            direction: label,
            units: acc.units,
            spans: acc.spans,
            end_to_end,
            incomplete_units: acc.incomplete_units,
            components,
        }
    }
}

fn stats(count: u64, sum: u128, min: u64, max: u64, mut samples: Vec<u64>) -> Stats {
    samples.sort_unstable();
    let q = |p: f64| -> u64 {
        if samples.is_empty() {
            return 0;
        }
        let rank = (p * samples.len() as f64).ceil() as usize;
        samples[rank.clamp(1, samples.len()) - 1]
    };
    Stats {
        count,
        sum_ns: u64::try_from(sum).unwrap_or(u64::MAX),
        mean_ns: if count == 0 { 0.0 } else { sum as f64 / count as f64 },
        median_ns: q(0.5),
        p95_ns: q(0.95),
        min_ns: if count == 0 { 0 } else { min },
        max_ns: max,
    }
}

/// Breaks down `spans` of any number of traces (grouped by trace id, in order of first
/// appearance) per direction.
pub fn breakdown(spans: &[Span], cls: &Classifier, opts: &Options) -> Breakdown {
    let mut by_trace: HashMap<TraceId, Vec<usize>> = HashMap::new();
    let mut order = Vec::new();
    for (i, s) in spans.iter().enumerate() {
        by_trace
            .entry(s.trace_id)
            .or_insert_with(|| {
                order.push(s.trace_id);
                Vec::new()
            })
            .push(i);
    }
    let mut b = BreakdownBuilder::new(cls.clone(), opts.clone());
    for t in order {
        b.add_trace_refs(by_trace[&t].iter().map(|&i| &spans[i]));
    }
    b.finish()
}
