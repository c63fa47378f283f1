//! The generator's input: one probe-level query, typed.
//!
//! A [`Query`] is what the planner hands to the kernel level: where to probe ([`Source`]),
//! which hits count ([`Filter`]), what to group by (up to [`MAX_KEY_WORDS`] 8-byte words of
//! [`Value`]s; `comm` takes two) and what to aggregate per group ([`Agg`]).

use std::path::PathBuf;

/// Most 8-byte words in a group key.
pub const MAX_KEY_WORDS: usize = 8;
/// Most aggregates in one query.
pub const MAX_AGGS: usize = 8;
/// Most buckets of a linear histogram (under- and overflow included).
pub const MAX_LHIST_BUCKETS: i64 = 1024;

/// Where the probe fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A kernel tracepoint, `category:name` (`raw_syscalls:sys_enter`).
    Tracepoint(String),
    /// Entry of a user-space function.
    Uprobe { binary: PathBuf, at: Location },
    /// Return of a user-space function: [`Value::Retval`] and [`Value::Latency`] (entry →
    /// return of the same thread, through a per-thread start-time map) are known there.
    Uretprobe { binary: PathBuf, at: Location },
}

/// A place in a binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A function from the ELF symbol table.
    Symbol(String),
    /// A virtual address in the ELF file (as `nm` prints it).
    Address(u64),
}

/// A value a probe can read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A tracepoint field by name as in its tracefs `format` file; `args[2]` picks an element
    /// of an array field.
    Field(String),
    /// A function argument (0-5, the x86-64 System V registers), at a uprobe.
    Arg(u8),
    /// The return value, at a uretprobe.
    Retval,
    /// Nanoseconds from the function's entry to this return on the same thread (uretprobe).
    Latency,
    /// Process id (tgid).
    Pid,
    /// Thread id.
    Tid,
    /// The CPU the probe runs on.
    Cpu,
    /// The thread's command name (16 bytes; compared for equality, or a group key).
    Comm,
}

/// A comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// A constant to compare with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Const {
    Int(i64),
    /// For `comm` (at most 15 bytes).
    Str(String),
}

/// Which hits count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Filter {
    Cmp(Value, Cmp, Const),
    And(Box<Filter>, Box<Filter>),
    Or(Box<Filter>, Box<Filter>),
    Not(Box<Filter>),
}

impl Filter {
    pub fn cmp(v: Value, op: Cmp, c: i64) -> Filter {
        Filter::Cmp(v, op, Const::Int(c))
    }

    pub fn and(self, other: Filter) -> Filter {
        Filter::And(Box::new(self), Box::new(other))
    }

    pub fn or(self, other: Filter) -> Filter {
        Filter::Or(Box::new(self), Box::new(other))
    }

    pub fn negate(self) -> Filter {
        Filter::Not(Box::new(self))
    }

    /// Every value the filter reads.
    pub fn values(&self) -> Vec<&Value> {
        match self {
            Filter::Cmp(v, _, _) => vec![v],
            Filter::And(a, b) | Filter::Or(a, b) => {
                let mut out = a.values();
                out.extend(b.values());
                out
            }
            Filter::Not(a) => a.values(),
        }
    }
}

/// An aggregate, per group. Values are 64-bit signed integers (bpftrace's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Agg {
    Count,
    Sum(Value),
    Min(Value),
    Max(Value),
    /// bpftrace's `hist()`: bucket 0 negatives, 1 zero, `2 + floor(log2 v)` for `v ≥ 1`.
    Hist(Value),
    /// bpftrace's `lhist(v, min, max, step)`: bucket 0 below `min`, `1 + (v - min) / step`
    /// inside, `1 + (max - min) / step` at or above `max`.
    Lhist {
        value: Value,
        min: i64,
        max: i64,
        step: i64,
    },
}

impl Agg {
    pub fn value(&self) -> Option<&Value> {
        match self {
            Agg::Count => None,
            Agg::Sum(v) | Agg::Min(v) | Agg::Max(v) | Agg::Hist(v) | Agg::Lhist { value: v, .. } => Some(v),
        }
    }

    /// 8-byte words of its per-CPU state: count/sum 1, min/max 2 (seen, value), `hist` 66
    /// buckets, `lhist` its buckets.
    pub fn words(&self) -> usize {
        match self {
            Agg::Count | Agg::Sum(_) => 1,
            Agg::Min(_) | Agg::Max(_) => 2,
            Agg::Hist(_) => HIST_BUCKETS,
            Agg::Lhist { min, max, step, .. } => lhist_buckets(*min, *max, *step) as usize,
        }
    }
}

/// Buckets of `hist()`: negatives, zero, and one per bit of a positive `i64`.
pub const HIST_BUCKETS: usize = 2 + 63;

/// Buckets of `lhist(min, max, step)` (checked by [`Query::check`]).
pub fn lhist_buckets(min: i64, max: i64, step: i64) -> i64 {
    (max - min) / step.max(1) + 2
}

/// One probe-level query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub source: Source,
    pub filter: Option<Filter>,
    /// The group key (empty: one group).
    pub keys: Vec<Value>,
    pub aggs: Vec<Agg>,
    /// Most groups kept in the kernel; hits of further groups are counted as drops.
    pub max_groups: u32,
}

impl Query {
    /// A query on `source` with no filter, no key and no aggregate yet; 4096 groups at most.
    pub fn new(source: Source) -> Query {
        Query { source, filter: None, keys: Vec::new(), aggs: Vec::new(), max_groups: 4096 }
    }

    pub fn filter(mut self, f: Filter) -> Query {
        self.filter = Some(f);
        self
    }

    pub fn key(mut self, v: Value) -> Query {
        self.keys.push(v);
        self
    }

    pub fn agg(mut self, a: Agg) -> Query {
        self.aggs.push(a);
        self
    }

    /// Checks what does not depend on the running system: sizes, limits, which values each
    /// source knows, `comm` compared only for (in)equality with a string.
    pub fn check(&self) -> Result<(), String> {
        if self.aggs.is_empty() {
            return Err("a query needs at least one aggregate".into());
        }
        if self.aggs.len() > MAX_AGGS {
            return Err(format!("{} aggregates, at most {MAX_AGGS}", self.aggs.len()));
        }
        let key_words: usize = self.keys.iter().map(|k| if *k == Value::Comm { 2 } else { 1 }).sum();
        if key_words > MAX_KEY_WORDS {
            return Err(format!("the group key takes {key_words} words, at most {MAX_KEY_WORDS}"));
        }
        if self.max_groups == 0 {
            return Err("max_groups must be at least 1".into());
        }
        for a in &self.aggs {
            if let Agg::Lhist { min, max, step, .. } = a {
                if *step <= 0 || max <= min {
                    return Err(format!("lhist({min}, {max}, {step}): needs step > 0 and max > min"));
                }
                let n = (*max as i128 - *min as i128) / *step as i128 + 2;
                if n > MAX_LHIST_BUCKETS as i128 {
                    return Err(format!(
                        "lhist({min}, {max}, {step}) has {n} buckets, at most {MAX_LHIST_BUCKETS}"
                    ));
                }
            }
            if a.value() == Some(&Value::Comm) {
                return Err("comm is a string: it can be a group key, not aggregated".into());
            }
        }
        let mut values: Vec<&Value> = self.keys.iter().collect();
        values.extend(self.aggs.iter().filter_map(Agg::value));
        if let Some(f) = &self.filter {
            values.extend(f.values());
            check_consts(f)?;
        }
        for v in values {
            self.check_value(v)?;
        }
        Ok(())
    }

    fn check_value(&self, v: &Value) -> Result<(), String> {
        let (tp, ret) = match &self.source {
            Source::Tracepoint(_) => (true, false),
            Source::Uprobe { .. } => (false, false),
            Source::Uretprobe { .. } => (false, true),
        };
        match v {
            Value::Field(name) if !tp => Err(format!("field {name}: only tracepoints have fields")),
            Value::Arg(n) if tp || ret => {
                Err(format!("arg{n}: arguments are read at a uprobe (at a return they are gone)"))
            }
            Value::Arg(n) if *n > 5 => Err(format!("arg{n}: only arg0-arg5 are in registers")),
            Value::Retval | Value::Latency if !ret => Err(format!("{v:?}: only a uretprobe knows it")),
            _ => Ok(()),
        }
    }
}

fn check_consts(f: &Filter) -> Result<(), String> {
    match f {
        Filter::Cmp(Value::Comm, op, c) => match (op, c) {
            (Cmp::Eq | Cmp::Ne, Const::Str(s)) if s.len() <= 15 => Ok(()),
            (Cmp::Eq | Cmp::Ne, Const::Str(s)) => Err(format!("comm {s:?}: a comm has at most 15 bytes")),
            _ => Err("comm compares with == or != to a string".into()),
        },
        Filter::Cmp(v, _, Const::Str(s)) => Err(format!("{v:?} is a number, compared with the string {s:?}")),
        Filter::Cmp(..) => Ok(()),
        Filter::And(a, b) | Filter::Or(a, b) => check_consts(a).and_then(|_| check_consts(b)),
        Filter::Not(a) => check_consts(a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up() -> Source {
        Source::Uprobe { binary: PathBuf::from("/bin/true"), at: Location::Symbol("main".into()) }
    }

    #[test]
    fn check_refuses_what_the_source_cannot_know_and_oversized_state() {
        assert!(Query::new(up()).check().unwrap_err().contains("at least one aggregate"));
        assert!(
            Query::new(up()).agg(Agg::Hist(Value::Retval)).check().unwrap_err().contains("only a uretprobe")
        );
        let ret =
            Source::Uretprobe { binary: PathBuf::from("/bin/true"), at: Location::Symbol("main".into()) };
        assert!(Query::new(ret.clone()).agg(Agg::Sum(Value::Arg(0))).check().unwrap_err().contains("gone"));
        assert!(Query::new(ret).agg(Agg::Hist(Value::Latency)).check().is_ok());
        assert!(Query::new(up()).agg(Agg::Sum(Value::Arg(6))).check().unwrap_err().contains("arg0-arg5"));
        let tp = Source::Tracepoint("sched:sched_switch".into());
        assert!(Query::new(tp.clone()).agg(Agg::Sum(Value::Field("prev_pid".into()))).check().is_ok());
        assert!(
            Query::new(up()).agg(Agg::Sum(Value::Field("x".into()))).check().unwrap_err().contains("fields")
        );
        let lh = |min, max, step| {
            Query::new(up()).agg(Agg::Lhist { value: Value::Arg(0), min, max, step }).check()
        };
        assert!(lh(0, 100, 10).is_ok());
        assert!(lh(0, 100, 0).is_err() && lh(5, 5, 1).is_err());
        assert!(lh(0, 1 << 20, 1).unwrap_err().contains("buckets"));
        assert_eq!(Agg::Lhist { value: Value::Arg(0), min: 0, max: 5000, step: 500 }.words(), 12);
        let comm = |c: Const| {
            Query::new(tp.clone()).filter(Filter::Cmp(Value::Comm, Cmp::Eq, c)).agg(Agg::Count).check()
        };
        assert!(comm(Const::Str("bash".into())).is_ok());
        assert!(comm(Const::Str("a-name-longer-than-15".into())).is_err());
        assert!(comm(Const::Int(3)).is_err());
        let mut wide = Query::new(tp).agg(Agg::Count);
        for _ in 0..4 {
            wide = wide.key(Value::Comm);
        }
        assert!(wide.clone().check().is_ok());
        assert!(wide.key(Value::Pid).check().unwrap_err().contains("9 words"));
    }
}
