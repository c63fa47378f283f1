//! Benchmarks timed in the calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`) instead of
//! wall time (feature `criterion`).
//!
//! The project's machine has two vCPUs that builds and other jobs share. Wall-clock criterion
//! samples then include the time the benchmark thread waits for a CPU: at a load average of 5
//! every figure grows about 3× (a bare `rdtsc` loop measured 9.7 ns per read idle and 32.7 ns
//! at load 5 on the same machine). The thread's CPU time counts only the time it runs, so the
//! figures are per core and mostly independent of the other jobs (caches they share remain).
//!
//! ```no_run
//! use criterion::{Criterion, criterion_group, criterion_main};
//! use weft_testkit::cpu::ThreadCpu;
//!
//! fn my_bench(c: &mut Criterion<ThreadCpu>) {
//!     c.bench_function("sum", |b| b.iter(|| (0..100u64).sum::<u64>()));
//! }
//! criterion_group! {
//!     name = benches;
//!     config = Criterion::default().with_measurement(ThreadCpu::default());
//!     targets = my_bench
//! }
//! criterion_main!(benches);
//! ```

use criterion::Throughput;
use criterion::measurement::{Measurement, ValueFormatter};

/// The calling thread's CPU time in ns.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux supports.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}

/// Criterion measurement: CPU time of the benchmark thread, in ns. Values print as
/// `ns cpu`, `µs cpu`, …; element throughputs as `elem/s (cpu)`, or `spans/s (cpu)` with
/// [`ThreadCpu::spans`].
#[derive(Debug, Clone, Copy)]
pub struct ThreadCpu {
    /// Units of `Throughput::Elements` per second: ×1, ×10³, ×10⁶, ×10⁹.
    element_units: [&'static str; 4],
}

impl Default for ThreadCpu {
    fn default() -> Self {
        ThreadCpu { element_units: [" elem/s (cpu)", "K elem/s (cpu)", "M elem/s (cpu)", "G elem/s (cpu)"] }
    }
}

impl ThreadCpu {
    /// Element throughputs counted in spans.
    pub fn spans() -> ThreadCpu {
        ThreadCpu {
            element_units: [" spans/s (cpu)", "K spans/s (cpu)", "M spans/s (cpu)", "G spans/s (cpu)"],
        }
    }
}

impl Measurement for ThreadCpu {
    type Intermediate = u64;
    type Value = u64;
    fn start(&self) -> u64 {
        thread_cpu_ns()
    }
    fn end(&self, start: u64) -> u64 {
        thread_cpu_ns().saturating_sub(start)
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, v: &u64) -> f64 {
        *v as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        self
    }
}

/// Scales `values` (ns per `count` items) to items per second in the unit that fits
/// `typical_ns`; returns the unit's index (×1, ×10³, ×10⁶, ×10⁹).
fn per_second(count: f64, typical_ns: f64, values: &mut [f64]) -> usize {
    let rate = count * 1e9 / typical_ns;
    let idx = [1e3, 1e6, 1e9].iter().take_while(|&&limit| rate >= limit).count();
    let div = [1.0, 1e3, 1e6, 1e9][idx];
    for v in values {
        *v = count * 1e9 / *v / div;
    }
    idx
}

impl ValueFormatter for ThreadCpu {
    fn scale_throughputs(&self, typical: f64, throughput: &Throughput, values: &mut [f64]) -> &'static str {
        match *throughput {
            Throughput::Bytes(b) | Throughput::BytesDecimal(b) => {
                [" B/s (cpu)", "KB/s (cpu)", "MB/s (cpu)", "GB/s (cpu)"]
                    [per_second(b as f64, typical, values)]
            }
            Throughput::Bits(b) => [" b/s (cpu)", "Kb/s (cpu)", "Mb/s (cpu)", "Gb/s (cpu)"]
                [per_second(b as f64, typical, values)],
            Throughput::Elements(e) | Throughput::ElementsAndBytes { elements: e, .. } => {
                self.element_units[per_second(e as f64, typical, values)]
            }
        }
    }
    fn scale_values(&self, typical_ns: f64, values: &mut [f64]) -> &'static str {
        let (factor, unit) = if typical_ns < 1e3 {
            (1.0, "ns cpu")
        } else if typical_ns < 1e6 {
            (1e-3, "µs cpu")
        } else if typical_ns < 1e9 {
            (1e-6, "ms cpu")
        } else {
            (1e-9, "s cpu")
        };
        for v in values {
            *v *= factor;
        }
        unit
    }
    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_cpu_work_and_not_sleep() {
        let m = ThreadCpu::default();
        let s = m.start();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let slept = m.end(s);
        // A fixed amount of work (tens of ms of CPU), however long it waits for a CPU.
        let s = m.start();
        let mut x = 0u64;
        for i in 0..50_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let busy = m.end(s);
        // Wall time would count the 50 ms of sleep; CPU time counts (almost) none of it.
        assert!(slept < 5_000_000, "sleeping 50 ms counted {slept} ns of CPU");
        assert!(busy > 10 * slept.max(1), "work counted {busy} ns of CPU, sleep {slept} ns");
    }

    #[test]
    fn formats_spans_per_second() {
        let m = ThreadCpu::spans();
        let mut v = [1_000_000.0];
        let unit = m.scale_throughputs(1_000_000.0, &Throughput::Elements(1024), &mut v);
        assert_eq!(unit, "M spans/s (cpu)");
        assert!((v[0] - 1.024).abs() < 1e-9);
        let mut v = [25.0];
        assert_eq!(m.scale_values(25.0, &mut v), "ns cpu");
    }
}
