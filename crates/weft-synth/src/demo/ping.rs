//! Really woven traces for the demo: the synthetic SimBricks ping of [`crate::simlog`]
//! (client and server gem5 hosts with i40e nicbm NICs, two ns-3 switches) is written to a
//! scratch directory and woven by weft-weave's pipeline — the code `weft weave` runs — so the
//! demo shows what the weavers make of simulator logs: one trace per ping round, host → NIC →
//! sw0 → sw1 → NIC → host and back, every hand-over between components a parent link plus a
//! `caused_by` link.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::simlog::{self, Scenario};
use weft_model::Span;
use weft_weave::sink::{MemorySink, SinkSpec};
use weft_weave::{Run, Topology, WeaveError};

/// Why the ping could not be woven.
#[derive(Debug, thiserror::Error)]
pub enum PingError {
    /// Writing the logs to the scratch directory failed.
    #[error("{path}: {err}", path = .0.display(), err = .1)]
    Io(PathBuf, std::io::Error),
    /// The pipeline refused the topology or failed.
    #[error(transparent)]
    Weave(#[from] WeaveError),
    /// A source stopped with an error.
    #[error("source {0}: {1}")]
    Source(String, String),
}

/// The woven ping.
#[derive(Debug, Clone)]
pub struct WovenPing {
    /// All spans (one trace of ~47 spans per round, plus the client's 1-span `recvfrom`).
    pub spans: Vec<Span>,
    /// Log lines the parsers rejected (0 for the synthetic logs; reported, not hidden).
    pub rejected_lines: u64,
    /// Cross-component causes or effects the weaver could not match.
    pub unmatched: u64,
}

/// Removes the scratch directory when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), PingError> {
    std::fs::write(path, bytes).map_err(|e| PingError::Io(path.to_owned(), e))
}

/// Weaves `rounds` ping rounds whose first round starts at `first_ns` (ns since the UNIX
/// epoch), one every `period_ns` (at least 1 ms); `seed` picks the span and trace ids.
pub fn woven_ping(rounds: u64, first_ns: u64, period_ns: u64, seed: u64) -> Result<WovenPing, PingError> {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "weft-demo-ping-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| PingError::Io(dir.clone(), e))?;
    let _scratch = Scratch(dir.clone());
    let scenario =
        Scenario { rounds, period_ps: period_ns.max(1_000_000).saturating_mul(1000), ..Scenario::default() };
    for (log, bytes) in scenario.generate() {
        write(&dir.join(log.file_name()), &bytes)?;
    }
    write(&dir.join("kernel.syms"), simlog::kernel_syms().as_bytes())?;
    write(&dir.join("i40e.syms"), simlog::i40e_syms().as_bytes())?;
    // Simulated time `start_ps` is shown at `first_ns`.
    let epoch_ns = first_ns.saturating_sub(scenario.start_ps / 1000);
    let text = format!("[run]\nseed = {seed}\nepoch_ns = {epoch_ns}\n\n{}", scenario.topology("."));
    let file = dir.join("topology.toml");
    write(&file, text.as_bytes())?;
    let topo = Topology::parse(&text, &file, &dir).map_err(WeaveError::from)?;
    let mem = MemorySink::new();
    let report = Run::start(&topo, vec![SinkSpec::Memory(mem.clone())])?.wait()?;
    if let Some(s) = report.sources.iter().find(|s| s.error.is_some()) {
        return Err(PingError::Source(s.name.clone(), s.error.clone().unwrap_or_default()));
    }
    Ok(WovenPing {
        spans: mem.spans(),
        rejected_lines: report.sources.iter().map(|s| s.stats.rejected.count()).sum(),
        unmatched: report
            .weave
            .links
            .iter()
            .map(|l| l.stats.unmatched_causes + l.stats.unmatched_effects)
            .sum(),
    })
}
