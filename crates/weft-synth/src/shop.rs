//! Realistic synthetic traces: a small online shop of microservices, instrumented the way the
//! OpenTelemetry SDKs instrument real services (semantic-convention attributes, resources with
//! SDK and host attributes, instrumentation scopes, exception events, gRPC message events).
//!
//! Used by `weft serve --demo`, the load generator and the storage benchmarks, so the figures
//! in the README are for spans that look like production spans — not for empty ones.
//!
//! * One trace = one user request to `frontend`, fanning out over HTTP/gRPC to 3–8 services
//!   and their databases/caches: 8–40 spans, mostly 12–20.
//! * ~3 % of requests fail in `payment` (error status, an `exception` event, a 500 at the top).
//! * The `shipping` host's clock runs 4 ms ahead, so its server spans start "before" their
//!   client spans — the case read-time clock-skew adjustment exists for.
//! * Deterministic for a seed; times advance from a start time by a request interval.

use std::sync::Arc;

use weft_model::{
    Attributes, KeyValue, Resource, Scope, Span, SpanEvent, SpanId, SpanKind, Status, StatusCode, TraceId,
    Value,
};

/// Small, fast, deterministic PRNG (SplitMix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// Seeded generator.
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `[0, n)` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }
    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
    /// Log-normal-ish latency around `median_us` (µs), returned in ns.
    pub fn latency_ns(&mut self, median_us: u64) -> u64 {
        // Sum of uniforms ≈ normal; exp of it gives the long right tail real latencies have.
        let n: f64 = (0..4).map(|_| self.unit()).sum::<f64>() - 2.0;
        let f = (n * 0.6).exp();
        ((median_us as f64 * f) * 1000.0).max(1000.0) as u64
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len() as u64) as usize]
    }
}

struct Svc {
    resource: Arc<Resource>,
    scope_server: Arc<Scope>,
    scope_client: Arc<Scope>,
    scope_db: Arc<Scope>,
    /// Clock offset of this service's host, ns (added to its spans' times).
    skew_ns: i64,
    ip: &'static str,
}

const SERVICES: &[(&str, &str, &str, &str, i64)] = &[
    // name, language, host, ip, clock skew (ns)
    ("frontend", "python", "web-1", "10.0.0.11", 0),
    ("checkout", "go", "app-1", "10.0.1.21", 0),
    ("cart", "dotnet", "app-2", "10.0.1.22", 0),
    ("product-catalog", "go", "app-1", "10.0.1.21", 0),
    ("currency", "cpp", "app-3", "10.0.1.23", 0),
    ("payment", "nodejs", "app-3", "10.0.1.23", 0),
    ("shipping", "rust", "ship-1", "10.0.2.31", 4_000_000),
    ("email", "ruby", "app-2", "10.0.1.22", 0),
    ("recommendation", "python", "ml-1", "10.0.3.41", 0),
    ("ad", "java", "app-4", "10.0.1.24", 0),
];

fn sdk_version(lang: &str) -> &'static str {
    match lang {
        "python" => "1.27.0",
        "go" => "1.31.0",
        "java" => "1.43.0",
        "nodejs" => "1.26.0",
        "dotnet" => "1.9.0",
        "rust" => "0.26.0",
        "ruby" => "1.5.0",
        _ => "1.17.0",
    }
}

/// Generator of realistic traces.
pub struct Shop {
    rng: Rng,
    svcs: Vec<Svc>,
    /// Start time of the next request, ns since the epoch.
    pub next_start_ns: u64,
    /// Mean gap between requests, ns.
    pub interval_ns: u64,
}

impl std::fmt::Debug for Shop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shop").field("next_start_ns", &self.next_start_ns).finish()
    }
}

fn kv(k: &str, v: impl Into<Value>) -> KeyValue {
    KeyValue::new(k, v)
}

impl Shop {
    /// A generator whose first request starts at `start_ns`, one request every `interval_ns`
    /// on average.
    pub fn new(seed: u64, start_ns: u64, interval_ns: u64) -> Shop {
        let mut rng = Rng::new(seed);
        let svcs = SERVICES
            .iter()
            .map(|&(name, lang, host, ip, skew)| {
                let instance = format!(
                    "{:08x}-{:04x}-4{:03x}-a{:03x}-{:012x}",
                    rng.next_u64() as u32,
                    rng.below(0x10000),
                    rng.below(0x1000),
                    rng.below(0x1000),
                    rng.next_u64() & 0xffff_ffff_ffff
                );
                let attributes = Attributes(vec![
                    kv("service.name", name),
                    kv("service.version", "2.1.3"),
                    kv("service.instance.id", instance),
                    kv("host.name", host),
                    kv("deployment.environment", "production"),
                    kv("telemetry.sdk.name", "opentelemetry"),
                    kv("telemetry.sdk.language", lang),
                    kv("telemetry.sdk.version", sdk_version(lang)),
                    kv("process.pid", Value::I64(1000 + rng.below(30000) as i64)),
                ]);
                let resource = Arc::new(Resource {
                    attributes,
                    dropped_attributes_count: 0,
                    schema_url: "https://opentelemetry.io/schemas/1.24.0".into(),
                });
                let scope = |n: &str| {
                    Arc::new(Scope { name: n.into(), version: "0.48b0".into(), ..Scope::default() })
                };
                let (server, client, db) = match lang {
                    "python" => (
                        "opentelemetry.instrumentation.flask",
                        "opentelemetry.instrumentation.requests",
                        "opentelemetry.instrumentation.psycopg2",
                    ),
                    "go" => (
                        "go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc",
                        "go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc",
                        "go.opentelemetry.io/contrib/instrumentation/database/sql",
                    ),
                    "java" => {
                        ("io.opentelemetry.grpc-1.6", "io.opentelemetry.grpc-1.6", "io.opentelemetry.jdbc")
                    }
                    "nodejs" => (
                        "@opentelemetry/instrumentation-grpc",
                        "@opentelemetry/instrumentation-grpc",
                        "@opentelemetry/instrumentation-pg",
                    ),
                    _ => ("grpc", "grpc", "db"),
                };
                Svc {
                    resource,
                    scope_server: scope(server),
                    scope_client: scope(client),
                    scope_db: scope(db),
                    skew_ns: skew,
                    ip,
                }
            })
            .collect();
        Shop { rng, svcs, next_start_ns: start_ns, interval_ns: interval_ns.max(1) }
    }

    /// Generates whole traces until at least `n` spans exist.
    pub fn spans(&mut self, n: usize) -> Vec<Span> {
        let mut out = Vec::with_capacity(n + 64);
        while out.len() < n {
            out.extend(self.trace());
        }
        out
    }

    fn ids(&mut self) -> SpanId {
        SpanId::from_u64(self.rng.next_u64() | 1)
    }

    /// One request's trace (spans in creation order).
    pub fn trace(&mut self) -> Vec<Span> {
        let start = self.next_start_ns;
        self.next_start_ns += self.rng.below(2 * self.interval_ns) + 1;
        let trace_id =
            TraceId::from_u128(((self.rng.next_u64() as u128) << 64) | (self.rng.next_u64() | 1) as u128);
        let mut t = Tracer { trace_id, spans: Vec::new() };
        let routes: &[(&str, &str)] = &[
            ("GET", "/api/products/{id}"),
            ("GET", "/api/cart"),
            ("POST", "/api/cart"),
            ("POST", "/api/checkout"),
            ("GET", "/api/recommendations"),
            ("GET", "/"),
        ];
        let &(method, route) = self.rng.pick(routes);
        let fails = route == "/api/checkout" && self.rng.chance(0.12);
        let root = self.ids();
        let root_dur = 0; // patched below
        let mut cursor = start + self.rng.below(200_000);
        // Downstream calls, sequential with small gaps.
        let calls: Vec<usize> = match route {
            "/api/products/{id}" => vec![3, 4, 9],
            "/api/cart" if method == "GET" => vec![2, 3, 4],
            "/api/cart" => vec![2, 3],
            "/api/checkout" => vec![1],
            "/api/recommendations" => vec![8, 3],
            _ => vec![3, 4, 8, 9],
        };
        let mut failed = false;
        for svc in calls {
            let (end, f) = self.rpc(&mut t, 0, root, svc, cursor, fails);
            failed |= f;
            cursor = end + self.rng.below(300_000);
        }
        let end = cursor + self.rng.below(500_000);
        let path = route.replace("{id}", &format!("{}", 1000 + self.rng.below(9000)));
        let status = if failed {
            500
        } else if method == "POST" {
            201
        } else {
            200
        };
        let attrs = vec![
            kv("http.request.method", method),
            kv("http.route", route),
            kv("url.path", path),
            kv("url.scheme", "https"),
            kv("server.address", "shop.example.com"),
            kv("http.response.status_code", Value::I64(status)),
            kv("client.address", format!("203.0.113.{}", self.rng.below(254) + 1)),
            kv("user_agent.original", self.rng.pick(&["Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0", "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Safari/605.1.15", "curl/8.5.0"]).to_string()),
        ];
        let _ = root_dur;
        let s = &self.svcs[0];
        t.spans.push(Span {
            trace_id,
            span_id: root,
            parent_span_id: None,
            flags: 0x301,
            name: format!("{method} {route}").into(),
            kind: SpanKind::Server,
            start_ns: start,
            end_ns: end,
            status: if failed {
                Status { code: StatusCode::Error, message: String::new() }
            } else {
                Status::default()
            },
            attributes: Attributes(attrs),
            resource: s.resource.clone(),
            scope: s.scope_server.clone(),
            ..Span::default()
        });
        t.spans.rotate_right(1);
        t.spans
    }

    /// A client span in `from` calling `to` over gRPC, the server span in `to`, and `to`'s own
    /// work. Returns (end of the client span, whether it failed).
    fn rpc(
        &mut self,
        t: &mut Tracer,
        from: usize,
        parent: SpanId,
        to: usize,
        start: u64,
        fail: bool,
    ) -> (u64, bool) {
        let client_id = self.ids();
        let server_id = self.ids();
        let (to_name, to_ip) = (SERVICES[to].0, self.svcs[to].ip);
        let rpc_service = format!("oteldemo.{}Service", camel(to_name));
        let method = match to_name {
            "checkout" => "PlaceOrder",
            "cart" => self.rng.pick(&["GetCart", "AddItem"]),
            "product-catalog" => self.rng.pick(&["GetProduct", "ListProducts"]),
            "currency" => "Convert",
            "payment" => "Charge",
            "shipping" => self.rng.pick(&["GetQuote", "ShipOrder"]),
            "email" => "SendOrderConfirmation",
            "recommendation" => "ListRecommendations",
            _ => "GetAds",
        };
        let net = self.rng.latency_ns(150);
        let server_start = start + net;
        let mut cursor = server_start + self.rng.latency_ns(40);
        let mut failed = false;
        // The callee's own downstream work.
        match to_name {
            "checkout" => {
                for next in [2, 3, 4, 6, 5, 7] {
                    let (end, f) = self.rpc(t, to, server_id, next, cursor, fail && next == 5);
                    failed |= f;
                    cursor = end + self.rng.below(100_000);
                    if f {
                        break;
                    }
                }
            }
            "cart" => cursor = self.db(t, to, server_id, cursor, "redis"),
            "product-catalog" => cursor = self.db(t, to, server_id, cursor, "postgresql"),
            "recommendation" => {
                let (end, _) = self.rpc(t, to, server_id, 3, cursor, false);
                cursor = end;
            }
            "shipping" => {
                let (end, _) = self.rpc(t, to, server_id, 4, cursor, false);
                cursor = end;
            }
            _ => cursor += self.rng.latency_ns(800),
        }
        let mut events = Vec::new();
        if fail && to_name == "payment" {
            failed = true;
            events.push(SpanEvent {
                time_ns: cursor,
                name: "exception".into(),
                attributes: Attributes(vec![
                    kv("exception.type", "Error"),
                    kv("exception.message", "Payment request failed. Invalid token. app.loyalty.level=gold"),
                ]),
                dropped_attributes_count: 0,
            });
        }
        let server_end = cursor + self.rng.latency_ns(30);
        let client_end = server_end + self.rng.latency_ns(120);
        let code = if failed { 2 } else { 0 };
        let status = if failed {
            Status {
                code: StatusCode::Error,
                message: if to_name == "payment" {
                    "Payment request failed. Invalid token.".into()
                } else {
                    "rpc error: code = Internal".into()
                },
            }
        } else {
            Status::default()
        };
        let skew = self.svcs[to].skew_ns;
        let shift = |v: u64| v.wrapping_add_signed(skew);
        // gRPC message events on the server side, as the Go/Java instrumentations emit them.
        let msg_events = vec![
            SpanEvent {
                time_ns: shift(server_start + 5_000),
                name: "message".into(),
                attributes: Attributes(vec![
                    kv("message.type", "RECEIVED"),
                    kv("message.id", Value::I64(1)),
                    kv("message.uncompressed_size", Value::I64(40 + self.rng.below(400) as i64)),
                ]),
                dropped_attributes_count: 0,
            },
            SpanEvent {
                time_ns: shift(server_end - 2_000),
                name: "message".into(),
                attributes: Attributes(vec![
                    kv("message.type", "SENT"),
                    kv("message.id", Value::I64(1)),
                    kv("message.uncompressed_size", Value::I64(20 + self.rng.below(2000) as i64)),
                ]),
                dropped_attributes_count: 0,
            },
        ];
        let mut server_events = msg_events;
        server_events.extend(events.into_iter().map(|mut e| {
            e.time_ns = shift(e.time_ns);
            e
        }));
        let fsvc = &self.svcs[from];
        t.spans.push(Span {
            trace_id: t.trace_id,
            span_id: client_id,
            parent_span_id: Some(parent),
            flags: 0x301,
            name: format!("{rpc_service}/{method}").into(),
            kind: SpanKind::Client,
            start_ns: start.wrapping_add_signed(fsvc.skew_ns),
            end_ns: client_end.wrapping_add_signed(fsvc.skew_ns),
            status: status.clone(),
            attributes: Attributes(vec![
                kv("rpc.system", "grpc"),
                kv("rpc.service", rpc_service.clone()),
                kv("rpc.method", method),
                kv("rpc.grpc.status_code", Value::I64(code)),
                kv("server.address", to_name),
                kv("server.port", Value::I64(8080)),
                kv("network.peer.address", to_ip),
            ]),
            resource: fsvc.resource.clone(),
            scope: fsvc.scope_client.clone(),
            ..Span::default()
        });
        let tsvc = &self.svcs[to];
        t.spans.push(Span {
            trace_id: t.trace_id,
            span_id: server_id,
            parent_span_id: Some(client_id),
            flags: 0x301,
            name: format!("{rpc_service}/{method}").into(),
            kind: SpanKind::Server,
            start_ns: shift(server_start),
            end_ns: shift(server_end),
            status,
            attributes: Attributes(vec![
                kv("rpc.system", "grpc"),
                kv("rpc.service", rpc_service),
                kv("rpc.method", method),
                kv("rpc.grpc.status_code", Value::I64(code)),
                kv("network.peer.address", fsvc.ip),
                kv("network.peer.port", Value::I64(30000 + self.rng.below(30000) as i64)),
            ]),
            events: server_events,
            resource: tsvc.resource.clone(),
            scope: tsvc.scope_server.clone(),
            ..Span::default()
        });
        (client_end, failed)
    }

    fn db(&mut self, t: &mut Tracer, svc: usize, parent: SpanId, start: u64, system: &str) -> u64 {
        let n = 1 + self.rng.below(3);
        let mut cursor = start;
        for _ in 0..n {
            let id = self.ids();
            let dur = self.rng.latency_ns(if system == "redis" { 150 } else { 900 });
            let (name, stmt, extra) = if system == "redis" {
                let key = format!("cart:{:x}", self.rng.next_u64() & 0xffff_ffff);
                let cmd = *self.rng.pick(&["HGET", "HSET", "EXPIRE", "HGETALL"]);
                (cmd.to_string(), format!("{cmd} {key}"), vec![kv("db.redis.database_index", Value::I64(0))])
            } else {
                let id = 1000 + self.rng.below(9000);
                (
                    "SELECT products".to_string(),
                    format!(
                        "SELECT id, name, description, picture, price_units, price_nanos, categories FROM products WHERE id = {id}"
                    ),
                    vec![kv("db.name", "products"), kv("db.sql.table", "products"), kv("db.user", "catalog")],
                )
            };
            let s = &self.svcs[svc];
            let mut attrs = vec![
                kv("db.system", system),
                kv("db.statement", stmt),
                kv("server.address", if system == "redis" { "redis-cart" } else { "postgres" }),
                kv("server.port", Value::I64(if system == "redis" { 6379 } else { 5432 })),
            ];
            attrs.extend(extra);
            t.spans.push(Span {
                trace_id: t.trace_id,
                span_id: id,
                parent_span_id: Some(parent),
                flags: 0x301,
                name: name.into(),
                kind: SpanKind::Client,
                start_ns: cursor.wrapping_add_signed(s.skew_ns),
                end_ns: (cursor + dur).wrapping_add_signed(s.skew_ns),
                attributes: Attributes(attrs),
                resource: s.resource.clone(),
                scope: s.scope_db.clone(),
                ..Span::default()
            });
            cursor += dur + self.rng.below(50_000);
        }
        cursor
    }
}

struct Tracer {
    trace_id: TraceId,
    spans: Vec<Span>,
}

fn camel(s: &str) -> String {
    s.split('-')
        .map(|w| {
            let mut c = w.chars();
            match c.next() {
                Some(f) => f.to_ascii_uppercase().to_string() + c.as_str(),
                None => String::new(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_are_well_formed_and_deterministic() {
        let mut a = Shop::new(7, 1_700_000_000_000_000_000, 1_000_000);
        let mut b = Shop::new(7, 1_700_000_000_000_000_000, 1_000_000);
        let mut total = 0;
        let mut errors = 0;
        for _ in 0..200 {
            let t = a.trace();
            assert_eq!(t, b.trace());
            assert!(t.len() >= 4, "{}", t.len());
            assert!(t[0].is_root());
            let ids: std::collections::HashSet<_> = t.iter().map(|s| s.span_id).collect();
            for s in &t[1..] {
                assert!(ids.contains(&s.parent_span_id.unwrap()), "parent inside the trace");
                assert_eq!(s.trace_id, t[0].trace_id);
            }
            // Unskewed children fit inside their parents.
            for s in &t {
                assert!(s.end_ns >= s.start_ns);
            }
            total += t.len();
            errors += (t[0].status.code == StatusCode::Error) as usize;
        }
        assert!((2000..8000).contains(&total), "{total}");
        assert!(errors > 0, "some requests fail");
    }
}
