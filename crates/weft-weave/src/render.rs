//! A compact, human-readable rendering of woven traces: one tree per trace with each span's
//! name, component, type, start (relative to its trace) and duration, the attributes that
//! matter for its type, and its cross-component links. Golden tests check it in; `weft weave
//! --tree` prints it.
//!
//! ```text
//! trace 3: 9 spans, 4 components (client, client-nic, ns3, server-nic), 0.000-31.250µs
//! └─ sendto  client  HostCall  +0ns 1.500µs  calls=6 kernel_tx driver_tx
//!    └─ HostMmio  client  +1.000µs 0ns  write bar0 off=0x400 posted
//!       └─ NicMmio  client-nic  +1.500µs 0ns  write off=0x400  ⇐ HostMmio@client
//! ```
//!
//! Traces are ordered by start, children by start then name; times are simulated time as
//! woven (ns). Ordering uses span and trace ids only to break ties between otherwise identical
//! traces, so renderings are stable across seeds in practice.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write;

use weft_model::{Span, SpanId, TraceId, Value, conv};

use crate::weaver::attr;

fn dur(ns: u64) -> String {
    if ns >= 1_000_000_000 {
        format!("{:.3}s", ns as f64 / 1e9)
    } else if ns >= 1_000_000 {
        format!("{:.3}ms", ns as f64 / 1e6)
    } else if ns >= 1_000 {
        format!("{:.3}µs", ns as f64 / 1e3)
    } else {
        format!("{ns}ns")
    }
}

fn get_i(s: &Span, k: &str) -> Option<i64> {
    s.attributes.get(k).and_then(Value::as_i64)
}

fn get_b(s: &Span, k: &str) -> bool {
    s.attributes.get(k).and_then(Value::as_bool).unwrap_or(false)
}

fn get_s<'a>(s: &'a Span, k: &str) -> Option<&'a str> {
    s.attributes.get_str(k)
}

fn component(s: &Span) -> &str {
    get_s(s, conv::COMPONENT).unwrap_or_else(|| s.service_name())
}

/// The type-specific summary of a span.
pub fn summary(s: &Span) -> String {
    let mut out = String::new();
    let ty = get_s(s, conv::SPAN_TYPE).unwrap_or("");
    let rw = |w: bool| if w { "write" } else { "read" };
    match ty {
        "HostCall" => {
            if let Some(e) = get_s(s, attr::HOST_ENTRY) {
                let _ = write!(out, "entry={e} ");
            }
            let _ = write!(out, "calls={}", get_i(s, attr::HOST_CALLS).unwrap_or(0));
            for (k, n) in [
                (attr::HOST_KERNEL_TX, "kernel_tx"),
                (attr::HOST_KERNEL_RX, "kernel_rx"),
                (attr::HOST_DRIVER_TX, "driver_tx"),
                (attr::HOST_DRIVER_RX, "driver_rx"),
            ] {
                if get_b(s, k) {
                    let _ = write!(out, " {n}");
                }
            }
        }
        "HostMmio" | "NicMmio" => {
            let _ = write!(out, "{}", rw(get_b(s, attr::MMIO_WRITE)));
            if let Some(b) = get_i(s, attr::MMIO_BAR) {
                let _ = write!(out, " bar{b}");
            }
            let _ = write!(
                out,
                " off={:#x} size={}",
                get_i(s, attr::MMIO_OFFSET).unwrap_or(0),
                get_i(s, attr::MMIO_SIZE).unwrap_or(0)
            );
            if get_b(s, attr::MMIO_POSTED) {
                out.push_str(" posted");
            }
        }
        "HostDma" | "NicDma" => {
            match s.attributes.get(attr::DMA_WRITE).and_then(Value::as_bool) {
                Some(w) => out.push_str(rw(w)),
                None => out.push('?'),
            }
            let _ = write!(
                out,
                " id={:#x} addr={:#x} size={}",
                get_i(s, attr::DMA_ID).unwrap_or(0),
                get_i(s, attr::DMA_ADDR).unwrap_or(0),
                get_i(s, attr::DMA_SIZE).unwrap_or(0)
            );
        }
        "HostMsix" | "NicMsix" => {
            let _ = write!(out, "vec={}", get_i(s, attr::MSIX_VECTOR).unwrap_or(0));
        }
        "NicEth" => {
            let _ = write!(out, "{}", get_s(s, attr::ETH_DIRECTION).unwrap_or("?"));
            if let Some(l) = get_i(s, attr::ETH_LENGTH) {
                let _ = write!(out, " len={l}");
            }
        }
        "HostPci" => out.push_str(rw(get_b(s, attr::PCI_WRITE))),
        "NetDevice" => {
            let _ = write!(
                out,
                "{} {}",
                get_s(s, conv::NET_PORT).unwrap_or("?"),
                get_s(s, conv::NET_DIRECTION).unwrap_or("?")
            );
            if let Some(u) = get_i(s, conv::NET_PACKET_UID) {
                let _ = write!(out, " uid={u}");
            }
            if let Some(p) = get_s(s, conv::NETWORK_PROTOCOL) {
                let _ = write!(out, " {}", get_s(s, conv::NETWORK_TRANSPORT).unwrap_or(p));
            }
            if let (Some(a), Some(b)) = (get_s(s, conv::SOURCE_ADDRESS), get_s(s, conv::DESTINATION_ADDRESS))
            {
                match (get_i(s, conv::SOURCE_PORT), get_i(s, conv::DESTINATION_PORT)) {
                    (Some(p), Some(q)) => {
                        let _ = write!(out, " {a}:{p}>{b}:{q}");
                    }
                    _ => {
                        let _ = write!(out, " {a}>{b}");
                    }
                }
            }
            let _ = write!(out, " size={}", get_i(s, conv::NET_PAYLOAD_SIZE).unwrap_or(0));
            if let Some(b) = get_s(s, conv::NET_BOUNDARY) {
                let _ = write!(out, " {b}");
            }
            if get_b(s, conv::NET_DROP) {
                out.push_str(" DROP");
            }
            if s.attributes.get(conv::NET_INTERESTING).and_then(Value::as_bool) == Some(false) {
                out.push_str(" uninteresting");
            }
        }
        _ => {}
    }
    if get_b(s, conv::INCOMPLETE) {
        out.push_str(" INCOMPLETE");
    }
    out
}

/// Renders every trace in `spans` (see the module docs).
pub fn render(spans: &[Span]) -> String {
    let mut by_trace: HashMap<TraceId, Vec<&Span>> = HashMap::new();
    for s in spans {
        by_trace.entry(s.trace_id).or_default().push(s);
    }
    let index: HashMap<(TraceId, SpanId), &Span> =
        spans.iter().map(|s| ((s.trace_id, s.span_id), s)).collect();
    let by_id: HashMap<SpanId, &Span> = spans.iter().map(|s| (s.span_id, s)).collect();
    let mut traces: Vec<(u64, String, u64, usize, TraceId)> = by_trace
        .iter()
        .map(|(t, v)| {
            let start = v.iter().map(|s| s.start_ns).min().unwrap_or(0);
            let end = v.iter().map(|s| s.end_ns).max().unwrap_or(0);
            // Ties: the first root's name, component and summary, the length, the size; ids last.
            let root = v
                .iter()
                .filter(|s| s.parent_span_id.is_none_or(|p| !index.contains_key(&(*t, p))))
                .min_by_key(|s| (s.start_ns, s.name.clone(), component(s).to_owned()))
                .map(|s| format!("{} {} {}", s.name, component(s), summary(s)))
                .unwrap_or_default();
            (start, root, end, v.len(), *t)
        })
        .collect();
    traces.sort();
    let mut out = String::new();
    for (n, (start, _, _, _, t)) in traces.iter().enumerate() {
        let v = &by_trace[t];
        let end = v.iter().map(|s| s.end_ns).max().unwrap_or(*start);
        let comps: BTreeSet<&str> = v.iter().map(|s| s.service_name()).collect();
        let _ = writeln!(
            out,
            "trace {}: {} span{}, {} component{} ({}), {}",
            n + 1,
            v.len(),
            if v.len() == 1 { "" } else { "s" },
            comps.len(),
            if comps.len() == 1 { "" } else { "s" },
            comps.iter().copied().collect::<Vec<_>>().join(", "),
            dur(end - start)
        );
        let mut children: HashMap<SpanId, Vec<&Span>> = HashMap::new();
        let mut roots = Vec::new();
        for s in v {
            match s.parent_span_id {
                Some(p) if index.contains_key(&(*t, p)) => children.entry(p).or_default().push(s),
                _ => roots.push(*s),
            }
        }
        let key = |s: &&Span| (s.start_ns, s.name.clone(), component(s).to_owned(), summary(s));
        roots.sort_by_key(key);
        for c in children.values_mut() {
            c.sort_by_key(key);
        }
        let mut stack: Vec<(&Span, String, bool)> =
            roots.iter().rev().enumerate().map(|(i, s)| (*s, String::new(), i == 0)).collect();
        while let Some((s, prefix, last)) = stack.pop() {
            let ty = get_s(s, conv::SPAN_TYPE).unwrap_or("");
            let _ = write!(out, "{prefix}{}{}  {}", if last { "└─ " } else { "├─ " }, s.name, component(s));
            if ty != s.name {
                let _ = write!(out, "  {ty}");
            }
            let _ = write!(out, "  +{} {}", dur(s.start_ns - start), dur(s.duration_ns()));
            let sum = summary(s);
            if !sum.is_empty() {
                let _ = write!(out, "  {sum}");
            }
            if s.parent_span_id.is_some_and(|p| !index.contains_key(&(*t, p))) {
                out.push_str("  (parent not in this trace)");
            }
            for l in &s.links {
                let target = by_id
                    .get(&l.span_id)
                    .map(|x| format!("{}@{}", x.name, component(x)))
                    .unwrap_or_else(|| "(unknown span)".into());
                let rel = match l.relation.as_str() {
                    "caused_by" => "⇐",
                    "" => "~",
                    r => r,
                };
                let _ = write!(out, "  {rel} {target}");
            }
            out.push('\n');
            let child_prefix = format!("{prefix}{}", if last { "   " } else { "│  " });
            if let Some(cs) = children.get(&s.span_id) {
                for (i, c) in cs.iter().enumerate().rev() {
                    stack.push((c, child_prefix.clone(), i == cs.len() - 1));
                }
            }
        }
    }
    out
}
