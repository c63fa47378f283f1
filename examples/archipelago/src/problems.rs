//! Performance problems injected on request (off by default), for `weft explore`'s
//! demonstration (docs/explore.md). Each lies several levels below the always-on server and
//! client spans, inside functions that run whether or not the problem is on — only the delay
//! is injected:
//!
//! * `variance` — the blocker's `blocker.extent.checksum` (under `blocker.io.write` →
//!   `blocker.extent.prepare`, before the object is opened) takes [`VARIANCE_DELAY`] longer on about half of the writes
//!   (bimodal latency);
//! * `slow` — reading a hole (a block never written) takes the mapper through
//!   `mapper.hole.fill` → `mapper.hole.template` → `mapper.hole.template.build`, which takes
//!   [`SLOW_DELAY`] every time (a rare path, consistently slow);
//! * `key` — a write waits in `mapper.journal.lock` (under `mapper.journal.append`, which
//!   journals the mapping after the lookup) for [`KEY_DELAY_PER_KIB`] per KiB written: the wait grows with
//!   the request's `len`, which the always-on `mapper.request` span carries.
//!
//! Selected by `ARCHIPELAGO_PROBLEMS` (`variance,slow,key`, `all` or `none`) when a tier starts.

use std::time::Duration;

/// The environment variable naming the problems.
pub const ENV: &str = "ARCHIPELAGO_PROBLEMS";
/// The extra time of the slow mode of `blocker.extent.checksum`.
pub const VARIANCE_DELAY: Duration = Duration::from_millis(20);
/// The time `mapper.hole.template.build` takes.
pub const SLOW_DELAY: Duration = Duration::from_millis(100);
/// The journal-lock wait per KiB written.
pub const KEY_DELAY_PER_KIB: Duration = Duration::from_micros(800);

/// Which problems are on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Problems {
    pub variance: bool,
    pub slow: bool,
    pub key: bool,
}

impl Problems {
    /// Parses `variance,slow,key` (any subset, comma-separated), `all`, `none` or nothing.
    pub fn parse(s: &str) -> Result<Problems, String> {
        let mut p = Problems::default();
        for w in s.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match w {
                "variance" => p.variance = true,
                "slow" => p.slow = true,
                "key" => p.key = true,
                "all" => p = Problems { variance: true, slow: true, key: true },
                "none" => {}
                other => {
                    return Err(format!("{ENV}: unknown problem {other:?} (variance, slow, key, all, none)"));
                }
            }
        }
        Ok(p)
    }

    /// From [`ENV`]; none when it is unset.
    pub fn from_env() -> Result<Problems, String> {
        std::env::var(ENV).map_or(Ok(Problems::default()), |v| Problems::parse(&v))
    }
}

/// A fair coin for the `n`th call (splitmix64's finalizer: consecutive `n` look random).
pub fn coin(n: u64) -> bool {
    let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) & 1 == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses_by_name() {
        assert_eq!(Problems::parse("").unwrap(), Problems::default());
        assert_eq!(Problems::parse("none").unwrap(), Problems::default());
        assert_eq!(Problems::parse("all").unwrap(), Problems { variance: true, slow: true, key: true });
        assert_eq!(
            Problems::parse("key, slow").unwrap(),
            Problems { variance: false, slow: true, key: true }
        );
        assert!(Problems::parse("variance,fast").unwrap_err().contains("\"fast\""));
        let heads = (0..1000).filter(|&n| coin(n)).count();
        assert!((400..600).contains(&heads), "{heads}");
    }
}
