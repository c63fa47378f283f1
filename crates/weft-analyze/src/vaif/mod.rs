//! VAIF's analysis (seeds §3): which parts of a request type's critical paths explain its
//! response-time variance, as pure functions over traces.
//!
//! * [`hb`]: the critical path of one request over the happens-before graph of its tracepoint
//!   records (entry, exit, annotations; fork, join and causal links), as a sequence of
//!   tracepoints whose edges carry latencies;
//! * [`group`]: requests of one type with the same critical path form a group (response times
//!   and per-edge latency vectors);
//! * [`stats`]: per group, mean, CV, the decomposition `Var(R) = Σ Var(eᵢ) + 2 Σ Cov(eᵢ, eⱼ)`
//!   with each edge's share, ranked, and the high-variance / consistently-slow verdicts;
//! * [`correlate`]: per group, every key on the path against response time (Pearson and
//!   Spearman with p-values; bins for numeric keys, per-value means and η² for categorical);
//! * [`dist`]: the t and F distributions behind those p-values.
//!
//! The thresholds are a [`Config`] whose defaults are the paper's.

use std::collections::BTreeMap;
use std::hash::{BuildHasherDefault, Hasher};

pub mod correlate;
pub mod dist;
pub mod group;
pub mod hb;
pub mod stats;

/// Thresholds and bins of the analysis. [`Config::default`] has the paper's values.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Config {
    /// Coefficient of variation (standard deviation / mean) above which a group has high
    /// variance and under which it is predictable: 0.10.
    pub cv_threshold: f64,
    /// Percentile (0–100) of a request type's response times above which a predictable
    /// group's mean makes it consistently slow: 95.
    pub cs_percentile: f64,
    /// Members a group needs to be analysed: 4 (the paper: more than 3).
    pub min_traces: usize,
    /// Bin edges (finite, strictly increasing) per numeric key name: edges `a < b` make the
    /// bins `< a`, `[a, b)` and `>= b`. Keys without an entry are not binned.
    pub bins: BTreeMap<String, Vec<f64>>,
}

impl Default for Config {
    fn default() -> Self {
        Config { cv_threshold: 0.10, cs_percentile: 95.0, min_traces: 4, bins: BTreeMap::new() }
    }
}

/// An invalid [`Config`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// Not a finite, non-negative number.
    #[error("CV threshold {0} is not a finite number ≥ 0")]
    CvThreshold(f64),
    /// Not within 0–100.
    #[error("consistently-slow percentile {0} is not within 0–100")]
    CsPercentile(f64),
    /// A variance needs two requests.
    #[error("min_traces {0} is under 2 (a variance needs two requests)")]
    MinTraces(usize),
    /// Bin edges that are empty, not finite or not strictly increasing.
    #[error("bins of key {key:?}: {reason}")]
    Bins {
        /// The key.
        key: String,
        /// What is wrong.
        reason: &'static str,
    },
}

impl Config {
    /// Checks every field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.cv_threshold.is_finite() && self.cv_threshold >= 0.0) {
            return Err(ConfigError::CvThreshold(self.cv_threshold));
        }
        if !(0.0..=100.0).contains(&self.cs_percentile) {
            return Err(ConfigError::CsPercentile(self.cs_percentile));
        }
        if self.min_traces < 2 {
            return Err(ConfigError::MinTraces(self.min_traces));
        }
        for (key, edges) in &self.bins {
            let reason = if edges.is_empty() {
                "no edges"
            } else if !edges.iter().all(|e| e.is_finite()) {
                "an edge is not a finite number"
            } else if !edges.windows(2).all(|w| w[0] < w[1]) {
                "edges are not strictly increasing"
            } else {
                continue;
            };
            return Err(ConfigError::Bins { key: key.clone(), reason });
        }
        Ok(())
    }
}

/// A fast non-cryptographic hasher for the hot maps (span ids, interned names, path hashes):
/// each word is mixed in by rotate, xor and multiply by an odd constant.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct FxHasher(u64);

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }
    #[inline]
    fn write_u8(&mut self, v: u8) {
        self.add(u64::from(v));
    }
    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.add(u64::from(v));
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.add(v);
    }
    #[inline]
    fn write_usize(&mut self, v: usize) {
        self.add(v as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// `BuildHasher` of [`FxHasher`].
pub(crate) type FxBuild = BuildHasherDefault<FxHasher>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_validation() {
        assert_eq!(Config::default().validate(), Ok(()));
        let bad = |c: Config| c.validate().unwrap_err();
        assert_eq!(
            bad(Config { cv_threshold: f64::NAN, ..Config::default() }).to_string().split(' ').next(),
            Some("CV")
        );
        assert!(matches!(
            bad(Config { cv_threshold: -0.1, ..Config::default() }),
            ConfigError::CvThreshold(_)
        ));
        assert_eq!(
            bad(Config { cs_percentile: 100.5, ..Config::default() }),
            ConfigError::CsPercentile(100.5)
        );
        assert!(matches!(
            bad(Config { cs_percentile: f64::NAN, ..Config::default() }),
            ConfigError::CsPercentile(_)
        ));
        assert_eq!(bad(Config { min_traces: 1, ..Config::default() }), ConfigError::MinTraces(1));
        for (edges, reason) in [
            (vec![], "no edges"),
            (vec![1.0, f64::INFINITY], "an edge is not a finite number"),
            (vec![2.0, 2.0], "edges are not strictly increasing"),
        ] {
            let c = Config { bins: [("q".to_owned(), edges)].into(), ..Config::default() };
            assert_eq!(bad(c), ConfigError::Bins { key: "q".into(), reason });
        }
        // Boundaries are valid.
        let edge = Config { cv_threshold: 0.0, cs_percentile: 0.0, min_traces: 2, ..Config::default() };
        assert_eq!(edge.validate(), Ok(()));
        assert_eq!(Config { cs_percentile: 100.0, ..Config::default() }.validate(), Ok(()));
    }
}
