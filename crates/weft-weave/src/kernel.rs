//! Kernel events → kernel spans.
//!
//! [`kernel_spans`] turns a time-ordered capture (`weft record`'s perf_event events) into spans
//! of the `kernel` component: one per system call (enter → exit, named from the syscall
//! number), one per uprobe call (entry → return, with the argument and return registers), one
//! per on-CPU interval (switch-in → switch-out, with the state the thread left in), grouped in
//! one trace per thread under a `thread` root span. Intervals cut by the capture's start or end
//! are kept, clipped to the capture, and marked [`conv::INCOMPLETE`]. The attribute keys are
//! in [`weft_model::kernel`].
//!
//! [`nest_calls`] places the function-call spans (uprobe calls, EXIST's function traces)
//! inside the application's request spans: the span of the request that ran on that thread
//! at that time becomes the call's parent, so a trace's waterfall shows under the server span
//! what the service did inside.
//!
//! Attributing kernel activity to application spans (on/off CPU time, syscalls, kernel child
//! spans) is an analysis over these spans and the application's: `weft_analyze::kernel`.
//!
//! Events → spans here is a per-thread pairing of the whole capture (the capture window clips
//! what is still open at the end), not a weaver with watermarks: its pipeline stage,
//! [`KernelStage`], keeps the capture (up to a bound) and weaves at the end of the input.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use weft_model::event::KernelEvent;

use crate::pipeline::{StageError, WeaveStage};
use weft_model::id::mix2 as mix;
use weft_model::kernel::{
    CPU, KIND, SCOPE, SWITCH_OUT_STATE, SWITCHED_TO, SYSCALL_ARGS, SYSCALL_NR, SYSCALL_RET, UPROBE,
    UPROBE_ARGS, UPROBE_RET,
};
use weft_model::{
    Attributes, Event, EventKind, Resource, Scope, Span, SpanId, SpanKind, TraceId, Value, conv,
};

/// Options of [`kernel_spans`].
#[derive(Clone)]
pub struct KernelSpanOptions {
    /// `host.name` of the resource.
    pub host: String,
    /// Syscall number → name (e.g. `weft_sources::perf::syscall_name`).
    pub syscall_name: fn(i64) -> Option<&'static str>,
    /// Threads that get spans (`None` = every thread seen).
    pub traced: Option<HashSet<u32>>,
    /// Mixed into trace and span ids, so two captures never collide.
    pub seed: u64,
    /// Capture start/end (ns since the epoch) for clipping open intervals; `None` = the first
    /// and last event.
    pub window: Option<(u64, u64)>,
}

impl std::fmt::Debug for KernelSpanOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelSpanOptions").field("host", &self.host).field("seed", &self.seed).finish()
    }
}

/// Counters of [`kernel_spans`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelSpanStats {
    /// Syscall spans.
    pub syscalls: u64,
    /// On-CPU spans.
    pub on_cpu: u64,
    /// Uprobe call spans.
    pub uprobe_calls: u64,
    /// Thread root spans.
    pub threads: u64,
    /// Spans cut by the capture window (marked incomplete).
    pub incomplete: u64,
    /// Syscall exits whose enter has another number (a lost record): counted, no span.
    pub mismatched: u64,
    /// Uprobe returns with no entry on the thread's stack.
    pub unmatched_returns: u64,
}

/// The result of [`kernel_spans`].
#[derive(Debug, Clone, Default)]
pub struct KernelSpans {
    /// Spans, thread roots first, then per thread in start order.
    pub spans: Vec<Span>,
    /// Counters.
    pub stats: KernelSpanStats,
}

#[derive(Default)]
struct ThreadState {
    pid: u32,
    comm: Option<Arc<str>>,
    first: u64,
    last: u64,
    syscall: Option<(u64, i64, [u64; 6], u32)>,
    first_syscall_exit_open: bool,
    on_since: Option<(u64, u32)>,
    seen_switch: bool,
    uprobes: Vec<(u64, Arc<str>, [u64; 6], u32)>,
    spans: Vec<Span>,
}

fn trace_id(seed: u64, pid: u32, tid: u32) -> TraceId {
    let hi = mix(seed, ((pid as u64) << 32) | tid as u64);
    let lo = mix(hi, tid as u64);
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&hi.to_be_bytes());
    b[8..].copy_from_slice(&lo.to_be_bytes());
    TraceId(b)
}

/// The weave stage of `weft record`. Kernel spans need the whole capture, so the stage keeps
/// its events — the first `max_events`; later ones are dropped and counted — and at the end of
/// the input sorts them by time and builds the spans ([`kernel_spans`]). The capture window
/// runs from `capture_start_ns` (or the first event) to the end of the input (or the last
/// event).
#[derive(Debug)]
pub struct KernelStage {
    /// The options of [`kernel_spans`] (the window is set at the end; `traced` may be set by
    /// a caller's stage before [`WeaveStage::finish`], when the capture knows its threads).
    pub opts: KernelSpanOptions,
    capture_start_ns: Option<u64>,
    max_events: usize,
    events: Vec<Event>,
    dropped: u64,
    stats: KernelSpanStats,
}

impl KernelStage {
    /// A stage keeping at most `max_events` events of a capture started at `capture_start_ns`.
    pub fn new(opts: KernelSpanOptions, capture_start_ns: Option<u64>, max_events: usize) -> KernelStage {
        KernelStage {
            opts,
            capture_start_ns,
            max_events,
            events: Vec::new(),
            dropped: 0,
            stats: KernelSpanStats::default(),
        }
    }

    /// The events kept (in time order after [`WeaveStage::finish`]).
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// Events dropped over the bound.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The counters of the spans built (after [`WeaveStage::finish`]).
    pub fn stats(&self) -> &KernelSpanStats {
        &self.stats
    }
}

impl WeaveStage for KernelStage {
    type Item = Event;
    type Report = KernelSpanStats;
    fn push(&mut self, events: &[Event], _out: &mut Vec<Span>) -> Result<(), StageError> {
        let room = self.max_events.saturating_sub(self.events.len());
        let take = events.len().min(room);
        self.dropped += (events.len() - take) as u64;
        self.events.extend_from_slice(&events[..take]);
        Ok(())
    }
    fn finish(&mut self, out: &mut Vec<Span>) -> Result<(), StageError> {
        let end_ns = weft_model::time::now_unix_nanos();
        self.events.sort_by_key(|e| e.time_ns);
        if let Some(start_ns) = self.capture_start_ns {
            self.opts.window = Some((
                self.events.first().map(|e| e.time_ns.min(start_ns)).unwrap_or(start_ns),
                self.events.last().map(|e| e.time_ns.max(end_ns)).unwrap_or(end_ns),
            ));
        }
        let ks = kernel_spans(&self.events, &self.opts);
        self.stats = ks.stats;
        out.extend(ks.spans);
        Ok(())
    }
    fn into_report(self) -> KernelSpanStats {
        self.stats
    }
}

/// Builds kernel spans from `events` (sorted by time; other kinds of events are ignored).
pub fn kernel_spans(events: &[Event], opts: &KernelSpanOptions) -> KernelSpans {
    let mut threads: BTreeMap<u32, ThreadState> = BTreeMap::new();
    let mut stats = KernelSpanStats::default();
    let (w_start, w_end) = opts.window.unwrap_or_else(|| {
        (events.first().map(|e| e.time_ns).unwrap_or(0), events.last().map(|e| e.time_ns).unwrap_or(0))
    });
    let wanted = |tid: u32| tid != 0 && opts.traced.as_ref().is_none_or(|s| s.contains(&tid));
    let mut n = 0u64;
    let mut next_id = || {
        n += 1;
        SpanId::derived(opts.seed, n)
    };
    let mut mk = |name: String, start: u64, end: u64, kind: &str, tid: u32, cpu: u32, incomplete: bool| {
        let mut attributes = Attributes::new();
        attributes.push(conv::THREAD_ID, tid as i64);
        attributes.push(KIND, kind);
        attributes.push(CPU, cpu as i64);
        if incomplete {
            attributes.push(conv::INCOMPLETE, true);
        }
        Span {
            span_id: next_id(),
            name: name.into(),
            kind: SpanKind::Internal,
            start_ns: start,
            end_ns: end.max(start),
            attributes,
            ..Span::default()
        }
    };
    for e in events {
        let t = e.time_ns;
        let EventKind::Kernel(k) = &e.kind else { continue };
        match k {
            KernelEvent::SchedSwitch {
                cpu,
                prev_pid,
                prev_tid,
                prev_comm,
                prev_state,
                next_pid,
                next_tid,
                next_comm,
            } => {
                if wanted(*prev_tid) {
                    let th = thread(&mut threads, *prev_pid, *prev_tid, t);
                    th.comm = Some(prev_comm.clone());
                    let (start, c, incomplete) = match th.on_since.take() {
                        Some((s, c)) => (s, c, false),
                        None if !th.seen_switch => (w_start, *cpu, true),
                        None => (t, *cpu, true),
                    };
                    th.seen_switch = true;
                    let mut s = mk("on-cpu".into(), start, t, "on_cpu", *prev_tid, c, incomplete);
                    let state = weft_state_letter(*prev_state);
                    s.attributes.push(SWITCH_OUT_STATE, state);
                    s.attributes.push(SWITCHED_TO, next_comm.as_ref());
                    stats.on_cpu += 1;
                    stats.incomplete += incomplete as u64;
                    th.spans.push(s);
                }
                if wanted(*next_tid) {
                    let th = thread(&mut threads, *next_pid, *next_tid, t);
                    th.comm = Some(next_comm.clone());
                    th.seen_switch = true;
                    th.on_since = Some((t, *cpu));
                }
            }
            KernelEvent::SyscallEnter { cpu, pid, tid, nr, args } if wanted(*tid) => {
                let th = thread(&mut threads, *pid, *tid, t);
                th.syscall = Some((t, *nr, *args, *cpu));
            }
            KernelEvent::SyscallExit { cpu, pid, tid, nr, ret } if wanted(*tid) => {
                let th = thread(&mut threads, *pid, *tid, t);
                let (start, args, incomplete) = match th.syscall.take() {
                    Some((s, enr, args, _)) if enr == *nr => (s, Some(args), false),
                    Some(_) => {
                        stats.mismatched += 1;
                        continue;
                    }
                    // The call was in progress when the capture started.
                    None if !th.first_syscall_exit_open => {
                        th.first_syscall_exit_open = true;
                        (w_start, None, true)
                    }
                    None => {
                        stats.mismatched += 1;
                        continue;
                    }
                };
                th.first_syscall_exit_open = true;
                let name =
                    (opts.syscall_name)(*nr).map(str::to_owned).unwrap_or_else(|| format!("syscall_{nr}"));
                let mut s = mk(name, start, t, "syscall", *tid, *cpu, incomplete);
                s.attributes.push(SYSCALL_NR, *nr);
                s.attributes.push(SYSCALL_RET, *ret);
                if let Some(a) = args {
                    s.attributes
                        .push(SYSCALL_ARGS, Value::Array(a.iter().map(|v| Value::I64(*v as i64)).collect()));
                }
                stats.syscalls += 1;
                stats.incomplete += incomplete as u64;
                th.spans.push(s);
            }
            KernelEvent::UprobeEntry { cpu, pid, tid, probe, args, .. } if wanted(*tid) => {
                let th = thread(&mut threads, *pid, *tid, t);
                if th.uprobes.len() < 4096 {
                    th.uprobes.push((t, probe.clone(), *args, *cpu));
                }
            }
            KernelEvent::UprobeReturn { pid, tid, probe, ret, .. } if wanted(*tid) => {
                let th = thread(&mut threads, *pid, *tid, t);
                let Some(i) = th.uprobes.iter().rposition(|u| u.1 == *probe) else {
                    stats.unmatched_returns += 1;
                    continue;
                };
                // Frames above the match never returned (longjmp, lost records).
                let (start, probe, args, cpu) = th.uprobes.swap_remove(i);
                th.uprobes.truncate(i);
                let func = probe.rsplit_once(':').map(|(_, f)| f).unwrap_or(&probe).to_owned();
                let mut s = mk(func, start, t, "uprobe", *tid, cpu, false);
                s.attributes.push(UPROBE, probe.as_ref());
                s.attributes
                    .push(UPROBE_ARGS, Value::Array(args.iter().map(|v| Value::I64(*v as i64)).collect()));
                s.attributes.push(UPROBE_RET, *ret);
                stats.uprobe_calls += 1;
                th.spans.push(s);
            }
            _ => {}
        }
    }
    // Close what is still open at the end of the capture.
    let mut out = Vec::new();
    let mut roots = Vec::new();
    for (tid, mut th) in threads {
        if let Some((s, c)) = th.on_since.take() {
            let mut sp = mk("on-cpu".into(), s, w_end, "on_cpu", tid, c, true);
            sp.attributes.push(SWITCH_OUT_STATE, "R");
            stats.on_cpu += 1;
            stats.incomplete += 1;
            th.spans.push(sp);
        }
        if let Some((s, nr, args, c)) = th.syscall.take() {
            let name = (opts.syscall_name)(nr).map(str::to_owned).unwrap_or_else(|| format!("syscall_{nr}"));
            let mut sp = mk(name, s, w_end, "syscall", tid, c, true);
            sp.attributes.push(SYSCALL_NR, nr);
            sp.attributes
                .push(SYSCALL_ARGS, Value::Array(args.iter().map(|v| Value::I64(*v as i64)).collect()));
            stats.syscalls += 1;
            stats.incomplete += 1;
            th.spans.push(sp);
        }
        for (s, probe, args, c) in th.uprobes.drain(..) {
            let func = probe.rsplit_once(':').map(|(_, f)| f).unwrap_or(&probe).to_owned();
            let mut sp = mk(func, s, w_end, "uprobe", tid, c, true);
            sp.attributes.push(UPROBE, probe.as_ref());
            sp.attributes
                .push(UPROBE_ARGS, Value::Array(args.iter().map(|v| Value::I64(*v as i64)).collect()));
            stats.uprobe_calls += 1;
            stats.incomplete += 1;
            th.spans.push(sp);
        }
        if th.spans.is_empty() {
            continue;
        }
        let trace = trace_id(opts.seed, th.pid, tid);
        let mut resource = Resource::service("kernel");
        resource.attributes.push(conv::HOST_NAME, opts.host.clone());
        resource.attributes.push(conv::PROCESS_PID, th.pid as i64);
        resource.attributes.push(conv::COMPONENT_KIND, "kernel");
        resource.attributes.push(conv::SOURCE_TOOL, "perf_event");
        let resource = Arc::new(resource);
        let scope = Arc::new(Scope::named(SCOPE));
        let start = th.spans.iter().map(|s| s.start_ns).min().unwrap_or(th.first).min(th.first);
        let end = th.spans.iter().map(|s| s.end_ns).max().unwrap_or(th.last).max(th.last);
        let comm = th.comm.as_deref().unwrap_or("?");
        let mut root = mk(format!("thread {comm} ({tid})"), start, end, "thread", tid, 0, false);
        root.attributes.remove(CPU);
        root.trace_id = trace;
        root.resource = resource.clone();
        root.scope = scope.clone();
        th.spans.sort_by_key(|s| (s.start_ns, s.end_ns));
        for mut s in th.spans {
            s.trace_id = trace;
            s.parent_span_id = Some(root.span_id);
            s.resource = resource.clone();
            s.scope = scope.clone();
            out.push(s);
        }
        stats.threads += 1;
        roots.push(root);
    }
    roots.extend(out);
    KernelSpans { spans: roots, stats }
}

/// Counters of [`nest_calls`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NestStats {
    /// Calls placed directly under an application span.
    pub placed: u64,
    /// Calls placed under an enclosing call that is itself in a request.
    pub nested: u64,
    /// Calls no application span of their thread contains (left under their thread root).
    pub unplaced: u64,
}

fn span_tid(s: &Span) -> Option<u32> {
    match s.attributes.get(conv::THREAD_ID)? {
        Value::I64(v) => u32::try_from(*v).ok(),
        Value::Str(t) => t.trim().parse().ok(),
        _ => None,
    }
}

/// Moves the function-call spans among `spans` (made by [`kernel_spans`]: kind `uprobe`)
/// into the traces of the application spans `app` (which carry [`conv::THREAD_ID`]): a call
/// gets as parent the innermost of (the application span of its thread that contains it, the
/// call of its thread that encloses it), takes that parent's trace and resource, and keeps its
/// own attributes. A call inside no application span stays under its thread root.
pub fn nest_calls(spans: &mut [Span], app: &[Span]) -> NestStats {
    let mut stats = NestStats::default();
    let mut by_thread: BTreeMap<u32, Vec<&Span>> = BTreeMap::new();
    for a in app {
        if let Some(t) = span_tid(a) {
            by_thread.entry(t).or_default().push(a);
        }
    }
    let is_call = |s: &Span| matches!(s.attributes.get(KIND), Some(Value::Str(k)) if &**k == "uprobe");
    let mut calls: Vec<(u32, usize)> = spans
        .iter()
        .enumerate()
        .filter(|(_, s)| is_call(s))
        .filter_map(|(i, s)| Some((span_tid(s)?, i)))
        .collect();
    calls.sort_by_key(|&(t, i)| (t, spans[i].start_ns, std::cmp::Reverse(spans[i].end_ns)));
    // Per thread: the open (enclosing) calls, innermost last.
    let mut stack: Vec<usize> = Vec::new();
    let mut placed: HashSet<usize> = HashSet::new();
    let mut cur = None;
    for (tid, i) in calls {
        if cur != Some(tid) {
            stack.clear();
            cur = Some(tid);
        }
        let (start, end) = (spans[i].start_ns, spans[i].end_ns);
        while stack.last().is_some_and(|&j| spans[j].end_ns < end || spans[j].start_ns > start) {
            stack.pop();
        }
        let request = by_thread
            .get(&tid)
            .into_iter()
            .flatten()
            .filter(|a| a.start_ns <= start && end <= a.end_ns)
            .max_by_key(|a| (a.start_ns, std::cmp::Reverse(a.end_ns)));
        let enclosing = stack
            .last()
            .copied()
            .filter(|j| placed.contains(j) && request.is_none_or(|a| spans[*j].start_ns >= a.start_ns));
        match (enclosing, request) {
            (Some(j), _) => {
                let (trace, id, resource, scope) =
                    (spans[j].trace_id, spans[j].span_id, spans[j].resource.clone(), spans[j].scope.clone());
                let s = &mut spans[i];
                (s.trace_id, s.parent_span_id, s.resource, s.scope) = (trace, Some(id), resource, scope);
                stats.nested += 1;
                placed.insert(i);
            }
            (None, Some(a)) => {
                let s = &mut spans[i];
                (s.trace_id, s.parent_span_id, s.resource) =
                    (a.trace_id, Some(a.span_id), a.resource.clone());
                stats.placed += 1;
                placed.insert(i);
            }
            (None, None) => stats.unplaced += 1,
        }
        stack.push(i);
    }
    stats
}

fn thread(map: &mut BTreeMap<u32, ThreadState>, pid: u32, tid: u32, t: u64) -> &mut ThreadState {
    let th = map.entry(tid).or_insert_with(|| ThreadState { pid, first: t, ..ThreadState::default() });
    if (pid != 0 && pid != tid) || th.pid == 0 {
        th.pid = pid;
    }
    th.last = t;
    th
}

/// `R`, `S`, `D` or `-` for a `sched_switch` `prev_state` (none of the low 8 state bits set =
/// runnable; a preempted task reports 0x100).
pub fn weft_state_letter(prev_state: i64) -> &'static str {
    let bits = prev_state & 0xff;
    if bits == 0 {
        "R"
    } else if bits & 1 != 0 {
        "S"
    } else if bits & 2 != 0 {
        "D"
    } else {
        "-"
    }
}
