//! Timestamps: the TSC when it is invariant (`constant_tsc` and `nonstop_tsc` in
//! `/proc/cpuinfo`), calibrated against CLOCK_REALTIME; else `clock_gettime(CLOCK_REALTIME)`.
//!
//! `WEFT_PROBE_CLOCK=realtime` forces the fallback; `=tsc` forces the TSC even without the flags.

use crate::layout::{CLOCK_REALTIME_NS, CLOCK_TSC};
use std::sync::OnceLock;
use std::time::Duration;

/// A calibration: `unix_ns = unix_base + ((raw - tsc_base) * mult) >> 32`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Calibration {
    /// [`CLOCK_TSC`] or [`CLOCK_REALTIME_NS`].
    pub kind: u32,
    pub tsc_base: u64,
    pub unix_base_ns: u64,
    /// Nanoseconds per tick, 32.32 fixed point.
    pub mult: u64,
    pub tsc_hz: u64,
}

impl Calibration {
    /// The identity calibration of the realtime fallback.
    pub const REALTIME: Calibration =
        Calibration { kind: CLOCK_REALTIME_NS, tsc_base: 0, unix_base_ns: 0, mult: 1 << 32, tsc_hz: 0 };

    /// Convert a raw record timestamp to nanoseconds since the UNIX epoch.
    pub fn to_unix_ns(&self, raw: u64) -> u64 {
        if self.kind != CLOCK_TSC {
            return raw;
        }
        let d = raw.wrapping_sub(self.tsc_base) as i64 as i128;
        let ns = (d * self.mult as i128) >> 32;
        (self.unix_base_ns as i128 + ns).clamp(0, u64::MAX as i128) as u64
    }
}

static USE_TSC: OnceLock<bool> = OnceLock::new();

/// Read the raw clock of records (TSC ticks or realtime ns, see [`kind`]).
#[inline(always)]
pub fn now_raw() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        if let Some(&true) = USE_TSC.get() {
            // SAFETY: rdtsc has no preconditions on x86_64.
            return unsafe { core::arch::x86_64::_rdtsc() };
        }
    }
    slow_now()
}

#[cold]
fn slow_now() -> u64 {
    if USE_TSC.get().is_none() {
        let _ = kind();
        return now_raw();
    }
    realtime_ns()
}

/// Which clock records use, deciding on the first call.
pub fn kind() -> u32 {
    let tsc = *USE_TSC.get_or_init(decide_tsc);
    if tsc { CLOCK_TSC } else { CLOCK_REALTIME_NS }
}

fn decide_tsc() -> bool {
    if !cfg!(target_arch = "x86_64") {
        return false;
    }
    match std::env::var("WEFT_PROBE_CLOCK").as_deref() {
        Ok("realtime") => return false,
        Ok("tsc") => return true,
        _ => {}
    }
    let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else { return false };
    tsc_flags_ok(&info)
}

/// Does a `/proc/cpuinfo` text report an invariant TSC (`constant_tsc` and `nonstop_tsc` on the
/// first CPU's flags line)?
pub fn tsc_flags_ok(cpuinfo: &str) -> bool {
    cpuinfo
        .lines()
        .find(|l| l.starts_with("flags"))
        .map(|l| {
            let mut words = l.split_whitespace();
            let w: Vec<&str> = words.by_ref().collect();
            w.contains(&"constant_tsc") && w.contains(&"nonstop_tsc")
        })
        .unwrap_or(false)
}

/// CLOCK_REALTIME in nanoseconds since the UNIX epoch.
pub fn realtime_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}

/// A (tsc, realtime) pair taken as close together as possible: the read with the narrowest
/// TSC bracket of a few tries.
fn pair() -> (u64, u64) {
    let mut best = (u64::MAX, 0u64, 0u64);
    for _ in 0..5 {
        let a = now_raw();
        let r = realtime_ns();
        let b = now_raw();
        if b.wrapping_sub(a) < best.0 {
            best = (b.wrapping_sub(a), a / 2 + b / 2 + (a & b & 1), r);
        }
    }
    (best.1, best.2)
}

/// Calibrate over `window` (spinning): the TSC rate from two pairs `window` apart.
pub fn calibrate(window: Duration) -> Calibration {
    if kind() != CLOCK_TSC {
        return Calibration::REALTIME;
    }
    let (t0, r0) = pair();
    let m0 = monotonic_ns();
    while monotonic_ns().wrapping_sub(m0) < window.as_nanos() as u64 {
        std::hint::spin_loop();
    }
    let (t1, r1) = pair();
    calibration_from(t0, r0, t1, r1)
}

/// Refine: the rate between an earlier calibration point and now (a longer baseline).
pub fn refine(prev: &Calibration) -> Calibration {
    if prev.kind != CLOCK_TSC {
        return *prev;
    }
    let (t1, r1) = pair();
    let c = calibration_from(prev.tsc_base, prev.unix_base_ns, t1, r1);
    // Re-anchor at the new point so that a realtime step (NTP) does not skew old records much.
    Calibration { tsc_base: t1, unix_base_ns: r1, ..c }
}

fn calibration_from(t0: u64, r0: u64, t1: u64, r1: u64) -> Calibration {
    let dt = t1.wrapping_sub(t0).max(1);
    let dr = r1.saturating_sub(r0).max(1);
    let mult = ((dr as u128) << 32) / dt as u128;
    let hz = (dt as u128 * 1_000_000_000 / dr as u128) as u64;
    Calibration { kind: CLOCK_TSC, tsc_base: t0, unix_base_ns: r0, mult: mult as u64, tsc_hz: hz }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags() {
        assert!(tsc_flags_ok("processor : 0\nflags\t\t: fpu tsc constant_tsc rdtscp nonstop_tsc\n"));
        assert!(!tsc_flags_ok("flags\t\t: fpu tsc constant_tsc rdtscp\n"));
        assert!(!tsc_flags_ok(""));
    }

    #[test]
    fn conversion_tracks_realtime() {
        let c = calibrate(Duration::from_millis(20));
        std::thread::sleep(Duration::from_millis(30));
        let raw = now_raw();
        let real = realtime_ns();
        let conv = c.to_unix_ns(raw);
        // within 2 ms after 30 ms
        assert!(conv.abs_diff(real) < 2_000_000, "converted {conv} vs realtime {real} ({c:?})");
        let r = Calibration { kind: CLOCK_TSC, tsc_base: 1000, unix_base_ns: 5000, mult: 2 << 32, tsc_hz: 0 };
        assert_eq!(r.to_unix_ns(1010), 5020);
        assert_eq!(r.to_unix_ns(990), 4980);
        assert_eq!(Calibration::REALTIME.to_unix_ns(77), 77);
    }
}
