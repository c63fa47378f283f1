//! Server counters and latency histograms, rendered with the store's figures as Prometheus
//! text (`GET /metrics`).

use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use weft_store::Store;

/// Where spans came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Receiver {
    /// OTLP/HTTP `POST /v1/traces`.
    OtlpHttp,
    /// OTLP/gRPC `TraceService/Export`.
    OtlpGrpc,
    /// Zipkin v2 `POST /api/v2/spans`.
    Zipkin,
    /// `weft serve --demo` traffic.
    Demo,
}

impl Receiver {
    /// All receivers, in label order.
    pub const ALL: [Receiver; 4] = [Receiver::OtlpHttp, Receiver::OtlpGrpc, Receiver::Zipkin, Receiver::Demo];
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Receiver::OtlpHttp => "otlp_http",
            Receiver::OtlpGrpc => "otlp_grpc",
            Receiver::Zipkin => "zipkin",
            Receiver::Demo => "demo",
        }
    }
    fn idx(self) -> usize {
        self as usize
    }
}

/// Which read API a query came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `POST /api/sql`.
    Sql,
    /// Zipkin v2 read API.
    Zipkin,
    /// Jaeger api_v3 and the Jaeger query service's HTTP JSON API.
    Jaeger,
    /// Anything added later (UI, control).
    Other,
}

impl Api {
    const ALL: [Api; 4] = [Api::Sql, Api::Zipkin, Api::Jaeger, Api::Other];
    fn as_str(self) -> &'static str {
        match self {
            Api::Sql => "sql",
            Api::Zipkin => "zipkin",
            Api::Jaeger => "jaeger",
            Api::Other => "other",
        }
    }
    fn idx(self) -> usize {
        self as usize
    }
}

/// Per-receiver ingest counters.
#[derive(Debug, Default)]
pub struct ReceiverCounters {
    /// Requests (or export calls) received.
    pub requests: AtomicU64,
    /// Spans stored (acknowledged).
    pub spans_accepted: AtomicU64,
    /// Spans refused as invalid (OTLP partial success).
    pub spans_rejected: AtomicU64,
    /// Requests refused as malformed (400: undecodable body, bad content type).
    pub requests_malformed: AtomicU64,
    /// Requests refused as too large (413).
    pub requests_too_large: AtomicU64,
    /// Requests whose body did not arrive within the body timeout (408).
    pub requests_timed_out: AtomicU64,
    /// Requests refused before decoding because too much was in flight (429).
    pub requests_throttled: AtomicU64,
    /// Spans decoded but dropped because the store was overloaded (503).
    pub spans_dropped_overload: AtomicU64,
    /// Spans decoded but not stored because of a store error (500).
    pub spans_dropped_error: AtomicU64,
}

const BUCKETS: [f64; 14] =
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// A fixed-bucket latency histogram.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_us: AtomicU64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        for (i, b) in BUCKETS.iter().enumerate() {
            if s <= *b {
                self.buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }
}

/// Connection counters of one listener.
#[derive(Debug, Default)]
pub struct ListenerCounters {
    /// Connections open now.
    pub open: AtomicU64,
    /// Connections closed at once because the listener had `max_connections` open.
    pub refused: AtomicU64,
}

/// The listeners' label values, in [`Metrics::listener`] order.
pub const LISTENERS: [&str; 4] = ["otlp_http", "otlp_grpc", "zipkin", "query"];

/// All server metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    receivers: [ReceiverCounters; 4],
    listeners: [Arc<ListenerCounters>; 4],
    queries: [Histogram; 4],
    query_errors: [AtomicU64; 4],
}

/// Times a query; records on drop.
pub struct QueryTimer<'a> {
    h: &'a Histogram,
    start: Instant,
}

impl Drop for QueryTimer<'_> {
    fn drop(&mut self) {
        self.h.observe(self.start.elapsed());
    }
}

impl Metrics {
    /// Counters of one receiver.
    pub fn receiver(&self, r: Receiver) -> &ReceiverCounters {
        &self.receivers[r.idx()]
    }
    /// Connection counters of listener `i` (see [`LISTENERS`]).
    pub fn listener(&self, i: usize) -> Arc<ListenerCounters> {
        self.listeners[i % LISTENERS.len()].clone()
    }
    /// Starts timing a query on `api`.
    pub fn time(&self, api: Api) -> QueryTimer<'_> {
        QueryTimer { h: &self.queries[api.idx()], start: Instant::now() }
    }
    /// Counts a failed query.
    pub fn query_error(&self, api: Api) {
        self.query_errors[api.idx()].fetch_add(1, Ordering::Relaxed);
    }

    /// Prometheus text exposition of the server's and the store's metrics.
    pub fn render(&self, store: &Store) -> String {
        let mut o = String::with_capacity(8 * 1024);
        let counter = |o: &mut String, name: &str, help: &str, f: &dyn Fn(&ReceiverCounters) -> u64| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} counter");
            for r in Receiver::ALL {
                let _ = writeln!(o, "{name}{{receiver=\"{}\"}} {}", r.as_str(), f(self.receiver(r)));
            }
        };
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        counter(&mut o, "weft_requests_total", "Ingest requests (export calls) received.", &|c| {
            l(&c.requests)
        });
        counter(&mut o, "weft_spans_accepted_total", "Spans stored and acknowledged.", &|c| {
            l(&c.spans_accepted)
        });
        counter(
            &mut o,
            "weft_spans_rejected_total",
            "Spans refused as invalid (OTLP partial success).",
            &|c| l(&c.spans_rejected),
        );
        counter(
            &mut o,
            "weft_requests_malformed_total",
            "Requests refused with 400 (undecodable body).",
            &|c| l(&c.requests_malformed),
        );
        counter(&mut o, "weft_requests_too_large_total", "Requests refused with 413.", &|c| {
            l(&c.requests_too_large)
        });
        counter(
            &mut o,
            "weft_requests_throttled_total",
            "Requests refused with 429 before decoding (too much in flight).",
            &|c| l(&c.requests_throttled),
        );
        counter(
            &mut o,
            "weft_requests_timed_out_total",
            "Requests refused with 408: the body did not arrive within --body-timeout.",
            &|c| l(&c.requests_timed_out),
        );
        let _ = writeln!(
            o,
            "# HELP weft_connections_open Connections open now.\n# TYPE weft_connections_open gauge"
        );
        for (name, c) in LISTENERS.iter().zip(&self.listeners) {
            let _ = writeln!(o, "weft_connections_open{{listener=\"{name}\"}} {}", l(&c.open));
        }
        let _ = writeln!(
            o,
            "# HELP weft_connections_refused_total Connections closed at once: the listener had --max-connections open.\n# TYPE weft_connections_refused_total counter"
        );
        for (name, c) in LISTENERS.iter().zip(&self.listeners) {
            let _ = writeln!(o, "weft_connections_refused_total{{listener=\"{name}\"}} {}", l(&c.refused));
        }
        let _ = writeln!(
            o,
            "# HELP weft_spans_dropped_total Spans decoded but not stored (reason: overloaded = 503, error = 500).\n# TYPE weft_spans_dropped_total counter"
        );
        for r in Receiver::ALL {
            let c = self.receiver(r);
            let _ = writeln!(
                o,
                "weft_spans_dropped_total{{receiver=\"{}\",reason=\"overloaded\"}} {}",
                r.as_str(),
                l(&c.spans_dropped_overload)
            );
            let _ = writeln!(
                o,
                "weft_spans_dropped_total{{receiver=\"{}\",reason=\"error\"}} {}",
                r.as_str(),
                l(&c.spans_dropped_error)
            );
        }

        let _ = writeln!(
            o,
            "# HELP weft_query_duration_seconds Read API latency.\n# TYPE weft_query_duration_seconds histogram"
        );
        for api in Api::ALL {
            let h = &self.queries[api.idx()];
            for (i, b) in BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    o,
                    "weft_query_duration_seconds_bucket{{api=\"{}\",le=\"{b}\"}} {}",
                    api.as_str(),
                    l(&h.buckets[i])
                );
            }
            let n = l(&h.count);
            let _ =
                writeln!(o, "weft_query_duration_seconds_bucket{{api=\"{}\",le=\"+Inf\"}} {n}", api.as_str());
            let _ = writeln!(
                o,
                "weft_query_duration_seconds_sum{{api=\"{}\"}} {}",
                api.as_str(),
                l(&h.sum_us) as f64 / 1e6
            );
            let _ = writeln!(o, "weft_query_duration_seconds_count{{api=\"{}\"}} {n}", api.as_str());
        }
        let _ = writeln!(
            o,
            "# HELP weft_query_errors_total Failed read API calls.\n# TYPE weft_query_errors_total counter"
        );
        for api in Api::ALL {
            let _ = writeln!(
                o,
                "weft_query_errors_total{{api=\"{}\"}} {}",
                api.as_str(),
                l(&self.query_errors[api.idx()])
            );
        }

        let m = store.metrics();
        let st = store.stats();
        let mut one = |name: &str, ty: &str, help: &str, v: u64| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {ty}\n{name} {v}");
        };
        one(
            "weft_store_spans_appended_total",
            "counter",
            "Spans appended to the store.",
            l(&m.spans_appended),
        );
        one(
            "weft_store_events_appended_total",
            "counter",
            "Raw events appended to the store.",
            l(&m.events_appended),
        );
        one(
            "weft_store_appends_overloaded_total",
            "counter",
            "Appends refused because the buffer was full.",
            l(&m.appends_overloaded),
        );
        one(
            "weft_wal_bytes_written_total",
            "counter",
            "Bytes written to the write-ahead log.",
            l(&m.wal_bytes_written),
        );
        one("weft_wal_bytes", "gauge", "Bytes in live write-ahead log files.", st.wal_bytes);
        one(
            "weft_wal_records_replayed_total",
            "counter",
            "WAL records replayed at start.",
            l(&m.wal_records_replayed),
        );
        one(
            "weft_wal_records_torn_total",
            "counter",
            "Torn or corrupt WAL records cut at start.",
            l(&m.wal_records_torn),
        );
        one(
            "weft_store_bucket_read_errors_total",
            "counter",
            "A read-only store over a bucket: collectors' manifests, prefixes or segment files it could not read (the rest is served).",
            l(&m.bucket_read_errors),
        );
        one(
            "weft_wal_records_quarantined_total",
            "counter",
            "Bad WAL records kept aside in quarantine/ and skipped at start.",
            l(&m.wal_records_quarantined),
        );
        one(
            "weft_wal_reopened_total",
            "counter",
            "Times the WAL went on in a new file after a failed write or fsync (a full disk), acknowledging again.",
            l(&m.wal_reopened),
        );
        one(
            "weft_store_appends_too_large_total",
            "counter",
            "Appends refused alone for exceeding the per-append limit (nothing written).",
            l(&m.appends_too_large),
        );
        one("weft_segments", "gauge", "Live Parquet segments.", st.segments as u64);
        one("weft_segment_bytes", "gauge", "Bytes of live segment files.", st.segment_bytes);
        one("weft_segment_spans", "gauge", "Spans in segments.", st.segment_spans);
        one(
            "weft_buffer_bytes",
            "gauge",
            "Bytes buffered in memory (not yet in segments).",
            st.buffer_bytes as u64,
        );
        one("weft_buffer_spans", "gauge", "Spans buffered in memory.", st.buffer_spans);
        one("weft_store_flushes_total", "counter", "Segments written by flushes.", l(&m.flushes));
        one("weft_store_flush_errors_total", "counter", "Failed flushes (retried).", l(&m.flush_errors));
        one("weft_store_compactions_total", "counter", "Compactions.", l(&m.compactions));
        one(
            "weft_store_spans_deduplicated_total",
            "counter",
            "Repeated spans (same ids and content, e.g. a client's retry) compactions dropped.",
            l(&m.spans_deduplicated),
        );
        one(
            "weft_store_retired_by_age_total",
            "counter",
            "Segments deleted by age retention.",
            l(&m.retired_by_age),
        );
        one(
            "weft_store_retired_by_size_total",
            "counter",
            "Segments deleted by size retention.",
            l(&m.retired_by_size),
        );
        one("weft_bloom_bytes", "gauge", "Memory of the trace-id bloom filters.", st.bloom_bytes as u64);
        let (cpu, rss) = process_usage();
        let _ = writeln!(
            o,
            "# HELP process_cpu_seconds_total User and system CPU time of the weft process.\n# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total {cpu}"
        );
        let _ = writeln!(
            o,
            "# HELP process_resident_memory_bytes Resident memory of the weft process.\n# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes {rss}"
        );
        o
    }
}

/// (CPU seconds used, resident bytes) of this process.
pub fn process_usage() -> (f64, u64) {
    // SAFETY: getrusage writes into the zeroed struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let cpu = if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } == 0 {
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        tv(ru.ru_utime) + tv(ru.ru_stime)
    } else {
        0.0
    };
    // Current RSS from /proc (Linux); 0 elsewhere.
    let rss = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()))
        .map(|pages| {
            // SAFETY: sysconf has no preconditions.
            let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
            pages * page.max(4096) as u64
        })
        .unwrap_or(0);
    (cpu, rss)
}
