//! The control loop. Each epoch, for every request type still being explored:
//!
//! 1. fetch the epoch's traces of the type (at most [`Budget::traces_per_epoch`]) and view each
//!    through the type's own tracepoints (always-on, skeleton, and what was enabled for this
//!    type — not what other types' trees enabled);
//! 2. fill the `+` / `~` nodes of the previous epoch's hypotheses;
//! 3. group by critical path (split by bin first, for keys with bins in the search space) and
//!    analyse ([`weft_analyze::vaif`]);
//! 4. decide, per analysed group, largest variance first:
//!    * principle 3: a key on the path that correlates with response time (|r| ≥
//!      [`Options::key_r`], p < [`Options::key_p`]) is reported (the tree's `keys`) and traced
//!      to the edge whose latency it correlates with best (|r| ≥ [`Options::key_edge_r`]);
//!    * principle 1: a high-variance group's edges by share of variance (at least
//!      [`Options::min_share`], at most three, edges claimed by a key excepted);
//!    * principle 2: a consistently slow group's edge of largest mean latency;
//!
//!    and ask the [`Strategy`] for a tracepoint inside each chosen edge — none left means the
//!    problem is localized there (a [`Finding`]);
//! 5. enable the choices, strongest first, up to [`Budget::tracepoints_per_epoch`] — none
//!    while the backend reports congestion — recording each as a hypothesis.
//!
//! A request type is done when an epoch with its traces left nothing to enable and no
//! hypothesis waits for its `+` / `~` nodes (groups predictable, or every problem edge as
//! narrow as the search space allows). A done type costs nothing more — unless
//! [`Options::recheck_every`] is set (live runs that keep watching): then every K epochs after
//! it was done its traces are fetched and analysed again with the tracepoints already on, and
//! when a group's CV (or a consistently slow group) calls for a tracepoint again the type
//! resumes. The loop ends when every type is done (never while re-checking), the backend
//! has no more traces, or after [`Options::max_epochs`]; then it disables everything it
//! enabled. Memory is bounded: one epoch's traces (capped), and the forest's summaries.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use weft_analyze::vaif::correlate::{correlate, pearson};
use weft_analyze::vaif::group::{Grouping, group};
use weft_analyze::vaif::stats::{Analysis, analyze};
use weft_analyze::vaif::{Config, hb::TracepointId};
use weft_control::proto::{ProbeCommand, ProbeOp};
use weft_model::{Span, Value};

use crate::Error;
use crate::backend::{Backend, Window};
use crate::forest::{
    EdgeSummary, Finding, Forest, GroupSummary, Hypothesis, KeyLevel, KeyReport, MAX_EDGES_PER_GROUP,
    MAX_GROUPS_PER_NODE, Node, Principle, Tree,
};
use crate::project::Visibility;
use crate::space::{SearchSpace, matches_any, unit_of};
use crate::strategy::{Pick, Strategy};

/// How much the loop may do, and when.
#[derive(Debug, Clone, Serialize)]
pub struct Budget {
    /// Tracepoints enabled per epoch at most (pythia: 3).
    pub tracepoints_per_epoch: usize,
    /// Length of an epoch (pythia: 120 s).
    pub epoch: Duration,
    /// How often congestion is checked within an epoch (pythia: 20 s).
    pub check_interval: Duration,
    /// Traces of one request type analysed per epoch at most.
    pub traces_per_epoch: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            tracepoints_per_epoch: 3,
            epoch: Duration::from_secs(120),
            check_interval: Duration::from_secs(20),
            traces_per_epoch: 1000,
        }
    }
}

/// The loop's settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// CV and consistently-slow thresholds, group size (bins come from the search space).
    pub config: Config,
    /// The budget.
    pub budget: Budget,
    /// The search strategy.
    pub strategy: Strategy,
    /// Request types with problems; empty: every type of the search space.
    pub request_types: Vec<String>,
    /// Stop after this many epochs.
    pub max_epochs: Option<u64>,
    /// Smallest share of a group's variance an edge needs for principle 1: 0.1.
    pub min_share: f64,
    /// Smallest |Pearson r| of a key with response time for principle 3: 0.5.
    pub key_r: f64,
    /// Largest p-value of that correlation: 0.01.
    pub key_p: f64,
    /// Smallest |Pearson r| of the key with an edge's latency to pursue it: 0.7.
    pub key_edge_r: f64,
    /// Re-check a done request type every this many epochs (with the tracepoints already on)
    /// and resume it when it calls for a tracepoint again; `None` (the default): a done type is
    /// not looked at again and the loop ends once every type is done.
    pub recheck_every: Option<u64>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            config: Config::default(),
            budget: Budget::default(),
            strategy: Strategy::default(),
            request_types: Vec::new(),
            max_epochs: None,
            min_share: 0.1,
            key_r: 0.5,
            key_p: 0.01,
            key_edge_r: 0.7,
            recheck_every: None,
        }
    }
}

/// What a run found (the `--report` file).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Tracepoints in the search space.
    pub tracepoints_total: usize,
    /// Of those, always on.
    pub tracepoints_always_on: usize,
    /// Tracepoints the loop enabled beyond the always-on set (skeleton included).
    pub tracepoints_enabled: usize,
    /// Epochs run.
    pub epochs: u64,
    /// Per request type.
    pub request_types: Vec<TypeReport>,
    /// Localized problems.
    pub findings: Vec<Finding>,
    /// Keys that correlated with response time (principle 3), as last seen.
    pub keys: Vec<KeyReport>,
}

/// One request type's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct TypeReport {
    /// The root span name.
    pub name: String,
    /// Traces analysed.
    pub traces: u64,
    /// Tracepoints enabled for it.
    pub enabled: usize,
    /// Hypotheses made.
    pub hypotheses: usize,
    /// Whether exploring it finished.
    pub done: bool,
}

#[derive(Debug, Default)]
struct TreeState {
    enabled: BTreeSet<String>,
    pending: Vec<usize>,
    found: BTreeSet<(Principle, Vec<String>)>,
    /// The epoch it was last found done.
    done_at: Option<u64>,
}

/// A key on a path: the tracepoint exposing it, its name, its correlation with the edge.
type KeyHit = (String, String, f64);
/// Why an edge was chosen: principle, priority, key.
type Choice = (Principle, f64, Option<KeyHit>);

/// A choice of the decide step.
#[derive(Debug)]
struct Candidate {
    request_type: String,
    principle: Principle,
    priority: f64,
    edge: (String, String),
    pick: Pick,
    group: String,
    group_traces: usize,
    group_cv: Option<f64>,
    share: Option<f64>,
    mean_ns: f64,
    key: Option<KeyHit>,
}

/// The loop over one search space.
pub struct Explorer<'s> {
    space: &'s SearchSpace,
    options: Options,
    types: Vec<String>,
    forest: Forest,
    state: BTreeMap<String, TreeState>,
    state_dir: Option<PathBuf>,
    publisher: Option<weft_control::client::Collector>,
    publish_error: Option<String>,
}

impl<'s> Explorer<'s> {
    /// A loop over `space` with `options`; the request types must be the space's.
    pub fn new(space: &'s SearchSpace, mut options: Options) -> Result<Explorer<'s>, Error> {
        options.config.bins = space.bins();
        options.config.validate()?;
        let types: Vec<String> = if options.request_types.is_empty() {
            space.request_types.iter().map(|r| r.name.clone()).collect()
        } else {
            options.request_types.clone()
        };
        for t in &types {
            if !space.is_request_type(t) {
                let known: Vec<&str> = space.request_types.iter().map(|r| r.name.as_str()).collect();
                return Err(Error::UnknownRequestType(t.clone(), known.join(", ")));
            }
        }
        let forest = Forest {
            always_on: space.always_on.clone(),
            skeleton: space.skeleton.clone(),
            trees: types
                .iter()
                .map(|t| (t.clone(), Tree { request_type: t.clone(), ..Tree::default() }))
                .collect(),
            ..Forest::default()
        };
        let state = types
            .iter()
            .map(|t| {
                (
                    t.clone(),
                    TreeState { enabled: space.skeleton.iter().cloned().collect(), ..TreeState::default() },
                )
            })
            .collect();
        Ok(Explorer {
            space,
            options,
            types,
            forest,
            state,
            state_dir: None,
            publisher: None,
            publish_error: None,
        })
    }

    /// Saves the forest to `dir` after every epoch.
    pub fn with_state_dir(mut self, dir: PathBuf) -> Self {
        self.state_dir = Some(dir);
        self
    }

    /// Publishes the forest to a collector (`PUT /api/control/explore/forest`, which keeps it
    /// next to the traces and shows it in its UI) after every epoch. A refused publication does
    /// not stop the loop: it is logged and kept ([`Explorer::publish_error`]).
    pub fn with_publisher(mut self, collector: weft_control::client::Collector) -> Self {
        self.publisher = Some(collector);
        self
    }

    /// Why the last publication failed, if it did.
    pub fn publish_error(&self) -> Option<&str> {
        self.publish_error.as_deref()
    }

    /// The forest so far.
    pub fn forest(&self) -> &Forest {
        &self.forest
    }

    /// Runs the loop to its end (see the module docs).
    pub fn run<B: Backend>(&mut self, backend: &mut B) -> Result<Report, Error> {
        for unit in &self.space.skeleton {
            backend.switch(&command(ProbeOp::Enable, unit))?;
        }
        let budget = self.options.budget.clone();
        let checks = (budget.epoch.as_nanos() / budget.check_interval.as_nanos().max(1)).max(1);
        let mut epoch = 0u64;
        while self.options.max_epochs.is_none_or(|m| epoch < m) {
            let Some(window) = backend.begin_epoch(epoch, budget.epoch)? else { break };
            let mut congested = false;
            for _ in 0..checks {
                congested |= backend.congested(budget.check_interval)?;
            }
            let mut candidates = Vec::new();
            let mut analysed = BTreeSet::new();
            for rt in self.types.clone() {
                let rechecking = self.forest.trees.get(&rt).is_some_and(|t| t.done);
                if rechecking && !self.recheck_due(&rt, epoch) {
                    continue;
                }
                let traces = backend.traces(&rt, &window, budget.traces_per_epoch)?;
                if traces.is_empty() {
                    continue;
                }
                if rechecking && let Some(tree) = self.forest.trees.get_mut(&rt) {
                    tree.rechecks += 1;
                }
                analysed.insert(rt.clone());
                self.epoch_of_type(&rt, &window, &traces, &mut candidates)?;
            }
            self.apply(backend, epoch, congested, candidates, &analysed)?;
            epoch += 1;
            self.forest.epochs = epoch;
            if let Some(dir) = &self.state_dir {
                self.forest.save(dir)?;
            }
            if let Some(c) = &self.publisher {
                self.publish_error = c.put_forest(&self.forest).err().map(|e| {
                    tracing::warn!(epoch, error = %e, "publishing the forest to the collector failed");
                    format!("{}: {e}", c.url(weft_control::client::FOREST_ROUTE))
                });
            }
            if self.options.recheck_every.is_none() && self.forest.trees.values().all(|t| t.done) {
                break;
            }
        }
        let report = self.report();
        let mut enabled: BTreeSet<&String> = BTreeSet::new();
        self.state.values().for_each(|s| enabled.extend(&s.enabled));
        for unit in enabled {
            backend.switch(&command(ProbeOp::Disable, unit))?;
        }
        if let Some(t) = self.forest.trees.values().find(|t| t.traces == 0) {
            return Err(Error::NeverOccurred(t.request_type.clone()));
        }
        Ok(report)
    }

    /// Whether done type `rt` is due for a re-check in `epoch`.
    fn recheck_due(&self, rt: &str, epoch: u64) -> bool {
        let done_at = self.state.get(rt).and_then(|s| s.done_at);
        match (self.options.recheck_every, done_at) {
            (Some(k), Some(d)) if epoch > d => (epoch - d).is_multiple_of(k),
            _ => false,
        }
    }

    fn report(&self) -> Report {
        let mut enabled: BTreeSet<&String> = BTreeSet::new();
        self.state.values().for_each(|s| enabled.extend(&s.enabled));
        Report {
            tracepoints_total: self.space.tracepoints.len(),
            tracepoints_always_on: self
                .space
                .tracepoints
                .iter()
                .filter(|t| matches_any(&self.space.always_on, &t.name))
                .count(),
            tracepoints_enabled: enabled.len(),
            epochs: self.forest.epochs,
            request_types: self
                .forest
                .trees
                .values()
                .map(|t| TypeReport {
                    name: t.request_type.clone(),
                    traces: t.traces,
                    enabled: self.state.get(&t.request_type).map_or(0, |s| s.enabled.len()),
                    hypotheses: t.hypotheses.len(),
                    done: t.done,
                })
                .collect(),
            findings: self.forest.findings().cloned().collect(),
            keys: self.forest.trees.values().flat_map(|t| t.keys.iter().cloned()).collect(),
        }
    }

    /// Steps 1–4 for one request type.
    fn epoch_of_type(
        &mut self,
        rt: &str,
        window: &Window,
        traces: &[Vec<Span>],
        out: &mut Vec<Candidate>,
    ) -> Result<(), Error> {
        let (Some(st), Some(tree)) = (self.state.get_mut(rt), self.forest.trees.get_mut(rt)) else {
            return Ok(());
        };
        let vis = Visibility { always_on: &self.space.always_on, enabled: &st.enabled };
        let traces: Vec<Vec<Span>> = traces.iter().map(|t| vis.project(t)).collect();
        tree.traces += traces.len() as u64;
        let config = &self.options.config;
        for id in st.pending.drain(..) {
            let Some(h) = tree.hypotheses.get_mut(id) else { continue };
            let (with, without): (Vec<&Vec<Span>>, Vec<&Vec<Span>>) =
                traces.iter().partition(|t| has_tracepoint(t, &h.tracepoint));
            h.with = Some(node(window.epoch, &with, config)?);
            h.without = Some(node(window.epoch, &without, config)?);
        }
        if tree.root.is_none() {
            tree.root = Some(node(window.epoch, &traces.iter().collect::<Vec<_>>(), config)?);
        }
        let mut keys = Vec::new();
        for part in partition_by_bins(self.space, &traces) {
            let part: Vec<&Vec<Span>> = part.into_iter().map(|i| &traces[i]).collect();
            let grouping = group(&part);
            let analysis = analyze(&grouping, &self.options.config)?;
            keys.extend(self.decide(rt, window.epoch, &part, &grouping, &analysis, out)?);
        }
        if let Some(tree) = self.forest.trees.get_mut(rt) {
            for k in keys {
                match tree.keys.iter_mut().find(|o| (&o.tracepoint, &o.key) == (&k.tracepoint, &k.key)) {
                    Some(o) => *o = k,
                    None => tree.keys.push(k),
                }
            }
        }
        Ok(())
    }

    /// Step 4 for one partition's groups; returns the keys that correlated.
    fn decide(
        &self,
        rt: &str,
        epoch: u64,
        traces: &[&Vec<Span>],
        grouping: &Grouping,
        analysis: &Analysis,
        out: &mut Vec<Candidate>,
    ) -> Result<Vec<KeyReport>, Error> {
        let o = &self.options;
        let mut keys = Vec::new();
        let Some(st) = self.state.get(rt) else { return Ok(keys) };
        let vis = Visibility { always_on: &self.space.always_on, enabled: &st.enabled };
        for gs in &analysis.groups {
            let Some(g) = grouping.groups.get(gs.group) else { continue };
            let names: Vec<&str> = g.path.iter().map(|&t| grouping.tracepoints.name(t)).collect();
            let d = &gs.decomposition;
            let mut chosen: BTreeMap<usize, Choice> = BTreeMap::new();
            // Principle 3.
            for kc in correlate(g, traces, &o.config)?
                .into_iter()
                .filter(|k| k.pearson.is_some_and(|c| c.r.abs() >= o.key_r && c.p_value < o.key_p))
            {
                keys.push(KeyReport {
                    tracepoint: kc.tracepoint.clone(),
                    key: kc.key.clone(),
                    pearson: kc.pearson.map_or(0.0, |c| c.r),
                    p_value: kc.pearson.map_or(1.0, |c| c.p_value),
                    spearman: kc.spearman.map(|c| c.r),
                    traces: kc.traces,
                    group: g.representative.to_string(),
                    epoch,
                    levels: kc
                        .levels
                        .iter()
                        .map(|l| KeyLevel {
                            label: l.label.clone(),
                            count: l.count,
                            mean_response_ns: l.mean_response_ns,
                        })
                        .collect(),
                });
                let values: Vec<Option<f64>> = g
                    .members
                    .iter()
                    .map(|&m| traces.get(m).and_then(|t| key_value(t, &kc.tracepoint, &kc.key)))
                    .collect();
                let best = g
                    .edge_latency_ns
                    .iter()
                    .enumerate()
                    .filter_map(|(i, col)| {
                        let (x, y): (Vec<f64>, Vec<f64>) =
                            values.iter().zip(col).filter_map(|(v, &l)| v.map(|v| (v, l as f64))).unzip();
                        pearson(&x, &y).map(|c| (i, c.r))
                    })
                    .max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()));
                if let Some((i, r)) = best
                    && r.abs() >= o.key_edge_r
                    && !chosen.contains_key(&i)
                {
                    chosen.insert(
                        i,
                        (Principle::Key, r.abs(), Some((kc.tracepoint.clone(), kc.key.clone(), r))),
                    );
                }
            }
            if gs.high_variance {
                for &i in gs.ranked.iter().take(3) {
                    let share = d.edges.get(i).and_then(|e| e.fraction).unwrap_or(0.0);
                    if share >= o.min_share {
                        chosen.entry(i).or_insert((Principle::Variance, share, None));
                    }
                }
            } else if gs.consistently_slow
                && let Some((i, _)) =
                    d.edges.iter().enumerate().max_by(|a, b| a.1.mean_ns.total_cmp(&b.1.mean_ns))
            {
                let frac = if d.mean_ns > 0.0 { d.edges[i].mean_ns / d.mean_ns } else { 0.0 };
                chosen.entry(i).or_insert((Principle::Slow, frac, None));
            }
            for (i, (principle, priority, key)) in chosen {
                let Some((from, to)) = g.edge(i) else { continue };
                let pick = o.strategy.pick(self.space, rt, &names, i, |u| vis.shows(u));
                if pick == Pick::Unmatched {
                    tracing::debug!(
                        request_type = rt,
                        "group {} matches no potential path",
                        g.representative
                    );
                }
                out.push(Candidate {
                    request_type: rt.to_owned(),
                    principle,
                    priority,
                    edge: (name(grouping, from), name(grouping, to)),
                    pick,
                    group: g.representative.to_string(),
                    group_traces: g.count(),
                    group_cv: gs.cv,
                    share: d.edges.get(i).and_then(|e| e.fraction),
                    mean_ns: d.edges.get(i).map_or(0.0, |e| e.mean_ns),
                    key,
                });
            }
        }
        Ok(keys)
    }

    /// Step 5, and the findings.
    fn apply<B: Backend>(
        &mut self,
        backend: &mut B,
        epoch: u64,
        congested: bool,
        mut candidates: Vec<Candidate>,
        analysed: &BTreeSet<String>,
    ) -> Result<(), Error> {
        candidates.sort_by(|a, b| b.priority.total_cmp(&a.priority));
        let mut budget = self.options.budget.tracepoints_per_epoch;
        let mut wants: BTreeSet<String> = BTreeSet::new();
        for c in candidates {
            let rt = c.request_type.as_str();
            match &c.pick {
                Pick::Unmatched => {}
                Pick::Localized => {
                    let (Some(st), Some(tree)) = (self.state.get_mut(rt), self.forest.trees.get_mut(rt))
                    else {
                        continue;
                    };
                    let tracepoints = bounds(self.space, &c.edge);
                    if st.found.insert((c.principle, tracepoints.clone())) {
                        tracing::info!(
                            request_type = rt,
                            "localized ({}): {}",
                            c.principle.as_str(),
                            tracepoints.join(" ⊂ ")
                        );
                        tree.findings.push(Finding {
                            request_type: rt.to_owned(),
                            principle: c.principle,
                            tracepoints,
                            edge: c.edge.clone(),
                            key: c.key.as_ref().map(|k| k.1.clone()),
                            key_tracepoint: c.key.as_ref().map(|k| k.0.clone()),
                            correlation: c.key.as_ref().map(|k| k.2),
                            share_of_variance: c.share,
                            mean_latency_ns: c.mean_ns,
                            group: c.group.clone(),
                            group_traces: c.group_traces,
                            epoch,
                            enabled: st.enabled.len(),
                        });
                    }
                }
                Pick::Enable(unit) => {
                    wants.insert(rt.to_owned());
                    let on_here = self.state.get(rt).is_some_and(|s| s.enabled.contains(unit));
                    if congested || budget == 0 || on_here {
                        continue;
                    }
                    if !self.state.values().any(|s| s.enabled.contains(unit)) {
                        backend.switch(&command(ProbeOp::Enable, unit))?;
                    }
                    let (Some(st), Some(tree)) = (self.state.get_mut(rt), self.forest.trees.get_mut(rt))
                    else {
                        continue;
                    };
                    budget -= 1;
                    st.enabled.insert(unit.clone());
                    let ends = [unit_of(&c.edge.0), unit_of(&c.edge.1)];
                    let parent = tree
                        .hypotheses
                        .iter()
                        .rev()
                        .find(|h| ends.contains(&h.tracepoint.as_str()))
                        .map(|h| h.id);
                    let id = tree.hypotheses.len();
                    tracing::info!(
                        request_type = rt,
                        "epoch {epoch}: enable {unit} ({}: {} → {})",
                        c.principle.as_str(),
                        c.edge.0,
                        c.edge.1
                    );
                    tree.hypotheses.push(Hypothesis {
                        id,
                        parent,
                        epoch,
                        tracepoint: unit.clone(),
                        principle: c.principle,
                        edge: c.edge.clone(),
                        group: c.group.clone(),
                        group_traces: c.group_traces,
                        group_cv: c.group_cv,
                        score: c.priority,
                        key: c.key.as_ref().map(|k| k.1.clone()),
                        with: None,
                        without: None,
                    });
                    st.pending.push(id);
                }
            }
        }
        for rt in analysed {
            let (Some(st), Some(tree)) = (self.state.get_mut(rt), self.forest.trees.get_mut(rt)) else {
                continue;
            };
            if !wants.contains(rt) && st.pending.is_empty() {
                if !tree.done {
                    st.done_at = Some(epoch);
                }
                tree.done = true;
            } else if tree.done {
                tracing::info!(
                    request_type = rt.as_str(),
                    "epoch {epoch}: re-check calls for tracepoints again; resuming"
                );
                tree.done = false;
                tree.resumed += 1;
            }
        }
        Ok(())
    }
}

fn command(op: ProbeOp, unit: &str) -> ProbeCommand {
    ProbeCommand { op, selector: Some(format!("name:{unit}")), pid: None, service: None, agent: None }
}

fn name(grouping: &Grouping, t: TracepointId) -> String {
    grouping.tracepoints.name(t).to_owned()
}

/// The tracepoints bounding an edge's region, innermost first: its ends' tracepoints (the
/// deeper first), then the spans enclosing them.
fn bounds(space: &SearchSpace, edge: &(String, String)) -> Vec<String> {
    let mut ends = vec![unit_of(&edge.0).to_owned()];
    if unit_of(&edge.1) != ends[0] {
        ends.push(unit_of(&edge.1).to_owned());
    }
    ends.sort_by_key(|u| std::cmp::Reverse(space.depth(u).wrapping_add(1)));
    let outer = ends.last().cloned().unwrap_or_default();
    for a in space.ancestors(&outer) {
        if !ends.contains(&a) {
            ends.push(a);
        }
    }
    ends
}

/// Whether a (projected) trace records tracepoint `unit`.
fn has_tracepoint(spans: &[Span], unit: &str) -> bool {
    spans.iter().any(|s| {
        s.name == unit
            || unit
                .strip_prefix(s.name.as_str())
                .and_then(|r| r.strip_prefix('/'))
                .is_some_and(|ev| s.events.iter().any(|e| e.name == ev))
    })
}

/// The numeric value of `key` exposed by `tracepoint` (a span name, or `span/event`).
fn key_value(spans: &[Span], tracepoint: &str, key: &str) -> Option<f64> {
    let num = |v: &Value| match v {
        Value::I64(i) => Some(*i as f64),
        Value::F64(f) if f.is_finite() => Some(*f),
        _ => None,
    };
    for s in spans {
        if s.name == tracepoint
            && let Some(v) = s.attributes.get(key)
        {
            return num(v);
        }
        if let Some(ev) = tracepoint.strip_prefix(s.name.as_str()).and_then(|r| r.strip_prefix('/'))
            && let Some(v) = s.events.iter().find(|e| e.name == ev).and_then(|e| e.attributes.get(key))
        {
            return num(v);
        }
    }
    None
}

/// Trace indices split by the bin of every binned key (one part when no key has bins).
fn partition_by_bins(space: &SearchSpace, traces: &[Vec<Span>]) -> Vec<Vec<usize>> {
    let binned: Vec<_> = space.keys.iter().filter(|k| !k.bins.is_empty()).collect();
    let mut parts: BTreeMap<Vec<usize>, Vec<usize>> = BTreeMap::new();
    for (i, t) in traces.iter().enumerate() {
        let label: Vec<usize> = binned
            .iter()
            .map(|k| {
                key_value(t, &k.tracepoint, &k.key)
                    .map_or(usize::MAX, |v| k.bins.partition_point(|&e| e <= v))
            })
            .collect();
        parts.entry(label).or_default().push(i);
    }
    parts.into_values().collect()
}

/// A node: the groups of `traces`.
fn node(epoch: u64, traces: &[&Vec<Span>], config: &Config) -> Result<Node, Error> {
    let grouping = group(traces);
    let analysis = analyze(&grouping, config)?;
    let mut order: Vec<usize> = (0..grouping.groups.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(grouping.groups[i].count()));
    let groups = order
        .into_iter()
        .take(MAX_GROUPS_PER_NODE)
        .map(|i| {
            let g = &grouping.groups[i];
            let stats = analysis.groups.iter().find(|s| s.group == i);
            let mean = g.response_ns.iter().map(|&r| r as f64).sum::<f64>() / g.count().max(1) as f64;
            GroupSummary {
                representative: g.representative.to_string(),
                path: g.path.iter().map(|&t| name(&grouping, t)).collect(),
                count: g.count(),
                mean_ns: mean,
                cv: stats.and_then(|s| s.cv),
                high_variance: stats.is_some_and(|s| s.high_variance),
                consistently_slow: stats.is_some_and(|s| s.consistently_slow),
                top_edges: stats
                    .map(|s| {
                        s.ranked
                            .iter()
                            .take(MAX_EDGES_PER_GROUP)
                            .filter_map(|&e| {
                                let (from, to) = g.edge(e)?;
                                let share = s.decomposition.edges.get(e)?;
                                Some(EdgeSummary {
                                    from: name(&grouping, from),
                                    to: name(&grouping, to),
                                    mean_ns: share.mean_ns,
                                    share: share.fraction,
                                })
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
            }
        })
        .collect();
    Ok(Node { epoch, traces: traces.len(), groups })
}
