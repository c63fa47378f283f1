//! `[[sink]]` tables: a file in any writable format, or OTLP/HTTP.

use weft_model::codec::stream::Format;

use super::raw::RawSink;
use super::{Reader, TopologyError};
use crate::sink::{Backpressure, HttpOptions, SinkSpec};

impl Reader<'_> {
    /// The sinks.
    pub(super) fn sinks(&self, raw: &[RawSink]) -> Result<Vec<SinkSpec>, TopologyError> {
        let mut sinks = Vec::new();
        for (i, s) in raw.iter().enumerate() {
            let key = |k: &str| format!("sink[{i}].{k}");
            let backpressure = match s.backpressure.as_deref() {
                None | Some("block") => Backpressure::Block,
                Some("drop") => Backpressure::Drop,
                Some(b) => {
                    return Err(
                        self.err(&key("backpressure"), format!("`{b}` is neither `block` nor `drop`"))
                    );
                }
            };
            let queue_batches = s.queue_batches.unwrap_or(4).max(1);
            match s.kind.as_str() {
                "file" => {
                    let path = self.resolve(
                        &key("path"),
                        s.path.as_deref().ok_or_else(|| self.err(&key("path"), "missing".into()))?,
                    )?;
                    let format = match &s.format {
                        Some(f) => Format::parse(f)
                            .ok_or_else(|| self.err(&key("format"), format!("unknown format `{f}`")))?,
                        None => Format::from_path(&path).ok_or_else(|| {
                            self.err(
                                &key("format"),
                                "missing, and the file name does not say it (e.g. x.otlp.json)".into(),
                            )
                        })?,
                    };
                    if !format.can_write() {
                        return Err(self.err(&key("format"), format!("weft cannot write {}", format.name())));
                    }
                    sinks.push(SinkSpec::File { path, format, backpressure, queue_batches });
                }
                "otlp-http" => {
                    let url = s.url.clone().ok_or_else(|| self.err(&key("url"), "missing".into()))?;
                    if !url.starts_with("http://") && !url.starts_with("https://") {
                        return Err(self.err(&key("url"), format!("`{url}` is not an http(s) URL")));
                    }
                    let d = HttpOptions::default();
                    sinks.push(SinkSpec::OtlpHttp(HttpOptions {
                        url,
                        batch_spans: s.batch_spans.unwrap_or(d.batch_spans).max(1),
                        max_retries: s.max_retries.unwrap_or(d.max_retries),
                        timeout_ms: s.timeout_ms.unwrap_or(d.timeout_ms),
                        backpressure,
                        queue_batches,
                    }));
                }
                k => return Err(self.err(&key("kind"), format!("unknown sink kind `{k}` (file, otlp-http)"))),
            }
        }
        Ok(sinks)
    }
}
