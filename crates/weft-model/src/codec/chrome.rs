//! Chrome Trace Event JSON (write): the `{"traceEvents":[...]}` document that Perfetto UI,
//! `chrome://tracing` and speedscope open.
//!
//! # Layout
//!
//! * One **process** (`pid` 1, 2, ...) per service (resource `service.name`), named with a
//!   `process_name` metadata event.
//! * Each span is a complete event (`"ph":"X"`, `ts`/`dur` in µs with ns precision as three
//!   decimals). Complete events on one thread must nest, so spans go on **tracks**: a span
//!   with a `thread.id` attribute goes on that thread's track (`tid` = the thread id) when it
//!   nests there; everything else — spans without a thread, and spans that overlap their
//!   thread's track without nesting (concurrent async work) — goes on the first extra track
//!   of the process where it nests, extra tracks being numbered from 1 000 000 000 and named
//!   with `thread_name` metadata events.
//! * Span events are instant events (`"ph":"i"`, `"s":"t"`) on the span's track.
//! * Links are flow events (`"ph":"s"` at the linked span's start, `"ph":"f"`, `"bp":"e"` at
//!   the linking span's start), when the linked span is in the same file.
//! * `args` carry the ids, kind, status and every attribute (typed JSON; bytes as arrays).
//! * `cat` is the instrumentation scope name (`span` when empty).
//!
//! Spans are ordered per service and start time by an external sort, so the layout works in
//! bounded memory on inputs of any size.

use std::collections::{HashMap, HashSet};
use std::io::Write;

use crate::codec::Losses;
use crate::codec::error::CodecError;
use crate::codec::jsonw as w;
use crate::codec::stream::{ExternalSorter, SpanWriter, WriterOptions};
use crate::conv;
use crate::id::{SpanId, TraceId};
use crate::span::{Span, StatusCode};
use crate::value::Value;

pub(crate) const FORMAT: &str = "Chrome trace JSON";
const EXTRA_TID_BASE: i64 = 1_000_000_000;

/// Loss: a link to a span not in the file cannot be drawn.
pub const LOST_LINKS: &str = "links to spans outside the file not drawn";

/// Encodes spans as a Chrome Trace Event JSON document.
pub fn encode_json(spans: &[Span]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w: Box<dyn SpanWriter> = Box::new(ChromeWriter::new(&mut out, WriterOptions::default()));
    // The in-memory sort never fails for a single run that fits.
    let _ = w.write(spans).and_then(|_| w.finish());
    out
}

type Key = (String, u64, std::cmp::Reverse<u64>, SpanId);
type KeyFn = fn(&Span) -> Key;

/// Streaming Chrome trace writer.
pub(crate) struct ChromeWriter<W> {
    out: W,
    sorter: ExternalSorter<Key, KeyFn>,
    link_targets: HashSet<(TraceId, SpanId)>,
}

impl<W: Write> ChromeWriter<W> {
    pub(crate) fn new(out: W, options: WriterOptions) -> Self {
        let key: KeyFn =
            |s| (s.service_name().to_owned(), s.start_ns, std::cmp::Reverse(s.end_ns), s.span_id);
        ChromeWriter { out, sorter: ExternalSorter::new(FORMAT, &options, key), link_targets: HashSet::new() }
    }
}

struct Track {
    tid: i64,
    thread: Option<i64>,
    /// Ends of the spans open on this track, outermost first.
    open: Vec<u64>,
}

/// Where a span was drawn (for flow events).
#[derive(Clone, Copy)]
struct Place {
    pid: u32,
    tid: i64,
    ts: u64,
}

impl<W: Write> SpanWriter for ChromeWriter<W> {
    fn write(&mut self, spans: &[Span]) -> Result<(), CodecError> {
        for s in spans {
            for l in &s.links {
                self.link_targets.insert((l.trace_id, l.span_id));
            }
        }
        self.sorter.push(spans)
    }

    fn finish(self: Box<Self>) -> Result<Losses, CodecError> {
        let ChromeWriter { mut out, sorter, link_targets } = *self;
        let io = |e: std::io::Error| CodecError::io(FORMAT, e);
        out.write_all(b"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n").map_err(io)?;
        let mut losses = Losses::default();
        let mut buf = Vec::with_capacity(4096);
        let mut service: Option<String> = None;
        let mut pid = 0u32;
        let mut tracks: Vec<Track> = Vec::new();
        let mut next_extra = EXTRA_TID_BASE;
        let mut places: HashMap<(TraceId, SpanId), Place> = HashMap::new();
        let mut flows: Vec<((TraceId, SpanId), Place)> = Vec::new();
        let mut first = true;
        sorter.drain(|s| {
            buf.clear();
            let sep = |buf: &mut Vec<u8>, first: &mut bool| {
                if !*first {
                    buf.extend_from_slice(b",\n");
                }
                *first = false;
            };
            if service.as_deref() != Some(s.service_name()) {
                pid += 1;
                service = Some(s.service_name().to_owned());
                tracks.clear();
                next_extra = EXTRA_TID_BASE;
                let name = if s.service_name().is_empty() { "(no service)" } else { s.service_name() };
                sep(&mut buf, &mut first);
                metadata(&mut buf, "process_name", pid, None, name);
            }
            let thread = match s.attributes.get(conv::THREAD_ID) {
                Some(Value::I64(t)) => Some(*t),
                _ => None,
            };
            let (start, end) = (s.start_ns, s.end_ns.max(s.start_ns));
            let mut chosen = None;
            // The thread's own track first, then the extra tracks.
            let order = tracks
                .iter()
                .enumerate()
                .filter(|(_, t)| thread.is_some() && t.thread == thread && t.tid == thread.unwrap_or(0))
                .chain(tracks.iter().enumerate().filter(|(_, t)| t.thread.is_none()))
                .map(|(i, _)| i)
                .collect::<Vec<_>>();
            for i in order {
                let t = &mut tracks[i];
                while t.open.last().is_some_and(|&e| e <= start) {
                    t.open.pop();
                }
                if t.open.last().is_none_or(|&e| e >= end) {
                    chosen = Some(i);
                    break;
                }
            }
            let i = match chosen {
                Some(i) => i,
                None => {
                    let own_free = thread.is_some_and(|th| !tracks.iter().any(|t| t.tid == th));
                    let (tid, label) = match thread {
                        Some(th) if own_free => (th, format!("thread {th}")),
                        _ => {
                            next_extra += 1;
                            let n = next_extra - EXTRA_TID_BASE;
                            (next_extra, format!("spans {n}"))
                        }
                    };
                    tracks.push(Track {
                        tid,
                        thread: if own_free { thread } else { None },
                        open: Vec::new(),
                    });
                    sep(&mut buf, &mut first);
                    metadata(&mut buf, "thread_name", pid, Some(tid), &label);
                    tracks.len() - 1
                }
            };
            tracks[i].open.push(end);
            let tid = tracks[i].tid;
            sep(&mut buf, &mut first);
            complete_event(&mut buf, &s, pid, tid);
            for e in &s.events {
                sep(&mut buf, &mut first);
                instant_event(&mut buf, e, &s, pid, tid);
            }
            let place = Place { pid, tid, ts: s.start_ns };
            if link_targets.contains(&(s.trace_id, s.span_id)) {
                places.insert((s.trace_id, s.span_id), place);
            }
            for l in &s.links {
                flows.push(((l.trace_id, l.span_id), place));
            }
            out.write_all(&buf).map_err(io)
        })?;
        buf.clear();
        for (n, (target, to)) in flows.iter().enumerate() {
            let Some(from) = places.get(target) else {
                losses.add(LOST_LINKS, 1);
                continue;
            };
            for (ph, p) in [("s", from), ("f", to)] {
                if !first {
                    buf.extend_from_slice(b",\n");
                }
                first = false;
                buf.extend_from_slice(b"{\"ph\":");
                w::str(&mut buf, ph);
                buf.extend_from_slice(b",\"name\":\"link\",\"cat\":\"link\",\"id\":");
                w::u64(&mut buf, n as u64 + 1);
                pid_tid_ts(&mut buf, p.pid, p.tid, p.ts);
                if ph == "f" {
                    buf.extend_from_slice(b",\"bp\":\"e\"");
                }
                buf.push(b'}');
            }
        }
        buf.extend_from_slice(b"\n]}\n");
        out.write_all(&buf).map_err(io)?;
        out.flush().map_err(io)?;
        Ok(losses)
    }
}

/// ns → µs with three decimals, exactly.
fn micros(out: &mut Vec<u8>, ns: u64) {
    let _ = write!(out, "{}.{:03}", ns / 1000, ns % 1000);
}

fn metadata(out: &mut Vec<u8>, what: &str, pid: u32, tid: Option<i64>, name: &str) {
    out.extend_from_slice(b"{\"ph\":\"M\",\"name\":");
    w::str(out, what);
    out.extend_from_slice(b",\"pid\":");
    w::u64(out, pid as u64);
    out.extend_from_slice(b",\"tid\":");
    w::i64(out, tid.unwrap_or(0));
    out.extend_from_slice(b",\"args\":{\"name\":");
    w::str(out, name);
    out.extend_from_slice(b"}}");
}

fn complete_event(out: &mut Vec<u8>, s: &Span, pid: u32, tid: i64) {
    out.extend_from_slice(b"{\"ph\":\"X\",\"name\":");
    w::str(out, &s.name);
    out.extend_from_slice(b",\"cat\":");
    w::str(out, if s.scope.name.is_empty() { "span" } else { &s.scope.name });
    pid_tid_ts(out, pid, tid, s.start_ns);
    out.extend_from_slice(b",\"dur\":");
    micros(out, s.end_ns.saturating_sub(s.start_ns));
    out.extend_from_slice(b",\"args\":{\"trace_id\":");
    w::trace_id(out, &s.trace_id);
    out.extend_from_slice(b",\"span_id\":");
    w::span_id(out, &s.span_id);
    if let Some(p) = &s.parent_span_id {
        out.extend_from_slice(b",\"parent_span_id\":");
        w::span_id(out, p);
    }
    out.extend_from_slice(b",\"kind\":");
    w::str(out, s.kind.as_str());
    if s.status.code != StatusCode::Unset {
        out.extend_from_slice(b",\"status\":");
        w::str(out, s.status.code.as_str());
        if !s.status.message.is_empty() {
            out.extend_from_slice(b",\"status_message\":");
            w::str(out, &s.status.message);
        }
    }
    for kv in s.attributes.iter() {
        out.push(b',');
        w::key(out, &kv.key);
        json_value(out, &kv.value);
    }
    out.extend_from_slice(b"}}");
}

/// The `pid`, `tid` and `ts` members of an event (`ts` in microseconds).
fn pid_tid_ts(out: &mut Vec<u8>, pid: u32, tid: i64, ts_ns: u64) {
    out.extend_from_slice(b",\"pid\":");
    w::u64(out, pid as u64);
    out.extend_from_slice(b",\"tid\":");
    w::i64(out, tid);
    out.extend_from_slice(b",\"ts\":");
    micros(out, ts_ns);
}

fn instant_event(out: &mut Vec<u8>, e: &crate::span::SpanEvent, s: &Span, pid: u32, tid: i64) {
    out.extend_from_slice(b"{\"ph\":\"i\",\"s\":\"t\",\"name\":");
    w::str(out, &e.name);
    out.extend_from_slice(b",\"cat\":\"event\"");
    pid_tid_ts(out, pid, tid, e.time_ns);
    out.extend_from_slice(b",\"args\":{\"span_id\":");
    w::span_id(out, &s.span_id);
    for kv in e.attributes.iter() {
        out.push(b',');
        w::key(out, &kv.key);
        json_value(out, &kv.value);
    }
    out.extend_from_slice(b"}}");
}

fn json_value(out: &mut Vec<u8>, v: &Value) {
    // serde_json's writer for the (rare) nested values; scalars directly.
    match v {
        Value::Str(s) => w::str(out, s),
        Value::Bool(b) => w::bool(out, *b),
        Value::I64(i) => w::i64(out, *i),
        Value::F64(f) if f.is_finite() => w::f64(out, *f),
        other => {
            let _ = serde_json::to_writer(&mut *out, &other.to_json());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_microseconds() {
        let mut out = Vec::new();
        micros(&mut out, 1_700_000_000_123_456_789);
        assert_eq!(out, b"1700000000123456.789");
    }
}
