//! Span sinks: trace files (any format weft writes, streamed through
//! [`weft_model::codec::stream`] writers), OTLP/HTTP to any collector, memory, and a caller's
//! own [`SpanSink`] ([`SinkSpec::Custom`]: the `weft` binary's data-directory sink, ...).
//!
//! Each sink runs on its own thread behind a bounded queue of span batches (an OTLP protobuf
//! file sink also has up to 4 encoder threads: batches are encoded in parallel and written in
//! order). What happens when a sink falls behind is its [`Backpressure`]: `Block` stalls the
//! weave (and through the merge and the sources' bounded channels, the readers — a simulator
//! writing a FIFO then blocks on its writes), `Drop` discards the batch and counts the spans.
//!
//! The OTLP/HTTP sink posts OTLP protobuf (`application/x-protobuf`) in batches of
//! `batch_spans` through [`crate::export`]'s client and retry policy: a batch answered 400, 413
//! or 415 is given up at once, anything else but a 2xx (connection failures and timeouts
//! included) is retried with jittered exponential backoff or after the `Retry-After` given, at
//! most `max_retries` times. A batch it gives up on is counted in
//! [`SinkReport::failed_spans`] with the last error, and the sink goes on.

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, TrySendError, bounded};
use weft_model::Span;
use weft_model::codec::Losses;
use weft_model::codec::stream::{Format, SpanWriter, WriterOptions, writer};

use crate::export::{Client, ClientOptions, Outcome, Retries, RetryPolicy, Rng};

/// What a full sink queue does to the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backpressure {
    /// Wait (the pipeline slows down to the sink's pace).
    #[default]
    Block,
    /// Discard the batch and count its spans.
    Drop,
}

/// Options of the OTLP/HTTP sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpOptions {
    /// `http://host:port/v1/traces`.
    pub url: String,
    /// Spans per request.
    pub batch_spans: usize,
    /// Retries per batch.
    pub max_retries: u32,
    /// Per-request timeout.
    pub timeout_ms: u64,
    /// What a full queue does.
    pub backpressure: Backpressure,
    /// Batches queued before backpressure applies.
    pub queue_batches: usize,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            url: String::new(),
            batch_spans: 512,
            max_retries: 5,
            timeout_ms: 10_000,
            backpressure: Backpressure::Block,
            queue_batches: 4,
        }
    }
}

/// Spans kept in memory (tests, library callers).
#[derive(Debug, Clone, Default)]
pub struct MemorySink(Arc<Mutex<Vec<Span>>>);

impl MemorySink {
    /// An empty memory sink.
    pub fn new() -> Self {
        Self::default()
    }
    /// The spans received so far (in arrival order).
    pub fn spans(&self) -> Vec<Span> {
        self.0.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

/// A caller's span sink, run on a sink thread like the others ([`SinkSpec::Custom`]).
pub trait SpanSink: Send {
    /// Takes one batch. An error ends the sink (the run's report carries it; later batches
    /// are counted as dropped).
    fn write(&mut self, spans: &[Span]) -> Result<(), SinkError>;
    /// End of the run: flush.
    fn finish(&mut self) -> Result<(), SinkError>;
}

type SharedSink = Arc<Mutex<Option<Box<dyn SpanSink>>>>;

/// A [`SpanSink`] with its name; one sink thread runs it (a clone of the spec shares it: only
/// the first start gets it).
#[derive(Clone)]
pub struct CustomSink {
    name: String,
    sink: SharedSink,
}

impl CustomSink {
    /// `sink`, shown as `name` in reports.
    pub fn new(name: impl Into<String>, sink: impl SpanSink + 'static) -> CustomSink {
        CustomSink { name: name.into(), sink: Arc::new(Mutex::new(Some(Box::new(sink)))) }
    }
}

impl std::fmt::Debug for CustomSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CustomSink").field("name", &self.name).finish()
    }
}

/// Where spans go.
#[derive(Debug, Clone)]
pub enum SinkSpec {
    /// A trace file.
    File {
        /// Output path.
        path: PathBuf,
        /// Format.
        format: Format,
        /// What a full queue does.
        backpressure: Backpressure,
        /// Batches queued.
        queue_batches: usize,
    },
    /// OTLP/HTTP.
    OtlpHttp(HttpOptions),
    /// Memory.
    Memory(MemorySink),
    /// A caller's sink (always blocks when its queue is full).
    Custom(CustomSink),
}

impl SinkSpec {
    /// A short description (`file out.otlp.json (otlp-json)`).
    pub fn describe(&self) -> String {
        match self {
            SinkSpec::File { path, format, .. } => format!("file {} ({})", path.display(), format.cli_name()),
            SinkSpec::OtlpHttp(o) => format!("otlp-http {}", o.url),
            SinkSpec::Memory(_) => "memory".into(),
            SinkSpec::Custom(c) => c.name.clone(),
        }
    }
}

/// A sink that failed as a whole (could not create its file, ...).
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// I/O on a file sink.
    #[error("{path}: {op}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// Encoding or writing spans failed.
    #[error("{sink}: {msg}")]
    Write {
        /// The sink.
        sink: String,
        /// What failed.
        msg: String,
    },
}

/// What a sink did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SinkReport {
    /// The sink.
    pub name: String,
    /// Spans written (files, memory) or accepted (HTTP 2xx).
    pub spans: u64,
    /// Spans discarded because the sink's queue was full (`backpressure = "drop"`).
    pub dropped_spans: u64,
    /// Spans of batches the HTTP sink gave up on (refused, or retries spent).
    pub failed_spans: u64,
    /// HTTP requests made (including retries).
    pub requests: u64,
    /// HTTP retries.
    pub retries: u64,
    /// The last error, if any.
    pub last_error: Option<String>,
    /// What the file format could not carry.
    pub losses: Losses,
}

type Batch = Arc<Vec<Span>>;

/// A running sink: its queue and thread.
pub struct SinkHandle {
    name: String,
    tx: Option<Sender<Batch>>,
    backpressure: Backpressure,
    dropped: Arc<AtomicU64>,
    thread: Option<JoinHandle<Result<SinkReport, SinkError>>>,
}

impl SinkHandle {
    /// Starts the sink's thread (files are created here, so errors surface at once).
    pub fn start(spec: SinkSpec) -> Result<SinkHandle, SinkError> {
        let name = spec.describe();
        let (backpressure, cap) = match &spec {
            SinkSpec::File { backpressure, queue_batches, .. } => (*backpressure, *queue_batches),
            SinkSpec::OtlpHttp(o) => (o.backpressure, o.queue_batches),
            SinkSpec::Memory(_) => (Backpressure::Block, 16),
            SinkSpec::Custom(_) => (Backpressure::Block, 4),
        };
        let (tx, rx) = bounded::<Batch>(cap.max(1));
        let thread = match spec {
            SinkSpec::File { path, format, .. } => {
                let f = File::create(&path).map_err(|e| SinkError::Io {
                    path: path.clone(),
                    op: "create",
                    source: e,
                })?;
                let n = name.clone();
                std::thread::Builder::new()
                    .name("weft-sink-file".into())
                    .spawn(move || {
                        let out = BufWriter::with_capacity(1 << 20, f);
                        let encoders = std::thread::available_parallelism().map_or(1, |n| n.get()).min(4);
                        if format == Format::OtlpProto && encoders > 1 {
                            return run_file_otlp_proto(n, out, rx, encoders);
                        }
                        let w = writer(format, out, WriterOptions::default())
                            .map_err(|e| SinkError::Write { sink: n.clone(), msg: e.to_string() })?;
                        run_file(n, w, rx)
                    })
                    .map_err(|e| SinkError::Io { path, op: "spawn sink thread", source: e })?
            }
            SinkSpec::OtlpHttp(o) => {
                let n = name.clone();
                std::thread::Builder::new()
                    .name("weft-sink-http".into())
                    .spawn(move || Ok(run_http(n, o, rx)))
                    .map_err(|e| SinkError::Io {
                        path: PathBuf::from("(otlp-http)"),
                        op: "spawn sink thread",
                        source: e,
                    })?
            }
            SinkSpec::Memory(m) => {
                let n = name.clone();
                std::thread::Builder::new()
                    .name("weft-sink-mem".into())
                    .spawn(move || {
                        let mut spans = 0;
                        for b in rx {
                            spans += b.len() as u64;
                            if let Ok(mut v) = m.0.lock() {
                                v.extend(b.iter().cloned());
                            }
                        }
                        Ok(SinkReport { name: n, spans, ..SinkReport::default() })
                    })
                    .map_err(|e| SinkError::Io {
                        path: PathBuf::from("(memory)"),
                        op: "spawn sink thread",
                        source: e,
                    })?
            }
            SinkSpec::Custom(c) => {
                let taken = c.sink.lock().ok().and_then(|mut s| s.take());
                let mut sink = taken
                    .ok_or_else(|| SinkError::Write { sink: name.clone(), msg: "started twice".into() })?;
                let n = name.clone();
                std::thread::Builder::new()
                    .name("weft-sink-custom".into())
                    .spawn(move || {
                        let mut spans = 0;
                        for b in rx {
                            sink.write(&b)?;
                            spans += b.len() as u64;
                        }
                        sink.finish()?;
                        Ok(SinkReport { name: n, spans, ..SinkReport::default() })
                    })
                    .map_err(|e| SinkError::Io {
                        path: PathBuf::from(&c.name),
                        op: "spawn sink thread",
                        source: e,
                    })?
            }
        };
        Ok(SinkHandle { name, tx: Some(tx), backpressure, dropped: Arc::default(), thread: Some(thread) })
    }

    /// Hands a batch to the sink (blocking or dropping per its backpressure).
    pub fn send(&self, batch: &Batch) {
        let Some(tx) = &self.tx else { return };
        match self.backpressure {
            Backpressure::Block => {
                if tx.send(batch.clone()).is_err() {
                    // The sink thread ended with an error; its report says why.
                    self.dropped.fetch_add(batch.len() as u64, Ordering::Relaxed);
                }
            }
            Backpressure::Drop => match tx.try_send(batch.clone()) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                    self.dropped.fetch_add(batch.len() as u64, Ordering::Relaxed);
                }
            },
        }
    }

    /// Spans dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Closes the queue and waits for the sink to finish.
    pub fn finish(mut self) -> Result<SinkReport, SinkError> {
        self.tx = None;
        let dropped = self.dropped();
        let r = match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) | None => {
                Err(SinkError::Write { sink: self.name.clone(), msg: "sink thread panicked".into() })
            }
        };
        r.map(|mut rep| {
            rep.dropped_spans += dropped;
            rep
        })
    }
}

fn run_file(
    name: String,
    mut w: Box<dyn SpanWriter + '_>,
    rx: Receiver<Batch>,
) -> Result<SinkReport, SinkError> {
    let mut spans = 0u64;
    let werr = |e: weft_model::codec::CodecError| SinkError::Write { sink: name.clone(), msg: e.to_string() };
    for b in rx {
        w.write(&b).map_err(werr)?;
        spans += b.len() as u64;
    }
    let losses = w.finish().map_err(werr)?;
    Ok(SinkReport { name, spans, losses, ..SinkReport::default() })
}

/// An OTLP protobuf file written by `encoders` threads: the format is a concatenation of
/// independently encoded requests (one per batch), so batches are encoded in parallel and
/// written in arrival order — the bytes are those one thread would write. Encoding is the
/// sink's whole cost, and one thread of it cannot keep up with several sources.
fn run_file_otlp_proto(
    name: String,
    mut out: BufWriter<File>,
    rx: Receiver<Batch>,
    encoders: usize,
) -> Result<SinkReport, SinkError> {
    use std::io::Write;
    let werr = |e: std::io::Error| SinkError::Write { sink: name.clone(), msg: e.to_string() };
    let mut spans = 0u64;
    std::thread::scope(|scope| -> Result<(), SinkError> {
        let (jobs, jobs_rx) = bounded::<(Batch, Sender<Vec<u8>>)>(encoders);
        for k in 0..encoders {
            let jobs_rx = jobs_rx.clone();
            std::thread::Builder::new()
                .name(format!("weft-sink-enc{k}"))
                .spawn_scoped(scope, move || {
                    for (b, done) in jobs_rx {
                        // The writer may have stopped on an error: nothing to do then.
                        let _ = done.send(weft_model::codec::otlp::encode_proto(&b));
                    }
                })
                .map_err(|e| SinkError::Write { sink: name.clone(), msg: format!("spawn encoder: {e}") })?;
        }
        drop(jobs_rx);
        // Encoded batches in arrival order; at most 2 per encoder in flight (bounded memory).
        let mut pending: std::collections::VecDeque<Receiver<Vec<u8>>> = std::collections::VecDeque::new();
        let mut write_next =
            |pending: &mut std::collections::VecDeque<Receiver<Vec<u8>>>| -> Result<(), SinkError> {
                if let Some(r) = pending.pop_front() {
                    let bytes = r.recv().map_err(|_| SinkError::Write {
                        sink: name.clone(),
                        msg: "an encoder thread ended".into(),
                    })?;
                    out.write_all(&bytes).map_err(werr)?;
                }
                Ok(())
            };
        for b in rx {
            spans += b.len() as u64;
            let (done, r) = bounded(1);
            if jobs.send((b, done)).is_err() {
                return Err(SinkError::Write { sink: name.clone(), msg: "the encoder threads ended".into() });
            }
            pending.push_back(r);
            while pending.len() > 2 * encoders {
                write_next(&mut pending)?;
            }
        }
        drop(jobs);
        while !pending.is_empty() {
            write_next(&mut pending)?;
        }
        Ok(())
    })?;
    out.flush().map_err(werr)?;
    Ok(SinkReport { name, spans, ..SinkReport::default() })
}

fn run_http(name: String, o: HttpOptions, rx: Receiver<Batch>) -> SinkReport {
    let client = Client::new(&ClientOptions {
        timeout: Duration::from_millis(o.timeout_ms.max(1)),
        ..ClientOptions::new(&o.url)
    });
    let mut retries = RetryPolicy { max_retries: Some(o.max_retries), ..RetryPolicy::default() }
        .retries(Rng::from_time().next_u64());
    let mut rep = SinkReport { name, ..SinkReport::default() };
    let mut pending: Vec<Span> = Vec::new();
    for b in rx {
        pending.extend(b.iter().cloned());
        while pending.len() >= o.batch_spans {
            let rest = pending.split_off(o.batch_spans);
            let batch = std::mem::replace(&mut pending, rest);
            post(&client, &mut retries, &batch, &mut rep);
        }
    }
    if !pending.is_empty() {
        post(&client, &mut retries, &pending, &mut rep);
    }
    rep
}

fn post(client: &Client, retries: &mut Retries, spans: &[Span], rep: &mut SinkReport) {
    let body = client.encode(spans);
    let d = client.deliver(&body, client.gzip(), retries, std::thread::sleep);
    rep.requests += d.requests as u64;
    rep.retries += d.requests.saturating_sub(1) as u64;
    retries.reset();
    let err = match d.outcome {
        Outcome::Acked { .. } => {
            rep.spans += spans.len() as u64;
            return;
        }
        Outcome::Refused { status, message } => {
            format!("{} refused the spans: HTTP {status}: {message}", client.url())
        }
        Outcome::Retry { reason, .. } => reason,
    };
    tracing::warn!("OTLP/HTTP sink gives up on {} spans: {err}", spans.len());
    rep.failed_spans += spans.len() as u64;
    rep.last_error = Some(err);
}
