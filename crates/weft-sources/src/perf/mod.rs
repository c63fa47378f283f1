//! Kernel capture through `perf_event_open(2)`: tracefs tracepoints (any, by name, decoded
//! from their `format` files), the scheduler and syscall tracepoints as typed
//! [`weft_model::event::KernelEvent`]s, and uprobes on unmodified binaries — per-CPU mmap
//! rings, bounded captures, lost-record accounting (the kernel half of Fay and EXIST).
//!
//! | module | what |
//! |---|---|
//! | [`sys`] | the thin safe layer over `perf_event_open`, its ioctls, tracefs and sysfs |
//! | [`ring`] | a perf mmap ring buffer (acquire/release on `data_head`/`data_tail`, wrapped records) |
//! | [`record`] | ring record parser (samples, LOST, COMM, FORK/EXIT), zero-copy, never trusts a length |
//! | [`format`] | tracepoint `format` files and generic field decoding |
//! | [`decode`] | records → [`weft_model::Event`]s |
//! | [`capture`] | a whole capture: which events per CPU/task/cgroup, the drain loop, counters |
//! | [`uprobe`] | `BINARY:FUNCTION` → file offset through the ELF symbol table |
//! | [`exist`] | EXIST's compact 24-byte scheduler records: on-disk format, writer, reader |
//! | [`pt`] | the `intel_pt` PMU EXIST's AUX captures open, or why this machine has none |
//!
//! Needs root (or `perf_event_paranoid` ≤ -1 with the capabilities): errors say so.

pub mod capture;
pub mod child;
pub mod decode;
pub mod error;
pub mod exist;
pub mod format;
pub mod pt;
pub mod record;
pub mod ring;
pub mod sys;
mod syscall_table;
pub mod uprobe;

pub use capture::{Capture, CaptureConfig, CaptureStats, CpuStats, Detached, Target};
pub use child::StoppedChild;
pub use error::PerfError;
pub use uprobe::UprobeTarget;

/// The x86_64 name of system call `nr` (`None` for unassigned numbers).
pub fn syscall_name(nr: i64) -> Option<&'static str> {
    usize::try_from(nr).ok().and_then(|i| syscall_table::X86_64.get(i)).copied().filter(|s| !s.is_empty())
}

/// The number of the x86_64 system call `name`.
pub fn syscall_number(name: &str) -> Option<i64> {
    syscall_table::X86_64.iter().position(|s| *s == name).map(|i| i as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syscall_names() {
        assert_eq!(syscall_name(0), Some("read"));
        assert_eq!(syscall_name(35), Some("nanosleep"));
        assert_eq!(syscall_name(74), Some("fsync"));
        assert_eq!(syscall_name(110), Some("getppid"));
        assert_eq!(syscall_name(230), Some("clock_nanosleep"));
        assert_eq!(syscall_name(435), Some("clone3"));
        assert_eq!(syscall_name(462), Some("mseal"));
        assert_eq!(syscall_name(400), None);
        assert_eq!(syscall_name(-1), None);
        assert_eq!(syscall_number("getppid"), Some(110));
    }
}
