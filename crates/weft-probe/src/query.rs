//! The probe level of live queries: a [`Plan`] (data, no code generation) installed on a
//! tracepoint runs inside the traced process on every `event!` of it — a filter over the
//! event's typed fields and context, a projection of group keys, and an update of
//! fixed-size per-thread aggregate state. An agent calls [`collect`] each interval for the
//! partial result ([`crate::agg::Partial`]), which resets it.
//!
//! ```
//! use weft_probe::query::{self, CmpOp, Const, Filter, Operand, Plan, AggSpec};
//! use weft_probe::agg::AggKind;
//! weft_probe::tracepoint!(static WRITE = "doc.write", Debug, fields = [fd: u64, len: u64]);
//!
//! let plan = Plan {
//!     tracepoint: "doc.write".into(),
//!     filter: Filter::Cmp(Operand::Field("len".into()), CmpOp::Gt, Const::Uint(0)),
//!     keys: vec![Operand::Field("fd".into())],
//!     aggs: vec![AggSpec { kind: AggKind::Count, input: None }],
//!     capacity: 256,
//!     carry: Vec::new(),
//! };
//! WRITE.id(); // registered (tracepoints in the linker section are, from the first registry use)
//! let q = query::install(&plan).unwrap();
//! weft_probe::event!(WRITE, fd = 3u64, len = 512u64);
//! let partial = query::collect(q).unwrap();
//! assert_eq!(partial.events, 1);
//! query::detach(q);
//! ```
//!
//! # What it costs and promises
//!
//! * Installing sets a second state bit on the tracepoint: `event!` then calls the (cold)
//!   recording function, which runs the queries and writes a ring record only if the tracepoint
//!   is also enabled normally. Queries see `event!` of Rust tracepoints; span begins, `tracing`
//!   events and C tracepoints (`weft-probe-c`) are not query sources yet.
//! * Checked at install ([`install`]): every field the plan names exists on the tracepoint and
//!   its declared type fits the use (comparison constant, integer aggregate input). Fields
//!   declared without a type are checked per event; a mismatch drops the event and counts it.
//! * The hot path never blocks and never panics. It allocates only at a thread's first event
//!   after an install or detach (its per-thread table of `capacity` entries and the cached
//!   `comm`/`host` strings), and it joins the query then without waiting for anyone: the
//!   collector only reads the query list, and a thread announces its table through a channel.
//!   Every event after [`install`] returns is seen by the query, except one that meets
//!   another install or detach under way: it runs with the thread's previous list (counted
//!   in [`refresh_deferred`]), and the thread picks the change up at its next event.
//! * Per-thread state is a bounded open-addressing table; a full table drops the event and
//!   counts it ([`crate::agg::Drops::table_full`]). Bucketed aggregates (histograms, the
//!   quantile sketch) take one table entry per (group, bucket) hit.
//! * A plan whose keys are all typed scalars (at most [`MAX_KEYS`], one word each) and whose
//!   aggregates are not bucketed (count, sum, min, max, avg) takes the fixed-width path,
//!   chosen at install: a group is one entry of one array (a header word with the hash and
//!   the keys' type tags, the key words, the cells), updated by code specialized on the key
//!   count. Text passed for such a key field takes the general update (it groups as text, in
//!   the table's general arrays; both count towards one capacity). Such a plan's per-thread
//!   table holds both, so each of its `capacity` entries takes 16 to 48 bytes (header and
//!   keys) and 16 per cell more than a general plan's.
//! * A thread takes its own table with plain stores and a compiler fence where the process
//!   could register for Linux's `membarrier` (the collector then pays the fence; see
//!   [`asymmetric`]), with a compare-exchange otherwise. While [`collect`] swaps a thread's
//!   table for an empty one, that thread's events are dropped and counted as `busy`.
//! * A filter that is one comparison of an integer field (or none) is evaluated from a copy in
//!   the thread's own list, before anything else of the query is touched.
//! * A tracepoint with exactly one query, not enabled for recording, whose filter is one
//!   comparison of a `u64` field with a constant below 2^21, gets it as a pre-filter
//!   ([`crate::Tracepoint::prefilter_pass`]): `event!` rejects the event inline, before the
//!   call into this module.
//! * `comm` and `host` are read at a thread's first event after an install (a later rename of
//!   the thread is not seen until the next install or detach).
//! * Happened-before joins: a plan's [`Plan::carry`] packs values of an event that passes its
//!   filter into the request's [`crate::baggage`] (each value at most
//!   [`crate::agg::KEY_STR_MAX`] bytes; numbers as decimal text); [`Operand::Baggage`] reads
//!   a member back (as a string) in another process. A plan that reads baggage skips events
//!   whose request lacks one of its members (they are not counted as drops: they did not
//!   join). Only these plans touch the baggage.

use crate::agg::{AggKind, Drops, KEY_STR_MAX, KeyValue, Partial, State};
use crate::tracepoint::{FieldSpec, Tracepoint};
use crate::value::Fields;
use std::cell::{RefCell, UnsafeCell};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// A value as a query sees it (a field of an event or a context value).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar<'a> {
    I64(i64),
    U64(u64),
    F64(f64),
    Bool(bool),
    Bytes(&'a [u8]),
}

/// Context every event has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ctx {
    Host,
    Pid,
    Tid,
    /// The thread's name (read at its first event after an install).
    Comm,
    Cpu,
    /// Wall-clock time of the event, ns since the Unix epoch.
    Time,
    /// The thread's current trace id (16 bytes, big-endian; zero outside a span).
    TraceId,
    /// The thread's current span id (0 outside a span).
    SpanId,
}

impl Ctx {
    pub fn name(self) -> &'static str {
        match self {
            Ctx::Host => "host",
            Ctx::Pid => "pid",
            Ctx::Tid => "tid",
            Ctx::Comm => "comm",
            Ctx::Cpu => "cpu",
            Ctx::Time => "time",
            Ctx::TraceId => "trace_id",
            Ctx::SpanId => "span_id",
        }
    }

    pub fn parse(s: &str) -> Option<Ctx> {
        Some(match s {
            "host" => Ctx::Host,
            "pid" => Ctx::Pid,
            "tid" => Ctx::Tid,
            "comm" => Ctx::Comm,
            "cpu" => Ctx::Cpu,
            "time" => Ctx::Time,
            "trace_id" => Ctx::TraceId,
            "span_id" => Ctx::SpanId,
            _ => return None,
        })
    }

    /// The field type this context value has (`str` for host/comm, `bytes` for the trace id).
    pub fn ty(self) -> &'static str {
        match self {
            Ctx::Host | Ctx::Comm => "str",
            Ctx::TraceId => "bytes",
            _ => "u64",
        }
    }
}

/// What a comparison, key or aggregate reads.
#[derive(Debug, Clone, PartialEq)]
pub enum Operand {
    /// A field of the tracepoint, by name.
    Field(String),
    Ctx(Ctx),
    /// A member of the request's [`crate::baggage`] (a string, carried from an upstream
    /// tracepoint by a plan's [`Plan::carry`]). An event whose request lacks it does not join:
    /// the plan skips it.
    Baggage(String),
}

impl std::fmt::Display for Operand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Operand::Field(n) => f.write_str(n),
            Operand::Ctx(c) => f.write_str(c.name()),
            Operand::Baggage(k) => write!(f, "baggage[{k}]"),
        }
    }
}

/// A constant in a comparison.
#[derive(Debug, Clone, PartialEq)]
pub enum Const {
    Int(i64),
    Uint(u64),
    Float(f64),
    Bool(bool),
    Str(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    pub fn symbol(self) -> &'static str {
        match self {
            CmpOp::Eq => "=",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }

    #[inline]
    fn test<T: PartialOrd + ?Sized>(self, a: &T, b: &T) -> bool {
        match self {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        }
    }
}

/// A filter: comparisons of an operand with a constant, combined with and/or/not.
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    True,
    Cmp(Operand, CmpOp, Const),
    And(Box<Filter>, Box<Filter>),
    Or(Box<Filter>, Box<Filter>),
    Not(Box<Filter>),
}

/// One aggregate of a plan; `input` is `None` only for `count(*)`.
#[derive(Debug, Clone, PartialEq)]
pub struct AggSpec {
    pub kind: AggKind,
    pub input: Option<Operand>,
}

/// A probe-level plan: which tracepoint, the filter, group keys, aggregates, the per-thread
/// table's capacity (entries; rounded up to a power of two, at most [`MAX_CAPACITY`]), and
/// what an event that passes the filter packs into its request's baggage (`carry`: baggage
/// key and the operand whose value it takes; the upstream side of a happened-before join).
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub tracepoint: String,
    pub filter: Filter,
    pub keys: Vec<Operand>,
    pub aggs: Vec<AggSpec>,
    pub capacity: usize,
    pub carry: Vec<(String, Operand)>,
}

/// Most group keys a plan may have.
pub const MAX_KEYS: usize = 4;
/// Bytes of an encoded group key: 8 of type tags, 8 per scalar key, 48 per string key.
pub const KEY_BYTES: usize = 128;
const KEY_WORDS: usize = KEY_BYTES / 8;
const STR_WORDS: usize = KEY_STR_MAX / 8;
/// Most aggregates a plan may have.
pub const MAX_AGGS: usize = 8;
/// Most filter operations (comparisons and connectives) a plan may have.
pub const MAX_FILTER_OPS: usize = 64;
/// Largest per-thread table.
pub const MAX_CAPACITY: usize = 1 << 16;

/// Why a plan was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("no tracepoint named {0:?} in this process")]
    NoTracepoint(String),
    #[error("tracepoint {tracepoint:?} has no field {field:?} (fields: {available})")]
    NoField { tracepoint: String, field: String, available: String },
    #[error("field {field:?} of {tracepoint:?} is {ty}: {reason}")]
    WrongType { tracepoint: String, field: String, ty: String, reason: String },
    #[error("tracepoints named {0:?} declare different fields; a query needs one schema")]
    Ambiguous(String),
    #[error("plan too large: {0}")]
    TooLarge(String),
    #[error("bad constant: {0}")]
    BadConst(String),
}

/// An installed query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QueryId(pub u64);

// ---------------------------------------------------------------------------------------------
// Compiled form

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Src {
    Field(u8),
    Ctx(Ctx),
    /// Index into [`Compiled::bag_keys`].
    Baggage(u8),
}

#[derive(Debug)]
enum Test {
    Int(CmpOp, i128),
    Float(CmpOp, f64),
    Bool(CmpOp, bool),
    Bytes(CmpOp, Box<[u8]>),
}

#[derive(Debug)]
enum Op {
    Cmp(Src, Test),
    And,
    Or,
    Not,
    Const(bool),
}

#[derive(Debug)]
struct Compiled {
    /// The filter in postfix (one comparison is evaluated without the stack; see [`Fast`]).
    ops: Vec<Op>,
    keys: Vec<Src>,
    /// Some aggregate reads an input / keeps scalar cells.
    has_inputs: bool,
    has_scalars: bool,
    aggs: Vec<(AggKind, Option<Src>)>,
    /// Cells of a group's scalar entry (avg takes 2).
    cells: usize,
    capacity: usize,
    /// Baggage members the plan reads (all present, or the event does not join).
    bag_keys: Vec<Box<str>>,
    /// Baggage members an event that passes the filter sets.
    carry: Vec<(Box<str>, Src)>,
    /// The filter as a tracepoint pre-filter (field, comparison, constant), when it is one
    /// comparison of a `u64` field with a small constant.
    prefilter: Option<(u8, u8, u64)>,
    /// Every key is a typed scalar and no aggregate is bucketed: the fixed-width path.
    fixed: Option<Fixed>,
}

/// The fixed-width path of a plan ([`Compiled::fixed`], chosen at compile time): every group
/// key is a typed scalar (one word, its type in a 2-bit tag) and every aggregate is
/// count/sum/min/max/avg, so a group is one entry of one array — a header word (hash and
/// tags), the key words and the cells, inline ([`Table::fixed_entry`]). An event whose key
/// value is not a scalar after all (text passed for a field declared numeric) takes the
/// general path ([`update`]) into the same table's general arrays; it groups as text there.
#[derive(Debug, Clone, Copy)]
struct Fixed {
    keys: [Src; MAX_KEYS],
    /// `i128` slots of an entry's header and key words (`(2 + keys) / 2`).
    head: usize,
    /// Every aggregate is `count(*)`: each cell adds one, no inputs are read.
    counts: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyClass {
    Scalar,
    Str,
}

/// The declared type of a source (`None`: untyped field).
fn src_type(schema: &[FieldSpec], src: Src) -> Option<String> {
    match src {
        Src::Field(i) => schema.get(i as usize).and_then(|f| f.ty.clone()),
        Src::Ctx(c) => Some(c.ty().to_string()),
        Src::Baggage(_) => Some("str".to_string()),
    }
}

struct Compiler<'a> {
    tp: &'a str,
    schema: &'a [FieldSpec],
    bag_keys: RefCell<Vec<Box<str>>>,
}

impl Compiler<'_> {
    fn resolve(&self, o: &Operand) -> Result<Src, PlanError> {
        match o {
            Operand::Ctx(c) => Ok(Src::Ctx(*c)),
            Operand::Baggage(k) => {
                let mut keys = self.bag_keys.borrow_mut();
                if let Some(i) = keys.iter().position(|x| **x == **k) {
                    return Ok(Src::Baggage(i as u8));
                }
                if keys.len() >= MAX_KEYS || k.is_empty() || k.len() > crate::baggage::MAX_BYTES / 4 {
                    return Err(PlanError::TooLarge(format!(
                        "baggage member {k:?}: at most {MAX_KEYS} members of up to {} bytes of name",
                        crate::baggage::MAX_BYTES / 4
                    )));
                }
                keys.push(k.as_str().into());
                Ok(Src::Baggage((keys.len() - 1) as u8))
            }
            Operand::Field(name) => match self.schema.iter().position(|f| &f.name == name) {
                Some(i) if i < 255 => Ok(Src::Field(i as u8)),
                _ => Err(PlanError::NoField {
                    tracepoint: self.tp.to_string(),
                    field: name.clone(),
                    available: self.schema.iter().map(|f| f.name.as_str()).collect::<Vec<_>>().join(", "),
                }),
            },
        }
    }

    fn wrong(&self, o: &Operand, ty: &str, reason: &str) -> PlanError {
        PlanError::WrongType {
            tracepoint: self.tp.to_string(),
            field: o.to_string(),
            ty: ty.to_string(),
            reason: reason.to_string(),
        }
    }

    fn test(&self, o: &Operand, src: Src, op: CmpOp, c: &Const) -> Result<Test, PlanError> {
        let ty = src_type(self.schema, src);
        let t = ty.as_deref();
        let mismatch =
            |what: &str| self.wrong(o, t.unwrap_or("untyped"), &format!("cannot compare with {what}"));
        Ok(match c {
            Const::Int(v) => match t {
                Some("f64") => Test::Float(op, *v as f64),
                Some("i64" | "u64") | None => Test::Int(op, *v as i128),
                _ => return Err(mismatch("an integer")),
            },
            Const::Uint(v) => match t {
                Some("f64") => Test::Float(op, *v as f64),
                Some("i64" | "u64") | None => Test::Int(op, *v as i128),
                _ => return Err(mismatch("an integer")),
            },
            Const::Float(v) => match t {
                Some("f64") | None => Test::Float(op, *v),
                _ => return Err(mismatch("a float")),
            },
            Const::Bool(b) => match t {
                Some("bool") | None => Test::Bool(op, *b),
                _ => return Err(mismatch("a boolean")),
            },
            Const::Str(s) => match (t, src) {
                (_, Src::Ctx(Ctx::TraceId)) => {
                    let v = u128::from_str_radix(s, 16)
                        .map_err(|_| PlanError::BadConst(format!("trace_id {s:?} is not 32 hex digits")))?;
                    Test::Bytes(op, v.to_be_bytes().into())
                }
                (Some("str" | "bytes") | None, _) => Test::Bytes(op, s.as_bytes().into()),
                _ => return Err(mismatch("a string")),
            },
        })
    }

    fn filter(&self, f: &Filter, out: &mut Vec<Op>) -> Result<(), PlanError> {
        if out.len() >= MAX_FILTER_OPS {
            return Err(PlanError::TooLarge(format!("more than {MAX_FILTER_OPS} filter operations")));
        }
        match f {
            Filter::True => out.push(Op::Const(true)),
            Filter::Cmp(o, op, c) => {
                let src = self.resolve(o)?;
                let t = self.test(o, src, *op, c)?;
                out.push(Op::Cmp(src, t));
            }
            Filter::And(a, b) | Filter::Or(a, b) => {
                self.filter(a, out)?;
                self.filter(b, out)?;
                out.push(if matches!(f, Filter::And(..)) { Op::And } else { Op::Or });
            }
            Filter::Not(a) => {
                self.filter(a, out)?;
                out.push(Op::Not);
            }
        }
        if out.len() > MAX_FILTER_OPS {
            return Err(PlanError::TooLarge(format!("more than {MAX_FILTER_OPS} filter operations")));
        }
        Ok(())
    }

    fn compile(&self, plan: &Plan) -> Result<Compiled, PlanError> {
        let mut ops = Vec::new();
        self.filter(&plan.filter, &mut ops)?;
        if plan.keys.len() > MAX_KEYS {
            return Err(PlanError::TooLarge(format!("{} group keys, at most {MAX_KEYS}", plan.keys.len())));
        }
        let mut keys = Vec::new();
        let mut key_bytes = 8;
        let mut scalar_keys = true;
        for k in &plan.keys {
            let src = self.resolve(k)?;
            let class = match src_type(self.schema, src).as_deref() {
                Some("str" | "bytes") => KeyClass::Str,
                Some(_) => KeyClass::Scalar,
                None => KeyClass::Str,
            };
            scalar_keys &= class == KeyClass::Scalar;
            key_bytes += if class == KeyClass::Str { KEY_STR_MAX } else { 8 };
            keys.push(src);
        }
        if key_bytes > KEY_BYTES {
            return Err(PlanError::TooLarge(format!(
                "group keys take up to {key_bytes} bytes, at most {KEY_BYTES} (8 of tags, a string key takes {})",
                KEY_STR_MAX
            )));
        }
        if plan.aggs.is_empty() || plan.aggs.len() > MAX_AGGS {
            return Err(PlanError::TooLarge(format!(
                "{} aggregates, 1 to {MAX_AGGS} allowed",
                plan.aggs.len()
            )));
        }
        let mut aggs = Vec::new();
        let mut cells = 0;
        for a in &plan.aggs {
            let src = match (&a.input, a.kind.takes_input()) {
                (Some(o), true) => {
                    let src = self.resolve(o)?;
                    let ty = src_type(self.schema, src);
                    let ok = match ty.as_deref() {
                        None | Some("i64" | "u64" | "bool") => true,
                        Some("f64") => a.kind.bucketed(),
                        _ => false,
                    };
                    if !ok {
                        return Err(self.wrong(
                            o,
                            ty.as_deref().unwrap_or("untyped"),
                            "aggregates take integers (histograms and quantiles also floats)",
                        ));
                    }
                    Some(src)
                }
                (None, true) => return Err(PlanError::TooLarge("an aggregate lacks its input".into())),
                (_, false) => None,
            };
            if !a.kind.bucketed() {
                cells += if matches!(a.kind, AggKind::Avg) { 2 } else { 1 };
            }
            aggs.push((a.kind, src));
        }
        let capacity = plan.capacity.clamp(16, MAX_CAPACITY).next_power_of_two();
        let has_inputs = aggs.iter().any(|(_, s)| s.is_some());
        let has_scalars = aggs.iter().any(|(k, _)| !k.bucketed());
        if plan.carry.len() > MAX_KEYS {
            return Err(PlanError::TooLarge(format!(
                "{} carried values, at most {MAX_KEYS}",
                plan.carry.len()
            )));
        }
        let mut carry = Vec::new();
        for (key, o) in &plan.carry {
            if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)) {
                return Err(PlanError::BadConst(format!(
                    "baggage key {key:?}: letters, digits, '.', '_' and '-' only"
                )));
            }
            carry.push((key.as_str().into(), self.resolve(o)?));
        }
        let bag_keys = self.bag_keys.take();
        let prefilter = match ops.as_slice() {
            [Op::Cmp(Src::Field(f), Test::Int(op, c))]
                if self.schema.get(*f as usize).and_then(|s| s.ty.as_deref()) == Some("u64") =>
            {
                u64::try_from(*c)
                    .ok()
                    .filter(|c| *c <= crate::tracepoint::PF_MAX_CONST)
                    .and_then(|c| (*f <= crate::tracepoint::PF_MAX_FIELD).then_some((*f, *op as u8, c)))
            }
            _ => None,
        };
        let fixed = (scalar_keys && !aggs.iter().any(|(k, _)| k.bucketed())).then(|| {
            let mut fk = [Src::Field(0); MAX_KEYS];
            fk[..keys.len()].copy_from_slice(&keys);
            Fixed {
                keys: fk,
                head: (2 + keys.len()) / 2,
                counts: aggs.iter().all(|(k, _)| *k == AggKind::Count),
            }
        });
        Ok(Compiled {
            ops,
            keys,
            has_inputs,
            has_scalars,
            aggs,
            cells: cells.max(1),
            capacity,
            bag_keys,
            carry,
            prefilter,
            fixed,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Per-event evaluation

/// The thread's cached context.
struct ThreadCtx {
    pid: u64,
    tid: u64,
    comm: Vec<u8>,
    host: Vec<u8>,
    /// The current event's baggage members of the query being run ([`Compiled::bag_keys`]).
    bag: [[u8; KEY_STR_MAX]; MAX_KEYS],
    bag_len: [u8; MAX_KEYS],
}

impl ThreadCtx {
    /// Read the query's baggage members; `false` when one is absent (the event does not join).
    #[cold]
    fn fill_bag(&mut self, keys: &[Box<str>]) -> bool {
        for ((k, buf), len) in keys.iter().zip(&mut self.bag).zip(&mut self.bag_len) {
            match crate::baggage::get(k, buf) {
                Some(n) => *len = n as u8,
                None => return false,
            }
        }
        true
    }
}

enum Val<'a> {
    Int(i128),
    Float(f64),
    Bool(bool),
    Bytes(&'a [u8]),
    Trace([u8; 16]),
}

#[inline(always)]
fn read<'a, F: Fields>(src: Src, ev: &'a F, ctx: &'a ThreadCtx) -> Option<Val<'a>> {
    Some(match src {
        Src::Field(i) => match ev.field(i)? {
            Scalar::I64(v) => Val::Int(v as i128),
            Scalar::U64(v) => Val::Int(v as i128),
            Scalar::F64(v) => Val::Float(v),
            Scalar::Bool(b) => Val::Bool(b),
            Scalar::Bytes(b) => Val::Bytes(b),
        },
        Src::Ctx(c) => read_ctx(c, ctx),
        Src::Baggage(i) => {
            let i = i as usize;
            Val::Bytes(&ctx.bag.get(i)?[..*ctx.bag_len.get(i)? as usize])
        }
    })
}

/// A context value (out of line: the event's own fields are the common case).
#[inline(never)]
fn read_ctx(c: Ctx, ctx: &ThreadCtx) -> Val<'_> {
    match c {
        Ctx::Pid => Val::Int(ctx.pid as i128),
        Ctx::Tid => Val::Int(ctx.tid as i128),
        Ctx::Comm => Val::Bytes(&ctx.comm),
        Ctx::Host => Val::Bytes(&ctx.host),
        // SAFETY: sched_getcpu has no preconditions.
        Ctx::Cpu => Val::Int(unsafe { libc::sched_getcpu() }.max(0) as i128),
        Ctx::Time => Val::Int(crate::clock::realtime_ns() as i128),
        Ctx::TraceId => Val::Trace(crate::thread::current_ids().0.to_be_bytes()),
        Ctx::SpanId => Val::Int(crate::thread::current_ids().1 as i128),
    }
}

/// Evaluate the filter: `Some(pass)`, or `None` when a value had an unexpected type.
#[inline(always)]
fn eval<F: Fields>(c: &Compiled, ev: &F, ctx: &ThreadCtx) -> Option<bool> {
    if let [Op::Cmp(src, test)] = c.ops.as_slice() {
        return compare(*src, test, ev, ctx);
    }
    let mut stack = [false; MAX_FILTER_OPS];
    let mut sp = 0usize;
    for op in &c.ops {
        let v = match op {
            Op::Const(b) => *b,
            Op::Cmp(src, test) => compare(*src, test, ev, ctx)?,
            Op::Not => {
                let a = *stack.get(sp.checked_sub(1)?)?;
                sp -= 1;
                !a
            }
            Op::And | Op::Or => {
                let b = *stack.get(sp.checked_sub(1)?)?;
                let a = *stack.get(sp.checked_sub(2)?)?;
                sp -= 2;
                if matches!(op, Op::And) { a && b } else { a || b }
            }
        };
        *stack.get_mut(sp)? = v;
        sp += 1;
    }
    if sp == 0 { Some(true) } else { stack.get(sp - 1).copied() }
}

#[inline(always)]
fn compare<F: Fields>(src: Src, test: &Test, ev: &F, ctx: &ThreadCtx) -> Option<bool> {
    let v = read(src, ev, ctx)?;
    Some(match (test, &v) {
        (Test::Int(op, c), Val::Int(x)) => op.test(x, c),
        (Test::Float(op, c), Val::Float(x)) => op.test(x, c),
        (Test::Float(op, c), Val::Int(x)) => op.test(&(*x as f64), c),
        (Test::Int(op, c), Val::Float(x)) => op.test(x, &(*c as f64)),
        (Test::Bool(op, c), Val::Bool(x)) => op.test(x, c),
        (Test::Bytes(op, c), Val::Bytes(x)) => op.test(*x, &**c),
        (Test::Bytes(op, c), Val::Trace(x)) => op.test(&x[..], &**c),
        _ => return None,
    })
}

/// Encode the group key into words (word 0: a 16-bit tag per key — type in the low 3 bits,
/// string length above —, then one word per scalar and up to 6 per string); returns the words
/// used, `None` on a type mismatch.
#[inline(always)]
fn encode_key<F: Fields>(keys: &[Src], ev: &F, ctx: &ThreadCtx, out: &mut [u64]) -> Option<usize> {
    let mut n = 1usize;
    let mut tags = 0u64;
    for (j, src) in keys.iter().enumerate() {
        let v = read(*src, ev, ctx)?;
        let (tag, bits) = match v {
            Val::Int(x) if x < 0 => (0u64, x as i64 as u64),
            Val::Int(x) => (1, x as u64),
            Val::Float(f) => (2, f.to_bits()),
            Val::Bool(b) => (3, b as u64),
            Val::Bytes(b) => {
                let b = &b[..b.len().min(KEY_STR_MAX)];
                n = put_str(out, n, b)?;
                tags |= (4 | (b.len() as u64) << 3) << (16 * j);
                continue;
            }
            Val::Trace(t) => {
                n = put_str(out, n, &t)?;
                tags |= (4 | 16 << 3) << (16 * j);
                continue;
            }
        };
        *out.get_mut(n)? = bits;
        n += 1;
        tags |= tag << (16 * j);
    }
    *out.first_mut()? = tags;
    Some(n)
}

#[inline(always)]
fn put_str(out: &mut [u64], mut n: usize, b: &[u8]) -> Option<usize> {
    for c in b.chunks(8) {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        *out.get_mut(n)? = u64::from_le_bytes(w);
        n += 1;
    }
    Some(n)
}

fn decode_key(words: &[u64], nkeys: usize) -> Vec<KeyValue> {
    let tags = words.first().copied().unwrap_or(0);
    let mut out = Vec::with_capacity(nkeys);
    let mut n = 1;
    for j in 0..nkeys {
        let t = (tags >> (16 * j)) & 0xffff;
        if t & 7 == 4 {
            let len = ((t >> 3) as usize).min(STR_WORDS * 8);
            let nw = len.div_ceil(8);
            let mut bytes: Vec<u8> = words.iter().skip(n).take(nw).flat_map(|w| w.to_le_bytes()).collect();
            bytes.truncate(len);
            out.push(KeyValue::Str(bytes));
            n += nw;
            continue;
        }
        let bits = words.get(n).copied().unwrap_or(0);
        n += 1;
        out.push(match t & 7 {
            0 => KeyValue::Int(bits as i64),
            1 => KeyValue::Uint(bits),
            2 => KeyValue::Float(bits),
            _ => KeyValue::Bool(bits != 0),
        });
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Per-thread tables

#[derive(Clone, Copy, Default)]
struct Meta {
    /// 0: empty.
    hash: u64,
    key_len: u8,
    /// 0: the group's scalar aggregates; `1 + j`: bucket `bucket` of aggregate `j`.
    tag: u8,
    bucket: i32,
}

/// A thread's groups of one query. The general arrays (`meta`, `keys`, `cells`) take every
/// plan's groups; a fixed-width plan ([`Fixed`]) keeps its scalar-keyed groups in `fixed`
/// instead (empty for other plans) and only groups of text passed in a numeric key field in
/// the general arrays. `used` counts the groups of both, so the table fills (7/8 of the
/// capacity) exactly when a general-only table would.
struct Table {
    meta: Box<[Meta]>,
    keys: Box<[[u64; KEY_WORDS]]>,
    cells: Box<[i128]>,
    stride: usize,
    /// Fixed-width entries of `fixed_stride` slots: header and key words packed two per slot
    /// (`Fixed::head` slots: header, key 0, key 1, …), then the cells.
    fixed: Box<[i128]>,
    fixed_stride: usize,
    used: usize,
    events: u64,
    drops: Drops,
}

impl Table {
    fn new(c: &Compiled) -> Table {
        Table {
            meta: vec![Meta::default(); c.capacity].into_boxed_slice(),
            keys: vec![[0u64; KEY_WORDS]; c.capacity].into_boxed_slice(),
            cells: vec![0i128; c.capacity * c.cells].into_boxed_slice(),
            stride: c.cells,
            fixed: match c.fixed {
                Some(f) => vec![0i128; c.capacity * (f.head + c.cells)].into_boxed_slice(),
                None => Box::new([]),
            },
            fixed_stride: c.fixed.map_or(0, |f| f.head + c.cells),
            used: 0,
            events: 0,
            drops: Drops::default(),
        }
    }

    /// The entry of (key, tag, bucket), inserted (cells initialised by `init`) if absent;
    /// `None` when the table is full (7/8 of its capacity).
    #[inline]
    fn entry(
        &mut self,
        key: &[u64],
        tag: u8,
        bucket: i32,
        init: impl FnOnce(&mut [i128]),
    ) -> Option<&mut [i128]> {
        let h = hash(key, tag, bucket);
        let mask = self.meta.len() - 1;
        let mut i = h as usize & mask;
        loop {
            let m = self.meta[i];
            if m.hash == 0 {
                if (self.used + 1) * 8 > self.meta.len() * 7 {
                    return None;
                }
                self.meta[i] = Meta { hash: h, key_len: key.len() as u8, tag, bucket };
                self.keys[i][..key.len()].copy_from_slice(key);
                self.used += 1;
                let cells = &mut self.cells[i * self.stride..(i + 1) * self.stride];
                init(cells);
                return Some(cells);
            }
            if m.hash == h
                && m.tag == tag
                && m.bucket == bucket
                && words_eq(&self.keys[i][..m.key_len as usize], key)
            {
                return Some(&mut self.cells[i * self.stride..(i + 1) * self.stride]);
            }
            i = (i + 1) & mask;
        }
    }

    /// The fixed-width entry of `key` (header `hdr`, see [`header`]), inserted (cells
    /// initialised by `init`) if absent; `None` when the table is full (7/8 of its capacity,
    /// counting the general arrays' groups too).
    #[inline(always)]
    fn fixed_entry<const K: usize, const H: usize>(
        &mut self,
        hdr: u64,
        key: &[u64; K],
        init: impl FnOnce(&mut [i128]),
    ) -> Option<&mut [i128]> {
        let head = pack::<K, H>(hdr, key);
        let stride = self.fixed_stride;
        let cap = self.meta.len();
        // the entry's first slot (one multiply; probing steps on by `stride`)
        let mut at = ((hdr >> 9) as usize & (cap - 1)) * stride;
        loop {
            let e = self.fixed.get_mut(at..at + stride)?;
            let (h, cells) = e.split_at_mut_checked(H)?;
            if *h == head {
                return self.fixed.get_mut(at + H..at + stride);
            }
            if h[0] == 0 {
                if (self.used + 1) * 8 > cap * 7 {
                    return None;
                }
                h.copy_from_slice(&head);
                init(cells);
                self.used += 1;
                return self.fixed.get_mut(at + H..at + stride);
            }
            at += stride;
            if at == self.fixed.len() {
                at = 0;
            }
        }
    }

    fn to_partial(&self, c: &Compiled) -> Partial {
        let mut p = Partial { events: self.events, drops: self.drops, ..Partial::default() };
        let empty = || c.aggs.iter().map(|(k, _)| k.empty()).collect::<Vec<_>>();
        for (i, m) in self.meta.iter().enumerate() {
            if m.hash == 0 {
                continue;
            }
            let key = decode_key(&self.keys[i][..m.key_len as usize], c.keys.len());
            let states = p.groups.entry(key).or_insert_with(empty);
            let cells = &self.cells[i * self.stride..(i + 1) * self.stride];
            if m.tag == 0 {
                scalar_states(c, cells, states);
            } else if let Some(State::Buckets(b)) = states.get_mut(m.tag as usize - 1) {
                b.insert(m.bucket, cells[0] as u64);
            }
        }
        if let Some(f) = c.fixed {
            for e in self.fixed.chunks_exact(self.fixed_stride) {
                let (head, cells) = e.split_at(f.head);
                let words: Vec<u64> = head.iter().flat_map(|s| [*s as u64, (*s >> 64) as u64]).collect();
                let hdr = words[0];
                if hdr == 0 {
                    continue;
                }
                // the general encoding's tag word: one 16-bit tag per key
                let tags = (0..c.keys.len()).fold(0u64, |t, j| t | (hdr >> (2 * j) & 3) << (16 * j));
                let mut general = vec![tags];
                general.extend_from_slice(&words[1..=c.keys.len()]);
                let states = p.groups.entry(decode_key(&general, c.keys.len())).or_insert_with(empty);
                scalar_states(c, cells, states);
            }
        }
        p
    }
}

/// A group's scalar cells (count, sum, min, max, avg; bucketed aggregates have none) as states.
fn scalar_states(c: &Compiled, cells: &[i128], states: &mut [State]) {
    let mut ci = 0;
    for ((kind, _), st) in c.aggs.iter().zip(states.iter_mut()) {
        if kind.bucketed() {
            continue;
        }
        let a = cells[ci];
        *st = match kind {
            AggKind::Count => State::Count(a as u64),
            AggKind::Sum => State::Sum(a),
            AggKind::Min => State::Min((a != i128::MAX).then_some(a)),
            AggKind::Max => State::Max((a != i128::MIN).then_some(a)),
            _ => State::Avg { sum: a, count: cells[ci + 1] as u64 },
        };
        ci += if matches!(kind, AggKind::Avg) { 2 } else { 1 };
    }
}

/// A fixed-width entry's header and key words packed into `H` slots (two words a slot, the
/// header first).
#[inline(always)]
fn pack<const K: usize, const H: usize>(hdr: u64, key: &[u64; K]) -> [i128; H] {
    let mut out = [0i128; H];
    for (w, v) in std::iter::once(&hdr).chain(key).enumerate() {
        out[w / 2] |= ((*v as u128) << (64 * (w % 2))) as i128;
    }
    out
}

/// The general entry hash (never 0, which marks an empty entry).
#[inline(always)]
fn hash(key: &[u64], tag: u8, bucket: i32) -> u64 {
    mix((tag as u64) << 32 ^ bucket as u32 as u64, key) | 1
}

/// A fixed-width entry's header word: the hash in bits 9-63 (its low bits pick the slot),
/// bit 8 set (0 marks an empty entry), the keys' 2-bit type tags in bits 0-7.
#[inline(always)]
fn header(key: &[u64], tags: u64) -> u64 {
    mix(tags, key) << 9 | 0x100 | tags
}

/// The key words folded with rotations into `seed`, then one multiply and a shift mix (one
/// multiply on the dependency chain of the table lookup; probing compares whole keys, so a
/// collision costs a probe, never a wrong group).
#[inline(always)]
fn mix(seed: u64, key: &[u64]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h = seed;
    for w in key {
        h = h.rotate_left(23) ^ w;
    }
    let h = h.wrapping_mul(K);
    h ^ h >> 29 ^ h >> 47
}

#[inline(always)]
fn words_eq(a: &[u64], b: &[u64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// One thread's partial of one query: the table, which the owner thread takes for an update
/// without waiting and the collector takes to swap it out.
///
/// Two protocols, chosen once before the first install ([`ASYMMETRIC`]):
/// * asymmetric (Linux `membarrier`, registered for the process): the owner marks `busy` with a
///   plain store, a compiler fence, and backs off if `collecting` is set; the collector sets
///   `collecting`, runs `membarrier` (a full fence on every thread of the process, which makes
///   the owner's compiler fence a real one), then waits for `busy` to clear. No atomic
///   read-modify-write on the traced thread.
/// * otherwise: both sides take `busy` with a compare-exchange.
struct ThreadPartial {
    busy: AtomicBool,
    collecting: AtomicBool,
    table: UnsafeCell<Table>,
    /// Events dropped because the collector held the table.
    skipped: AtomicU64,
}

// SAFETY: `table` is only touched by whoever holds it under the protocol above.
unsafe impl Sync for ThreadPartial {}
// SAFETY: as above; Table owns plain data.
unsafe impl Send for ThreadPartial {}

/// The asymmetric protocol is in use (set before the first query is published, never changed).
static ASYMMETRIC: AtomicBool = AtomicBool::new(false);
static PROTOCOL: std::sync::Once = std::sync::Once::new();
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_long = 8;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 16;

fn choose_protocol() {
    PROTOCOL.call_once(|| {
        // SAFETY: membarrier takes two integer arguments; failure (old kernel, seccomp) leaves
        // the compare-exchange protocol.
        let ok =
            unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) }
                == 0;
        ASYMMETRIC.store(ok, Ordering::Release);
    });
}

/// Does the traced thread take its table without an atomic read-modify-write (the process is
/// registered for `membarrier`)? Decided at the first install.
pub fn asymmetric() -> bool {
    ASYMMETRIC.load(Ordering::Relaxed)
}

impl ThreadPartial {
    fn new(c: &Compiled) -> ThreadPartial {
        ThreadPartial {
            busy: AtomicBool::new(false),
            collecting: AtomicBool::new(false),
            table: UnsafeCell::new(Table::new(c)),
            skipped: AtomicU64::new(0),
        }
    }

    /// Run `f` on the table if the collector does not hold it (the owner thread only).
    #[inline(always)]
    fn try_with<R>(&self, f: impl FnOnce(&mut Table) -> R) -> Option<R> {
        if ASYMMETRIC.load(Ordering::Relaxed) {
            self.busy.store(true, Ordering::Relaxed);
            std::sync::atomic::compiler_fence(Ordering::SeqCst);
            if self.collecting.load(Ordering::Relaxed) {
                self.busy.store(false, Ordering::Release);
                self.skipped.fetch_add(1, Ordering::Relaxed);
                return None;
            }
        } else if self.busy.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            self.skipped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        // SAFETY: we hold the table (see the type's docs).
        let r = f(unsafe { &mut *self.table.get() });
        self.busy.store(false, Ordering::Release);
        Some(r)
    }
}

/// Swap every partial's table for a fresh one (the collector; waits for owner threads, which
/// hold a table for nanoseconds). Empty if the fence failed (nothing taken).
fn swap_all(parts: &[Arc<ThreadPartial>], c: &Compiled) -> Vec<Table> {
    if ASYMMETRIC.load(Ordering::Acquire) {
        for p in parts {
            p.collecting.store(true, Ordering::Relaxed);
        }
        // SAFETY: registered in choose_protocol; plain integer arguments.
        let fenced =
            unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) } == 0;
        if !fenced {
            // registered, yet refused now: without the fence the tables cannot be taken
            // safely; leave them (their events are collected next time)
            for p in parts {
                p.collecting.store(false, Ordering::Release);
            }
            tracing::warn!("weft-probe: membarrier failed; live query partials not collected this time");
            return Vec::new();
        }
        parts
            .iter()
            .map(|p| {
                while p.busy.load(Ordering::Acquire) {
                    std::thread::yield_now();
                }
                // SAFETY: `collecting` is set and the owner is not inside its update.
                let old = std::mem::replace(unsafe { &mut *p.table.get() }, Table::new(c));
                p.collecting.store(false, Ordering::Release);
                old
            })
            .collect()
    } else {
        parts
            .iter()
            .map(|p| {
                while p.busy.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err()
                {
                    std::thread::yield_now();
                }
                // SAFETY: we hold `busy`.
                let old = std::mem::replace(unsafe { &mut *p.table.get() }, Table::new(c));
                p.busy.store(false, Ordering::Release);
                old
            })
            .collect()
    }
}

struct Installed {
    id: QueryId,
    tps: Vec<&'static Tracepoint>,
    compiled: Compiled,
    /// Where a thread announces its table: sending never blocks, so a thread joins the query
    /// at its first event whatever the collector is doing.
    join: Sender<Arc<ThreadPartial>>,
    threads: Mutex<Threads>,
}

/// The collector's view of a query's thread tables: the announced ones are moved from the
/// channel to the list at each collection.
struct Threads {
    joined: Receiver<Arc<ThreadPartial>>,
    list: Vec<Arc<ThreadPartial>>,
}

impl Installed {
    fn new(id: QueryId, tps: Vec<&'static Tracepoint>, compiled: Compiled) -> Installed {
        let (join, joined) = channel();
        Installed { id, tps, compiled, join, threads: Mutex::new(Threads { joined, list: Vec::new() }) }
    }
}

struct Queries {
    list: Vec<Arc<Installed>>,
    next: u64,
}

/// Written by install and detach only; read by threads picking up a change and by the
/// collector, which never hold each other up.
static QUERIES: RwLock<Queries> = RwLock::new(Queries { list: Vec::new(), next: 1 });
/// Bumped after each change of [`QUERIES`] is complete (its write lock released).
static EPOCH: AtomicU64 = AtomicU64::new(1);
static REFRESH_DEFERRED: AtomicU64 = AtomicU64::new(0);

fn queries() -> RwLockReadGuard<'static, Queries> {
    QUERIES.read().unwrap_or_else(|e| e.into_inner())
}

fn queries_mut() -> RwLockWriteGuard<'static, Queries> {
    QUERIES.write().unwrap_or_else(|e| e.into_inner())
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

struct Attached {
    tp: *const Tracepoint,
    /// The filter's common shapes, copied here so that a rejecting event touches nothing else.
    fast: Fast,
    /// The plan neither reads nor carries baggage (copied here like `fast`).
    plain: bool,
    /// The plan's fixed-width path and key count (copied here like `fast`).
    fixed: Option<(Fixed, u8)>,
    query: Arc<Installed>,
    partial: Arc<ThreadPartial>,
}

#[derive(Debug, Clone, Copy)]
enum Fast {
    /// No filter.
    All,
    /// One comparison of an integer field with a constant, as a range test without branches:
    /// the value `v` passes when `(v - lo) as u128 <= width` differs from `outside`.
    Int { field: u8, lo: i128, width: u128, outside: bool },
    /// Anything else: the postfix program.
    General,
}

/// [`Fast::Int`]'s test.
#[inline(always)]
fn in_range(v: i128, lo: i128, width: u128, outside: bool) -> bool {
    (v.wrapping_sub(lo) as u128 <= width) != outside
}

impl Compiled {
    fn fast(&self) -> Fast {
        match self.ops.as_slice() {
            [Op::Const(true)] | [] => Fast::All,
            [Op::Cmp(Src::Field(field), Test::Int(op, c))] => {
                // constants and values come from i64/u64: `c + 1` does not overflow, and
                // `v - lo` leaves [0, width] exactly when `v` leaves [lo, i128::MAX]
                let (lo, outside) = match op {
                    CmpOp::Eq | CmpOp::Ne => (*c, *op == CmpOp::Ne),
                    CmpOp::Ge | CmpOp::Lt => (*c, *op == CmpOp::Lt),
                    CmpOp::Gt | CmpOp::Le => (*c + 1, *op == CmpOp::Le),
                };
                let width = if matches!(op, CmpOp::Eq | CmpOp::Ne) { 0 } else { i128::MAX.abs_diff(lo) };
                Fast::Int { field: *field, lo, width, outside }
            }
            _ => Fast::General,
        }
    }
}

struct Tls {
    epoch: u64,
    attached: Vec<Attached>,
    ctx: ThreadCtx,
}

thread_local! {
    static TLS: RefCell<Tls> = const {
        RefCell::new(Tls {
            epoch: 0,
            attached: Vec::new(),
            ctx: ThreadCtx {
                pid: 0,
                tid: 0,
                comm: Vec::new(),
                host: Vec::new(),
                bag: [[0; KEY_STR_MAX]; MAX_KEYS],
                bag_len: [0; MAX_KEYS],
            },
        })
    };
}

/// Events a thread ran with its previous query list because an install or detach was under
/// way when it went to pick up the last one (it picks it up at its next event).
pub fn refresh_deferred() -> u64 {
    REFRESH_DEFERRED.load(Ordering::Relaxed)
}

/// Run the installed queries of `tp` on one event (called by the recording path when the
/// tracepoint's query bit is set).
#[inline(always)]
pub(crate) fn on_event<F: Fields>(tp: &'static Tracepoint, ev: &F) {
    let _ = TLS.try_with(|t| {
        let Ok(mut t) = t.try_borrow_mut() else { return };
        let epoch = EPOCH.load(Ordering::Acquire);
        if t.epoch != epoch && !refresh(&mut t, epoch) {
            // a change is being made: this event sees the list from before it
            REFRESH_DEFERRED.fetch_add(1, Ordering::Relaxed);
        }
        let Tls { attached, ctx, .. } = &mut *t;
        for a in attached.iter() {
            if !std::ptr::eq(a.tp, tp) {
                continue;
            }
            let c = &a.query.compiled;
            if !a.plain && !c.bag_keys.is_empty() && !ctx.fill_bag(&c.bag_keys) {
                continue;
            }
            let pass = match a.fast {
                Fast::All => Some(true),
                Fast::Int { field, lo, width, outside } => match ev.field(field) {
                    Some(Scalar::U64(v)) => Some(in_range(v as i128, lo, width, outside)),
                    Some(Scalar::I64(v)) => Some(in_range(v as i128, lo, width, outside)),
                    _ => eval(c, ev, ctx),
                },
                Fast::General => eval(c, ev, ctx),
            };
            if pass != Some(false) {
                if !a.plain && !c.carry.is_empty() {
                    carry(c, ev, ctx);
                }
                aggregate(c, a.fixed.as_ref(), &a.partial, ev, ctx, pass.is_some());
            }
        }
    });
}

/// Aggregate an event that passed the filter (`typed`: the filter saw the types it expected):
/// the fixed-width path when the plan has one and the key values are scalars, else the
/// general one.
#[inline(always)]
fn aggregate<F: Fields>(
    c: &Compiled,
    fixed: Option<&(Fixed, u8)>,
    partial: &ThreadPartial,
    ev: &F,
    ctx: &ThreadCtx,
    typed: bool,
) {
    let done = match (fixed, typed) {
        (Some((f, nkeys)), true) => match nkeys {
            0 => update_fixed::<F, 0, 1>(c, f, partial, ev, ctx),
            1 => update_fixed::<F, 1, 1>(c, f, partial, ev, ctx),
            2 => update_fixed::<F, 2, 2>(c, f, partial, ev, ctx),
            3 => update_fixed::<F, 3, 2>(c, f, partial, ev, ctx),
            _ => update_fixed::<F, MAX_KEYS, { (2 + MAX_KEYS) / 2 }>(c, f, partial, ev, ctx),
        },
        _ => false,
    };
    if !done {
        update(c, partial, ev, ctx, typed);
    }
}

/// Pack the plan's carried values into the request's baggage (text as is, numbers in decimal).
#[cold]
fn carry<F: Fields>(c: &Compiled, ev: &F, ctx: &ThreadCtx) {
    for (key, src) in &c.carry {
        let mut num = [0u8; 48];
        let text: &[u8] = match read(*src, ev, ctx) {
            Some(Val::Bytes(b)) => b,
            Some(Val::Int(v)) => format_into(&mut num, format_args!("{v}")),
            Some(Val::Float(v)) => format_into(&mut num, format_args!("{v}")),
            Some(Val::Bool(v)) => {
                if v {
                    b"true"
                } else {
                    b"false"
                }
            }
            Some(Val::Trace(t)) => format_into(&mut num, format_args!("{:032x}", u128::from_be_bytes(t))),
            None => continue,
        };
        crate::baggage::put(key, &text[..text.len().min(KEY_STR_MAX)]);
    }
}

/// Format into a stack buffer (no allocation).
fn format_into<'a>(buf: &'a mut [u8; 48], args: std::fmt::Arguments<'_>) -> &'a [u8] {
    use std::io::Write;
    let mut w = std::io::Cursor::new(&mut buf[..]);
    let _ = w.write_fmt(args);
    let n = w.position() as usize;
    &buf[..n]
}

/// Aggregate an event that passed the filter (`typed`: the filter saw the types it expected).
#[inline(never)]
fn update<F: Fields>(c: &Compiled, partial: &ThreadPartial, ev: &F, ctx: &ThreadCtx, typed: bool) {
    let pass = typed.then_some(true);
    let mut key = [0u64; KEY_WORDS];
    let klen = if pass.is_some() { encode_key(&c.keys, ev, ctx, &mut key) } else { None };
    partial.try_with(|t| {
        let Some(klen) = klen else {
            t.drops.type_mismatch += 1;
            return;
        };
        let key = &key[..klen];
        // inputs first, so that a mismatch drops the whole event
        let mut inputs = [None::<Input>; MAX_AGGS];
        for (slot, (_, src)) in inputs.iter_mut().zip(&c.aggs).filter(|_| c.has_inputs) {
            if let Some(src) = src {
                match read(*src, ev, ctx) {
                    Some(Val::Int(v)) => *slot = Some(Input::Int(v)),
                    Some(Val::Bool(b)) => *slot = Some(Input::Int(b as i128)),
                    Some(Val::Float(f)) => *slot = Some(Input::Float(f)),
                    _ => {
                        t.drops.type_mismatch += 1;
                        return;
                    }
                }
            }
        }
        if c.has_scalars {
            let Some(cells) = t.entry(key, 0, 0, |cells| init_cells(c, cells)) else {
                t.drops.table_full += 1;
                return;
            };
            let mut ints = [0i128; MAX_AGGS];
            for (v, input) in ints.iter_mut().zip(&inputs) {
                *v = match input {
                    Some(Input::Int(v)) => *v,
                    Some(Input::Float(f)) => *f as i128,
                    None => 0,
                };
            }
            add_scalars(c, cells, &ints);
        }
        for (j, ((kind, _), input)) in c.aggs.iter().zip(&inputs).enumerate() {
            let bucket = match input {
                Some(Input::Int(v)) => kind.bucket_int(*v),
                Some(Input::Float(f)) => kind.bucket_float(*f),
                None => None,
            };
            let Some(b) = bucket else { continue };
            match t.entry(key, j as u8 + 1, b, |cells| cells.fill(0)) {
                Some(cells) => cells[0] += 1,
                None => {
                    t.drops.table_full += 1;
                    return;
                }
            }
        }
        t.events += 1;
    });
}

/// The fixed-width path's update ([`Fixed`]): `K` key words (their tags go into the header)
/// and `H` header slots known at compile time, integer inputs, one entry. `false` (nothing
/// done) when a key value is not a scalar after all (an event passed text for a field declared
/// numeric, or lacks the field): the general update takes the event.
#[inline(always)]
fn update_fixed<F: Fields, const K: usize, const H: usize>(
    c: &Compiled,
    f: &Fixed,
    partial: &ThreadPartial,
    ev: &F,
    ctx: &ThreadCtx,
) -> bool {
    let mut key = [0u64; K];
    let mut tags = 0u64;
    for (j, (w, src)) in key.iter_mut().zip(&f.keys).enumerate() {
        let (tag, bits) = match read(*src, ev, ctx) {
            Some(Val::Int(x)) if x < 0 => (0u64, x as i64 as u64),
            Some(Val::Int(x)) => (1, x as u64),
            Some(Val::Float(x)) => (2, x.to_bits()),
            Some(Val::Bool(b)) => (3, b as u64),
            _ => return false,
        };
        *w = bits;
        tags |= tag << (2 * j);
    }
    // a count-only plan has no inputs: nothing to read, no array to clear
    let buf;
    let ints = if c.has_inputs {
        buf = read_ints(c, ev, ctx);
        buf.as_ref()
    } else {
        Some(&NO_INPUTS)
    };
    let hdr = header(&key, tags);
    partial.try_with(|t| {
        let Some(ints) = ints else {
            t.drops.type_mismatch += 1;
            return;
        };
        let Some(cells) = t.fixed_entry::<K, H>(hdr, &key, |cells| init_cells(c, cells)) else {
            t.drops.table_full += 1;
            return;
        };
        if f.counts {
            cells.iter_mut().for_each(|n| *n += 1);
        } else {
            add_scalars(c, cells, ints);
        }
        t.events += 1;
    });
    true
}

static NO_INPUTS: [i128; MAX_AGGS] = [0; MAX_AGGS];

/// The aggregates' integer inputs of an event (0 for `count(*)`); `None` when one is not a
/// number.
#[inline(always)]
fn read_ints<F: Fields>(c: &Compiled, ev: &F, ctx: &ThreadCtx) -> Option<[i128; MAX_AGGS]> {
    let mut ints = [0i128; MAX_AGGS];
    for (v, (_, src)) in ints.iter_mut().zip(&c.aggs) {
        *v = match src.map(|s| read(s, ev, ctx)) {
            None => 0,
            Some(Some(Val::Int(x))) => x,
            Some(Some(Val::Bool(b))) => b as i128,
            Some(Some(Val::Float(f))) => f as i128,
            Some(_) => return None,
        };
    }
    Some(ints)
}

/// Add one event's inputs (`ints[j]` for aggregate `j`; 0 without input) to a group's scalar
/// cells.
#[inline(always)]
fn add_scalars(c: &Compiled, cells: &mut [i128], ints: &[i128; MAX_AGGS]) {
    let mut ci = 0;
    for ((kind, _), v) in c.aggs.iter().zip(ints) {
        let v = *v;
        let Some(cell) = cells.get_mut(ci) else { return };
        match kind {
            AggKind::Count => *cell += 1,
            AggKind::Sum => *cell = cell.wrapping_add(v),
            AggKind::Min => *cell = (*cell).min(v),
            AggKind::Max => *cell = (*cell).max(v),
            AggKind::Avg => {
                *cell = cell.wrapping_add(v);
                if let Some(n) = cells.get_mut(ci + 1) {
                    *n += 1;
                }
                ci += 1;
            }
            _ => continue,
        }
        ci += 1;
    }
}

#[derive(Clone, Copy)]
enum Input {
    Int(i128),
    Float(f64),
}

fn init_cells(c: &Compiled, cells: &mut [i128]) {
    cells.fill(0);
    let mut ci = 0;
    for (kind, _) in &c.aggs {
        match kind {
            AggKind::Min => cells[ci] = i128::MAX,
            AggKind::Max => cells[ci] = i128::MIN,
            AggKind::Avg => ci += 1,
            k if k.bucketed() => continue,
            _ => {}
        }
        ci += 1;
    }
}

/// Pick up installs and detaches (allocates this thread's tables); `false` when the query list
/// or a query's thread list was locked.
#[cold]
fn refresh(t: &mut Tls, epoch: u64) -> bool {
    // the list is copied out so that tables are allocated with no lock held; only an install
    // or detach holds the lock for writing (or waits for it)
    let list: Vec<Arc<Installed>> = match QUERIES.try_read() {
        Ok(q) => q.list.clone(),
        Err(_) => return false,
    };
    if t.ctx.pid == 0 {
        t.ctx.pid = std::process::id() as u64;
        t.ctx.tid = crate::thread::tid() as u64;
        t.ctx.host = hostname();
    }
    t.ctx.comm = comm();
    let mut keep: Vec<Attached> = Vec::new();
    for inst in &list {
        let mine = t.attached.iter().position(|a| Arc::ptr_eq(&a.query, inst));
        let partial = match mine {
            Some(i) => t.attached[i].partial.clone(),
            None => {
                let p = Arc::new(ThreadPartial::new(&inst.compiled));
                // the receiver lives as long as `inst`: the send cannot fail
                let _ = inst.join.send(p.clone());
                p
            }
        };
        for tp in &inst.tps {
            keep.push(Attached {
                tp: *tp as *const Tracepoint,
                fast: inst.compiled.fast(),
                plain: inst.compiled.bag_keys.is_empty() && inst.compiled.carry.is_empty(),
                fixed: inst.compiled.fixed.map(|f| (f, inst.compiled.keys.len() as u8)),
                query: inst.clone(),
                partial: partial.clone(),
            });
        }
    }
    t.attached = keep;
    t.epoch = epoch;
    true
}

fn hostname() -> Vec<u8> {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its length.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return Vec::new();
    }
    let n = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    buf[..n.min(KEY_STR_MAX)].to_vec()
}

fn comm() -> Vec<u8> {
    let mut buf = [0u8; 17];
    // SAFETY: PR_GET_NAME writes at most 16 bytes into the buffer.
    let rc = unsafe { libc::prctl(libc::PR_GET_NAME, buf.as_mut_ptr()) };
    if rc != 0 {
        return Vec::new();
    }
    let n = buf.iter().position(|b| *b == 0).unwrap_or(16);
    buf[..n].to_vec()
}

/// Check and install a plan on every tracepoint named `plan.tracepoint`. The tracepoints then
/// run it on each `event!` (also when they are not enabled for recording).
pub fn install(plan: &Plan) -> Result<QueryId, PlanError> {
    let tps: Vec<&'static Tracepoint> = crate::registry::list()
        .iter()
        .filter(|i| i.name == plan.tracepoint)
        .filter_map(|i| crate::registry::lookup(i.id))
        .collect();
    let Some(first) = tps.first() else { return Err(PlanError::NoTracepoint(plan.tracepoint.clone())) };
    if tps.iter().any(|t| t.fields_spec() != first.fields_spec()) {
        return Err(PlanError::Ambiguous(plan.tracepoint.clone()));
    }
    let schema = FieldSpec::parse_list(first.fields_spec());
    let compiled = Compiler { tp: &plan.tracepoint, schema: &schema, bag_keys: RefCell::new(Vec::new()) }
        .compile(plan)?;
    choose_protocol();
    let mut q = queries_mut();
    let id = QueryId(q.next);
    q.next += 1;
    for tp in &tps {
        tp.set_query(true);
    }
    q.list.push(Arc::new(Installed::new(id, tps.clone(), compiled)));
    set_prefilters(&q.list, &tps);
    drop(q);
    EPOCH.fetch_add(1, Ordering::Release);
    Ok(id)
}

/// Remove a query (its partial state is dropped); `false` if it was not installed. The
/// tracepoints' query bit is cleared when no other query uses them.
pub fn detach(id: QueryId) -> bool {
    let mut q = queries_mut();
    let Some(pos) = q.list.iter().position(|i| i.id == id) else { return false };
    let gone = q.list.remove(pos);
    for tp in &gone.tps {
        let still = q.list.iter().any(|i| i.tps.iter().any(|t| std::ptr::eq(*t, *tp)));
        if !still {
            tp.set_query(false);
        }
    }
    set_prefilters(&q.list, &gone.tps);
    drop(q);
    EPOCH.fetch_add(1, Ordering::Release);
    true
}

/// A tracepoint with exactly one query whose filter fits a pre-filter gets it; any other, none.
fn set_prefilters(list: &[Arc<Installed>], tps: &[&'static Tracepoint]) {
    for tp in tps {
        let mut on = list.iter().filter(|i| i.tps.iter().any(|t| std::ptr::eq(*t, *tp)));
        let pf = match (on.next(), on.next()) {
            (Some(only), None) => only.compiled.prefilter,
            _ => None,
        };
        tp.set_prefilter(pf);
    }
}

/// Ids and tracepoint names of the installed queries.
pub fn installed() -> Vec<(QueryId, String)> {
    queries()
        .list
        .iter()
        .map(|i| (i.id, i.tps.first().map(|t| t.name().to_string()).unwrap_or_default()))
        .collect()
}

/// Collect and reset the query's partial result: every thread's table is swapped for an empty
/// one and the old ones merged; a thread that has exited is collected one last time and
/// forgotten. `None` if the query is not installed.
pub fn collect(id: QueryId) -> Option<Partial> {
    let inst = queries().list.iter().find(|i| i.id == id)?.clone();
    let threads: Vec<Arc<ThreadPartial>> = {
        let mut t = lock(&inst.threads);
        let Threads { joined, list } = &mut *t;
        list.extend(joined.try_iter());
        list.clone()
    };
    // exited before the swap: only the list and `threads` hold it, no event can follow
    let exited: Vec<bool> = threads.iter().map(|p| Arc::strong_count(p) <= 2).collect();
    let mut out = Partial::default();
    let old_tables = swap_all(&threads, &inst.compiled);
    if old_tables.len() != threads.len() {
        return Some(out);
    }
    for (tp, old) in threads.iter().zip(old_tables) {
        let mut p = old.to_partial(&inst.compiled);
        p.drops.busy = tp.skipped.swap(0, Ordering::Relaxed);
        // same compiled shape on every thread: merging cannot fail
        let _ = out.merge(&p);
    }
    let gone: Vec<*const ThreadPartial> =
        threads.iter().zip(&exited).filter(|(_, e)| **e).map(|(p, _)| Arc::as_ptr(p)).collect();
    lock(&inst.threads).list.retain(|p| !gone.contains(&Arc::as_ptr(p)));
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Key and input candidates: every scalar type, context values, a field also read as input.
    const SCHEMA: &str = "a:u64,b:i64,c:bool,d:f64,e:u64";

    fn compile(keys: Vec<Operand>, aggs: Vec<AggSpec>, capacity: usize) -> Compiled {
        let schema = FieldSpec::parse_list(SCHEMA);
        let plan =
            Plan { tracepoint: "t".into(), filter: Filter::True, keys, aggs, capacity, carry: Vec::new() };
        let c = Compiler { tp: "t", schema: &schema, bag_keys: RefCell::new(Vec::new()) }.compile(&plan);
        c.expect("plans of the fixed-width domain compile")
    }

    fn ctx() -> ThreadCtx {
        ThreadCtx {
            pid: 42,
            tid: 7,
            comm: b"t".to_vec(),
            host: b"h".to_vec(),
            bag: [[0; KEY_STR_MAX]; MAX_KEYS],
            bag_len: [0; MAX_KEYS],
        }
    }

    /// An event of the schema; text where a numeric key (`a`) or input (`e`) is declared.
    #[derive(Debug, Clone)]
    enum Ev {
        Num(u64, i64, bool, f64, u64),
        TextKey(&'static str, i64, bool, f64, u64),
        TextInput(u64, i64, bool, f64, &'static str),
    }

    /// Feed the events through the fixed-width dispatch (`fixed`) or the general update only.
    fn run(c: &Compiled, events: &[Ev], fixed: bool) -> Partial {
        let part = ThreadPartial::new(c);
        let f = c.fixed.map(|f| (f, c.keys.len() as u8)).filter(|_| fixed);
        let ctx = ctx();
        for ev in events {
            match ev {
                Ev::Num(a, b, cc, d, e) => {
                    aggregate(c, f.as_ref(), &part, &(*a, *b, *cc, *d, *e), &ctx, true)
                }
                Ev::TextKey(a, b, cc, d, e) => {
                    aggregate(c, f.as_ref(), &part, &(*a, *b, *cc, *d, *e), &ctx, true)
                }
                Ev::TextInput(a, b, cc, d, e) => {
                    aggregate(c, f.as_ref(), &part, &(*a, *b, *cc, *d, *e), &ctx, true)
                }
            }
        }
        part.try_with(|t| t.to_partial(c)).expect("no collector holds the table")
    }

    fn key() -> impl Strategy<Value = Operand> {
        prop_oneof![
            Just(Operand::Field("a".into())),
            Just(Operand::Field("b".into())),
            Just(Operand::Field("c".into())),
            Just(Operand::Field("d".into())),
            Just(Operand::Field("e".into())),
            Just(Operand::Ctx(Ctx::Pid)),
            Just(Operand::Ctx(Ctx::Tid)),
        ]
    }

    fn agg() -> impl Strategy<Value = AggSpec> {
        let input = prop_oneof![Just("a"), Just("b"), Just("c"), Just("e")];
        (0..5u8, input).prop_map(|(k, i)| {
            let kind = [AggKind::Count, AggKind::Sum, AggKind::Min, AggKind::Max, AggKind::Avg][k as usize];
            AggSpec { kind, input: kind.takes_input().then(|| Operand::Field(i.into())) }
        })
    }

    fn event() -> impl Strategy<Value = Ev> {
        let d = prop_oneof![Just(0.0), Just(-0.0), Just(1.5), Just(f64::NAN), Just(-2.25)];
        let e = prop_oneof![Just(0u64), Just(3), Just(1 << 63), Just(u64::MAX)];
        let text = prop_oneof![Just("x"), Just("yy"), Just("longer than one key word of eight bytes")];
        let num = (0..6u64, -3..3i64, any::<bool>(), d, e);
        prop_oneof![
            8 => num.clone().prop_map(|(a, b, c, d, e)| Ev::Num(a, b, c, d, e)),
            1 => (text.clone(), num.clone()).prop_map(|(t, (_, b, c, d, e))| Ev::TextKey(t, b, c, d, e)),
            1 => (text, num).prop_map(|(t, (a, b, c, d, _))| Ev::TextInput(a, b, c, d, t)),
        ]
    }

    proptest! {
        /// The fixed-width path groups, aggregates, fills and drops exactly as the general
        /// path does, text in numeric key fields (general arrays, same fill count) included.
        #[test]
        fn fixed_width_path_equals_the_general_path(
            keys in proptest::collection::vec(key(), 0..=MAX_KEYS),
            aggs in proptest::collection::vec(agg(), 1..=MAX_AGGS),
            capacity in prop_oneof![Just(16usize), Just(64)],
            events in proptest::collection::vec(event(), 0..120),
        ) {
            let c = compile(keys, aggs, capacity);
            prop_assert!(c.fixed.is_some(), "scalar keys and unbucketed aggregates take the fixed path");
            prop_assert_eq!(run(&c, &events, true), run(&c, &events, false));
        }
    }

    fn op() -> impl Strategy<Value = CmpOp> {
        prop_oneof![
            Just(CmpOp::Eq),
            Just(CmpOp::Ne),
            Just(CmpOp::Lt),
            Just(CmpOp::Le),
            Just(CmpOp::Gt),
            Just(CmpOp::Ge),
        ]
    }

    /// Near the constant, at the ends of both types, anywhere.
    fn int() -> impl Strategy<Value = i128> {
        prop_oneof![
            -3i128..3,
            Just(i64::MIN as i128),
            Just(i64::MAX as i128),
            Just(u64::MAX as i128),
            Just(1i128 << 63),
            any::<i64>().prop_map(i128::from),
            any::<u64>().prop_map(i128::from),
        ]
    }

    proptest! {
        /// The one-comparison filter's range test is the comparison, for every operator and
        /// any u64/i64 value and constant.
        #[test]
        fn range_filter_is_the_comparison(op in op(), k in int(), d in -2i128..=2, v in int()) {
            let k = k + d;
            let (field, konst) = match (i64::try_from(k), u64::try_from(k)) {
                (Ok(x), _) => ("b", Const::Int(x)),
                (_, Ok(x)) => ("a", Const::Uint(x)),
                _ => return Ok(()),
            };
            let schema = FieldSpec::parse_list(SCHEMA);
            let plan = Plan {
                tracepoint: "t".into(),
                filter: Filter::Cmp(Operand::Field(field.into()), op, konst),
                keys: Vec::new(),
                aggs: vec![AggSpec { kind: AggKind::Count, input: None }],
                capacity: 16,
                carry: Vec::new(),
            };
            let c = Compiler { tp: "t", schema: &schema, bag_keys: RefCell::new(Vec::new()) }.compile(&plan);
            let Fast::Int { lo, width, outside, .. } = c.expect("compiles").fast() else {
                return Err(TestCaseError::fail("one integer comparison is Fast::Int"));
            };
            prop_assert_eq!(in_range(v, lo, width, outside), op.test(&v, &k), "{} {:?} {}", v, op, k);
        }
    }

    #[test]
    fn fixed_width_tables_fill_with_text_groups_counted() {
        let c = compile(
            vec![Operand::Field("a".into())],
            vec![AggSpec { kind: AggKind::Count, input: None }],
            16,
        );
        let mut events: Vec<Ev> = ["x", "yy"].iter().map(|t| Ev::TextKey(t, 0, false, 0.0, 0)).collect();
        events.extend((0..20).map(|a| Ev::Num(a, 0, false, 0.0, 0)));
        let p = run(&c, &events, true);
        assert_eq!(p, run(&c, &events, false));
        assert_eq!((p.groups.len(), p.events, p.drops.table_full), (14, 14, 8), "2 text + 12 scalar groups");
    }

    crate::tracepoint!(static JOIN_TP = "query.join.test", Debug, fields = [n: u64]);

    /// A thread's first event after an install joins the query while the collector holds what
    /// a collection holds (the query list, the query's threads): nothing waits, nothing is lost.
    #[test]
    fn a_collection_under_way_keeps_no_thread_from_joining() {
        JOIN_TP.id();
        let count = AggSpec { kind: AggKind::Count, input: None };
        let plan = Plan {
            tracepoint: "query.join.test".into(),
            filter: Filter::True,
            keys: Vec::new(),
            aggs: vec![count],
            capacity: 16,
            carry: Vec::new(),
        };
        let q = install(&plan).expect("install");
        let inst = queries().list.iter().find(|i| i.id == q).cloned().expect("installed");
        let deferred = refresh_deferred();
        {
            let _list = queries();
            let _threads = lock(&inst.threads);
            std::thread::spawn(|| crate::event!(JOIN_TP, n = 1u64)).join().expect("thread");
        }
        assert_eq!(refresh_deferred(), deferred);
        assert_eq!(collect(q).expect("collect").events, 1);
        assert!(detach(q));
    }
}
