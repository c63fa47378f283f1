//! What the loop runs against: a [`Backend`] gives it each epoch's traces of a request type,
//! switches tracepoints and says whether the tracing pipeline is congested. The same loop runs
//! live (the collector's read API for traces, its control API — `POST /api/control/probes`
//! with a [`ProbeCommand`] — for switching, agents' reports for congestion) and in replay
//! ([`Replay`]: exhaustive traces shown as if only the enabled tracepoints were on). The live
//! backend is [`live::Live`].

pub mod live;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufReader, Read};
use std::path::Path;
use std::time::Duration;

use weft_analyze::vaif::hb::{PathFinder, PathRecord, Tracepoints};
use weft_control::proto::{ProbeCommand, ProbeOp};
use weft_model::codec::stream;
use weft_model::{Span, TraceId};
use weft_probe::Level;

use crate::Error;
use crate::project::Visibility;

/// An error of a backend (network, store, file), with its message.
pub type BackendError = Box<dyn std::error::Error + Send + Sync>;

/// One epoch's time window, ns since the epoch (replay: positions in the input).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Epoch number, from 0.
    pub epoch: u64,
    /// Start of the window.
    pub start_ns: u64,
    /// End of the window.
    pub end_ns: u64,
}

/// The loop's view of the system.
pub trait Backend {
    /// Starts epoch `epoch` of `length`; `None` when no more traces will come (replay: the
    /// input is exhausted).
    fn begin_epoch(&mut self, epoch: u64, length: Duration) -> Result<Option<Window>, BackendError>;
    /// Waits up to `interval` (live: until the next check; replay: not at all) and says
    /// whether any agent's queue is over half full — while it is, the loop enables nothing,
    /// or the effect of a hypothesis may not show.
    fn congested(&mut self, interval: Duration) -> Result<bool, BackendError>;
    /// At most `max` traces of `request_type` (root span name) recorded in `window`, as
    /// recorded (with every tracepoint that was on).
    fn traces(
        &mut self,
        request_type: &str,
        window: &Window,
        max: usize,
    ) -> Result<Vec<Vec<Span>>, BackendError>;
    /// Applies a switch (enable or disable by selector); returns how many tracepoints it
    /// matched.
    fn switch(&mut self, command: &ProbeCommand) -> Result<usize, BackendError>;
}

/// Replays exhaustive traces: epoch `k` takes the next `per_epoch` traces of the input and
/// shows each with only the tracepoints on at that moment (the always-on globs and what was
/// enabled; see [`crate::project`]).
pub struct Replay<I> {
    source: I,
    per_epoch: usize,
    always_on: Vec<String>,
    enabled: BTreeSet<String>,
    known: BTreeSet<String>,
    current: BTreeMap<String, Vec<Vec<Span>>>,
    finder: PathFinder,
    names: Tracepoints,
    records: Vec<PathRecord>,
    seen: usize,
    dropped: usize,
}

impl<I: Iterator<Item = Vec<Span>>> Replay<I> {
    /// Replays `source` (one trace per item), `per_epoch` traces per epoch; `always_on`
    /// globs; `known` tracepoints are those a selector may match (the search space's).
    pub fn new(source: I, per_epoch: usize, always_on: Vec<String>, known: BTreeSet<String>) -> Replay<I> {
        Replay {
            source,
            per_epoch: per_epoch.max(1),
            always_on,
            enabled: BTreeSet::new(),
            known,
            current: BTreeMap::new(),
            finder: PathFinder::default(),
            names: Tracepoints::default(),
            records: Vec::new(),
            seen: 0,
            dropped: 0,
        }
    }

    /// The tracepoints enabled now (beyond the always-on set).
    pub fn enabled(&self) -> &BTreeSet<String> {
        &self.enabled
    }

    /// Traces replayed so far.
    pub fn traces_seen(&self) -> usize {
        self.seen
    }

    /// Traces an epoch had but the loop did not ask for (over its per-epoch cap).
    pub fn dropped(&self) -> usize {
        self.dropped
    }
}

impl<I: Iterator<Item = Vec<Span>>> Backend for Replay<I> {
    fn begin_epoch(&mut self, epoch: u64, _length: Duration) -> Result<Option<Window>, BackendError> {
        self.dropped += self.current.values().map(Vec::len).sum::<usize>();
        self.current.clear();
        let start = self.seen as u64;
        let vis = Visibility { always_on: &self.always_on, enabled: &self.enabled };
        for trace in self.source.by_ref().take(self.per_epoch) {
            // Exhaustive traces must be well-formed: no root, a cycle… is an error naming it.
            let root = self.finder.find(&trace, self.seen, &mut self.names, &mut self.records)?;
            self.seen += 1;
            let name = trace[root].name.to_string();
            self.current.entry(name).or_default().push(vis.project(&trace));
        }
        if self.seen as u64 == start {
            return Ok(None);
        }
        Ok(Some(Window { epoch, start_ns: start, end_ns: self.seen as u64 }))
    }

    fn congested(&mut self, _interval: Duration) -> Result<bool, BackendError> {
        Ok(false)
    }

    fn traces(
        &mut self,
        request_type: &str,
        _window: &Window,
        max: usize,
    ) -> Result<Vec<Vec<Span>>, BackendError> {
        let mut v = self.current.remove(request_type).unwrap_or_default();
        if v.len() > max {
            self.dropped += v.len() - max;
            v.truncate(max);
        }
        Ok(v)
    }

    fn switch(&mut self, command: &ProbeCommand) -> Result<usize, BackendError> {
        let Some(selector) = command.validate()? else { return Ok(0) };
        let matched: Vec<String> =
            self.known.iter().filter(|n| selector.matches(n, "", Level::Info)).cloned().collect();
        match command.op {
            ProbeOp::Enable => self.enabled.extend(matched.iter().cloned()),
            ProbeOp::Disable | ProbeOp::ForceDisable => {
                for m in &matched {
                    self.enabled.remove(m);
                }
            }
            ProbeOp::List => {}
        }
        Ok(matched.len())
    }
}

/// Spans grouped by trace, the traces in order of first appearance.
#[derive(Default)]
pub(crate) struct ByTrace {
    order: Vec<TraceId>,
    traces: std::collections::HashMap<TraceId, Vec<Span>>,
}

impl ByTrace {
    pub(crate) fn push(&mut self, s: Span) {
        let order = &mut self.order;
        self.traces
            .entry(s.trace_id)
            .or_insert_with(|| {
                order.push(s.trace_id);
                Vec::new()
            })
            .push(s);
    }

    pub(crate) fn finish(mut self) -> Vec<Vec<Span>> {
        self.order.into_iter().filter_map(|t| self.traces.remove(&t)).collect()
    }
}

/// Reads trace files in any format weft reads (detected from the content, else the name),
/// and returns their traces in order of first appearance, each its spans.
pub fn read_traces(paths: &[impl AsRef<Path>]) -> Result<Vec<Vec<Span>>, Error> {
    let mut by_trace = ByTrace::default();
    for path in paths {
        let path = path.as_ref();
        let name = path.display().to_string();
        let io = |e: std::io::Error| Error::Io { path: name.clone(), source: e };
        let mut f = std::fs::File::open(path).map_err(io)?;
        let mut head = vec![0u8; 64 << 10];
        let n = f.read(&mut head).map_err(io)?;
        head.truncate(n);
        let format = weft_model::codec::transcode::resolve_input(None, Some(path), &head)
            .filter(|f| f.can_read())
            .ok_or_else(|| Error::Format { path: name.clone() })?;
        let f = std::fs::File::open(path).map_err(io)?;
        let codec = |e: weft_model::codec::CodecError| Error::Codec { message: e.in_file(&name).to_string() };
        let mut reader = stream::reader(format, BufReader::new(f), false).map_err(codec)?;
        let mut batch = Vec::new();
        loop {
            batch.clear();
            let more = reader.next_batch(&mut batch, 10_000).map_err(codec)?;
            batch.drain(..).for_each(|s| by_trace.push(s));
            if !more {
                break;
            }
        }
    }
    Ok(by_trace.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_model::SpanId;

    fn trace(t: u128) -> Vec<Span> {
        let s = |id, parent, name| crate::test_support::span(t, id, parent, name, id, 100 - id);
        vec![s(1, 0, "root"), s(2, 1, "a"), s(3, 2, "b")]
    }

    #[test]
    fn replay_shows_what_is_enabled() {
        let known: BTreeSet<String> = ["root", "a", "b"].map(String::from).into();
        let mut r = Replay::new((1..=5).map(trace), 2, vec!["root".into()], known);
        let w = r.begin_epoch(0, Duration::ZERO).unwrap().unwrap();
        assert_eq!((w.start_ns, w.end_ns), (0, 2));
        let t = r.traces("root", &w, 1).unwrap();
        assert_eq!((t.len(), t[0].len(), r.dropped()), (1, 1, 1));
        let cmd = ProbeCommand {
            op: ProbeOp::Enable,
            selector: Some("glob:b*".into()),
            pid: None,
            service: None,
            agent: None,
        };
        assert_eq!(r.switch(&cmd).unwrap(), 1);
        let w = r.begin_epoch(1, Duration::ZERO).unwrap().unwrap();
        let t = r.traces("root", &w, 10).unwrap();
        assert_eq!(t[0].iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["root", "b"]);
        assert_eq!(t[0][1].parent_span_id, Some(SpanId::from_u64(1)));
        assert!(r.traces("nope", &w, 10).unwrap().is_empty());
        assert!(r.begin_epoch(2, Duration::ZERO).unwrap().is_some());
        assert!(r.begin_epoch(3, Duration::ZERO).unwrap().is_none());
        assert_eq!(r.traces_seen(), 5);
        let bad = ProbeCommand { selector: Some("name:".into()), ..cmd };
        assert!(r.switch(&bad).unwrap_err().to_string().contains("selector"));
        // A trace without a root is an error naming it.
        let mut broken = trace(9);
        broken[0].parent_span_id = Some(SpanId::from_u64(7));
        let mut r = Replay::new(std::iter::once(broken), 2, vec![], BTreeSet::new());
        let e = r.begin_epoch(0, Duration::ZERO).unwrap_err().to_string();
        assert!(e.contains("00000000000000000000000000000009"), "{e}");
    }
}
