//! `weft breakdown`: where the time of traces went — per component (host, NIC, each switch
//! or device, wire) and per request direction, over every trace in the input files
//! (Columbo's case-study figure), or for one trace (`--trace`). The rules and the three kinds
//! of time are `weft_analyze::breakdown`'s; see its docs.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;

use anyhow::{Context, bail};
use comfy_table::{Cell, CellAlignment, Table, presets::UTF8_FULL_CONDENSED};
use indicatif::ProgressBar;
use weft_analyze::breakdown::{
    Breakdown, BreakdownBuilder, Classifier, DEFAULT_MAX_PENDING_SPANS, GroupBy, Options, Stats,
    TraceBreakdown, WireMode, trace_breakdown,
};
use weft_model::codec::stream::{self, Format};
use weft_model::{Span, TraceId};

use weft_cli::progress;

/// Arguments of `weft breakdown`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Trace files: OTLP protobuf or JSON, Zipkin v2 JSON/proto, Zipkin v1 JSON, Jaeger JSON
    /// (`-` reads stdin).
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// Input format (`otlp-json`, `otlp-proto`, `zipkin`, `zipkin-proto`, `zipkin-v1`,
    /// `jaeger`); by default from the file name, else from the first bytes.
    #[arg(long)]
    pub format: Option<String>,
    /// A direction rule, `LABEL: COND, COND, ...` (repeatable; the first matching rule wins).
    /// COND is `key=value` on a span or its resource (inherited by child spans),
    /// `root.key=value`, `from=GROUP` or `to=GROUP` (the trace's first-starting /
    /// last-ending span's group); values take `a|b` alternatives and a trailing `*`.
    /// Without rules every trace counts in one direction, `all`.
    #[arg(long = "direction", short = 'd', value_name = "RULE")]
    pub directions: Vec<String>,
    /// Row key: `component` (weft.component, else service.name), `service`, `operation`, or
    /// `attr:KEY`.
    #[arg(long, default_value = "component", value_name = "KEY")]
    pub group_by: String,
    /// One wire row per link (`wire A→B`) instead of one summed `wire` row.
    #[arg(long)]
    pub per_link: bool,
    /// Break down only this trace (hex id): span count, total, self and timeline time per row.
    #[arg(long, value_name = "TRACE_ID")]
    pub trace: Option<String>,
    /// Print CSV (times in ns) instead of a table.
    #[arg(long, conflicts_with = "json")]
    pub csv: bool,
    /// Print the breakdown as JSON.
    #[arg(long)]
    pub json: bool,
    /// Compare two directions, `A/B`: adds mean(A) / mean(B) per row (table output).
    #[arg(long, value_name = "A/B")]
    pub ratio: Option<String>,
    /// Spans held in memory at most; more are dropped and counted.
    #[arg(long, default_value_t = DEFAULT_MAX_PENDING_SPANS)]
    pub max_spans: usize,
    /// Skip (and count) spans with invalid ids instead of failing.
    #[arg(long)]
    pub lenient: bool,
}

/// Runs `weft breakdown`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let group_by = GroupBy::parse(&args.group_by).with_context(|| {
        format!("--group-by {:?}: expected component, service, operation or attr:KEY", args.group_by)
    })?;
    let opts = Options { group_by, wire: if args.per_link { WireMode::PerLink } else { WireMode::Total } };
    let format = match &args.format {
        Some(f) => Some(
            Format::parse(f)
                .filter(|f| f.can_read())
                .with_context(|| format!("--format {f:?}: not a format weft reads"))?,
        ),
        None => None,
    };
    let ratio = match &args.ratio {
        Some(r) => Some(
            r.split_once('/')
                .map(|(a, b)| (a.trim().to_owned(), b.trim().to_owned()))
                .filter(|(a, b)| !a.is_empty() && !b.is_empty())
                .with_context(|| format!("--ratio {r:?}: expected A/B (two direction labels)"))?,
        ),
        None => None,
    };
    let mut out = std::io::stdout().lock();
    if let Some(t) = &args.trace {
        let id = TraceId::from_hex(t).with_context(|| format!("--trace {t:?}"))?;
        if !args.directions.is_empty() || ratio.is_some() {
            bail!("--trace breaks down one trace; --direction and --ratio apply to many traces");
        }
        let mut spans = Vec::new();
        let read = read_inputs(&args, format, |s| {
            if s.trace_id == id {
                if spans.len() >= args.max_spans {
                    return false;
                }
                spans.push(s);
            }
            true
        })?;
        if spans.is_empty() {
            bail!("trace {id} is not in the input ({} spans read)", read.spans);
        }
        let b = trace_breakdown(&spans, &opts);
        if args.json {
            serde_json::to_writer_pretty(&mut out, &b)?;
            writeln!(out)?;
        } else if args.csv {
            write_trace_csv(&b, &mut out)?;
        } else {
            write!(out, "{}", trace_table(&b))?;
        }
        eprintln!(
            "trace {id}: {} spans, {}{}",
            b.spans,
            fmt_ns(b.duration_ns as f64),
            read.summary(args.max_spans)
        );
        return Ok(());
    }

    let cls = Classifier::parse(&args.directions)?;
    let mut builder = BreakdownBuilder::new(cls, opts).with_max_pending_spans(args.max_spans);
    let read = read_inputs(&args, format, |s| builder.push(&s))?;
    if read.spans == 0 {
        bail!("no spans in the input");
    }
    let b = builder.finish();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &b)?;
        writeln!(out)?;
    } else if args.csv {
        write_csv(&b, &mut out)?;
    } else {
        write!(out, "{}", table(&b))?;
        if let Some((a, c)) = &ratio {
            for l in [a, c] {
                if b.direction(l).is_none() {
                    bail!("--ratio: no direction {l:?} (directions: {})", labels(&b));
                }
            }
            writeln!(out)?;
            write!(out, "{}", ratio_table(&b, a, c))?;
        }
    }
    for d in &b.directions {
        if d.units == 0 {
            eprintln!("warning: direction {:?} matched no spans", d.direction);
        }
        if d.incomplete_units > 0 {
            eprintln!(
                "warning: {} of {} {:?} units contain incomplete spans (weft.incomplete): their \
                 times are partial (`weft weave` names the devices)",
                d.incomplete_units, d.units, d.direction
            );
        }
    }
    eprintln!(
        "{} traces, {} spans; {} units in {} direction(s); unclassified: {} spans ({} traces){}{}{}",
        b.traces,
        b.spans,
        b.directions.iter().map(|d| d.units).sum::<u64>(),
        b.directions.len(),
        b.unclassified_spans,
        b.unclassified_traces,
        if b.duplicate_span_ids > 0 {
            format!("; duplicate span ids: {}", b.duplicate_span_ids)
        } else {
            String::new()
        },
        if b.sampled { "; medians/p95 from a sample" } else { "" },
        read.summary(args.max_spans),
    );
    Ok(())
}

fn labels(b: &Breakdown) -> String {
    b.directions.iter().map(|d| d.direction.as_str()).collect::<Vec<_>>().join(", ")
}

/// What reading the inputs gave.
struct ReadStats {
    spans: u64,
    rejected: u64,
    first_rejected: Option<String>,
    dropped: u64,
}

impl ReadStats {
    fn summary(&self, max: usize) -> String {
        let mut s = String::new();
        if self.rejected > 0 {
            s += &format!("; {} spans rejected by the decoder (--lenient)", self.rejected);
            if let Some(e) = &self.first_rejected {
                s += &format!(", the first: {e}");
            }
        }
        if self.dropped > 0 {
            s += &format!("; {} spans dropped beyond --max-spans {max}", self.dropped);
        }
        s
    }
}

/// Counts bytes for the progress bar.
struct Counting<R> {
    inner: R,
    bar: ProgressBar,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bar.inc(n as u64);
        Ok(n)
    }
}

/// Streams every span of every input into `sink` (which returns false for a span it dropped).
fn read_inputs(
    args: &Args,
    format: Option<Format>,
    mut sink: impl FnMut(Span) -> bool,
) -> anyhow::Result<ReadStats> {
    let mut st = ReadStats { spans: 0, rejected: 0, first_rejected: None, dropped: 0 };
    for path in &args.inputs {
        let stdin = path.as_os_str() == "-";
        let (input, size): (Box<dyn Read>, Option<u64>) = if stdin {
            (Box::new(std::io::stdin()), None)
        } else {
            let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
            let size = f.metadata().ok().map(|m| m.len());
            (Box::new(f), size)
        };
        let name = if stdin { "stdin".to_owned() } else { path.display().to_string() };
        let bar = progress::bytes_bar(size, &name);
        let mut buf = BufReader::with_capacity(1 << 16, Counting { inner: input, bar: bar.clone() });
        let format = match format.or_else(|| if stdin { None } else { Format::from_path(path) }) {
            Some(f) => f,
            None => detect(&mut buf, &name)?,
        };
        let mut reader = stream::reader(format, &mut buf, args.lenient)
            .with_context(|| format!("{name}: reading as {}", format.name()))?;
        let mut batch = Vec::with_capacity(4096);
        loop {
            batch.clear();
            let more =
                reader.next_batch(&mut batch, 4096).with_context(|| format!("{name} ({})", format.name()))?;
            for s in batch.drain(..) {
                st.spans += 1;
                if !sink(s) {
                    st.dropped += 1;
                }
            }
            bar.set_message(format!("{} spans", st.spans));
            if !more {
                break;
            }
        }
        let rej = reader.rejected();
        st.rejected += rej.count;
        if st.first_rejected.is_none() {
            st.first_rejected = rej.first_error.as_ref().map(|e| format!("{name}: {e}"));
        }
        bar.finish_and_clear();
    }
    Ok(st)
}

fn detect(buf: &mut impl BufRead, name: &str) -> anyhow::Result<Format> {
    let head = buf.fill_buf().with_context(|| format!("reading {name}"))?;
    match Format::detect(head) {
        Some(f) if f.can_read() => Ok(f),
        Some(f) => bail!("{name} looks like {}, which weft writes but does not read", f.name()),
        None => bail!("{name}: cannot tell the trace format from its first bytes; give --format"),
    }
}

/// `1.234 ms`, `56.7 µs`, `890 ns`, `2.5 s`.
fn fmt_ns(ns: f64) -> String {
    let a = ns.abs();
    if a >= 1e9 {
        format!("{:.3} s", ns / 1e9)
    } else if a >= 1e6 {
        format!("{:.3} ms", ns / 1e6)
    } else if a >= 1e3 {
        format!("{:.3} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

fn pct(x: f64) -> String {
    format!("{:.1} %", x * 100.0)
}

fn right(s: String) -> Cell {
    Cell::new(s).set_alignment(CellAlignment::Right)
}

fn new_table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(header.to_vec());
    t
}

/// Mark of a row computed in part from units with incomplete spans.
const CUT: &str = " (!)";

fn table(b: &Breakdown) -> String {
    let mut t = new_table(&["direction", "row", "kind", "units", "mean", "median", "p95", "max", "share"]);
    let mut cut = Vec::new();
    for d in &b.directions {
        for c in &d.components {
            let mut name = c.name.clone();
            if c.incomplete_units > 0 {
                name.push_str(CUT);
                cut.push(format!(
                    "{} {}: {} of {} units",
                    d.direction, c.name, c.incomplete_units, c.present
                ));
            }
            let kind = match c.kind {
                weft_analyze::breakdown::RowKind::Wire => "wire".to_owned(),
                _ => c.component_kind.clone().unwrap_or_default(),
            };
            t.add_row(vec![
                Cell::new(&d.direction),
                Cell::new(name),
                Cell::new(kind),
                right(format!("{}/{}", c.present, d.units)),
                right(fmt_ns(c.time.mean_ns)),
                right(fmt_ns(c.time.median_ns as f64)),
                right(fmt_ns(c.time.p95_ns as f64)),
                right(fmt_ns(c.time.max_ns as f64)),
                right(pct(c.share)),
            ]);
        }
        let e = &d.end_to_end;
        t.add_row(vec![
            Cell::new(&d.direction),
            Cell::new("end-to-end"),
            Cell::new(""),
            right(d.units.to_string()),
            right(fmt_ns(e.mean_ns)),
            right(fmt_ns(e.median_ns as f64)),
            right(fmt_ns(e.p95_ns as f64)),
            right(fmt_ns(e.max_ns as f64)),
            right(pct(if d.units > 0 { 1.0 } else { 0.0 })),
        ]);
    }
    if cut.is_empty() {
        return format!("{t}\n");
    }
    format!(
        "{t}\n{CUT} rows computed in part from journeys with incomplete spans (weft.incomplete: an \
         opening or closing event was not matched), whose times there are partial — {}\n",
        cut.join("; ")
    )
}

fn ratio_table(b: &Breakdown, a: &str, c: &str) -> String {
    let mut t = new_table(&["row", &format!("mean {a}"), &format!("mean {c}"), &format!("{a}/{c}")]);
    let (da, dc) = match (b.direction(a), b.direction(c)) {
        (Some(x), Some(y)) => (x, y),
        _ => return String::new(),
    };
    let mut names: Vec<&str> = da.components.iter().map(|c| c.name.as_str()).collect();
    for x in &dc.components {
        if !names.contains(&x.name.as_str()) {
            names.push(&x.name);
        }
    }
    let mean = |d: &weft_analyze::breakdown::DirectionBreakdown, n: &str| {
        d.component(n).map(|c| c.time.mean_ns).unwrap_or(0.0)
    };
    let mut row = |name: &str, ma: f64, mc: f64| {
        let r = if mc > 0.0 { format!("{:.2}×", ma / mc) } else { "–".to_owned() };
        t.add_row(vec![Cell::new(name), right(fmt_ns(ma)), right(fmt_ns(mc)), right(r)]);
    };
    for n in names {
        row(n, mean(da, n), mean(dc, n));
    }
    row("end-to-end", da.end_to_end.mean_ns, dc.end_to_end.mean_ns);
    format!("{t}\n")
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_owned() }
}

fn stats_csv(s: &Stats) -> String {
    format!("{},{:.3},{},{},{},{}", s.sum_ns, s.mean_ns, s.median_ns, s.p95_ns, s.min_ns, s.max_ns)
}

fn write_csv(b: &Breakdown, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "direction,row,kind,component_kind,units,present,sum_ns,mean_ns,median_ns,p95_ns,min_ns,max_ns,share"
    )?;
    for d in &b.directions {
        for c in &d.components {
            let kind = match c.kind {
                weft_analyze::breakdown::RowKind::Wire => "wire",
                _ => "group",
            };
            writeln!(
                out,
                "{},{},{kind},{},{},{},{},{:.6}",
                csv_field(&d.direction),
                csv_field(&c.name),
                csv_field(c.component_kind.as_deref().unwrap_or("")),
                d.units,
                c.present,
                stats_csv(&c.time),
                c.share
            )?;
        }
        writeln!(
            out,
            "{},end-to-end,total,,{},{},{},{:.6}",
            csv_field(&d.direction),
            d.units,
            d.units,
            stats_csv(&d.end_to_end),
            if d.units > 0 { 1.0 } else { 0.0 }
        )?;
    }
    Ok(())
}

fn trace_table(b: &TraceBreakdown) -> String {
    let mut t = new_table(&["row", "kind", "spans", "total", "self", "timeline", "share"]);
    for r in &b.rows {
        let kind = match r.kind {
            weft_analyze::breakdown::RowKind::Wire => "wire".to_owned(),
            _ => r.component_kind.clone().unwrap_or_default(),
        };
        t.add_row(vec![
            Cell::new(&r.name),
            Cell::new(kind),
            right(r.spans.to_string()),
            right(fmt_ns(r.total_ns as f64)),
            right(fmt_ns(r.self_ns as f64)),
            right(fmt_ns(r.timeline_ns as f64)),
            right(pct(r.share)),
        ]);
    }
    t.add_row(vec![
        Cell::new("end-to-end"),
        Cell::new(""),
        right(b.spans.to_string()),
        right(String::new()),
        right(String::new()),
        right(fmt_ns(b.duration_ns as f64)),
        right(pct(if b.duration_ns > 0 { 1.0 } else { 0.0 })),
    ]);
    format!("{t}\n")
}

fn write_trace_csv(b: &TraceBreakdown, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(out, "row,kind,component_kind,spans,total_ns,self_ns,timeline_ns,share,first_offset_ns")?;
    for r in &b.rows {
        let kind = match r.kind {
            weft_analyze::breakdown::RowKind::Wire => "wire",
            _ => "group",
        };
        writeln!(
            out,
            "{},{kind},{},{},{},{},{},{:.6},{}",
            csv_field(&r.name),
            csv_field(r.component_kind.as_deref().unwrap_or("")),
            r.spans,
            r.total_ns,
            r.self_ns,
            r.timeline_ns,
            r.share,
            r.first_offset_ns
        )?;
    }
    writeln!(out, "end-to-end,total,,{},,,{},1.000000,0", b.spans, b.duration_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_well() {
        assert_eq!(fmt_ns(890.0), "890 ns");
        assert_eq!(fmt_ns(56_700.0), "56.700 µs");
        assert_eq!(fmt_ns(1_234_000.0), "1.234 ms");
        assert_eq!(fmt_ns(2.5e9), "2.500 s");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("wire ns3/a→ns3/b"), "wire ns3/a→ns3/b");
    }
}
