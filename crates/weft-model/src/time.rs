//! Time.
//!
//! At the model boundary every timestamp is a `u64` count of **nanoseconds since the UNIX
//! epoch** (OTLP's `time_unix_nano`). Sources with their own clock — simulated picoseconds
//! (gem5 ticks, nicbm `main_time`, the SimBricks ns-3 fork), TSC cycles, CLOCK_MONOTONIC,
//! CTF clock cycles — keep the raw value (see [`crate::Event::raw_time`]) and convert through
//! an explicit [`Clock`].
//!
//! | format | unit on the wire | conversion |
//! |---|---|---|
//! | OTLP | ns since epoch | identity |
//! | Zipkin v1/v2, Jaeger JSON | µs since epoch (timestamp), µs (duration) | ×1000; ns → µs truncates (documented loss) |
//! | Chrome trace | µs (float) | ns / 1000 as f64 |
//! | simulators | ps of simulated time | `Clock { unit: Picos, epoch_ns }` |

use std::time::{SystemTime, UNIX_EPOCH};

/// Nanoseconds since the UNIX epoch.
pub type UnixNanos = u64;

/// The current wall-clock time in ns since the epoch (0 if the clock is before 1970).
pub fn now_unix_nanos() -> UnixNanos {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

/// The unit a source's raw timestamps count in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeUnit {
    /// Picoseconds (gem5 ticks at the default 1 THz tick rate, nicbm, SimBricks ns-3).
    Picos,
    /// Nanoseconds.
    Nanos,
    /// Microseconds.
    Micros,
    /// Milliseconds.
    Millis,
    /// Seconds.
    Seconds,
    /// Ticks of a clock running at this many Hz (TSC, CTF clocks).
    Hz(u64),
}

/// Maps a source's raw timestamps to ns since the UNIX epoch:
/// `ns = epoch_ns + (raw - raw_origin) converted from `unit``.
///
/// For simulated time, `epoch_ns` is the wall-clock instant that simulated time `raw_origin`
/// is displayed at (configurable; default 0 = 1970-01-01, which keeps woven traces
/// reproducible). Raw values below `raw_origin` saturate at `epoch_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Clock {
    /// Unit of the raw values.
    pub unit: TimeUnit,
    /// ns since the UNIX epoch that `raw_origin` maps to.
    #[serde(default)]
    pub epoch_ns: u64,
    /// The raw value that maps to `epoch_ns`.
    #[serde(default)]
    pub raw_origin: u64,
}

impl Clock {
    /// Identity: raw values already are ns since the epoch.
    pub const UNIX_NANOS: Clock = Clock { unit: TimeUnit::Nanos, epoch_ns: 0, raw_origin: 0 };

    /// Simulated picoseconds shown from `epoch_ns` on.
    pub const fn simulated_picos(epoch_ns: u64) -> Clock {
        Clock { unit: TimeUnit::Picos, epoch_ns, raw_origin: 0 }
    }

    /// Converts a raw timestamp to ns since the UNIX epoch (saturating, never panics).
    pub fn to_unix_nanos(&self, raw: u64) -> UnixNanos {
        let d = raw.saturating_sub(self.raw_origin);
        let ns = match self.unit {
            TimeUnit::Picos => d / 1000,
            TimeUnit::Nanos => d,
            TimeUnit::Micros => d.saturating_mul(1_000),
            TimeUnit::Millis => d.saturating_mul(1_000_000),
            TimeUnit::Seconds => d.saturating_mul(1_000_000_000),
            TimeUnit::Hz(0) => 0,
            TimeUnit::Hz(hz) => ((d as u128 * 1_000_000_000u128) / hz as u128).min(u64::MAX as u128) as u64,
        };
        self.epoch_ns.saturating_add(ns)
    }

    /// Converts a duration in raw units to ns.
    pub fn duration_nanos(&self, raw: u64) -> u64 {
        Clock { epoch_ns: 0, raw_origin: 0, ..*self }.to_unix_nanos(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions() {
        let c = Clock::simulated_picos(1_000);
        assert_eq!(c.to_unix_nanos(1_869_691_991_749), 1_000 + 1_869_691_991);
        assert_eq!(Clock::UNIX_NANOS.to_unix_nanos(42), 42);
        let tsc = Clock { unit: TimeUnit::Hz(2_000_000_000), epoch_ns: 0, raw_origin: 0 };
        assert_eq!(tsc.to_unix_nanos(4_000_000_000), 2_000_000_000);
        let us = Clock { unit: TimeUnit::Micros, epoch_ns: 0, raw_origin: 10 };
        assert_eq!(us.to_unix_nanos(5), 0, "below origin saturates");
        assert_eq!(us.to_unix_nanos(u64::MAX), u64::MAX, "overflow saturates");
        assert_eq!(Clock { unit: TimeUnit::Seconds, ..Clock::UNIX_NANOS }.to_unix_nanos(u64::MAX), u64::MAX);
        assert_eq!(Clock { unit: TimeUnit::Hz(0), ..Clock::UNIX_NANOS }.to_unix_nanos(7), 0);
    }
}
