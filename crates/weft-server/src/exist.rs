//! EXIST's cluster level: the repetition-aware coverage optimizer, the anomaly rules that
//! trigger captures, and the accuracy of (merged) function-occurrence profiles.
//!
//! * [`plan`] — pure and deterministic given its inputs and seed. The **temporal decider**
//!   ([`period_ms`]) maps a weighted sum of a service's priority, binary size and past
//!   instability (how much its function profile changed between its last two captures) onto
//!   the period bounds, capped by the measured reference overhead: a capture may cost at most
//!   `overhead_budget` of the service's time over a round, so the period is at most
//!   `overhead_budget × round / reference_overhead`. The **spatial sampler** picks replicas:
//!   all of them for an anomaly; for profiling a share growing with the priority, spread over
//!   the nodes (one per node before a second on any), at least one (so singletons are
//!   always covered).
//! * [`Profile`] — calls per function; replicas' profiles merge by summing counts, so they fill
//!   each other's gaps. [`Profile::accuracy`] is EXIST's measure for long runs:
//!   `(maxerror − error) / maxerror` where `error` is the sum over functions of the absolute
//!   differences of occurrence shares against an exhaustive reference and `maxerror` = 2 (two
//!   profiles with no function in common).
//! * [`AnomalyRule`] — `service=S p99>50ms window=10s [cooldown=60s] [functions=a,b]`: the
//!   collector keeps a bounded latency sketch (`weft_probe::agg`'s) of S's server spans per
//!   window; a window whose quantile is over the threshold fires once per cooldown.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde::Serialize;

/// The largest [`Profile::error`]: two profiles with no function in common.
pub const MAX_ERROR: f64 = 2.0;

/// One replica of a service: a process an agent may capture.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Replica {
    /// The agent that reports it.
    pub agent: String,
    /// Its process id on that node.
    pub pid: u32,
    /// Size of its executable.
    pub binary_bytes: u64,
}

/// What the optimizer knows of a service.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServiceInput {
    /// The service.
    pub service: String,
    /// Its replicas.
    pub replicas: Vec<Replica>,
    /// In [0, 1] (configuration; 0.5 when not configured).
    pub priority: f64,
    /// How much the function profile changed between the last two captures, in [0, 1]
    /// ([`Profile::change`]); `None` before two captures (counted as 1: unknown is unstable).
    pub instability: Option<f64>,
}

/// The optimizer's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct OptimizerConfig {
    /// Shortest period.
    pub min_period_ms: u64,
    /// Longest period.
    pub max_period_ms: u64,
    /// Weights of priority, binary size and instability in the temporal decider.
    pub weights: [f64; 3],
    /// Measured slowdown of a target while it is traced (2.8 = 280 % slower; the software
    /// backend's figure on the test machine, docs/captures.md).
    pub reference_overhead: f64,
    /// Mean slowdown allowed over a round (0.01 = 1 %).
    pub overhead_budget: f64,
    /// Time between profiling rounds.
    pub round: Duration,
    /// Share of a service's replicas a profiling round traces at priority 1 (half of it at
    /// priority 0); at least one replica.
    pub sample: f64,
}

impl Default for OptimizerConfig {
    fn default() -> Self {
        OptimizerConfig {
            min_period_ms: 100,
            max_period_ms: 2000,
            weights: [0.4, 0.2, 0.4],
            reference_overhead: 2.8,
            overhead_budget: 0.01,
            round: Duration::from_secs(60),
            sample: 0.5,
        }
    }
}

impl OptimizerConfig {
    /// The longest period the overhead budget allows, in ms.
    pub fn overhead_cap_ms(&self) -> f64 {
        if self.reference_overhead <= 0.0 || !self.reference_overhead.is_finite() {
            return f64::INFINITY;
        }
        self.overhead_budget.max(0.0) * self.round.as_millis() as f64 / self.reference_overhead
    }
}

/// Why a round is planned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    /// A profiling round over every service.
    Profiling,
    /// An anomaly of one service: all its replicas.
    Anomaly(String),
}

/// One service's captures in a round.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Planned {
    /// The service.
    pub service: String,
    /// The period of each capture.
    pub period_ms: u64,
    /// Its replicas.
    pub replicas: Vec<Replica>,
}

/// A service left out of a round, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// The service.
    pub service: String,
    /// Why.
    pub why: String,
}

/// A round.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Plan {
    /// Services captured.
    pub captures: Vec<Planned>,
    /// Services left out.
    pub skipped: Vec<Skipped>,
}

/// Binary size as a score in [0, 1]: log2 of MiB over 8 (256 MiB and more = 1).
fn size_score(bytes: u64) -> f64 {
    ((1.0 + bytes as f64 / (1u64 << 20) as f64).log2() / 8.0).clamp(0.0, 1.0)
}

fn unit(v: f64) -> f64 {
    if v.is_nan() { 0.0 } else { v.clamp(0.0, 1.0) }
}

/// The temporal decider: the period of a service's captures, or why it gets none (the
/// overhead cap is below the shortest period).
pub fn period_ms(s: &ServiceInput, cfg: &OptimizerConfig) -> Result<u64, String> {
    let (lo, hi) = (cfg.min_period_ms.min(cfg.max_period_ms), cfg.max_period_ms.max(cfg.min_period_ms));
    let cap = cfg.overhead_cap_ms();
    if cap < lo as f64 {
        return Err(format!(
            "the overhead cap ({cap:.0} ms = {:.2} % of a {} s round at {:.2}x reference overhead) is below the shortest period ({lo} ms)",
            cfg.overhead_budget * 100.0,
            cfg.round.as_secs(),
            cfg.reference_overhead
        ));
    }
    let size = s.replicas.iter().map(|r| r.binary_bytes).max().unwrap_or(0);
    let parts = [unit(s.priority), size_score(size), unit(s.instability.unwrap_or(1.0))];
    let w: Vec<f64> = cfg.weights.iter().map(|w| if w.is_finite() { w.max(0.0) } else { 0.0 }).collect();
    let total: f64 = w.iter().sum();
    let score = if total > 0.0 { w.iter().zip(parts).map(|(w, p)| w * p).sum::<f64>() / total } else { 0.0 };
    let p = lo as f64 + unit(score) * (hi - lo) as f64;
    Ok((p.min(cap).floor() as u64).clamp(lo, hi))
}

/// splitmix64: the sampler's deterministic generator.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The spatial sampler for profiling: `k` replicas spread over the nodes (nodes in a seeded
/// order; one replica per node per pass), sorted.
fn sample(replicas: &[Replica], k: usize, seed: u64) -> Vec<Replica> {
    let mut by_node: BTreeMap<&str, Vec<&Replica>> = BTreeMap::new();
    for r in replicas {
        by_node.entry(&r.agent).or_default().push(r);
    }
    let mut rng = seed;
    let mut nodes: Vec<Vec<&Replica>> = by_node.into_values().collect();
    for i in (1..nodes.len()).rev() {
        nodes.swap(i, (next(&mut rng) % (i as u64 + 1)) as usize);
    }
    for n in &mut nodes {
        n.sort();
        let shift = (next(&mut rng) % n.len().max(1) as u64) as usize;
        n.rotate_left(shift);
    }
    let mut out = Vec::with_capacity(k);
    'passes: for pass in 0.. {
        let mut any = false;
        for n in &nodes {
            if let Some(r) = n.get(pass) {
                any = true;
                out.push((*r).clone());
                if out.len() == k {
                    break 'passes;
                }
            }
        }
        if !any {
            break;
        }
    }
    out.sort();
    out
}

/// A round: for each service (sorted by name; for an anomaly only its service) the period and
/// the replicas to trace. Deterministic for the same inputs and seed.
pub fn plan(services: &[ServiceInput], cfg: &OptimizerConfig, trigger: &Trigger, seed: u64) -> Plan {
    let mut sorted: Vec<&ServiceInput> = services.iter().collect();
    sorted.sort_by(|a, b| a.service.cmp(&b.service));
    let mut out = Plan::default();
    let mut rng = seed;
    for s in sorted {
        let salt = next(&mut rng);
        if let Trigger::Anomaly(name) = trigger
            && *name != s.service
        {
            continue;
        }
        let skip = |why: String| Skipped { service: s.service.clone(), why };
        let uniq: BTreeSet<&Replica> = s.replicas.iter().collect();
        let replicas: Vec<Replica> = uniq.into_iter().cloned().collect();
        if replicas.is_empty() {
            out.skipped.push(skip("no agent reports a replica".into()));
            continue;
        }
        let period_ms = match period_ms(s, cfg) {
            Ok(p) => p,
            Err(why) => {
                out.skipped.push(skip(why));
                continue;
            }
        };
        let replicas = match trigger {
            Trigger::Anomaly(_) => replicas,
            Trigger::Profiling => {
                let share = unit(cfg.sample) * (0.5 + 0.5 * unit(s.priority));
                let k = ((replicas.len() as f64 * share).ceil() as usize).clamp(1, replicas.len());
                sample(&replicas, k, salt)
            }
        };
        out.captures.push(Planned { service: s.service.clone(), period_ms, replicas });
    }
    if let Trigger::Anomaly(name) = trigger
        && out.captures.is_empty()
        && out.skipped.is_empty()
    {
        out.skipped.push(Skipped { service: name.clone(), why: "no agent reports a replica".into() });
    }
    out
}

/// A function-occurrence profile: calls per function.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Profile(pub BTreeMap<String, u64>);

impl Profile {
    /// From (function, calls) pairs (repeated names add up).
    pub fn from_counts<'a>(counts: impl IntoIterator<Item = &'a (String, u64)>) -> Profile {
        let mut p = Profile::default();
        for (f, n) in counts {
            let e = p.0.entry(f.clone()).or_default();
            *e = e.saturating_add(*n);
        }
        p
    }

    /// Adds another replica's (or capture's) calls.
    pub fn merge(&mut self, other: &Profile) {
        for (f, n) in &other.0 {
            let e = self.0.entry(f.clone()).or_default();
            *e = e.saturating_add(*n);
        }
    }

    /// Calls in all.
    pub fn total(&self) -> u64 {
        self.0.values().fold(0u64, |a, n| a.saturating_add(*n))
    }

    /// The share of `function` among all calls (0 for an empty profile).
    pub fn share(&self, function: &str) -> f64 {
        let t = self.total();
        if t == 0 { 0.0 } else { self.0.get(function).copied().unwrap_or(0) as f64 / t as f64 }
    }

    /// EXIST's error: the sum over functions of |share here − share in `reference`|, in
    /// [0, [`MAX_ERROR`]] (an empty profile is [`MAX_ERROR`] away from any other).
    pub fn error(&self, reference: &Profile) -> f64 {
        if self.total() == 0 || reference.total() == 0 {
            return if self.total() == reference.total() { 0.0 } else { MAX_ERROR };
        }
        let names: BTreeSet<&String> = self.0.keys().chain(reference.0.keys()).collect();
        names.into_iter().map(|f| (self.share(f) - reference.share(f)).abs()).sum::<f64>().min(MAX_ERROR)
    }

    /// EXIST's accuracy against an exhaustive reference: (maxerror − error) / maxerror.
    pub fn accuracy(&self, reference: &Profile) -> f64 {
        (MAX_ERROR - self.error(reference)) / MAX_ERROR
    }

    /// How much the profile changed from `earlier`, in [0, 1] (half the error).
    pub fn change(&self, earlier: &Profile) -> f64 {
        self.error(earlier) / MAX_ERROR
    }
}

/// An anomaly rule over the spans the collector ingests.
#[derive(Debug, Clone, PartialEq)]
pub struct AnomalyRule {
    /// The service.
    pub service: String,
    /// In (0, 1]: 0.99 for `p99`.
    pub quantile: f64,
    /// The window fires above it.
    pub threshold: Duration,
    /// Length of a window.
    pub window: Duration,
    /// Least time between two firings.
    pub cooldown: Duration,
    /// Globs of the functions captured (empty = every function of the module).
    pub functions: Vec<String>,
    /// The text the rule was given as.
    pub text: String,
}

fn parse_ms(key: &str, v: &str) -> Result<Duration, String> {
    let (num, mul) = if let Some(n) = v.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1000.0)
    } else {
        return Err(format!("{key}={v}: give a duration in ms or s (50ms, 10s)"));
    };
    let n: f64 = num.parse().map_err(|_| format!("{key}={v}: not a number"))?;
    if !n.is_finite() || n <= 0.0 || n * mul > 86_400_000.0 {
        return Err(format!("{key}={v}: must be above 0 and at most a day"));
    }
    Ok(Duration::from_micros((n * mul * 1000.0) as u64))
}

impl AnomalyRule {
    /// Parses `service=S pNN>DURATION window=DURATION [cooldown=DURATION] [functions=a,b]`.
    pub fn parse(text: &str) -> Result<AnomalyRule, String> {
        let (mut service, mut cond, mut window, mut cooldown, mut functions) =
            (None, None, None, None, vec![]);
        for tok in text.split_whitespace() {
            if let Some(q) = tok.strip_prefix('p')
                && let Some((q, thr)) = q.split_once('>')
            {
                let q: f64 = q.parse().map_err(|_| format!("{tok}: expected e.g. p99>50ms"))?;
                if !(q > 0.0 && q <= 100.0) {
                    return Err(format!("{tok}: the quantile must be in (0, 100]"));
                }
                cond = Some((q / 100.0, parse_ms("threshold", thr)?));
                continue;
            }
            match tok.split_once('=') {
                Some(("service", v)) if !v.is_empty() && v.len() <= 256 => service = Some(v.to_owned()),
                Some(("window", v)) => window = Some(parse_ms("window", v)?),
                Some(("cooldown", v)) => cooldown = Some(parse_ms("cooldown", v)?),
                Some(("functions", v)) => {
                    functions = v.split(',').filter(|f| !f.is_empty()).map(str::to_owned).collect()
                }
                _ => {
                    return Err(format!(
                        "{tok:?}: expected service=S, pNN>DURATION, window=, cooldown= or functions="
                    ));
                }
            }
        }
        let service = service.ok_or("missing service=S")?;
        let (quantile, threshold) = cond.ok_or("missing a condition such as p99>50ms")?;
        let window = window.unwrap_or(Duration::from_secs(10));
        Ok(AnomalyRule {
            service,
            quantile,
            threshold,
            window,
            cooldown: cooldown.unwrap_or(Duration::from_secs(60)).max(window),
            functions,
            text: text.split_whitespace().collect::<Vec<_>>().join(" "),
        })
    }
}

/// A rule's live state: the current window's latency sketch and the last firing.
#[derive(Debug, Clone)]
pub struct RuleState {
    /// The rule.
    pub rule: AnomalyRule,
    window_start: Option<Instant>,
    sketch: BTreeMap<i32, u64>,
    last_fired: Option<Instant>,
    /// Times the rule fired.
    pub fired: u64,
}

/// What a firing rule measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Firing {
    /// The service.
    pub service: String,
    /// The window's quantile.
    pub value: Duration,
    /// Spans in the window.
    pub samples: u64,
}

/// Spans a window needs before its quantile counts.
pub const MIN_SAMPLES: u64 = 5;

impl RuleState {
    /// A rule with no window yet.
    pub fn new(rule: AnomalyRule) -> RuleState {
        RuleState { rule, window_start: None, sketch: BTreeMap::new(), last_fired: None, fired: 0 }
    }

    /// Adds one latency seen at `now`; evaluates the window once it is over (the sketch holds
    /// at most one bucket per distinct f64 exponent and 4 mantissa bits: bounded).
    pub fn observe(&mut self, latency: Duration, now: Instant) -> Option<Firing> {
        let fired = match self.window_start {
            Some(s) if now.duration_since(s) >= self.rule.window => {
                let f = self.evaluate(now);
                self.sketch.clear();
                self.window_start = Some(now);
                f
            }
            Some(_) => None,
            None => {
                self.window_start = Some(now);
                None
            }
        };
        *self.sketch.entry(weft_probe::agg::sketch_bucket(latency.as_secs_f64() * 1e3)).or_default() += 1;
        fired
    }

    fn evaluate(&mut self, now: Instant) -> Option<Firing> {
        let samples: u64 = self.sketch.values().sum();
        if samples < MIN_SAMPLES {
            return None;
        }
        let ms = weft_probe::agg::quantile(&self.sketch, self.rule.quantile)?;
        let value = Duration::from_micros((ms * 1000.0).max(0.0) as u64);
        if value <= self.rule.threshold
            || self.last_fired.is_some_and(|t| now.duration_since(t) < self.rule.cooldown)
        {
            return None;
        }
        self.last_fired = Some(now);
        self.fired += 1;
        Some(Firing { service: self.rule.service.clone(), value, samples })
    }
}
