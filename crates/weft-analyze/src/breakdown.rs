//! Where did the time go? Per-component time breakdowns of one trace and of many traces split
//! by request direction — Columbo's case-study figure (time per host, NIC, switch and wire,
//! requests vs responses).
//!
//! # Groups
//!
//! Spans are grouped by a key chosen with [`GroupBy`]: by default the span's finest component
//! ([`conv::COMPONENT`], e.g. `ns3/sw1` for a hop inside switch `sw1`), falling back to its
//! resource's `service.name`. Each group's resource [`conv::COMPONENT_KIND`] (`host`, `nic`,
//! `network`, ...) is reported with it so a UI can colour by kind.
//!
//! # Three times per group
//!
//! * **total** — the sum of the spans' durations (inclusive of children; overlapping spans
//!   count twice).
//! * **self** — each span's duration minus the part its children cover (clipped to the span),
//!   summed: Jaeger's "self time". Concurrent spans make the sum exceed the trace duration.
//! * **timeline** — wall-clock attribution: every instant of the trace (from its first start to
//!   its last end) goes to exactly one row, so the timeline times of all rows add up to the
//!   end-to-end time. An instant belongs to the *innermost active span* — the active span that
//!   started last (ties: the deeper in the tree, then the later in input order). An instant no
//!   span covers is a **gap**: a gap between two spans of the same group belongs to that group
//!   (untraced time inside the component); a gap between different groups is **wire** time —
//!   for a packet's hops, serialization plus propagation on the link between two devices; for
//!   host → NIC, the PCIe latency. The gap's neighbours are the innermost span just before it
//!   and the outermost span (or zero-length span) starting at its end.
//!   [`WireMode::PerLink`] names each wire row after its link (`wire ns3/sw0→ns3/sw1`);
//!   [`WireMode::Total`] sums all of them into one [`WIRE`] row.
//!
//! The **timeline** time is the breakdown's headline number: its shares are the stacked bar.
//!
//! # One trace: [`trace_breakdown`]
//!
//! Rows per group with span count, total, self and timeline time and the timeline share of the
//! trace's end-to-end duration — what the UI shows for one trace.
//!
//! # Many traces, per direction: [`breakdown`] / [`BreakdownBuilder`]
//!
//! A [`Classifier`] assigns each span a *direction* (e.g. `request`, `response`) by ordered
//! [`Rule`]s; each (trace, direction) pair is one **unit** — e.g. one NTP request's journey
//! client → server — and its spans get the timeline attribution above. Over all units of a
//! direction, each group's per-unit time gives mean, median, p95, min, max and the share of
//! the summed end-to-end time (a unit in which a group does not occur counts as 0 for that
//! group, so the groups' means add up to the mean end-to-end time). Without rules every span
//! belongs to one direction, [`ALL`] — the breakdown "across the search result".
//!
//! How spans get their direction (see [`Rule`] for the condition syntax):
//!
//! 1. a span matched by a rule that has span conditions (`key=value` on the span or its
//!    resource) — the first such rule in order — takes its label;
//! 2. otherwise it inherits its parent's direction (so a NIC or host span below a network hop
//!    follows the packet);
//! 3. otherwise the first rule with only trace conditions (`root.key=value`, `from=`, `to=`)
//!    that holds for the trace;
//! 4. otherwise it is *unclassified*: counted, not broken down.
//!
//! Trace conditions of a rule must hold for its span conditions to count, too: `from=` / `to=`
//! compare the group of the trace's first-starting / last-ending span (a service or component
//! pair: `from=ns3/client,to=ns3/server`), `root.key=value` the root span's attributes.
//!
//! Memory: [`BreakdownBuilder::add_trace`] keeps per direction only the sums and a bounded
//! reservoir of per-unit samples (default [`DEFAULT_SAMPLE_CAP`] units; means, shares, min and
//! max stay exact beyond it, medians and p95 come from the reservoir, and
//! [`Breakdown::sampled`] says so). [`BreakdownBuilder::push`] accepts spans of many traces in
//! any order and keeps a compact record per span (about 60 bytes) until
//! [`BreakdownBuilder::finish`], up to a span limit beyond which spans are dropped and counted.

use std::borrow::Cow;
use std::collections::{BinaryHeap, HashMap};

use weft_model::{Span, SpanId, TraceId, Value, conv};

/// Name of the summed wire row ([`WireMode::Total`]) and prefix of per-link wire rows.
pub const WIRE: &str = "wire";
/// Direction label when no classification rules are given.
pub const ALL: &str = "all";
/// Group name for spans without the grouping key.
pub const UNKNOWN: &str = "(unknown)";
/// Per-direction reservoir size (units) of a [`BreakdownBuilder`] unless changed.
pub const DEFAULT_SAMPLE_CAP: usize = 100_000;
/// Spans a [`BreakdownBuilder`] holds for [`BreakdownBuilder::push`] unless changed.
pub const DEFAULT_MAX_PENDING_SPANS: usize = 10_000_000;
/// At most this many classification rules.
pub const MAX_RULES: usize = 64;

// ---------------------------------------------------------------------------------------------
// Options

/// What a breakdown row stands for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum GroupBy {
    /// `weft.component`, else `service.name` (the default).
    #[default]
    Component,
    /// The resource's `service.name`.
    Service,
    /// `service.name` and span name: `"<service> <name>"`.
    Operation,
    /// A span attribute, else a resource attribute of that key (text form of the value).
    Attribute(String),
}

impl GroupBy {
    /// From a command-line word: `component`, `service`, `operation`, or `attr:KEY`.
    pub fn parse(s: &str) -> Option<GroupBy> {
        Some(match s {
            "component" => GroupBy::Component,
            "service" => GroupBy::Service,
            "operation" | "op" => GroupBy::Operation,
            _ => {
                let key = s.strip_prefix("attr:").or_else(|| s.strip_prefix("attribute:"))?;
                if key.is_empty() {
                    return None;
                }
                GroupBy::Attribute(key.to_owned())
            }
        })
    }

    /// The group of `span` ([`UNKNOWN`] when the key is absent or empty).
    pub fn key<'a>(&self, span: &'a Span) -> Cow<'a, str> {
        let nonempty = |s: &'a str| Some(s).filter(|s| !s.is_empty());
        match self {
            GroupBy::Component => span
                .attributes
                .get_str(conv::COMPONENT)
                .and_then(nonempty)
                .or_else(|| nonempty(span.service_name()))
                .map(Cow::Borrowed)
                .unwrap_or(Cow::Borrowed(UNKNOWN)),
            GroupBy::Service => Cow::Borrowed(nonempty(span.service_name()).unwrap_or(UNKNOWN)),
            GroupBy::Operation => {
                Cow::Owned(format!("{} {}", nonempty(span.service_name()).unwrap_or(UNKNOWN), span.name))
            }
            GroupBy::Attribute(k) => match attr(span, k) {
                Some(v) => {
                    let t = v.to_string();
                    if t.is_empty() { Cow::Borrowed(UNKNOWN) } else { Cow::Owned(t) }
                }
                None => Cow::Borrowed(UNKNOWN),
            },
        }
    }
}

/// How gaps between groups are reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WireMode {
    /// One [`WIRE`] row with all wire time.
    #[default]
    Total,
    /// One row per link: `wire <from>→<to>`.
    PerLink,
}

/// Breakdown options.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// Row key.
    pub group_by: GroupBy,
    /// Wire rows.
    pub wire: WireMode,
}

/// Whether a row is a group of spans or wire (gap) time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RowKind {
    /// Spans of one group.
    Group,
    /// Time between spans of different groups.
    Wire,
}

// ---------------------------------------------------------------------------------------------
// Classification rules

/// A classification rule could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("direction rule {rule:?}: {reason}")]
pub struct RuleError {
    /// The rule text.
    pub rule: String,
    /// What is wrong.
    pub reason: String,
}

/// A value pattern: alternatives separated by `|`, each exact or a prefix ending in `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern(Vec<(String, bool)>);

impl Pattern {
    /// Parses `a|b|pre*`.
    pub fn parse(s: &str) -> Pattern {
        Pattern(
            s.split('|')
                .map(|alt| match alt.strip_suffix('*') {
                    Some(p) => (p.to_owned(), true),
                    None => (alt.to_owned(), false),
                })
                .collect(),
        )
    }
    /// True when `text` matches one alternative.
    pub fn matches(&self, text: &str) -> bool {
        self.0.iter().any(|(p, prefix)| if *prefix { text.starts_with(p.as_str()) } else { text == p })
    }
}

/// One condition of a [`Rule`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// Span condition: the span's attribute `key` (else its resource's; the pseudo-key `name`
    /// is the span name when no such attribute exists) matches, in its text form.
    Attr {
        /// Attribute key.
        key: String,
        /// Value pattern.
        value: Pattern,
    },
    /// Trace condition: a root span's attribute (or resource attribute) `key` matches.
    Root {
        /// Attribute key.
        key: String,
        /// Value pattern.
        value: Pattern,
    },
    /// Trace condition: the group of the trace's first-starting span matches.
    From(Pattern),
    /// Trace condition: the group of the trace's last-ending span matches.
    To(Pattern),
}

impl Condition {
    fn is_span_level(&self) -> bool {
        matches!(self, Condition::Attr { .. })
    }
}

/// A labelled set of conditions that must all hold.
///
/// Text form: `LABEL: COND, COND, ...` where a condition is
///
/// * `key=value` — span condition on a span or resource attribute (`net.peer.ip=10.0.0.2`,
///   `service.name=client`, `name=hop`);
/// * `root.key=value` — the trace's root span has it;
/// * `from=group` / `to=group` — the trace's first-starting / last-ending span is in that
///   group (a service or component pair);
///
/// and a value is `a|b` (alternatives) with an optional trailing `*` per alternative (prefix).
/// Example: `response: ip.src=10.0.0.2, ip.dst=10.0.0.1, udp.src_port=123`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Direction label.
    pub label: String,
    /// All must hold.
    pub conditions: Vec<Condition>,
}

impl Rule {
    /// Parses the text form (see the type docs).
    pub fn parse(text: &str) -> Result<Rule, RuleError> {
        let err = |reason: &str| RuleError { rule: text.to_owned(), reason: reason.to_owned() };
        let (label, conds) = text.split_once(':').ok_or_else(|| err("expected 'LABEL: key=value, ...'"))?;
        let label = label.trim();
        if label.is_empty() {
            return Err(err("empty label"));
        }
        let mut conditions = Vec::new();
        for c in conds.split(',').map(str::trim).filter(|c| !c.is_empty()) {
            let (k, v) =
                c.split_once('=').ok_or_else(|| err(&format!("condition {c:?} is not key=value")))?;
            let (k, v) = (k.trim(), v.trim());
            if k.is_empty() {
                return Err(err(&format!("condition {c:?} has an empty key")));
            }
            let value = Pattern::parse(v);
            conditions.push(match k {
                "from" => Condition::From(value),
                "to" => Condition::To(value),
                _ => match k.strip_prefix("root.") {
                    Some("") => return Err(err(&format!("condition {c:?} has an empty key"))),
                    Some(key) => Condition::Root { key: key.to_owned(), value },
                    None => Condition::Attr { key: k.to_owned(), value },
                },
            });
        }
        if conditions.is_empty() {
            return Err(err("no conditions"));
        }
        Ok(Rule { label: label.to_owned(), conditions })
    }

    fn has_span_conditions(&self) -> bool {
        self.conditions.iter().any(Condition::is_span_level)
    }
}

/// Ordered classification rules (see the module docs). Several rules may share a label.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Classifier {
    rules: Vec<Rule>,
    labels: Vec<String>,
    label_of: Vec<usize>,
}

impl Classifier {
    /// No rules: every span is in direction [`ALL`].
    pub fn none() -> Classifier {
        Classifier::default()
    }

    /// From rules, in priority order.
    pub fn new(rules: Vec<Rule>) -> Result<Classifier, RuleError> {
        if rules.len() > MAX_RULES {
            return Err(RuleError {
                rule: rules.get(MAX_RULES).map(|r| r.label.clone()).unwrap_or_default(),
                reason: format!("at most {MAX_RULES} rules"),
            });
        }
        let mut labels: Vec<String> = Vec::new();
        let mut label_of = Vec::with_capacity(rules.len());
        for r in &rules {
            let i = match labels.iter().position(|l| *l == r.label) {
                Some(i) => i,
                None => {
                    labels.push(r.label.clone());
                    labels.len() - 1
                }
            };
            label_of.push(i);
        }
        Ok(Classifier { rules, labels, label_of })
    }

    /// Parses each rule's text form.
    pub fn parse<S: AsRef<str>>(rules: &[S]) -> Result<Classifier, RuleError> {
        Classifier::new(rules.iter().map(|r| Rule::parse(r.as_ref())).collect::<Result<_, _>>()?)
    }

    /// The rules.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Direction labels in first-rule order ([`ALL`] alone without rules).
    pub fn labels(&self) -> Vec<&str> {
        if self.rules.is_empty() { vec![ALL] } else { self.labels.iter().map(String::as_str).collect() }
    }

    /// Bit r: all span conditions of rule r hold for `span`.
    fn span_mask(&self, span: &Span) -> u64 {
        self.mask(span, |c| match c {
            Condition::Attr { key, value } => Some((key, value)),
            _ => None,
        })
    }

    /// Bit r: all root conditions of rule r hold for `span` (as a root).
    fn root_mask(&self, span: &Span) -> u64 {
        self.mask(span, |c| match c {
            Condition::Root { key, value } => Some((key, value)),
            _ => None,
        })
    }

    fn mask(&self, span: &Span, pick: impl Fn(&Condition) -> Option<(&String, &Pattern)>) -> u64 {
        let mut m = 0u64;
        for (r, rule) in self.rules.iter().enumerate() {
            let ok = rule.conditions.iter().filter_map(&pick).all(|(k, p)| cond_holds(span, k, p));
            if ok {
                m |= 1 << r;
            }
        }
        m
    }
}

fn attr<'a>(span: &'a Span, key: &str) -> Option<&'a Value> {
    span.attributes.get(key).or_else(|| span.resource.attributes.get(key))
}

fn cond_holds(span: &Span, key: &str, p: &Pattern) -> bool {
    match attr(span, key) {
        Some(Value::Str(s)) => p.matches(s),
        Some(v) => p.matches(&v.to_string()),
        None if key == "name" => p.matches(&span.name),
        None => false,
    }
}

// ---------------------------------------------------------------------------------------------
// Compact span records and trace trees

#[derive(Debug, Clone, Copy)]
struct Item {
    id: SpanId,
    parent: Option<SpanId>,
    start: u64,
    end: u64,
    group: u32,
    span_mask: u64,
    root_mask: u64,
}

#[derive(Debug, Default, Clone)]
struct Groups {
    ids: HashMap<String, u32>,
    names: Vec<String>,
    kinds: Vec<Option<String>>,
}

impl Groups {
    fn intern(&mut self, span: &Span, by: &GroupBy) -> u32 {
        let key = by.key(span);
        if let Some(&i) = self.ids.get(key.as_ref()) {
            return i;
        }
        let i = self.names.len() as u32;
        self.ids.insert(key.to_string(), i);
        self.names.push(key.into_owned());
        self.kinds.push(span.resource.attributes.get_str(conv::COMPONENT_KIND).map(str::to_owned));
        i
    }
}

fn item(span: &Span, groups: &mut Groups, by: &GroupBy, cls: &Classifier) -> Item {
    Item {
        id: span.span_id,
        parent: span.parent_span_id,
        start: span.start_ns,
        // A span ending before it starts is taken as zero-length.
        end: span.end_ns.max(span.start_ns),
        group: groups.intern(span, by),
        span_mask: if cls.rules.is_empty() { 0 } else { cls.span_mask(span) },
        root_mask: if cls.rules.is_empty() { 0 } else { cls.root_mask(span) },
    }
}

/// Parent links, children, depths and a parents-first order of one trace. Spans whose parent
/// is absent are roots; a parent cycle is broken at one edge (that member becomes a root).
struct Tree {
    parent: Vec<Option<usize>>,
    /// Children of `i`: `child[child_at[i]..child_at[i + 1]]`.
    child_at: Vec<u32>,
    child: Vec<u32>,
    depth: Vec<u32>,
    order: Vec<usize>,
    duplicates: u64,
}

impl Tree {
    fn new(items: &[Item]) -> Tree {
        let n = items.len();
        // Span id → index of the first span with it (sorted pairs: fewer allocations and
        // faster than a hash map for the small traces that dominate).
        let mut ids: Vec<(SpanId, u32)> = items.iter().enumerate().map(|(i, it)| (it.id, i as u32)).collect();
        ids.sort_unstable();
        let duplicates = ids.windows(2).filter(|w| w[0].0 == w[1].0).count() as u64;
        let find = |id: SpanId| {
            let k = ids.partition_point(|e| e.0 < id);
            ids.get(k).filter(|e| e.0 == id).map(|e| e.1 as usize)
        };
        let mut parent: Vec<Option<usize>> =
            items.iter().enumerate().map(|(i, it)| it.parent.and_then(find).filter(|&p| p != i)).collect();
        // Break cycles: walk up from each span; an edge back into the current walk closes one.
        let mut state = vec![0u8; n]; // 0 unseen, 1 on the current walk, 2 done
        let mut walk = Vec::new();
        for i in 0..n {
            let mut cur = i;
            while state[cur] == 0 {
                state[cur] = 1;
                walk.push(cur);
                match parent[cur] {
                    Some(p) if state[p] == 1 => parent[cur] = None,
                    Some(p) => cur = p,
                    None => {}
                }
            }
            for &k in &walk {
                state[k] = 2;
            }
            walk.clear();
        }
        let mut child_at = vec![0u32; n + 1];
        for p in parent.iter().flatten() {
            child_at[p + 1] += 1;
        }
        for k in 1..=n {
            child_at[k] += child_at[k - 1];
        }
        let mut fill = child_at.clone();
        let mut child = vec![0u32; child_at[n] as usize];
        for (i, p) in parent.iter().enumerate() {
            if let Some(p) = *p {
                child[fill[p] as usize] = i as u32;
                fill[p] += 1;
            }
        }
        let mut depth = vec![0u32; n];
        let mut order: Vec<usize> = (0..n).filter(|&i| parent[i].is_none()).collect();
        let mut k = 0;
        while k < order.len() {
            let i = order[k];
            k += 1;
            for &c in &child[child_at[i] as usize..child_at[i + 1] as usize] {
                depth[c as usize] = depth[i].saturating_add(1);
                order.push(c as usize);
            }
        }
        Tree { parent, child_at, child, depth, order, duplicates }
    }

    fn children(&self, i: usize) -> &[u32] {
        &self.child[self.child_at[i] as usize..self.child_at[i + 1] as usize]
    }
}

// ---------------------------------------------------------------------------------------------
// Timeline attribution

/// Where a stretch of time goes: a group, or the wire between two groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Slot {
    Group(u32),
    Wire(u32, u32),
}

/// Attributes `[first start, last end]` of `members` to slots (see the module docs); returns
/// that interval. `add` gets each stretch of time with its slot and its offset from the start
/// (groups that appear get their presence from their spans, not from here).
fn timeline(
    items: &[Item],
    members: &[usize],
    depth: &[u32],
    mut add: impl FnMut(Slot, u64, u64),
) -> (u64, u64) {
    // (time, 0 end | 1 zero-length | 2 start, depth, group, index): everything the sweep
    // needs, so it never touches `items` in time order (cache misses on big traces).
    let mut pts: Vec<(u64, u8, u32, u32, u32)> = Vec::with_capacity(members.len() * 2);
    for &i in members {
        let it = &items[i];
        let (d, g, k) = (depth[i], it.group, i as u32);
        if it.end > it.start {
            pts.push((it.start, 2, d, g, k));
            pts.push((it.end, 0, d, g, k));
        } else {
            pts.push((it.start, 1, d, g, k));
        }
    }
    if pts.is_empty() {
        return (0, 0);
    }
    pts.sort_unstable();
    let t0 = pts[0].0;
    let t_end = pts.iter().map(|p| p.0).max().unwrap_or(t0);
    // Active spans (start, depth, index, group), innermost on top; ended ones pop lazily.
    let mut active: BinaryHeap<(u64, u32, u32, u32)> = BinaryHeap::with_capacity(members.len());
    let mut ended = vec![false; items.len()];
    let mut last: Option<u32> = None;
    let mut prev = t0;
    let mut k = 0;
    while k < pts.len() {
        let t = pts[k].0;
        if t > prev {
            let dt = t - prev;
            let off = prev - t0;
            if let Some(&(_, _, _, g)) = active.peek() {
                add(Slot::Group(g), dt, off);
            } else {
                let next = pts[k..]
                    .iter()
                    .take_while(|p| p.0 == t)
                    .filter(|p| p.1 != 0)
                    .min_by_key(|p| (p.2, p.4))
                    .map(|p| p.3);
                match (last, next) {
                    (Some(a), Some(b)) if a != b => add(Slot::Wire(a, b), dt, off),
                    (Some(a), _) | (None, Some(a)) => add(Slot::Group(a), dt, off),
                    (None, None) => {}
                }
            }
        }
        if let Some(&(_, _, _, g)) = active.peek() {
            last = Some(g);
        }
        while k < pts.len() && pts[k].0 == t {
            let (_, ty, d, g, i) = pts[k];
            match ty {
                0 => ended[i as usize] = true,
                1 => last = Some(g),
                _ => active.push((t, d, i, g)),
            }
            k += 1;
        }
        while active.peek().is_some_and(|&(_, _, i, _)| ended[i as usize]) {
            active.pop();
        }
        prev = t;
    }
    (t0, t_end)
}

/// Self time of each item: its duration minus the union of its children's intervals clipped
/// to it.
fn self_times(items: &[Item], tree: &Tree) -> Vec<u64> {
    let mut out = Vec::with_capacity(items.len());
    let mut iv: Vec<(u64, u64)> = Vec::new();
    for (i, it) in items.iter().enumerate() {
        iv.clear();
        for &c in tree.children(i) {
            let c = c as usize;
            let (s, e) = (items[c].start.max(it.start), items[c].end.min(it.end));
            if e > s {
                iv.push((s, e));
            }
        }
        iv.sort_unstable();
        let mut covered = 0u64;
        let mut cur: Option<(u64, u64)> = None;
        for &(s, e) in &iv {
            match cur {
                Some((cs, ce)) if s <= ce => cur = Some((cs, ce.max(e))),
                Some((cs, ce)) => {
                    covered += ce - cs;
                    cur = Some((s, e));
                }
                None => cur = Some((s, e)),
            }
        }
        if let Some((cs, ce)) = cur {
            covered += ce - cs;
        }
        out.push((it.end - it.start).saturating_sub(covered));
    }
    out
}

fn row_name(slot: Slot, groups: &Groups, wire: WireMode) -> (String, RowKind, Option<String>) {
    match slot {
        Slot::Group(g) => {
            (groups.names[g as usize].clone(), RowKind::Group, groups.kinds[g as usize].clone())
        }
        Slot::Wire(a, b) => match wire {
            WireMode::Total => (WIRE.to_owned(), RowKind::Wire, None),
            WireMode::PerLink => (
                format!("{WIRE} {}→{}", groups.names[a as usize], groups.names[b as usize]),
                RowKind::Wire,
                None,
            ),
        },
    }
}

fn collapse(slot: Slot, wire: WireMode) -> Slot {
    match (slot, wire) {
        (Slot::Wire(..), WireMode::Total) => Slot::Wire(u32::MAX, u32::MAX),
        _ => slot,
    }
}

fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { part as f64 / whole as f64 }
}

// ---------------------------------------------------------------------------------------------
// One trace

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

/// Where one trace's time went (see the module docs).
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

// ---------------------------------------------------------------------------------------------
// Many traces, per direction

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
    /// Rows in path order (mean first offset; the summed wire row last).
    pub components: Vec<ComponentStats>,
}

impl DirectionBreakdown {
    /// The row named `name`.
    pub fn component(&self, name: &str) -> Option<&ComponentStats> {
        self.components.iter().find(|c| c.name == name)
    }
}

/// Breakdown of many traces per direction (see the module docs).
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
}

#[derive(Debug, Default, Clone)]
struct DirAcc {
    units: u64,
    spans: u64,
    e2e_sum: u128,
    e2e_min: u64,
    e2e_max: u64,
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
    rng: u64,
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
            rng: 0x9e37_79b9_7f4a_7c15,
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

    fn next_rand(&mut self) -> u64 {
        // splitmix64: deterministic, so the same input gives the same percentiles.
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
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
        let acc = &mut self.dirs[d];
        acc.units += 1;
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
            let j = self.next_rand() % units;
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
        DirectionBreakdown { direction: label, units: acc.units, spans: acc.spans, end_to_end, components }
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use weft_model::Resource;

    use super::*;

    fn resource(service: &str, kind: &str) -> Arc<Resource> {
        let mut r = Resource::service(service);
        r.attributes.push(conv::COMPONENT_KIND, kind);
        Arc::new(r)
    }

    /// A span of trace `t` in component `comp` (service `comp` before the first `/`).
    fn sp(t: u128, id: u64, parent: Option<u64>, comp: &str, start: u64, end: u64) -> Span {
        let service = comp.split('/').next().unwrap_or(comp);
        let kind = if service == "ns3" { "network" } else { "host" };
        let mut s = Span {
            trace_id: TraceId::from_u128(t),
            span_id: SpanId::from_u64(id),
            parent_span_id: parent.map(SpanId::from_u64),
            name: "hop".into(),
            start_ns: start,
            end_ns: end,
            resource: resource(service, kind),
            ..Span::default()
        };
        if comp.contains('/') {
            s.attributes.push(conv::COMPONENT, comp);
        }
        s
    }

    fn with(mut s: Span, kv: &[(&str, &str)]) -> Span {
        for (k, v) in kv {
            s.attributes.push(*k, *v);
        }
        s
    }

    /// One packet h0 → sw0 → sw1 → h1 (network hops, zero-length receive hops).
    fn packet() -> Vec<Span> {
        vec![
            sp(1, 1, None, "ns3/h0", 100, 110),
            sp(1, 2, Some(1), "ns3/sw0", 115, 115),
            sp(1, 3, Some(2), "ns3/sw0", 115, 140),
            sp(1, 4, Some(3), "ns3/sw1", 150, 151),
            sp(1, 5, Some(4), "ns3/sw1", 151, 151),
            sp(1, 6, Some(5), "ns3/h1", 160, 160),
        ]
    }

    fn names(b: &TraceBreakdown) -> Vec<(&str, u64)> {
        b.rows.iter().map(|r| (r.name.as_str(), r.timeline_ns)).collect()
    }

    #[test]
    fn packet_hops_and_wires_add_up_to_the_end_to_end_time() {
        let b = trace_breakdown(&packet(), &Options::default());
        assert_eq!((b.start_ns, b.end_ns, b.duration_ns, b.spans), (100, 160, 60, 6));
        assert_eq!(
            names(&b),
            vec![("ns3/h0", 10), ("ns3/sw0", 25), ("ns3/sw1", 1), ("ns3/h1", 0), (WIRE, 24)]
        );
        let sum: u64 = b.rows.iter().map(|r| r.timeline_ns).sum();
        assert_eq!(sum, b.duration_ns);
        let sw0 = b.row("ns3/sw0").unwrap();
        assert_eq!((sw0.spans, sw0.total_ns, sw0.self_ns, sw0.first_offset_ns), (2, 25, 25, 15));
        assert_eq!(sw0.component_kind.as_deref(), Some("network"));
        assert!((sw0.share - 25.0 / 60.0).abs() < 1e-12);
        let wire = b.row(WIRE).unwrap();
        assert_eq!((wire.kind, wire.spans, wire.component_kind.as_deref()), (RowKind::Wire, 0, None));

        let per_link = trace_breakdown(&packet(), &Options { wire: WireMode::PerLink, ..Options::default() });
        assert_eq!(
            names(&per_link),
            vec![
                ("ns3/h0", 10),
                ("wire ns3/h0→ns3/sw0", 5),
                ("ns3/sw0", 25),
                ("wire ns3/sw0→ns3/sw1", 10),
                ("ns3/sw1", 1),
                ("wire ns3/sw1→ns3/h1", 9),
                ("ns3/h1", 0),
            ]
        );
    }

    #[test]
    fn nested_and_overlapping_spans_split_time_to_the_innermost() {
        // A [0,100] ⊃ B [10,30], C [20,50]: C started last, so it owns [20,50].
        let spans =
            vec![sp(1, 1, None, "a", 0, 100), sp(1, 2, Some(1), "b", 10, 30), sp(1, 3, Some(1), "c", 20, 50)];
        let b = trace_breakdown(&spans, &Options::default());
        assert_eq!(names(&b), vec![("a", 60), ("b", 10), ("c", 30)]);
        let row = |n| b.row(n).unwrap();
        assert_eq!((row("a").total_ns, row("a").self_ns), (100, 60));
        assert_eq!((row("b").total_ns, row("b").self_ns), (20, 20));
        assert_eq!((row("c").total_ns, row("c").self_ns), (30, 30));
    }

    #[test]
    fn a_child_outliving_its_parent_is_clipped_for_self_time() {
        let spans = vec![sp(1, 1, None, "a", 0, 10), sp(1, 2, Some(1), "b", 5, 20)];
        let b = trace_breakdown(&spans, &Options::default());
        assert_eq!(b.row("a").unwrap().self_ns, 5);
        assert_eq!(names(&b), vec![("a", 5), ("b", 15)]);
    }

    #[test]
    fn a_gap_inside_one_group_is_that_groups_time_not_wire() {
        let spans =
            vec![sp(1, 1, None, "x", 0, 10), sp(1, 2, None, "x", 20, 30), sp(1, 3, None, "y", 35, 40)];
        let b = trace_breakdown(&spans, &Options::default());
        assert_eq!(names(&b), vec![("x", 30), ("y", 5), (WIRE, 5)]);
    }

    #[test]
    fn group_by_service_operation_and_attribute() {
        let spans = vec![
            with(sp(1, 1, None, "ns3/h0", 0, 10), &[("dev", "eth0")]),
            with(sp(1, 2, Some(1), "ns3/sw0", 10, 30), &[("dev", "p1")]),
        ];
        let by = |g: GroupBy| {
            names(&trace_breakdown(&spans, &Options { group_by: g, ..Options::default() }))
                .into_iter()
                .map(|(n, t)| (n.to_owned(), t))
                .collect::<Vec<_>>()
        };
        assert_eq!(by(GroupBy::Service), vec![("ns3".to_owned(), 30)]);
        assert_eq!(by(GroupBy::Operation), vec![("ns3 hop".to_owned(), 30)]);
        assert_eq!(
            by(GroupBy::Attribute("dev".into())),
            vec![("eth0".to_owned(), 10), ("p1".to_owned(), 20)]
        );
        assert_eq!(by(GroupBy::Attribute("nope".into())), vec![(UNKNOWN.to_owned(), 30)]);
        assert_eq!(GroupBy::parse("attr:net.peer.ip"), Some(GroupBy::Attribute("net.peer.ip".into())));
        assert_eq!(GroupBy::parse("service"), Some(GroupBy::Service));
        assert_eq!(GroupBy::parse("attr:"), None);
        assert_eq!(GroupBy::parse("bogus"), None);
    }

    #[test]
    fn empty_reversed_cyclic_and_duplicate_spans_do_not_break_it() {
        let empty = trace_breakdown(&[], &Options::default());
        assert_eq!((empty.duration_ns, empty.rows.len()), (0, 0));
        // End before start = zero length; 1 ↔ 2 is a parent cycle; id 3 appears twice.
        let spans = vec![
            sp(1, 1, Some(2), "a", 0, 10),
            sp(1, 2, Some(1), "b", 5, 15),
            sp(1, 3, Some(2), "c", 30, 20),
            sp(1, 3, None, "c", 40, 50),
        ];
        let b = trace_breakdown(&spans, &Options::default());
        assert_eq!(b.duplicate_span_ids, 1);
        assert_eq!(b.duration_ns, 50);
        assert_eq!(b.rows.iter().map(|r| r.timeline_ns).sum::<u64>(), 50);
        assert_eq!(b.row("c").unwrap().total_ns, 10);
    }

    const REQ: &[(&str, &str)] = &[("ip.src", "10.0.0.1"), ("ip.dst", "10.0.0.2")];
    const RESP: &[(&str, &str)] = &[("ip.src", "10.0.0.2"), ("ip.dst", "10.0.0.1")];
    const BG: &[(&str, &str)] = &[("ip.src", "10.0.0.9"), ("ip.dst", "10.0.0.8")];

    /// A request through an idle sw1 and a response that queues in it, plus background.
    fn exchange(t: u64, queue: u64) -> Vec<Span> {
        let t = t as u128;
        let base = t as u64 * 10_000;
        vec![
            with(sp(t * 10, 1, None, "ns3/h0", base, base + 10), REQ),
            with(sp(t * 10, 2, Some(1), "ns3/sw1", base + 15, base + 20), REQ),
            // A NIC span below the last hop, without IP attributes: inherits "request".
            sp(t * 10, 3, Some(2), "nic1", base + 22, base + 30),
            with(sp(t * 10 + 1, 1, None, "ns3/sw1", base + 100, base + 105 + queue), RESP),
            with(sp(t * 10 + 1, 2, Some(1), "ns3/h0", base + 115 + queue, base + 120 + queue), RESP),
            with(sp(t * 10 + 2, 1, None, "ns3/sw1", base + 100, base + 5000), BG),
        ]
    }

    fn ntp_rules() -> Classifier {
        Classifier::parse(&["request: ip.src=10.0.0.1, ip.dst=10.0.0.2", "response: ip.src=10.0.0.2"])
            .unwrap()
    }

    #[test]
    fn directions_split_requests_from_responses() {
        let spans: Vec<Span> = (1..=4).flat_map(|t| exchange(t, 95 + t * 10)).collect();
        let b = breakdown(&spans, &ntp_rules(), &Options::default());
        assert_eq!(b.traces, 12);
        assert_eq!(b.spans, 24);
        assert_eq!((b.unclassified_spans, b.unclassified_traces), (4, 4));
        assert_eq!(
            b.directions.iter().map(|d| d.direction.as_str()).collect::<Vec<_>>(),
            ["request", "response"]
        );
        let req = b.direction("request").unwrap();
        assert_eq!((req.units, req.spans), (4, 12));
        assert_eq!(req.end_to_end.mean_ns, 30.0);
        let names: Vec<&str> = req.components.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["ns3/h0", "ns3/sw1", "nic1", WIRE]);
        assert_eq!(req.component("ns3/sw1").unwrap().time.mean_ns, 5.0);
        assert_eq!(req.component("nic1").unwrap().time.mean_ns, 8.0);
        assert_eq!(req.component(WIRE).unwrap().time.mean_ns, 7.0);
        let resp = b.direction("response").unwrap();
        // sw1 holds responses 5 + 105, 115, 125, 135 ns.
        let sw1 = resp.component("ns3/sw1").unwrap();
        assert_eq!((sw1.time.mean_ns, sw1.time.min_ns, sw1.time.max_ns), (125.0, 110, 140));
        assert_eq!((sw1.time.median_ns, sw1.time.p95_ns, sw1.present), (120, 140, 4));
        assert_eq!(b.ratio("response", "request", "ns3/sw1"), Some(25.0));
        assert_eq!(b.ratio("response", "request", "nic1"), None);
        for d in &b.directions {
            let mean_sum: f64 = d.components.iter().map(|c| c.time.mean_ns).sum();
            assert!((mean_sum - d.end_to_end.mean_ns).abs() < 1e-9, "{}", d.direction);
            let share_sum: f64 = d.components.iter().map(|c| c.share).sum();
            assert!((share_sum - 1.0).abs() < 1e-9);
        }
    }

    #[test]
    fn without_rules_everything_is_one_direction() {
        let spans: Vec<Span> = (1..=2).flat_map(|t| exchange(t, 100)).collect();
        let b = breakdown(&spans, &Classifier::none(), &Options::default());
        assert_eq!(b.directions.len(), 1);
        let all = b.direction(ALL).unwrap();
        assert_eq!((all.units, all.spans, b.unclassified_spans), (6, 12, 0));
    }

    #[test]
    fn trace_rules_use_the_first_and_last_group_and_the_root() {
        let mut spans = exchange(1, 100);
        spans[0].attributes.push("http.route", "/slow");
        let cls = Classifier::parse(&[
            "out: from=ns3/h0, to=nic1",
            "back: from=ns3/sw1, to=ns3/h0",
            "slow: root.http.route=/slow",
        ])
        .unwrap();
        let b = breakdown(&spans, &cls, &Options::default());
        assert_eq!(b.direction("out").unwrap().units, 1);
        assert_eq!(b.direction("back").unwrap().units, 1);
        // The background trace starts and ends in sw1: no rule.
        assert_eq!((b.unclassified_traces, b.unclassified_spans), (1, 1));
        assert_eq!(b.direction("slow").unwrap().units, 0, "'out' came first");
        let slow_first = Classifier::parse(&["slow: root.http.route=/slow", "out: from=ns3/h0"]).unwrap();
        let b = breakdown(&spans, &slow_first, &Options::default());
        assert_eq!(b.direction("slow").unwrap().units, 1);
        assert_eq!(b.direction("out").unwrap().units, 0);
    }

    #[test]
    fn a_span_rule_with_a_trace_condition_needs_both() {
        let spans = exchange(1, 100);
        let cls =
            Classifier::parse(&["response: ip.src=10.0.0.2, to=nowhere", "any: ip.src=10.0.0.*"]).unwrap();
        let b = breakdown(&spans, &cls, &Options::default());
        assert_eq!(b.direction("response").unwrap().units, 0);
        assert_eq!(b.direction("any").unwrap().units, 3);
    }

    #[test]
    fn rules_with_the_same_label_merge() {
        let spans = exchange(1, 100);
        let cls = Classifier::parse(&["ntp: ip.src=10.0.0.1", "ntp: ip.src=10.0.0.2"]).unwrap();
        assert_eq!(cls.labels(), vec!["ntp"]);
        let b = breakdown(&spans, &cls, &Options::default());
        assert_eq!(b.directions.len(), 1);
        assert_eq!(b.direction("ntp").unwrap().units, 2);
    }

    #[test]
    fn pushing_spans_in_any_order_equals_adding_whole_traces() {
        let mut spans: Vec<Span> = (1..=5).flat_map(|t| exchange(t, t * 7)).collect();
        let whole = breakdown(&spans, &ntp_rules(), &Options::default());
        spans.reverse();
        spans.swap(0, 7);
        let mut b = BreakdownBuilder::new(ntp_rules(), Options::default());
        for s in &spans {
            assert!(b.push(s));
        }
        let pushed = b.finish();
        assert_eq!(pushed.directions, whole.directions);
        assert_eq!((pushed.traces, pushed.spans), (whole.traces, whole.spans));
    }

    #[test]
    fn push_drops_and_counts_beyond_the_span_limit() {
        let spans = exchange(1, 100);
        let mut b = BreakdownBuilder::new(Classifier::none(), Options::default()).with_max_pending_spans(4);
        let kept = spans.iter().filter(|s| b.push(s)).count();
        assert_eq!((kept, b.dropped_spans()), (4, 2));
        let r = b.finish();
        assert_eq!((r.spans, r.dropped_spans), (4, 2));
    }

    #[test]
    fn the_reservoir_bounds_samples_but_keeps_means_exact() {
        let mut b = BreakdownBuilder::new(Classifier::none(), Options::default()).with_sample_cap(3);
        for t in 0..100u64 {
            b.add_trace(&[sp(t as u128 + 1, 1, None, "x", 0, t)]);
        }
        let r = b.finish();
        assert!(r.sampled);
        let x = r.direction(ALL).unwrap().component("x").unwrap();
        assert_eq!((x.time.count, x.time.mean_ns, x.time.min_ns, x.time.max_ns), (100, 49.5, 0, 99));
        assert!(x.time.median_ns <= 99);
        let exact = breakdown(&[sp(1, 1, None, "x", 0, 7)], &Classifier::none(), &Options::default());
        assert!(!exact.sampled);
    }

    #[test]
    fn rule_text_errors_name_the_rule() {
        for bad in ["no label", ": a=b", "x: a", "x: =b", "x: root.=b", "x: ,"] {
            let e = Rule::parse(bad).unwrap_err();
            assert_eq!(e.rule, bad);
            assert!(e.to_string().contains(bad), "{e}");
        }
        let r =
            Rule::parse(" response : ip.src=10.0.0.2|10.0.0.3 , name=hop*, root.k=v, from=a, to=b").unwrap();
        assert_eq!(r.label, "response");
        assert_eq!(r.conditions.len(), 5);
        assert!(matches!(&r.conditions[2], Condition::Root { key, .. } if key == "k"));
        let p = Pattern::parse("10.0.0.2|hop*");
        assert!(p.matches("10.0.0.2") && p.matches("hop") && p.matches("hop 3"));
        assert!(!p.matches("10.0.0.22") && !p.matches("ho"));
        let many: Vec<String> = (0..=MAX_RULES).map(|i| format!("r{i}: a=b")).collect();
        assert!(Classifier::parse(&many).is_err());
    }

    #[test]
    fn conditions_read_non_string_values_resource_attributes_and_the_span_name() {
        let mut s = sp(1, 1, None, "ns3/h0", 0, 1);
        s.attributes.push("port", 123i64);
        s.name = "TxQueue".into();
        let cls = Classifier::parse(&["a: port=123, service.name=ns3, name=Tx*"]).unwrap();
        let b = breakdown(&[s], &cls, &Options::default());
        assert_eq!(b.direction("a").unwrap().units, 1);
    }

    #[test]
    fn breakdowns_serialize_to_camel_case_json() {
        let b = trace_breakdown(&packet(), &Options::default());
        let j = serde_json::to_value(&b).unwrap();
        assert_eq!(j["durationNs"], 60);
        assert_eq!(j["rows"][0]["timelineNs"], 10);
        assert_eq!(j["rows"][4]["kind"], "wire");
        let all = breakdown(&packet(), &Classifier::none(), &Options::default());
        let j = serde_json::to_value(&all).unwrap();
        assert_eq!(j["directions"][0]["endToEnd"]["meanNs"], 60.0);
    }

    mod props {
        use proptest::prelude::*;

        use super::*;

        fn arb_trace() -> impl Strategy<Value = Vec<Span>> {
            // Times near 0, mid-range and just below u64::MAX.
            let base = prop_oneof![Just(0u64), Just(1u64 << 62), Just(u64::MAX - 300)];
            let spans =
                prop::collection::vec((0u64..200, 0u64..60, 0usize..5, 0u64..30, any::<bool>()), 1..25);
            (base, spans).prop_map(|(base, v)| {
                v.into_iter()
                    .enumerate()
                    .map(|(i, (start, len, comp, parent, has_parent))| {
                        // Parents anywhere (forward, missing, cyclic, self) on purpose.
                        let parent = has_parent.then_some(parent + 1);
                        let comp = ["a", "b", "ns3/c", "ns3/d", "e"][comp];
                        sp(1, i as u64 + 1, parent, comp, base + start, base + start + len)
                    })
                    .collect()
            })
        }

        proptest! {
            #[test]
            fn timeline_rows_add_up_and_self_never_exceeds_total(spans in arb_trace(), per_link in any::<bool>()) {
                let wire = if per_link { WireMode::PerLink } else { WireMode::Total };
                let b = trace_breakdown(&spans, &Options { wire, ..Options::default() });
                let lo = spans.iter().map(|s| s.start_ns).min().unwrap();
                let hi = spans.iter().map(|s| s.end_ns).max().unwrap();
                prop_assert_eq!(b.duration_ns, hi - lo);
                prop_assert_eq!(b.rows.iter().map(|r| r.timeline_ns).sum::<u64>(), b.duration_ns);
                for r in &b.rows {
                    prop_assert!(r.self_ns <= r.total_ns);
                }
                prop_assert_eq!(b.rows.iter().map(|r| r.spans).sum::<u64>(), spans.len() as u64);
                let all = breakdown(&spans, &Classifier::none(), &Options { wire, ..Options::default() });
                let d = &all.directions[0];
                prop_assert_eq!(d.end_to_end.sum_ns, b.duration_ns);
                for r in &b.rows {
                    let c = d.component(&r.name);
                    prop_assert!(c.is_some(), "{} missing", r.name);
                    prop_assert_eq!(c.map(|c| c.time.sum_ns), Some(r.timeline_ns));
                }
            }
        }
    }
}
