//! Mergeable aggregate states, shared by every level of a live query (probe, machine, cluster).
//!
//! A [`Partial`] is a table from group keys to one [`State`] per aggregate. Merging two partials
//! of the same shape is associative and commutative, so per-thread, per-process and per-agent
//! partials can be combined in any order and grouping (the tests check it): counts add
//! (saturating), integer sums add in `i128` (wrapping), min/max take the extreme, averages are a
//! sum and a count, and every bucketed state (log2 and linear histograms, the quantile sketch)
//! adds per-bucket counts.
//!
//! * [`log2_bucket`]: bpftrace's `hist()` buckets: `(…, 0)`, `[0]`, `[1]`, `[2, 4)`, `[4, 8)`, …
//!   (index 0 negatives, 1 zero, `2 + floor(log2 v)` for `v ≥ 1`).
//! * [`Linear::bucket`]: bpftrace's `lhist(v, min, max, step)`: `(…, min)`, `[min, min+step)`,
//!   …, `[max, …)`.
//! * [`sketch_bucket`]: the quantile sketch's relative-error log buckets — a value's bucket is
//!   its f64 exponent and the 4 highest mantissa bits, i.e. 16 buckets per power of two.
//!   Reporting a bucket's midpoint is within **1/32 (3.125 %) relative error** of every value in
//!   it (bucket width ≤ 1/16 of its lower bound); zero (and subnormals) have their own bucket;
//!   negatives mirror positives. Like DDSketch the bound holds for any distribution and the
//!   sketch merges exactly (bucket counts add); unlike DDSketch it has no collapsing store: its
//!   size is the number of distinct buckets hit (at most 16 per power of two spanned).
//!
//! [`Partial::encode`] / [`Partial::decode`] are the compact form an agent ships (varints);
//! decoding never panics and never allocates more than the input could describe.

use std::collections::BTreeMap;

/// What an aggregate computes (its state is a [`State`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AggKind {
    Count,
    Sum,
    Min,
    Max,
    Avg,
    /// bpftrace `hist()`: log2 buckets.
    Hist,
    /// bpftrace `lhist(min, max, step)`.
    Lhist(Linear),
    /// A quantile (0..=1) read from the mergeable sketch.
    Quantile(f64),
}

impl AggKind {
    /// The empty state of this aggregate.
    pub fn empty(&self) -> State {
        match self {
            AggKind::Count => State::Count(0),
            AggKind::Sum => State::Sum(0),
            AggKind::Min => State::Min(None),
            AggKind::Max => State::Max(None),
            AggKind::Avg => State::Avg { sum: 0, count: 0 },
            AggKind::Hist | AggKind::Lhist(_) | AggKind::Quantile(_) => State::Buckets(BTreeMap::new()),
        }
    }

    /// Does the aggregate take an input value (everything but `count(*)`)?
    pub fn takes_input(&self) -> bool {
        !matches!(self, AggKind::Count)
    }

    /// Is its state a bucket map (one event = one bucket count)?
    pub fn bucketed(&self) -> bool {
        matches!(self, AggKind::Hist | AggKind::Lhist(_) | AggKind::Quantile(_))
    }

    /// The bucket of an integer input (bucketed kinds only; `None` otherwise).
    pub fn bucket_int(&self, v: i128) -> Option<i32> {
        match self {
            AggKind::Hist => Some(log2_bucket(v)),
            AggKind::Lhist(l) => Some(l.bucket(v)),
            AggKind::Quantile(_) => Some(sketch_bucket(v as f64)),
            _ => None,
        }
    }

    /// The bucket of a float input (the quantile sketch; histograms take integers).
    pub fn bucket_float(&self, v: f64) -> Option<i32> {
        match self {
            AggKind::Quantile(_) if !v.is_nan() => Some(sketch_bucket(v)),
            AggKind::Hist => Some(log2_bucket(v as i128)),
            AggKind::Lhist(l) => Some(l.bucket(v as i128)),
            _ => None,
        }
    }
}

/// Linear histogram parameters (`lhist(min, max, step)`); `step > 0`, `max > min`, at most
/// [`Linear::MAX_BUCKETS`] buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Linear {
    pub min: i64,
    pub max: i64,
    pub step: i64,
}

impl Linear {
    /// Most buckets a linear histogram may have (underflow and overflow included).
    pub const MAX_BUCKETS: i64 = 4096;

    /// Checked constructor.
    pub fn new(min: i64, max: i64, step: i64) -> Result<Linear, String> {
        if step <= 0 {
            return Err(format!("lhist step must be positive, not {step}"));
        }
        if max <= min {
            return Err(format!("lhist max ({max}) must be greater than min ({min})"));
        }
        let n = ((max as i128 - min as i128) / step as i128) + 2;
        if n > Linear::MAX_BUCKETS as i128 {
            return Err(format!(
                "lhist({min}, {max}, {step}) has {n} buckets, at most {} allowed",
                Linear::MAX_BUCKETS
            ));
        }
        Ok(Linear { min, max, step })
    }

    /// 0 below `min`; `1 + (v - min) / step` inside; `1 + (max - min) / step` at or above `max`.
    pub fn bucket(&self, v: i128) -> i32 {
        let (min, max, step) = (self.min as i128, self.max as i128, self.step.max(1) as i128);
        if v < min {
            0
        } else if v >= max {
            (1 + (max - min) / step) as i32
        } else {
            (1 + (v - min) / step) as i32
        }
    }
}

/// bpftrace's `hist()` bucket: 0 for negatives, 1 for zero, `2 + floor(log2 v)` for `v ≥ 1`.
pub fn log2_bucket(v: i128) -> i32 {
    if v < 0 {
        0
    } else if v == 0 {
        1
    } else {
        2 + (127 - v.leading_zeros()) as i32
    }
}

/// Lower bound of a log2 bucket (`None` for the negative bucket).
pub fn log2_lower(bucket: i32) -> Option<i128> {
    match bucket {
        i32::MIN..=0 => None,
        1 => Some(0),
        b => Some(1i128 << (b - 2).min(126)),
    }
}

/// The quantile sketch's bucket of `v`: sign, exponent and 4 top mantissa bits (see the module
/// docs). Non-negative values map to `0..32768`, negatives to `-32768..0`.
pub fn sketch_bucket(v: f64) -> i32 {
    let idx = (v.abs().to_bits() >> 48) as i32 & 0x7fff;
    if v < 0.0 { -idx - 1 } else { idx }
}

/// The value reported for a sketch bucket: its midpoint (0 for the zero bucket).
pub fn sketch_value(bucket: i32) -> f64 {
    let (neg, idx) = if bucket < 0 { (true, (-(bucket as i64) - 1) as u64) } else { (false, bucket as u64) };
    let lo = f64::from_bits(idx << 48);
    let hi = f64::from_bits((idx + 1) << 48);
    let mid = if idx == 0 { 0.0 } else { lo + (hi - lo) / 2.0 };
    if neg { -mid } else { mid }
}

/// One aggregate's mergeable state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Count(u64),
    Sum(i128),
    Min(Option<i128>),
    Max(Option<i128>),
    Avg {
        sum: i128,
        count: u64,
    },
    /// Bucket → count (log2 and linear histograms, the quantile sketch).
    Buckets(BTreeMap<i32, u64>),
}

/// Merging states of different aggregates.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot merge partial results of different shapes: {0}")]
pub struct ShapeError(pub String);

impl State {
    /// Fold `other` into `self` (associative, commutative).
    pub fn merge(&mut self, other: &State) -> Result<(), ShapeError> {
        match (self, other) {
            (State::Count(a), State::Count(b)) => *a = a.saturating_add(*b),
            (State::Sum(a), State::Sum(b)) => *a = a.wrapping_add(*b),
            (State::Min(a), State::Min(b)) => *a = extreme(*a, *b, i128::min),
            (State::Max(a), State::Max(b)) => *a = extreme(*a, *b, i128::max),
            (State::Avg { sum, count }, State::Avg { sum: s, count: c }) => {
                *sum = sum.wrapping_add(*s);
                *count = count.saturating_add(*c);
            }
            (State::Buckets(a), State::Buckets(b)) => {
                for (k, n) in b {
                    let e = a.entry(*k).or_insert(0);
                    *e = e.saturating_add(*n);
                }
            }
            (a, b) => return Err(ShapeError(format!("{} and {}", a.name(), b.name()))),
        }
        Ok(())
    }

    /// Add one integer input (count ignores it; bucketed states take a bucket from `kind`).
    pub fn add_int(&mut self, kind: &AggKind, v: i128) {
        match self {
            State::Count(n) => *n = n.saturating_add(1),
            State::Sum(s) => *s = s.wrapping_add(v),
            State::Min(m) => *m = extreme(*m, Some(v), i128::min),
            State::Max(m) => *m = extreme(*m, Some(v), i128::max),
            State::Avg { sum, count } => {
                *sum = sum.wrapping_add(v);
                *count = count.saturating_add(1);
            }
            State::Buckets(b) => {
                if let Some(k) = kind.bucket_int(v) {
                    add_bucket(b, k, 1);
                }
            }
        }
    }

    fn name(&self) -> &'static str {
        match self {
            State::Count(_) => "count",
            State::Sum(_) => "sum",
            State::Min(_) => "min",
            State::Max(_) => "max",
            State::Avg { .. } => "avg",
            State::Buckets(_) => "buckets",
        }
    }

    /// The final value for display: counts, sums and extremes as integers, averages and
    /// quantiles as floats (`None` when no input was seen), histograms as bucket counts.
    pub fn finish(&self, kind: &AggKind) -> Output {
        match (self, kind) {
            (State::Count(n), _) => Output::Int(*n as i128),
            (State::Sum(s), _) => Output::Int(*s),
            (State::Min(m) | State::Max(m), _) => m.map_or(Output::Null, Output::Int),
            (State::Avg { sum, count }, _) => {
                if *count == 0 {
                    Output::Null
                } else {
                    Output::Float(*sum as f64 / *count as f64)
                }
            }
            (State::Buckets(b), AggKind::Quantile(q)) => quantile(b, *q).map_or(Output::Null, Output::Float),
            (State::Buckets(b), _) => Output::Buckets(b.iter().map(|(k, n)| (*k, *n)).collect()),
        }
    }

    /// The number of inputs a state has seen (count, avg, bucketed states), for ordering.
    pub fn sort_key(&self, kind: &AggKind) -> f64 {
        match self.finish(kind) {
            Output::Int(v) => v as f64,
            Output::Float(f) => f,
            Output::Null => f64::NEG_INFINITY,
            Output::Buckets(b) => b.iter().map(|(_, n)| *n as f64).sum(),
        }
    }
}

/// A finished aggregate value.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    Null,
    Int(i128),
    Float(f64),
    /// (bucket, count) in bucket order.
    Buckets(Vec<(i32, u64)>),
}

fn add_bucket(b: &mut BTreeMap<i32, u64>, k: i32, n: u64) {
    let e = b.entry(k).or_insert(0);
    *e = e.saturating_add(n);
}

fn extreme(a: Option<i128>, b: Option<i128>, f: fn(i128, i128) -> i128) -> Option<i128> {
    match (a, b) {
        (Some(x), Some(y)) => Some(f(x, y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// The `q` quantile (nearest rank over bucket midpoints) of a sketch.
pub fn quantile(b: &BTreeMap<i32, u64>, q: f64) -> Option<f64> {
    let total: u128 = b.values().map(|n| *n as u128).sum();
    if total == 0 {
        return None;
    }
    let q = if q.is_nan() { 0.5 } else { q.clamp(0.0, 1.0) };
    let rank = ((total - 1) as f64 * q).round() as u128;
    let mut seen = 0u128;
    for (k, n) in b {
        seen += *n as u128;
        if seen > rank {
            return Some(sketch_value(*k));
        }
    }
    b.keys().next_back().map(|k| sketch_value(*k))
}

/// One component of a group key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KeyValue {
    Int(i64),
    Uint(u64),
    /// An f64 by its bits.
    Float(u64),
    Bool(bool),
    /// Text or bytes (UTF-8 not required), at most [`KEY_STR_MAX`] bytes in probe partials.
    Str(Vec<u8>),
}

/// Longest string a probe keeps in a group key (longer ones are cut).
pub const KEY_STR_MAX: usize = 48;

/// Counters of what a partial could not hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drops {
    /// Events dropped because the group table was full.
    pub table_full: u64,
    /// Events dropped because a field had another type than the plan expected (untyped fields).
    pub type_mismatch: u64,
    /// Events dropped because another thread was reading the partial.
    pub busy: u64,
}

impl Drops {
    pub fn merge(&mut self, o: &Drops) {
        self.table_full = self.table_full.saturating_add(o.table_full);
        self.type_mismatch = self.type_mismatch.saturating_add(o.type_mismatch);
        self.busy = self.busy.saturating_add(o.busy);
    }

    pub fn total(&self) -> u64 {
        self.table_full.saturating_add(self.type_mismatch).saturating_add(self.busy)
    }
}

/// A partial result: group key → one state per aggregate, plus the events seen and dropped.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Partial {
    /// One [`State`] per aggregate of the query, in order.
    pub groups: BTreeMap<Vec<KeyValue>, Vec<State>>,
    /// Events that passed the filter and were aggregated.
    pub events: u64,
    pub drops: Drops,
}

impl Partial {
    /// Fold `other` into `self`.
    pub fn merge(&mut self, other: &Partial) -> Result<(), ShapeError> {
        for (k, states) in &other.groups {
            match self.groups.get_mut(k) {
                Some(mine) => {
                    if mine.len() != states.len() {
                        return Err(ShapeError(format!("{} and {} aggregates", mine.len(), states.len())));
                    }
                    for (a, b) in mine.iter_mut().zip(states) {
                        a.merge(b)?;
                    }
                }
                None => {
                    self.groups.insert(k.clone(), states.clone());
                }
            }
        }
        self.events = self.events.saturating_add(other.events);
        self.drops.merge(&other.drops);
        Ok(())
    }

    /// The compact serialized form (see [`Partial::decode`]).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + self.groups.len() * 16);
        out.extend_from_slice(MAGIC);
        put_uvar(&mut out, self.events as u128);
        put_uvar(&mut out, self.drops.table_full as u128);
        put_uvar(&mut out, self.drops.type_mismatch as u128);
        put_uvar(&mut out, self.drops.busy as u128);
        put_uvar(&mut out, self.groups.len() as u128);
        for (key, states) in &self.groups {
            put_uvar(&mut out, key.len() as u128);
            for k in key {
                match k {
                    KeyValue::Int(v) => {
                        out.push(0);
                        put_ivar(&mut out, *v as i128);
                    }
                    KeyValue::Uint(v) => {
                        out.push(1);
                        put_uvar(&mut out, *v as u128);
                    }
                    KeyValue::Float(bits) => {
                        out.push(2);
                        out.extend_from_slice(&bits.to_le_bytes());
                    }
                    KeyValue::Bool(b) => out.push(if *b { 4 } else { 3 }),
                    KeyValue::Str(s) => {
                        out.push(5);
                        put_uvar(&mut out, s.len() as u128);
                        out.extend_from_slice(s);
                    }
                }
            }
            put_uvar(&mut out, states.len() as u128);
            for s in states {
                match s {
                    State::Count(n) => {
                        out.push(0);
                        put_uvar(&mut out, *n as u128);
                    }
                    State::Sum(v) => {
                        out.push(1);
                        put_ivar(&mut out, *v);
                    }
                    State::Min(m) | State::Max(m) => {
                        let tag = if matches!(s, State::Min(_)) { 2 } else { 4 };
                        match m {
                            None => out.push(tag),
                            Some(v) => {
                                out.push(tag + 1);
                                put_ivar(&mut out, *v);
                            }
                        }
                    }
                    State::Avg { sum, count } => {
                        out.push(6);
                        put_ivar(&mut out, *sum);
                        put_uvar(&mut out, *count as u128);
                    }
                    State::Buckets(b) => {
                        out.push(7);
                        put_uvar(&mut out, b.len() as u128);
                        for (k, n) in b {
                            put_ivar(&mut out, *k as i128);
                            put_uvar(&mut out, *n as u128);
                        }
                    }
                }
            }
        }
        out
    }

    /// Decode [`Partial::encode`]'s form; any malformed input is an error, never a panic.
    pub fn decode(bytes: &[u8]) -> Result<Partial, DecodeError> {
        let mut r = Reader { b: bytes, pos: 0 };
        if r.take(MAGIC.len())? != MAGIC {
            return Err(r.err("not a weft partial (bad magic)"));
        }
        let mut p = Partial {
            events: r.u64()?,
            drops: Drops { table_full: r.u64()?, type_mismatch: r.u64()?, busy: r.u64()? },
            ..Partial::default()
        };
        let groups = r.len()?;
        for _ in 0..groups {
            let nkeys = r.len()?;
            let mut key = Vec::with_capacity(nkeys);
            for _ in 0..nkeys {
                key.push(match r.byte()? {
                    0 => KeyValue::Int(r.i64()?),
                    1 => KeyValue::Uint(r.u64()?),
                    2 => {
                        let b = r.take(8)?;
                        let mut a = [0u8; 8];
                        a.copy_from_slice(b);
                        KeyValue::Float(u64::from_le_bytes(a))
                    }
                    3 => KeyValue::Bool(false),
                    4 => KeyValue::Bool(true),
                    5 => {
                        let n = r.len()?;
                        KeyValue::Str(r.take(n)?.to_vec())
                    }
                    t => return Err(r.err(&format!("unknown key tag {t}"))),
                });
            }
            let nstates = r.len()?;
            let mut states = Vec::with_capacity(nstates);
            for _ in 0..nstates {
                states.push(match r.byte()? {
                    0 => State::Count(r.u64()?),
                    1 => State::Sum(r.ivar()?),
                    2 => State::Min(None),
                    3 => State::Min(Some(r.ivar()?)),
                    4 => State::Max(None),
                    5 => State::Max(Some(r.ivar()?)),
                    6 => State::Avg { sum: r.ivar()?, count: r.u64()? },
                    7 => {
                        let n = r.len()?;
                        let mut b = BTreeMap::new();
                        for _ in 0..n {
                            let k = r.ivar()?;
                            let k = i32::try_from(k).map_err(|_| r.err("bucket index out of range"))?;
                            let c = r.u64()?;
                            add_bucket(&mut b, k, c);
                        }
                        State::Buckets(b)
                    }
                    t => return Err(r.err(&format!("unknown state tag {t}"))),
                });
            }
            if p.groups.insert(key, states).is_some() {
                return Err(r.err("duplicate group key"));
            }
        }
        if r.pos != bytes.len() {
            return Err(r.err("trailing bytes"));
        }
        Ok(p)
    }
}

const MAGIC: &[u8] = b"WQP1";

/// A malformed serialized partial.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad partial result at byte {offset}: {reason}")]
pub struct DecodeError {
    pub offset: usize,
    pub reason: String,
}

pub(crate) fn put_uvar(out: &mut Vec<u8>, mut v: u128) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

pub(crate) fn put_ivar(out: &mut Vec<u8>, v: i128) {
    put_uvar(out, ((v << 1) ^ (v >> 127)) as u128);
}

pub(crate) struct Reader<'a> {
    pub(crate) b: &'a [u8],
    pub(crate) pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn err(&self, reason: &str) -> DecodeError {
        DecodeError { offset: self.pos, reason: reason.to_string() }
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end =
            self.pos.checked_add(n).filter(|e| *e <= self.b.len()).ok_or_else(|| self.err("truncated"))?;
        let s = &self.b[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    pub(crate) fn byte(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn uvar(&mut self) -> Result<u128, DecodeError> {
        let mut v = 0u128;
        for shift in (0..128).step_by(7) {
            let b = self.byte()?;
            let bits = (b & 0x7f) as u128;
            if shift == 126 && bits > 3 {
                return Err(self.err("varint overflows 128 bits"));
            }
            v |= bits << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.err("varint too long"))
    }

    pub(crate) fn ivar(&mut self) -> Result<i128, DecodeError> {
        let u = self.uvar()?;
        Ok((u >> 1) as i128 ^ -((u & 1) as i128))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        let v = self.uvar()?;
        u64::try_from(v).map_err(|_| self.err("value exceeds 64 bits"))
    }

    pub(crate) fn i64(&mut self) -> Result<i64, DecodeError> {
        let v = self.ivar()?;
        i64::try_from(v).map_err(|_| self.err("value exceeds 64 bits"))
    }

    /// A count of following items; each takes at least one byte, so a count larger than the
    /// bytes left is malformed (bounds allocation by the input's size).
    pub(crate) fn len(&mut self) -> Result<usize, DecodeError> {
        let v = self.uvar()?;
        let left = (self.b.len() - self.pos) as u128;
        if v > left {
            return Err(self.err("count larger than the remaining input"));
        }
        Ok(v as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log2_buckets_are_bpftraces() {
        assert_eq!(log2_bucket(-5), 0);
        assert_eq!(log2_bucket(0), 1);
        assert_eq!(log2_bucket(1), 2);
        assert_eq!(log2_bucket(2), 3);
        assert_eq!(log2_bucket(3), 3);
        assert_eq!(log2_bucket(4), 4);
        assert_eq!(log2_bucket(1023), 11);
        assert_eq!(log2_bucket(1024), 12);
        assert_eq!(log2_lower(12), Some(1024));
        assert_eq!(log2_lower(1), Some(0));
        assert_eq!(log2_lower(0), None);
    }

    #[test]
    fn linear_buckets_are_bpftraces() {
        let l = Linear::new(0, 100, 10).unwrap();
        assert_eq!(l.bucket(-1), 0);
        assert_eq!(l.bucket(0), 1);
        assert_eq!(l.bucket(9), 1);
        assert_eq!(l.bucket(10), 2);
        assert_eq!(l.bucket(99), 10);
        assert_eq!(l.bucket(100), 11);
        assert_eq!(l.bucket(1 << 40), 11);
        assert!(Linear::new(0, 100, 0).is_err());
        assert!(Linear::new(0, i64::MAX, 1).is_err());
    }

    #[test]
    fn sketch_is_within_its_error_bound() {
        for v in [1.0, 3.0, 17.0, 1000.0, 123_456.0, 9.9e9, 0.001, -42.0] {
            let got = sketch_value(sketch_bucket(v));
            assert!(((got - v) / v).abs() <= 1.0 / 32.0, "{v} → {got}");
        }
        assert_eq!(sketch_value(sketch_bucket(0.0)), 0.0);
        assert!(sketch_bucket(-1.0) < sketch_bucket(0.0) && sketch_bucket(0.0) < sketch_bucket(1.0));
        assert!(sketch_bucket(-100.0) < sketch_bucket(-1.0));
    }

    #[test]
    fn quantile_of_a_uniform_range() {
        let kind = AggKind::Quantile(0.99);
        let mut s = kind.empty();
        for v in 1..=10_000 {
            s.add_int(&kind, v);
        }
        let Output::Float(p99) = s.finish(&kind) else { panic!("no quantile") };
        assert!((p99 - 9900.0).abs() / 9900.0 <= 1.0 / 32.0, "{p99}");
    }
}
