//! Wire types of live queries between the collector and the agents (JSON): a probe-level plan
//! to deploy ([`QueryDeploy`]) and the partial results agents ship back ([`PartialReport`]).
//! The plan mirrors `weft_probe::query::Plan` field by field; the partial carries
//! `weft_probe::agg::Partial`'s compact form in base64. Both travel in the agents' exchange
//! with the collector ([`LiveSync`] → [`LiveAnswer`], `POST /api/control/live`).

use base64::Engine;
use serde::{Deserialize, Serialize};
use weft_probe::agg::{AggKind, Linear, Partial};
use weft_probe::query::{AggSpec, CmpOp, Const, Ctx, Filter, Operand, Plan};

/// A malformed live-query message, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct LiveError {
    pub field: String,
    pub reason: String,
}

fn bad(field: &str, reason: impl Into<String>) -> LiveError {
    LiveError { field: field.to_string(), reason: reason.into() }
}

/// Deploy a plan: run it on the agent's processes and ship a partial every `interval_ms`
/// (for `duration_ms`, or until withdrawn).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueryDeploy {
    /// The collector's id of the query.
    pub query: u64,
    pub plan: WirePlan,
    pub interval_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// A kernel source (run by the agent's eBPF level); absent: the plan's `tracepoint` is a
    /// weft-probe tracepoint of the node's processes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<WireSource>,
}

/// A source in the kernel: a tracepoint (`"sched:sched_switch"`) or a uprobe/uretprobe on a
/// binary's symbol (or address, `"0x4a3f0"`). The plan's fields are the tracepoint's, or
/// `arg0`-`arg5`, `retval` and `latency` at uprobes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum WireSource {
    Tracepoint(String),
    Uprobe { binary: String, symbol: String, ret: bool },
}

/// `weft_probe::query::Plan` on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WirePlan {
    pub tracepoint: String,
    pub filter: WireFilter,
    pub keys: Vec<WireOperand>,
    pub aggs: Vec<WireAgg>,
    pub capacity: usize,
    /// Baggage member and the operand whose value an event that passes the filter packs into
    /// it (the upstream half of a happened-before join).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub carry: Vec<(String, WireOperand)>,
}

/// A field (`{"field": "len"}`), a context column (`{"ctx": "pid"}`) or a member of the
/// request's baggage (`{"baggage": "gateway.client"}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum WireOperand {
    Field(String),
    Ctx(String),
    Baggage(String),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum WireConst {
    Int(i64),
    Uint(u64),
    Float(f64),
    Bool(bool),
    Str(String),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum WireFilter {
    True,
    /// `cmp` is one of `= != < <= > >=`.
    Cmp {
        operand: WireOperand,
        cmp: String,
        value: WireConst,
    },
    And(Box<WireFilter>, Box<WireFilter>),
    Or(Box<WireFilter>, Box<WireFilter>),
    Not(Box<WireFilter>),
}

/// An aggregate: `kind` is `count sum min max avg hist lhist quantile`; `lhist` takes
/// `[min, max, step]`, `quantile` takes `q`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireAgg {
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<WireOperand>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lhist: Option<[i64; 3]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub q: Option<f64>,
}

fn operand_to(o: &Operand) -> WireOperand {
    match o {
        Operand::Field(f) => WireOperand::Field(f.clone()),
        Operand::Ctx(c) => WireOperand::Ctx(c.name().to_string()),
        Operand::Baggage(k) => WireOperand::Baggage(k.clone()),
    }
}

fn operand_from(o: &WireOperand, field: &str) -> Result<Operand, LiveError> {
    Ok(match o {
        WireOperand::Field(f) => Operand::Field(f.clone()),
        WireOperand::Ctx(c) => {
            Operand::Ctx(Ctx::parse(c).ok_or_else(|| bad(field, format!("unknown context column {c:?}")))?)
        }
        WireOperand::Baggage(k) => Operand::Baggage(k.clone()),
    })
}

fn filter_to(f: &Filter) -> WireFilter {
    match f {
        Filter::True => WireFilter::True,
        Filter::Cmp(o, op, c) => WireFilter::Cmp {
            operand: operand_to(o),
            cmp: op.symbol().to_string(),
            value: match c {
                Const::Int(v) => WireConst::Int(*v),
                Const::Uint(v) => WireConst::Uint(*v),
                Const::Float(v) => WireConst::Float(*v),
                Const::Bool(v) => WireConst::Bool(*v),
                Const::Str(v) => WireConst::Str(v.clone()),
            },
        },
        Filter::And(a, b) => WireFilter::And(Box::new(filter_to(a)), Box::new(filter_to(b))),
        Filter::Or(a, b) => WireFilter::Or(Box::new(filter_to(a)), Box::new(filter_to(b))),
        Filter::Not(a) => WireFilter::Not(Box::new(filter_to(a))),
    }
}

fn filter_from(f: &WireFilter) -> Result<Filter, LiveError> {
    Ok(match f {
        WireFilter::True => Filter::True,
        WireFilter::Cmp { operand, cmp, value } => {
            let op = [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge]
                .into_iter()
                .find(|o| o.symbol() == cmp)
                .ok_or_else(|| bad("plan.filter.cmp", format!("unknown comparison {cmp:?}")))?;
            let c = match value {
                WireConst::Int(v) => Const::Int(*v),
                WireConst::Uint(v) => Const::Uint(*v),
                WireConst::Float(v) => Const::Float(*v),
                WireConst::Bool(v) => Const::Bool(*v),
                WireConst::Str(v) => Const::Str(v.clone()),
            };
            Filter::Cmp(operand_from(operand, "plan.filter.operand")?, op, c)
        }
        WireFilter::And(a, b) => Filter::And(Box::new(filter_from(a)?), Box::new(filter_from(b)?)),
        WireFilter::Or(a, b) => Filter::Or(Box::new(filter_from(a)?), Box::new(filter_from(b)?)),
        WireFilter::Not(a) => Filter::Not(Box::new(filter_from(a)?)),
    })
}

impl From<&Plan> for WirePlan {
    fn from(p: &Plan) -> WirePlan {
        WirePlan {
            tracepoint: p.tracepoint.clone(),
            filter: filter_to(&p.filter),
            keys: p.keys.iter().map(operand_to).collect(),
            aggs: p
                .aggs
                .iter()
                .map(|a| {
                    let (kind, lhist, q) = match a.kind {
                        AggKind::Count => ("count", None, None),
                        AggKind::Sum => ("sum", None, None),
                        AggKind::Min => ("min", None, None),
                        AggKind::Max => ("max", None, None),
                        AggKind::Avg => ("avg", None, None),
                        AggKind::Hist => ("hist", None, None),
                        AggKind::Lhist(l) => ("lhist", Some([l.min, l.max, l.step]), None),
                        AggKind::Quantile(q) => ("quantile", None, Some(q)),
                    };
                    WireAgg { kind: kind.into(), input: a.input.as_ref().map(operand_to), lhist, q }
                })
                .collect(),
            capacity: p.capacity,
            carry: p.carry.iter().map(|(k, o)| (k.clone(), operand_to(o))).collect(),
        }
    }
}

impl WirePlan {
    /// The plan weft-probe installs; a malformed message is an error naming the field (the
    /// probe checks fields and types against the tracepoint at install).
    pub fn to_plan(&self) -> Result<Plan, LiveError> {
        let mut aggs = Vec::new();
        for (i, a) in self.aggs.iter().enumerate() {
            let field = format!("plan.aggs[{i}]");
            let kind = match a.kind.as_str() {
                "count" => AggKind::Count,
                "sum" => AggKind::Sum,
                "min" => AggKind::Min,
                "max" => AggKind::Max,
                "avg" => AggKind::Avg,
                "hist" => AggKind::Hist,
                "lhist" => {
                    let [min, max, step] =
                        a.lhist.ok_or_else(|| bad(&field, "lhist needs [min, max, step]"))?;
                    AggKind::Lhist(Linear::new(min, max, step).map_err(|e| bad(&field, e))?)
                }
                "quantile" => match a.q {
                    Some(q) if (0.0..=1.0).contains(&q) => AggKind::Quantile(q),
                    _ => return Err(bad(&field, "quantile needs q from 0 to 1")),
                },
                other => return Err(bad(&field, format!("unknown aggregate {other:?}"))),
            };
            let input = a.input.as_ref().map(|o| operand_from(o, &field)).transpose()?;
            aggs.push(AggSpec { kind, input });
        }
        let keys = self.keys.iter().map(|k| operand_from(k, "plan.keys")).collect::<Result<_, _>>()?;
        Ok(Plan {
            tracepoint: self.tracepoint.clone(),
            filter: filter_from(&self.filter)?,
            keys,
            aggs,
            capacity: self.capacity,
            carry: self
                .carry
                .iter()
                .map(|(k, o)| Ok((k.clone(), operand_from(o, "plan.carry")?)))
                .collect::<Result<_, LiveError>>()?,
        })
    }
}

/// One agent's partial result of one query for one window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartialReport {
    pub query: u64,
    pub agent: String,
    /// Window start, ns since the Unix epoch, and length.
    pub window_start_ns: u64,
    pub window_ns: u64,
    /// `weft_probe::agg::Partial::encode`, base64 (standard alphabet).
    pub partial: String,
}

impl PartialReport {
    pub fn new(query: u64, agent: &str, window_start_ns: u64, window_ns: u64, p: &Partial) -> PartialReport {
        PartialReport {
            query,
            agent: agent.to_string(),
            window_start_ns,
            window_ns,
            partial: base64::engine::general_purpose::STANDARD.encode(p.encode()),
        }
    }

    /// The decoded partial (bad base64 or a bad encoding is an error, never a panic).
    pub fn partial(&self) -> Result<Partial, LiveError> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&self.partial)
            .map_err(|e| bad("partial", format!("not base64: {e}")))?;
        Partial::decode(&bytes).map_err(|e| bad("partial", e.to_string()))
    }
}

/// A process (or a whole node) that could not run a query, as an agent reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveFailure {
    pub query: u64,
    /// 0: the whole node (the query was refused there and nothing stays attached).
    #[serde(default)]
    pub pid: u32,
    #[serde(default)]
    pub service: String,
    pub error: String,
}

/// Agent → collector on `POST /api/control/live`: what the agent runs, its partials since the
/// last exchange, failures, and (when changed) the schemas of its processes' tracepoints, which
/// the collector types queries against. The collector holds the request (up to `wait_ms`) until
/// the set of queries to run differs from `running` + `failed`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LiveSync {
    pub agent: String,
    pub host: String,
    /// Queries installed and collected on this node.
    #[serde(default)]
    pub running: Vec<u64>,
    /// Queries this node refused (not retried while they stay deployed).
    #[serde(default)]
    pub failed: Vec<u64>,
    #[serde(default)]
    pub reports: Vec<PartialReport>,
    #[serde(default)]
    pub failures: Vec<LiveFailure>,
    /// `(tracepoint name, field spec)` of the node's processes; `None`: unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracepoints: Option<Vec<(String, String)>>,
    #[serde(default)]
    pub wait_ms: u64,
}

/// Collector → agent: every query the agents should run now (a query missing from it is to be
/// removed).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct LiveAnswer {
    pub queries: Vec<QueryDeploy>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_probe::agg::{KeyValue, State};

    fn plan() -> Plan {
        Plan {
            tracepoint: "blocker.write".into(),
            filter: Filter::And(
                Box::new(Filter::Cmp(Operand::Field("len".into()), CmpOp::Ge, Const::Uint(512))),
                Box::new(Filter::Not(Box::new(Filter::Or(
                    Box::new(Filter::Cmp(Operand::Ctx(Ctx::Comm), CmpOp::Eq, Const::Str("cron".into()))),
                    Box::new(Filter::Cmp(Operand::Field("lat".into()), CmpOp::Lt, Const::Float(-1.5))),
                )))),
            ),
            keys: vec![
                Operand::Field("path".into()),
                Operand::Ctx(Ctx::Pid),
                Operand::Baggage("gateway.client".into()),
            ],
            aggs: vec![
                AggSpec { kind: AggKind::Count, input: None },
                AggSpec { kind: AggKind::Sum, input: Some(Operand::Field("len".into())) },
                AggSpec {
                    kind: AggKind::Lhist(Linear::new(0, 4096, 512).unwrap()),
                    input: Some(Operand::Field("len".into())),
                },
                AggSpec { kind: AggKind::Quantile(0.99), input: Some(Operand::Field("lat".into())) },
            ],
            capacity: 2048,
            carry: vec![("blocker.path".into(), Operand::Field("path".into()))],
        }
    }

    #[test]
    fn plans_round_trip_through_json() {
        let d = QueryDeploy {
            query: 7,
            plan: WirePlan::from(&plan()),
            interval_ms: 1000,
            duration_ms: Some(5000),
            source: None,
        };
        let json = serde_json::to_string(&d).unwrap();
        assert!(!json.contains("source"), "a weft-probe plan carries no source: {json}");
        let back: QueryDeploy = serde_json::from_str(&json).unwrap();
        assert_eq!(back, d);
        assert_eq!(back.plan.to_plan().unwrap(), plan());
        let source =
            WireSource::Uprobe { binary: "/usr/bin/redis-server".into(), symbol: "call".into(), ret: true };
        let k = QueryDeploy { source: Some(source), ..d };
        let json = serde_json::to_string(&k).unwrap();
        assert!(
            json.contains(r#""uprobe":{"binary":"/usr/bin/redis-server","symbol":"call","ret":true}"#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<QueryDeploy>(&json).unwrap(), k);
    }

    #[test]
    fn malformed_plans_name_the_field() {
        let mut w = WirePlan::from(&plan());
        w.aggs[2].lhist = Some([0, 10, 0]);
        let e = w.to_plan().unwrap_err();
        assert_eq!(e.field, "plan.aggs[2]");
        assert!(e.reason.contains("step"), "{e}");
        w.aggs[2].kind = "median".into();
        assert!(w.to_plan().unwrap_err().reason.contains("median"));
        let mut w = WirePlan::from(&plan());
        w.keys[1] = WireOperand::Ctx("uid".into());
        assert_eq!(w.to_plan().unwrap_err().field, "plan.keys");
        let json = r#"{"query":1,"plan":{"tracepoint":"t","filter":"true","keys":[],"aggs":[],"capacity":16},"interval_ms":1,"extra":0}"#;
        assert!(serde_json::from_str::<QueryDeploy>(json).is_err(), "unknown fields are refused");
    }

    #[test]
    fn partial_reports_carry_the_compact_form() {
        let mut p = Partial { events: 3, ..Partial::default() };
        p.groups.insert(vec![KeyValue::Str(b"/a".to_vec())], vec![State::Count(3)]);
        let r = PartialReport::new(7, "node-1", 1_000, 1_000_000_000, &p);
        let back: PartialReport = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back.partial().unwrap(), p);
        let mut bad = back.clone();
        bad.partial = "%%%".into();
        assert!(bad.partial().unwrap_err().reason.contains("base64"));
        bad.partial = base64::engine::general_purpose::STANDARD.encode(b"WQP1\xff");
        assert_eq!(bad.partial().unwrap_err().field, "partial");
    }
}
