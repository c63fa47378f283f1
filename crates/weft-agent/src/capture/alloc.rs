//! EXIST's usage-aware memory allocator: how much AUX buffer each traced core gets.
//!
//! A node has one budget for all its captures (default 512 MiB). A capture asks for buffers on
//! a set of cores; each core gets one buffer of 4 to 128 MiB, a power of two (perf's AUX area
//! for Intel PT is a power-of-two number of pages; EXIST fills it once and stops, so the size
//! bounds how much of the period is kept). Two kinds of target:
//!
//! * **CPU-set** ([`Target::CpuSet`]): the application owns its cores; every mapped core gets
//!   the same size. When the remaining budget cannot give each one the minimum, the first
//!   cores (in ascending order) that fit get the minimum and the rest are reported as
//!   [`Allocation::uncovered`].
//! * **CPU-share** ([`Target::CpuShare`]): the application shares cores with others; the
//!   allocator samples a core set — the cores the target ran on recently plus a few random
//!   other cores drawn across utilization bands (low, middle, high), with a seeded RNG — and
//!   gives lower-utilization cores larger buffers (they have the idle time the target may be
//!   scheduled into).
//!
//! Sizing: every chosen core starts from the minimum; what the budget has left is shared in
//! proportion to `1 − utilization + 1/16` (equal weights for CPU-set targets), and each size is
//! rounded down to a power of two and capped at the maximum. Rounding and capping only lower
//! sizes, so the sum never exceeds what was left, and a core with lower utilization never gets
//! a smaller buffer than one with higher utilization.
//!
//! The allocator is pure and deterministic given its inputs (utilization and recent cores come
//! in as data: [`super::usage`] reads them from `/proc` on a live node). It remembers the
//! captures it granted: a core is traced by at most one capture at a time, so a second capture
//! on a core in use is refused, until [`Allocator::release`].

use std::collections::{BTreeMap, BTreeSet};

/// One mebibyte.
pub const MIB: u64 = 1 << 20;

/// The allocator's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocConfig {
    /// Total AUX memory for all captures of this node, in bytes.
    pub budget: u64,
    /// Smallest buffer of one core (a power of two), in bytes.
    pub min_buffer: u64,
    /// Largest buffer of one core (a power of two), in bytes.
    pub max_buffer: u64,
    /// How many cores a CPU-share target gets besides the ones it ran on recently.
    pub extra_cores: usize,
}

impl Default for AllocConfig {
    fn default() -> Self {
        AllocConfig { budget: 512 * MIB, min_buffer: 4 * MIB, max_buffer: 128 * MIB, extra_cores: 2 }
    }
}

/// What a capture wants traced.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// An application pinned to these cores (cpuset): trace them all, equally.
    CpuSet {
        /// The cores the application is mapped to.
        cores: Vec<u32>,
    },
    /// An application sharing cores with others: trace a sampled core set.
    CpuShare {
        /// The cores the target's threads ran on recently ([`super::usage::recent_cores`]).
        recent_cores: Vec<u32>,
        /// The seed of the random choice of the extra cores (same seed, same choice).
        seed: u64,
    },
}

/// The node as the allocator sees it: the utilization of every online core in `[0, 1]`
/// ([`super::usage::utilization`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeUsage {
    /// Core id → utilization over the last sampling interval.
    pub utilization: BTreeMap<u32, f64>,
}

/// The id of a granted capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CaptureId(pub u64);

/// One core's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoreBuffer {
    /// The core.
    pub core: u32,
    /// Buffer size in bytes (a power of two between the configured minimum and maximum).
    pub bytes: u64,
}

/// A granted capture: its buffers (ascending core order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    /// The capture, for [`Allocator::release`].
    pub id: CaptureId,
    /// One buffer per traced core.
    pub buffers: Vec<CoreBuffer>,
    /// Target cores left out because the remaining budget could not give them the minimum.
    pub uncovered: Vec<u32>,
}

impl Allocation {
    /// The bytes this capture holds.
    pub fn total_bytes(&self) -> u64 {
        self.buffers.iter().map(|b| b.bytes).sum()
    }
}

/// Why a capture was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AllocError {
    /// The configuration itself is unusable.
    #[error("capture allocator: {0}")]
    Config(String),
    /// Not even one minimum buffer fits in what is left of the node's budget.
    #[error(
        "capture refused: {available} bytes left of the node's {budget}-byte capture budget, \
         below one minimum per-core buffer of {min} bytes"
    )]
    BudgetTooSmall {
        /// Bytes left.
        available: u64,
        /// The node's budget.
        budget: u64,
        /// The minimum buffer.
        min: u64,
    },
    /// A requested core is already traced by another capture.
    #[error("capture refused: core {core} is already traced by capture {}", holder.0)]
    CoreBusy {
        /// The core.
        core: u32,
        /// The capture holding it.
        holder: CaptureId,
    },
    /// The target names no core.
    #[error("capture refused: the target names no core")]
    NoCores,
    /// A target core is not an online core of this node.
    #[error("capture refused: core {0} is not an online core of this node")]
    UnknownCore(u32),
    /// A utilization figure is not a number in `[0, 1]`.
    #[error("capture refused: utilization {value} of core {core} is not in [0, 1]")]
    BadUtilization {
        /// The core.
        core: u32,
        /// The figure given.
        value: f64,
    },
}

/// The node's allocator: its configuration and the captures it granted.
#[derive(Debug)]
pub struct Allocator {
    config: AllocConfig,
    /// Core → the capture tracing it.
    busy: BTreeMap<u32, CaptureId>,
    /// Capture → (its cores, its bytes).
    granted: BTreeMap<CaptureId, (Vec<u32>, u64)>,
    in_use: u64,
    next_id: u64,
}

impl Allocator {
    /// An allocator with no capture granted. The buffer limits must be powers of two with
    /// `min_buffer <= max_buffer`.
    pub fn new(config: AllocConfig) -> Result<Self, AllocError> {
        let AllocConfig { min_buffer: min, max_buffer: max, .. } = config;
        if !min.is_power_of_two() || !max.is_power_of_two() || min > max {
            return Err(AllocError::Config(format!(
                "per-core buffer limits must be powers of two with min <= max (min {min}, max {max})"
            )));
        }
        Ok(Allocator { config, busy: BTreeMap::new(), granted: BTreeMap::new(), in_use: 0, next_id: 1 })
    }

    /// The configuration.
    pub fn config(&self) -> &AllocConfig {
        &self.config
    }

    /// Bytes held by granted captures.
    pub fn in_use(&self) -> u64 {
        self.in_use
    }

    /// Bytes of the budget not held by any capture.
    pub fn available(&self) -> u64 {
        self.config.budget.saturating_sub(self.in_use)
    }

    /// Grant buffers for `target` on a node with `usage`, or refuse.
    pub fn allocate(&mut self, target: &Target, usage: &NodeUsage) -> Result<Allocation, AllocError> {
        self.allocate_within(target, usage, None)
    }

    /// [`Allocator::allocate`] with this capture's own budget `cap` (bytes) on top of what
    /// is left of the node's: the allocation uses at most the smaller of the two.
    pub fn allocate_within(
        &mut self,
        target: &Target,
        usage: &NodeUsage,
        cap: Option<u64>,
    ) -> Result<Allocation, AllocError> {
        for (&core, &value) in &usage.utilization {
            if !(0.0..=1.0).contains(&value) {
                return Err(AllocError::BadUtilization { core, value });
            }
        }
        let own: BTreeSet<u32> = match target {
            Target::CpuSet { cores } => cores.iter().copied().collect(),
            Target::CpuShare { recent_cores, .. } => recent_cores.iter().copied().collect(),
        };
        if own.is_empty() {
            return Err(AllocError::NoCores);
        }
        for &core in &own {
            if !usage.utilization.contains_key(&core) {
                return Err(AllocError::UnknownCore(core));
            }
            if let Some(&holder) = self.busy.get(&core) {
                return Err(AllocError::CoreBusy { core, holder });
            }
        }
        let available = self.available().min(cap.unwrap_or(u64::MAX));
        let min = self.config.min_buffer;
        let fit = usize::try_from(available / min).unwrap_or(usize::MAX);
        if fit == 0 {
            let budget = cap.unwrap_or(self.config.budget).min(self.config.budget);
            return Err(AllocError::BudgetTooSmall { available, budget, min });
        }
        // (core, weight), in priority order: the first `fit` are traced.
        let chosen: Vec<(u32, u64)> = match target {
            Target::CpuSet { .. } => own.iter().map(|&c| (c, 1)).collect(),
            Target::CpuShare { seed, .. } => {
                let mut cores: Vec<u32> = own.iter().copied().collect();
                cores.extend(self.sample_extras(&own, usage, *seed));
                cores
                    .iter()
                    .map(|c| (*c, share_weight(usage.utilization.get(c).copied().unwrap_or(1.0))))
                    .collect()
            }
        };
        let (traced, uncovered) = chosen.split_at(chosen.len().min(fit));
        let buffers = self.size(traced, available);
        let id = CaptureId(self.next_id);
        self.next_id += 1;
        let total: u64 = buffers.iter().map(|b| b.bytes).sum();
        for b in &buffers {
            self.busy.insert(b.core, id);
        }
        self.granted.insert(id, (buffers.iter().map(|b| b.core).collect(), total));
        self.in_use += total;
        let mut uncovered: Vec<u32> = uncovered.iter().map(|&(c, _)| c).filter(|c| own.contains(c)).collect();
        uncovered.sort_unstable();
        Ok(Allocation { id, buffers, uncovered })
    }

    /// Give a capture's buffers back to the budget and free its cores; false if `id` is not a
    /// granted capture.
    pub fn release(&mut self, id: CaptureId) -> bool {
        let Some((cores, bytes)) = self.granted.remove(&id) else {
            return false;
        };
        for c in cores {
            self.busy.remove(&c);
        }
        self.in_use -= bytes;
        true
    }

    /// Up to `extra_cores` free cores outside `own`, drawn round-robin from three utilization
    /// bands (low, middle, high thirds of the free cores by utilization) so that the sample
    /// spans the node's load; random within a band.
    fn sample_extras(&self, own: &BTreeSet<u32>, usage: &NodeUsage, seed: u64) -> Vec<u32> {
        let mut free: Vec<(u32, f64)> = usage
            .utilization
            .iter()
            .filter(|(c, _)| !own.contains(c) && !self.busy.contains_key(c))
            .map(|(&c, &u)| (c, u))
            .collect();
        free.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        let n = free.len();
        let mut bands: Vec<Vec<u32>> =
            (0..3).map(|b| free[b * n / 3..(b + 1) * n / 3].iter().map(|x| x.0).collect()).collect();
        let mut rng = SplitMix64(seed);
        let mut out = Vec::new();
        let mut band = 0;
        while out.len() < self.config.extra_cores && bands.iter().any(|b| !b.is_empty()) {
            let pool = &mut bands[band % 3];
            band += 1;
            if pool.is_empty() {
                continue;
            }
            let i = usize::try_from(rng.next() % pool.len() as u64).unwrap_or(0);
            out.push(pool.swap_remove(i));
        }
        out
    }

    /// Sizes for `cores` (at most `available / min_buffer` of them): the minimum each, plus the
    /// rest of `available` in proportion to the weights, rounded down to a power of two and
    /// capped at the maximum.
    fn size(&self, cores: &[(u32, u64)], available: u64) -> Vec<CoreBuffer> {
        let AllocConfig { min_buffer: min, max_buffer: max, .. } = self.config;
        let spare = available - min * cores.len() as u64;
        let total_weight: u128 = cores.iter().map(|c| u128::from(c.1)).sum();
        let mut out: Vec<CoreBuffer> = cores
            .iter()
            .map(|&(core, w)| {
                // integer shares: their sum never exceeds `spare`
                let extra = u128::from(spare) * u128::from(w) / total_weight.max(1);
                let want = min + u64::try_from(extra).unwrap_or(spare);
                CoreBuffer { core, bytes: floor_pow2(want).clamp(min, max) }
            })
            .collect();
        out.sort_by_key(|b| b.core);
        out
    }
}

/// A CPU-share core's weight: `1 − utilization + 1/16`, in units of 2^-20 (integers keep the
/// shares exact; rounding keeps the order: lower utilization, weight at least as large).
fn share_weight(utilization: f64) -> u64 {
    ((1.0 - utilization + 1.0 / 16.0) * f64::from(1u32 << 20)).round() as u64
}

/// The largest power of two `<= x` (0 for 0).
fn floor_pow2(x: u64) -> u64 {
    if x == 0 { 0 } else { 1 << (63 - x.leading_zeros()) }
}

/// A small seeded generator (SplitMix64): enough for sampling cores, reproducible from a seed.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(utils: &[f64]) -> NodeUsage {
        NodeUsage { utilization: utils.iter().enumerate().map(|(i, &u)| (i as u32, u)).collect() }
    }

    #[test]
    fn cpu_set_cores_get_equal_buffers() {
        let mut a = Allocator::new(AllocConfig::default()).unwrap();
        let got = a.allocate(&Target::CpuSet { cores: vec![3, 1, 2] }, &node(&[0.1, 0.9, 0.5, 0.2])).unwrap();
        // 512 MiB / 3 → 170 MiB each → capped at 128 MiB.
        assert_eq!(got.buffers, [1, 2, 3].map(|core| CoreBuffer { core, bytes: 128 * MIB }));
        assert!(got.uncovered.is_empty());
        assert_eq!(a.in_use(), 384 * MIB);
    }

    #[test]
    fn cpu_share_low_utilization_gets_more() {
        let cfg = AllocConfig { budget: 64 * MIB, ..AllocConfig::default() };
        let mut a = Allocator::new(cfg).unwrap();
        let usage = node(&[0.95, 0.05, 0.5, 0.9, 0.1, 0.6]);
        let got = a.allocate(&Target::CpuShare { recent_cores: vec![0, 1], seed: 7 }, &usage).unwrap();
        assert_eq!(got.buffers.len(), 4, "2 recent cores + 2 sampled: {got:?}");
        let b = |c| got.buffers.iter().find(|b| b.core == c).unwrap().bytes;
        assert!(b(1) > b(0), "{got:?}");
        assert!(got.total_bytes() <= 64 * MIB);
        // The same seed samples the same cores.
        let mut again = Allocator::new(cfg).unwrap();
        assert_eq!(
            again.allocate(&Target::CpuShare { recent_cores: vec![0, 1], seed: 7 }, &usage).unwrap().buffers,
            got.buffers
        );
    }

    #[test]
    fn refusals_are_clear() {
        let mut a = Allocator::new(AllocConfig { budget: 3 * MIB, ..AllocConfig::default() }).unwrap();
        let e = a.allocate(&Target::CpuSet { cores: vec![0] }, &node(&[0.0])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "capture refused: 3145728 bytes left of the node's 3145728-byte capture budget, below one \
             minimum per-core buffer of 4194304 bytes"
        );
        let mut a = Allocator::new(AllocConfig::default()).unwrap();
        let usage = node(&[0.0, 0.0, 0.0]);
        let first = a.allocate(&Target::CpuSet { cores: vec![0, 1] }, &usage).unwrap();
        let e = a.allocate(&Target::CpuShare { recent_cores: vec![1], seed: 0 }, &usage).unwrap_err();
        assert_eq!(e, AllocError::CoreBusy { core: 1, holder: first.id });
        assert_eq!(e.to_string(), "capture refused: core 1 is already traced by capture 1");
        assert!(a.release(first.id));
        assert!(!a.release(first.id));
        assert_eq!(a.in_use(), 0);
        a.allocate(&Target::CpuShare { recent_cores: vec![1], seed: 0 }, &usage).unwrap();
        assert_eq!(
            a.allocate(&Target::CpuSet { cores: vec![9] }, &usage).unwrap_err(),
            AllocError::UnknownCore(9)
        );
        assert_eq!(a.allocate(&Target::CpuSet { cores: vec![] }, &usage).unwrap_err(), AllocError::NoCores);
        assert!(matches!(
            a.allocate(&Target::CpuSet { cores: vec![0] }, &node(&[f64::NAN])),
            Err(AllocError::BadUtilization { core: 0, .. })
        ));
        assert!(Allocator::new(AllocConfig { min_buffer: 3 * MIB, ..AllocConfig::default() }).is_err());
    }

    #[test]
    fn a_short_budget_covers_what_it_can() {
        let mut a = Allocator::new(AllocConfig { budget: 9 * MIB, ..AllocConfig::default() }).unwrap();
        let got = a.allocate(&Target::CpuSet { cores: vec![0, 1, 2] }, &node(&[0.0; 3])).unwrap();
        assert_eq!(got.buffers, [0, 1].map(|core| CoreBuffer { core, bytes: 4 * MIB }));
        assert_eq!(got.uncovered, [2]);
    }
}
