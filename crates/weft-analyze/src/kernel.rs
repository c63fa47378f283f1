//! Kernel events → kernel spans, and kernel activity woven into application spans.
//!
//! **Kernel spans** ([`kernel_spans`]) turn a time-ordered capture into spans of the
//! `kernel` component: one per system call (enter → exit, named from the syscall number),
//! one per uprobe call (entry → return, with the argument and return registers), one per
//! on-CPU interval (switch-in → switch-out, with the state the thread left in), grouped in one
//! trace per thread under a `thread` root span. Intervals cut by the capture's start or end
//! are kept, clipped to the capture, and marked [`conv::INCOMPLETE`].
//!
//! **Attribution** ([`attribute`]) takes application spans that carry the OS thread that ran
//! them ([`conv::THREAD_ID`]) and, from the kernel spans of that thread, adds to each:
//!
//! | attribute | meaning |
//! |---|---|
//! | `weft.kernel.on_cpu_ns` | running on a CPU |
//! | `weft.kernel.off_cpu_ns` | not running (duration − on CPU) |
//! | `weft.kernel.runnable_ns` | off CPU while runnable: preempted, waiting for a CPU |
//! | `weft.kernel.blocked_ns` | off CPU while sleeping/blocked (S, D, ...) |
//! | `weft.kernel.syscall_ns` / `.syscall_count` | time in / number of system calls |
//! | `weft.kernel.syscall_ns.<name>` / `weft.kernel.syscall_count.<name>` | the same per syscall |
//! | `weft.kernel.switches` | times the thread left the CPU |
//! | `weft.kernel.state` | the dominant share: `running`, `runnable`, `blocked in <syscall>` or `blocked` |
//!
//! Shares are inclusive (a parent's include its children's). Off-CPU time the capture cannot
//! classify (before the thread's first switch, or with no scheduler events) counts in
//! `off_cpu_ns` but in neither `runnable_ns` nor `blocked_ns`. Optionally the syscalls and
//! off-CPU intervals become child spans of the innermost application span they fall in, so a
//! trace view shows where a slow span waited.
//!
//! Why here and not in weft-weave: both steps work on spans (events → spans is a per-thread
//! pairing that needs no merge or watermarks), so the server and CLI can re-run attribution on
//! stored spans and query results, and the crate stays free of the pipeline runtime.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use weft_model::event::KernelEvent;
use weft_model::{
    Attributes, Event, EventKind, Resource, Scope, Span, SpanId, SpanKind, TraceId, Value, conv,
};

/// Span attribute: what a kernel span is (`thread`, `syscall`, `on_cpu`, `off_cpu`, `uprobe`).
pub const KIND: &str = "weft.kernel.kind";
/// Span attribute: CPU.
pub const CPU: &str = "weft.kernel.cpu";
/// Span attribute (on-CPU spans): the state the thread left the CPU in (`R`, `S`, `D`, `-`).
pub const SWITCH_OUT_STATE: &str = "weft.kernel.switch_out_state";
/// Span attribute (syscall spans): syscall number.
pub const SYSCALL_NR: &str = "weft.kernel.syscall.nr";
/// Span attribute (syscall spans): return value.
pub const SYSCALL_RET: &str = "weft.kernel.syscall.ret";
/// Span attribute (syscall spans): the six argument registers.
pub const SYSCALL_ARGS: &str = "weft.kernel.syscall.args";
/// Span attribute (uprobe spans): `binary:function`.
pub const UPROBE: &str = "weft.kernel.uprobe";
/// Span attribute (uprobe spans): the six integer argument registers at entry.
pub const UPROBE_ARGS: &str = "weft.kernel.uprobe.args";
/// Span attribute (uprobe spans): the return register.
pub const UPROBE_RET: &str = "weft.kernel.uprobe.ret";
/// Attribution: ns on CPU.
pub const ON_CPU_NS: &str = "weft.kernel.on_cpu_ns";
/// Attribution: ns off CPU.
pub const OFF_CPU_NS: &str = "weft.kernel.off_cpu_ns";
/// Attribution: ns runnable but not running.
pub const RUNNABLE_NS: &str = "weft.kernel.runnable_ns";
/// Attribution: ns blocked (sleeping).
pub const BLOCKED_NS: &str = "weft.kernel.blocked_ns";
/// Attribution: ns in system calls (prefix of the per-syscall keys too).
pub const SYSCALL_NS: &str = "weft.kernel.syscall_ns";
/// Attribution: number of system calls (prefix of the per-syscall keys too).
pub const SYSCALL_COUNT: &str = "weft.kernel.syscall_count";
/// Attribution: switch-outs.
pub const SWITCHES: &str = "weft.kernel.switches";
/// Attribution: dominant state.
pub const STATE: &str = "weft.kernel.state";
/// Attribution: kernel child spans not attached because of the per-span limit.
pub const CHILDREN_DROPPED: &str = "weft.kernel.children_dropped";

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

fn mix(a: u64, b: u64) -> u64 {
    // splitmix64 of a combination: ids that look random and never repeat for distinct inputs
    // in practice.
    let mut z = a ^ b.rotate_left(29) ^ 0x9e37_79b9_7f4a_7c15;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)).max(1)
}

fn trace_id(seed: u64, pid: u32, tid: u32) -> TraceId {
    let hi = mix(seed, ((pid as u64) << 32) | tid as u64);
    let lo = mix(hi, tid as u64);
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&hi.to_be_bytes());
    b[8..].copy_from_slice(&lo.to_be_bytes());
    TraceId(b)
}

fn span_id(seed: u64, n: u64) -> SpanId {
    SpanId(mix(seed.rotate_left(17), n).to_be_bytes())
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
        span_id(opts.seed, n)
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
                    s.attributes.push("weft.kernel.switched_to", next_comm.as_ref());
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
        let scope = Arc::new(Scope::named("weft.kernel"));
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

/// Options of [`attribute`].
#[derive(Debug, Clone)]
pub struct AttributionOptions {
    /// Add syscalls and off-CPU intervals as child spans of the innermost application span.
    pub child_spans: bool,
    /// At most this many child spans per application span (the rest are counted in
    /// [`CHILDREN_DROPPED`]).
    pub max_children: usize,
}

impl Default for AttributionOptions {
    fn default() -> Self {
        AttributionOptions { child_spans: true, max_children: 1000 }
    }
}

/// Counters of [`attribute`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AttributionStats {
    /// Application spans that got kernel attributes.
    pub attributed: u64,
    /// Application spans without a usable `thread.id`.
    pub without_thread: u64,
    /// Application spans whose thread has no kernel data.
    pub unknown_thread: u64,
    /// Child spans added.
    pub children: u64,
    /// Child spans not added (per-span limit).
    pub children_dropped: u64,
}

#[derive(Clone, Copy)]
struct Interval {
    start: u64,
    end: u64,
    /// On-CPU: 0 running. Off-CPU: 1 runnable, 2 blocked.
    class: u8,
}

#[derive(Default)]
struct ThreadIntervals {
    cpu: Vec<Interval>,
    syscalls: Vec<(u64, u64, Arc<str>, usize)>,
}

/// The thread id of a span (`thread.id` as an integer or decimal text).
pub fn span_thread(s: &Span) -> Option<u32> {
    match s.attributes.get(conv::THREAD_ID)? {
        Value::I64(v) => u32::try_from(*v).ok(),
        Value::Str(t) => t.trim().parse().ok(),
        _ => None,
    }
}

fn overlap(a: u64, b: u64, s: u64, e: u64) -> u64 {
    b.min(e).saturating_sub(a.max(s))
}

/// Adds kernel attributes (and, with `child_spans`, kernel child spans) to application spans,
/// from kernel spans made by [`kernel_spans`]. New child spans are appended to `app`.
pub fn attribute(app: &mut Vec<Span>, kernel: &[Span], opts: &AttributionOptions) -> AttributionStats {
    let mut stats = AttributionStats::default();
    // Per thread: on-CPU intervals with the off-CPU gaps between them, and syscalls.
    let mut per: HashMap<u32, ThreadIntervals> = HashMap::new();
    let mut on: HashMap<u32, Vec<(u64, u64, bool)>> = HashMap::new();
    let mut resources: HashMap<u32, Arc<Resource>> = HashMap::new();
    for (i, s) in kernel.iter().enumerate() {
        let Some(tid) = span_thread(s) else { continue };
        resources.entry(tid).or_insert_with(|| s.resource.clone());
        match s.attributes.get_str(KIND) {
            Some("on_cpu") => {
                let runnable = s.attributes.get_str(SWITCH_OUT_STATE) == Some("R");
                on.entry(tid).or_default().push((s.start_ns, s.end_ns, runnable));
            }
            Some("syscall") => {
                per.entry(tid).or_default().syscalls.push((
                    s.start_ns,
                    s.end_ns,
                    Arc::from(s.name.as_str()),
                    i,
                ));
            }
            _ => {}
        }
    }
    for (tid, mut v) in on {
        v.sort_by_key(|x| x.0);
        let t = per.entry(tid).or_default();
        for (j, (s, e, runnable)) in v.iter().enumerate() {
            t.cpu.push(Interval { start: *s, end: *e, class: 0 });
            if let Some(next) = v.get(j + 1)
                && next.0 > *e
            {
                t.cpu.push(Interval { start: *e, end: next.0, class: if *runnable { 1 } else { 2 } });
            }
        }
    }
    for t in per.values_mut() {
        t.syscalls.sort_by_key(|x| x.0);
    }

    // Innermost application span per thread for child placement: spans sorted by start.
    let mut by_thread: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, s) in app.iter().enumerate() {
        if let Some(t) = span_thread(s) {
            by_thread.entry(t).or_default().push(i);
        }
    }
    for v in by_thread.values_mut() {
        v.sort_by_key(|&i| (app[i].start_ns, std::cmp::Reverse(app[i].end_ns)));
    }
    let mut children: Vec<Span> = Vec::new();
    let mut child_count: HashMap<usize, usize> = HashMap::new();
    let mut dropped: HashMap<usize, u64> = HashMap::new();

    for span in app.iter_mut() {
        let s = &*span;
        let Some(tid) = span_thread(s) else {
            stats.without_thread += 1;
            continue;
        };
        let Some(t) = per.get(&tid) else {
            stats.unknown_thread += 1;
            continue;
        };
        let (ss, se) = (s.start_ns, s.end_ns.max(s.start_ns));
        let (mut on_ns, mut runnable, mut blocked, mut switches) = (0u64, 0u64, 0u64, 0i64);
        let first = t.cpu.partition_point(|iv| iv.end <= ss);
        for iv in t.cpu[first..].iter().take_while(|iv| iv.start < se) {
            let o = overlap(iv.start, iv.end, ss, se);
            match iv.class {
                0 => {
                    on_ns += o;
                    if iv.end > ss && iv.end < se {
                        switches += 1;
                    }
                }
                1 => runnable += o,
                _ => blocked += o,
            }
        }
        let mut per_sys: BTreeMap<Arc<str>, (u64, i64)> = BTreeMap::new();
        let (mut sys_ns, mut sys_n) = (0u64, 0i64);
        // Syscalls can be long: scan those starting before the span's end whose end is after
        // its start.
        let upto = t.syscalls.partition_point(|x| x.0 < se);
        for (a, b, name, _) in t.syscalls[..upto].iter().rev() {
            if *b <= ss && *a < ss {
                // Sorted by start: earlier calls may still be long ones; stop after a while.
                if ss - *b > 60_000_000_000 {
                    break;
                }
                continue;
            }
            let o = overlap(*a, *b, ss, se);
            let e = per_sys.entry(name.clone()).or_insert((0, 0));
            e.0 += o;
            sys_ns += o;
            if *a >= ss {
                e.1 += 1;
                sys_n += 1;
            }
        }
        let dur = se - ss;
        let off = dur.saturating_sub(on_ns);
        let state = if on_ns >= runnable && on_ns >= blocked {
            "running".to_owned()
        } else if runnable >= blocked {
            "runnable".to_owned()
        } else {
            match per_sys.iter().max_by_key(|(_, v)| v.0) {
                Some((name, v)) if v.0 * 2 >= blocked => format!("blocked in {name}"),
                _ => "blocked".to_owned(),
            }
        };
        let a = &mut span.attributes;
        a.set(ON_CPU_NS, on_ns as i64);
        a.set(OFF_CPU_NS, off as i64);
        a.set(RUNNABLE_NS, runnable as i64);
        a.set(BLOCKED_NS, blocked as i64);
        a.set(SYSCALL_NS, sys_ns as i64);
        a.set(SYSCALL_COUNT, sys_n);
        a.set(SWITCHES, switches);
        a.set(STATE, state);
        for (name, (ns, n)) in &per_sys {
            a.set(format!("{SYSCALL_NS}.{name}"), *ns as i64);
            a.set(format!("{SYSCALL_COUNT}.{name}"), *n);
        }
        stats.attributed += 1;
    }

    if opts.child_spans {
        for (tid, t) in &per {
            let Some(order) = by_thread.get(tid) else { continue };
            let innermost = |at: u64| -> Option<usize> {
                let k = order.partition_point(|&i| app[i].start_ns <= at);
                order[..k].iter().rev().take(64).copied().find(|&i| app[i].end_ns > at)
            };
            let mut add = |parent: usize, mut s: Span, children: &mut Vec<Span>| {
                let c = child_count.entry(parent).or_insert(0);
                if *c >= opts.max_children {
                    *dropped.entry(parent).or_insert(0) += 1;
                    return;
                }
                *c += 1;
                let p = &app[parent];
                s.trace_id = p.trace_id;
                s.parent_span_id = Some(p.span_id);
                s.span_id = span_id(mix(p.span_id.low_u64_or_zero(), 0x6b), (children.len() as u64) + 1);
                children.push(s);
            };
            for (a, _, _, ki) in &t.syscalls {
                if let Some(p) = innermost(*a) {
                    add(p, kernel[*ki].clone(), &mut children);
                }
            }
            let kres = resources.get(tid).cloned().unwrap_or_default();
            for iv in t.cpu.iter().filter(|iv| iv.class != 0) {
                if let Some(p) = innermost(iv.start) {
                    let end = iv.end.min(app[p].end_ns);
                    let mut attributes = Attributes::new();
                    attributes.push(conv::THREAD_ID, *tid as i64);
                    attributes.push(KIND, "off_cpu");
                    let name = if iv.class == 1 { "off-cpu (runnable)" } else { "off-cpu (blocked)" };
                    let s = Span {
                        name: name.into(),
                        kind: SpanKind::Internal,
                        start_ns: iv.start,
                        end_ns: end.max(iv.start),
                        attributes,
                        resource: kres.clone(),
                        scope: Arc::new(Scope::named("weft.kernel")),
                        ..Span::default()
                    };
                    add(p, s, &mut children);
                }
            }
        }
        stats.children = children.len() as u64;
        for (p, d) in dropped {
            stats.children_dropped += d;
            app[p].attributes.set(CHILDREN_DROPPED, d as i64);
        }
        app.extend(children);
    }
    stats
}

trait LowU64 {
    fn low_u64_or_zero(&self) -> u64;
}

impl LowU64 for SpanId {
    fn low_u64_or_zero(&self) -> u64 {
        u64::from_be_bytes(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_model::SourceId;

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
        KernelSpanOptions {
            host: "h".into(),
            syscall_name: name,
            traced: None,
            seed: 7,
            window: Some((0, 200)),
        }
    }

    fn capture() -> Vec<Event> {
        vec![
            sw(0, 0, 0, 100),
            ev(
                10,
                KernelEvent::SyscallEnter { cpu: 0, pid: 100, tid: 100, nr: 35, args: [1, 0, 0, 0, 0, 0] },
            ),
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
}
