//! Kernel activity attributed to application spans.
//!
//! [`attribute`] takes application spans that carry the OS thread that ran them
//! ([`conv::THREAD_ID`]) and kernel spans of the same capture (made from kernel events by
//! `weft_weave::kernel::kernel_spans`; their keys are in [`weft_model::kernel`]) and, from the
//! kernel spans of that thread, adds to each:
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
//! Why here and not in weft-weave: it reads spans only (kernel and application spans, from
//! files, the store or a query) and adds attributes and child spans, so the server and CLI can
//! re-run it on stored spans; turning kernel *events* into spans is weft-weave's job.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use weft_model::id::mix2;
use weft_model::kernel::{KIND, SCOPE, SWITCH_OUT_STATE};
use weft_model::{Attributes, Resource, Scope, Span, SpanId, SpanKind, Value, conv};

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
/// from kernel spans (`weft_weave::kernel::kernel_spans`). New child spans are appended to `app`.
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
                s.span_id = SpanId::derived(mix2(p.span_id.to_u64(), 0x6b), (children.len() as u64) + 1);
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
                        scope: Arc::new(Scope::named(SCOPE)),
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
