//! Intel PT on this machine: the `intel_pt` PMU that EXIST's per-core AUX captures are
//! opened on, or a typed error saying why there is none.
//!
//! Opening a capture starts here: [`IntelPtPmu::open`] finds the PMU's type number (the
//! `perf_event_attr.type` of a PT event) and its capabilities (`caps/*`: ToPA with multiple
//! entries, IP filtering, cycle-accurate mode, ...). On a CPU without Intel PT — an AMD
//! processor, an Intel one too old, or a virtual machine that does not pass PT through — the
//! kernel has no `/sys/bus/event_source/devices/intel_pt` and the answer is
//! [`NoIntelPt`], naming the CPU, so that the caller falls back to the software backend.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where the kernel lists its PMUs.
pub const PMU_DEVICES: &str = "/sys/bus/event_source/devices";

/// The machine's Intel PT PMU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntelPtPmu {
    /// `perf_event_attr.type` of Intel PT events.
    pub pmu_type: u32,
    /// The PMU's capabilities (`caps/NAME` → value), e.g. `topa_multiple_entries`,
    /// `ip_filtering`, `psb_cyc`.
    pub caps: BTreeMap<String, u32>,
}

/// Why Intel PT cannot be used here.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NoIntelPt {
    /// The kernel exposes no `intel_pt` PMU.
    #[error("this CPU has no Intel PT ({reason}); use the software backend")]
    Absent {
        /// The CPU and what was looked at.
        reason: String,
    },
    /// The PMU directory exists but cannot be read as the kernel writes it.
    #[error("{}: {msg}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
}

impl IntelPtPmu {
    /// The Intel PT PMU of this machine (from [`PMU_DEVICES`] and `/proc/cpuinfo`).
    pub fn open() -> Result<Self, NoIntelPt> {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        Self::open_at(Path::new(PMU_DEVICES), &cpuinfo)
    }

    /// The Intel PT PMU under `devices` (a sysfs PMU directory); `cpuinfo` (the text of
    /// `/proc/cpuinfo`) names the CPU when there is none.
    pub fn open_at(devices: &Path, cpuinfo: &str) -> Result<Self, NoIntelPt> {
        let dir = devices.join("intel_pt");
        let ty = dir.join("type");
        let text = match std::fs::read_to_string(&ty) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(NoIntelPt::Absent { reason: absent_reason(&dir, cpuinfo) });
            }
            Err(e) => return Err(NoIntelPt::Unreadable { path: ty, msg: e.to_string() }),
        };
        let pmu_type = text.trim().parse().map_err(|_| NoIntelPt::Unreadable {
            path: ty.clone(),
            msg: format!("not a number: {text:?}"),
        })?;
        let mut caps = BTreeMap::new();
        if let Ok(entries) = std::fs::read_dir(dir.join("caps")) {
            for entry in entries.flatten() {
                let path = entry.path();
                let Some(name) = path.file_name().and_then(|n| n.to_str()).map(str::to_owned) else {
                    continue;
                };
                let value = std::fs::read_to_string(&path)
                    .map_err(|e| NoIntelPt::Unreadable { path: path.clone(), msg: e.to_string() })?;
                let v = value.trim().parse().map_err(|_| NoIntelPt::Unreadable {
                    path: path.clone(),
                    msg: format!("not a number: {value:?}"),
                })?;
                caps.insert(name, v);
            }
        }
        Ok(IntelPtPmu { pmu_type, caps })
    }
}

/// "AMD EPYC: no intel_pt PMU in /sys/…" / "Intel(R) Xeon(R) …, the intel_pt CPU flag is
/// not set: …" — the CPU and what is missing.
fn absent_reason(dir: &Path, cpuinfo: &str) -> String {
    let field = |key: &str| {
        cpuinfo.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == key).then(|| v.trim().to_owned())
        })
    };
    let cpu = field("model name").or_else(|| field("vendor_id")).unwrap_or_else(|| "unknown CPU".into());
    let flag = field("flags").is_some_and(|f| f.split_whitespace().any(|x| x == "intel_pt"));
    if flag {
        format!(
            "{cpu}: the CPU has the intel_pt flag but the kernel has no {} (CONFIG_PERF_EVENTS_INTEL_PT?)",
            dir.display()
        )
    } else {
        format!("{cpu}: no intel_pt CPU flag, no {}", dir.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pmu_directory_is_read() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("intel_pt/caps")).unwrap();
        std::fs::write(d.path().join("intel_pt/type"), "9\n").unwrap();
        std::fs::write(d.path().join("intel_pt/caps/topa_multiple_entries"), "1\n").unwrap();
        let pmu = IntelPtPmu::open_at(d.path(), "").unwrap();
        assert_eq!(pmu.pmu_type, 9);
        assert_eq!(pmu.caps.get("topa_multiple_entries"), Some(&1));
        std::fs::write(d.path().join("intel_pt/type"), "x\n").unwrap();
        assert!(matches!(IntelPtPmu::open_at(d.path(), ""), Err(NoIntelPt::Unreadable { .. })));
    }

    #[test]
    fn an_absent_pmu_names_the_cpu() {
        let d = tempfile::tempdir().unwrap();
        let e = IntelPtPmu::open_at(
            d.path(),
            "vendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R)\nflags\t: fpu intel_pt\n",
        )
        .unwrap_err();
        let dir = d.path().join("intel_pt");
        assert_eq!(
            e.to_string(),
            format!(
                "this CPU has no Intel PT (Intel(R) Xeon(R): the CPU has the intel_pt flag but the kernel has no {} \
                 (CONFIG_PERF_EVENTS_INTEL_PT?)); use the software backend",
                dir.display()
            )
        );
    }
}
