//! `weft weave TOPOLOGY.toml`: weave simulator logs (gem5, nicbm, ns-3, QEMU) into end-to-end
//! traces, offline (files) or online (named pipes written while the simulation runs).
//!
//! Shows a progress line per source (bytes, lines, events, spans) while it runs and ends with a
//! summary: per source, events and spans per type, cross-component matching (unmatched causes
//! and effects), anomalies, rejected lines with their file:line, and what every sink wrote.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use weft_model::codec::stream::Format;
use weft_weave::sink::{Backpressure, HttpOptions, MemorySink, SinkSpec};
use weft_weave::{Run, RunReport, Topology};

use super::pipeline::{human, sink_lines, source_errors, watch};

/// Arguments of `weft weave`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The topology file (sources, links, filters, sinks; see `weft_weave::topology`).
    pub topology: PathBuf,
    /// Also write the traces to this file (format from `--format` or the file name, e.g.
    /// `out.otlp.json`, `out.zipkin.json`, `out.chrome.json`). Repeatable.
    #[arg(long, short)]
    pub out: Vec<PathBuf>,
    /// Format of the `--out` files.
    #[arg(long)]
    pub format: Option<String>,
    /// Also send the traces to this OTLP/HTTP endpoint (e.g. http://127.0.0.1:4318/v1/traces).
    #[arg(long)]
    pub otlp: Option<String>,
    /// When a sink given here falls behind: `block` the pipeline, or `drop` batches (counted).
    #[arg(long, default_value = "block")]
    pub backpressure: String,
    /// Print the woven traces as text trees (keeps all spans in memory: small runs only).
    #[arg(long)]
    pub tree: bool,
}

fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.2} GiB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

/// Runs `weft weave`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let topo = Topology::load(&args.topology)?;
    let backpressure = match args.backpressure.as_str() {
        "block" => Backpressure::Block,
        "drop" => Backpressure::Drop,
        b => anyhow::bail!("--backpressure: `{b}` is neither `block` nor `drop`"),
    };
    let mut extra = Vec::new();
    for p in &args.out {
        let format = match &args.format {
            Some(f) => Format::parse(f).with_context(|| format!("--format: unknown format `{f}`"))?,
            None => Format::from_path(p).with_context(|| {
                format!("{}: cannot tell the format from the name; give --format", p.display())
            })?,
        };
        anyhow::ensure!(format.can_write(), "--format: weft cannot write {}", format.name());
        extra.push(SinkSpec::File { path: p.clone(), format, backpressure, queue_batches: 4 });
    }
    if let Some(url) = &args.otlp {
        extra.push(SinkSpec::OtlpHttp(HttpOptions {
            url: url.clone(),
            backpressure,
            ..HttpOptions::default()
        }));
    }
    let mem = MemorySink::new();
    if args.tree {
        extra.push(SinkSpec::Memory(mem.clone()));
    }
    if topo.sinks.is_empty() && extra.is_empty() {
        eprintln!(
            "note: the topology has no [[sink]] and no --out/--otlp/--tree was given: only the summary is printed"
        );
    }
    let started = Instant::now();
    let run = Run::start(&topo, extra)?;

    watch(&run);
    let report = run.wait()?;
    let elapsed = started.elapsed();
    if args.tree {
        print!("{}", weft_weave::render::render(&mem.spans()));
    }
    print_summary(&topo, &report, elapsed);
    source_errors(&report.sources)
}

fn print_summary(topo: &Topology, r: &RunReport, elapsed: Duration) {
    let total_bytes: u64 = r.sources.iter().map(|s| s.stats.bytes).sum();
    eprintln!(
        "\nwove {} spans from {} events ({} in {} sources) in {:.2} s ({:.1} MB/s)",
        human(r.spans),
        human(r.weave.events_by_type.values().sum()),
        bytes(total_bytes),
        r.sources.len(),
        elapsed.as_secs_f64(),
        total_bytes as f64 / 1e6 / elapsed.as_secs_f64().max(1e-9)
    );
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(vec![
        "source",
        "format",
        "bytes",
        "lines",
        "events",
        "skipped",
        "rejected",
        "out of order",
        "dropped by filters",
        "spans",
    ]);
    for (s, spec) in r.sources.iter().zip(&topo.sources) {
        let st = &s.stats;
        t.add_row(vec![
            s.name.clone(),
            format!("{}{}", st.format, if s.stream { " (pipe)" } else { "" }),
            bytes(st.bytes),
            human(st.lines),
            human(st.events),
            human(st.skipped.total()),
            human(st.rejected.count()),
            human(st.out_of_order),
            human(s.actors.dropped.total()),
            human(s.spans),
        ]);
        let _ = spec;
    }
    eprintln!("{t}");

    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(vec!["events", "count", "spans", "count"]);
    let ev: Vec<_> = r.weave.events_by_type.iter().collect();
    let sp: Vec<_> = r.weave.spans_by_type.iter().collect();
    for i in 0..ev.len().max(sp.len()) {
        let e = ev.get(i).map(|(k, v)| (k.to_string(), human(**v))).unwrap_or_default();
        let s = sp.get(i).map(|(k, v)| (k.to_string(), human(**v))).unwrap_or_default();
        t.add_row(vec![e.0, e.1, s.0, s.1]);
    }
    eprintln!("{t}");
    if r.weave.incomplete > 0 {
        eprintln!(
            "{} spans closed without their opening or closing event (weft.incomplete=true)",
            human(r.weave.incomplete)
        );
    }

    if !r.weave.links.is_empty() {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED);
        t.set_header(vec![
            "link",
            "cause → effect",
            "causes",
            "matched exactly",
            "by order",
            "unmatched causes",
            "effects without cause",
        ]);
        for l in &r.weave.links {
            let s = &l.stats;
            t.add_row(vec![
                l.link.clone(),
                l.kind.to_owned(),
                human(s.pushed),
                human(s.exact),
                human(s.by_order),
                human(s.unmatched_causes),
                human(s.unmatched_effects),
            ]);
        }
        eprintln!("cross-component causality:\n{t}");
    }
    let mut notes: BTreeMap<String, u64> = BTreeMap::new();
    for (k, v) in &r.weave.anomalies.0 {
        *notes.entry(format!("anomaly: {k}")).or_default() += v;
    }
    for (k, v) in &r.weave.not_woven.0 {
        *notes.entry(format!("not woven: {k}")).or_default() += v;
    }
    for s in &r.sources {
        for (k, v) in &s.actors.dropped.0 {
            *notes.entry(format!("{}: dropped by actors: {k}", s.name)).or_default() += v;
        }
        for (k, v) in &s.stats.skipped.0 {
            *notes.entry(format!("{}: skipped: {k}", s.name)).or_default() += v;
        }
    }
    for (k, v) in notes {
        eprintln!("  {:>10}  {k}", human(v));
    }
    let net = r.weave.net_warnings();
    let a = &r.weave.assemble;
    if a.orphans + a.forced > 0 {
        eprintln!(
            "assembler: {} spans whose parent was forgotten, {} exported before their parent (bounds hit)",
            a.orphans, a.forced
        );
    }
    if r.merge.forced > 0 {
        eprintln!(
            "merge: {} events emitted before a stalled pipe caught up ({} arrived late): this run may differ from a file run",
            r.merge.forced, r.merge.late
        );
    }
    for s in &r.sources {
        let rej = &s.stats.rejected;
        if rej.count() == 0 && s.stats.out_of_order == 0 && !s.stats.ended_mid_line {
            continue;
        }
        eprintln!("{} ({}):", s.name, s.path.display());
        for (reason, n) in &rej.by_reason.0 {
            eprintln!("  {n} rejected: {reason}");
        }
        for x in &rej.samples {
            eprintln!("  {}:{}: {}: {}", s.path.display(), x.line, x.reason, x.excerpt);
        }
        for o in &s.stats.out_of_order_samples {
            eprintln!(
                "  {}:{}: time went back from {} ns to {} ns (kept, raised)",
                s.path.display(),
                o.line,
                o.latest_ns,
                o.time_ns
            );
        }
        if s.stats.out_of_order > s.stats.out_of_order_samples.len() as u64 {
            eprintln!("  ... {} out-of-order events in all", s.stats.out_of_order);
        }
        if s.stats.ended_mid_line {
            eprintln!("  the input ended in the middle of a line");
        }
    }
    for line in sink_lines(&r.sinks) {
        eprintln!("{line}");
    }
    if !net.is_empty() {
        eprintln!(
            "\nwarning: network hops were cut on {} device(s) — breakdowns through them are wrong:",
            net.len()
        );
        for w in &net {
            eprintln!("  {w}");
        }
    }
}
