//! The hypothesis forest (VAIF principle 4): every decision the loop took and the statistics
//! behind it, one tree per request type, stored durably as JSON in the explore state
//! directory ([`Forest::save`], [`Forest::load`]).
//!
//! A tree's root node holds the groups of the first epoch that saw the request type. Each
//! hypothesis — "enable tracepoint T inside edge A → B of this group, by this principle" —
//! has two nodes filled from the next epoch's traces: `+` (traces with T) and `~` (traces
//! without), each with its groups' statistics. A hypothesis hangs under the hypothesis that
//! enabled one of its edge's ends (else under the root), so the tree reads as the search
//! narrowing down. Old epochs live on only as these summaries: no trace is kept.
//!
//! The live loop also publishes the forest to the collector after every epoch
//! ([`Explorer::with_publisher`](crate::explore::Explorer::with_publisher)), which keeps it
//! next to the traces and shows it in its web UI; [`fetch`] reads it back from there.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::Error;
use crate::space::unit_of;

/// Groups kept per node (the largest).
pub const MAX_GROUPS_PER_NODE: usize = 8;
/// Edges kept per group (by share of variance).
pub const MAX_EDGES_PER_GROUP: usize = 3;

/// Why a tracepoint was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Principle {
    /// 1: a high-variance group's top-variance edge.
    Variance,
    /// 2: a consistently slow group's dominant-latency edge.
    Slow,
    /// 3: the edge whose latency a key correlates with.
    Key,
}

impl Principle {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Principle::Variance => "variance",
            Principle::Slow => "slow",
            Principle::Key => "key",
        }
    }
}

/// One edge of a group's critical path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EdgeSummary {
    /// Earlier record.
    pub from: String,
    /// Later record.
    pub to: String,
    /// Mean latency, ns.
    pub mean_ns: f64,
    /// Share of the group's response-time variance (None when it does not vary).
    pub share: Option<f64>,
}

/// A group's statistics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupSummary {
    /// A member trace (hex id).
    pub representative: String,
    /// The critical path's records.
    pub path: Vec<String>,
    /// Members.
    pub count: usize,
    /// Mean response time, ns.
    pub mean_ns: f64,
    /// Coefficient of variation (None when too few members or a zero mean).
    pub cv: Option<f64>,
    /// Principle 1 verdict.
    pub high_variance: bool,
    /// Principle 2 verdict.
    pub consistently_slow: bool,
    /// The edges with the largest shares of variance.
    pub top_edges: Vec<EdgeSummary>,
}

/// Groups of some traces.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// The epoch the traces are from.
    pub epoch: u64,
    /// How many traces.
    pub traces: usize,
    /// The largest groups.
    pub groups: Vec<GroupSummary>,
}

/// One decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hypothesis {
    /// Its number in the tree.
    pub id: usize,
    /// The hypothesis it refines (None: the root).
    pub parent: Option<usize>,
    /// When it was taken.
    pub epoch: u64,
    /// The tracepoint enabled.
    pub tracepoint: String,
    /// Why.
    pub principle: Principle,
    /// The edge it splits: its two records.
    pub edge: (String, String),
    /// The group's representative trace (hex id).
    pub group: String,
    /// Members of the group.
    pub group_traces: usize,
    /// CV of the group.
    pub group_cv: Option<f64>,
    /// The edge's share of the group's variance (principle 1), its mean latency ns
    /// (principle 2) or the key's correlation with its latency (principle 3).
    pub score: f64,
    /// The key, for principle 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Traces of the next epoch with the tracepoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub with: Option<Node>,
    /// Traces of the next epoch without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub without: Option<Node>,
}

/// A localized problem.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// The request type.
    pub request_type: String,
    /// Which principle found it.
    pub principle: Principle,
    /// The tracepoints bounding the region (the edge's ends, deepest first), then the
    /// enclosing spans outwards.
    pub tracepoints: Vec<String>,
    /// The edge's records.
    pub edge: (String, String),
    /// The key (principle 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The tracepoint exposing the key (principle 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_tracepoint: Option<String>,
    /// Pearson's r of the key with the region's latency (principle 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation: Option<f64>,
    /// The region's share of its group's response-time variance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_of_variance: Option<f64>,
    /// The region's mean latency, ns.
    pub mean_latency_ns: f64,
    /// The group's representative trace (hex id).
    pub group: String,
    /// Members of the group.
    pub group_traces: usize,
    /// The epoch it was localized in.
    pub epoch: u64,
    /// Tracepoints the loop had enabled for this request type by then.
    pub enabled: usize,
}

/// Requests sharing a key's value or bin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyLevel {
    /// The value, or the bin (`< a`, `[a, b)`, `>= b`).
    pub label: String,
    /// Members in it.
    pub count: usize,
    /// Their mean response time, ns.
    pub mean_response_ns: f64,
}

/// A key that correlated with response time within a group (principle 3), as last seen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyReport {
    /// The tracepoint exposing it.
    pub tracepoint: String,
    /// The attribute key.
    pub key: String,
    /// Pearson's r with response time.
    pub pearson: f64,
    /// Its two-sided p-value.
    pub p_value: f64,
    /// Spearman's ρ.
    pub spearman: Option<f64>,
    /// Members with the key.
    pub traces: usize,
    /// The group's representative trace (hex id).
    pub group: String,
    /// The epoch.
    pub epoch: u64,
    /// Mean response time per bin (keys with bins in the search space).
    pub levels: Vec<KeyLevel>,
}

/// One request type's tree.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Tree {
    /// The request type.
    pub request_type: String,
    /// Traces of it seen.
    pub traces: u64,
    /// The first epoch's groups.
    pub root: Option<Node>,
    /// Decisions, in order.
    pub hypotheses: Vec<Hypothesis>,
    /// Localized problems.
    pub findings: Vec<Finding>,
    /// Keys correlating with response time.
    #[serde(default)]
    pub keys: Vec<KeyReport>,
    /// Whether the loop is done with it.
    pub done: bool,
    /// Epochs in which it was re-checked after being done (`Options::recheck_every`).
    #[serde(default)]
    pub rechecks: u64,
    /// Times a re-check resumed it.
    #[serde(default)]
    pub resumed: u64,
}

/// The forest, with the global state of the loop.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Forest {
    /// Epochs run.
    pub epochs: u64,
    /// The always-on globs.
    pub always_on: Vec<String>,
    /// Tracepoints enabled at the start (skeleton) besides the always-on set.
    pub skeleton: Vec<String>,
    /// Trees by request type.
    pub trees: BTreeMap<String, Tree>,
}

/// The forest file's name in the state directory.
pub const FILE: &str = "forest.json";

/// Largest forest accepted (JSON bytes): the collector's bound, and the loop's by construction
/// ([`MAX_GROUPS_PER_NODE`], [`MAX_EDGES_PER_GROUP`], one tree per request type).
pub const MAX_BYTES: usize = 16 << 20;

/// The collector's route that answers `{"forest": Forest | null}` (the UI's).
pub const READ_ROUTE: &str = "/api/ui/explore";

/// A forest that is not valid: the JSON path of the field and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", if path.is_empty() { String::new() } else { format!("field {path}: ") })]
pub struct Invalid {
    /// The field (`trees.read.hypotheses[2].parent`), empty for the whole document.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl Forest {
    /// Parses and validates a forest's JSON ([`Forest::validate`]); errors name the field.
    pub fn parse(bytes: &[u8]) -> Result<Forest, Invalid> {
        if bytes.len() > MAX_BYTES {
            return Err(Invalid {
                path: String::new(),
                message: format!("{} bytes, over the limit of {MAX_BYTES}", bytes.len()),
            });
        }
        let mut de = serde_json::Deserializer::from_slice(bytes);
        let forest: Forest = serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let path = e.path().to_string();
            Invalid {
                path: if path == "." { String::new() } else { path },
                message: e.into_inner().to_string(),
            }
        })?;
        de.end().map_err(|e| Invalid { path: String::new(), message: e.to_string() })?;
        forest.validate()?;
        Ok(forest)
    }

    /// What serde cannot check: each tree is filed under its request type, hypothesis ids are
    /// unique and refine an earlier hypothesis of their tree, trace ids are hex.
    pub fn validate(&self) -> Result<(), Invalid> {
        let bad = |path: String, message: &str| Err(Invalid { path, message: message.to_owned() });
        for (name, t) in &self.trees {
            let at = format!("trees.{name}");
            if t.request_type != *name {
                return bad(format!("{at}.request_type"), "differs from the tree's key");
            }
            let mut ids = std::collections::BTreeSet::new();
            for (i, h) in t.hypotheses.iter().enumerate() {
                let at = format!("{at}.hypotheses[{i}]");
                if h.parent.is_some_and(|p| !ids.contains(&p)) {
                    return bad(format!("{at}.parent"), "names no earlier hypothesis of this tree");
                }
                if !ids.insert(h.id) {
                    return bad(format!("{at}.id"), "repeats an earlier hypothesis's id");
                }
                if !is_trace_id(&h.group) {
                    return bad(format!("{at}.group"), "not a trace id (1 to 32 hex digits)");
                }
            }
            let nodes = t.root.iter().map(|n| (format!("{at}.root"), n)).chain(
                t.hypotheses.iter().enumerate().flat_map(|(i, h)| {
                    let p = format!("{at}.hypotheses[{i}]");
                    [(format!("{p}.with"), &h.with), (format!("{p}.without"), &h.without)]
                        .into_iter()
                        .filter_map(|(p, n)| n.as_ref().map(|n| (p, n)))
                }),
            );
            for (p, n) in nodes {
                if let Some(j) = n.groups.iter().position(|g| !is_trace_id(&g.representative)) {
                    return bad(
                        format!("{p}.groups[{j}].representative"),
                        "not a trace id (1 to 32 hex digits)",
                    );
                }
            }
            for (i, f) in t.findings.iter().enumerate() {
                if !is_trace_id(&f.group) {
                    return bad(format!("{at}.findings[{i}].group"), "not a trace id (1 to 32 hex digits)");
                }
            }
        }
        Ok(())
    }

    /// Writes `dir/forest.json` atomically (a temporary file renamed over it).
    pub fn save(&self, dir: &Path) -> Result<(), Error> {
        let io = |e: std::io::Error| Error::Io { path: dir.join(FILE).display().to_string(), source: e };
        std::fs::create_dir_all(dir).map_err(io)?;
        let tmp = dir.join(format!(".{FILE}.tmp"));
        let text = serde_json::to_vec_pretty(self)
            .map_err(|e| Error::Json { path: FILE.into(), message: e.to_string() })?;
        std::fs::write(&tmp, text).map_err(io)?;
        std::fs::rename(&tmp, dir.join(FILE)).map_err(io)
    }

    /// Reads `dir/forest.json`.
    pub fn load(dir: &Path) -> Result<Forest, Error> {
        let path = dir.join(FILE);
        let text =
            std::fs::read(&path).map_err(|e| Error::Io { path: path.display().to_string(), source: e })?;
        Forest::parse(&text)
            .map_err(|e| Error::Json { path: path.display().to_string(), message: e.to_string() })
    }

    /// Every finding, tree by tree.
    pub fn findings(&self) -> impl Iterator<Item = &Finding> {
        self.trees.values().flat_map(|t| &t.findings)
    }

    /// The forest as indented text: per tree, its root's groups, then each hypothesis under
    /// the one it refines, with its `+` and `~` nodes, then the findings.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "{} epochs; always on: {}", self.epochs, self.always_on.join(", "));
        if !self.skeleton.is_empty() {
            let _ = writeln!(out, "skeleton: {}", self.skeleton.join(", "));
        }
        for t in self.trees.values() {
            let _ = writeln!(
                out,
                "\n{} — {} traces, {} hypotheses, {} findings{}{}",
                t.request_type,
                t.traces,
                t.hypotheses.len(),
                t.findings.len(),
                if t.done { " (done)" } else { "" },
                if t.rechecks > 0 {
                    format!(", re-checked {} times, resumed {}", t.rechecks, t.resumed)
                } else {
                    String::new()
                }
            );
            if let Some(root) = &t.root {
                node_lines(&mut out, "  ", "root", root);
            }
            let mut kids: BTreeMap<Option<usize>, Vec<&Hypothesis>> = BTreeMap::new();
            for h in &t.hypotheses {
                kids.entry(h.parent).or_default().push(h);
            }
            let mut stack: Vec<(&Hypothesis, usize)> =
                kids.get(&None).map(|v| v.iter().rev().map(|h| (*h, 1)).collect()).unwrap_or_default();
            let mut seen = 0;
            while let Some((h, level)) = stack.pop() {
                seen += 1;
                if seen > t.hypotheses.len() {
                    break;
                }
                let pad = "  ".repeat(level + 1);
                let _ = writeln!(
                    out,
                    "{pad}#{} epoch {}: enable {} — {} in {} → {} (group of {} traces{}, score {:.3}{})",
                    h.id,
                    h.epoch,
                    h.tracepoint,
                    h.principle.as_str(),
                    h.edge.0,
                    h.edge.1,
                    h.group_traces,
                    h.group_cv.map(|c| format!(", CV {:.1} %", 100.0 * c)).unwrap_or_default(),
                    h.score,
                    h.key.as_ref().map(|k| format!(", key {k}")).unwrap_or_default(),
                );
                for (sign, n) in [("+", &h.with), ("~", &h.without)] {
                    if let Some(n) = n {
                        node_lines(&mut out, &format!("{pad}  "), sign, n);
                    }
                }
                if let Some(v) = kids.get(&Some(h.id)) {
                    stack.extend(v.iter().rev().map(|c| (*c, level + 1)));
                }
            }
            for k in &t.keys {
                let levels: Vec<String> = k
                    .levels
                    .iter()
                    .map(|l| format!("{}: {} × {:.3} ms", l.label, l.count, l.mean_response_ns / 1e6))
                    .collect();
                let _ = writeln!(
                    out,
                    "  key {} of {} (epoch {}): r = {:.2} (p = {:.1e}) with response time over {} traces{}",
                    k.key,
                    k.tracepoint,
                    k.epoch,
                    k.pearson,
                    k.p_value,
                    k.traces,
                    if levels.is_empty() { String::new() } else { format!("; {}", levels.join(", ")) }
                );
            }
            for f in &t.findings {
                let _ = writeln!(
                    out,
                    "  finding ({}, epoch {}, {} enabled): {}{}{}",
                    f.principle.as_str(),
                    f.epoch,
                    f.enabled,
                    f.tracepoints.first().map_or("", String::as_str),
                    f.share_of_variance
                        .map(|s| format!(" — {:.0} % of the variance", 100.0 * s))
                        .unwrap_or_default(),
                    match (&f.key, f.correlation) {
                        (Some(k), Some(r)) => format!(" — grows with {k} (r = {r:.2})"),
                        _ => format!(" — mean {:.3} ms", f.mean_latency_ns / 1e6),
                    }
                );
            }
        }
        out
    }

    /// Why each tracepoint of `records` (critical-path record names or tracepoint names of a
    /// trace of `request_type`) is on: one line per tracepoint.
    pub fn explain<'a>(
        &self,
        request_type: &str,
        tracepoints: impl IntoIterator<Item = &'a str>,
    ) -> Vec<String> {
        let tree = self.trees.get(request_type);
        let mut out = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for r in tracepoints {
            let unit = unit_of(r);
            if !seen.insert(unit.to_owned()) {
                continue;
            }
            let why = if unit == request_type {
                "the request type's root (always on)".to_owned()
            } else if let Some(g) = self.always_on.iter().find(|g| weft_probe::select::glob_match(g, unit)) {
                format!("always on (matches {g:?})")
            } else if self.skeleton.iter().any(|s| s == unit) {
                "skeleton: a synchronization point, enabled at the start".to_owned()
            } else if let Some(h) = tree.and_then(|t| t.hypotheses.iter().find(|h| h.tracepoint == unit)) {
                format!(
                    "hypothesis #{} (epoch {}): {} — edge {} → {} of group {} ({} traces), score {:.3}{}",
                    h.id,
                    h.epoch,
                    h.principle.as_str(),
                    h.edge.0,
                    h.edge.1,
                    h.group,
                    h.group_traces,
                    h.score,
                    h.key.as_ref().map(|k| format!(", key {k}")).unwrap_or_default()
                )
            } else if let Some((rt, h)) = self
                .trees
                .iter()
                .find_map(|(rt, t)| t.hypotheses.iter().find(|h| h.tracepoint == unit).map(|h| (rt, h)))
            {
                format!("enabled for request type {rt:?} (hypothesis #{}), not this one", h.id)
            } else {
                "not enabled by weft explore".to_owned()
            };
            out.push(format!("{unit}: {why}"));
        }
        out
    }

    /// A group representative's request type and path, looked up in every node.
    pub fn representative(&self, trace_id: &str) -> Option<(&str, &[String])> {
        for t in self.trees.values() {
            let nodes =
                t.root.iter().chain(t.hypotheses.iter().flat_map(|h| h.with.iter().chain(&h.without)));
            for n in nodes {
                if let Some(g) = n.groups.iter().find(|g| g.representative.eq_ignore_ascii_case(trace_id)) {
                    return Some((&t.request_type, &g.path));
                }
            }
        }
        None
    }
}

fn is_trace_id(s: &str) -> bool {
    (1..=32).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The forest a collector keeps (published by a run to
/// [`FOREST_ROUTE`](weft_control::client::FOREST_ROUTE)), read from its
/// query listener at `base` (`http://host:16686`); `None` when it has none.
pub fn fetch(base: &str) -> Result<Option<Forest>, Error> {
    let url = format!("{}{READ_ROUTE}", base.trim_end_matches('/'));
    let fail = |detail: String| Error::Collector { url: url.clone(), detail };
    let http: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(std::time::Duration::from_secs(2)))
        .timeout_global(Some(std::time::Duration::from_secs(30)))
        .build()
        .into();
    let mut r = http.get(&url).call().map_err(|e| fail(e.to_string()))?;
    let status = r.status().as_u16();
    let body = r
        .body_mut()
        .with_config()
        .limit(MAX_BYTES as u64 + 1024)
        .read_to_vec()
        .map_err(|e| fail(e.to_string()))?;
    if status != 200 {
        return Err(fail(format!(
            "HTTP {status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(300)])
        )));
    }
    #[derive(Deserialize)]
    struct Answer {
        forest: Option<serde_json::Value>,
    }
    let a: Answer = serde_json::from_slice(&body).map_err(|e| fail(e.to_string()))?;
    match a.forest {
        None => Ok(None),
        Some(v) => Forest::parse(&serde_json::to_vec(&v).map_err(|e| fail(e.to_string()))?)
            .map(Some)
            .map_err(|e| fail(e.to_string())),
    }
}

fn node_lines(out: &mut String, pad: &str, label: &str, n: &Node) {
    let _ = writeln!(out, "{pad}{label} epoch {}: {} traces, {} groups", n.epoch, n.traces, n.groups.len());
    for g in &n.groups {
        let top = g.top_edges.first().map(|e| {
            format!(
                ", top edge {} → {}{}",
                e.from,
                e.to,
                e.share.map(|s| format!(" ({:.0} %)", 100.0 * s)).unwrap_or_default()
            )
        });
        let _ = writeln!(
            out,
            "{pad}  {} traces, mean {:.3} ms{}{}{}{}",
            g.count,
            g.mean_ns / 1e6,
            g.cv.map(|c| format!(", CV {:.1} %", 100.0 * c)).unwrap_or_default(),
            if g.high_variance { ", high variance" } else { "" },
            if g.consistently_slow { ", consistently slow" } else { "" },
            top.unwrap_or_default()
        );
    }
}
