//! `weft loadgen`: sends realistic spans to one OTLP/HTTP endpoint, or round-robin to several,
//! as fast as the servers take them (or at a set rate) and reports throughput, latency,
//! refusals — and, for weft servers, the spans they stored per second of their own CPU time
//! (read from their `/metrics` before and after), which is the "per core" ingest figure in the
//! README.
//!
//! Requests are prepared before the clock starts: a pool of distinct batches (realistic shop
//! traces from `weft_synth::shop`, encoded as OTLP protobuf or JSON, optionally gzipped) is
//! cycled until the requested number of spans has been sent, so the generator's own cost is a
//! loop of HTTP posts. With N endpoints the spans of N consecutive batches are dealt in turn
//! (span j of a run of traces to batch j mod N) and request i goes to endpoint i mod N, so the
//! spans of one trace reach different endpoints. Posts go through [`weft_weave::export`], the
//! client and retry policy of every weft sender: a batch that an endpoint fails (an answer
//! other than 2xx, 400, 413 or 415, or no answer) is sent again to the next endpoint, after the
//! pause the policy says (the `Retry-After` given, or jittered backoff) once every endpoint has
//! failed it in turn; a connection whose requests failed [`LOADGEN_RETRIES`]`.max_retries`
//! times in a row stops. A refused batch (400, 413, 415: the payload is at fault, every
//! endpoint would refuse it) is dropped. `--ack-log` records every acknowledged span.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use weft_model::codec::otlp;
use weft_model::{SpanId, TraceId};
use weft_synth::shop::Shop;
use weft_weave::export::{self, Client, ClientOptions, Jitter, Outcome, RetryPolicy, Rng};

/// Pauses after a request every endpoint failed in turn: 50 ms doubling to 1 s, or the
/// server's `Retry-After`; 20 failures in a row end the connection.
const LOADGEN_RETRIES: RetryPolicy = RetryPolicy {
    initial: Duration::from_millis(50),
    max_backoff: Duration::from_secs(1),
    max_retry_after: Duration::from_secs(30),
    max_retries: Some(20),
    jitter: Jitter::Equal,
};

/// Body encoding.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// OTLP protobuf (`application/x-protobuf`).
    Proto,
    /// OTLP/JSON (`application/json`).
    Json,
}

/// Arguments of `weft loadgen`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Base URL of an OTLP/HTTP receiver (`/v1/traces` is appended). Several (repeated or
    /// comma-separated) are sent to round-robin; a batch one of them fails goes to the next.
    #[arg(
        long = "endpoint",
        visible_alias = "url",
        value_name = "URL",
        value_delimiter = ',',
        default_value = "http://127.0.0.1:4318"
    )]
    pub endpoints: Vec<String>,
    /// Base URL of each server's query listener, whose `/metrics` gives the server's CPU per
    /// span: one per --endpoint, in the same order. Default: each endpoint's host on port 16686
    /// (weft serve's query listener).
    #[arg(long, value_name = "URL", value_delimiter = ',')]
    pub metrics_url: Vec<String>,
    /// Spans to send in total (rounded up to whole requests).
    #[arg(long, default_value_t = 1_000_000)]
    pub spans: u64,
    /// Spans per request (the OpenTelemetry SDKs' default batch is 512).
    #[arg(long, default_value_t = 512)]
    pub batch: usize,
    /// Concurrent connections (each to every endpoint).
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
    /// Body encoding.
    #[arg(long, value_enum, default_value = "proto")]
    pub encoding: Encoding,
    /// Gzip the bodies (as OTLP exporters do by default).
    #[arg(long)]
    pub gzip: bool,
    /// Target spans per second (0 = as fast as possible).
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// Distinct prepared batches cycled through (more = more distinct trace ids, more memory).
    /// Every span sent is distinct while --spans ≤ --pool × --batch.
    #[arg(long, default_value_t = 256)]
    pub pool: usize,
    /// Seed of the synthetic traffic.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write every acknowledged span to FILE once the run ends, a line each: trace id, span id
    /// (hex) and the endpoint that acknowledged it, separated by spaces. Spans of a request
    /// acknowledged with some spans rejected (OTLP partial success) are left out.
    #[arg(long, value_name = "FILE")]
    pub ack_log: Option<PathBuf>,
}

/// One prepared request.
struct Body {
    bytes: Vec<u8>,
    spans: u64,
    /// The spans' ids, kept for --ack-log only.
    ids: Vec<(TraceId, SpanId)>,
}

/// What one connection saw.
#[derive(Default)]
struct Tally {
    latencies_us: Vec<u32>,
    /// (request index into the pool, endpoint) of each request acknowledged with nothing rejected.
    acked: Vec<(usize, usize)>,
}

struct Scrape {
    cpu: f64,
    accepted: f64,
    rss: f64,
}

fn scrape(agent: &ureq::Agent, base: &str) -> Option<Scrape> {
    let mut r = agent.get(&format!("{base}/metrics")).call().ok()?;
    if r.status().as_u16() != 200 {
        return None;
    }
    let text = r.body_mut().read_to_string().ok()?;
    let mut s = Scrape { cpu: f64::NAN, accepted: 0.0, rss: f64::NAN };
    for l in text.lines() {
        let v = || l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
        if l.starts_with("process_cpu_seconds_total ") {
            s.cpu = v()?;
        } else if l.starts_with("weft_spans_accepted_total{") {
            s.accepted += v()?;
        } else if l.starts_with("process_resident_memory_bytes ") {
            s.rss = v()?;
        }
    }
    s.cpu.is_finite().then_some(s)
}

/// Runs the load generator.
pub fn run(args: Args) -> anyhow::Result<()> {
    if args.batch == 0 || args.connections == 0 || args.pool == 0 {
        bail!("--batch, --connections and --pool must be at least 1");
    }
    let bases: Vec<String> = args.endpoints.iter().map(|u| u.trim_end_matches('/').to_owned()).collect();
    if bases.is_empty() || bases.iter().any(String::is_empty) {
        bail!("--endpoint: give at least one URL (and no empty one in a comma-separated list)");
    }
    let ways = bases.len();
    let targets: Vec<String> = bases.iter().map(|b| export::traces_url(b)).collect();
    let metrics_bases: Vec<String> = match args.metrics_url.len() {
        0 => bases.iter().map(|b| weft_cli::query_url_near(b)).collect(),
        n if n == ways => args.metrics_url.iter().map(|u| u.trim_end_matches('/').to_owned()).collect(),
        n => bail!(
            "--metrics-url: {n} URL(s) for {ways} endpoint(s); give one per --endpoint, in the same order"
        ),
    };

    // Prepare the requests: `ways` batches at a time, dealt span by span from one run of
    // traces (with one endpoint, consecutive spans in one batch).
    let bar = weft_cli::progress::bytes_bar(None, "preparing");
    let now = weft_model::time::now_unix_nanos();
    let mut shop = Shop::new(args.seed, now - 600_000_000_000, 1_000_000);
    let mut bodies: Vec<Body> = Vec::with_capacity(args.pool);
    let mut raw_bytes = 0u64;
    let mut pending = Vec::new();
    let room = |made: usize| {
        made < args.pool && (made as u64) * (args.batch as u64) < args.spans.max(args.batch as u64)
    };
    while room(bodies.len()) {
        let run = args.batch * ways;
        while pending.len() < run {
            pending.extend(shop.trace());
        }
        let mut dealt: Vec<Vec<_>> = (0..ways).map(|_| Vec::with_capacity(args.batch)).collect();
        for (j, span) in pending.drain(..run).enumerate() {
            dealt[j % ways].push(span);
        }
        for batch in dealt {
            if !room(bodies.len()) {
                break;
            }
            let body = match args.encoding {
                Encoding::Proto => otlp::encode_proto(&batch),
                Encoding::Json => otlp::encode_json(&batch),
            };
            raw_bytes += body.len() as u64;
            let bytes = if args.gzip { export::gzip(&body) } else { body };
            bar.inc(bytes.len() as u64);
            let ids = match args.ack_log {
                Some(_) => batch.iter().map(|s| (s.trace_id, s.span_id)).collect(),
                None => Vec::new(),
            };
            bodies.push(Body { bytes, spans: batch.len() as u64, ids });
        }
    }
    bar.finish_and_clear();
    let avg_raw = raw_bytes as f64 / (bodies.iter().map(|b| b.spans).sum::<u64>().max(1)) as f64;

    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let before: Vec<_> = metrics_bases.iter().map(|m| scrape(&agent, m)).collect();
    let bodies = Arc::new(bodies);
    let sent_spans = Arc::new(AtomicU64::new(0));
    let rejected_spans = Arc::new(AtomicU64::new(0));
    let next = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]); // 429, 503, other
    let per_endpoint: Arc<Vec<[AtomicU64; 2]>> =
        Arc::new((0..ways).map(|_| [AtomicU64::new(0), AtomicU64::new(0)]).collect()); // spans acked, requests failed
    let tallies = Arc::new(parking_lot::Mutex::new(Vec::<Tally>::new()));
    // Every request is sent until an endpoint acknowledges it (or its connection gives up).
    let requests = args.spans.div_ceil(args.batch as u64);
    let bar = weft_cli::progress::count_bar(args.spans, "spans");
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..args.connections {
            let (bodies, sent, rejected_spans, next, refused, per_endpoint, tallies, bar) = (
                bodies.clone(),
                sent_spans.clone(),
                rejected_spans.clone(),
                next.clone(),
                refused.clone(),
                per_endpoint.clone(),
                tallies.clone(),
                bar.clone(),
            );
            let clients: Vec<Client> = bases
                .iter()
                .map(|base| {
                    Client::new(&ClientOptions {
                        timeout: Duration::from_secs(60),
                        encoding: match args.encoding {
                            Encoding::Proto => export::Encoding::Proto,
                            Encoding::Json => export::Encoding::Json,
                        },
                        ..ClientOptions::new(base)
                    })
                })
                .collect();
            let mut retries = LOADGEN_RETRIES.retries(Rng::from_time().next_u64());
            let (gz, rate) = (args.gzip, args.rate);
            s.spawn(move || {
                let mut mine = Tally::default();
                'requests: loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i as u64 >= requests {
                        break;
                    }
                    let body = &bodies[i % bodies.len()];
                    if rate > 0 {
                        // Pace: request i is due when i*batch spans fit the rate.
                        let due = Duration::from_secs_f64(sent.load(Ordering::Relaxed) as f64 / rate as f64);
                        if let Some(wait) = due.checked_sub(start.elapsed()) {
                            std::thread::sleep(wait);
                        }
                    }
                    // Endpoint i mod N first, then the next ones in turn until one takes it.
                    for attempt in 0.. {
                        let e = (i + attempt) % ways;
                        let t0 = Instant::now();
                        let outcome = clients[e].send(&body.bytes, gz);
                        mine.latencies_us.push(t0.elapsed().as_micros().min(u32::MAX as u128) as u32);
                        match outcome {
                            Outcome::Acked { rejected, .. } => {
                                retries.reset();
                                let acked = body.spans.saturating_sub(rejected);
                                sent.fetch_add(body.spans, Ordering::Relaxed);
                                rejected_spans.fetch_add(body.spans - acked, Ordering::Relaxed);
                                per_endpoint[e][0].fetch_add(acked, Ordering::Relaxed);
                                if rejected == 0 {
                                    mine.acked.push((i % bodies.len(), e));
                                }
                                bar.inc(body.spans);
                                break;
                            }
                            Outcome::Refused { .. } => {
                                // No pause (the payload is at fault, not the server), but a
                                // connection refused every time stops too.
                                refused[2].fetch_add(1, Ordering::Relaxed);
                                per_endpoint[e][1].fetch_add(1, Ordering::Relaxed);
                                if retries.next(None).is_none() {
                                    break 'requests;
                                }
                                break;
                            }
                            Outcome::Retry { status, after, .. } => {
                                let k = match status {
                                    Some(429) => 0,
                                    Some(503) => 1,
                                    _ => 2,
                                };
                                refused[k].fetch_add(1, Ordering::Relaxed);
                                per_endpoint[e][1].fetch_add(1, Ordering::Relaxed);
                                match retries.next(after) {
                                    // Every endpoint failed it in turn: pause before the next round.
                                    Some(pause) if (attempt + 1) % ways == 0 => std::thread::sleep(pause),
                                    Some(_) => {}
                                    None => break 'requests,
                                }
                            }
                        }
                    }
                }
                tallies.lock().push(mine);
            });
        }
    });
    let elapsed = start.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let after: Vec<_> = metrics_bases.iter().map(|m| scrape(&agent, m)).collect();
    let sent = sent_spans.load(Ordering::Relaxed);
    let tallies = std::mem::take(&mut *tallies.lock());
    if let Some(path) = &args.ack_log {
        write_ack_log(path, &bodies, &bases, &tallies)?;
    }
    if sent == 0 {
        bail!(
            "no request was accepted by {} ({} errors); is a server listening?",
            targets.join(", "),
            refused[2].load(Ordering::Relaxed)
        );
    }
    let mut l: Vec<u32> = tallies.into_iter().flat_map(|t| t.latencies_us).collect();
    l.sort_unstable();
    let pct =
        |p: f64| l.get(((l.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(0) as f64 / 1000.0;

    println!("weft loadgen → {}", targets.join(", "));
    println!(
        "  sent       {sent} spans in {:.2} s over {} connections, {} spans/request ({:?}{})",
        elapsed,
        args.connections,
        args.batch,
        args.encoding,
        if args.gzip { ", gzip" } else { "" }
    );
    let rejected = rejected_spans.load(Ordering::Relaxed);
    println!(
        "  rate       {:.0} spans/s acknowledged{}",
        sent as f64 / elapsed,
        if rejected > 0 { format!(" ({rejected} of them rejected as invalid)") } else { String::new() }
    );
    println!("  request    p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms", pct(0.5), pct(0.99), pct(1.0));
    println!("  payload    {avg_raw:.0} bytes/span uncompressed");
    println!(
        "  refused    {} × 429, {} × 503, {} other errors",
        refused[0].load(Ordering::Relaxed),
        refused[1].load(Ordering::Relaxed),
        refused[2].load(Ordering::Relaxed)
    );
    if ways > 1 {
        for (base, [acked, failed]) in bases.iter().zip(per_endpoint.iter()) {
            println!(
                "  endpoint   {base}: {} spans acknowledged, {} requests failed",
                acked.load(Ordering::Relaxed),
                failed.load(Ordering::Relaxed)
            );
        }
    }
    // Summed over the servers, when every one answered both times and none restarted between.
    let measured: Option<Vec<(Scrape, Scrape)>> = before
        .into_iter()
        .zip(after)
        .map(|(b, a)| match (b, a) {
            (Some(b), Some(a)) if a.cpu > b.cpu => Some((b, a)),
            _ => None,
        })
        .collect();
    match measured {
        Some(m) => {
            let cpu: f64 = m.iter().map(|(b, a)| a.cpu - b.cpu).sum();
            let stored: f64 = m.iter().map(|(b, a)| a.accepted - b.accepted).sum();
            let rss: f64 = m.iter().map(|(_, a)| a.rss).sum();
            println!(
                "  server     {stored:.0} spans stored using {cpu:.2} CPU-seconds = {:.0} spans/s per core; RSS {:.0} MiB",
                stored / cpu,
                rss / 1048576.0
            );
        }
        None => println!(
            "  server     (no weft /metrics at {}, or a server restarted: CPU per span not measured)",
            metrics_bases.join(", ")
        ),
    }
    Ok(())
}

/// `--ack-log`: a line per acknowledged span, `TRACE_ID SPAN_ID ENDPOINT`.
fn write_ack_log(
    path: &std::path::Path,
    bodies: &[Body],
    bases: &[String],
    tallies: &[Tally],
) -> anyhow::Result<()> {
    let write = || -> std::io::Result<()> {
        let mut w = std::io::BufWriter::new(std::fs::File::create(path)?);
        for &(b, e) in tallies.iter().flat_map(|t| &t.acked) {
            for (trace, span) in &bodies[b].ids {
                writeln!(w, "{trace} {span} {}", bases[e])?;
            }
        }
        w.into_inner().map_err(|e| e.into_error())?.sync_all()
    };
    write().with_context(|| format!("--ack-log {}", path.display()))
}
