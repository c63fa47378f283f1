//! The live-query mailbox of a segment: how an agent installs a [`Plan`] in a process,
//! removes it, and reads its partial result each interval, without the process ever waiting
//! for the agent.
//!
//! One request at a time, one client (the agent's live-query thread): the agent writes a
//! request into the mailbox area ([`crate::layout`], `query_offset`), bumps `req_seq`, and
//! wakes the process's control thread through the header's `ctl_seq` futex. The control thread
//! (never a traced thread) copies the request, checks that `req_seq` did not move meanwhile,
//! runs it ([`crate::query::install`], [`crate::query::detach`], [`crate::query::collect`]),
//! writes the answer and stores `resp_seq = req_seq` (release), then wakes `resp_seq`. An answer
//! is the agent's only when `resp_seq` equals the sequence it wrote: a late answer to a request
//! it gave up on is ignored.
//!
//! Requests (byte 0 is the operation):
//!
//! | op | body | answer (status 0) | status 1 |
//! |---|---|---|---|
//! | [`OP_INSTALL`] | the lease in ms (u64 LE), then the plan ([`encode_plan`]) | the process's query id, u64 LE | the refusal (UTF-8) |
//! | [`OP_DETACH`] | query id, u64 LE | empty | not installed |
//! | [`OP_COLLECT`] | query id, u64 LE | `agg::Partial::encode` | not installed, or larger than the answer area |
//!
//! A query installed here holds a lease: each collect renews it, and the control thread
//! detaches a query whose lease ran out (its agent was killed or left without removing it), so
//! no table outlives the agent that reads it.
//!
//! Decoding a plan never panics and allocates no more than the request could describe.

use crate::agg::{AggKind, DecodeError, Linear, Reader, put_ivar, put_uvar};
use crate::mem::{Map, futex_wake};
use crate::query::{AggSpec, CmpOp, Const, Ctx, Filter, Operand, Plan, QueryId};
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Install a plan.
pub const OP_INSTALL: u8 = 1;
/// Remove an installed query (its tables are freed).
pub const OP_DETACH: u8 = 2;
/// Collect and reset an installed query's partial.
pub const OP_COLLECT: u8 = 3;

/// Bytes of the whole mailbox area.
pub const AREA_SIZE: usize = 1 << 20;
/// Offsets inside the area.
pub const MB_REQ_SEQ: usize = 0;
pub const MB_RESP_SEQ: usize = 4;
pub const MB_REQ_LEN: usize = 8;
pub const MB_RESP_LEN: usize = 12;
pub const MB_RESP_STATUS: usize = 16;
/// Request bytes start here …
pub const MB_REQ: usize = 64;
/// … and the answer's here.
pub const MB_RESP: usize = 64 << 10;
/// Largest request.
pub const REQ_MAX: usize = MB_RESP - MB_REQ;

/// Answer status: done.
pub const STATUS_OK: u32 = 0;
/// Answer status: refused (the body says why).
pub const STATUS_REFUSED: u32 = 1;

const PLAN_MAGIC: &[u8] = b"WQL1";

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_uvar(out, s.len() as u128);
    out.extend_from_slice(s.as_bytes());
}

fn put_operand(out: &mut Vec<u8>, o: &Operand) {
    match o {
        Operand::Field(f) => {
            out.push(0);
            put_str(out, f);
        }
        Operand::Ctx(c) => {
            out.push(1);
            put_str(out, c.name());
        }
        Operand::Baggage(k) => {
            out.push(2);
            put_str(out, k);
        }
    }
}

fn put_filter(out: &mut Vec<u8>, f: &Filter) {
    match f {
        Filter::True => out.push(0),
        Filter::Cmp(o, op, c) => {
            out.push(1);
            put_operand(out, o);
            out.push(*op as u8);
            match c {
                Const::Int(v) => {
                    out.push(0);
                    put_ivar(out, *v as i128);
                }
                Const::Uint(v) => {
                    out.push(1);
                    put_uvar(out, *v as u128);
                }
                Const::Float(v) => {
                    out.push(2);
                    out.extend_from_slice(&v.to_bits().to_le_bytes());
                }
                Const::Bool(v) => out.push(if *v { 4 } else { 3 }),
                Const::Str(s) => {
                    out.push(5);
                    put_str(out, s);
                }
            }
        }
        Filter::And(a, b) | Filter::Or(a, b) => {
            out.push(if matches!(f, Filter::And(..)) { 2 } else { 3 });
            put_filter(out, a);
            put_filter(out, b);
        }
        Filter::Not(a) => {
            out.push(4);
            put_filter(out, a);
        }
    }
}

/// The plan's binary form (what an install request carries).
pub fn encode_plan(p: &Plan) -> Vec<u8> {
    let mut out = PLAN_MAGIC.to_vec();
    put_str(&mut out, &p.tracepoint);
    put_filter(&mut out, &p.filter);
    put_uvar(&mut out, p.keys.len() as u128);
    for k in &p.keys {
        put_operand(&mut out, k);
    }
    put_uvar(&mut out, p.aggs.len() as u128);
    for a in &p.aggs {
        match a.kind {
            AggKind::Count => out.push(0),
            AggKind::Sum => out.push(1),
            AggKind::Min => out.push(2),
            AggKind::Max => out.push(3),
            AggKind::Avg => out.push(4),
            AggKind::Hist => out.push(5),
            AggKind::Lhist(l) => {
                out.push(6);
                for v in [l.min, l.max, l.step] {
                    put_ivar(&mut out, v as i128);
                }
            }
            AggKind::Quantile(q) => {
                out.push(7);
                out.extend_from_slice(&q.to_bits().to_le_bytes());
            }
        }
        match &a.input {
            None => out.push(0),
            Some(o) => {
                out.push(1);
                put_operand(&mut out, o);
            }
        }
    }
    put_uvar(&mut out, p.capacity as u128);
    put_uvar(&mut out, p.carry.len() as u128);
    for (k, o) in &p.carry {
        put_str(&mut out, k);
        put_operand(&mut out, o);
    }
    out
}

fn get_str(r: &mut Reader<'_>) -> Result<String, DecodeError> {
    let n = r.len()?;
    let b = r.take(n)?;
    String::from_utf8(b.to_vec()).map_err(|_| r.err("string is not UTF-8"))
}

fn get_f64(r: &mut Reader<'_>) -> Result<f64, DecodeError> {
    let mut a = [0u8; 8];
    a.copy_from_slice(r.take(8)?);
    Ok(f64::from_bits(u64::from_le_bytes(a)))
}

fn get_operand(r: &mut Reader<'_>) -> Result<Operand, DecodeError> {
    match r.byte()? {
        0 => Ok(Operand::Field(get_str(r)?)),
        1 => {
            let n = get_str(r)?;
            Ctx::parse(&n).map(Operand::Ctx).ok_or_else(|| r.err("unknown context column"))
        }
        2 => Ok(Operand::Baggage(get_str(r)?)),
        _ => Err(r.err("unknown operand tag")),
    }
}

fn get_filter(r: &mut Reader<'_>, depth: usize) -> Result<Filter, DecodeError> {
    if depth > crate::query::MAX_FILTER_OPS {
        return Err(r.err("filter nested too deeply"));
    }
    Ok(match r.byte()? {
        0 => Filter::True,
        1 => {
            let o = get_operand(r)?;
            let op = match r.byte()? {
                0 => CmpOp::Eq,
                1 => CmpOp::Ne,
                2 => CmpOp::Lt,
                3 => CmpOp::Le,
                4 => CmpOp::Gt,
                5 => CmpOp::Ge,
                _ => return Err(r.err("unknown comparison")),
            };
            let c = match r.byte()? {
                0 => Const::Int(r.i64()?),
                1 => Const::Uint(r.u64()?),
                2 => Const::Float(get_f64(r)?),
                3 => Const::Bool(false),
                4 => Const::Bool(true),
                5 => Const::Str(get_str(r)?),
                _ => return Err(r.err("unknown constant tag")),
            };
            Filter::Cmp(o, op, c)
        }
        t @ (2 | 3) => {
            let a = Box::new(get_filter(r, depth + 1)?);
            let b = Box::new(get_filter(r, depth + 1)?);
            if t == 2 { Filter::And(a, b) } else { Filter::Or(a, b) }
        }
        4 => Filter::Not(Box::new(get_filter(r, depth + 1)?)),
        _ => return Err(r.err("unknown filter tag")),
    })
}

/// Decode [`encode_plan`]'s form; malformed input is an error, never a panic.
pub fn decode_plan(bytes: &[u8]) -> Result<Plan, DecodeError> {
    let mut r = Reader { b: bytes, pos: 0 };
    if r.take(PLAN_MAGIC.len())? != PLAN_MAGIC {
        return Err(r.err("not a weft plan (bad magic)"));
    }
    let tracepoint = get_str(&mut r)?;
    let filter = get_filter(&mut r, 0)?;
    let nkeys = r.len()?;
    let keys = (0..nkeys).map(|_| get_operand(&mut r)).collect::<Result<Vec<_>, _>>()?;
    let naggs = r.len()?;
    let mut aggs = Vec::with_capacity(naggs);
    for _ in 0..naggs {
        let kind = match r.byte()? {
            0 => AggKind::Count,
            1 => AggKind::Sum,
            2 => AggKind::Min,
            3 => AggKind::Max,
            4 => AggKind::Avg,
            5 => AggKind::Hist,
            6 => {
                let (min, max, step) = (r.i64()?, r.i64()?, r.i64()?);
                AggKind::Lhist(Linear::new(min, max, step).map_err(|e| r.err(&e))?)
            }
            7 => AggKind::Quantile(get_f64(&mut r)?),
            _ => return Err(r.err("unknown aggregate tag")),
        };
        let input = match r.byte()? {
            0 => None,
            1 => Some(get_operand(&mut r)?),
            _ => return Err(r.err("bad aggregate input tag")),
        };
        aggs.push(AggSpec { kind, input });
    }
    let capacity = usize::try_from(r.u64()?).map_err(|_| r.err("capacity out of range"))?;
    let ncarry = r.len()?;
    let carry = (0..ncarry)
        .map(|_| Ok((get_str(&mut r)?, get_operand(&mut r)?)))
        .collect::<Result<Vec<_>, DecodeError>>()?;
    if r.pos != bytes.len() {
        return Err(r.err("trailing bytes"));
    }
    Ok(Plan { tracepoint, filter, keys, aggs, capacity, carry })
}

fn id_of(body: &[u8]) -> Option<QueryId> {
    let a: [u8; 8] = body.try_into().ok()?;
    Some(QueryId(u64::from_le_bytes(a)))
}

/// Queries installed through the mailbox: when each lapses unless collected again.
static LEASES: Mutex<Vec<(QueryId, Duration, Instant)>> = Mutex::new(Vec::new());

fn leases() -> std::sync::MutexGuard<'static, Vec<(QueryId, Duration, Instant)>> {
    LEASES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Detach every mailbox query whose lease ran out (its agent stopped collecting: killed, or
/// gone without removing it); returns how many.
pub(crate) fn expire() -> usize {
    let now = Instant::now();
    let mut l = leases();
    let (gone, keep): (Vec<_>, Vec<_>) =
        l.drain(..).partition(|(_, lease, at)| now.duration_since(*at) > *lease);
    *l = keep;
    drop(l);
    for (id, ..) in &gone {
        crate::query::detach(*id);
        tracing::info!(query = id.0, "weft-probe: live query lease ran out; detached");
    }
    gone.len()
}

/// Run one request; `(status, answer)`.
pub(crate) fn execute(req: &[u8]) -> (u32, Vec<u8>) {
    let refuse = |m: String| (STATUS_REFUSED, m.into_bytes());
    let Some((&op, body)) = req.split_first() else { return refuse("empty request".into()) };
    match op {
        OP_INSTALL => {
            let Some((lease, plan)) = body.split_first_chunk::<8>() else {
                return refuse("an install starts with the lease (8 bytes)".into());
            };
            let lease = Duration::from_millis(u64::from_le_bytes(*lease));
            match decode_plan(plan) {
                Ok(plan) => match crate::query::install(&plan) {
                    Ok(id) => {
                        leases().push((id, lease, Instant::now()));
                        (STATUS_OK, id.0.to_le_bytes().to_vec())
                    }
                    Err(e) => refuse(e.to_string()),
                },
                Err(e) => refuse(e.to_string()),
            }
        }
        OP_DETACH | OP_COLLECT => {
            let Some(id) = id_of(body) else { return refuse("the query id must be 8 bytes".into()) };
            if op == OP_DETACH {
                leases().retain(|(q, ..)| *q != id);
                if crate::query::detach(id) {
                    (STATUS_OK, Vec::new())
                } else {
                    refuse(format!("query {} is not installed", id.0))
                }
            } else {
                if let Some(l) = leases().iter_mut().find(|(q, ..)| *q == id) {
                    l.2 = Instant::now();
                }
                match crate::query::collect(id) {
                    Some(p) => (STATUS_OK, p.encode()),
                    None => refuse(format!("query {} is not installed", id.0)),
                }
            }
        }
        other => refuse(format!("unknown mailbox operation {other}")),
    }
}

/// The producer side: answer a pending request, if any (called by the control thread).
pub(crate) fn serve(map: &Map, base: usize, capacity: usize) {
    let (Some(req_seq), Some(resp_seq)) = (map.u32_at(base + MB_REQ_SEQ), map.u32_at(base + MB_RESP_SEQ))
    else {
        return;
    };
    let seq = req_seq.load(Ordering::Acquire);
    if seq == resp_seq.load(Ordering::Relaxed) {
        return;
    }
    let len = map.u32_at(base + MB_REQ_LEN).map(|l| l.load(Ordering::Relaxed) as usize).unwrap_or(0);
    let mut req = Vec::new();
    let copied = len <= REQ_MAX && map.copy_out(base + MB_REQ, len, &mut req).is_some();
    if req_seq.load(Ordering::Acquire) != seq {
        // rewritten while we copied: the next wake-up answers the new request
        return;
    }
    let (mut status, mut answer) =
        if copied { execute(&req) } else { (STATUS_REFUSED, b"request length out of range".to_vec()) };
    let room = capacity.saturating_sub(MB_RESP);
    if answer.len() > room {
        status = STATUS_REFUSED;
        answer = format!("answer of {} bytes exceeds the mailbox's {room}", answer.len()).into_bytes();
    }
    let _ = map.write(base + MB_RESP, &answer);
    if let Some(l) = map.u32_at(base + MB_RESP_LEN) {
        l.store(answer.len() as u32, Ordering::Relaxed);
    }
    if let Some(s) = map.u32_at(base + MB_RESP_STATUS) {
        s.store(status, Ordering::Relaxed);
    }
    resp_seq.store(seq, Ordering::Release);
    futex_wake(resp_seq);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every tag of the form: each filter shape, comparison, constant, operand and aggregate.
    fn plan() -> Plan {
        let cmp = |f: &str, op, c| Box::new(Filter::Cmp(Operand::Field(f.into()), op, c));
        let filter = Filter::Or(
            Box::new(Filter::And(cmp("a", CmpOp::Eq, Const::Int(-3)), cmp("b", CmpOp::Ne, Const::Uint(9)))),
            Box::new(Filter::Not(Box::new(Filter::And(
                Box::new(Filter::Or(
                    cmp("c", CmpOp::Lt, Const::Float(-1.5)),
                    cmp("d", CmpOp::Le, Const::Bool(true)),
                )),
                Box::new(Filter::Or(
                    cmp("e", CmpOp::Gt, Const::Bool(false)),
                    Box::new(Filter::Cmp(Operand::Ctx(Ctx::Comm), CmpOp::Ge, Const::Str("x".into()))),
                )),
            )))),
        );
        let field = |f: &str| Some(Operand::Field(f.into()));
        let kinds = [
            AggKind::Count,
            AggKind::Sum,
            AggKind::Min,
            AggKind::Max,
            AggKind::Avg,
            AggKind::Hist,
            AggKind::Lhist(Linear::new(-10, 4096, 512).unwrap()),
            AggKind::Quantile(0.99),
        ];
        Plan {
            tracepoint: "blocker.write".into(),
            filter,
            keys: vec![
                Operand::Field("path".into()),
                Operand::Ctx(Ctx::Pid),
                Operand::Ctx(Ctx::TraceId),
                Operand::Baggage("gateway.volume".into()),
            ],
            aggs: kinds
                .iter()
                .map(|k| AggSpec { kind: *k, input: if *k == AggKind::Count { None } else { field("len") } })
                .collect(),
            capacity: 2048,
            carry: vec![("blocker.path".into(), Operand::Field("path".into()))],
        }
    }

    #[test]
    fn plans_round_trip() {
        let p = plan();
        assert_eq!(decode_plan(&encode_plan(&p)).unwrap(), p);
    }

    #[test]
    fn truncated_or_mutated_plans_are_errors_not_panics() {
        let b = encode_plan(&plan());
        for n in 0..b.len() {
            assert!(decode_plan(&b[..n]).is_err(), "prefix of {n} bytes");
        }
        for i in 0..b.len() {
            for x in [0x01u8, 0x80, 0xff] {
                let mut m = b.clone();
                m[i] ^= x;
                let _ = decode_plan(&m);
            }
        }
        let mut extra = b.clone();
        extra.push(0);
        assert!(decode_plan(&extra).unwrap_err().reason.contains("trailing"));
    }

    crate::tracepoint!(static MB_TP = "mailbox.test", Debug, fields = [n: u64]);

    /// Write a request as the agent does, answer it as the control thread does.
    fn roundtrip(map: &Map, seq: u32, req: &[u8]) -> (u32, Vec<u8>) {
        map.write(MB_REQ, req).unwrap();
        map.u32_at(MB_REQ_LEN).unwrap().store(req.len() as u32, Ordering::Relaxed);
        map.u32_at(MB_REQ_SEQ).unwrap().store(seq, Ordering::Release);
        serve(map, 0, AREA_SIZE);
        assert_eq!(map.u32_at(MB_RESP_SEQ).unwrap().load(Ordering::Acquire), seq, "answered");
        let len = map.u32_at(MB_RESP_LEN).unwrap().load(Ordering::Relaxed) as usize;
        let mut out = Vec::new();
        map.copy_out(MB_RESP, len, &mut out).unwrap();
        (map.u32_at(MB_RESP_STATUS).unwrap().load(Ordering::Relaxed), out)
    }

    #[test]
    fn install_collect_detach_through_the_area() {
        let map = Map::anonymous(AREA_SIZE).unwrap();
        MB_TP.id();
        serve(&map, 0, AREA_SIZE);
        assert_eq!(map.u32_at(MB_RESP_SEQ).unwrap().load(Ordering::Relaxed), 0, "nothing pending");
        let plan = Plan {
            tracepoint: "mailbox.test".into(),
            filter: Filter::True,
            keys: Vec::new(),
            aggs: vec![AggSpec { kind: AggKind::Sum, input: Some(Operand::Field("n".into())) }],
            capacity: 16,
            carry: Vec::new(),
        };
        let mut req = vec![OP_INSTALL];
        req.extend(60_000u64.to_le_bytes());
        req.extend(encode_plan(&plan));
        let (st, id) = roundtrip(&map, 1, &req);
        assert_eq!(st, STATUS_OK, "{}", String::from_utf8_lossy(&id));
        for n in 1..=4u64 {
            crate::event!(MB_TP, n = n);
        }
        let collect = [&[OP_COLLECT][..], &id].concat();
        let (st, p) = roundtrip(&map, 2, &collect);
        assert_eq!(st, STATUS_OK);
        let p = crate::agg::Partial::decode(&p).unwrap();
        assert_eq!(p.events, 4);
        assert_eq!(p.groups.values().next(), Some(&vec![crate::agg::State::Sum(10)]));
        let (st, _) = roundtrip(&map, 3, &[&[OP_DETACH][..], &id].concat());
        assert_eq!(st, STATUS_OK);
        let (st, why) = roundtrip(&map, 4, &collect);
        assert_eq!(st, STATUS_REFUSED, "a detached query's tables are gone");
        assert!(String::from_utf8_lossy(&why).contains("not installed"));
    }

    #[test]
    fn a_query_whose_lease_runs_out_is_detached() {
        MB_TP.id();
        let plan = Plan {
            tracepoint: "mailbox.test".into(),
            filter: Filter::True,
            keys: Vec::new(),
            aggs: vec![AggSpec { kind: AggKind::Count, input: None }],
            capacity: 16,
            carry: Vec::new(),
        };
        let install = |lease_ms: u64| {
            let mut req = vec![OP_INSTALL];
            req.extend(lease_ms.to_le_bytes());
            req.extend(encode_plan(&plan));
            let (st, id) = execute(&req);
            assert_eq!(st, STATUS_OK);
            QueryId(u64::from_le_bytes(id.try_into().unwrap()))
        };
        let (short, long) = (install(0), install(3_600_000));
        std::thread::sleep(Duration::from_millis(5));
        assert!(expire() >= 1);
        assert!(crate::query::collect(short).is_none(), "lapsed: detached, tables freed");
        assert!(crate::query::collect(long).is_some(), "still leased");
        assert_eq!(execute(&[&[OP_DETACH][..], &long.0.to_le_bytes()].concat()).0, STATUS_OK);
    }

    #[test]
    fn requests_are_refused_with_a_reason() {
        assert_eq!(execute(&[]).0, STATUS_REFUSED);
        let (st, msg) = execute(&[9]);
        assert_eq!(st, STATUS_REFUSED);
        assert!(String::from_utf8_lossy(&msg).contains("unknown"));
        let (st, msg) = execute(&[OP_COLLECT, 1, 2]);
        assert_eq!(st, STATUS_REFUSED);
        assert!(String::from_utf8_lossy(&msg).contains("8 bytes"));
        let (st, msg) = execute(&[OP_INSTALL, 1]);
        assert_eq!(st, STATUS_REFUSED);
        assert!(String::from_utf8_lossy(&msg).contains("lease"));
        let mut req = vec![OP_INSTALL];
        req.extend(60_000u64.to_le_bytes());
        req.extend(encode_plan(&Plan { tracepoint: "no.such.tracepoint".into(), ..plan() }));
        let (st, msg) = execute(&req);
        assert_eq!(st, STATUS_REFUSED);
        assert!(String::from_utf8_lossy(&msg).contains("no.such.tracepoint"));
    }
}
