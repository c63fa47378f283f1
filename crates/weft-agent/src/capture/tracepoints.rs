//! The software backend's second half: the target's weft-probe tracepoints switched on for a
//! capture's period and back off at its end.
//!
//! The switch goes through each target process's segment control area, as `weft probes
//! enable` does ([`crate::control`]): one request byte per tracepoint, the process's control
//! thread applies it and acknowledges. [`Planned::check`] finds the tracepoints the selectors
//! match that are off (before the capture opens any perf event, so a request naming
//! tracepoints the target lacks is refused having opened nothing); [`Planned::on`] enables
//! exactly those and remembers them; [`Switched::off`] (or dropping it, on
//! every path out of a capture) disables exactly those again, so the enabled set is the one
//! before the capture — tracepoints that were on stay on. A process that exited meanwhile is
//! skipped without waiting. Their records are drained by the agent like any other: spans and
//! events inside the request spans of weft-probe's own context.

use std::path::Path;
use std::time::Duration;

use weft_probe::consumer::{self, Segment};
use weft_probe::registry::Op;
use weft_probe::select::Selector;

use super::engine::CaptureError;

/// How long a switch waits for a process's acknowledgement.
pub const ACK_WAIT: Duration = Duration::from_millis(500);

/// Tracepoints a capture switched on, per process.
pub struct Switched {
    procs: Vec<(Segment, Vec<u32>)>,
}

impl std::fmt::Debug for Switched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Switched").field("enabled", &self.count()).finish()
    }
}

/// The selectors of a request (`all`, names, globs, `group:G`, `level:L`).
pub fn parse_selectors(list: &[String]) -> Result<Vec<Selector>, CaptureError> {
    list.iter()
        .map(|s| {
            Selector::parse(s)
                .map_err(|e| CaptureError::Tracepoints(format!("tracepoint selector {s:?}: {e}")))
        })
        .collect()
}

/// The tracepoints a capture will switch on, found (and the request checked) before anything
/// is opened; [`Planned::on`] switches them.
pub struct Planned {
    procs: Vec<(Segment, Vec<u32>)>,
}

impl std::fmt::Debug for Planned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Planned")
            .field("to_enable", &self.procs.iter().map(|p| p.1.len()).sum::<usize>())
            .finish()
    }
}

impl Planned {
    /// Finds, in the segments of `dir` belonging to `pids`, the tracepoints `selectors`
    /// match that are off; nothing is switched yet. Refused when no target process has a
    /// segment there or none of its tracepoints matches.
    pub fn check(dir: &Path, pids: &[u32], selectors: &[Selector]) -> Result<Planned, CaptureError> {
        let err = |m: String| CaptureError::Tracepoints(m);
        let paths = consumer::discover(dir).map_err(|e| err(e.to_string()))?;
        let mut procs = Vec::new();
        let (mut segments, mut matched) = (0usize, 0usize);
        for path in paths {
            let Ok(seg) = Segment::open_shared(&path) else { continue };
            if !pids.contains(&seg.pid()) || !seg.producer_alive() {
                continue;
            }
            segments += 1;
            let list = seg.registry().map_err(|e| err(e.to_string()))?;
            let hits: Vec<_> = list
                .iter()
                .filter(|t| selectors.iter().any(|s| s.matches(&t.name, &t.group, t.level)))
                .collect();
            matched += hits.len();
            let ids: Vec<u32> = hits.iter().filter(|t| !t.enabled).map(|t| t.id).collect();
            if !ids.is_empty() {
                procs.push((seg, ids));
            }
        }
        if segments == 0 {
            return Err(err(format!(
                "tracepoints requested, but no target process ({}) has a weft-probe segment in {}",
                pids.iter().map(u32::to_string).collect::<Vec<_>>().join(", "),
                dir.display()
            )));
        }
        if matched == 0 {
            let sel: Vec<String> = selectors.iter().map(ToString::to_string).collect();
            return Err(err(format!("no tracepoint of the target matches {}", sel.join(", "))));
        }
        Ok(Planned { procs })
    }

    /// Switches the planned tracepoints on and waits for the processes' acknowledgements;
    /// what was switched is switched back off when the result is dropped or
    /// [`Switched::off`].
    pub fn on(self) -> Result<Switched, CaptureError> {
        let mut sw = Switched { procs: Vec::new() };
        let mut pending = Vec::new();
        for (seg, ids) in self.procs {
            let reqs: Vec<(u32, Op)> = ids.iter().map(|&i| (i, Op::Enable)).collect();
            let seq = seg.control(&reqs).map_err(|e| CaptureError::Tracepoints(e.to_string()))?;
            pending.push(seq);
            sw.procs.push((seg, ids));
        }
        for ((seg, _), seq) in sw.procs.iter().zip(pending) {
            if !seg.wait_applied(seq, ACK_WAIT) {
                tracing::warn!(pid = seg.pid(), "capture: a process did not acknowledge its tracepoints");
            }
        }
        Ok(sw)
    }
}

impl Switched {
    /// Tracepoints switched on (summed over the processes).
    pub fn count(&self) -> usize {
        self.procs.iter().map(|(_, ids)| ids.len()).sum()
    }

    /// Switches off what [`Planned::on`] switched on (waiting for live processes only).
    pub fn off(&mut self) {
        let mut pending = Vec::new();
        for (seg, ids) in self.procs.drain(..) {
            let reqs: Vec<(u32, Op)> = ids.iter().map(|&i| (i, Op::Disable)).collect();
            match seg.control(&reqs) {
                Ok(seq) if seg.producer_alive() => pending.push((seg, seq)),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "capture: cannot switch tracepoints back off"),
            }
        }
        for (seg, seq) in pending {
            if !seg.wait_applied(seq, ACK_WAIT) {
                tracing::warn!(pid = seg.pid(), "capture: a process did not acknowledge its tracepoints off");
            }
        }
    }
}

impl Drop for Switched {
    fn drop(&mut self) {
        self.off();
    }
}
