//! The eBPF probe level of live queries: kernel tracepoints and uprobes/uretprobes, run with
//! `weft-bpf` (generated programs, checked by the kernel's verifier, per-CPU maps).
//!
//! A deployed plan (weft-probe's plan form: filter, key and aggregate operands) is turned into
//! a [`weft_bpf::Query`]: fields are the tracepoint's (`id`, `args[2]`), or `arg0`-`arg5`,
//! `retval` and `latency` at uprobes; the context columns `pid`, `tid`, `cpu` and `comm` are
//! read in the kernel. `avg` runs as a sum and a count; `host`, `time`, trace ids, `quantile`,
//! floats and booleans are refused with the reason. Attaching is all or nothing on the node (a
//! refusal, e.g. the verifier's log, goes to the collector and nothing stays attached). Every
//! interval [`weft_bpf::Probe::take`] reads and resets the maps; removing drops the probe,
//! which detaches its programs and frees its maps and fds.

use std::collections::BTreeMap;
use std::path::PathBuf;

use weft_bpf::{
    Agg, Cmp, Const as BConst, Filter as BFilter, KeyPart, Location, Probe, Query, Source, State, Value,
};
use weft_control::live::{LiveFailure, QueryDeploy, WireSource};
use weft_probe::agg::{AggKind, KeyValue, Partial, State as PState};
use weft_probe::query::{CmpOp, Const, Ctx, Filter, Operand, Plan};

use crate::live::{Collected, ProbeLevel};

/// How one aggregate of the plan is read back from the kernel's aggregates.
#[derive(Debug, Clone, Copy)]
enum Out {
    /// The kernel aggregate at this index, as is.
    Same(usize),
    /// `avg`: the sum and the count at these indices.
    Avg(usize, usize),
}

/// A query attached in the kernel, and how to read its partial.
struct Running {
    probe: Probe,
    outs: Vec<Out>,
    /// Which key parts are unsigned (pid, tid, cpu, arguments, latency).
    unsigned: Vec<bool>,
}

/// Kernel tracepoints and uprobes of this node, through weft-bpf.
#[derive(Default)]
pub struct Kernel {
    queries: BTreeMap<u64, Running>,
}

impl Kernel {
    pub fn new() -> Kernel {
        Kernel::default()
    }
}

fn value(o: &Operand, uprobe: bool) -> Result<Value, String> {
    Ok(match o {
        Operand::Field(f) if !uprobe => Value::Field(f.clone()),
        Operand::Field(f) => match f.as_str() {
            "retval" => Value::Retval,
            "latency" => Value::Latency,
            a => match a.strip_prefix("arg").and_then(|n| n.parse::<u8>().ok()) {
                Some(n) if n <= 5 => Value::Arg(n),
                _ => return Err(format!("{a}: a uprobe has arg0-arg5, retval and latency")),
            },
        },
        Operand::Ctx(Ctx::Pid) => Value::Pid,
        Operand::Ctx(Ctx::Tid) => Value::Tid,
        Operand::Ctx(Ctx::Cpu) => Value::Cpu,
        Operand::Ctx(Ctx::Comm) => Value::Comm,
        Operand::Ctx(c) => return Err(format!("{}: not known in the kernel's probe level", c.name())),
        Operand::Baggage(k) => {
            return Err(format!(
                "baggage member {k}: request baggage is carried by weft-probe tracepoints only"
            ));
        }
    })
}

fn unsigned(v: &Value) -> bool {
    matches!(v, Value::Pid | Value::Tid | Value::Cpu | Value::Arg(_) | Value::Latency)
}

fn filter(f: &Filter, uprobe: bool) -> Result<Option<BFilter>, String> {
    Ok(Some(match f {
        Filter::True => return Ok(None),
        Filter::Cmp(o, op, c) => {
            let v = value(o, uprobe)?;
            let c = match c {
                Const::Int(i) => BConst::Int(*i),
                Const::Uint(u) => BConst::Int(i64::try_from(*u).map_err(|_| format!("{u}: above i64"))?),
                Const::Str(s) => BConst::Str(s.clone()),
                Const::Float(_) | Const::Bool(_) => {
                    return Err(format!("{o} compared with {c:?}: the kernel level compares integers"));
                }
            };
            let op = match op {
                CmpOp::Eq => Cmp::Eq,
                CmpOp::Ne => Cmp::Ne,
                CmpOp::Lt => Cmp::Lt,
                CmpOp::Le => Cmp::Le,
                CmpOp::Gt => Cmp::Gt,
                CmpOp::Ge => Cmp::Ge,
            };
            BFilter::Cmp(v, op, c)
        }
        Filter::And(a, b) | Filter::Or(a, b) => {
            let (a, b) = (filter(a, uprobe)?, filter(b, uprobe)?);
            let either = matches!(f, Filter::Or(..));
            match (a, b) {
                (Some(a), Some(b)) if either => a.or(b),
                (Some(a), Some(b)) => a.and(b),
                // `x OR true` always holds
                _ if either => return Ok(None),
                // `x AND true` is x
                (a, b) => return Ok(a.or(b)),
            }
        }
        Filter::Not(a) => match filter(a, uprobe)? {
            Some(a) => a.negate(),
            None => return Err("NOT TRUE: the query can never match".into()),
        },
    }))
}

/// The kernel query of a deployed plan, how to read its aggregates, and which keys are
/// unsigned.
fn query(source: &WireSource, plan: &Plan) -> Result<(Query, Vec<Out>, Vec<bool>), String> {
    let (src, uprobe) = match source {
        WireSource::Tracepoint(name) => (Source::Tracepoint(name.clone()), false),
        WireSource::Uprobe { binary, symbol, ret } => {
            let at = match symbol.strip_prefix("0x").map(|h| u64::from_str_radix(h, 16)) {
                Some(Ok(a)) => Location::Address(a),
                Some(Err(_)) => return Err(format!("{symbol}: not a hexadecimal address")),
                None => Location::Symbol(symbol.clone()),
            };
            let binary = PathBuf::from(binary);
            let s = if *ret { Source::Uretprobe { binary, at } } else { Source::Uprobe { binary, at } };
            (s, true)
        }
    };
    let mut q = Query::new(src);
    q.max_groups = u32::try_from(plan.capacity).unwrap_or(u32::MAX).max(1);
    q.filter = filter(&plan.filter, uprobe)?;
    let mut unsigned_keys = Vec::new();
    for k in &plan.keys {
        let v = value(k, uprobe)?;
        unsigned_keys.push(unsigned(&v));
        q.keys.push(v);
    }
    let mut outs = Vec::new();
    for a in &plan.aggs {
        let input = || -> Result<Value, String> {
            let o = a.input.as_ref().ok_or_else(|| format!("{:?} needs an input", a.kind))?;
            value(o, uprobe)
        };
        let at = q.aggs.len();
        match a.kind {
            AggKind::Count => q.aggs.push(Agg::Count),
            AggKind::Sum => q.aggs.push(Agg::Sum(input()?)),
            AggKind::Min => q.aggs.push(Agg::Min(input()?)),
            AggKind::Max => q.aggs.push(Agg::Max(input()?)),
            AggKind::Hist => q.aggs.push(Agg::Hist(input()?)),
            AggKind::Lhist(l) => {
                q.aggs.push(Agg::Lhist { value: input()?, min: l.min, max: l.max, step: l.step })
            }
            AggKind::Avg => {
                q.aggs.push(Agg::Sum(input()?));
                q.aggs.push(Agg::Count);
                outs.push(Out::Avg(at, at + 1));
                continue;
            }
            AggKind::Quantile(_) => {
                return Err(
                    "quantile: the kernel's probe level has count, sum, min, max, avg, hist and lhist".into(),
                );
            }
        }
        outs.push(Out::Same(at));
    }
    q.check()?;
    Ok((q, outs, unsigned_keys))
}

fn state(s: &State) -> PState {
    match s {
        State::Count(n) => PState::Count(*n),
        State::Sum(v) => PState::Sum(*v as i128),
        State::Min(v) => PState::Min(v.map(i128::from)),
        State::Max(v) => PState::Max(v.map(i128::from)),
        State::Buckets(b) => PState::Buckets(b.clone()),
    }
}

/// The kernel's partial in weft-probe's form. `events`: the hits of each group, as its first
/// count or histogram gives them.
fn partial(r: &Running, p: &weft_bpf::Partial) -> Partial {
    let mut out = Partial::default();
    for (key, states) in &p.groups {
        let key: Vec<KeyValue> = key
            .iter()
            .zip(&r.unsigned)
            .map(|(k, u)| match k {
                KeyPart::Int(i) if *u => KeyValue::Uint(*i as u64),
                KeyPart::Int(i) => KeyValue::Int(*i),
                KeyPart::Str(s) => KeyValue::Str(s.as_bytes().to_vec()),
            })
            .collect();
        let hits = states.iter().find_map(|s| match s {
            State::Count(n) => Some(*n),
            State::Buckets(b) => Some(b.values().sum()),
            _ => None,
        });
        if hits == Some(0) {
            continue; // the unkeyed state of a window without hits
        }
        out.events += hits.unwrap_or(0);
        let mapped = r
            .outs
            .iter()
            .map(|o| match *o {
                Out::Same(i) => state(&states[i]),
                Out::Avg(s, c) => match (&states[s], &states[c]) {
                    (State::Sum(sum), State::Count(count)) => {
                        PState::Avg { sum: *sum as i128, count: *count }
                    }
                    _ => PState::Avg { sum: 0, count: 0 },
                },
            })
            .collect();
        out.groups.insert(key, mapped);
    }
    out.drops.table_full = p.drops;
    out
}

fn failure(query: u64, error: String) -> LiveFailure {
    LiveFailure { query, pid: 0, service: "kernel".into(), error }
}

impl ProbeLevel for Kernel {
    fn accepts(&self, q: &QueryDeploy) -> bool {
        q.source.is_some()
    }

    fn install(&mut self, q: &QueryDeploy) -> Result<(), LiveFailure> {
        let source = q.source.as_ref().ok_or_else(|| failure(q.query, "no kernel source".into()))?;
        let plan = q.plan.to_plan().map_err(|e| failure(q.query, e.to_string()))?;
        let (kq, outs, unsigned) = query(source, &plan).map_err(|e| failure(q.query, e))?;
        // weft-bpf attaches all programs or none
        let probe = Probe::start(&kq).map_err(|e| failure(q.query, e.to_string()))?;
        tracing::info!(query = q.query, source = %plan.tracepoint, "kernel probe attached");
        self.queries.insert(q.query, Running { probe, outs, unsigned });
        Ok(())
    }

    fn collect(&mut self, query: u64) -> Collected {
        let mut out = Collected::default();
        let Some(r) = self.queries.get_mut(&query) else { return out };
        match r.probe.take() {
            Ok(p) => {
                out.partial = partial(r, &p);
                out.sources = 1;
            }
            Err(e) => out.failures.push(failure(query, e.to_string())),
        }
        out
    }

    fn remove(&mut self, query: u64) -> Vec<LiveFailure> {
        // dropping the probe detaches its programs and frees its maps
        self.queries.remove(&query);
        Vec::new()
    }

    fn refresh(&mut self) -> Vec<LiveFailure> {
        Vec::new()
    }

    fn schemas(&self) -> Vec<(String, String)> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_probe::agg::Linear;
    use weft_probe::query::AggSpec;

    fn plan(filter: Filter, keys: Vec<Operand>, aggs: Vec<AggSpec>) -> Plan {
        Plan { tracepoint: "x".into(), filter, keys, aggs, capacity: 64, carry: Vec::new() }
    }

    #[test]
    fn plans_become_kernel_queries_or_are_refused_with_the_reason() {
        let up = WireSource::Uprobe { binary: "/bin/true".into(), symbol: "main".into(), ret: true };
        let latency = Operand::Field("latency".into());
        let lat = Some(latency.clone());
        let p = plan(
            Filter::And(
                Box::new(Filter::Cmp(Operand::Ctx(Ctx::Pid), CmpOp::Eq, Const::Uint(7))),
                Box::new(Filter::True),
            ),
            vec![Operand::Ctx(Ctx::Tid), Operand::Field("retval".into())],
            vec![
                AggSpec { kind: AggKind::Avg, input: lat.clone() },
                AggSpec { kind: AggKind::Lhist(Linear::new(0, 100, 10).unwrap()), input: lat.clone() },
            ],
        );
        let (q, outs, unsigned) = query(&up, &p).unwrap();
        assert_eq!(q.filter, Some(BFilter::cmp(Value::Pid, Cmp::Eq, 7)));
        assert_eq!(q.keys, [Value::Tid, Value::Retval]);
        assert_eq!(unsigned, [true, false]);
        assert_eq!(q.aggs.len(), 3, "avg is a sum and a count: {:?}", q.aggs);
        assert!(matches!(outs[..], [Out::Avg(0, 1), Out::Same(2)]));
        let refused = |f: Filter, o: Operand, k: AggKind| {
            query(&up, &plan(f, vec![], vec![AggSpec { kind: k, input: Some(o) }])).unwrap_err()
        };
        assert!(refused(Filter::True, Operand::Ctx(Ctx::Host), AggKind::Max).contains("host"));
        assert!(refused(Filter::True, Operand::Field("arg9".into()), AggKind::Max).contains("arg0-arg5"));
        assert!(refused(Filter::True, latency.clone(), AggKind::Quantile(0.5)).contains("quantile"));
        let f = Filter::Cmp(Operand::Field("retval".into()), CmpOp::Gt, Const::Float(1.5));
        assert!(refused(f, latency, AggKind::Max).contains("integers"));
        let tp = WireSource::Tracepoint("raw_syscalls:sys_enter".into());
        let arg = AggSpec { kind: AggKind::Sum, input: Some(Operand::Field("arg0".into())) };
        // at a tracepoint, arg0 is a field name (the kernel level checks it against tracefs)
        assert_eq!(
            query(&tp, &plan(Filter::True, vec![], vec![arg])).unwrap().0.aggs,
            [Agg::Sum(Value::Field("arg0".into()))]
        );
    }
}
