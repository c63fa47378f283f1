//! OTLP receivers: OTLP/HTTP `POST /v1/traces` (protobuf or JSON by `Content-Type`, gzip) and
//! OTLP/gRPC `opentelemetry.proto.collector.trace.v1.TraceService/Export`.
//!
//! Responses follow the OTLP specification: 200 with an `ExportTraceServiceResponse` (in the
//! request's encoding) whose `partial_success` counts spans refused as invalid (bad ids) and
//! names the first problem; 400 with a `google.rpc.Status` naming the field for an undecodable
//! body; 413 past the size limits; 429 / 503 with `Retry-After` when a retry later may get
//! through (throttling, overload, a store refusing writes after a failed WAL write or fsync);
//! 500 only for a failure the same request would meet again. Over gRPC throttling is
//! `RESOURCE_EXHAUSTED` and the other retryable refusals `UNAVAILABLE`, both with a
//! `google.rpc.RetryInfo` in the status details saying when to come back (OTLP clients retry
//! `RESOURCE_EXHAUSTED` only when it carries one).
//!
//! Agents (weft-agent) ship spans over this same OTLP/HTTP protobuf path: it is already
//! compact, batched, compressible and acknowledged after the durable append, so weft has no
//! separate "native" stream to maintain.

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use prost::Message;
use weft_model::codec::otlp::{self, RpcAny, RpcStatus, proto};

use crate::ingest::{self, IngestError, Stored};
use crate::metrics::Receiver;
use crate::state::AppState;

/// Routes: `POST /v1/traces`.
pub fn routes() -> Router<AppState> {
    Router::new().route("/v1/traces", post(export))
}

#[derive(Clone, Copy, PartialEq)]
enum Enc {
    Proto,
    Json,
}

fn grpc_code(status: StatusCode) -> tonic::Code {
    match status {
        StatusCode::BAD_REQUEST | StatusCode::UNSUPPORTED_MEDIA_TYPE => tonic::Code::InvalidArgument,
        // Without a RetryInfo (413) OTLP clients do not retry it; with one (429) they do.
        StatusCode::PAYLOAD_TOO_LARGE | StatusCode::TOO_MANY_REQUESTS => tonic::Code::ResourceExhausted,
        StatusCode::SERVICE_UNAVAILABLE => tonic::Code::Unavailable,
        _ => tonic::Code::Internal,
    }
}

/// `google.rpc.RetryInfo`.
#[derive(Clone, PartialEq, prost::Message)]
struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    retry_delay: Option<ProtoDuration>,
}

/// `google.protobuf.Duration`.
#[derive(Clone, PartialEq, prost::Message)]
struct ProtoDuration {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}

/// The gRPC status of a refused export: the code of its HTTP status, and for the retryable ones
/// a `RetryInfo` with the `Retry-After` delay.
fn grpc_status(e: &IngestError) -> tonic::Status {
    let code = grpc_code(e.status());
    let message = e.message();
    let Some(secs) = e.retry_after() else { return tonic::Status::new(code, message) };
    let retry = RetryInfo { retry_delay: Some(ProtoDuration { seconds: i64::from(secs), nanos: 0 }) };
    let details = RpcStatus {
        code: code as i32,
        message: message.clone(),
        details: vec![RpcAny {
            type_url: "type.googleapis.com/google.rpc.RetryInfo".into(),
            value: retry.encode_to_vec(),
        }],
    };
    tonic::Status::with_details(code, message, details.encode_to_vec().into())
}

fn content_type(enc: Enc) -> HeaderValue {
    HeaderValue::from_static(match enc {
        Enc::Proto => "application/x-protobuf",
        Enc::Json => "application/json",
    })
}

fn error_response(enc: Enc, e: &IngestError) -> Response {
    let status = e.status();
    let msg = e.message();
    let body = match enc {
        Enc::Proto => {
            RpcStatus { code: grpc_code(status) as i32, message: msg, details: Vec::new() }.encode_to_vec()
        }
        Enc::Json => {
            serde_json::json!({"code": grpc_code(status) as i32, "message": msg}).to_string().into_bytes()
        }
    };
    let mut r = (status, body).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, content_type(enc));
    if let Some(s) = e.retry_after() {
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    r
}

fn partial(stored: &Stored) -> Option<proto::ExportTracePartialSuccess> {
    if stored.rejected.is_empty() {
        return None;
    }
    Some(proto::ExportTracePartialSuccess {
        rejected_spans: stored.rejected.count as i64,
        error_message: stored.rejected.first_error.as_ref().map(|e| e.to_string()).unwrap_or_default(),
    })
}

async fn export(State(state): State<AppState>, headers: HeaderMap, body: axum::body::Body) -> Response {
    let ct =
        headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_ascii_lowercase();
    let enc = if ct.starts_with("application/x-protobuf") || ct.starts_with("application/protobuf") {
        Enc::Proto
    } else if ct.starts_with("application/json") {
        Enc::Json
    } else {
        state
            .metrics
            .receiver(Receiver::OtlpHttp)
            .requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        state
            .metrics
            .receiver(Receiver::OtlpHttp)
            .requests_malformed
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let e = IngestError::Unsupported(format!(
            "Content-Type {ct:?} is not supported: use application/x-protobuf or application/json"
        ));
        return error_response(Enc::Json, &e);
    };
    let admitted = match ingest::admit(&state, Receiver::OtlpHttp, &headers, body).await {
        Ok(a) => a,
        Err(e) => return error_response(enc, &e),
    };
    let proto = enc == Enc::Proto;
    let ack = ingest::Ack::of(&headers);
    let res =
        ingest::store_body(&state, Receiver::OtlpHttp, ack, admitted, move |b: &[u8]| decode_http(proto, b))
            .await;
    match res {
        Ok(stored) => {
            let resp = proto::ExportTraceServiceResponse { partial_success: partial(&stored) };
            let body = match enc {
                Enc::Proto => resp.encode_to_vec(),
                Enc::Json => match &resp.partial_success {
                    Some(p) => serde_json::json!({"partialSuccess": {
                        "rejectedSpans": p.rejected_spans.to_string(),
                        "errorMessage": p.error_message,
                    }})
                    .to_string()
                    .into_bytes(),
                    None => b"{}".to_vec(),
                },
            };
            let mut r = (StatusCode::OK, body).into_response();
            r.headers_mut().insert(header::CONTENT_TYPE, content_type(enc));
            ack.confirm(r.headers_mut());
            r
        }
        Err(e) => error_response(enc, &e),
    }
}

/// Decodes an OTLP/HTTP body (protobuf or JSON), skipping and counting invalid spans.
pub fn decode_http(
    proto: bool,
    body: &[u8],
) -> Result<(Vec<weft_model::Span>, weft_model::codec::Rejected), weft_model::codec::CodecError> {
    if proto { otlp::decode_proto_lenient(body) } else { otlp::decode_json_lenient(body) }
}

/// The gRPC `TraceService`.
#[derive(Clone)]
pub struct GrpcTraceService {
    state: AppState,
}

#[tonic::async_trait]
impl TraceService for GrpcTraceService {
    async fn export(
        &self,
        request: tonic::Request<proto::ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<proto::ExportTraceServiceResponse>, tonic::Status> {
        let state = self.state.clone();
        let r = Receiver::OtlpGrpc;
        state.metrics.receiver(r).requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let ack = ingest::Ack::requested(request.metadata().get(ingest::ACK_HEADER).map(|v| v.as_bytes()));
        // `admit_grpc` reserved the message's declared (compressed) length before decoding;
        // a message that inflated past it reserves the difference.
        let declared = request.extensions().get::<Declared>().map_or(0, |d| d.0);
        let req = request.into_inner();
        let extra = match req.encoded_len().checked_sub(declared) {
            Some(n) if n > 0 => Some(ingest::reserve(&state, r, n).map_err(|e| grpc_status(&e))?),
            _ => None,
        };
        let st = state.clone();
        let res = tokio::task::spawn_blocking(move || {
            let (spans, rejected) = otlp::from_request_lenient(req);
            let out = ingest::store_spans(&st, r, ack, spans, rejected);
            drop(extra);
            out
        })
        .await
        .map_err(|e| grpc_status(&ingest::task_failed(e)))?;
        match res {
            Ok(stored) => {
                let mut resp = tonic::Response::new(proto::ExportTraceServiceResponse {
                    partial_success: partial(&stored),
                });
                if ack == ingest::Ack::Fsync {
                    resp.metadata_mut().insert(
                        ingest::ACK_HEADER,
                        tonic::metadata::MetadataValue::from_static(ingest::ACK_FSYNC),
                    );
                }
                Ok(resp)
            }
            Err(e) => Err(grpc_status(&e)),
        }
    }
}

/// The declared length of a gRPC request's message, reserved by [`admit_grpc`].
#[derive(Clone, Copy)]
struct Declared(usize);

/// Before tonic decodes anything: reads the gRPC message prefix (compressed flag, 4-byte
/// length), refuses a message declared past `--max-request-size` (`RESOURCE_EXHAUSTED` without
/// a `RetryInfo`, as 413) and reserves the declared length of the in-flight budget, held until
/// the export is answered (429's `RESOURCE_EXHAUSTED` with a `RetryInfo` when exhausted).
async fn admit_grpc(
    State(state): State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    use futures::StreamExt;
    let r = Receiver::OtlpGrpc;
    let (parts, body) = req.into_parts();
    let mut stream = body.into_data_stream();
    let mut head: Vec<bytes::Bytes> = Vec::new();
    let mut seen = 0usize;
    while seen < 5 {
        match stream.next().await {
            Some(Ok(chunk)) => {
                seen += chunk.len();
                head.push(chunk);
            }
            // An empty or broken body: tonic answers it.
            _ => break,
        }
    }
    let prefix: Vec<u8> = head.iter().flat_map(|c| c.iter().copied()).take(5).collect();
    let declared = match prefix.as_slice() {
        [_, a, b, c, d] => u32::from_be_bytes([*a, *b, *c, *d]) as usize,
        _ => 0,
    };
    let limit = state.config.max_request_bytes;
    let refused = if declared > limit {
        state.metrics.receiver(r).requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        state.metrics.receiver(r).requests_too_large.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Some(IngestError::TooLarge(format!(
            "message of {declared} bytes exceeds the limit of {limit} bytes (weft serve --max-request-size)"
        )))
    } else {
        None
    };
    let permit = match refused {
        Some(e) => Err(e),
        None => ingest::reserve(&state, r, declared).inspect_err(|_| {
            state.metrics.receiver(r).requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }),
    };
    let permit = match permit {
        Ok(p) => p,
        Err(e) => return grpc_status(&e).into_http(),
    };
    let body = axum::body::Body::from_stream(futures::stream::iter(head.into_iter().map(Ok)).chain(stream));
    let mut req = axum::extract::Request::from_parts(parts, body);
    req.extensions_mut().insert(Declared(declared));
    let resp = next.run(req).await;
    drop(permit);
    resp
}

/// The gRPC routes (served on the OTLP/gRPC listener).
pub fn grpc_router(state: AppState) -> Router {
    let svc = TraceServiceServer::new(GrpcTraceService { state: state.clone() })
        .accept_compressed(tonic::codec::CompressionEncoding::Gzip)
        .send_compressed(tonic::codec::CompressionEncoding::Gzip)
        .max_decoding_message_size(state.config.max_decompressed_bytes);
    tonic::service::Routes::new(svc)
        .into_axum_router()
        .layer(axum::middleware::from_fn_with_state(state, admit_grpc))
}
