//! BlkKin: LTTng `zipkin:*` tracepoint events → spans, as BlkKin's Zipkin path showed them.
//!
//! BlkKin (the tracing library Ceph and Archipelago used) records Dapper annotations as
//! LTTng-UST events of the provider `zipkin`:
//!
//! | event | fields |
//! |---|---|
//! | `zipkin:timestamp` | `trace_name`, `service_name`, `port_no`, `ip`, `trace_id`, `span_id`, `parent_span_id`, `event` |
//! | `zipkin:keyval_string` | the same ids and endpoint, `key`, `val` (string) |
//! | `zipkin:keyval_integer` | the same ids and endpoint, `key`, `val` (64-bit integer) |
//! | `zipkin:keyval` (early BlkKin) | like `keyval_string` |
//!
//! BlkKin's converter (a babeltrace plugin) sent every event to Zipkin as a one-annotation v1
//! span, and Zipkin merged the pieces by (trace id, span id). This weaver does that merge
//! itself and then applies Zipkin's v1 rules — the same rules as
//! [`weft_model::codec::zipkin::decode_v1_json`], so a BlkKin trace looks the same whether it
//! comes from CTF here or from a Zipkin v1 export:
//!
//! * one span per (trace id, span id); `trace_name` is the span name; `parent_span_id` 0 means
//!   a root; 64-bit ids are widened to 128-bit trace ids with the high half zero (the ids are
//!   C `long`s: negative values keep their bits);
//! * `cs`/`cr` annotations make a `Client` side (start `cs`, end `cr`), `sr`/`ss` a `Server`
//!   side (start `sr`, end `ss`), `ms`/`mr` a `Producer`/`Consumer` side; a span logged by both
//!   client and server (BlkKin's RPC case) becomes two spans with the same ids, the server one
//!   marked `weft.zipkin.shared`, exactly as Zipkin splits shared v1 spans;
//! * without core annotations the span is local (`Unspecified` kind) and its earliest / latest
//!   annotation give its start / end;
//! * every timestamp annotation becomes a span event of the side whose service logged it;
//!   key/values become attributes of that side, typed (`keyval_integer` stays an integer —
//!   BlkKin's converter sent its decimal text, which is what the integer displays as);
//! * the endpoint (`service_name`, `ip`, `port_no`) becomes the resource's `service.name` and
//!   the span attributes `net.host.ip` / `net.host.port`.
//!
//! What weft keeps beyond Zipkin: nanosecond times (BlkKin's converter truncated to µs), the
//! `thread.id` of the side when one thread logged all of it (LTTng's `vtid` context), and start
//! and end times for spans that only logged key/values (Zipkin showed them without a time).
//!
//! Memory: spans stay open until [`BlkkinWeaver::finish`], until no event touched them for
//! [`BlkkinOptions::idle_ns`] of trace time ([`BlkkinWeaver::advance`]), or until more than
//! [`BlkkinOptions::max_open_spans`] are open (the least recently touched are closed early;
//! counted in [`BlkkinStats::evicted`]). A span keeps at most
//! [`BlkkinOptions::max_events_per_span`] annotations and key/values, and at most
//! [`BlkkinOptions::max_endpoints`] distinct endpoints are remembered; events past either are
//! dropped, counted in [`BlkkinStats::dropped`].

use std::collections::HashMap;
use std::sync::Arc;

use weft_model::event::TracepointEvent;

use crate::pipeline::{StageError, WeaveStage};
use weft_model::{
    Attributes, Event, EventKind, KeyValue, Resource, Scope, Span, SpanEvent, SpanId, SpanKind, TraceId,
    Value, conv,
};

/// The instrumentation scope of BlkKin spans.
pub const SCOPE: &str = "blkin";

/// Whether a tracepoint name is one of BlkKin's.
pub fn is_blkin(name: &str) -> bool {
    matches!(name, "zipkin:timestamp" | "zipkin:keyval_string" | "zipkin:keyval_integer" | "zipkin:keyval")
}

/// Limits.
#[derive(Debug, Clone)]
pub struct BlkkinOptions {
    /// Open spans kept at most (the least recently touched are closed beyond).
    pub max_open_spans: usize,
    /// Close a span when no event touched it for this long (trace time), in
    /// [`BlkkinWeaver::advance`]. `None`: only at the end.
    pub idle_ns: Option<u64>,
    /// Malformed events kept as samples.
    pub max_samples: usize,
    /// Annotations and key/values one span keeps at most; more are dropped, counted in
    /// [`BlkkinStats::dropped`].
    pub max_events_per_span: usize,
    /// Distinct endpoints (service, ip, port) kept; events naming a new one past it are
    /// dropped, counted in [`BlkkinStats::dropped`].
    pub max_endpoints: usize,
}

impl Default for BlkkinOptions {
    fn default() -> Self {
        BlkkinOptions {
            max_open_spans: 1 << 20,
            idle_ns: None,
            max_samples: 8,
            max_events_per_span: 4096,
            max_endpoints: 1 << 16,
        }
    }
}

/// Counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlkkinStats {
    /// BlkKin events used.
    pub events: u64,
    /// Spans produced.
    pub spans: u64,
    /// BlkKin events that lacked a field or had a zero id (not used; counted here).
    pub malformed: u64,
    /// The first malformed events, described.
    pub samples: Vec<String>,
    /// Spans closed early because too many were open (a later event of such a span starts a
    /// second, partial span).
    pub evicted: u64,
    /// Events dropped past a span's [`BlkkinOptions::max_events_per_span`] or past
    /// [`BlkkinOptions::max_endpoints`].
    pub dropped: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Endpoint {
    service: String,
    ip: String,
    port: i64,
}

struct Ann {
    time_ns: u64,
    value: String,
    ep: u32,
    tid: Option<u32>,
}

struct Bin {
    key: String,
    value: Value,
    ep: u32,
    tid: Option<u32>,
    time_ns: u64,
}

struct Group {
    name: String,
    parent: u64,
    anns: Vec<Ann>,
    bins: Vec<Bin>,
    last_seen: u64,
    first: u64,
}

/// Groups BlkKin events into spans.
pub struct BlkkinWeaver {
    opts: BlkkinOptions,
    open: HashMap<(u64, u64), Group>,
    endpoints: Vec<Endpoint>,
    endpoint_ids: HashMap<Endpoint, u32>,
    resources: HashMap<String, Arc<Resource>>,
    scope: Arc<Scope>,
    ready: Vec<Span>,
    seq: u64,
    stats: BlkkinStats,
}

impl Default for BlkkinWeaver {
    fn default() -> Self {
        Self::new(BlkkinOptions::default())
    }
}

/// The weave stage of `weft import ctf`: events in any order (spans are grouped by ids);
/// the spans closed so far leave after every batch, the rest at the end.
impl WeaveStage for BlkkinWeaver {
    type Item = Event;
    type Report = BlkkinStats;
    fn push(&mut self, events: &[Event], out: &mut Vec<Span>) -> Result<(), StageError> {
        for e in events {
            BlkkinWeaver::push(self, e);
        }
        self.drain(out);
        Ok(())
    }
    fn finish(&mut self, out: &mut Vec<Span>) -> Result<(), StageError> {
        let (rest, stats) = std::mem::take(self).finish();
        out.extend(rest);
        self.stats = stats;
        Ok(())
    }
    fn into_report(self) -> BlkkinStats {
        self.stats
    }
}

impl BlkkinWeaver {
    /// A weaver with `opts`.
    pub fn new(opts: BlkkinOptions) -> Self {
        BlkkinWeaver {
            opts,
            open: HashMap::new(),
            endpoints: Vec::new(),
            endpoint_ids: HashMap::new(),
            resources: HashMap::new(),
            scope: Arc::new(Scope::named(SCOPE)),
            ready: Vec::new(),
            seq: 0,
            stats: BlkkinStats::default(),
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> &BlkkinStats {
        &self.stats
    }

    /// Spans still open.
    pub fn open_spans(&self) -> usize {
        self.open.len()
    }

    /// Takes a BlkKin event; returns `false` (and ignores it) for any other event.
    pub fn push(&mut self, ev: &Event) -> bool {
        let EventKind::Tracepoint(tp) = &ev.kind else { return false };
        if !is_blkin(&tp.name) {
            return false;
        }
        match self.take(ev.time_ns, tp) {
            Ok(()) => self.stats.events += 1,
            Err(why) => {
                self.stats.malformed += 1;
                if self.stats.samples.len() < self.opts.max_samples {
                    self.stats.samples.push(format!("{} at {} ns: {why}", tp.name, ev.time_ns));
                }
            }
        }
        true
    }

    fn take(&mut self, time_ns: u64, tp: &TracepointEvent) -> Result<(), String> {
        let f = &tp.fields;
        let int = |k: &str| match f.get(k) {
            Some(Value::I64(v)) => Ok(*v as u64),
            _ => Err(format!("field '{k}' is missing or not an integer")),
        };
        let text = |k: &str| match f.get(k) {
            Some(Value::Str(s)) => Ok(s.as_str()),
            _ => Err(format!("field '{k}' is missing or not a string")),
        };
        let trace = int("trace_id")?;
        let span = int("span_id")?;
        if trace == 0 || span == 0 {
            return Err("trace_id or span_id is zero".into());
        }
        let parent = int("parent_span_id")?;
        let ep = Endpoint {
            service: text("service_name")?.to_owned(),
            ip: text("ip")?.to_owned(),
            port: int("port_no")? as i64,
        };
        let name = text("trace_name")?;
        enum What {
            Ann(String),
            Bin(String, Value),
        }
        let what = match &*tp.name {
            "zipkin:timestamp" => What::Ann(text("event")?.to_owned()),
            "zipkin:keyval_integer" => What::Bin(text("key")?.to_owned(), Value::I64(int("val")? as i64)),
            _ => What::Bin(text("key")?.to_owned(), Value::Str(text("val")?.to_owned().into())),
        };
        let Some(ep) = self.endpoint(ep) else {
            self.stats.dropped += 1;
            return Ok(());
        };
        self.seq += 1;
        let seq = self.seq;
        let g = self.open.entry((trace, span)).or_insert_with(|| Group {
            name: String::new(),
            parent: 0,
            anns: Vec::new(),
            bins: Vec::new(),
            last_seen: time_ns,
            first: seq,
        });
        if g.name.is_empty() {
            g.name = name.to_owned();
        }
        if g.parent == 0 {
            g.parent = parent;
        }
        g.last_seen = g.last_seen.max(time_ns);
        if g.anns.len() + g.bins.len() >= self.opts.max_events_per_span {
            self.stats.dropped += 1;
        } else {
            match what {
                What::Ann(value) => g.anns.push(Ann { time_ns, value, ep, tid: tp.tid }),
                What::Bin(key, value) => g.bins.push(Bin { key, value, ep, tid: tp.tid, time_ns }),
            }
        }
        if self.open.len() > self.opts.max_open_spans {
            self.evict();
        }
        Ok(())
    }

    /// The id of an endpoint; `None` past [`BlkkinOptions::max_endpoints`] distinct ones.
    fn endpoint(&mut self, ep: Endpoint) -> Option<u32> {
        if let Some(id) = self.endpoint_ids.get(&ep) {
            return Some(*id);
        }
        if self.endpoints.len() >= self.opts.max_endpoints {
            return None;
        }
        let id = self.endpoints.len() as u32;
        self.endpoints.push(ep.clone());
        self.endpoint_ids.insert(ep, id);
        Some(id)
    }

    /// Closes the least recently touched eighth of the open spans.
    fn evict(&mut self) {
        let mut by_age: Vec<((u64, u64), (u64, u64))> =
            self.open.iter().map(|(k, g)| ((g.last_seen, g.first), *k)).collect();
        by_age.sort_unstable();
        let n = (self.open.len() / 8).max(1);
        for (_, key) in by_age.into_iter().take(n) {
            if let Some(g) = self.open.remove(&key) {
                self.stats.evicted += 1;
                self.close(key, g);
            }
        }
    }

    /// Closes spans no event touched for [`BlkkinOptions::idle_ns`] before `now_ns` (trace
    /// time, e.g. the merge's watermark).
    pub fn advance(&mut self, now_ns: u64) {
        let Some(idle) = self.opts.idle_ns else { return };
        let cutoff = now_ns.saturating_sub(idle);
        let done: Vec<(u64, u64)> =
            self.open.iter().filter(|(_, g)| g.last_seen < cutoff).map(|(k, _)| *k).collect();
        for key in done {
            if let Some(g) = self.open.remove(&key) {
                self.close(key, g);
            }
        }
    }

    /// Moves the spans closed so far into `out`.
    pub fn drain(&mut self, out: &mut Vec<Span>) {
        out.append(&mut self.ready);
    }

    /// Closes every open span; returns all spans not drained yet (ordered by start time, then
    /// ids) and the counters.
    pub fn finish(mut self) -> (Vec<Span>, BlkkinStats) {
        let mut open: Vec<((u64, u64), Group)> = self.open.drain().collect();
        open.sort_by_key(|(_, g)| g.first);
        for (key, g) in open {
            self.close(key, g);
        }
        let mut spans = std::mem::take(&mut self.ready);
        spans.sort_by(|a, b| {
            (a.start_ns, a.trace_id, a.span_id, a.kind as u8).cmp(&(
                b.start_ns,
                b.trace_id,
                b.span_id,
                b.kind as u8,
            ))
        });
        (spans, self.stats)
    }

    fn resource(&mut self, service: &str) -> Arc<Resource> {
        if let Some(r) = self.resources.get(service) {
            return r.clone();
        }
        let r = if service.is_empty() {
            Arc::new(Resource::default())
        } else {
            Arc::new(Resource::service(service))
        };
        self.resources.insert(service.to_owned(), r.clone());
        r
    }

    /// Zipkin's v1 rules for one merged span (see the module docs).
    fn close(&mut self, (trace, span): (u64, u64), g: Group) {
        struct Side {
            kind: SpanKind,
            start: Option<u64>,
            end: Option<u64>,
            ep: Option<u32>,
            events: Vec<SpanEvent>,
            attrs: Vec<(String, Value)>,
            tids: Vec<Option<u32>>,
            times: Vec<u64>,
        }
        let side = |kind| Side {
            kind,
            start: None,
            end: None,
            ep: None,
            events: Vec::new(),
            attrs: Vec::new(),
            tids: Vec::new(),
            times: Vec::new(),
        };
        let mut client = side(SpanKind::Client);
        let mut server = side(SpanKind::Server);
        let mut messaging: Option<Side> = None;
        for a in &g.anns {
            let (s, is_start) = match a.value.as_str() {
                "cs" => (&mut client, true),
                "cr" => (&mut client, false),
                "sr" => (&mut server, true),
                "ss" => (&mut server, false),
                "ms" | "mr" => {
                    let m = messaging.get_or_insert_with(|| side(SpanKind::Producer));
                    if a.value == "mr" {
                        m.kind = SpanKind::Consumer;
                    }
                    (m, true)
                }
                _ => continue,
            };
            if is_start {
                s.start = Some(a.time_ns);
            } else {
                s.end = Some(a.time_ns);
            }
            s.ep = s.ep.or(Some(a.ep));
        }
        let mut sides = Vec::with_capacity(2);
        if client.start.is_some() || client.end.is_some() {
            sides.push(client);
        }
        if server.start.is_some() || server.end.is_some() {
            sides.push(server);
        }
        if let Some(m) = messaging {
            sides.push(m);
        }
        if sides.is_empty() {
            let mut local = side(SpanKind::Unspecified);
            local.ep = g.anns.first().map(|a| a.ep).or_else(|| g.bins.first().map(|b| b.ep));
            sides.push(local);
        }
        let endpoints = &self.endpoints;
        let service = |ep: Option<u32>| ep.map(|e| endpoints[e as usize].service.as_str());
        let side_of = |sides: &[Side], ep: u32| -> usize {
            let svc = endpoints[ep as usize].service.as_str();
            sides.iter().position(|s| service(s.ep) == Some(svc)).unwrap_or(0)
        };
        for a in &g.anns {
            let i = side_of(&sides, a.ep);
            sides[i].events.push(SpanEvent {
                time_ns: a.time_ns,
                name: a.value.clone().into(),
                ..SpanEvent::default()
            });
            sides[i].tids.push(a.tid);
            sides[i].times.push(a.time_ns);
        }
        for b in &g.bins {
            let i = side_of(&sides, b.ep);
            sides[i].attrs.push((b.key.clone(), b.value.clone()));
            sides[i].tids.push(b.tid);
            if sides[i].events.is_empty() {
                sides[i].times.push(b.time_ns);
            }
        }
        let shared = sides.iter().any(|s| s.kind == SpanKind::Client)
            && sides.iter().any(|s| s.kind == SpanKind::Server);
        for s in sides {
            let ev_times = s.events.iter().map(|e| e.time_ns);
            let (lo, hi) = if s.events.is_empty() {
                (s.times.iter().copied().min(), s.times.iter().copied().max())
            } else {
                (ev_times.clone().min(), ev_times.max())
            };
            let start = s.start.or(lo).unwrap_or(0);
            let end = s.end.or(hi).filter(|e| *e > start).unwrap_or(start);
            let mut attributes = Attributes(Vec::with_capacity(s.attrs.len() + 4));
            for (k, v) in s.attrs {
                attributes.0.push(KeyValue { key: k.into(), value: v });
            }
            let ep = s.ep.map(|e| self.endpoints[e as usize].clone());
            if let Some(ep) = &ep {
                if !ep.ip.is_empty() {
                    attributes.push(conv::LOCAL_IPV4, ep.ip.clone());
                }
                if ep.port != 0 {
                    attributes.push(conv::LOCAL_PORT, ep.port);
                }
            }
            if shared && s.kind == SpanKind::Server {
                attributes.push(conv::ZIPKIN_SHARED, true);
            }
            if let Some(Some(t)) = s.tids.first()
                && s.tids.iter().all(|x| *x == Some(*t))
            {
                attributes.push(conv::THREAD_ID, *t as i64);
            }
            let resource = self.resource(ep.as_ref().map(|e| e.service.as_str()).unwrap_or(""));
            self.stats.spans += 1;
            self.ready.push(Span {
                trace_id: TraceId::from_u64(trace),
                span_id: SpanId::from_u64(span),
                parent_span_id: (g.parent != 0).then(|| SpanId::from_u64(g.parent)),
                name: g.name.clone().into(),
                kind: s.kind,
                start_ns: start,
                end_ns: end,
                attributes,
                events: s.events,
                resource,
                scope: self.scope.clone(),
                ..Span::default()
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_model::SourceId;

    /// A BlkKin event as LTTng records it.
    #[allow(clippy::too_many_arguments)]
    fn ev(
        t: u64,
        kind: &str,
        name: &str,
        svc: &str,
        ip: &str,
        port: i64,
        ids: (i64, i64, i64),
        tail: &[(&str, Value)],
    ) -> Event {
        let mut f = Attributes::new();
        f.push("context.vtid", 77i64);
        f.push("trace_name", name);
        f.push("service_name", svc);
        f.push("port_no", port);
        f.push("ip", ip);
        f.push("trace_id", ids.0);
        f.push("span_id", ids.1);
        f.push("parent_span_id", ids.2);
        for (k, v) in tail {
            f.push(*k, v.clone());
        }
        Event {
            time_ns: t,
            raw_time: t,
            source: SourceId(0),
            kind: EventKind::Tracepoint(TracepointEvent {
                name: Arc::from(format!("zipkin:{kind}").as_str()),
                cpu: Some(0),
                pid: Some(1),
                tid: Some(77),
                fields: f,
            }),
        }
    }

    fn ann(t: u64, svc: &str, ip: &str, port: i64, ids: (i64, i64, i64), a: &str) -> Event {
        ev(t, "timestamp", "osd_op", svc, ip, port, ids, &[("event", Value::from(a))])
    }

    /// The BlkKin RPC example: a client and a server logging one span id, plus a local child.
    pub(crate) fn rpc_events() -> Vec<Event> {
        let ids = (0x4d2, 7, 3);
        let child = (0x4d2, 8, 7);
        vec![
            ann(1_000_123, "rbd", "10.0.0.1", 6800, ids, "cs"),
            ev(
                1_000_200,
                "keyval_string",
                "osd_op",
                "rbd",
                "10.0.0.1",
                6800,
                ids,
                &[("key", "object".into()), ("val", "rbd_data.1".into())],
            ),
            ann(1_100_000, "osd.0", "10.0.0.2", 6801, ids, "sr"),
            ann(1_200_000, "osd.0", "10.0.0.2", 6801, ids, "journal_write"),
            ev(
                1_250_000,
                "keyval_integer",
                "osd_op",
                "osd.0",
                "10.0.0.2",
                6801,
                ids,
                &[("key", "bytes".into()), ("val", Value::I64(4096))],
            ),
            ev(
                1_300_000,
                "timestamp",
                "encode",
                "osd.0",
                "10.0.0.2",
                0,
                child,
                &[("event", "encode start".into())],
            ),
            ev(
                1_350_000,
                "timestamp",
                "encode",
                "osd.0",
                "10.0.0.2",
                0,
                child,
                &[("event", "encode end".into())],
            ),
            ann(1_800_000, "osd.0", "10.0.0.2", 6801, ids, "ss"),
            ann(1_900_999, "rbd", "10.0.0.1", 6800, ids, "cr"),
        ]
    }

    #[test]
    fn rpc_becomes_client_server_and_local_spans() {
        let mut w = BlkkinWeaver::default();
        for e in rpc_events() {
            assert!(w.push(&e));
        }
        let (spans, stats) = w.finish();
        assert_eq!(stats.events, 9);
        assert_eq!(stats.spans, 3);
        let (c, s, l) = (&spans[0], &spans[1], &spans[2]);
        assert_eq!((c.kind, s.kind, l.kind), (SpanKind::Client, SpanKind::Server, SpanKind::Unspecified));
        assert_eq!(c.trace_id, TraceId::from_u64(0x4d2));
        assert_eq!(c.span_id, s.span_id);
        assert_eq!(c.parent_span_id, Some(SpanId::from_u64(3)));
        assert_eq!((c.start_ns, c.end_ns), (1_000_123, 1_900_999));
        assert_eq!((s.start_ns, s.end_ns), (1_100_000, 1_800_000));
        assert_eq!(c.service_name(), "rbd");
        assert_eq!(s.service_name(), "osd.0");
        assert_eq!(c.attributes.get_str("object"), Some("rbd_data.1"));
        assert_eq!(s.attributes.get("bytes"), Some(&Value::I64(4096)));
        assert_eq!(c.attributes.get_str(conv::LOCAL_IPV4), Some("10.0.0.1"));
        assert_eq!(c.attributes.get(conv::LOCAL_PORT), Some(&Value::I64(6800)));
        assert_eq!(s.attributes.get(conv::ZIPKIN_SHARED), Some(&Value::Bool(true)));
        assert_eq!(c.attributes.get(conv::ZIPKIN_SHARED), None);
        assert_eq!(c.attributes.get(conv::THREAD_ID), Some(&Value::I64(77)));
        let names = |s: &Span| s.events.iter().map(|e| e.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(c), ["cs", "cr"]);
        assert_eq!(names(s), ["sr", "journal_write", "ss"]);
        assert_eq!(l.name, "encode");
        assert_eq!(l.parent_span_id, Some(SpanId::from_u64(7)));
        assert_eq!((l.start_ns, l.end_ns), (1_300_000, 1_350_000));
        assert_eq!(l.attributes.get(conv::LOCAL_PORT), None, "port 0 is no port");
        assert_eq!(l.scope.name, SCOPE);
    }

    /// Issue 18: a span's annotations and the endpoints are bounded by input, not by the
    /// recording's size; what is dropped is counted.
    #[test]
    fn annotations_per_span_and_endpoints_are_bounded_and_counted() {
        let opts = BlkkinOptions { max_events_per_span: 3, max_endpoints: 2, ..Default::default() };
        let mut w = BlkkinWeaver::new(opts);
        let ids = (1, 2, 0);
        for i in 0..10 {
            assert!(w.push(&ann(10 + i, "a", "10.0.0.1", 1, ids, &format!("step{i}"))));
        }
        // a second endpoint is kept, a third is not
        assert!(w.push(&ann(30, "b", "10.0.0.2", 1, (1, 3, 2), "x")));
        assert!(w.push(&ann(40, "c", "10.0.0.3", 1, (1, 4, 2), "x")));
        let (spans, stats) = w.finish();
        assert_eq!(stats.dropped, 7 + 1, "{stats:?}");
        let first = spans.iter().find(|s| s.span_id == SpanId::from_u64(2)).unwrap();
        assert!(first.events.len() <= 3, "{:?}", first.events);
        assert_eq!(spans.len(), 2, "the span of the third endpoint was dropped");
    }

    #[test]
    fn negative_ids_keep_their_bits_and_malformed_events_are_counted() {
        let mut w = BlkkinWeaver::default();
        let neg = (-81985529216486896i64, -5, 0);
        assert!(w.push(&ann(10, "a", "", 0, neg, "start")));
        assert!(w.push(&ann(20, "a", "", 0, neg, "end")));
        assert!(w.push(&ann(30, "a", "", 0, (0, 1, 0), "x")));
        let mut bad = ann(40, "a", "", 0, (1, 1, 0), "x");
        if let EventKind::Tracepoint(t) = &mut bad.kind {
            t.fields.remove("span_id");
        }
        assert!(w.push(&bad));
        let other = Event {
            kind: EventKind::Tracepoint(TracepointEvent {
                name: "x:y".into(),
                cpu: None,
                pid: None,
                tid: None,
                fields: Attributes::new(),
            }),
            ..bad.clone()
        };
        assert!(!w.push(&other));
        let (spans, stats) = w.finish();
        assert_eq!(spans.len(), 1);
        assert_eq!(spans[0].trace_id, TraceId::from_u64(0xfedc_ba98_7654_3210));
        assert_eq!(spans[0].trace_id.to_u128() >> 64, 0);
        assert_eq!(spans[0].span_id, SpanId::from_u64(-5i64 as u64));
        assert!(spans[0].is_root());
        assert_eq!((spans[0].start_ns, spans[0].end_ns), (10, 20));
        assert_eq!(stats.malformed, 2);
        assert!(stats.samples[0].contains("zero"), "{:?}", stats.samples);
        assert!(stats.samples[1].contains("'span_id'"), "{:?}", stats.samples);
    }

    #[test]
    fn memory_is_bounded_and_idle_spans_close() {
        let mut w = BlkkinWeaver::new(BlkkinOptions {
            max_open_spans: 16,
            idle_ns: Some(1000),
            ..Default::default()
        });
        for i in 1..=100i64 {
            w.push(&ann(i as u64 * 10, "a", "", 0, (1, i, 0), "x"));
            assert!(w.open_spans() <= 16);
        }
        assert!(w.stats().evicted > 0);
        w.advance(100 * 10 + 2000);
        assert_eq!(w.open_spans(), 0);
        let mut out = Vec::new();
        w.drain(&mut out);
        assert_eq!(out.len(), 100);
    }

    /// The Zipkin v1 JSON BlkKin's converter sent for `events` — one single-annotation span
    /// per event, µs times, integers as text — merged by (trace id, span id) as Zipkin's
    /// storage merges them.
    fn blkin_v1_json(events: &[Event]) -> String {
        let mut order: Vec<(u64, u64)> = Vec::new();
        // (name, parent, annotations, binary annotations) per (trace id, span id).
        type Merged = (String, u64, Vec<String>, Vec<String>);
        let mut merged: HashMap<(u64, u64), Merged> = HashMap::new();
        for e in events {
            let EventKind::Tracepoint(t) = &e.kind else { continue };
            let f = &t.fields;
            let i = |k: &str| f.get(k).and_then(Value::as_i64).unwrap_or(0) as u64;
            let s = |k: &str| f.get_str(k).unwrap_or("").to_owned();
            let key = (i("trace_id"), i("span_id"));
            let ep = format!(
                r#"{{"serviceName":"{}","ipv4":"{}","port":{}}}"#,
                s("service_name"),
                s("ip"),
                i("port_no")
            );
            let m = merged.entry(key).or_insert_with(|| {
                order.push(key);
                (s("trace_name"), i("parent_span_id"), Vec::new(), Vec::new())
            });
            if &*t.name == "zipkin:timestamp" {
                m.2.push(format!(
                    r#"{{"timestamp":{},"value":"{}","endpoint":{ep}}}"#,
                    e.time_ns / 1000,
                    s("event")
                ));
            } else {
                let val = match f.get("val") {
                    Some(Value::I64(v)) => v.to_string(),
                    Some(v) => v.to_string(),
                    None => String::new(),
                };
                m.3.push(format!(r#"{{"key":"{}","value":"{val}","endpoint":{ep}}}"#, s("key")));
            }
        }
        let spans: Vec<String> = order
            .iter()
            .map(|k| {
                let (name, parent, anns, bins) = &merged[k];
                let parent = if *parent == 0 { String::new() } else { format!(r#","parentId":"{parent:016x}""#) };
                format!(
                    r#"{{"traceId":"{:016x}","id":"{:016x}"{parent},"name":"{name}","annotations":[{}],"binaryAnnotations":[{}]}}"#,
                    k.0,
                    k.1,
                    anns.join(","),
                    bins.join(",")
                )
            })
            .collect();
        format!("[{}]", spans.join(","))
    }

    /// What Zipkin could show: µs times, text values, no thread ids, no scope.
    fn as_zipkin_showed(mut s: Span) -> Span {
        s.start_ns = s.start_ns / 1000 * 1000;
        s.end_ns = s.end_ns / 1000 * 1000;
        for e in &mut s.events {
            e.time_ns = e.time_ns / 1000 * 1000;
        }
        s.attributes.remove(conv::THREAD_ID);
        for kv in &mut s.attributes.0 {
            if kv.key != conv::LOCAL_PORT && kv.key != conv::ZIPKIN_SHARED {
                kv.value = Value::Str(kv.value.to_string().into());
            }
        }
        s.scope = Arc::new(Scope::default());
        s
    }

    #[test]
    fn matches_what_the_zipkin_v1_path_shows() {
        let events = rpc_events();
        let json = blkin_v1_json(&events);
        let mut via_zipkin = weft_model::codec::zipkin::decode_v1_json(json.as_bytes()).unwrap();
        let mut w = BlkkinWeaver::default();
        for e in &events {
            w.push(e);
        }
        let (spans, _) = w.finish();
        let mut ours: Vec<Span> = spans.into_iter().map(as_zipkin_showed).collect();
        let key = |s: &Span| (s.trace_id, s.span_id, s.kind as u8);
        ours.sort_by_key(key);
        via_zipkin.sort_by_key(key);
        for s in &mut via_zipkin {
            s.scope = Arc::new(Scope::default());
        }
        assert_eq!(ours.len(), via_zipkin.len());
        for (a, b) in ours.iter().zip(&via_zipkin) {
            assert_eq!(a, b);
        }
    }
}
