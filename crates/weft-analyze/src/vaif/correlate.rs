//! Key/value correlation with response time (VAIF principle 3), per group.
//!
//! For every member of a group, the keys exposed on its critical path are collected: the
//! attributes of each span with a record on the path (the variable is named by the span name)
//! and the attributes of each annotation on it (named `span-name/event-name`); a variable met
//! twice on one path keeps its first value. Each variable is then set against the members'
//! response times, over the members that have it:
//!
//! * **numeric** (every value an integer or a finite float): Pearson's r and Spearman's ρ
//!   (Pearson's r of the ranks, ties ranked by their average), each with the two-sided
//!   p-value of `t = r √((n−2)/(1−r²))` under Student's t with `n − 2` degrees of freedom (as
//!   SciPy's `pearsonr` and `spearmanr` compute them); when [`Config::bins`] has bin edges for
//!   the key, also the mean response time per bin and the binning's effect (below);
//! * **categorical** (anything else; numbers mixed with text count as text): the mean
//!   response time per value and the effect of the value on response time — the correlation
//!   ratio η² = between-value sum of squares / total sum of squares, with the p-value of the
//!   one-way analysis of variance F test.
//!
//! Results come strongest first: by the largest of |r|, |ρ| and η (= √η²).

use std::collections::HashMap;

use weft_model::{Span, Str, Value};

use super::dist::{f_sf, t_two_sided_p};
use super::group::Group;
use super::hb::{PathError, PathFinder, PathRecord, Tracepoints};
use super::{Config, ConfigError};

/// A correlation coefficient with its two-sided p-value.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Correlation {
    /// The coefficient, in [−1, 1].
    pub r: f64,
    /// Two-sided p-value of "no correlation".
    pub p_value: f64,
}

/// Requests sharing one value (categorical key) or one bin (numeric key).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Level {
    /// The value, or the bin as `< a`, `[a, b)`, `>= b`.
    pub label: String,
    /// Members in it.
    pub count: usize,
    /// Their mean response time, ns.
    pub mean_response_ns: f64,
}

/// How much of the response-time variance the levels explain.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Effect {
    /// Correlation ratio η², in [0, 1].
    pub eta_squared: f64,
    /// p-value of the one-way ANOVA F test; None with one level or no more members than
    /// levels.
    pub p_value: Option<f64>,
}

/// One key's relation to response time within a group.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct KeyCorrelation {
    /// Where the key is exposed: a span name, or `span-name/event-name`.
    pub tracepoint: String,
    /// The attribute key.
    pub key: String,
    /// Members whose path has the key.
    pub traces: usize,
    /// Whether every value is a number.
    pub numeric: bool,
    /// Pearson's r (numeric keys with at least 3 members and variation on both sides).
    pub pearson: Option<Correlation>,
    /// Spearman's ρ (same conditions).
    pub spearman: Option<Correlation>,
    /// Per value (categorical, by mean response time, slowest first) or per non-empty bin
    /// (numeric keys with bins, in bin order); empty otherwise.
    pub levels: Vec<Level>,
    /// The levels' effect; None without levels or when response times do not vary.
    pub effect: Option<Effect>,
}

impl KeyCorrelation {
    /// The ranking strength: the largest of |r|, |ρ| and η.
    pub fn strength(&self) -> f64 {
        [
            self.pearson.map(|c| c.r.abs()),
            self.spearman.map(|c| c.r.abs()),
            self.effect.map(|e| e.eta_squared.sqrt()),
        ]
        .into_iter()
        .flatten()
        .fold(0.0, f64::max)
    }
}

/// Why a group's keys could not be correlated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CorrelateError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A member's position is not in the traces given.
    #[error("member trace #{index} is not among the {len} traces given")]
    MissingTrace {
        /// The member's position.
        index: usize,
        /// How many traces were given.
        len: usize,
    },
    /// A member trace has no critical path (the traces are not the ones grouped).
    #[error(transparent)]
    Path(#[from] PathError),
}

/// Correlates every key on the critical paths of `group`'s members with their response
/// times; `traces` are the traces the group was formed from (members index into them).
pub fn correlate<T: AsRef<[Span]>>(
    group: &Group,
    traces: &[T],
    config: &Config,
) -> Result<Vec<KeyCorrelation>, CorrelateError> {
    config.validate()?;
    let mut finder = PathFinder::default();
    let mut names = Tracepoints::default();
    let mut records: Vec<PathRecord> = Vec::new();
    let mut index: HashMap<(Str, Option<Str>, Str), usize> = HashMap::new();
    let mut vars: Vec<Variable> = Vec::new();
    let mut span_seen: Vec<usize> = Vec::new();
    for (m, &t) in group.members.iter().enumerate() {
        let spans =
            traces.get(t).ok_or(CorrelateError::MissingTrace { index: t, len: traces.len() })?.as_ref();
        finder.find(spans, t, &mut names, &mut records)?;
        let y = group.response_ns.get(m).copied().unwrap_or(0) as f64;
        span_seen.clear();
        span_seen.resize(spans.len(), usize::MAX);
        for r in &records {
            let span = &spans[r.span as usize];
            let (event, attributes) = match r.event.and_then(|e| span.events.get(e as usize)) {
                Some(ev) => (Some(ev.name.clone()), &ev.attributes),
                None if span_seen[r.span as usize] != m => {
                    span_seen[r.span as usize] = m;
                    (None, &span.attributes)
                }
                None => continue,
            };
            for kv in attributes {
                let id =
                    *index.entry((span.name.clone(), event.clone(), kv.key.clone())).or_insert_with(|| {
                        vars.push(Variable::default());
                        vars.len() - 1
                    });
                let v = &mut vars[id];
                if v.last_member == Some(m) {
                    continue;
                }
                v.last_member = Some(m);
                v.y.push(y);
                v.values.push(match &kv.value {
                    Value::I64(i) => Observed::Number(*i as f64),
                    Value::F64(f) if f.is_finite() => Observed::Number(*f),
                    other => Observed::Text(other.to_string()),
                });
            }
        }
    }
    let mut out: Vec<KeyCorrelation> = index
        .into_iter()
        .map(|((span, event, key), id)| {
            let tracepoint = match event {
                Some(e) => format!("{span}/{e}"),
                None => span.to_string(),
            };
            let bins = config.bins.get(key.as_str()).map(Vec::as_slice);
            summarize(tracepoint, key.to_string(), &vars[id], bins)
        })
        .collect();
    out.sort_by(|a, b| {
        b.strength()
            .total_cmp(&a.strength())
            .then_with(|| (&a.tracepoint, &a.key).cmp(&(&b.tracepoint, &b.key)))
    });
    Ok(out)
}

#[derive(Debug, Default)]
struct Variable {
    last_member: Option<usize>,
    values: Vec<Observed>,
    y: Vec<f64>,
}

#[derive(Debug)]
enum Observed {
    Number(f64),
    Text(String),
}

fn summarize(tracepoint: String, key: String, var: &Variable, bins: Option<&[f64]>) -> KeyCorrelation {
    let numbers: Option<Vec<f64>> = var
        .values
        .iter()
        .map(|v| match v {
            Observed::Number(x) => Some(*x),
            Observed::Text(_) => None,
        })
        .collect();
    let mut out = KeyCorrelation {
        tracepoint,
        key,
        traces: var.y.len(),
        numeric: numbers.is_some(),
        pearson: None,
        spearman: None,
        levels: Vec::new(),
        effect: None,
    };
    match numbers {
        Some(x) => {
            out.pearson = pearson(&x, &var.y);
            out.spearman = spearman(&x, &var.y);
            if let Some(edges) = bins {
                let labels: Vec<usize> = x.iter().map(|&v| edges.partition_point(|&e| e <= v)).collect();
                let (mut levels, effect) = levels(&labels, &var.y, |b| bin_label(edges, b));
                levels.sort_by_key(|(b, _)| *b);
                out.levels = levels.into_iter().map(|(_, l)| l).collect();
                out.effect = effect;
            }
        }
        None => {
            let mut ids: HashMap<String, usize> = HashMap::new();
            let mut texts: Vec<String> = Vec::new();
            let labels: Vec<usize> = var
                .values
                .iter()
                .map(|v| {
                    let text = match v {
                        Observed::Number(x) => x.to_string(),
                        Observed::Text(t) => t.clone(),
                    };
                    *ids.entry(text.clone()).or_insert_with(|| {
                        texts.push(text);
                        texts.len() - 1
                    })
                })
                .collect();
            let (mut levels, effect) = levels(&labels, &var.y, |i| texts[i].clone());
            levels.sort_by(|a, b| {
                b.1.mean_response_ns.total_cmp(&a.1.mean_response_ns).then_with(|| a.1.label.cmp(&b.1.label))
            });
            out.levels = levels.into_iter().map(|(_, l)| l).collect();
            out.effect = effect;
        }
    }
    out
}

fn bin_label(edges: &[f64], b: usize) -> String {
    match (b.checked_sub(1).and_then(|i| edges.get(i)), edges.get(b)) {
        (None, Some(hi)) => format!("< {hi}"),
        (Some(lo), Some(hi)) => format!("[{lo}, {hi})"),
        (Some(lo), None) => format!(">= {lo}"),
        (None, None) => "all".to_owned(),
    }
}

/// Levels (label id, stats) of `y` split by `labels`, and their effect.
fn levels(
    labels: &[usize],
    y: &[f64],
    name: impl Fn(usize) -> String,
) -> (Vec<(usize, Level)>, Option<Effect>) {
    let k = labels.iter().max().map_or(0, |m| m + 1);
    let mut sum = vec![0f64; k];
    let mut count = vec![0usize; k];
    for (&l, &v) in labels.iter().zip(y) {
        sum[l] += v;
        count[l] += 1;
    }
    let means: Vec<f64> =
        sum.iter().zip(&count).map(|(s, &c)| if c > 0 { s / c as f64 } else { 0.0 }).collect();
    let levels: Vec<(usize, Level)> = (0..k)
        .filter(|&l| count[l] > 0)
        .map(|l| (l, Level { label: name(l), count: count[l], mean_response_ns: means[l] }))
        .collect();
    let n = y.len();
    let grand = y.iter().sum::<f64>() / n.max(1) as f64;
    let total: f64 = y.iter().map(|v| (v - grand).powi(2)).sum();
    let within: f64 = labels.iter().zip(y).map(|(&l, v)| (v - means[l]).powi(2)).sum();
    let between: f64 = (0..k).map(|l| count[l] as f64 * (means[l] - grand).powi(2)).sum();
    let effect = (n > 0 && total > 0.0).then(|| {
        let groups = levels.len();
        let p_value = (groups >= 2 && n > groups).then(|| {
            if within <= 0.0 {
                0.0
            } else {
                let (d1, d2) = ((groups - 1) as f64, (n - groups) as f64);
                f_sf((between / d1) / (within / d2), d1, d2)
            }
        });
        Effect { eta_squared: (between / total).clamp(0.0, 1.0), p_value }
    });
    (levels, effect)
}

/// Pearson's r of `x` and `y` (paired; extra values of the longer ignored) with its two-sided
/// p-value; None with fewer than 3 pairs or when either side is constant.
pub fn pearson(x: &[f64], y: &[f64]) -> Option<Correlation> {
    let n = x.len().min(y.len());
    if n < 3 {
        return None;
    }
    let (x, y) = (&x[..n], &y[..n]);
    let mx = x.iter().sum::<f64>() / n as f64;
    let my = y.iter().sum::<f64>() / n as f64;
    let (mut sxy, mut sxx, mut syy) = (0f64, 0f64, 0f64);
    for (a, b) in x.iter().zip(y) {
        let (dx, dy) = (a - mx, b - my);
        sxy += dx * dy;
        sxx += dx * dx;
        syy += dy * dy;
    }
    if sxx <= 0.0 || syy <= 0.0 || sxx.is_nan() || syy.is_nan() {
        return None;
    }
    // √(sxx·syy) rather than √sxx·√syy: identical sides then give exactly 1.
    let r = (sxy / (sxx * syy).sqrt()).clamp(-1.0, 1.0);
    let df = (n - 2) as f64;
    let p_value = if r.abs() == 1.0 { 0.0 } else { t_two_sided_p(r * (df / (1.0 - r * r)).sqrt(), df) };
    Some(Correlation { r, p_value })
}

/// Spearman's ρ: Pearson's r of the ranks ([`ranks`]), with its p-value from the same t
/// approximation.
pub fn spearman(x: &[f64], y: &[f64]) -> Option<Correlation> {
    let n = x.len().min(y.len());
    pearson(&ranks(&x[..n]), &ranks(&y[..n]))
}

/// Ranks from 1, ties given the average of the ranks they span (NaN sorts last).
pub fn ranks(v: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..v.len()).collect();
    order.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
    let mut out = vec![0f64; v.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i + 1;
        while j < order.len() && v[order[j]].total_cmp(&v[order[i]]).is_eq() {
            j += 1;
        }
        let rank = (i + j + 1) as f64 / 2.0; // average of ranks i+1 ..= j
        for &k in &order[i..j] {
            out[k] = rank;
        }
        i = j;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vaif::group::group;
    use crate::vaif::hb::tests::span;
    use weft_model::{SpanEvent, TraceId};

    fn close(got: f64, want: f64, rel: f64) {
        assert!((got - want).abs() <= rel * want.abs(), "got {got:e}, want {want:e}");
    }

    /// Reference values from SciPy 1.17.1, `scipy.stats.pearsonr(x, y)` and
    /// `scipy.stats.spearmanr(x, y)`.
    #[test]
    fn matches_scipy() {
        let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0];
        let y = [2.0, 1.0, 4.0, 3.0, 7.0, 8.0, 6.0, 10.0, 9.0, 12.0];
        let p = pearson(&x, &y).unwrap();
        close(p.r, 0.9362468821760161, 1e-12);
        close(p.p_value, 6.689056712905332e-05, 1e-8);
        let s = spearman(&x, &y).unwrap();
        close(s.r, 0.9272727272727272, 1e-12);
        close(s.p_value, 0.00011203450639397586, 1e-8);
        // With ties.
        let x = [1.0, 2.0, 2.0, 3.0, 4.0, 4.0, 4.0, 5.0];
        let y = [10.0, 12.0, 11.0, 15.0, 14.0, 18.0, 13.0, 20.0];
        let p = pearson(&x, &y).unwrap();
        close(p.r, 0.8533545068687695, 1e-12);
        close(p.p_value, 0.007042309662485223, 1e-8);
        let s = spearman(&x, &y).unwrap();
        close(s.r, 0.8715757936489196, 1e-12);
        close(s.p_value, 0.004798257341175604, 1e-8);
        assert_eq!(ranks(&[3.0, 1.0, 3.0, 2.0, 3.0]), [4.0, 1.0, 4.0, 2.0, 4.0]);
        assert_eq!(pearson(&[1.0, 1.0, 1.0], &[1.0, 2.0, 3.0]), None);
        assert_eq!(pearson(&[1.0, 2.0], &[1.0, 2.0]), None);
    }

    /// Trace `i` of a "create" request whose handler waits `wait(i)` ns; the handler span has
    /// `queue = i` (numeric), `zone` (categorical) and an annotation with `retry`.
    fn trace(i: u64, wait: u64, zone: &str) -> Vec<Span> {
        let mut root = span(1, 0, "create", 0, 100 + wait);
        let mut h = span(2, 1, "handler", 10, 90 + wait);
        h.attributes.push("queue", i as i64);
        h.attributes.push("zone", zone);
        h.events.push(SpanEvent { time_ns: 20, name: "locked".into(), ..SpanEvent::default() });
        h.events[0].attributes.push("retry", i.is_multiple_of(2).to_string());
        root.trace_id = TraceId::from_u128(i.into());
        h.trace_id = root.trace_id;
        vec![root, h]
    }

    #[test]
    fn monotone_key_correlates_perfectly() {
        // Response time grows with queue², so Spearman's ρ is exactly 1; zone "b" is slow.
        let traces: Vec<Vec<Span>> = (0..12u64)
            .map(|i| {
                trace(
                    i,
                    i * i * 10 + if i.is_multiple_of(3) { 0 } else { 1 },
                    ["a", "b", "c"][(i % 3) as usize],
                )
            })
            .collect();
        let g = group(&traces);
        assert_eq!(g.groups.len(), 1);
        let cfg = Config { bins: [("queue".to_owned(), vec![4.0, 8.0])].into(), ..Config::default() };
        let out = correlate(&g.groups[0], &traces, &cfg).unwrap();
        let find = |tp: &str, key: &str| out.iter().find(|k| k.tracepoint == tp && k.key == key).unwrap();
        let q = find("handler", "queue");
        assert!(q.numeric);
        assert_eq!(q.traces, 12);
        let s = q.spearman.unwrap();
        assert_eq!(s.r, 1.0);
        assert!(s.p_value < 1e-6);
        let p = q.pearson.unwrap();
        assert!(p.r > 0.9 && p.r < 1.0 && p.p_value < 1e-4, "{p:?}");
        assert_eq!(
            q.levels.iter().map(|l| (l.label.as_str(), l.count)).collect::<Vec<_>>(),
            [("< 4", 4), ("[4, 8)", 4), (">= 8", 4)]
        );
        assert!(q.effect.unwrap().eta_squared > 0.5);
        assert_eq!(out[0].key, "queue", "strongest first");
        let z = find("handler", "zone");
        assert!(!z.numeric && z.pearson.is_none());
        assert_eq!(z.levels.len(), 3);
        assert!(z.effect.unwrap().eta_squared < 0.2);
        let r = find("handler/locked", "retry");
        assert_eq!(r.levels.iter().map(|l| l.count).sum::<usize>(), 12);
        assert!(out.iter().all(|k| k.tracepoint != "create"), "the root has no attributes");
    }

    #[test]
    fn categorical_effect_by_hand() {
        // Two values: a → [1, 3], b → [5, 7]; grand mean 4, SST = 9+1+1+9 = 20,
        // SSB = 2·4 + 2·4 = 16, η² = 0.8; F = (16/1)/(4/2) = 8 with (1, 2) df; F(1, d) = t²,
        // so p = t_two_sided_p(√8, 2).
        let (levels, effect) = levels(&[0, 0, 1, 1], &[1.0, 3.0, 5.0, 7.0], |l| ["a", "b"][l].to_owned());
        assert_eq!(
            levels.iter().map(|(_, l)| (l.label.as_str(), l.mean_response_ns)).collect::<Vec<_>>(),
            [("a", 2.0), ("b", 6.0)]
        );
        let e = effect.unwrap();
        close(e.eta_squared, 0.8, 1e-12);
        close(e.p_value.unwrap(), t_two_sided_p(8f64.sqrt(), 2.0), 1e-9);
    }

    #[test]
    fn bad_input_is_an_error() {
        let traces = vec![trace(1, 5, "a")];
        let g = group(&traces);
        let bad = Config { cv_threshold: f64::NAN, ..Config::default() };
        assert!(matches!(correlate(&g.groups[0], &traces, &bad), Err(CorrelateError::Config(_))));
        let none: Vec<Vec<Span>> = Vec::new();
        assert_eq!(
            correlate(&g.groups[0], &none, &Config::default()),
            Err(CorrelateError::MissingTrace { index: 0, len: 0 })
        );
        let broken = vec![vec![span(1, 5, "x", 0, 1)]];
        assert!(matches!(correlate(&g.groups[0], &broken, &Config::default()), Err(CorrelateError::Path(_))));
    }
}
