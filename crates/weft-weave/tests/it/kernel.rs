//! Kernel events → kernel spans (`weft_weave::kernel`), and those spans attributed to
//! application spans (`weft_analyze::kernel`, the analysis they feed).

use std::sync::Arc;

use weft_analyze::kernel::*;
use weft_model::event::KernelEvent;
use weft_model::kernel::{KIND, SWITCH_OUT_STATE, UPROBE_RET};
use weft_model::{Attributes, Event, EventKind, SourceId, Span, SpanId, TraceId, Value, conv};
use weft_weave::kernel::{KernelSpanOptions, kernel_spans};

fn ev(t: u64, k: KernelEvent) -> Event {
    Event { time_ns: t, raw_time: t, source: SourceId(0), kind: EventKind::Kernel(k) }
}
fn sw(t: u64, prev: u32, state: i64, next: u32) -> Event {
    ev(
        t,
        KernelEvent::SchedSwitch {
            cpu: 0,
            prev_pid: prev,
            prev_tid: prev,
            prev_comm: Arc::from(if prev == 0 { "swapper" } else { "app" }),
            prev_state: state,
            next_pid: next,
            next_tid: next,
            next_comm: Arc::from(if next == 0 { "swapper" } else { "app" }),
        },
    )
}
fn name(nr: i64) -> Option<&'static str> {
    match nr {
        35 => Some("nanosleep"),
        0 => Some("read"),
        _ => None,
    }
}
fn opts() -> KernelSpanOptions {
    KernelSpanOptions { host: "h".into(), syscall_name: name, traced: None, seed: 7, window: Some((0, 200)) }
}

fn capture() -> Vec<Event> {
    vec![
        sw(0, 0, 0, 100),
        ev(10, KernelEvent::SyscallEnter { cpu: 0, pid: 100, tid: 100, nr: 35, args: [1, 0, 0, 0, 0, 0] }),
        sw(12, 100, 1, 0),
        sw(50, 0, 0, 100),
        ev(52, KernelEvent::SyscallExit { cpu: 0, pid: 100, tid: 100, nr: 35, ret: 0 }),
        sw(60, 100, 0x100, 200),
        sw(70, 200, 0, 100),
        ev(
            80,
            KernelEvent::UprobeEntry {
                cpu: 0,
                pid: 100,
                tid: 100,
                probe: Arc::from("/bin/x:f"),
                ip: 1,
                args: [5; 6],
            },
        ),
        ev(
            85,
            KernelEvent::UprobeReturn {
                cpu: 0,
                pid: 100,
                tid: 100,
                probe: Arc::from("/bin/x:f"),
                ip: 2,
                ret: 16,
            },
        ),
        ev(90, KernelEvent::SyscallEnter { cpu: 0, pid: 100, tid: 100, nr: 0, args: [0; 6] }),
        sw(100, 100, 1, 0),
    ]
}

#[test]
fn kernel_spans_per_thread() {
    let ks = kernel_spans(&capture(), &opts());
    let s = &ks.stats;
    // 100: [0,12] [50,60] [70,100]; 200: [60,70].
    assert_eq!((s.on_cpu, s.syscalls, s.uprobe_calls, s.threads), (4, 2, 1, 2));
    assert_eq!(s.incomplete, 1, "the read still open at the end");
    let t100: Vec<&Span> = ks.spans.iter().filter(|x| span_thread(x) == Some(100)).collect();
    let root = t100.iter().find(|x| x.attributes.get_str(KIND) == Some("thread")).unwrap();
    assert!(root.is_root());
    assert!(t100.iter().all(|x| x.trace_id == root.trace_id));
    let sleep = t100.iter().find(|x| x.name == "nanosleep").unwrap();
    assert_eq!((sleep.start_ns, sleep.end_ns, sleep.parent_span_id), (10, 52, Some(root.span_id)));
    let read = t100.iter().find(|x| x.name == "read").unwrap();
    assert_eq!((read.start_ns, read.end_ns), (90, 200));
    assert_eq!(read.attributes.get(conv::INCOMPLETE), Some(&Value::Bool(true)));
    let f = t100.iter().find(|x| x.name == "f").unwrap();
    assert_eq!(f.attributes.get(UPROBE_RET), Some(&Value::I64(16)));
    let states: Vec<_> = t100
        .iter()
        .filter(|x| x.attributes.get_str(KIND) == Some("on_cpu"))
        .map(|x| (x.start_ns, x.end_ns, x.attributes.get_str(SWITCH_OUT_STATE).unwrap()))
        .collect();
    assert_eq!(states, vec![(0, 12, "S"), (50, 60, "R"), (70, 100, "S")]);
    assert_eq!(root.resource.attributes.get_str(conv::COMPONENT_KIND), Some("kernel"));
    // Only traced threads get spans.
    let only = kernel_spans(&capture(), &KernelSpanOptions { traced: Some([200].into()), ..opts() });
    assert_eq!(only.stats.threads, 1);
    assert_eq!(only.stats.on_cpu, 1);
}

#[test]
fn attribution_shares() {
    let ks = kernel_spans(&capture(), &opts());
    let mk = |id: u8, parent: Option<u8>, s: u64, e: u64| {
        let mut a = Attributes::new();
        a.push(conv::THREAD_ID, 100i64);
        Span {
            trace_id: TraceId([9; 16]),
            span_id: SpanId([id; 8]),
            parent_span_id: parent.map(|p| SpanId([p; 8])),
            name: format!("s{id}").into(),
            start_ns: s,
            end_ns: e,
            attributes: a,
            ..Span::default()
        }
    };
    let mut app = vec![mk(1, None, 5, 95), mk(2, Some(1), 8, 55), mk(3, None, 0, 10)];
    app[2].attributes = Attributes::new();
    let st = attribute(&mut app, &ks.spans, &AttributionOptions::default());
    assert_eq!((st.attributed, st.without_thread), (2, 1));
    let g = |s: &Span, k: &str| s.attributes.get(k).and_then(Value::as_i64).unwrap();
    let outer = &app[0];
    assert_eq!(g(outer, ON_CPU_NS), 7 + 10 + 25);
    assert_eq!(g(outer, BLOCKED_NS), 38);
    assert_eq!(g(outer, RUNNABLE_NS), 10);
    assert_eq!(g(outer, OFF_CPU_NS), 90 - 42);
    assert_eq!(g(outer, &format!("{SYSCALL_NS}.nanosleep")), 42);
    assert_eq!(g(outer, &format!("{SYSCALL_COUNT}.nanosleep")), 1);
    assert_eq!(g(outer, &format!("{SYSCALL_NS}.read")), 5);
    assert_eq!(g(outer, SWITCHES), 2);
    assert_eq!(outer.attributes.get_str(STATE), Some("running"));
    let inner = &app[1];
    assert_eq!(g(inner, ON_CPU_NS), 4 + 5);
    assert_eq!(g(inner, BLOCKED_NS), 38);
    assert_eq!(inner.attributes.get_str(STATE), Some("blocked in nanosleep"));
    // Children: nanosleep (starts at 10, inside s2) and the blocked interval go under
    // s2; the runnable gap (60..70) and the read (90..) under s1.
    let kids: Vec<(&str, SpanId)> =
        app[3..].iter().map(|s| (s.name.as_str(), s.parent_span_id.unwrap())).collect();
    assert!(kids.contains(&("nanosleep", SpanId([2; 8]))), "{kids:?}");
    assert!(kids.contains(&("off-cpu (blocked)", SpanId([2; 8]))), "{kids:?}");
    assert!(kids.contains(&("off-cpu (runnable)", SpanId([1; 8]))), "{kids:?}");
    assert!(kids.contains(&("read", SpanId([1; 8]))), "{kids:?}");
    assert!(app[3..].iter().all(|s| s.trace_id == TraceId([9; 16])));
    // Limits are counted.
    let mut app2 = vec![mk(1, None, 5, 95)];
    let st = attribute(&mut app2, &ks.spans, &AttributionOptions { child_spans: true, max_children: 1 });
    assert_eq!((st.children, st.children_dropped), (1, 3));
    assert_eq!(app2[0].attributes.get(CHILDREN_DROPPED), Some(&Value::I64(3)));
}

fn call(t0: u64, t1: u64, tid: u32, f: &str) -> [Event; 2] {
    let probe: Arc<str> = Arc::from(format!("/bin/x:{f}"));
    [
        ev(t0, KernelEvent::UprobeEntry { cpu: 0, pid: 100, tid, probe: probe.clone(), ip: 1, args: [0; 6] }),
        ev(t1, KernelEvent::UprobeReturn { cpu: 0, pid: 100, tid, probe, ip: 2, ret: 0 }),
    ]
}

fn request(trace: u8, id: u8, start: u64, end: u64, tid: i64) -> Span {
    let mut attributes = Attributes::new();
    attributes.push(conv::THREAD_ID, tid);
    Span {
        trace_id: TraceId([trace; 16]),
        span_id: SpanId([id; 8]),
        name: "GET /item".into(),
        start_ns: start,
        end_ns: end,
        attributes,
        ..Span::default()
    }
}

#[test]
fn function_calls_nest_inside_the_request_of_their_thread() {
    use weft_weave::kernel::nest_calls;
    // Thread 100: request A [10, 50] with handle → (parse, lookup → compute), then a call
    // outside any request; thread 101: request B [10, 50], whose call is on thread 101 only.
    let mut events: Vec<Event> = [
        call(12, 40, 100, "handle"),
        call(13, 20, 100, "parse"),
        call(21, 39, 100, "lookup"),
        call(22, 30, 100, "compute"),
        call(60, 70, 100, "idle_work"),
        call(15, 25, 101, "handle"),
    ]
    .into_iter()
    .flatten()
    .collect();
    events.sort_by_key(|e| e.time_ns);
    let mut ks = kernel_spans(&events, &KernelSpanOptions { window: Some((0, 100)), ..opts() });
    let app = vec![request(0xa, 1, 10, 50, 100), request(0xb, 2, 10, 50, 101)];
    let st = nest_calls(&mut ks.spans, &app);
    assert_eq!((st.placed, st.nested, st.unplaced), (2, 3, 1));
    let by = |n: &str, tid: i64| {
        ks.spans
            .iter()
            .find(|s| s.name == n && s.attributes.get(conv::THREAD_ID) == Some(&Value::I64(tid)))
            .unwrap()
    };
    let handle = by("handle", 100);
    assert_eq!((handle.trace_id, handle.parent_span_id), (TraceId([0xa; 16]), Some(SpanId([1; 8]))));
    for (child, parent) in [("parse", "handle"), ("lookup", "handle"), ("compute", "lookup")] {
        let (c, p) = (by(child, 100), by(parent, 100));
        assert_eq!((c.trace_id, c.parent_span_id), (TraceId([0xa; 16]), Some(p.span_id)), "{child}");
    }
    let b = by("handle", 101);
    assert_eq!((b.trace_id, b.parent_span_id), (TraceId([0xb; 16]), Some(SpanId([2; 8]))));
    // Outside any request: still in the thread's kernel trace.
    let idle = by("idle_work", 100);
    assert_ne!(idle.trace_id, TraceId([0xa; 16]));
    assert!(ks.spans.iter().any(|s| Some(s.span_id) == idle.parent_span_id && s.name.starts_with("thread")));
}
