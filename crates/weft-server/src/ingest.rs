//! What every receiver does with a request body: bound it, decompress it, decode it, store it,
//! and count the outcome.
//!
//! * Size: a body past [`ServerConfig::max_request_bytes`] (by `Content-Length` or while
//!   reading), or past [`ServerConfig::max_decompressed_bytes`] once inflated, is refused with
//!   413 before it is decoded.
//! * Load: request bytes in flight (being read, decoded and stored) are bounded by
//!   [`ServerConfig::max_inflight_bytes`]; past it a request is refused with 429 and
//!   `Retry-After: 1` without being read. When the store's buffer is full (flushing cannot keep
//!   up), decoded spans are refused with 503 and `Retry-After: 2`. Both are counted — memory
//!   never grows without bound and nothing is dropped silently.
//! * Retry: the answers follow the OTLP retry rules. What a later retry of the same request can
//!   get through — throttling, overload, a store that refuses writes until its WAL goes on in a
//!   new file (after a failed WAL write or fsync), an I/O error, an ingest task that failed — is 429 or 503 with
//!   `Retry-After` (gRPC: `RESOURCE_EXHAUSTED` or `UNAVAILABLE` with a `RetryInfo`); what it
//!   cannot is 400, 413 or 415, and 500 only for a failure the same request would meet again.
//! * gRPC: the message's declared length is checked against the same request limit and
//!   reserved before tonic decodes it (see `otlp`).
//! * Decompression, decoding and the durable append run on the blocking pool; the response is sent only after
//!   the append (the acknowledgement means "in the WAL").
//!
//! [`ServerConfig::max_request_bytes`]: crate::ServerConfig::max_request_bytes
//! [`ServerConfig::max_decompressed_bytes`]: crate::ServerConfig::max_decompressed_bytes
//! [`ServerConfig::max_inflight_bytes`]: crate::ServerConfig::max_inflight_bytes

use std::io::Read;
use std::sync::atomic::Ordering;

use axum::http::{HeaderMap, StatusCode, header};
use bytes::Bytes;
use tokio::sync::OwnedSemaphorePermit;
use weft_model::Span;
use weft_model::codec::{CodecError, Rejected};
use weft_store::StoreError;

use crate::metrics::Receiver;
use crate::state::AppState;

/// Why a request was refused.
#[derive(Debug)]
pub enum IngestError {
    /// 413.
    TooLarge(String),
    /// 429 (too much in flight).
    Throttled,
    /// 400 (undecodable body; the message names the position and field).
    Malformed(String),
    /// 408 (the body did not arrive within the body timeout).
    TimedOut(String),
    /// 415 (content type or encoding not understood).
    Unsupported(String),
    /// 503 (the store's buffer is full).
    Overloaded(String),
    /// 503 (the store refuses writes for now: a failed WAL write or fsync until the WAL goes on in a new file,
    /// an I/O error; or the ingest task failed). Retrying later may succeed.
    Unavailable(String),
    /// 500 (a failure the same request would meet again).
    Internal(String),
}

impl IngestError {
    /// HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            IngestError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            IngestError::Throttled => StatusCode::TOO_MANY_REQUESTS,
            IngestError::Malformed(_) => StatusCode::BAD_REQUEST,
            IngestError::TimedOut(_) => StatusCode::REQUEST_TIMEOUT,
            IngestError::Unsupported(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            IngestError::Overloaded(_) | IngestError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            IngestError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
    /// `Retry-After` seconds, for the retryable ones.
    pub fn retry_after(&self) -> Option<u32> {
        match self {
            IngestError::Throttled => Some(1),
            IngestError::Overloaded(_) => Some(2),
            IngestError::Unavailable(_) => Some(5),
            IngestError::TooLarge(_)
            | IngestError::Malformed(_)
            | IngestError::TimedOut(_)
            | IngestError::Unsupported(_)
            | IngestError::Internal(_) => None,
        }
    }
    /// Human-readable message.
    pub fn message(&self) -> String {
        match self {
            IngestError::TooLarge(m)
            | IngestError::Malformed(m)
            | IngestError::TimedOut(m)
            | IngestError::Unsupported(m)
            | IngestError::Overloaded(m)
            | IngestError::Unavailable(m)
            | IngestError::Internal(m) => m.clone(),
            IngestError::Throttled => "too many request bytes in flight; retry later".into(),
        }
    }
}

/// A body that passed the size and load checks, with its share of the in-flight budget.
pub struct Admitted {
    /// The (decompressed) body.
    pub bytes: Bytes,
    permits: Vec<OwnedSemaphorePermit>,
}

fn kib(n: usize) -> u32 {
    (n.div_ceil(1024)).clamp(1, u32::MAX as usize) as u32
}

/// Reserves `bytes` of the in-flight budget (429 when it is exhausted).
pub fn reserve(state: &AppState, r: Receiver, bytes: usize) -> Result<OwnedSemaphorePermit, IngestError> {
    state.inflight.clone().try_acquire_many_owned(kib(bytes)).map_err(|_| {
        state.metrics.receiver(r).requests_throttled.fetch_add(1, Ordering::Relaxed);
        IngestError::Throttled
    })
}

fn too_large(state: &AppState, r: Receiver, what: String) -> IngestError {
    state.metrics.receiver(r).requests_too_large.fetch_add(1, Ordering::Relaxed);
    IngestError::TooLarge(what)
}

/// Reads, bounds and decompresses a request body.
pub async fn admit(
    state: &AppState,
    r: Receiver,
    headers: &HeaderMap,
    body: axum::body::Body,
) -> Result<Admitted, IngestError> {
    state.metrics.receiver(r).requests.fetch_add(1, Ordering::Relaxed);
    let limit = state.config.max_request_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<usize>().ok());
    if let Some(n) = declared
        && n > limit
    {
        let err = too_large(
            state,
            r,
            format!(
                "request body of {n} bytes exceeds the limit of {limit} bytes (weft serve --max-request-size)"
            ),
        );
        linger(body, limit).await;
        return Err(err);
    }
    let first = match reserve(state, r, declared.unwrap_or(limit)) {
        Ok(p) => p,
        Err(e) => {
            linger(body, limit).await;
            return Err(e);
        }
    };
    let raw = axum::body::to_bytes(body, limit).await.map_err(|e| {
        // to_bytes fails on the limit or on a broken connection.
        if std::error::Error::source(&e).is_some_and(|s| s.to_string().contains("length limit"))
            || e.to_string().contains("length limit")
        {
            too_large(
                state,
                r,
                format!("request body exceeds the limit of {limit} bytes (weft serve --max-request-size)"),
            )
        } else if crate::conn::is_body_timeout(&e) {
            state.metrics.receiver(r).requests_timed_out.fetch_add(1, Ordering::Relaxed);
            IngestError::TimedOut(e.to_string())
        } else {
            IngestError::Malformed(format!("reading the request body: {e}"))
        }
    })?;
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(|s| s.trim().to_ascii_lowercase())
        .unwrap_or_default();
    // Inflating is CPU work (up to the limit): on the blocking pool, not the runtime's workers.
    let max = state.config.max_decompressed_bytes;
    let inflated = match encoding.as_str() {
        "" | "identity" => Ok(raw),
        _ => {
            tokio::task::spawn_blocking(move || decompress(&encoding, raw, max)).await.map_err(task_failed)?
        }
    };
    let bytes = match inflated {
        Ok(b) => b,
        Err(e @ IngestError::TooLarge(_)) => {
            state.metrics.receiver(r).requests_too_large.fetch_add(1, Ordering::Relaxed);
            return Err(e);
        }
        Err(e) => {
            state.metrics.receiver(r).requests_malformed.fetch_add(1, Ordering::Relaxed);
            return Err(e);
        }
    };
    let mut permits = vec![first];
    if bytes.len() > declared.unwrap_or(limit) {
        permits.push(reserve(state, r, bytes.len())?);
    }
    Ok(Admitted { bytes, permits })
}

/// Reads and discards a body the server refuses before reading it (413, 429), so that a client
/// still writing it gets to read the answer instead of a broken pipe — the lingering close of
/// nginx and Apache. Bounded: at most a few times the request limit and two seconds; past
/// that the connection is closed under the client as before.
async fn linger(body: axum::body::Body, limit: usize) {
    use futures::StreamExt;
    let max = limit.saturating_mul(4).clamp(1 << 20, 64 << 20);
    let mut stream = body.into_data_stream();
    let drain = async {
        let mut seen = 0usize;
        while let Some(Ok(chunk)) = stream.next().await {
            seen += chunk.len();
            if seen > max {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), drain).await;
}

/// Inflates a body according to its `Content-Encoding` (`gzip`, `deflate`, or none), refusing
/// more than `max` bytes of output (413) — a decompression bomb costs at most `max` bytes.
pub fn decompress(encoding: &str, raw: Bytes, max: usize) -> Result<Bytes, IngestError> {
    match encoding {
        "" | "identity" => Ok(raw),
        "gzip" | "x-gzip" | "deflate" => {
            let mut out = Vec::with_capacity((raw.len() * 4).min(max));
            let res = if encoding == "deflate" {
                flate2::read::ZlibDecoder::new(&raw[..]).take(max as u64 + 1).read_to_end(&mut out)
            } else {
                flate2::read::MultiGzDecoder::new(&raw[..]).take(max as u64 + 1).read_to_end(&mut out)
            };
            if let Err(e) = res {
                return Err(IngestError::Malformed(format!("body is not valid {encoding} data: {e}")));
            }
            if out.len() > max {
                return Err(IngestError::TooLarge(format!(
                    "decompressed body exceeds the limit of {max} bytes (weft serve --max-decompressed-size)"
                )));
            }
            Ok(Bytes::from(out))
        }
        other => Err(IngestError::Unsupported(format!(
            "Content-Encoding {other:?} is not supported (use gzip, deflate or none)"
        ))),
    }
}

/// The request header (gRPC metadata) with which a sender asks to be acknowledged only once
/// its spans are fsynced, whatever `--fsync` says: value [`ACK_FSYNC`]. The answer carries the
/// same header when it was honoured. `weft agent` asks for it, because it deletes a batch from
/// its spool on the acknowledgement.
pub const ACK_HEADER: &str = "weft-ack";
/// The value of [`ACK_HEADER`] asking for (and confirming) an fsynced acknowledgement.
pub const ACK_FSYNC: &str = "fsync";

/// When a request is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ack {
    /// Once the spans are in the WAL (fsynced per the store's policy).
    #[default]
    Wal,
    /// Once the WAL holding them is fsynced.
    Fsync,
}

impl Ack {
    /// What the request's [`ACK_HEADER`] asks for.
    pub fn requested(value: Option<&[u8]>) -> Ack {
        match value {
            Some(v) if v.eq_ignore_ascii_case(ACK_FSYNC.as_bytes()) => Ack::Fsync,
            _ => Ack::Wal,
        }
    }

    /// What the HTTP request's headers ask for.
    pub fn of(headers: &HeaderMap) -> Ack {
        Ack::requested(headers.get(ACK_HEADER).map(|v| v.as_bytes()))
    }

    /// Confirms an fsynced acknowledgement in the answer's headers.
    pub fn confirm(self, headers: &mut HeaderMap) {
        if self == Ack::Fsync {
            headers.insert(ACK_HEADER, axum::http::HeaderValue::from_static(ACK_FSYNC));
        }
    }
}

/// What a stored request gave.
#[derive(Debug, Default)]
pub struct Stored {
    /// Spans stored.
    pub accepted: u64,
    /// Spans refused as invalid.
    pub rejected: Rejected,
}

/// Decodes (on the blocking pool) and stores the spans of an admitted body.
pub async fn store_body<D>(
    state: &AppState,
    r: Receiver,
    ack: Ack,
    body: Admitted,
    decode: D,
) -> Result<Stored, IngestError>
where
    D: FnOnce(&[u8]) -> Result<(Vec<Span>, Rejected), CodecError> + Send + 'static,
{
    let st = state.clone();
    let res = tokio::task::spawn_blocking(move || {
        let Admitted { bytes, permits } = body;
        let decoded = decode(&bytes);
        drop(bytes);
        let out = match decoded {
            Ok((spans, rejected)) => store_spans(&st, r, ack, spans, rejected),
            Err(e) => {
                st.metrics.receiver(r).requests_malformed.fetch_add(1, Ordering::Relaxed);
                Err(IngestError::Malformed(e.to_string()))
            }
        };
        drop(permits);
        out
    })
    .await;
    res.map_err(task_failed)?
}

/// The blocking ingest task panicked or was cancelled: nothing was acknowledged, and a retry
/// runs in a new task (503).
pub fn task_failed(e: tokio::task::JoinError) -> IngestError {
    tracing::error!(error = %e, "ingest task failed");
    IngestError::Unavailable(format!("ingest task failed: {e}"))
}

/// Stores spans made in this process rather than received (blocking): `weft serve --demo`'s
/// traffic. Counted as one request of `r`, then stored and counted like received spans.
pub fn store_generated(state: &AppState, r: Receiver, spans: Vec<Span>) -> Result<Stored, IngestError> {
    state.metrics.receiver(r).requests.fetch_add(1, Ordering::Relaxed);
    store_spans(state, r, Ack::Wal, spans, Rejected::default())
}

/// Stores decoded spans (blocking; returning once they are as durable as `ack` asks) and
/// counts the outcome.
pub fn store_spans(
    state: &AppState,
    r: Receiver,
    ack: Ack,
    spans: Vec<Span>,
    rejected: Rejected,
) -> Result<Stored, IngestError> {
    let c = state.metrics.receiver(r);
    c.spans_rejected.fetch_add(rejected.count, Ordering::Relaxed);
    let n = spans.len() as u64;
    state.control.observe_spans(&spans);
    let appended = match ack {
        Ack::Wal => state.store.append(&spans),
        Ack::Fsync => state.store.append_synced(&spans),
    };
    match appended {
        Ok(()) => {
            c.spans_accepted.fetch_add(n, Ordering::Relaxed);
            Ok(Stored { accepted: n, rejected })
        }
        Err(e @ StoreError::Overloaded { .. }) => {
            c.spans_dropped_overload.fetch_add(n, Ordering::Relaxed);
            Err(IngestError::Overloaded(e.to_string()))
        }
        Err(e) => {
            c.spans_dropped_error.fetch_add(n, Ordering::Relaxed);
            tracing::error!(error = %e, receiver = r.as_str(), spans = n, "storing spans failed");
            let msg = format!("storing spans failed: {e}");
            Err(match e {
                // Conditions of the server, not of the request: a retry may get through once the
                // disk has room again and the store's WAL went on in a new file.
                StoreError::Poisoned(_)
                | StoreError::Io { .. }
                | StoreError::ReadOnly
                | StoreError::Locked(_) => IngestError::Unavailable(msg),
                // The request alone is refused; the store goes on taking others.
                StoreError::AppendTooLarge { .. } => IngestError::TooLarge(msg),
                _ => IngestError::Internal(msg),
            })
        }
    }
}
