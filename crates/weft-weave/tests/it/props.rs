//! Property tests of the merge: whatever the batching and the order in which sources deliver,
//! the output is every event exactly once, in (time, source) order, stable within a source.

use proptest::prelude::*;
use weft_model::event::{EventKind, SyncEvent};
use weft_model::{Event, SourceId};
use weft_weave::merge::Merger;

fn ev(t: u64, s: usize, seq: u64) -> Event {
    // raw_time carries the per-source sequence number to check stability.
    Event {
        time_ns: t,
        raw_time: seq,
        source: SourceId(s as u32),
        kind: EventKind::Sync(SyncEvent::SendSync),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn merge_orders_under_any_chunking(
        gaps in proptest::collection::vec(proptest::collection::vec(0u64..4, 0..40), 1..5),
        chunks in proptest::collection::vec(1usize..7, 1..30),
        picks in proptest::collection::vec(0usize..5, 1..200),
    ) {
        // Per-source monotone times (small gaps → many ties).
        let streams: Vec<Vec<Event>> = gaps.iter().enumerate().map(|(s, g)| {
            let mut t = 0;
            g.iter().enumerate().map(|(i, d)| { t += d; ev(t, s, i as u64) }).collect()
        }).collect();
        let n = streams.len();
        let mut want: Vec<(u64, usize, u64)> = streams.iter().flatten().map(|e| (e.time_ns, e.source.0 as usize, e.raw_time)).collect();
        want.sort();

        let mut m = Merger::new(n);
        let mut pos = vec![0usize; n];
        let mut ended = vec![false; n];
        let mut out = Vec::new();
        let mut k = 0;
        // Deliver in an arbitrary interleaving of arbitrary chunk sizes, popping as we go.
        while ended.iter().any(|e| !e) {
            let live: Vec<usize> = (0..n).filter(|&i| !ended[i]).collect();
            let s = live[picks[k % picks.len()] % live.len()];
            let c = chunks[k % chunks.len()];
            k += 1;
            let end = (pos[s] + c).min(streams[s].len());
            m.push(s, streams[s][pos[s]..end].iter().cloned());
            pos[s] = end;
            if end == streams[s].len() { m.end(s); ended[s] = true; }
            m.pop_ready(&mut out, 1 + k % 9);
        }
        m.pop_ready(&mut out, usize::MAX);
        prop_assert!(m.is_done());
        let got: Vec<(u64, usize, u64)> = out.iter().map(|e| (e.time_ns, e.source.0 as usize, e.raw_time)).collect();
        prop_assert_eq!(got, want);
        prop_assert_eq!(m.stats().late, 0);
    }
}
