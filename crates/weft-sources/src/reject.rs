//! Per-source accounting of lines that were skipped or rejected.
//!
//! Every line a parser reads ends in one of three buckets:
//!
//! * **parsed** — it produced one or more events;
//! * **skipped** — it was recognised and deliberately carries no event (blank lines, banner and
//!   statistics lines, debug output of other gem5 objects, DMA payload bytes, ...). Skips are
//!   counted per reason so "intentional" is visible, not silent;
//! * **rejected** — it did not parse. Rejects are counted per reason and the first few are
//!   kept with their line number, byte offset and an excerpt, so a report can say
//!   `client.log:1234: bad 'addr' (hex expected): ...`.
//!
//! Reasons are `&'static str` so that counting never allocates; only the first
//! [`RejectLog::max_samples`] samples copy an excerpt of the line.

use std::fmt;

/// A rejected line kept for the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectSample {
    /// 1-based line number in the input.
    pub line: u64,
    /// Byte offset of the line's start in the input.
    pub offset: u64,
    /// Why it was rejected (names the field where one is at fault).
    pub reason: &'static str,
    /// The start of the line (lossy UTF-8, at most [`EXCERPT_LEN`] bytes of input).
    pub excerpt: String,
}

/// Bytes of a rejected line kept in its sample.
pub const EXCERPT_LEN: usize = 160;

impl fmt::Display for RejectSample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}: {}", self.line, self.reason, self.excerpt)
    }
}

/// Counts per reason, in first-seen order (few distinct reasons; a linear scan is cheapest).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReasonCounts(pub Vec<(&'static str, u64)>);

impl ReasonCounts {
    /// Adds `n` to `reason`.
    pub fn add(&mut self, reason: &'static str, n: u64) {
        match self.0.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, c)) => *c += n,
            None => self.0.push((reason, n)),
        }
    }
    /// Total over all reasons.
    pub fn total(&self) -> u64 {
        self.0.iter().map(|(_, c)| c).sum()
    }
    /// Count for one reason.
    pub fn get(&self, reason: &str) -> u64 {
        self.0.iter().find(|(r, _)| *r == reason).map(|(_, c)| *c).unwrap_or(0)
    }
    /// Merges another tally into this one.
    pub fn merge(&mut self, other: &ReasonCounts) {
        for (r, c) in &other.0 {
            self.add(r, *c);
        }
    }
}

/// Rejected lines of one source: counts per reason plus the first few samples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectLog {
    /// Counts per reason.
    pub by_reason: ReasonCounts,
    /// The first rejected lines.
    pub samples: Vec<RejectSample>,
    /// How many samples are kept.
    pub max_samples: usize,
}

impl Default for RejectLog {
    fn default() -> Self {
        RejectLog::new(5)
    }
}

impl RejectLog {
    /// A log keeping the first `max_samples` samples.
    pub fn new(max_samples: usize) -> Self {
        RejectLog { by_reason: ReasonCounts::default(), samples: Vec::new(), max_samples }
    }
    /// Records one rejected line.
    pub fn record(&mut self, line: u64, offset: u64, reason: &'static str, text: &[u8]) {
        self.by_reason.add(reason, 1);
        if self.samples.len() < self.max_samples {
            self.samples.push(RejectSample { line, offset, reason, excerpt: excerpt(text) });
        }
    }
    /// Total rejected lines.
    pub fn count(&self) -> u64 {
        self.by_reason.total()
    }
}

/// The start of a line as printable text (lossy UTF-8, control characters escaped).
pub fn excerpt(text: &[u8]) -> String {
    let cut = &text[..text.len().min(EXCERPT_LEN)];
    let mut s: String = String::from_utf8_lossy(cut).chars().flat_map(char::escape_default).collect();
    if text.len() > EXCERPT_LEN {
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_samples() {
        let mut l = RejectLog::new(2);
        l.record(3, 40, "bad tick", b"xx");
        l.record(4, 50, "bad tick", b"yy\x01");
        l.record(9, 90, "bad addr", b"zz");
        assert_eq!(l.count(), 3);
        assert_eq!(l.by_reason.get("bad tick"), 2);
        assert_eq!(l.samples.len(), 2);
        assert_eq!(l.samples[1].excerpt, "yy\\u{1}");
        assert_eq!(l.samples[0].to_string(), "line 3: bad tick: xx");
        let long = vec![b'a'; EXCERPT_LEN + 10];
        assert!(excerpt(&long).ends_with('…'));
    }
}
