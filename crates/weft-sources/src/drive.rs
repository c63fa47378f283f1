//! Driving a parser over a reader: the loop every line-oriented source runs.
//!
//! [`Driver::step`] reads one chunk, parses every complete line, accounts for each line
//! (parsed / skipped / rejected, see [`crate::reject`]) and enforces **time order**: events of
//! one source must never go back in time (the weaver's merge relies on it). An event whose
//! converted time is below the source's latest one is kept — never dropped — with its
//! `time_ns` raised to that latest time (its `raw_time` stays as logged) and counted in
//! [`SourceStats::out_of_order`], the first few with their line numbers.
//!
//! Progress is published through [`LiveCounters`] (atomics, updated once per chunk) so a
//! progress bar can read them from another thread.

use std::io::{self, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use weft_model::Event;

use crate::parse::{LineOutcome, LineParser};
use crate::reader::{LineItem, LineReader};
use crate::reject::{ReasonCounts, RejectLog};

/// Reject reason for lines over the reader's length limit.
pub const REASON_TOO_LONG: &str = "line longer than the limit (discarded)";

/// Counters another thread may read while the source runs.
#[derive(Debug, Default)]
pub struct LiveCounters {
    /// Bytes read.
    pub bytes: AtomicU64,
    /// Lines read.
    pub lines: AtomicU64,
    /// Events produced.
    pub events: AtomicU64,
    /// Lines rejected.
    pub rejected: AtomicU64,
}

/// An event that went back in time (kept, with its time raised).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfOrder {
    /// Line number.
    pub line: u64,
    /// The source's latest time before it, ns.
    pub latest_ns: u64,
    /// Its own converted time, ns.
    pub time_ns: u64,
}

/// What one source did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceStats {
    /// Format name.
    pub format: &'static str,
    /// Bytes read.
    pub bytes: u64,
    /// Lines read (including rejected and skipped ones).
    pub lines: u64,
    /// Lines that produced events.
    pub parsed_lines: u64,
    /// Events produced.
    pub events: u64,
    /// Lines deliberately skipped, per reason.
    pub skipped: ReasonCounts,
    /// Lines rejected.
    pub rejected: RejectLog,
    /// Events whose time went backwards (kept, time raised).
    pub out_of_order: u64,
    /// The first few of them.
    pub out_of_order_samples: Vec<OutOfOrder>,
    /// The input ended in the middle of a line (e.g. a pipe closed early).
    pub ended_mid_line: bool,
}

/// Reads and parses one input (see the module docs).
pub struct Driver<R, P> {
    reader: LineReader<R>,
    parser: P,
    stats: SourceStats,
    counters: Arc<LiveCounters>,
    last_ns: u64,
    finished: bool,
}

impl<R: Read, P: LineParser> Driver<R, P> {
    /// A driver over `reader` with `parser`, keeping `max_samples` reject samples.
    pub fn new(reader: LineReader<R>, parser: P, max_samples: usize) -> Self {
        let stats = SourceStats {
            format: parser.format(),
            rejected: RejectLog::new(max_samples),
            ..SourceStats::default()
        };
        Driver { reader, parser, stats, counters: Arc::default(), last_ns: 0, finished: false }
    }

    /// The live counters (clone the `Arc` to watch from another thread).
    pub fn counters(&self) -> &Arc<LiveCounters> {
        &self.counters
    }

    /// The latest event time so far (ns); every later event is at or after it.
    pub fn watermark_ns(&self) -> u64 {
        self.last_ns
    }

    /// The statistics so far.
    pub fn stats(&self) -> &SourceStats {
        &self.stats
    }

    /// The final statistics.
    pub fn into_stats(self) -> SourceStats {
        self.stats
    }

    /// Reads once and appends the events of every line now complete to `out`. Returns
    /// `false` once the input has ended (the parser's held-back events are then appended).
    pub fn step(&mut self, out: &mut Vec<Event>) -> io::Result<bool> {
        if self.finished {
            return Ok(false);
        }
        let (lines0, events0, rej0) = (self.stats.lines, self.stats.events, self.stats.rejected.count());
        let Driver { reader, parser, stats, last_ns, .. } = self;
        let n = reader.read_lines(|item| {
            stats.lines += 1;
            match item {
                LineItem::Line(line) => {
                    let before = out.len();
                    let outcome = parser.parse_line(line.text, out);
                    order(&mut out[before..], last_ns, stats, line.number);
                    stats.events += (out.len() - before) as u64;
                    match outcome {
                        LineOutcome::Parsed => stats.parsed_lines += 1,
                        LineOutcome::Skipped(r) => stats.skipped.add(r, 1),
                        LineOutcome::Rejected(r) => {
                            if out.len() > before {
                                stats.parsed_lines += 1;
                            }
                            stats.rejected.record(line.number, line.offset, r, line.text)
                        }
                    }
                    if !line.terminated {
                        stats.ended_mid_line = true;
                    }
                }
                LineItem::TooLong { number, offset, prefix } => {
                    stats.rejected.record(number, offset, REASON_TOO_LONG, prefix)
                }
            }
        })?;
        self.stats.bytes = self.reader.bytes_read();
        if n == 0 {
            let before = out.len();
            self.parser.finish(out);
            let line = self.stats.lines;
            order(&mut out[before..], &mut self.last_ns, &mut self.stats, line);
            self.stats.events += (out.len() - before) as u64;
            self.finished = true;
        }
        let c = &self.counters;
        c.bytes.store(self.stats.bytes, Ordering::Relaxed);
        c.lines.fetch_add(self.stats.lines - lines0, Ordering::Relaxed);
        c.events.fetch_add(self.stats.events - events0, Ordering::Relaxed);
        c.rejected.fetch_add(self.stats.rejected.count() - rej0, Ordering::Relaxed);
        Ok(!self.finished)
    }
}

const MAX_ORDER_SAMPLES: usize = 5;

fn order(events: &mut [Event], last_ns: &mut u64, stats: &mut SourceStats, line: u64) {
    for e in events {
        if e.time_ns < *last_ns {
            stats.out_of_order += 1;
            if stats.out_of_order_samples.len() < MAX_ORDER_SAMPLES {
                stats.out_of_order_samples.push(OutOfOrder { line, latest_ns: *last_ns, time_ns: e.time_ns });
            }
            e.time_ns = *last_ns;
        } else {
            *last_ns = e.time_ns;
        }
    }
}
