//! Exhaustive traces (every tracepoint on) of a checkout service with three injected
//! performance problems and a quiet request type: the ground truth VAIF's control loop
//! (`weft explore`) is evaluated against in replay.
//!
//! Request types (root span names): [`CHECKOUT`] (four in five traces) and [`CATALOG`]. A
//! checkout calls three services in turn — `auth` → `auth.verify`, `cart` → `cart.load`,
//! `inventory` → `inventory.reserve` (CLIENT → SERVER pairs) — then fans out `notify.email`
//! and `notify.audit` concurrently. Below every SERVER span lies a tree of internal functions
//! ([`Shape`]: `depth` levels of `fanout` children, run one after another) named by their
//! position: `cart.load.f2_1_2` is the third child of the second child of the third child of
//! `cart.load`. The problems, each in a leaf function `depth` levels below its SERVER span:
//!
//! * **variance** ([`Problems::variance`]): a bimodal function in `cart.load` (2 ms or
//!   14 ms, alternating pseudo-randomly);
//! * **slow** ([`Problems::slow`]): every 20th checkout takes a rare path — `cart` calls
//!   `cart.rebuild` instead of `cart.load` and skips `inventory` — where one function takes a
//!   steady 150 ms (slower than any request of the normal path);
//! * **key** ([`Problems::key`]): a wait in `inventory.reserve` of 1 ms per unit of the
//!   root's `queue.depth` attribute (0–30), exposed by the always-on root span.
//!
//! Every other leaf takes 200 µs ± 5 %; catalog requests carry a `queue.depth` too, with no
//! effect. Everything is a function of the seed and the trace's position.

use weft_model::{KeyValue, Span, SpanEvent, SpanId, SpanKind, TraceId, Value};

/// Root span name of the request type with the problems.
pub const CHECKOUT: &str = "POST /checkout";
/// Root span name of the quiet request type.
pub const CATALOG: &str = "GET /catalog";
/// The root attribute the key problem's wait grows with.
pub const KEY: &str = "queue.depth";

/// The internal function tree below each SERVER span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Levels of functions below a SERVER span (at least 1).
    pub depth: u32,
    /// Children per function (at least 2).
    pub fanout: u32,
}

impl Default for Shape {
    fn default() -> Self {
        Shape { depth: 4, fanout: 3 }
    }
}

/// The functions carrying the injected problems, for a [`Shape`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problems {
    /// The bimodal function (principle 1, variance).
    pub variance: String,
    /// The steady slow function of the rare path (principle 2).
    pub slow: String,
    /// The wait growing with [`KEY`] (principle 3).
    pub key: String,
}

impl Shape {
    fn clamped(self) -> Shape {
        Shape { depth: self.depth.max(1), fanout: self.fanout.max(2) }
    }

    /// Where the problems are injected.
    pub fn problems(self) -> Problems {
        let s = self.clamped();
        Problems {
            variance: s.leaf("cart.load", &[2, 1, 2, 0]),
            slow: s.leaf("cart.rebuild", &[1, 2, 0, 1]),
            key: s.leaf("inventory.reserve", &[0, 2, 1, 2]),
        }
    }

    /// The leaf reached by following `route` (child indices, repeated and clipped to the
    /// fan-out) from `service`'s SERVER span.
    fn leaf(self, service: &str, route: &[u32]) -> String {
        let steps: Vec<String> =
            (0..self.depth as usize).map(|i| (route[i % route.len()] % self.fanout).to_string()).collect();
        format!("{service}.f{}", steps.join("_"))
    }
}

/// An endless, deterministic stream of exhaustive traces (one `Vec<Span>` per trace).
#[derive(Debug, Clone)]
pub struct Generator {
    shape: Shape,
    problems: Problems,
    seed: u64,
    index: u64,
    checkouts: u64,
}

impl Generator {
    /// Traces for `shape` (see [`Shape::problems`]) and `seed`.
    pub fn new(shape: Shape, seed: u64) -> Generator {
        let shape = shape.clamped();
        Generator { shape, problems: shape.problems(), seed, index: 0, checkouts: 0 }
    }
}

impl Iterator for Generator {
    type Item = Vec<Span>;

    fn next(&mut self) -> Option<Vec<Span>> {
        let i = self.index;
        self.index += 1;
        let mut b = Builder {
            trace: TraceId::from_u128((u128::from(self.seed) << 64) | u128::from(i + 1)),
            rng: self.seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            spans: Vec::new(),
            shape: self.shape,
            problems: &self.problems,
            bimodal: false,
            depth: 0,
        };
        let start = 1_700_000_000_000_000_000 + i * 1_000_000_000;
        b.depth = (b.rand() % 31) as i64;
        if i % 5 == 4 {
            b.catalog(start);
        } else {
            let rare = self.checkouts % 20 == 19;
            self.checkouts += 1;
            b.bimodal = b.rand().is_multiple_of(2);
            b.checkout(start, rare);
        }
        Some(b.spans)
    }
}

struct Builder<'a> {
    trace: TraceId,
    rng: u64,
    spans: Vec<Span>,
    shape: Shape,
    problems: &'a Problems,
    bimodal: bool,
    depth: i64,
}

const GAP: u64 = 10_000;
const MS: u64 = 1_000_000;

impl Builder<'_> {
    fn rand(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// `base` ± `percent` %.
    fn jitter(&mut self, base: u64, percent: u64) -> u64 {
        let spread = base * percent / 100;
        base - spread + self.rand() % (2 * spread + 1)
    }

    /// Opens a span; returns its index (its end is set by the caller).
    fn open(&mut self, parent: Option<usize>, name: &str, kind: SpanKind, start: u64) -> usize {
        let id = self.spans.len() as u64 + 1;
        self.spans.push(Span {
            trace_id: self.trace,
            span_id: SpanId::from_u64(id),
            parent_span_id: parent.map(|p| self.spans[p].span_id),
            name: name.into(),
            kind,
            start_ns: start,
            end_ns: start,
            ..Span::default()
        });
        self.spans.len() - 1
    }

    fn root(&mut self, name: &str, start: u64) -> usize {
        let r = self.open(None, name, SpanKind::Server, start);
        self.spans[r].attributes.0.push(KeyValue { key: KEY.into(), value: Value::I64(self.depth) });
        self.spans[r].events.push(SpanEvent {
            time_ns: start + GAP / 2,
            name: "validated".into(),
            ..SpanEvent::default()
        });
        r
    }

    fn checkout(&mut self, start: u64, rare: bool) {
        let root = self.root(CHECKOUT, start);
        let mut t = start + GAP;
        t = self.rpc(root, "auth", "auth.verify", t) + GAP;
        t = self.rpc(root, "cart", if rare { "cart.rebuild" } else { "cart.load" }, t) + GAP;
        if !rare {
            t = self.rpc(root, "inventory", "inventory.reserve", t) + GAP;
        }
        // Fan-out / fan-in: the email takes longer, so it is the one on the critical path.
        let email = self.open(Some(root), "notify.email", SpanKind::Internal, t);
        let audit = self.open(Some(root), "notify.audit", SpanKind::Internal, t);
        let (e, a) = (t + self.jitter(3 * MS, 5), t + self.jitter(MS, 5));
        self.spans[email].end_ns = e;
        self.spans[audit].end_ns = a;
        self.spans[root].end_ns = e.max(a) + GAP;
    }

    fn catalog(&mut self, start: u64) {
        let root = self.root(CATALOG, start);
        let client = self.open(Some(root), "catalog.query", SpanKind::Client, start + GAP);
        let server = self.open(Some(client), "catalog.db", SpanKind::Server, start + 2 * GAP);
        let mut t = start + 3 * GAP;
        for name in ["catalog.parse", "catalog.scan", "catalog.render"] {
            let s = self.open(Some(server), name, SpanKind::Internal, t);
            t += self.jitter(400_000, 5);
            self.spans[s].end_ns = t;
            t += GAP;
        }
        self.spans[server].end_ns = t;
        self.spans[client].end_ns = t + GAP;
        self.spans[root].end_ns = t + 2 * GAP;
    }

    /// A CLIENT span calling a SERVER span with its function tree; returns the client's end.
    fn rpc(&mut self, parent: usize, client: &str, server: &str, start: u64) -> u64 {
        let c = self.open(Some(parent), client, SpanKind::Client, start);
        let s = self.open(Some(c), server, SpanKind::Server, start + GAP);
        let end = self.children(s, server, "", 1, start + 2 * GAP);
        self.spans[s].end_ns = end;
        self.spans[c].end_ns = end + GAP;
        end + GAP
    }

    /// The children of span `parent` at `level`, one after another from `start`; returns
    /// the end of the parent (after its last child).
    fn children(&mut self, parent: usize, service: &str, route: &str, level: u32, start: u64) -> u64 {
        let mut t = start;
        for k in 0..self.shape.fanout {
            let r = if route.is_empty() { k.to_string() } else { format!("{route}_{k}") };
            let name = format!("{service}.f{r}");
            let s = self.open(Some(parent), &name, SpanKind::Internal, t);
            let end = if level < self.shape.depth {
                self.children(s, service, &r, level + 1, t + GAP)
            } else {
                t + self.leaf_time(&name)
            };
            self.spans[s].end_ns = end;
            t = end + GAP;
        }
        t
    }

    fn leaf_time(&mut self, name: &str) -> u64 {
        if name == self.problems.variance {
            let base = if self.bimodal { 14 * MS } else { 2 * MS };
            self.jitter(base, 2)
        } else if name == self.problems.slow {
            self.jitter(150 * MS, 1)
        } else if name == self.problems.key {
            200_000 + self.depth as u64 * MS
        } else {
            self.jitter(200_000, 5)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_shaped() {
        let a: Vec<Vec<Span>> = Generator::new(Shape::default(), 7).take(40).collect();
        let b: Vec<Vec<Span>> = Generator::new(Shape::default(), 7).take(40).collect();
        assert_eq!(a, b);
        let p = Shape::default().problems();
        assert_eq!(p.variance, "cart.load.f2_1_2_0");
        let names = |t: &[Span]| t.iter().map(|s| s.name.to_string()).collect::<Vec<_>>();
        // Trace 0 is a checkout on the normal path, trace 4 a catalog request.
        assert_eq!(a[0][0].name, CHECKOUT);
        assert!(names(&a[0]).contains(&p.variance) && names(&a[0]).contains(&p.key));
        assert_eq!(a[4][0].name, CATALOG);
        // The 20th checkout (trace 23: four checkouts in five) takes the rare path.
        assert!(names(&a[23]).contains(&p.slow) && !names(&a[23]).contains(&p.key));
        // 1 root + 3 × (client + server + 3 + 9 + 27 + 81) + 2 notifies.
        assert_eq!(a[0].len(), 1 + 3 * 122 + 2);
        for t in &a {
            assert!(t.iter().all(|s| s.end_ns >= s.start_ns));
        }
    }
}
