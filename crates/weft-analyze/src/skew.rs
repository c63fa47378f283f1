//! Clock-skew adjustment for cross-host parent/child spans, applied at read time.
//!
//! Spans recorded on different hosts carry different clocks; a server span can appear to start
//! before the client span that caused it. The rule Jaeger's and Zipkin's adjusters use:
//!
//! * walk each trace tree from its roots; a child on the **same host** as its parent inherits the
//!   parent's shift (one clock per host);
//! * a child on **another host** (or with no known host) gets a new shift computed against its
//!   already-adjusted parent:
//!   * it fits inside the parent → no shift;
//!   * it lasted longer than the parent (async work, or a parent that timed out) → only make it
//!     not start before the parent;
//!   * otherwise assume the network latency is split equally between request and response:
//!     `shift = parent.start + (parent.duration − child.duration) / 2 − child.start` (the
//!     half-difference rule);
//! * the shift moves the span's start, end and event times; a shifted span gets the attribute
//!   [`weft_model::conv::SKEW_ADJUSTED_NS`] = the shift in ns (signed), so the UI and APIs can
//!   say so. Stored data never changes: callers adjust copies.
//!
//! A span's host is its resource's `host.name`, else `host.id`, else the span attribute
//! `net.host.ip` (Zipkin's `localEndpoint`), else `service.instance.id`; spans with none of
//! these are compared with their parent every time, as Jaeger does for spans without a host.

use std::collections::HashMap;

use weft_model::{Span, SpanId, Value, conv};

/// The clock identity of a span's producer ("" when unknown).
pub fn host_key(s: &Span) -> &str {
    let r = &s.resource.attributes;
    r.get_str(conv::HOST_NAME)
        .or_else(|| r.get_str("host.id"))
        .or_else(|| s.attributes.get_str(conv::LOCAL_IPV4))
        .or_else(|| r.get_str(conv::SERVICE_INSTANCE_ID))
        .unwrap_or("")
}

fn duration(s: &Span) -> i128 {
    s.end_ns as i128 - s.start_ns as i128
}

/// The shift (ns) that places `child` relative to its (already adjusted) `parent`.
pub fn skew_delta(child: &Span, parent: &Span) -> i64 {
    let (pd, cd) = (duration(parent), duration(child));
    let (ps, cs) = (parent.start_ns as i128, child.start_ns as i128);
    let delta = if cd > pd {
        if cs < ps { ps - cs } else { 0 }
    } else if cs >= ps && cs + cd <= ps + pd {
        0
    } else {
        let latency = (pd - cd) / 2;
        ps + latency - cs
    };
    delta.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

fn shift(t: u64, d: i64) -> u64 {
    t.saturating_add_signed(d)
}

/// Adjusts one trace's spans in place; returns how many spans were shifted.
///
/// Spans whose parent is missing from `spans` are treated as roots. A span id shared by a
/// client and a server span (Zipkin's shared spans) is resolved to the first span with that
/// id as parent.
pub fn adjust_trace(spans: &mut [Span]) -> usize {
    let mut index: HashMap<SpanId, usize> = HashMap::with_capacity(spans.len());
    for (i, s) in spans.iter().enumerate() {
        index.entry(s.span_id).or_insert(i);
    }
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); spans.len()];
    let mut roots = Vec::new();
    for (i, s) in spans.iter().enumerate() {
        match s.parent_span_id.and_then(|p| index.get(&p).copied()).filter(|&p| p != i) {
            Some(p) => children[p].push(i),
            None => match index.get(&s.span_id).copied().filter(|&p| p != i) {
                // A shared (server) span whose client half has the same id.
                Some(p) => children[p].push(i),
                None => roots.push(i),
            },
        }
    }
    // Iterative DFS: (node, parent, inherited host, inherited delta).
    let mut adjusted = 0;
    let mut visited = vec![false; spans.len()];
    let mut stack: Vec<(usize, Option<usize>, String, i64)> =
        roots.iter().rev().map(|&r| (r, None, String::new(), 0)).collect();
    while let Some((n, parent, host, inherited)) = stack.pop() {
        if visited[n] {
            continue; // cycles in bad input
        }
        visited[n] = true;
        let my_host = host_key(&spans[n]).to_owned();
        let delta = match parent {
            Some(p) if my_host.is_empty() || my_host != host => skew_delta(&spans[n], &spans[p]),
            _ => inherited,
        };
        if delta != 0 {
            let s = &mut spans[n];
            s.start_ns = shift(s.start_ns, delta);
            s.end_ns = shift(s.end_ns, delta);
            for e in &mut s.events {
                e.time_ns = shift(e.time_ns, delta);
            }
            s.attributes.set(conv::SKEW_ADJUSTED_NS, Value::I64(delta));
            adjusted += 1;
        }
        for &c in children[n].iter().rev() {
            stack.push((c, Some(n), my_host.clone(), delta));
        }
    }
    adjusted
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use weft_model::{Resource, SpanEvent, SpanKind, TraceId};

    use super::*;

    fn span(id: u64, parent: Option<u64>, host: &str, start: u64, end: u64) -> Span {
        let mut r = Resource::service("svc");
        if !host.is_empty() {
            r.attributes.push(conv::HOST_NAME, host);
        }
        Span {
            trace_id: TraceId::from_u128(1),
            span_id: SpanId::from_u64(id),
            parent_span_id: parent.map(SpanId::from_u64),
            name: format!("s{id}").into(),
            kind: SpanKind::Server,
            start_ns: start,
            end_ns: end,
            resource: Arc::new(r),
            ..Span::default()
        }
    }

    #[test]
    fn server_before_client_is_centred_by_half_difference() {
        // Client 1000..2000 on host a; server on host b appears at 500..900 (clock 600 behind).
        let mut t = vec![span(1, None, "a", 1000, 2000), span(2, Some(1), "b", 500, 900)];
        t[1].events.push(SpanEvent { time_ns: 600, name: "e".into(), ..Default::default() });
        assert_eq!(adjust_trace(&mut t), 1);
        // latency = (1000 - 400) / 2 = 300 → server starts at 1300.
        assert_eq!((t[1].start_ns, t[1].end_ns), (1300, 1700));
        assert_eq!(t[1].events[0].time_ns, 1400);
        assert_eq!(t[1].attributes.get(conv::SKEW_ADJUSTED_NS), Some(&Value::I64(800)));
        assert!(t[0].attributes.get(conv::SKEW_ADJUSTED_NS).is_none());
    }

    #[test]
    fn same_host_children_inherit_the_shift_and_fitting_children_stay() {
        let mut t = vec![
            span(1, None, "a", 1000, 2000),
            span(2, Some(1), "b", 500, 900),   // shifted +800
            span(3, Some(2), "b", 600, 700),   // same host: also +800
            span(4, Some(1), "c", 1100, 1200), // fits: untouched
        ];
        assert_eq!(adjust_trace(&mut t), 2);
        assert_eq!(t[2].start_ns, 1400);
        assert_eq!(t[3].start_ns, 1100);
    }

    #[test]
    fn longer_child_only_moved_to_not_start_before_parent() {
        let mut t = vec![span(1, None, "a", 1000, 1100), span(2, Some(1), "b", 900, 1500)];
        adjust_trace(&mut t);
        assert_eq!((t[1].start_ns, t[1].end_ns), (1000, 1600));
        let mut t = vec![span(1, None, "a", 1000, 1100), span(2, Some(1), "b", 1050, 1500)];
        assert_eq!(adjust_trace(&mut t), 0);
    }

    #[test]
    fn same_host_is_never_adjusted_and_bad_input_is_survived() {
        let mut t = vec![span(1, None, "a", 1000, 2000), span(2, Some(1), "a", 500, 900)];
        assert_eq!(adjust_trace(&mut t), 0);
        // Cycle and self-parent: no hang, no panic.
        let mut t = vec![
            span(1, Some(2), "a", 0, 10),
            span(2, Some(1), "b", 5, u64::MAX),
            span(3, Some(3), "", 0, 0),
        ];
        adjust_trace(&mut t);
    }
}
