//! Per-group statistics (VAIF principles 1 and 2): mean, coefficient of variation, the
//! law-of-total-variance decomposition of the response time over the critical path's edges,
//! the edges ranked by their share, and the high-variance and consistently-slow verdicts.
//!
//! With `R = Σ eᵢ` (a group's response time is the sum of its path's edge latencies),
//! `Var(R) = Σ Var(eᵢ) + 2 Σ_{i<j} Cov(eᵢ, eⱼ)`. Edge `i`'s *share* is its variance plus its
//! covariances with all other edges, `Var(eᵢ) + Σ_{j≠i} Cov(eᵢ, eⱼ) = Cov(eᵢ, R)`; the shares
//! sum to `Var(R)`, and computing each as `Cov(eᵢ, R)` costs one pass per edge instead of one
//! per pair. Variances and covariances are sample ones (divided by `n − 1`); CV = standard
//! deviation / mean.
//!
//! Only groups with at least [`Config::min_traces`] members are analysed. A group has *high
//! variance* when its CV exceeds [`Config::cv_threshold`]; it is *consistently slow* when its
//! CV is under that threshold and its mean lies above its request type's
//! [`Config::cs_percentile`] of response times (over every grouped trace of the type) — a
//! group holding every trace of its type is never slower than the type (one outlier in a
//! steady group can lift its mean over the percentile).

use super::Config;
use super::ConfigError;
use super::group::Grouping;

/// One edge's part of the response-time variance.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EdgeShare {
    /// Mean latency, ns (what principle 2 ranks by).
    pub mean_ns: f64,
    /// `Var(eᵢ)`, ns².
    pub variance: f64,
    /// `Σ_{j≠i} Cov(eᵢ, eⱼ)`, ns².
    pub covariance_with_others: f64,
    /// `variance + covariance_with_others` = `Cov(eᵢ, R)`, ns².
    pub share: f64,
    /// `share / Var(R)`; None when `Var(R)` is 0.
    pub fraction: Option<f64>,
}

/// `Var(R) = Σ Var(eᵢ) + 2 Σ_{i<j} Cov(eᵢ, eⱼ)` for one group.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Decomposition {
    /// Mean response time, ns.
    pub mean_ns: f64,
    /// `Var(R)`, computed directly from the per-request sums, ns².
    pub variance: f64,
    /// `Σ Var(eᵢ)`, ns².
    pub edge_variance_sum: f64,
    /// `2 Σ_{i<j} Cov(eᵢ, eⱼ)`, ns².
    pub covariance_sum: f64,
    /// Per edge, in path order.
    pub edges: Vec<EdgeShare>,
}

impl Decomposition {
    /// Edge indices by share, largest first (ties: path order).
    pub fn ranked(&self) -> Vec<usize> {
        let mut r: Vec<usize> = (0..self.edges.len()).collect();
        r.sort_by(|&a, &b| self.edges[b].share.total_cmp(&self.edges[a].share).then(a.cmp(&b)));
        r
    }
}

/// Decomposes the variance of `R = Σ eᵢ` given each edge's latencies (`edge_latency_ns[i][k]` =
/// edge `i` in request `k`; requests beyond the shortest column are ignored). None with fewer
/// than two requests or no edge.
pub fn decompose(edge_latency_ns: &[Vec<i64>]) -> Option<Decomposition> {
    let n = edge_latency_ns.iter().map(Vec::len).min()?;
    if n < 2 {
        return None;
    }
    let mut r = vec![0f64; n];
    for column in edge_latency_ns {
        for (acc, &x) in r.iter_mut().zip(column) {
            *acc += x as f64;
        }
    }
    let denom = (n - 1) as f64;
    let r_mean = mean(&r);
    r.iter_mut().for_each(|x| *x -= r_mean);
    let variance = r.iter().map(|x| x * x).sum::<f64>() / denom;
    let mut edges = Vec::with_capacity(edge_latency_ns.len());
    for column in edge_latency_ns {
        let column = &column[..n];
        let m = column.iter().map(|&x| x as f64).sum::<f64>() / n as f64;
        let (mut var, mut cov) = (0f64, 0f64);
        for (&x, &rc) in column.iter().zip(&r) {
            let d = x as f64 - m;
            var += d * d;
            cov += d * rc;
        }
        let (var, share) = (var / denom, cov / denom);
        edges.push(EdgeShare {
            mean_ns: m,
            variance: var,
            covariance_with_others: share - var,
            share,
            fraction: (variance > 0.0).then(|| share / variance),
        });
    }
    let edge_variance_sum = edges.iter().map(|e| e.variance).sum();
    let covariance_sum = edges.iter().map(|e| e.covariance_with_others).sum();
    Some(Decomposition { mean_ns: r_mean, variance, edge_variance_sum, covariance_sum, edges })
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// The `p`-th percentile (0–100) of `values` by linear interpolation between the closest
/// ranks (NumPy's default), reordering `values`; None when empty.
pub fn percentile(values: &mut [f64], p: f64) -> Option<f64> {
    let last = values.len().checked_sub(1)?;
    let rank = (p.clamp(0.0, 100.0) / 100.0) * last as f64;
    let lo = (rank.floor() as usize).min(last);
    let (_, &mut low, upper) = values.select_nth_unstable_by(lo, f64::total_cmp);
    let frac = rank - lo as f64;
    match upper.iter().copied().min_by(f64::total_cmp) {
        Some(high) if frac > 0.0 => Some(low + (high - low) * frac),
        _ => Some(low),
    }
}

/// A request type's summary.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RequestType {
    /// The root span name.
    pub name: String,
    /// Grouped traces of this type.
    pub traces: usize,
    /// The [`Config::cs_percentile`] of their response times, ns.
    pub slow_threshold_ns: f64,
}

/// One analysed group.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GroupStats {
    /// Index into [`Grouping::groups`].
    pub group: usize,
    /// Its request type: index into [`Analysis::request_types`].
    pub request_type: usize,
    /// Members.
    pub count: usize,
    /// Standard deviation / mean of the response time; None when the mean is not positive.
    pub cv: Option<f64>,
    /// The variance decomposition.
    pub decomposition: Decomposition,
    /// Edge indices by share, largest first.
    pub ranked: Vec<usize>,
    /// CV above the threshold (principle 1).
    pub high_variance: bool,
    /// CV under the threshold and mean above the type's slow threshold (principle 2).
    pub consistently_slow: bool,
}

/// The statistics of a grouping.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Analysis {
    /// Every request type that has grouped traces, by name.
    pub request_types: Vec<RequestType>,
    /// The groups with enough members, by response-time variance, largest first.
    pub groups: Vec<GroupStats>,
}

/// Analyses every group of `grouping` with at least `config.min_traces` members.
pub fn analyze(grouping: &Grouping, config: &Config) -> Result<Analysis, ConfigError> {
    config.validate()?;
    let mut names: Vec<&str> = grouping.groups.iter().map(|g| g.request_type.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    let type_of: Vec<usize> =
        grouping.groups.iter().map(|g| names.binary_search(&g.request_type.as_str()).unwrap_or(0)).collect();
    for (g, &t) in grouping.groups.iter().zip(&type_of) {
        times[t].extend(g.response_ns.iter().map(|&r| r as f64));
    }
    let request_types: Vec<RequestType> = names
        .iter()
        .zip(&mut times)
        .map(|(name, v)| RequestType {
            name: (*name).to_owned(),
            traces: v.len(),
            slow_threshold_ns: percentile(v, config.cs_percentile).unwrap_or(f64::INFINITY),
        })
        .collect();
    let mut groups = Vec::new();
    for (i, (g, &t)) in grouping.groups.iter().zip(&type_of).enumerate() {
        if g.count() < config.min_traces {
            continue;
        }
        let Some(decomposition) = decompose(&g.edge_latency_ns) else { continue };
        let cv = (decomposition.mean_ns > 0.0).then(|| decomposition.variance.sqrt() / decomposition.mean_ns);
        let high_variance = cv.is_some_and(|cv| cv > config.cv_threshold);
        let consistently_slow = cv.is_some_and(|cv| cv < config.cv_threshold)
            && decomposition.mean_ns > request_types[t].slow_threshold_ns
            && g.count() < request_types[t].traces;
        groups.push(GroupStats {
            group: i,
            request_type: t,
            count: g.count(),
            cv,
            ranked: decomposition.ranked(),
            decomposition,
            high_variance,
            consistently_slow,
        });
    }
    groups.sort_by(|a, b| {
        b.decomposition.variance.total_cmp(&a.decomposition.variance).then(a.group.cmp(&b.group))
    });
    Ok(Analysis { request_types, groups })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vaif::group::Group;
    use weft_model::TraceId;

    fn rel_close(got: f64, want: f64) {
        assert!((got - want).abs() <= 1e-9 * want.abs().max(1e-300), "got {got}, want {want}");
    }

    #[test]
    fn three_edges_by_hand() {
        // e1 = [1,2,3,4], e2 = [2,4,6,8] (= 2 e1), e3 = [5,3,1,3].
        // means 2.5, 5, 3; sample Var: e1 = 5/3, e2 = 20/3, e3 = 8/3;
        // Cov(e1,e2) = 10/3, Cov(e1,e3) = −4/3, Cov(e2,e3) = −8/3.
        // R = [8,9,10,15]: mean 10.5, Var = (6.25+2.25+0.25+20.25)/3 = 29/3
        // = 5/3 + 20/3 + 8/3 + 2 (10/3 − 4/3 − 8/3) = 33/3 − 4/3.
        let d = decompose(&[vec![1, 2, 3, 4], vec![2, 4, 6, 8], vec![5, 3, 1, 3]]).unwrap();
        let direct = {
            let r = [8.0, 9.0, 10.0, 15.0];
            let m = r.iter().sum::<f64>() / 4.0;
            r.iter().map(|x: &f64| (x - m).powi(2)).sum::<f64>() / 3.0
        };
        rel_close(d.variance, direct);
        rel_close(d.variance, 29.0 / 3.0);
        rel_close(d.edge_variance_sum + d.covariance_sum, direct);
        rel_close(d.edge_variance_sum, 33.0 / 3.0);
        rel_close(d.covariance_sum, -4.0 / 3.0);
        rel_close(d.edges.iter().map(|e| e.share).sum(), direct);
        // Shares: e1 = 5/3 + 10/3 − 4/3 = 11/3; e2 = 20/3 + 10/3 − 8/3 = 22/3; e3 = 8/3 − 12/3.
        let shares: Vec<f64> = d.edges.iter().map(|e| e.share).collect();
        for (got, want) in shares.iter().zip([11.0 / 3.0, 22.0 / 3.0, -4.0 / 3.0]) {
            rel_close(*got, want);
        }
        rel_close(d.edges[0].variance, 5.0 / 3.0);
        rel_close(d.edges[2].covariance_with_others, -12.0 / 3.0);
        rel_close(d.edges[1].fraction.unwrap(), 22.0 / 29.0);
        assert_eq!(d.ranked(), [1, 0, 2]);
        rel_close(d.mean_ns, 10.5);
        assert_eq!(decompose(&[vec![1]]), None);
        assert_eq!(decompose(&[]), None);
    }

    #[test]
    fn percentiles_interpolate() {
        let mut v = vec![15.0, 20.0, 35.0, 40.0, 50.0];
        let mut at = |p: f64| percentile(&mut v, p).unwrap();
        rel_close(at(40.0), 29.0); // numpy.percentile([15, 20, 35, 40, 50], 40) = 29.0
        rel_close(at(95.0), 48.0);
        assert_eq!((at(100.0), at(0.0)), (50.0, 15.0));
        assert_eq!(percentile(&mut [], 50.0), None);
    }

    fn group(name: &str, edges: Vec<Vec<i64>>) -> Group {
        let n = edges[0].len();
        Group {
            request_type: name.into(),
            path: (0..=edges.len() as u32).collect(),
            representative: TraceId::from_u128(1),
            members: (0..n).collect(),
            response_ns: (0..n).map(|k| edges.iter().map(|e| e[k]).sum()).collect(),
            edge_latency_ns: edges,
        }
    }

    #[test]
    fn verdicts_follow_the_thresholds() {
        let grouping = Grouping {
            groups: vec![
                // Erratic: CV well above 10 %.
                group("get", vec![vec![10, 100, 10, 100, 10, 100], vec![5, 5, 5, 5, 5, 5]]),
                // Steady and fast.
                group("get", vec![vec![50; 40], vec![1; 40]]),
                // Steady and slower than the type's 95th percentile.
                group("get", vec![vec![300, 301, 302, 300], vec![0, 0, 0, 1]]),
                // Too small.
                group("get", vec![vec![1, 2, 3], vec![1, 1, 1]]),
                group("put", vec![vec![7, 7, 7, 7]]),
                // The whole of its type: steady, one outlier lifts the mean over the 95th
                // percentile; not slower than its own type.
                group("stat", vec![[vec![200; 26], vec![240]].concat()]),
            ],
            ..Grouping::default()
        };
        let a = analyze(&grouping, &Config::default()).unwrap();
        assert_eq!(
            a.request_types.iter().map(|t| (t.name.as_str(), t.traces)).collect::<Vec<_>>(),
            [("get", 53), ("put", 4), ("stat", 27)]
        );
        let by_group = |g: usize| a.groups.iter().find(|s| s.group == g);
        assert!(by_group(3).is_none());
        let erratic = by_group(0).unwrap();
        assert!(erratic.high_variance && !erratic.consistently_slow);
        assert_eq!(erratic.ranked, [0, 1]);
        let fast = by_group(1).unwrap();
        assert!(!fast.high_variance && !fast.consistently_slow);
        assert_eq!(fast.cv, Some(0.0));
        let slow = by_group(2).unwrap();
        assert!(slow.consistently_slow && !slow.high_variance, "{slow:?}");
        assert_eq!(a.groups[0].group, 0, "largest variance first");
        let put = by_group(4).unwrap();
        assert_eq!((put.request_type, put.consistently_slow), (1, false));
        let stat = by_group(5).unwrap();
        assert!(stat.cv.is_some_and(|cv| cv < 0.1) && !stat.consistently_slow, "{stat:?}");
        // Lowering the CV threshold below the slow group's CV takes its verdict away.
        let cfg = Config { cv_threshold: 0.001, ..Config::default() };
        let a = analyze(&grouping, &cfg).unwrap();
        assert!(a.groups.iter().all(|g| !g.consistently_slow));
        assert!(analyze(&grouping, &Config { cs_percentile: f64::NAN, ..Config::default() }).is_err());
    }

    mod props {
        use super::*;
        use crate::vaif::group::group;
        use crate::vaif::hb::tests::arb;
        use proptest::prelude::*;

        /// Σ shares against the variance of the per-request sums, computed here directly.
        fn check(edges: &[Vec<i64>]) -> Result<(), TestCaseError> {
            let Some(d) = decompose(edges) else { return Ok(()) };
            let n = edges.iter().map(Vec::len).min().unwrap_or(0);
            let sums: Vec<f64> = (0..n).map(|k| edges.iter().map(|e| e[k] as f64).sum()).collect();
            let m = sums.iter().sum::<f64>() / n as f64;
            let direct = sums.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1) as f64;
            let scale = d.edge_variance_sum + direct + 1.0;
            let shares: f64 = d.edges.iter().map(|e| e.share).sum();
            prop_assert!((shares - direct).abs() <= 1e-9 * scale, "shares {} direct {}", shares, direct);
            prop_assert!((d.variance - direct).abs() <= 1e-9 * scale);
            prop_assert!((d.edge_variance_sum + d.covariance_sum - direct).abs() <= 1e-9 * scale);
            Ok(())
        }

        proptest! {
            #[test]
            fn shares_sum_to_the_variance(
                edges in (1usize..8, 2usize..30).prop_flat_map(|(m, n)| {
                    prop::collection::vec(prop::collection::vec(-1_000_000_000i64..1_000_000_000, n), m)
                })
            ) {
                check(&edges)?;
            }

            #[test]
            fn grouped_random_traces_decompose(traces in prop::collection::vec(arb::tree(), 1..30)) {
                let g = group(&traces);
                prop_assert!(g.rejected.is_empty());
                prop_assert_eq!(g.groups.iter().map(|g| g.count()).sum::<usize>(), traces.len());
                for grp in &g.groups {
                    for (k, &r) in grp.response_ns.iter().enumerate() {
                        prop_assert_eq!(grp.edge_latency_ns.iter().map(|e| e[k]).sum::<i64>(), r);
                    }
                    check(&grp.edge_latency_ns)?;
                }
            }
        }
    }
}
