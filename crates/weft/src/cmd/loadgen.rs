//! `weft loadgen`: sends realistic spans to an OTLP/HTTP endpoint as fast as the server takes
//! them (or at a set rate) and reports throughput, latency, refusals — and, for a weft server,
//! the spans it stored per second of its own CPU time (read from its `/metrics` before and
//! after), which is the "per core" ingest figure in the README.
//!
//! Requests are prepared before the clock starts: a pool of distinct batches (realistic shop
//! traces from `weft_synth::shop`, encoded as OTLP protobuf or JSON, optionally gzipped) is
//! cycled until the requested number of spans has been sent, so the generator's own cost is a
//! loop of HTTP posts. Posts go through [`weft_weave::export`], the client and retry policy of
//! every weft sender: after an answer other than 2xx the connection pauses as the policy says
//! (the `Retry-After` given, or jittered backoff) and goes on with the next batch; a
//! connection whose requests all failed [`LOADGEN_RETRIES`]`.max_retries` times in a row stops.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;
use weft_model::codec::otlp;
use weft_synth::shop::Shop;
use weft_weave::export::{self, Client, ClientOptions, Jitter, Outcome, RetryPolicy, Rng};

/// Pauses after a failed request: 50 ms doubling to 1 s, or the server's `Retry-After`; 20
/// failures in a row end the connection.
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
    /// Base URL of an OTLP/HTTP receiver (`/v1/traces` is appended).
    #[arg(long, default_value = "http://127.0.0.1:4318")]
    pub url: String,
    /// Base URL of the server's query listener, whose `/metrics` gives the server's CPU per
    /// span. Default: the `--url` host on port 16686 (weft serve's query listener).
    #[arg(long)]
    pub metrics_url: Option<String>,
    /// Spans to send in total.
    #[arg(long, default_value_t = 1_000_000)]
    pub spans: u64,
    /// Spans per request (the OpenTelemetry SDKs' default batch is 512).
    #[arg(long, default_value_t = 512)]
    pub batch: usize,
    /// Concurrent connections.
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
    #[arg(long, default_value_t = 256)]
    pub pool: usize,
    /// Seed of the synthetic traffic.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
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
    let base = args.url.trim_end_matches('/').to_owned();
    let target = export::traces_url(&base);
    let metrics_base = match &args.metrics_url {
        Some(u) => u.trim_end_matches('/').to_owned(),
        None => weft_cli::query_url_near(&base),
    };

    // Prepare the requests.
    let bar = weft_cli::progress::bytes_bar(None, "preparing");
    let now = weft_model::time::now_unix_nanos();
    let mut shop = Shop::new(args.seed, now - 600_000_000_000, 1_000_000);
    let mut bodies: Vec<(Vec<u8>, u64)> = Vec::with_capacity(args.pool);
    let mut raw_bytes = 0u64;
    let mut pending = Vec::new();
    while bodies.len() < args.pool
        && (bodies.len() as u64) * (args.batch as u64) < args.spans.max(args.batch as u64)
    {
        while pending.len() < args.batch {
            pending.extend(shop.trace());
        }
        let batch: Vec<_> = pending.drain(..args.batch).collect();
        let body = match args.encoding {
            Encoding::Proto => otlp::encode_proto(&batch),
            Encoding::Json => otlp::encode_json(&batch),
        };
        raw_bytes += body.len() as u64;
        let body = if args.gzip { export::gzip(&body) } else { body };
        bar.inc(body.len() as u64);
        bodies.push((body, batch.len() as u64));
    }
    bar.finish_and_clear();
    let avg_raw = raw_bytes as f64 / (bodies.iter().map(|b| b.1).sum::<u64>().max(1)) as f64;

    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let before = scrape(&agent, &metrics_base);
    let bodies = Arc::new(bodies);
    let sent_spans = Arc::new(AtomicU64::new(0));
    let next = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]); // 429, 503, other
    let lat = Arc::new(parking_lot::Mutex::new(Vec::<u32>::new()));
    let bar = weft_cli::progress::count_bar(args.spans, "spans");
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..args.connections {
            let (bodies, sent, next, refused, lat, bar) =
                (bodies.clone(), sent_spans.clone(), next.clone(), refused.clone(), lat.clone(), bar.clone());
            let client = Client::new(&ClientOptions {
                timeout: Duration::from_secs(60),
                encoding: match args.encoding {
                    Encoding::Proto => export::Encoding::Proto,
                    Encoding::Json => export::Encoding::Json,
                },
                ..ClientOptions::new(&base)
            });
            let mut retries = LOADGEN_RETRIES.retries(Rng::from_time().next_u64());
            let (gz, rate, total) = (args.gzip, args.rate, args.spans);
            s.spawn(move || {
                let mut my_lat = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let (body, n) = &bodies[i % bodies.len()];
                    if sent.load(Ordering::Relaxed) >= total {
                        break;
                    }
                    if rate > 0 {
                        // Pace: request i is due when i*batch spans fit the rate.
                        let due = Duration::from_secs_f64(sent.load(Ordering::Relaxed) as f64 / rate as f64);
                        if let Some(wait) = due.checked_sub(start.elapsed()) {
                            std::thread::sleep(wait);
                        }
                    }
                    let t0 = Instant::now();
                    let outcome = client.send(body, gz);
                    my_lat.push(t0.elapsed().as_micros().min(u32::MAX as u128) as u32);
                    match outcome {
                        Outcome::Acked { .. } => {
                            retries.reset();
                            sent.fetch_add(*n, Ordering::Relaxed);
                            bar.inc(*n);
                        }
                        Outcome::Refused { .. } => {
                            // No pause (the payload is at fault, not the server), but a
                            // connection refused every time stops too.
                            refused[2].fetch_add(1, Ordering::Relaxed);
                            if retries.next(None).is_none() {
                                break;
                            }
                        }
                        Outcome::Retry { status, after, .. } => {
                            let k = match status {
                                Some(429) => 0,
                                Some(503) => 1,
                                _ => 2,
                            };
                            refused[k].fetch_add(1, Ordering::Relaxed);
                            match retries.next(after) {
                                Some(pause) => std::thread::sleep(pause),
                                None => break,
                            }
                        }
                    }
                }
                lat.lock().extend(my_lat);
            });
        }
    });
    let elapsed = start.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let after = scrape(&agent, &metrics_base);
    let sent = sent_spans.load(Ordering::Relaxed);
    if sent == 0 {
        bail!(
            "no request was accepted by {target} ({} errors); is a server listening?",
            refused[2].load(Ordering::Relaxed)
        );
    }
    let mut l = std::mem::take(&mut *lat.lock());
    l.sort_unstable();
    let pct =
        |p: f64| l.get(((l.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(0) as f64 / 1000.0;

    println!("weft loadgen → {target}");
    println!(
        "  sent       {sent} spans in {:.2} s over {} connections, {} spans/request ({:?}{})",
        elapsed,
        args.connections,
        args.batch,
        args.encoding,
        if args.gzip { ", gzip" } else { "" }
    );
    println!("  rate       {:.0} spans/s acknowledged", sent as f64 / elapsed);
    println!("  request    p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms", pct(0.5), pct(0.99), pct(1.0));
    println!("  payload    {avg_raw:.0} bytes/span uncompressed");
    println!(
        "  refused    {} × 429, {} × 503, {} other errors",
        refused[0].load(Ordering::Relaxed),
        refused[1].load(Ordering::Relaxed),
        refused[2].load(Ordering::Relaxed)
    );
    match (before, after) {
        (Some(b), Some(a)) if a.cpu > b.cpu => {
            let cpu = a.cpu - b.cpu;
            let stored = a.accepted - b.accepted;
            println!(
                "  server     {stored:.0} spans stored using {cpu:.2} CPU-seconds = {:.0} spans/s per core; RSS {:.0} MiB",
                stored / cpu,
                a.rss / 1048576.0
            );
        }
        _ => println!("  server     (no weft /metrics at {metrics_base}: CPU per span not measured)"),
    }
    Ok(())
}
