//! What the commands that run a [`weft_weave::pipeline`] share (`weft weave`, `weft import`,
//! `weft record`): the progress display, the end-of-run lines about sources and sinks, the
//! data-directory span sink, and the format of a span output file (also `weft exist`'s).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use indicatif::{MultiProgress, ProgressDrawTarget};
use weft_model::Span;
use weft_store::{Store, StoreError};
use weft_weave::Run;
use weft_weave::pipeline::{SourceReport, SourceState, WeaveStage};
use weft_weave::sink::{SinkError, SinkReport, SpanSink};

/// The format of a span output file: `--format` when given, else from the file's name
/// (OTLP/JSON when the name says nothing); refused when weft cannot write it.
pub fn span_file_format(
    path: Option<&std::path::Path>,
    format: Option<&str>,
) -> anyhow::Result<Option<weft_model::codec::stream::Format>> {
    use anyhow::Context;
    use weft_model::codec::stream::Format;
    let Some(p) = path else { return Ok(None) };
    let f = match format {
        Some(f) => Format::parse(f).with_context(|| format!("unknown --format {f:?}"))?,
        None => Format::from_path(p).unwrap_or(Format::OtlpJson),
    };
    if !f.can_write() {
        anyhow::bail!("weft cannot write {}", f.name());
    }
    Ok(Some(f))
}

/// `1234567` → `1,234,567`.
pub fn human(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Shows a progress line per source (bytes, lines, events, spans) until the run has finished.
pub fn watch<W: WeaveStage + 'static>(run: &Run<W>) {
    let mp = MultiProgress::with_draw_target(if weft_cli::progress::is_quiet() {
        ProgressDrawTarget::hidden()
    } else {
        ProgressDrawTarget::stderr()
    });
    let bars: Vec<_> = run
        .sources()
        .iter()
        .map(|s| {
            let len = match s.total_bytes.load(Ordering::Relaxed) {
                0 => std::fs::metadata(&s.path).ok().filter(|m| m.is_file()).map(|m| m.len()),
                n => Some(n),
            };
            let b = mp.add(weft_cli::progress::bytes_bar(len, &s.name));
            b.set_message("opening");
            b
        })
        .collect();
    let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
    while !run.is_finished() {
        for (b, s) in bars.iter().zip(run.sources()) {
            let c = &s.counters;
            b.set_position(ld(&c.bytes));
            b.set_message(match s.state() {
                SourceState::Opening => format!("waiting for a writer on {}", s.path.display()),
                _ => format!(
                    "{}{} events, {} spans{}",
                    match ld(&c.lines) {
                        0 => String::new(),
                        l => format!("{} lines, ", human(l)),
                    },
                    human(ld(&c.events)),
                    human(ld(&s.spans)),
                    match ld(&c.rejected) {
                        0 => String::new(),
                        r => format!(", {r} rejected"),
                    }
                ),
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for b in &bars {
        b.finish_and_clear();
    }
}

/// The sources that failed, as one error naming each.
pub fn source_errors(sources: &[SourceReport]) -> anyhow::Result<()> {
    let failed: Vec<String> =
        sources.iter().filter_map(|s| s.error.as_ref().map(|e| format!("source {}: {e}", s.name))).collect();
    anyhow::ensure!(failed.is_empty(), "{}", failed.join("; "));
    Ok(())
}

/// One line per sink: spans written, dropped, failed, requests, format losses, last error.
pub fn sink_lines(sinks: &[SinkReport]) -> Vec<String> {
    let mut lines = Vec::new();
    for s in sinks {
        let mut line = format!("sink {}: {} spans", s.name, human(s.spans));
        if s.dropped_spans > 0 {
            line += &format!(", {} dropped (backpressure)", human(s.dropped_spans));
        }
        if s.failed_spans > 0 {
            line += &format!(", {} failed", human(s.failed_spans));
        }
        if s.requests > 0 {
            line += &format!(", {} requests ({} retries)", s.requests, s.retries);
        }
        if !s.losses.is_empty() {
            line += &format!(", format losses: {}", s.losses);
        }
        if let Some(e) = &s.last_error {
            line += &format!(", last error: {e}");
        }
        lines.push(line);
    }
    lines
}

/// Spans into a data directory (weft's store), in appends of at most `chunk` spans.
pub struct StoreSink {
    store: Arc<Store>,
    chunk: usize,
}

impl StoreSink {
    /// A sink appending to `store`.
    pub fn new(store: Arc<Store>, chunk: usize) -> StoreSink {
        StoreSink { store, chunk: chunk.max(1) }
    }
}

impl SpanSink for StoreSink {
    fn write(&mut self, spans: &[Span]) -> Result<(), SinkError> {
        for c in spans.chunks(self.chunk) {
            append_retrying(|| self.store.append(c)).map_err(|e| SinkError::Write {
                sink: "data directory".into(),
                msg: format!("appending spans: {e}"),
            })?;
        }
        Ok(())
    }
    fn finish(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
}

/// The store refuses appends while its flush catches up: wait and retry.
pub fn append_retrying(mut f: impl FnMut() -> weft_store::Result<()>) -> weft_store::Result<()> {
    let mut wait = Duration::from_millis(5);
    loop {
        match f() {
            Err(StoreError::Overloaded { .. }) => {
                std::thread::sleep(wait);
                wait = (wait * 2).min(Duration::from_millis(500));
            }
            other => return other,
        }
    }
}
