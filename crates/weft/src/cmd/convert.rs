//! `weft convert`: converts a trace file between formats, streaming (bounded memory), with a
//! progress bar on large inputs and a closing summary. The conversion itself is
//! `weft_model::codec::convert`; this module opens files, picks formats and reports.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use weft_model::codec::convert::{ConvertOptions, ConvertReport, convert, resolve_input};
use weft_model::codec::stream::{Format, WriterOptions};
use weft_model::codec::{CodecError, ErrorKind};

/// Arguments of `weft convert`.
#[derive(clap::Args, Debug)]
#[command(after_help = FORMATS_HELP)]
pub struct Args {
    /// Input file (`-` for standard input).
    pub input: PathBuf,
    /// Output file (`-` for standard output). Written to a temporary file beside it and
    /// renamed when the conversion succeeded, so a failed run leaves no partial output.
    pub output: PathBuf,
    /// Input format (default: detected from the content, else from the file name).
    #[arg(long, value_parser = parse_format)]
    pub from: Option<Format>,
    /// Output format (default: from the output file name, e.g. `.pb`, `x.zipkin.json`).
    #[arg(long, value_parser = parse_format)]
    pub to: Option<Format>,
    /// Fail on the first span that cannot be converted (default: skip it, count it, and
    /// report the first errors).
    #[arg(long)]
    pub strict: bool,
    /// Accept an input without spans (default: an error, so a wrong input never passes as an
    /// empty trace).
    #[arg(long)]
    pub allow_empty: bool,
    /// Spans handed from reader to writer at a time.
    #[arg(long, default_value_t = 1024)]
    pub batch: usize,
    /// Where the Jaeger and Chrome writers spill sorted runs (default: the system temp dir).
    #[arg(long)]
    pub spill_dir: Option<PathBuf>,
    /// Spans the Jaeger and Chrome writers sort in memory before spilling a run (memory
    /// versus number of run files).
    #[arg(long, default_value_t = 20_000)]
    pub sort_run: usize,
}

const FORMATS_HELP: &str = "Formats (--from/--to): otlp-proto, otlp-json, zipkin (v2 JSON), zipkin-proto, \
zipkin-v1 (read only), jaeger, chrome (write only).
File names that tell the format: .pb/.binpb/.otlp (OTLP protobuf), .jsonl/.ndjson/x.otlp.json (OTLP/JSON), \
x.zipkin.json, x.zipkin.pb, x.zipkin-v1.json, x.jaeger.json, x.chrome.json / x.perfetto.json.";

fn parse_format(s: &str) -> Result<Format, String> {
    Format::parse(s).ok_or_else(|| {
        let names: Vec<_> = Format::ALL.iter().map(|f| f.cli_name()).collect();
        format!("unknown format {s:?} (one of: {})", names.join(", "))
    })
}

fn is_std(p: &Path) -> bool {
    p.as_os_str() == "-"
}

/// Counts bytes read into a progress bar.
struct Counting<R> {
    inner: R,
    bar: indicatif::ProgressBar,
    bytes: u64,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes += n as u64;
        self.bar.inc(n as u64);
        Ok(n)
    }
}

/// Removes a temporary output unless disarmed.
struct TempOutput(Option<PathBuf>);

impl Drop for TempOutput {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Peak resident memory of this process (VmHWM), when the system tells.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Runs `weft convert`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let in_name = if is_std(&args.input) { "<stdin>".to_owned() } else { args.input.display().to_string() };
    let out_name =
        if is_std(&args.output) { "<stdout>".to_owned() } else { args.output.display().to_string() };
    if !is_std(&args.input)
        && !is_std(&args.output)
        && let (Ok(a), Ok(b)) = (args.input.canonicalize(), args.output.canonicalize())
        && a == b
    {
        bail!("the input and the output are the same file ({in_name})");
    }

    // Output format first: failing on it must not wait for a large input.
    let to = match args
        .to
        .or_else(|| (!is_std(&args.output)).then(|| Format::from_path(&args.output)).flatten())
    {
        Some(f) => f,
        None => bail!(
            "cannot tell the output format from the name {out_name:?}: give --to (one of: {})",
            Format::ALL.iter().filter(|f| f.can_write()).map(|f| f.cli_name()).collect::<Vec<_>>().join(", ")
        ),
    };
    if !to.can_write() {
        bail!("weft reads {} but does not write it; pick another --to", to.name());
    }

    let (raw, total): (Box<dyn Read>, Option<u64>) = if is_std(&args.input) {
        (Box::new(std::io::stdin().lock()), None)
    } else {
        let f = File::open(&args.input).with_context(|| format!("cannot open {in_name}"))?;
        let len = f.metadata().ok().map(|m| m.len());
        (Box::new(f), len)
    };
    let bar = weft_cli::progress::bytes_bar(total.filter(|t| *t >= 16 << 20), "converting");
    if total.is_some_and(|t| t < 16 << 20) {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let counting = Counting { inner: raw, bar: bar.clone(), bytes: 0 };
    let mut input = BufReader::with_capacity(1 << 20, counting);
    let prefix = input.fill_buf().with_context(|| format!("cannot read {in_name}"))?.to_vec();

    let path = (!is_std(&args.input)).then_some(args.input.as_path());
    let Some(from) = resolve_input(args.from, path, &prefix) else {
        bail!(
            "{in_name}: cannot tell its format from the content or the name: give --from (one of: {})",
            Format::ALL.iter().filter(|f| f.can_read()).map(|f| f.cli_name()).collect::<Vec<_>>().join(", ")
        );
    };
    if !from.can_read() {
        bail!("weft writes {} but does not read it; pick another --from", from.name());
    }
    tracing::info!(from = from.cli_name(), to = to.cli_name(), "converting {in_name} to {out_name}");

    let options = ConvertOptions {
        lenient: !args.strict,
        allow_empty: args.allow_empty,
        batch_spans: args.batch.max(1),
        writer: WriterOptions {
            spill_dir: args.spill_dir.clone().unwrap_or_else(std::env::temp_dir),
            sort_run_spans: args.sort_run.max(1),
        },
    };
    let started = Instant::now();
    let progress = |n: u64| bar.set_message(format!("{} spans", thousands(n)));

    let in_file = |e: CodecError| -> anyhow::Error {
        // Write errors name the output; everything else is about the input.
        let e = if e.kind == ErrorKind::Io && e.format == to.name() && e.position == Default::default() {
            e.in_file(&out_name)
        } else {
            e.in_file(&in_name)
        };
        // The message already carries the cause (no `source` chain repeated after it).
        anyhow::anyhow!("{e}")
    };

    let report = if is_std(&args.output) {
        let out = BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
        match convert(from, to, &mut input, out, &options, &prefix, progress) {
            Ok(r) => r,
            // The reader of a pipe went away (`weft convert big.pb - | head`): stop quietly.
            Err(e) if is_broken_pipe(&e) => {
                bar.finish_and_clear();
                return Ok(());
            }
            Err(e) => return Err(in_file(e)),
        }
    } else {
        let dir = args.output.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let file_name = args.output.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let tmp = dir.join(format!(".{file_name}.weft-partial-{}", std::process::id()));
        let mut guard = TempOutput(Some(tmp.clone()));
        let f = File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
        let mut out = BufWriter::with_capacity(1 << 20, f);
        let report = convert(from, to, &mut input, &mut out, &options, &prefix, progress).map_err(in_file)?;
        let f = out
            .into_inner()
            .map_err(|e| e.into_error())
            .with_context(|| format!("cannot write {out_name}"))?;
        f.sync_all().with_context(|| format!("cannot write {out_name}"))?;
        drop(f);
        std::fs::rename(&tmp, &args.output).with_context(|| format!("cannot create {out_name}"))?;
        guard.0 = None;
        report
    };
    bar.finish_and_clear();
    let bytes = input.get_ref().bytes;
    summary(&report, &in_name, &out_name, bytes, started.elapsed().as_secs_f64());
    Ok(())
}

fn is_broken_pipe(e: &CodecError) -> bool {
    std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0))
}

/// The closing summary, on stderr (stdout may be the output).
fn summary(r: &ConvertReport, in_name: &str, out_name: &str, bytes: u64, secs: f64) {
    let secs = secs.max(1e-9);
    let mut e = std::io::stderr().lock();
    let _ = writeln!(e, "weft convert: {in_name} ({}) → {out_name} ({})", r.from.name(), r.to.name());
    let _ = writeln!(
        e,
        "  read      {} spans from {} in {secs:.2} s ({} spans/s, {:.1} MiB/s)",
        thousands(r.spans_read),
        mib(bytes),
        thousands((r.spans_read as f64 / secs) as u64),
        bytes as f64 / (1024.0 * 1024.0) / secs
    );
    if r.rejected.count > 0 {
        let _ = writeln!(e, "  rejected  {} spans (skipped); the first errors:", thousands(r.rejected.count));
        for err in r.rejected.errors() {
            let _ = writeln!(e, "            {in_name}: {err}");
        }
    } else {
        let _ = writeln!(e, "  rejected  none");
    }
    let _ = writeln!(e, "  wrote     {} spans", thousands(r.spans_written));
    if r.losses.is_empty() {
        let _ = writeln!(e, "  lost      nothing ({} carries everything weft read)", r.to.name());
    } else {
        let lost: Vec<String> = r.losses.iter().map(|(what, n)| format!("{} {what}", thousands(n))).collect();
        let _ = writeln!(e, "  lost      {} cannot carry: {}", r.to.name(), lost.join(", "));
    }
    if let Some(rss) = peak_rss_bytes() {
        let _ = writeln!(e, "  memory    peak RSS {}", mib(rss));
    }
}
