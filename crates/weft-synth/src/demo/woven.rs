//! Demo data for the UI: woven simulator requests (host → NIC → network → NIC → host, joined by
//! `caused_by` links across components and traces) and one very large trace.
//!
//! Shaped like what the weavers produce from a SimBricks run (gem5 hosts, nicbm NICs, an ns-3
//! network): each component's spans carry its resource (`service.name` = the component
//! instance, `weft.component.kind`, `weft.source.tool`), hops inside the network carry
//! `weft.component` (`ns3/sw0`), and every hand-over between components is a link with
//! relation `caused_by` pointing at the span that caused it. One request/response makes four
//! traces: the client side (host0 + nic0), the network carrying the request, the server side
//! (nic1 + host1) and the network carrying the response. Following the links from the client's
//! MMIO write leads through all four and back.

use std::sync::Arc;

use crate::shop::Rng;
use weft_model::{
    Attributes, KeyValue, Link, LinkRelation, Resource, Scope, Span, SpanEvent, SpanId, SpanKind, Status,
    StatusCode, TraceId, Value, conv,
};

fn resource(name: &str, kind: &str, tool: &str, host: &str) -> Arc<Resource> {
    let mut a = Attributes::new();
    a.push(conv::SERVICE_NAME, name);
    a.push(conv::COMPONENT_KIND, kind);
    a.push(conv::SOURCE_TOOL, tool);
    a.push(conv::HOST_NAME, host);
    a.push(conv::SERVICE_INSTANCE_ID, format!("{tool}.{name}"));
    Arc::new(Resource { attributes: a, ..Resource::default() })
}

struct B {
    rng: Rng,
    spans: Vec<Span>,
    scope: Arc<Scope>,
}

impl B {
    #[allow(clippy::too_many_arguments)]
    fn span(
        &mut self,
        trace: TraceId,
        parent: Option<SpanId>,
        res: &Arc<Resource>,
        name: &str,
        start: u64,
        end: u64,
        attrs: Vec<KeyValue>,
    ) -> SpanId {
        let id = SpanId::from_u64(self.rng.next_u64() | 1);
        self.spans.push(Span {
            trace_id: trace,
            span_id: id,
            parent_span_id: parent,
            name: name.into(),
            kind: SpanKind::Internal,
            start_ns: start,
            end_ns: end,
            attributes: Attributes(attrs),
            resource: res.clone(),
            scope: self.scope.clone(),
            ..Span::default()
        });
        id
    }
    fn link(&mut self, from: SpanId, to_trace: TraceId, to: SpanId) {
        if let Some(s) = self.spans.iter_mut().rev().find(|s| s.span_id == from) {
            s.links.push(Link {
                trace_id: to_trace,
                span_id: to,
                relation: LinkRelation::CausedBy,
                ..Link::default()
            });
        }
    }
    fn trace_id(&mut self) -> TraceId {
        TraceId::from_u128(((self.rng.next_u64() as u128) << 64) | (self.rng.next_u64() | 1) as u128)
    }
    fn jitter(&mut self, ns: u64) -> u64 {
        ns + self.rng.below(ns / 3 + 1)
    }
}

fn kv(k: &str, v: impl Into<Value>) -> KeyValue {
    KeyValue::new(k, v)
}

/// One simulated RPC (request and response) as woven spans, starting at `start_ns`; four
/// traces, in no particular order. Deterministic for a seed.
pub fn woven_request(seed: u64, start_ns: u64) -> Vec<Span> {
    let mut b = B { rng: Rng::new(seed), spans: Vec::new(), scope: Arc::new(Scope::named("weft.weave")) };
    let host0 = resource("host0", "host", "gem5", "host0");
    let host1 = resource("host1", "host", "gem5", "host1");
    let nic0 = resource("nic0", "nic", "nicbm", "host0");
    let nic1 = resource("nic1", "nic", "nicbm", "host1");
    let net = resource("ns3", "network", "ns-3", "ns3");
    let (tc, tn, ts, tr) = (b.trace_id(), b.trace_id(), b.trace_id(), b.trace_id());
    let bytes = 64 + b.rng.below(1400) as i64;

    // Client host: the RPC, the send path down to the doorbell MMIO write.
    let t0 = start_ns;
    let mut t = t0 + b.jitter(2_000);
    let root = b.span(
        tc,
        None,
        &host0,
        "rpc_call echo",
        t0,
        0,
        vec![kv("rpc.method", "echo"), kv("msg.bytes", bytes)],
    );
    let send = b.span(
        tc,
        Some(root),
        &host0,
        "sys_sendto",
        t,
        0,
        vec![kv("syscall.nr", 44i64), kv("msg.bytes", bytes)],
    );
    let s_send = t;
    t += b.jitter(1_500);
    let xmit =
        b.span(tc, Some(send), &host0, "i40e_xmit_frame", t, 0, vec![kv("code.function", "i40e_xmit_frame")]);
    let s_xmit = t;
    t += b.jitter(900);
    let mmio = b.span(
        tc,
        Some(xmit),
        &host0,
        "mmio_write TDT",
        t,
        t + 120,
        vec![kv("pci.bar", 0i64), kv("mmio.offset", "0x000e0004")],
    );
    t += 400;
    set_end(&mut b.spans, xmit, s_xmit.max(t));
    t += b.jitter(600);
    set_end(&mut b.spans, send, s_send.max(t));

    // Client NIC: fetch descriptor and payload by DMA, put the frame on the wire.
    let mut n = t - 300;
    let ntx = b.span(tc, Some(root), &nic0, "tx", n, 0, vec![kv("eth.bytes", bytes + 42)]);
    b.link(ntx, tc, mmio);
    n += 200;
    let d = b.rng.below(400) + 500;
    b.span(tc, Some(ntx), &nic0, "dma_read descriptor", n, n + d, vec![kv("dma.bytes", 16i64)]);
    n += 1_100;
    let d = b.jitter(1_200);
    b.span(tc, Some(ntx), &nic0, "dma_read payload", n, n + d, vec![kv("dma.bytes", bytes)]);
    n += d + 150;
    let d = b.jitter(700);
    let eth_tx = b.span(tc, Some(ntx), &nic0, "eth_tx", n, n + d, vec![kv("eth.port", 0i64)]);
    n += d;
    set_end(&mut b.spans, ntx, n);

    // Network: request over two switches.
    let (net_end, last_hop) = network(&mut b, &net, tn, n + 100, bytes, (tc, eth_tx), "host0 → host1");

    // Server NIC: receive, DMA into memory, raise MSI-X.
    let mut m = net_end + 150;
    let nrx = b.span(ts, None, &nic1, "rx", m, 0, vec![kv("eth.bytes", bytes + 42)]);
    b.link(nrx, tn, last_hop);
    m += 300;
    let d = b.jitter(1_300);
    b.span(ts, Some(nrx), &nic1, "dma_write payload", m, m + d, vec![kv("dma.bytes", bytes)]);
    m += d + 200;
    let msix = b.span(ts, Some(nrx), &nic1, "msix_interrupt", m, m + 80, vec![kv("msix.vector", 3i64)]);
    m += 80;
    set_end(&mut b.spans, nrx, m);

    // Server host: interrupt, NAPI poll, the application, the reply's send path.
    let mut h = m + 400;
    let irq = b.span(ts, Some(nrx), &host1, "irq i40e_msix_clean_rings", h, h + 900, vec![kv("irq", 42i64)]);
    b.link(irq, ts, msix);
    h += 1_000;
    let napi_d = b.jitter(4_000);
    let napi = b.span(ts, Some(nrx), &host1, "napi_poll i40e", h, h + napi_d, vec![kv("napi.budget", 64i64)]);
    b.link(napi, ts, irq);
    h += napi_d + 500;
    let app_d = b.jitter(30_000);
    let app =
        b.span(ts, Some(nrx), &host1, "server handle echo", h, h + app_d, vec![kv("rpc.method", "echo")]);
    b.link(app, ts, napi);
    if b.rng.chance(0.1)
        && let Some(s) = b.spans.iter_mut().rev().find(|s| s.span_id == app)
    {
        s.status = Status { code: StatusCode::Error, message: "deadline exceeded".into() };
    }
    h += app_d + 300;
    let rsend = b.span(ts, Some(nrx), &host1, "sys_sendto", h, 0, vec![kv("msg.bytes", bytes)]);
    let s_rsend = h;
    h += b.jitter(1_500);
    let rmmio =
        b.span(ts, Some(rsend), &host1, "mmio_write TDT", h, h + 120, vec![kv("mmio.offset", "0x000e0004")]);
    h += 500;
    set_end(&mut b.spans, rsend, s_rsend.max(h));
    let mut r = h;
    let rtx = b.span(ts, Some(nrx), &nic1, "tx", r, 0, vec![kv("eth.bytes", bytes + 42)]);
    b.link(rtx, ts, rmmio);
    r += b.jitter(1_800);
    let d = b.jitter(700);
    let reth = b.span(ts, Some(rtx), &nic1, "eth_tx", r, r + d, vec![]);
    r += d;
    set_end(&mut b.spans, rtx, r);
    set_end(&mut b.spans, nrx, r);

    // Network: response.
    let (rnet_end, rlast) = network(&mut b, &net, tr, r + 100, bytes, (ts, reth), "host1 → host0");

    // Client NIC receives the response; client host wakes up.
    let mut c = rnet_end + 150;
    let crx = b.span(tc, Some(root), &nic0, "rx", c, 0, vec![kv("eth.bytes", bytes + 42)]);
    b.link(crx, tr, rlast);
    c += 300;
    let d = b.jitter(1_300);
    b.span(tc, Some(crx), &nic0, "dma_write payload", c, c + d, vec![kv("dma.bytes", bytes)]);
    c += d + 200;
    let cmsix = b.span(tc, Some(crx), &nic0, "msix_interrupt", c, c + 80, vec![]);
    c += 80;
    set_end(&mut b.spans, crx, c);
    c += 400;
    let cirq = b.span(tc, Some(root), &host0, "irq i40e_msix_clean_rings", c, c + 900, vec![]);
    b.link(cirq, tc, cmsix);
    c += 1_000;
    let d = b.jitter(3_000);
    let crecv = b.span(tc, Some(root), &host0, "sys_recvfrom", c, c + d, vec![kv("msg.bytes", bytes)]);
    b.link(crecv, tc, cirq);
    c += d + 200;
    set_end(&mut b.spans, root, c);
    if let Some(s) = b.spans.iter_mut().find(|s| s.span_id == root) {
        s.events.push(SpanEvent { time_ns: t0 + 10, name: "cs".into(), ..SpanEvent::default() });
        s.events.push(SpanEvent { time_ns: c - 10, name: "cr".into(), ..SpanEvent::default() });
    }
    if let Some(s) = b.spans.iter_mut().find(|s| s.span_id == app) {
        let (st, en) = (s.start_ns, s.end_ns);
        s.events.push(SpanEvent { time_ns: st + 5, name: "sr".into(), ..SpanEvent::default() });
        s.events.push(SpanEvent { time_ns: en - 5, name: "ss".into(), ..SpanEvent::default() });
    }
    b.spans
}

fn set_end(spans: &mut [Span], id: SpanId, end: u64) {
    if let Some(s) = spans.iter_mut().rev().find(|s| s.span_id == id) {
        s.end_ns = end.max(s.start_ns);
    }
}

/// A packet crossing two switches; returns (end, last hop span).
fn network(
    b: &mut B,
    net: &Arc<Resource>,
    trace: TraceId,
    start: u64,
    bytes: i64,
    cause: (TraceId, SpanId),
    what: &str,
) -> (u64, SpanId) {
    let root =
        b.span(trace, None, net, &format!("packet {what}"), start, 0, vec![kv("ip.bytes", bytes + 28)]);
    b.link(root, cause.0, cause.1);
    let mut t = start;
    let mut last = root;
    for (i, hop) in
        ["ns3/link h-sw0", "ns3/sw0", "ns3/link sw0-sw1", "ns3/sw1", "ns3/link sw1-h"].iter().enumerate()
    {
        let d = if i % 2 == 0 { b.jitter(1_000) } else { b.jitter(2_500) };
        let name = if i % 2 == 0 { "propagate" } else { "switch forward" };
        let q = b.rng.below(8) as i64;
        let s = b.span(
            trace,
            Some(root),
            net,
            name,
            t,
            t + d,
            vec![kv(conv::COMPONENT, *hop), kv("queue.depth", q)],
        );
        if last != root {
            b.link(s, trace, last);
        }
        last = s;
        t += d;
    }
    set_end(&mut b.spans, root, t);
    (t, last)
}

/// One trace of `n` spans (n ≥ 1): a batch job fanning out over shards, workers and storage
/// calls — the shape of a big map/reduce or a long simulation trace. Deterministic for a seed.
pub fn big_trace(seed: u64, n: usize, start_ns: u64) -> Vec<Span> {
    let mut rng = Rng::new(seed);
    let trace = TraceId::from_u128(((rng.next_u64() as u128) << 64) | (rng.next_u64() | 1) as u128);
    let services: Vec<Arc<Resource>> = ["scheduler", "worker", "storage", "cache", "index", "compactor"]
        .iter()
        .map(|s| Arc::new(Resource::service(*s)))
        .collect();
    let scope = Arc::new(Scope::named("weft.demo.big"));
    let mut spans: Vec<Span> = Vec::with_capacity(n);
    let mk =
        |spans: &mut Vec<Span>, parent: Option<usize>, svc: usize, name: String, start: u64, end: u64| {
            let i = spans.len();
            spans.push(Span {
                trace_id: trace,
                span_id: SpanId::from_u64(i as u64 + 1),
                parent_span_id: parent.map(|p| SpanId::from_u64(p as u64 + 1)),
                name: name.into(),
                kind: if parent.is_none() { SpanKind::Server } else { SpanKind::Internal },
                start_ns: start,
                end_ns: end,
                resource: services[svc].clone(),
                scope: scope.clone(),
                ..Span::default()
            });
            i
        };
    let root = mk(&mut spans, None, 0, "batch job".into(), start_ns, start_ns);
    // Shards of ~1000 spans, each a worker task with steps of storage/cache calls.
    let mut t = start_ns + 50_000;
    let mut shard = 0usize;
    while spans.len() < n {
        let s0 = t;
        let sh = mk(&mut spans, Some(root), 1, format!("shard {shard}"), s0, s0);
        let mut u = s0 + 5_000;
        let mut step = 0usize;
        while spans.len() < n && step < 200 {
            let st = mk(
                &mut spans,
                Some(sh),
                1,
                format!("step {}", ["map", "sort", "merge", "write"][step % 4]),
                u,
                u,
            );
            let mut v = u + 1_000;
            for k in 0..4 {
                if spans.len() >= n {
                    break;
                }
                let svc = 2 + (rng.below(4) as usize);
                let d = rng.latency_ns(20 + 10 * k);
                let name = match svc {
                    2 => "storage read",
                    3 => "cache get",
                    4 => "index lookup",
                    _ => "compact block",
                };
                let c = mk(&mut spans, Some(st), svc, name.into(), v, v + d);
                if rng.chance(0.002) {
                    spans[c].status = Status { code: StatusCode::Error, message: "timeout".into() };
                }
                v += d + rng.below(3_000);
            }
            spans[st].end_ns = v + 500;
            u = v + 2_000;
            step += 1;
        }
        spans[sh].end_ns = u;
        // Shards overlap: the next one starts before this one ends.
        t = s0 + (u - s0) / 3;
        shard += 1;
    }
    let end = spans.iter().map(|s| s.end_ns).max().unwrap_or(start_ns) + 10_000;
    spans[root].end_ns = end;
    spans.truncate(n.max(1));
    spans
}
