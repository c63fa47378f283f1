//! The timestamp-ordered k-way merge of several sources' event streams, advanced by
//! per-source watermarks.
//!
//! Every source delivers its events in time order (weft-sources' driver guarantees it), so a
//! source's **watermark** — the time of the last event it delivered — bounds all its future
//! events from below. The merge orders events by `(time_ns, source index)` and emits an event
//! only when no source could still deliver one that sorts before it: every source that is not
//! finished and has nothing buffered must have a watermark key `(wm, index)` above the
//! candidate's key. The output therefore depends only on the events, never on how reads and
//! thread scheduling split them into batches — files and FIFOs give the same order.
//!
//! [`Merger`] is the pure state machine (property-tested); the pipeline's merge thread feeds
//! it from the sources' channels (see [`crate::pipeline`]). When a source stalls while others
//! keep producing, the merge keeps receiving up to a bound on buffered events; past it, a
//! source that is a stream (a FIFO fed by a simulator that may itself be waiting for the
//! others) lets the merge *force* progress — the next event is emitted although the stalled
//! source has not caught up; its later events that sort before what was emitted are still
//! passed on (in arrival order) and counted as late. A file never forces: the merge waits.

use std::collections::VecDeque;

use weft_model::Event;

#[derive(Debug, Default)]
struct Src {
    buf: VecDeque<Event>,
    wm: u64,
    seen: bool,
    ended: bool,
}

/// Counters of the merge.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MergeStats {
    /// Events emitted.
    pub events: u64,
    /// Times the merge emitted while a stalled stream source held it back.
    pub forced: u64,
    /// Events that arrived after the merge had emitted a later key (only after forcing).
    pub late: u64,
    /// Events that went back in time within their own source (raised to the watermark).
    pub clamped: u64,
}

/// The merge state machine (see the module docs).
#[derive(Debug, Default)]
pub struct Merger {
    srcs: Vec<Src>,
    buffered: usize,
    /// Key of the last emitted event.
    last: Option<(u64, usize)>,
    stats: MergeStats,
}

impl Merger {
    /// A merge over `n` sources, indexed `0..n`.
    pub fn new(n: usize) -> Self {
        Merger { srcs: (0..n).map(|_| Src::default()).collect(), ..Merger::default() }
    }

    /// Appends a batch from source `src` (events in time order).
    pub fn push(&mut self, src: usize, events: impl IntoIterator<Item = Event>) {
        let Some(s) = self.srcs.get_mut(src) else { return };
        for mut e in events {
            if s.seen && e.time_ns < s.wm {
                self.stats.clamped += 1;
                e.time_ns = s.wm;
            }
            s.wm = e.time_ns;
            s.seen = true;
            s.buf.push_back(e);
            self.buffered += 1;
        }
    }

    /// Source `src` will deliver nothing more.
    pub fn end(&mut self, src: usize) {
        if let Some(s) = self.srcs.get_mut(src) {
            s.ended = true;
        }
    }

    /// Events buffered over all sources.
    pub fn buffered(&self) -> usize {
        self.buffered
    }

    /// True once every source ended and everything was emitted.
    pub fn is_done(&self) -> bool {
        self.buffered == 0 && self.srcs.iter().all(|s| s.ended)
    }

    /// True when source `src` has ended.
    pub fn is_ended(&self, src: usize) -> bool {
        self.srcs.get(src).is_none_or(|s| s.ended)
    }

    /// The smallest bound a source without buffered events puts on what may be emitted:
    /// `(watermark, index)`, or `(0, index)` before its first event.
    fn bound(&self, except: usize) -> Option<(u64, usize)> {
        let mut best: Option<(u64, usize)> = None;
        for (i, s) in self.srcs.iter().enumerate() {
            if i == except {
                continue;
            }
            let k = match s.buf.front() {
                Some(e) => (e.time_ns, i),
                None if s.ended => continue,
                None => (if s.seen { s.wm } else { 0 }, i),
            };
            if best.is_none_or(|b| k < b) {
                best = Some(k);
            }
        }
        best
    }

    fn head(&self) -> Option<(u64, usize)> {
        self.srcs.iter().enumerate().filter_map(|(i, s)| s.buf.front().map(|e| (e.time_ns, i))).min()
    }

    /// Sources the merge is waiting for: not ended, nothing buffered, and a watermark key at
    /// or below the next candidate's (all such sources when nothing is buffered).
    pub fn blocking(&self) -> Vec<usize> {
        let head = self.head();
        self.srcs
            .iter()
            .enumerate()
            .filter(|(i, s)| {
                !s.ended && s.buf.is_empty() && head.is_none_or(|h| (if s.seen { s.wm } else { 0 }, *i) <= h)
            })
            .map(|(i, _)| i)
            .collect()
    }

    /// Moves every event that may be emitted now to `out`, at most `max`. Returns how many.
    pub fn pop_ready(&mut self, out: &mut Vec<Event>, max: usize) -> usize {
        let mut n = 0;
        while n < max {
            let Some((_, i)) = self.head() else { break };
            // Everything of source `i` strictly below the bound the others put may go in one run.
            let bound = self.bound(i);
            let s = &mut self.srcs[i];
            let mut moved = 0;
            while n < max {
                let Some(e) = s.buf.front() else { break };
                if bound.is_some_and(|b| (e.time_ns, i) >= b) {
                    break;
                }
                let Some(e) = s.buf.pop_front() else { break };
                let key = (e.time_ns, i);
                if self.last.is_some_and(|l| key < l) {
                    self.stats.late += 1;
                } else {
                    self.last = Some(key);
                }
                out.push(e);
                moved += 1;
                n += 1;
            }
            self.buffered -= moved;
            if moved == 0 {
                break;
            }
        }
        self.stats.events += n as u64;
        n
    }

    /// Emits the next buffered event although stalled sources hold it back (counted in
    /// [`MergeStats::forced`]). Returns false when nothing is buffered.
    pub fn force_one(&mut self, out: &mut Vec<Event>) -> bool {
        let Some((_, i)) = self.head() else { return false };
        let Some(e) = self.srcs[i].buf.pop_front() else { return false };
        self.buffered -= 1;
        self.stats.forced += 1;
        self.stats.events += 1;
        let key = (e.time_ns, i);
        if self.last.is_some_and(|l| key < l) {
            self.stats.late += 1;
        } else {
            self.last = Some(key);
        }
        out.push(e);
        true
    }

    /// The statistics so far.
    pub fn stats(&self) -> &MergeStats {
        &self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_model::SourceId;
    use weft_model::event::{EventKind, SyncEvent};

    fn ev(t: u64, s: u32) -> Event {
        Event { time_ns: t, raw_time: t, source: SourceId(s), kind: EventKind::Sync(SyncEvent::SendSync) }
    }

    #[test]
    fn waits_for_silent_sources_and_orders_ties_by_index() {
        let mut m = Merger::new(2);
        let mut out = Vec::new();
        m.push(1, vec![ev(5, 1), ev(7, 1)]);
        assert_eq!(m.pop_ready(&mut out, 100), 0, "source 0 has said nothing yet");
        assert_eq!(m.blocking(), vec![0]);
        m.push(0, vec![ev(5, 0)]);
        m.pop_ready(&mut out, 100);
        // (5,0) goes; (5,1) waits: source 0 may still deliver another event at 5, which
        // sorts first.
        assert_eq!(out.iter().map(|e| (e.time_ns, e.source.0)).collect::<Vec<_>>(), vec![(5, 0)]);
        assert_eq!(m.blocking(), vec![0]);
        m.push(0, vec![ev(6, 0)]);
        m.pop_ready(&mut out, 100);
        assert_eq!(
            out.iter().map(|e| (e.time_ns, e.source.0)).collect::<Vec<_>>(),
            vec![(5, 0), (5, 1), (6, 0)]
        );
        m.end(0);
        m.pop_ready(&mut out, 100);
        assert_eq!(out.len(), 4);
        m.end(1);
        assert!(m.is_done());
    }

    #[test]
    fn force_counts() {
        let mut m = Merger::new(2);
        m.push(0, vec![ev(10, 0)]);
        let mut out = Vec::new();
        assert!(m.force_one(&mut out));
        m.push(1, vec![ev(3, 1)]);
        m.end(0);
        m.end(1);
        m.pop_ready(&mut out, 10);
        assert_eq!(m.stats().forced, 1);
        assert_eq!(m.stats().late, 1);
        assert_eq!(out.len(), 2);
    }
}
