//! The OTLP/HTTP exporter every weft sender uses (the weave's OTLP sink, the agent's shipping,
//! `weft import --server`, `weft loadgen`): one client and one retry policy.
//!
//! [`Client`] posts OTLP payloads (protobuf, or JSON for `loadgen`) to `…/v1/traces`
//! ([`traces_url`] appends the path to a bare endpoint), gzip-compressed when asked, with a
//! per-request timeout. [`Client::send`] makes one attempt and says what it came to
//! ([`Outcome`]); [`Client::deliver`] repeats it under a [`RetryPolicy`].
//!
//! | answer | [`Outcome`] |
//! |---|---|
//! | 2xx | `Acked`, with the spans the receiver refused as invalid (OTLP partial success) |
//! | 400, 413, 415 | `Refused`: the payload itself can never be accepted — given up and counted |
//! | 429, 502, 503, 504 (the OTLP specification's retryable answers), connection errors, timeouts | `Retry`, after the `Retry-After` given (seconds or an HTTP-date, capped) or the backoff |
//! | any other status (401, 403, 404, 405, 408, 500, …) | `Retry` with backoff too |
//!
//! The last row departs from the OTLP specification, which says not to retry those: they
//! are a misconfigured endpoint or token, a proxy in the way, a failing server — states an
//! operator fixes while the data waits — not a property of the payload. The agent's spool
//! keeps a batch until a 2xx; dropping it on a 401 would lose spans weft already promised to
//! keep. Senders with bounded retries (the sink, `import`, `loadgen`) give up after theirs.
//!
//! No weft sender speaks OTLP/gRPC, so there is no gRPC status classification here.
//!
//! The backoff doubles from [`RetryPolicy::initial`] up to [`RetryPolicy::max_backoff`], with
//! [`Jitter`] from a small seeded generator ([`Rng`]) so that senders that failed together do
//! not come back together.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prost::Message;
use weft_model::Span;
use weft_model::codec::otlp::{self, RpcStatus, proto};

/// The request header with which a sender asks a weft collector to acknowledge only once the
/// spans are fsynced (value [`ACK_FSYNC`]); the collector's answer carries it when it did.
pub const ACK_HEADER: &str = "weft-ack";
/// The value of [`ACK_HEADER`].
pub const ACK_FSYNC: &str = "fsync";

/// The OTLP/HTTP traces path.
pub const TRACES_PATH: &str = "/v1/traces";

/// `endpoint` as the URL posted to: a bare `http://host:port` (with or without a trailing
/// slash) gets [`TRACES_PATH`]; a URL already ending in it stays as it is.
pub fn traces_url(endpoint: &str) -> String {
    let e = endpoint.trim_end_matches('/');
    if e.ends_with(TRACES_PATH) { e.to_string() } else { format!("{e}{TRACES_PATH}") }
}

/// `raw` gzip-compressed (fast level, as OTLP exporters do).
pub fn gzip(raw: &[u8]) -> Vec<u8> {
    let mut gz =
        flate2::write::GzEncoder::new(Vec::with_capacity(raw.len() / 4 + 64), flate2::Compression::fast());
    if gz.write_all(raw).is_err() {
        return Vec::new();
    }
    gz.finish().unwrap_or_default()
}

/// Body encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Encoding {
    /// OTLP protobuf (`application/x-protobuf`).
    #[default]
    Proto,
    /// OTLP/JSON (`application/json`).
    Json,
}

impl Encoding {
    fn content_type(self) -> &'static str {
        match self {
            Encoding::Proto => "application/x-protobuf",
            Encoding::Json => "application/json",
        }
    }
}

/// How a [`Client`] connects and what it sends.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// `http://host:port` of an OTLP/HTTP receiver, or the full `…/v1/traces` URL.
    pub endpoint: String,
    /// Whole-request timeout.
    pub timeout: Duration,
    /// Connect timeout (`None`: within `timeout`).
    pub connect_timeout: Option<Duration>,
    /// [`Client::encode`] gzips what it encodes.
    pub gzip: bool,
    /// Body encoding (its `Content-Type`).
    pub encoding: Encoding,
    /// Ask for an acknowledgement only once the spans are fsynced ([`ACK_HEADER`]): for a
    /// sender that deletes its copy when acknowledged.
    pub ack_after_fsync: bool,
}

impl ClientOptions {
    /// Protobuf, uncompressed, 10 s timeout.
    pub fn new(endpoint: impl Into<String>) -> ClientOptions {
        ClientOptions {
            endpoint: endpoint.into(),
            timeout: Duration::from_secs(10),
            connect_timeout: None,
            gzip: false,
            encoding: Encoding::Proto,
            ack_after_fsync: false,
        }
    }
}

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Stored (2xx); `rejected` spans were refused as invalid (OTLP partial success).
    Acked {
        /// Spans the receiver refused as invalid.
        rejected: u64,
        /// The receiver confirmed (by [`ACK_HEADER`]) that it fsynced the spans before answering.
        fsynced: bool,
    },
    /// 400, 413 or 415: this payload can never be accepted.
    Refused {
        /// The HTTP status.
        status: u16,
        /// What the receiver said.
        message: String,
    },
    /// Try again, after `after` when the receiver said how long (else the backoff).
    Retry {
        /// The HTTP status, `None` for connection errors and timeouts.
        status: Option<u16>,
        /// What went wrong.
        reason: String,
        /// The receiver's `Retry-After`.
        after: Option<Duration>,
    },
}

/// An OTLP/HTTP client.
pub struct Client {
    agent: ureq::Agent,
    url: String,
    gzip: bool,
    encoding: Encoding,
    ack_after_fsync: bool,
}

/// Longest error body read from a receiver.
const ERROR_BODY_LIMIT: u64 = 1 << 20;

impl Client {
    /// A client for `o.endpoint` (no connection is made yet).
    pub fn new(o: &ClientOptions) -> Client {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(o.timeout.max(Duration::from_millis(1))))
            .timeout_connect(o.connect_timeout)
            .build()
            .into();
        Client {
            agent,
            url: traces_url(&o.endpoint),
            gzip: o.gzip,
            encoding: o.encoding,
            ack_after_fsync: o.ack_after_fsync,
        }
    }

    /// The URL posted to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Whether [`Client::encode`] compresses.
    pub fn gzip(&self) -> bool {
        self.gzip
    }

    /// `spans` as the body this client posts (OTLP protobuf or JSON, gzipped when configured).
    pub fn encode(&self, spans: &[Span]) -> Vec<u8> {
        let raw = match self.encoding {
            Encoding::Proto => otlp::encode_proto(spans),
            Encoding::Json => otlp::encode_json(spans),
        };
        if self.gzip { gzip(&raw) } else { raw }
    }

    /// Posts `body` once (`gzipped`: it is gzip-compressed) and classifies the answer.
    pub fn send(&self, body: &[u8], gzipped: bool) -> Outcome {
        let mut req = self.agent.post(&self.url).header("Content-Type", self.encoding.content_type());
        if gzipped {
            req = req.header("Content-Encoding", "gzip");
        }
        if self.ack_after_fsync {
            req = req.header(ACK_HEADER, ACK_FSYNC);
        }
        let mut resp = match req.send(body) {
            Ok(r) => r,
            Err(e) => {
                return Outcome::Retry { status: None, reason: format!("{}: {e}", self.url), after: None };
            }
        };
        let status = resp.status().as_u16();
        let after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, SystemTime::now()));
        let fsynced = resp
            .headers()
            .get(ACK_HEADER)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(ACK_FSYNC.as_bytes()));
        let answer = resp.body_mut().with_config().limit(ERROR_BODY_LIMIT).read_to_vec().unwrap_or_default();
        if (200..300).contains(&status) {
            let rejected = match self.encoding {
                Encoding::Proto => proto::ExportTraceServiceResponse::decode(&answer[..])
                    .ok()
                    .and_then(|r| r.partial_success)
                    .map_or(0, |p| p.rejected_spans.max(0) as u64),
                Encoding::Json => 0,
            };
            return Outcome::Acked { rejected, fsynced };
        }
        let message = RpcStatus::message_of(&answer);
        if RetryPolicy::refuses(status) {
            return Outcome::Refused { status, message };
        }
        Outcome::Retry {
            status: Some(status),
            reason: format!("{} answered HTTP {status}: {message}", self.url),
            after,
        }
    }

    /// Posts `body` until it is acknowledged or refused, or `retries` gives up; `pause` waits
    /// between attempts (a sleep, or a wait that also watches for shutdown).
    pub fn deliver(
        &self,
        body: &[u8],
        gzipped: bool,
        retries: &mut Retries,
        mut pause: impl FnMut(Duration),
    ) -> Delivered {
        let mut requests = 0;
        loop {
            requests += 1;
            let outcome = self.send(body, gzipped);
            let Outcome::Retry { after, .. } = &outcome else {
                return Delivered { outcome, requests };
            };
            match retries.next(*after) {
                Some(d) => pause(d),
                None => return Delivered { outcome, requests },
            }
        }
    }
}

/// What [`Client::deliver`] came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    /// The last attempt's outcome (`Retry` when the policy gave up).
    pub outcome: Outcome,
    /// Requests made.
    pub requests: u32,
}

/// How the pause before a retry is spread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Jitter {
    /// Uniform in `[0, backoff]`.
    Full,
    /// Uniform in `[backoff / 2, backoff]` (never less than half the backoff).
    #[default]
    Equal,
}

/// When and how often to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The backoff of the first retry; it doubles with each further one.
    pub initial: Duration,
    /// The longest backoff.
    pub max_backoff: Duration,
    /// The longest wait a receiver's `Retry-After` can impose.
    pub max_retry_after: Duration,
    /// Retries of one payload before giving up (`None`: never give up).
    pub max_retries: Option<u32>,
    /// How the backoff is spread.
    pub jitter: Jitter,
}

impl Default for RetryPolicy {
    /// 100 ms doubling to 5 s, equal jitter, `Retry-After` up to 30 s, 5 retries.
    fn default() -> Self {
        RetryPolicy {
            initial: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            max_retry_after: Duration::from_secs(30),
            max_retries: Some(5),
            jitter: Jitter::Equal,
        }
    }
}

impl RetryPolicy {
    /// Whether an HTTP status means the payload can never be accepted (400, 413, 415); every
    /// other non-2xx answer is retried (see the module docs).
    pub fn refuses(status: u16) -> bool {
        matches!(status, 400 | 413 | 415)
    }

    /// The backoff before retry number `retry` (0 = the first), without jitter.
    pub fn backoff(&self, retry: u32) -> Duration {
        self.initial.saturating_mul(1u32 << retry.min(20)).min(self.max_backoff)
    }

    /// The pause before retry number `retry`: the receiver's `after` (capped) when it gave
    /// one, else the jittered backoff.
    pub fn pause(&self, retry: u32, after: Option<Duration>, rng: &mut Rng) -> Duration {
        if let Some(a) = after {
            return a.min(self.max_retry_after);
        }
        let b = self.backoff(retry);
        let nanos = b.as_nanos().min(u64::MAX as u128) as u64;
        let low = match self.jitter {
            Jitter::Full => 0,
            Jitter::Equal => nanos / 2,
        };
        Duration::from_nanos(low + rng.below((nanos - low).saturating_add(1)))
    }

    /// The retry state of one sender, its jitter seeded from `seed`.
    pub fn retries(self, seed: u64) -> Retries {
        Retries { policy: self, retry: 0, rng: Rng::new(seed) }
    }
}

/// One sender's retry state: how many retries in a row, and its jitter generator.
#[derive(Debug, Clone)]
pub struct Retries {
    policy: RetryPolicy,
    retry: u32,
    rng: Rng,
}

impl Retries {
    /// After a retryable failure: the pause before the next attempt, or `None` when the
    /// policy's retries are spent (the count starts again after [`Retries::reset`]).
    pub fn next(&mut self, after: Option<Duration>) -> Option<Duration> {
        if self.policy.max_retries.is_some_and(|m| self.retry >= m) {
            self.retry = 0;
            return None;
        }
        let d = self.policy.pause(self.retry, after, &mut self.rng);
        self.retry = self.retry.saturating_add(1);
        Some(d)
    }

    /// After a success (or a refusal): the next failure starts from the initial backoff.
    pub fn reset(&mut self) {
        self.retry = 0;
    }

    /// Retries in a row so far.
    pub fn retry(&self) -> u32 {
        self.retry
    }
}

/// A small pseudo-random generator (wyrand) for jitter: no cryptographic claims.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (the same seed gives the same sequence).
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// A generator seeded from the clock and the process id.
    pub fn from_time() -> Rng {
        let t = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        Rng::new(t ^ ((std::process::id() as u64) << 32))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0xa076_1d64_78bd_642f);
        let t = u128::from(self.0) * u128::from(self.0 ^ 0xe703_7ed1_a0b4_28db);
        (t >> 64) as u64 ^ t as u64
    }

    /// Uniform in `[0, n)` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

/// A `Retry-After` value as a wait from `now`: delay-seconds (`120`) or an HTTP-date in the
/// IMF-fixdate form (`Sun, 06 Nov 1994 08:49:37 GMT`; a date already past waits 0).
pub fn parse_retry_after(v: &str, now: SystemTime) -> Option<Duration> {
    let v = v.trim();
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        return Some(Duration::from_secs(v.parse::<u64>().unwrap_or(u64::MAX)));
    }
    let at = UNIX_EPOCH + Duration::from_secs(imf_fixdate(v)?);
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Seconds since the epoch of an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`).
fn imf_fixdate(v: &str) -> Option<u64> {
    let mut parts = v.split_ascii_whitespace();
    let (_weekday, day, month, year, time, zone) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || zone != "GMT" {
        return None;
    }
    const MONTHS: [&str; 12] =
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let month = MONTHS.iter().position(|m| *m == month)?;
    let day: u64 = day.parse().ok()?;
    let year: u64 = year.parse().ok()?;
    let mut hms = time.split(':').map(|t| t.parse::<u64>().ok());
    let (h, m, s) = (hms.next()??, hms.next()??, hms.next()??);
    if hms.next().is_some()
        || !(1970..=9999).contains(&year)
        || !(1..=31).contains(&day)
        || h > 23
        || m > 59
        || s > 60
    {
        return None;
    }
    let leap = |y: u64| y.is_multiple_of(4) && (!y.is_multiple_of(100) || y.is_multiple_of(400));
    const DAYS_BEFORE: [u64; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let mut days: u64 = (1970..year).map(|y| if leap(y) { 366 } else { 365 }).sum();
    days += DAYS_BEFORE[month] + u64::from(month >= 2 && leap(year)) + day - 1;
    Some(days * 86_400 + h * 3600 + m * 60 + s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_get_the_traces_path_once() {
        assert_eq!(traces_url("http://h:4318"), "http://h:4318/v1/traces");
        assert_eq!(traces_url("http://h:4318/"), "http://h:4318/v1/traces");
        assert_eq!(traces_url("http://h:4318/v1/traces"), "http://h:4318/v1/traces");
        assert_eq!(traces_url("http://h:4318/v1/traces/"), "http://h:4318/v1/traces");
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
        assert_eq!(parse_retry_after(" 7 ", now), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:50:07 GMT", now), Some(Duration::from_secs(30)));
        assert_eq!(parse_retry_after("Sat, 06 Nov 1993 08:49:37 GMT", now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("Thu, 29 Feb 2024 00:00:00 GMT", UNIX_EPOCH),
            Some(Duration::from_secs(1_709_164_800))
        );
        for bad in ["", "-1", "1.5", "soon", "Sun, 06 Nov 1994 08:49:37 CET", "Sun, 06 Foo 1994 08:49:37 GMT"]
        {
            assert_eq!(parse_retry_after(bad, now), None, "{bad:?}");
        }
    }

    #[test]
    fn refused_statuses_are_400_413_415_only() {
        for s in [400, 413, 415] {
            assert!(RetryPolicy::refuses(s));
        }
        for s in [401, 403, 404, 405, 408, 429, 500, 502, 503, 504] {
            assert!(!RetryPolicy::refuses(s), "{s}");
        }
    }

    #[test]
    fn jitter_stays_within_its_bounds() {
        let base = RetryPolicy { max_retries: None, ..RetryPolicy::default() };
        for jitter in [Jitter::Full, Jitter::Equal] {
            let p = RetryPolicy { jitter, ..base };
            let mut rng = Rng::new(42);
            let mut below_half = false;
            for retry in 0..12 {
                let b = p.backoff(retry);
                for _ in 0..200 {
                    let d = p.pause(retry, None, &mut rng);
                    assert!(d <= b, "{jitter:?} retry {retry}: {d:?} > {b:?}");
                    if jitter == Jitter::Equal {
                        assert!(d >= b / 2, "retry {retry}: {d:?} < {:?}", b / 2);
                    }
                    below_half |= d < b / 2;
                }
            }
            // Full jitter does use the lower half (the generator is not stuck high).
            assert_eq!(below_half, jitter == Jitter::Full);
        }
        assert_eq!(base.backoff(0), Duration::from_millis(100));
        assert_eq!(base.backoff(3), Duration::from_millis(800));
        assert_eq!(base.backoff(40), Duration::from_secs(5));
    }

    #[test]
    fn retry_after_is_honoured_and_capped() {
        let p = RetryPolicy::default();
        let mut rng = Rng::new(1);
        assert_eq!(p.pause(0, Some(Duration::from_secs(3)), &mut rng), Duration::from_secs(3));
        assert_eq!(p.pause(0, Some(Duration::from_secs(3600)), &mut rng), Duration::from_secs(30));
    }

    #[test]
    fn retries_give_up_after_the_policy_s_count_and_start_again() {
        let mut r = RetryPolicy { max_retries: Some(2), ..RetryPolicy::default() }.retries(7);
        assert!(r.next(None).is_some());
        assert!(r.next(None).is_some());
        assert_eq!(r.next(None), None);
        assert!(r.next(None).is_some(), "the next payload starts a fresh count");
        let mut forever = RetryPolicy { max_retries: None, ..RetryPolicy::default() }.retries(7);
        for _ in 0..1000 {
            assert!(forever.next(None).is_some_and(|d| d <= Duration::from_secs(5)));
        }
        forever.reset();
        assert_eq!(forever.retry(), 0);
    }

    #[test]
    fn the_same_seed_gives_the_same_pauses() {
        let p = RetryPolicy { max_retries: None, ..RetryPolicy::default() };
        let (mut a, mut b) = (p.retries(9), p.retries(9));
        for _ in 0..20 {
            assert_eq!(a.next(None), b.next(None));
        }
    }
}
