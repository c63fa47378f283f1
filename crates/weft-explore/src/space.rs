//! The search space: what an exhaustive run (every tracepoint on) says about a system, learned
//! by [`Learner`] and saved as a TOML file a developer may edit ([`SearchSpace::to_toml`],
//! [`SearchSpace::parse`]).
//!
//! **Tracepoints.** Each span name is one tracepoint *pair* (its entry and exit records,
//! switched together) and each span event one *annotation* tracepoint named
//! `span-name/event-name`; a critical-path record `X:entry` or `X:exit` belongs to tracepoint
//! `X` ([`unit_of`]). Per tracepoint: its kind, the span kind, its most frequent parent, its
//! depth below the root and how often it occurred.
//!
//! **What else is learned:** the request types (root span names); the keys (span attributes,
//! with their value range; `bins` are for the developer to fill in); the concurrency points
//! (spans whose children overlap in time: a fan-out, joined at the span — VAIF's
//! synchronization points, enabled from the start when not always on: `skeleton`); the
//! potential critical paths per request type with their frequencies (the distinct critical
//! paths of the exhaustive traces, most frequent first, at most [`MAX_PATHS`] per type); and
//! the always-on set (globs; learned: the roots and every SERVER and CLIENT span).
//!
//! **Matching** ([`SearchSpace::match_path`]): a group's critical path, seen with only some
//! tracepoints on, matches a potential path of its request type when it is a subsequence of
//! it (pythia's regular expression `.*A.*B.*C.*`) that skips no always-on record; of several,
//! the most frequent wins.
//!
//! A file that names a tracepoint it does not list, has broken bins, or repeats a tracepoint
//! is refused with a [`SpaceError`] naming the item.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use weft_analyze::vaif::Config;
use weft_analyze::vaif::hb::{PathFinder, PathRecord, Tracepoints};
use weft_model::{Span, SpanKind, Value};
use weft_probe::select::glob_match;

use crate::Error;

/// Potential critical paths kept per request type (the most frequent).
pub const MAX_PATHS: usize = 64;

/// The tracepoint a critical-path record belongs to: `X` for `X:entry` and `X:exit`, the
/// annotation's own name (`span/event`) otherwise.
pub fn unit_of(record: &str) -> &str {
    record.strip_suffix(":entry").or_else(|| record.strip_suffix(":exit")).unwrap_or(record)
}

/// What a tracepoint is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TracepointKind {
    /// A span's entry/exit pair.
    Span,
    /// A span event.
    Annotation,
}

/// One tracepoint of the search space.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tracepoint {
    /// Span name, or `span/event` for an annotation.
    pub name: String,
    /// Pair or annotation.
    pub kind: TracepointKind,
    /// The span kind (`server`, `client`, `internal`, `producer`, `consumer`, `unspecified`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span_kind: Option<String>,
    /// The enclosing span's tracepoint (most frequent); none for a root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Levels below the root (annotations: one below their span).
    #[serde(default)]
    pub depth: u32,
    /// Occurrences in the exhaustive run.
    #[serde(default)]
    pub count: u64,
}

/// A request type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestType {
    /// The root span name.
    pub name: String,
    /// Traces of it in the exhaustive run.
    #[serde(default)]
    pub traces: u64,
}

/// A key exported by a tracepoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Key {
    /// The tracepoint exposing it (a span name; its attributes).
    pub tracepoint: String,
    /// The attribute key.
    pub key: String,
    /// Every value seen was a number.
    #[serde(default)]
    pub numeric: bool,
    /// Smallest value seen (numeric keys).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// Largest value seen (numeric keys).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    /// Bin edges (finite, strictly increasing): edges `a < b` make bins `< a`, `[a, b)`,
    /// `>= b`. Groups are split by bin; empty: not binned.
    #[serde(default)]
    pub bins: Vec<f64>,
}

/// A fan-out (children overlapping in time) joined at `span`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Concurrency {
    /// The span whose children run concurrently.
    pub span: String,
    /// The children seen overlapping.
    pub children: Vec<String>,
    /// Traces with the overlap.
    #[serde(default)]
    pub count: u64,
}

/// A potential critical path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PotentialPath {
    /// Its request type.
    pub request_type: String,
    /// Exhaustive traces with exactly this critical path.
    pub frequency: u64,
    /// The records (`X:entry`, `X:exit`, `X/event`), root entry first.
    pub records: Vec<String>,
}

/// The search space (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchSpace {
    /// Tracepoints that are always on (globs over tracepoint names); never hypotheses.
    #[serde(default)]
    pub always_on: Vec<String>,
    /// Tracepoints the loop enables at its start besides the always-on set (synchronization
    /// points).
    #[serde(default)]
    pub skeleton: Vec<String>,
    /// The request types.
    #[serde(default)]
    pub request_types: Vec<RequestType>,
    /// Keys, with bins.
    #[serde(default)]
    pub keys: Vec<Key>,
    /// Concurrency points.
    #[serde(default)]
    pub concurrency: Vec<Concurrency>,
    /// Every tracepoint.
    #[serde(default)]
    pub tracepoints: Vec<Tracepoint>,
    /// Potential critical paths, most frequent first per request type.
    #[serde(default)]
    pub paths: Vec<PotentialPath>,
    #[serde(skip)]
    index: HashMap<String, usize>,
}

/// A search space that is not usable, naming the item.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("search space {origin}: {item}: {reason}")]
pub struct SpaceError {
    /// The file (or `<learned>`).
    pub origin: String,
    /// The offending item, e.g. `paths[3].records[12] "x:entry"`.
    pub item: String,
    /// What is wrong.
    pub reason: String,
}

impl SearchSpace {
    /// Parses and validates a search-space file's text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<SearchSpace, SpaceError> {
        let mut s: SearchSpace = toml::from_str(text).map_err(|e| SpaceError {
            origin: origin.to_owned(),
            item: e.span().map_or_else(|| "file".to_owned(), |r| format!("byte {}", r.start)),
            reason: e.message().to_owned(),
        })?;
        s.validate(origin)?;
        Ok(s)
    }

    /// The file text: TOML, with a header saying what may be edited.
    pub fn to_toml(&self) -> String {
        let body = toml::to_string_pretty(self).unwrap_or_default();
        format!(
            "# weft explore search space (learned by `weft explore learn`; see docs/explore.md).\n\
             # Edit freely: always_on (globs), skeleton, keys.bins (bin edges, strictly increasing).\n\n{body}"
        )
    }

    /// Checks every reference and the bins, and indexes the tracepoints.
    pub fn validate(&mut self, origin: &str) -> Result<(), SpaceError> {
        let err = |item: String, reason: &str| SpaceError {
            origin: origin.to_owned(),
            item,
            reason: reason.to_owned(),
        };
        self.index.clear();
        for (i, t) in self.tracepoints.iter().enumerate() {
            if self.index.insert(t.name.clone(), i).is_some() {
                return Err(err(format!("tracepoints[{i}] {:?}", t.name), "listed twice"));
            }
        }
        let known = |name: &str| self.index.contains_key(name);
        let unknown = "unknown tracepoint (not in [[tracepoints]])";
        for (i, t) in self.tracepoints.iter().enumerate() {
            if let Some(p) = &t.parent
                && !known(p)
            {
                return Err(err(format!("tracepoints[{i}].parent {p:?}"), unknown));
            }
        }
        for (i, g) in self.always_on.iter().enumerate() {
            if g.trim().is_empty() {
                return Err(err(format!("always_on[{i}]"), "empty pattern"));
            }
            if !g.contains(['*', '?', '[']) && !known(g) {
                return Err(err(format!("always_on[{i}] {g:?}"), unknown));
            }
        }
        for (i, s) in self.skeleton.iter().enumerate() {
            if !known(s) {
                return Err(err(format!("skeleton[{i}] {s:?}"), unknown));
            }
        }
        for (i, r) in self.request_types.iter().enumerate() {
            if !known(&r.name) {
                return Err(err(format!("request_types[{i}] {:?}", r.name), unknown));
            }
        }
        for (i, k) in self.keys.iter().enumerate() {
            if !known(&k.tracepoint) {
                return Err(err(format!("keys[{i}].tracepoint {:?}", k.tracepoint), unknown));
            }
            if !k.bins.is_empty() {
                let c = Config { bins: [(k.key.clone(), k.bins.clone())].into(), ..Config::default() };
                if let Err(e) = c.validate() {
                    return Err(err(format!("keys[{i}].bins (key {:?})", k.key), &e.to_string()));
                }
            }
        }
        for (i, c) in self.concurrency.iter().enumerate() {
            for (j, n) in std::iter::once(&c.span).chain(&c.children).enumerate() {
                if !known(n) {
                    let item = if j == 0 {
                        format!("concurrency[{i}].span {n:?}")
                    } else {
                        format!("concurrency[{i}].children[{}] {n:?}", j - 1)
                    };
                    return Err(err(item, unknown));
                }
            }
        }
        for (i, p) in self.paths.iter().enumerate() {
            if !self.request_types.iter().any(|r| r.name == p.request_type) {
                return Err(err(
                    format!("paths[{i}].request_type {:?}", p.request_type),
                    "not in [[request_types]]",
                ));
            }
            for (j, r) in p.records.iter().enumerate() {
                if !known(unit_of(r)) {
                    return Err(err(format!("paths[{i}].records[{j}] {r:?}"), unknown));
                }
            }
        }
        Ok(())
    }

    /// The tracepoint named `name`.
    pub fn tracepoint(&self, name: &str) -> Option<&Tracepoint> {
        self.index.get(name).and_then(|&i| self.tracepoints.get(i))
    }

    /// Depth of a tracepoint; unknown ones count as deepest.
    pub fn depth(&self, name: &str) -> u32 {
        self.tracepoint(name).map_or(u32::MAX, |t| t.depth)
    }

    /// The enclosing tracepoints of `name`, innermost first (bounded by the number of
    /// tracepoints, so a parent cycle in an edited file cannot loop).
    pub fn ancestors(&self, name: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut cur = self.tracepoint(name).and_then(|t| t.parent.clone());
        while let Some(p) = cur {
            if out.len() > self.tracepoints.len() || out.contains(&p) {
                break;
            }
            cur = self.tracepoint(&p).and_then(|t| t.parent.clone());
            out.push(p);
        }
        out
    }

    /// Whether `name` is a learned request type.
    pub fn is_request_type(&self, name: &str) -> bool {
        self.request_types.iter().any(|r| r.name == name)
    }

    /// Bin edges per key name (for [`Config::bins`]; the first tracepoint's wins when two
    /// expose the same key with bins).
    pub fn bins(&self) -> BTreeMap<String, Vec<f64>> {
        let mut out = BTreeMap::new();
        for k in self.keys.iter().filter(|k| !k.bins.is_empty()) {
            out.entry(k.key.clone()).or_insert_with(|| k.bins.clone());
        }
        out
    }

    /// The most frequent potential path of `request_type` of which `records` is a
    /// subsequence, with the position of each of `records` in it. A path with an always-on
    /// record that `records` lacks is not a match: that tracepoint would show (a rare path
    /// without one of the common path's server or client spans is not the common path).
    pub fn match_path(&self, request_type: &str, records: &[&str]) -> Option<(&PotentialPath, Vec<usize>)> {
        let skips_always_on =
            |skipped: &[String]| skipped.iter().any(|x| matches_any(&self.always_on, unit_of(x)));
        self.paths.iter().filter(|p| p.request_type == request_type).find_map(|p| {
            let mut pos = Vec::with_capacity(records.len());
            let mut at = 0;
            for r in records {
                let k = p.records[at..].iter().position(|x| x == r)?;
                if skips_always_on(&p.records[at..at + k]) {
                    return None;
                }
                pos.push(at + k);
                at += k + 1;
            }
            (!skips_always_on(&p.records[at..])).then_some((p, pos))
        })
    }
}

/// Whether `name` matches one of `globs`.
pub fn matches_any(globs: &[String], name: &str) -> bool {
    globs.iter().any(|g| glob_match(g, name))
}

/// Learns a [`SearchSpace`] from exhaustive traces, one trace at a time.
#[derive(Debug, Default)]
pub struct Learner {
    finder: PathFinder,
    names: Tracepoints,
    records: Vec<PathRecord>,
    traces: usize,
    request_types: BTreeMap<String, u64>,
    tracepoints: BTreeMap<String, Acc>,
    keys: BTreeMap<(String, String), KeyAcc>,
    concurrency: BTreeMap<String, (BTreeSet<String>, u64)>,
    paths: HashMap<(String, Vec<String>), u64>,
}

#[derive(Debug)]
struct Acc {
    kind: TracepointKind,
    span_kind: Option<SpanKind>,
    parents: BTreeMap<String, u64>,
    depth: u32,
    count: u64,
}

#[derive(Debug, Default)]
struct KeyAcc {
    numeric: bool,
    min: f64,
    max: f64,
    count: u64,
}

impl Learner {
    /// Adds one exhaustive trace. A trace without a critical path (no root, several roots,
    /// a cycle, a missing parent) is an error naming it.
    pub fn add(&mut self, spans: &[Span]) -> Result<(), Error> {
        let index = self.traces;
        self.traces += 1;
        let root = self.finder.find(spans, index, &mut self.names, &mut self.records)?;
        let request_type = spans[root].name.to_string();
        *self.request_types.entry(request_type.clone()).or_default() += 1;
        let records: Vec<String> =
            self.records.iter().map(|r| self.names.name(r.tracepoint).to_owned()).collect();
        let distinct = self.paths.keys().filter(|(t, _)| *t == request_type).count();
        let key = (request_type, records);
        if let Some(n) = self.paths.get_mut(&key) {
            *n += 1;
        } else if distinct < 4 * MAX_PATHS {
            self.paths.insert(key, 1);
        }

        // Depth and parent name per span (the trace is a valid tree: find succeeded).
        let by_id: HashMap<_, usize> = spans.iter().enumerate().map(|(i, s)| (s.span_id, i)).collect();
        let parent = |i: usize| spans[i].parent_span_id.and_then(|p| by_id.get(&p).copied());
        let mut depth = vec![u32::MAX; spans.len()];
        for i in 0..spans.len() {
            let mut chain = vec![i];
            let mut cur = i;
            while depth[cur] == u32::MAX {
                match parent(cur) {
                    Some(p) if chain.len() <= spans.len() => {
                        chain.push(p);
                        cur = p;
                    }
                    _ => {
                        depth[cur] = 0;
                        break;
                    }
                }
            }
            let mut d = depth[cur];
            for &c in chain.iter().rev().skip(1) {
                d += 1;
                depth[c] = d;
            }
        }
        let mut children: HashMap<usize, Vec<usize>> = HashMap::new();
        for (i, s) in spans.iter().enumerate() {
            let parent_name = parent(i).map(|p| spans[p].name.to_string());
            if let Some(p) = parent(i) {
                children.entry(p).or_default().push(i);
            }
            self.note(&s.name, TracepointKind::Span, Some(s.kind), parent_name, depth[i]);
            for ev in &s.events {
                let name = format!("{}/{}", s.name, ev.name);
                self.note(&name, TracepointKind::Annotation, None, Some(s.name.to_string()), depth[i] + 1);
            }
            for kv in &s.attributes.0 {
                let k = self.keys.entry((s.name.to_string(), kv.key.to_string())).or_insert(KeyAcc {
                    numeric: true,
                    min: f64::INFINITY,
                    max: f64::NEG_INFINITY,
                    count: 0,
                });
                k.count += 1;
                match &kv.value {
                    Value::I64(v) => k.widen(*v as f64),
                    Value::F64(v) if v.is_finite() => k.widen(*v),
                    _ => k.numeric = false,
                }
            }
        }
        for (p, mut kids) in children {
            kids.sort_by_key(|&k| spans[k].start_ns);
            let mut overlapping = BTreeSet::new();
            let mut latest_end: Option<(u64, usize)> = None;
            for &k in &kids {
                if let Some((end, prev)) = latest_end
                    && spans[k].start_ns < end
                {
                    overlapping.insert(spans[prev].name.to_string());
                    overlapping.insert(spans[k].name.to_string());
                }
                if latest_end.is_none_or(|(e, _)| spans[k].end_ns > e) {
                    latest_end = Some((spans[k].end_ns, k));
                }
            }
            if !overlapping.is_empty() {
                let c = self.concurrency.entry(spans[p].name.to_string()).or_default();
                c.0.extend(overlapping);
                c.1 += 1;
            }
        }
        Ok(())
    }

    fn note(
        &mut self,
        name: &str,
        kind: TracepointKind,
        span_kind: Option<SpanKind>,
        parent: Option<String>,
        depth: u32,
    ) {
        let a = self.tracepoints.entry(name.to_owned()).or_insert(Acc {
            kind,
            span_kind,
            parents: BTreeMap::new(),
            depth,
            count: 0,
        });
        a.count += 1;
        a.depth = a.depth.min(depth);
        if let Some(p) = parent {
            *a.parents.entry(p).or_default() += 1;
        }
    }

    /// Traces added so far.
    pub fn traces(&self) -> usize {
        self.traces
    }

    /// The search space learned (validated; an error when no trace was added).
    pub fn finish(self) -> Result<SearchSpace, Error> {
        if self.traces == 0 {
            return Err(Error::NoTraces);
        }
        let mut always_on: Vec<String> = Vec::new();
        let mut tracepoints = Vec::with_capacity(self.tracepoints.len());
        for (name, a) in self.tracepoints {
            let parent =
                a.parents.iter().max_by(|x, y| x.1.cmp(y.1).then(y.0.cmp(x.0))).map(|(p, _)| p.clone());
            let rpc = matches!(a.span_kind, Some(SpanKind::Server | SpanKind::Client));
            if (a.kind == TracepointKind::Span && parent.is_none()) || rpc {
                always_on.push(name.clone());
            }
            tracepoints.push(Tracepoint {
                name,
                kind: a.kind,
                span_kind: a.span_kind.map(span_kind_name),
                parent,
                depth: a.depth,
                count: a.count,
            });
        }
        let skeleton: Vec<String> =
            self.concurrency.keys().filter(|s| !always_on.contains(s)).cloned().collect();
        let mut paths: Vec<PotentialPath> = self
            .paths
            .into_iter()
            .map(|((request_type, records), frequency)| PotentialPath { request_type, frequency, records })
            .collect();
        paths.sort_by(|a, b| {
            a.request_type
                .cmp(&b.request_type)
                .then(b.frequency.cmp(&a.frequency))
                .then(a.records.cmp(&b.records))
        });
        let mut kept: BTreeMap<String, usize> = BTreeMap::new();
        paths.retain(|p| {
            let n = kept.entry(p.request_type.clone()).or_default();
            *n += 1;
            *n <= MAX_PATHS
        });
        let mut s = SearchSpace {
            always_on,
            skeleton,
            request_types: self
                .request_types
                .into_iter()
                .map(|(name, traces)| RequestType { name, traces })
                .collect(),
            keys: self
                .keys
                .into_iter()
                .map(|((tracepoint, key), k)| Key {
                    tracepoint,
                    key,
                    numeric: k.numeric,
                    min: (k.numeric && k.count > 0).then_some(k.min),
                    max: (k.numeric && k.count > 0).then_some(k.max),
                    bins: Vec::new(),
                })
                .collect(),
            concurrency: self
                .concurrency
                .into_iter()
                .map(|(span, (children, count))| Concurrency {
                    span,
                    children: children.into_iter().collect(),
                    count,
                })
                .collect(),
            tracepoints,
            paths,
            index: HashMap::new(),
        };
        s.validate("<learned>")?;
        Ok(s)
    }
}

impl KeyAcc {
    fn widen(&mut self, v: f64) {
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }
}

fn span_kind_name(k: SpanKind) -> String {
    match k {
        SpanKind::Server => "server",
        SpanKind::Client => "client",
        SpanKind::Internal => "internal",
        SpanKind::Producer => "producer",
        SpanKind::Consumer => "consumer",
        _ => "unspecified",
    }
    .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_model::{SpanEvent, SpanId};

    fn span(trace: u128, id: u64, parent: u64, name: &str, start: u64, end: u64, kind: SpanKind) -> Span {
        Span { kind, ..crate::test_support::span(trace, id, parent, name, start, end) }
    }

    fn trace(t: u128, b_end: u64) -> Vec<Span> {
        let mut v = vec![
            span(t, 1, 0, "get", 0, 100, SpanKind::Server),
            span(t, 2, 1, "rpc", 5, 60, SpanKind::Client),
            span(t, 3, 2, "a", 10, 30, SpanKind::Internal),
            span(t, 4, 2, "b", 10, b_end, SpanKind::Internal),
        ];
        v[0].events.push(SpanEvent { time_ns: 80, name: "done".into(), ..SpanEvent::default() });
        v
    }

    #[test]
    fn learns_and_round_trips() {
        let mut l = Learner::default();
        for (i, b_end) in [50, 50, 20].into_iter().enumerate() {
            l.add(&trace(i as u128 + 1, b_end)).unwrap();
        }
        let s = l.finish().unwrap();
        assert_eq!(s.always_on, ["get", "rpc"]);
        assert_eq!(s.skeleton, Vec::<String>::new(), "the fan-out is joined at rpc, which is always on");
        assert_eq!(s.concurrency[0].span, "rpc");
        assert_eq!(s.concurrency[0].children, ["a", "b"]);
        assert_eq!(s.tracepoint("b").map(|t| (t.depth, t.parent.as_deref())), Some((2, Some("rpc"))));
        assert_eq!(s.tracepoint("get/done").map(|t| t.kind), Some(TracepointKind::Annotation));
        // Two potential paths: through b (twice) and through a (once), most frequent first.
        assert_eq!(s.paths.len(), 2);
        assert_eq!(s.paths[0].frequency, 2);
        assert!(s.paths[0].records.contains(&"b:exit".to_owned()));
        assert_eq!(s.ancestors("b"), ["rpc", "get"]);
        // A group sees the always-on records and some others.
        let seen = |p: &PotentialPath, extra: &str| -> Vec<String> {
            let on = |r: &String| matches_any(&s.always_on, unit_of(r)) || r == extra;
            p.records.iter().filter(|r| on(r)).cloned().collect()
        };
        let via_b = seen(&s.paths[0], "b:exit");
        let (p, pos) = s.match_path("get", &via_b.iter().map(String::as_str).collect::<Vec<_>>()).unwrap();
        assert_eq!(p.frequency, 2);
        assert_eq!(pos.len(), via_b.len());
        let via_a = seen(&s.paths[1], "a:exit");
        let (p, _) = s.match_path("get", &via_a.iter().map(String::as_str).collect::<Vec<_>>()).unwrap();
        assert_eq!(p.frequency, 1);
        assert!(s.match_path("get", &["b:exit", "get:entry"]).is_none());
        // Without the always-on rpc records it is not these paths.
        assert!(s.match_path("get", &["get:entry", "b:exit", "get:exit"]).is_none());
        let text = s.to_toml();
        let back = SearchSpace::parse(&text, "s.toml").unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn bad_files_name_the_item() {
        let mut l = Learner::default();
        l.add(&trace(1, 50)).unwrap();
        let s = l.finish().unwrap();
        let err = |edit: &dyn Fn(&mut SearchSpace)| {
            let mut s = s.clone();
            edit(&mut s);
            SearchSpace::parse(&s.to_toml(), "s.toml").unwrap_err().to_string()
        };
        assert_eq!(
            err(&|s| s.paths[0].records[1] = "nope:entry".into()),
            "search space s.toml: paths[0].records[1] \"nope:entry\": unknown tracepoint (not in [[tracepoints]])"
        );
        assert!(err(&|s| s.always_on.push("ghost".into())).contains("always_on[2] \"ghost\""));
        assert!(
            err(&|s| s.keys.push(Key {
                tracepoint: "get".into(),
                key: "q".into(),
                numeric: true,
                min: None,
                max: None,
                bins: vec![3.0, 1.0]
            }))
            .contains("keys[0].bins (key \"q\"): bins of key \"q\": edges are not strictly increasing")
        );
        assert!(err(&|s| s.skeleton.push("x".into())).contains("skeleton[0] \"x\""));
        let e = SearchSpace::parse("always_on = 3", "f.toml").unwrap_err();
        assert!(e.to_string().starts_with("search space f.toml: byte"), "{e}");
        // A trace without a root is refused, naming it.
        let mut l = Learner::default();
        let mut t = trace(9, 50);
        t[0].parent_span_id = Some(SpanId::from_u64(4));
        let e = l.add(&t).unwrap_err().to_string();
        assert!(e.contains("00000000000000000000000000000009") && e.contains("no root"), "{e}");
        let mut t = trace(8, 50);
        t[1].parent_span_id = Some(SpanId::from_u64(3));
        let e = l.add(&t).unwrap_err().to_string();
        assert!(e.contains("00000000000000000000000000000008") && e.contains("cycle"), "{e}");
        assert_eq!(Learner::default().finish().unwrap_err().to_string(), "no traces to learn from");
    }
}
