//! Where did the time go? Per-component time breakdowns of one trace and of many traces split
//! by request direction — Columbo's case-study figure (time per host, NIC, switch and wire,
//! requests vs responses).
//!
//! # Groups
//!
//! Spans are grouped by a key chosen with [`GroupBy`]: by default the span's finest component
//! ([`conv::COMPONENT`](weft_model::conv::COMPONENT), e.g. `ns3/sw1` for a hop inside switch
//! `sw1`), falling back to its resource's `service.name`. Each group's resource
//! [`conv::COMPONENT_KIND`](weft_model::conv::COMPONENT_KIND) (`host`, `nic`, `network`, ...)
//! is reported with it so a UI can colour by kind.
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
//! A unit with a span marked `weft.incomplete` (its opening or closing event was not matched:
//! a cut journey) is counted per direction and per row present in it
//! ([`DirectionBreakdown::incomplete_units`], [`ComponentStats::incomplete_units`]), so that
//! rows computed from cut journeys can be marked.
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
//!
//! # Modules
//!
//! * [`options`] — what a row stands for ([`GroupBy`]) and how wire time is reported;
//! * [`rules`] — the direction rule language ([`Rule`], [`Classifier`]);
//! * `tree` — compact span records and the parent/child tree of one trace;
//! * `timeline` — wall-clock attribution of a trace's time to groups and wires, self times;
//! * [`trace`] — the breakdown of one trace ([`trace_breakdown`]);
//! * [`aggregate`] — many traces per direction ([`breakdown`], [`BreakdownBuilder`]).

use weft_model::{Span, Value};

pub mod aggregate;
pub mod options;
pub mod rules;
mod timeline;
pub mod trace;
mod tree;

pub use aggregate::{Breakdown, BreakdownBuilder, ComponentStats, DirectionBreakdown, Stats, breakdown};
pub use options::{GroupBy, Options, RowKind, WireMode};
pub use rules::{Classifier, Condition, Pattern, Rule, RuleError};
pub use trace::{TraceBreakdown, TraceRow, trace_breakdown};

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

/// The attribute `key` of `span`, else of its resource.
fn attr<'a>(span: &'a Span, key: &str) -> Option<&'a Value> {
    span.attributes.get(key).or_else(|| span.resource.attributes.get(key))
}

#[cfg(test)]
mod tests;
