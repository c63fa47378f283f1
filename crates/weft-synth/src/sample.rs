//! Deterministic, realistic spans for benchmarks, tests and generated inputs: a few services
//! (each its own resource), 10–20 attributes of every type per span, a couple of events,
//! now and then a link, parent/child structure within traces.

use std::sync::Arc;

use weft_model::{
    Attributes, KeyValue, Link, LinkRelation, Resource, Scope, Span, SpanEvent, SpanId, SpanKind, Status,
    StatusCode, TraceId, Value, conv,
};

/// A small xorshift generator (reproducible across platforms, no dependency).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// Seeded generator (seed 0 is replaced by a fixed non-zero value).
    pub fn new(seed: u64) -> Self {
        Rng(if seed == 0 { 0x9E37_79B9_7F4A_7C15 } else { seed })
    }
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

const SERVICES: &[(&str, &str)] = &[
    ("frontend", "10.0.0.1"),
    ("checkout", "10.0.0.2"),
    ("payments", "10.0.0.3"),
    ("inventory", "10.0.0.4"),
];
const ROUTES: &[&str] = &["/api/cart", "/api/checkout", "/api/pay", "/api/stock/{id}", "/healthz"];

/// Generates `n` spans from `seed`: traces of 1–8 spans across the services, resources and
/// scopes shared (one `Arc` per service), realistic HTTP/RPC attributes.
pub fn spans(n: usize, seed: u64) -> Vec<Span> {
    let mut rng = Rng::new(seed);
    let resources: Vec<Arc<Resource>> = SERVICES
        .iter()
        .enumerate()
        .map(|(i, (name, _))| {
            let mut r = Resource::service(*name);
            r.attributes.push(conv::SERVICE_INSTANCE_ID, format!("{name}-{i}"));
            r.attributes.push(conv::HOST_NAME, format!("node-{}", i % 2));
            r.attributes.push("telemetry.sdk.language", "rust");
            r.attributes.push("telemetry.sdk.version", "1.2.3");
            r.schema_url = "https://opentelemetry.io/schemas/1.26.0".into();
            Arc::new(r)
        })
        .collect();
    let scopes: Vec<Arc<Scope>> = ["weft.sample.http", "weft.sample.db"]
        .iter()
        .map(|n| Arc::new(Scope { name: (*n).into(), version: "0.1.0".into(), ..Scope::default() }))
        .collect();
    let mut out = Vec::with_capacity(n);
    let mut t0: u64 = 1_700_000_000_000_000_000;
    while out.len() < n {
        let trace_id = TraceId::from_u128(((rng.next_u64() as u128) << 64) | (rng.next_u64() | 1) as u128);
        let len = (1 + rng.below(8) as usize).min(n - out.len());
        let mut ids: Vec<SpanId> = Vec::with_capacity(len);
        t0 += 1_000_000 + rng.below(1_000_000_000);
        for k in 0..len {
            let span_id = SpanId::from_u64(rng.next_u64() | 1);
            let parent = (k > 0).then(|| ids[rng.below(k as u64) as usize]);
            ids.push(span_id);
            let svc = rng.below(SERVICES.len() as u64) as usize;
            let start = t0 + k as u64 * 150_000 + rng.below(100_000);
            let dur = 20_000 + rng.below(50_000_000);
            let route = ROUTES[rng.below(ROUTES.len() as u64) as usize];
            let code = [200i64, 200, 200, 201, 404, 500][rng.below(6) as usize];
            let mut a = Attributes::new();
            a.push("http.request.method", ["GET", "POST", "PUT"][rng.below(3) as usize]);
            a.push("http.route", route);
            a.push(
                "url.full",
                format!("https://{}.example.com{route}?q={}", SERVICES[svc].0, rng.below(10_000)),
            );
            a.push("http.response.status_code", code);
            a.push("server.address", format!("{}.example.com", SERVICES[svc].0));
            a.push("server.port", 443i64);
            a.push(conv::PEER_IP, SERVICES[(svc + 1) % SERVICES.len()].1);
            a.push("network.protocol.version", "1.1");
            a.push("user_agent.original", "Mozilla/5.0 (X11; Linux x86_64) weft-sample/0.1");
            a.push(conv::THREAD_ID, 1000 + rng.below(16) as i64);
            a.push("db.rows", rng.below(500) as i64);
            a.push("cache.hit", rng.below(2) == 0);
            a.push("sampling.ratio", 0.25 + rng.below(4) as f64 * 0.25);
            a.push("request.bytes", Value::Bytes((0..8).map(|_| rng.next_u64() as u8).collect()));
            if rng.below(3) == 0 {
                a.push(
                    "retry.backoff_ms",
                    Value::Array(vec![Value::I64(10), Value::I64(20), Value::I64(40)]),
                );
            }
            if rng.below(4) == 0 {
                a.push("feature.flags", Value::Array(vec!["new-cart".into(), "fast-pay".into()]));
            }
            if rng.below(8) == 0 {
                a.push(
                    "app.context",
                    Value::Map(vec![KeyValue::new("tenant", "acme"), KeyValue::new("tier", 2i64)]),
                );
            }
            let events = (0..2)
                .map(|e| {
                    let mut ea = Attributes::new();
                    ea.push("message.id", e as i64 + 1);
                    ea.push("message.type", if e == 0 { "SENT" } else { "RECEIVED" });
                    SpanEvent {
                        time_ns: start + dur / 3 * (e + 1),
                        name: if e == 0 { "request.sent".into() } else { "response.received".into() },
                        attributes: ea,
                        dropped_attributes_count: 0,
                    }
                })
                .collect();
            let links = if k > 1 && rng.below(4) == 0 {
                vec![Link {
                    trace_id,
                    span_id: ids[0],
                    relation: [LinkRelation::Unspecified, LinkRelation::FollowsFrom, LinkRelation::CausedBy]
                        [rng.below(3) as usize],
                    attributes: [KeyValue::new("link.reason", "batch")].into_iter().collect(),
                    ..Link::default()
                }]
            } else {
                Vec::new()
            };
            let status = match code {
                500 => Status { code: StatusCode::Error, message: "upstream failed".into() },
                201 => Status { code: StatusCode::Ok, message: String::new() },
                _ => Status::default(),
            };
            out.push(Span {
                trace_id,
                span_id,
                parent_span_id: parent,
                trace_state: String::new(),
                flags: 0x101,
                name: format!("{} {route}", ["GET", "POST"][k % 2]).into(),
                kind: [SpanKind::Server, SpanKind::Client, SpanKind::Internal][k % 3],
                start_ns: start,
                end_ns: start + dur,
                status,
                attributes: a,
                events,
                links,
                resource: Arc::clone(&resources[svc]),
                scope: Arc::clone(&scopes[k % 2]),
                dropped_attributes_count: 0,
                dropped_events_count: 0,
                dropped_links_count: 0,
            });
        }
    }
    out
}
