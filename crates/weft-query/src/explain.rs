//! `EXPLAIN`: the plan as text, split into its three levels.

use crate::plan::{LivePlan, OutCol};
use crate::source::Source;
use std::fmt::Write;
use weft_probe::query::{Filter, MAX_CAPACITY};

fn filter_text(f: &Filter) -> String {
    match f {
        Filter::True => "true".into(),
        Filter::Cmp(o, op, c) => {
            let c = match c {
                weft_probe::query::Const::Str(s) => format!("'{s}'"),
                weft_probe::query::Const::Int(v) => v.to_string(),
                weft_probe::query::Const::Uint(v) => v.to_string(),
                weft_probe::query::Const::Float(v) => v.to_string(),
                weft_probe::query::Const::Bool(v) => v.to_string(),
            };
            format!("{o} {} {c}", op.symbol())
        }
        Filter::And(a, b) => format!("({} AND {})", filter_text(a), filter_text(b)),
        Filter::Or(a, b) => format!("({} OR {})", filter_text(a), filter_text(b)),
        Filter::Not(a) => format!("NOT {}", filter_text(a)),
    }
}

fn dur(d: std::time::Duration) -> String {
    let ns = d.as_nanos();
    for (unit, n) in
        [("h", 3_600_000_000_000u128), ("m", 60_000_000_000), ("s", 1_000_000_000), ("ms", 1_000_000)]
    {
        if ns >= n && ns.is_multiple_of(n) {
            return format!("{}{unit}", ns / n);
        }
    }
    format!("{ns}ns")
}

/// The plan as EXPLAIN prints it: one block per level (probe, machine, cluster), then the
/// output columns.
pub fn explain(p: &LivePlan) -> String {
    let mut s = String::new();
    let agg_side = p.aggregating_side();
    let name = |i: usize| -> String {
        let (src, alias) = &p.sources[i];
        match alias {
            Some(a) => format!("{src} AS {a}"),
            None => src.to_string(),
        }
    };
    let _ = writeln!(s, "probe level");
    for i in 0..p.sources.len() {
        let src = &p.sources[i].0;
        let _ = writeln!(s, "  {} — {}", name(i), src.runs_in());
        let _ = writeln!(s, "    filter: {}", filter_text(&p.filters[i]));
        if let Some(j) = &p.join
            && j.upstream == i
        {
            let carried: Vec<&str> = j.carried.iter().map(|c| c.name.as_str()).collect();
            let _ = writeln!(
                s,
                "    pack into the request's baggage: {} (at most {} bytes, the latest upstream value; carried only while this query runs)",
                if carried.is_empty() { "a happened-before mark".to_string() } else { carried.join(", ") },
                crate::plan::BAGGAGE_MAX
            );
            continue;
        }
        if i != agg_side {
            continue;
        }
        if let Some(j) = &p.join {
            let _ = writeln!(
                s,
                "    requires: the request's baggage holds {}'s pack (else the event is skipped)",
                name(j.upstream)
            );
        }
        let keys: Vec<String> = p
            .keys
            .iter()
            .map(|k| if k.side == i { k.name.clone() } else { format!("{} (from baggage)", k.name) })
            .collect();
        let _ =
            writeln!(s, "    group by: {}", if keys.is_empty() { "(none)".into() } else { keys.join(", ") });
        let aggs: Vec<&str> = p.aggs.iter().map(|a| a.text.as_str()).collect();
        let table = match src {
            Source::Probe(_) => format!(
                "{} entries per thread (up to {MAX_CAPACITY}); full → drop and count",
                p.capacity.clamp(16, MAX_CAPACITY).next_power_of_two()
            ),
            _ => format!("{} entries per CPU map; full → drop and count", p.capacity),
        };
        let _ = writeln!(s, "    partial aggregation: {}", aggs.join(", "));
        let _ = writeln!(s, "    state: {table}");
    }
    let every = p.window.interval.or(p.window.duration);
    let _ = writeln!(s, "machine level (agent)");
    let _ = writeln!(
        s,
        "  merge {} {}",
        p.sources[agg_side].0.partials(),
        match every {
            Some(d) => format!("every {}", dur(d)),
            None => "when the query stops".into(),
        }
    );
    let _ = writeln!(s, "  ship one partial per interval to the collector (compact form, drops counted)");
    let _ = writeln!(s, "cluster level (collector)");
    let _ = writeln!(
        s,
        "  merge the agents' partials per window: {}{}",
        match p.window.interval {
            Some(i) => format!("every {}", dur(i)),
            None => "one window".into(),
        },
        match p.window.duration {
            Some(d) => format!(", stop after {}", dur(d)),
            None => ", until stopped".into(),
        }
    );
    if let Some((i, desc)) = p.order {
        let _ = writeln!(
            s,
            "  top-N: order by {} {}{}",
            p.outputs[i].0,
            if desc { "desc" } else { "asc" },
            p.limit.map(|n| format!(", keep {n}")).unwrap_or_default()
        );
    } else if let Some(n) = p.limit {
        let _ = writeln!(s, "  keep the first {n} groups");
    }
    let outs: Vec<String> = p
        .outputs
        .iter()
        .map(|(n, c)| match c {
            OutCol::Key(_) => n.clone(),
            OutCol::Agg(_) => n.clone(),
        })
        .collect();
    let _ = writeln!(s, "output: {}", outs.join(", "));
    s
}
