//! Receivers: encodings, partial success, errors, limits, overload.

use prost::Message;
use weft_model::codec::{otlp, zipkin};

use crate::{TestServer, canon, gzip, spans};

const PB: (&str, &str) = ("Content-Type", "application/x-protobuf");
const JSON: (&str, &str) = ("Content-Type", "application/json");

fn stored_equal(s: &TestServer, sent: &[weft_model::Span]) {
    let mut ids: Vec<_> = sent.iter().map(|s| s.trace_id).collect();
    ids.sort();
    ids.dedup();
    for id in ids {
        let want: Vec<_> = sent.iter().filter(|x| x.trace_id == id).cloned().collect();
        assert_eq!(canon(s.store.trace(id).unwrap()), canon(want), "trace {id}");
    }
}

#[test]
fn otlp_http_protobuf_json_and_gzip_store_spans_losslessly() {
    let s = TestServer::start();
    let a = spans(1, 60);
    let (st, _, body) = s.post("/v1/traces", &[PB], &otlp::encode_proto(&a));
    assert_eq!(st, 200);
    let resp = otlp::proto::ExportTraceServiceResponse::decode(&body[..]).unwrap();
    assert!(resp.partial_success.is_none());

    let b = spans(2, 60);
    let (st, _, body) = s.post("/v1/traces", &[JSON], &otlp::encode_json(&b));
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(body, b"{}");

    let c = spans(3, 60);
    let (st, _, _) =
        s.post("/v1/traces", &[PB, ("Content-Encoding", "gzip")], &gzip(&otlp::encode_proto(&c)));
    assert_eq!(st, 200);
    for set in [&a, &b, &c] {
        stored_equal(&s, set);
    }
    let n = (a.len() + b.len() + c.len()) as f64;
    assert_eq!(s.metric("weft_spans_accepted_total{receiver=\"otlp_http\"}"), n);
}

#[test]
fn invalid_spans_are_refused_as_partial_success_naming_the_field() {
    let s = TestServer::start();
    let sent = spans(4, 30);
    let mut req = otlp::to_request(&sent);
    req.resource_spans[0].scope_spans[0].spans[0].trace_id = vec![1, 2, 3];
    let (st, _, body) = s.post("/v1/traces", &[PB], &req.encode_to_vec());
    assert_eq!(st, 200);
    let ps = otlp::proto::ExportTraceServiceResponse::decode(&body[..]).unwrap().partial_success.unwrap();
    assert_eq!(ps.rejected_spans, 1);
    assert!(ps.error_message.contains("trace_id"), "{}", ps.error_message);
    assert_eq!(s.metric("weft_spans_rejected_total{receiver=\"otlp_http\"}"), 1.0);
    assert_eq!(s.metric("weft_spans_accepted_total{receiver=\"otlp_http\"}"), (sent.len() - 1) as f64);

    // Same over JSON: the partial success comes back as JSON.
    let mut j: serde_json::Value = serde_json::from_slice(&otlp::encode_json(&sent)).unwrap();
    j["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"] = "zz".into();
    let (st, _, body) = s.post("/v1/traces", &[JSON], j.to_string().as_bytes());
    assert_eq!(st, 200);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["partialSuccess"]["rejectedSpans"], "1");
    assert!(v["partialSuccess"]["errorMessage"].as_str().unwrap().contains("spanId"), "{v}");
}

#[test]
fn malformed_bodies_get_400_naming_where() {
    let s = TestServer::start();
    let (st, _, body) = s.post("/v1/traces", &[PB], &[0x0a, 0xff, 0xff, 0x01]);
    assert_eq!(st, 400);
    let status = String::from_utf8_lossy(&body).to_string();
    assert!(status.contains("OTLP protobuf"), "{status}");
    let (st, _, body) = s.post("/v1/traces", &[JSON], b"{\"resourceSpans\": [ {\"scopeSpans\": 7} ]}");
    assert_eq!(st, 400);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let msg = v["message"].as_str().unwrap();
    assert!(msg.contains("scopeSpans"), "{msg}");
    let (st, _, _) = s.post("/v1/traces", &[("Content-Type", "text/plain")], b"hello");
    assert_eq!(st, 415);
    let (st, _, _) = s.post("/v1/traces", &[PB, ("Content-Encoding", "gzip")], b"not gzip");
    assert_eq!(st, 400);
    let (st, _, _) = s.post("/v1/traces", &[PB, ("Content-Encoding", "br")], b"x");
    assert_eq!(st, 415);
    assert_eq!(s.metric("weft_requests_malformed_total{receiver=\"otlp_http\"}"), 5.0);
    // Zipkin JSON errors name the position.
    // issue 18: no Content-Type (what a web page's cross-origin "simple request" may send) is
    // refused, for Zipkin as for OTLP
    let one = zipkin::encode_v2_json(&spans(7, 1));
    let (st, _, _) = s.post("/api/v2/spans", &[], &one);
    assert_eq!(st, 415);
    let (st, _, _) = s.post("/v1/traces", &[], &otlp::encode_proto(&spans(7, 1)));
    assert_eq!(st, 415);
    let (st, _, body) = s.post("/api/v2/spans", &[JSON], b"[{\"traceId\": \"xyz\", \"id\": \"1\"}]");
    assert_eq!(st, 400);
    assert!(String::from_utf8_lossy(&body).contains("traceId"), "{}", String::from_utf8_lossy(&body));
}

#[test]
fn oversized_bodies_get_413() {
    let s = TestServer::with(|_, c| {
        c.max_request_bytes = 32 << 10;
        c.max_decompressed_bytes = 64 << 10;
    });
    let big = otlp::encode_proto(&spans(5, 200));
    assert!(big.len() > 64 << 10, "{}", big.len());
    let (st, _, _) = s.post("/v1/traces", &[PB], &big);
    assert_eq!(st, 413);
    // Small on the wire, too big once inflated.
    let z = gzip(&big);
    assert!(z.len() < 32 << 10, "{}", z.len());
    let (st, _, body) = s.post("/v1/traces", &[PB, ("Content-Encoding", "gzip")], &z);
    assert_eq!(st, 413);
    let status = otlp::RpcStatus::decode(&body[..]).unwrap();
    assert!(status.message.contains("--max-decompressed-size"), "names the limit: {}", status.message);
    assert_eq!(s.metric("weft_requests_too_large_total{receiver=\"otlp_http\"}"), 2.0);
    assert_eq!(s.store.stats().buffer_spans, 0);
}

#[test]
fn overload_answers_429_or_503_with_retry_after_and_counts() {
    // Too many bytes in flight: refused before reading.
    let s = TestServer::with(|_, c| c.max_inflight_bytes = 1024);
    let body = otlp::encode_proto(&spans(6, 50));
    let (st, retry, _) = s.post("/v1/traces", &[PB], &body);
    assert_eq!((st, retry.as_deref()), (429, Some("1")));
    assert_eq!(s.metric("weft_requests_throttled_total{receiver=\"otlp_http\"}"), 1.0);
    drop(s);

    // The store's buffer is full and not flushing: 503, spans counted as dropped.
    let s = TestServer::with(|sc, _| {
        sc.flush_bytes = usize::MAX;
        sc.max_buffer_bytes = 64 << 10;
    });
    let batch = spans(7, 200);
    let body = otlp::encode_proto(&batch);
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let (st, retry, _) = s.post("/v1/traces", &[PB], &body);
        if st == 503 {
            assert_eq!(retry.as_deref(), Some("2"));
        }
        statuses.push(st);
    }
    assert_eq!(statuses[0], 200);
    assert!(statuses.contains(&503), "{statuses:?}");
    let dropped = statuses.iter().filter(|&&x| x == 503).count() * batch.len();
    assert_eq!(
        s.metric("weft_spans_dropped_total{receiver=\"otlp_http\",reason=\"overloaded\"}"),
        dropped as f64
    );
    // Zipkin gets the same treatment.
    let (st, retry, _) = s.post("/api/v2/spans", &[JSON], &zipkin::encode_v2_json(&batch));
    assert_eq!((st, retry.as_deref()), (503, Some("2")));
}

#[test]
fn grpc_export_with_partial_success() {
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
    let s = TestServer::start();
    let sent = spans(8, 80);
    let addr = format!("http://{}", s.grpc);
    let mut req = otlp::to_request(&sent);
    let (ri, si) = req
        .resource_spans
        .iter()
        .enumerate()
        .find_map(|(ri, rs)| rs.scope_spans.iter().position(|ss| ss.spans.len() >= 2).map(|si| (ri, si)))
        .expect("a scope with two spans");
    let victim = req.resource_spans[ri].scope_spans[si].spans[1].clone();
    req.resource_spans[ri].scope_spans[si].spans[1].span_id = vec![0; 8];
    let resp =
        s.rt.block_on(async {
            let mut c = TraceServiceClient::connect(addr).await.unwrap();
            c.export(req).await
        })
        .unwrap()
        .into_inner();
    assert_eq!(resp.partial_success.unwrap().rejected_spans, 1);
    let kept: Vec<_> = sent
        .iter()
        .filter(|x| x.span_id.0[..] != victim.span_id[..] || x.trace_id.0[..] != victim.trace_id[..])
        .cloned()
        .collect();
    stored_equal(&s, &kept);
    assert_eq!(s.metric("weft_spans_accepted_total{receiver=\"otlp_grpc\"}"), kept.len() as f64);
}

#[test]
fn zipkin_json_and_proto3_are_accepted() {
    let s = TestServer::start();
    let a = spans(9, 40);
    let (st, _, _) = s.post("/api/v2/spans", &[JSON], &zipkin::encode_v2_json(&a));
    assert_eq!(st, 202);
    let b = spans(10, 40);
    let (st, _, _) =
        s.post("/api/v2/spans", &[PB, ("Content-Encoding", "gzip")], &gzip(&zipkin::encode_v2_proto(&b)));
    assert_eq!(st, 202);
    // Zipkin carries less than OTLP: compare with what a Zipkin round trip keeps.
    for set in [&a, &b] {
        let via = zipkin::decode_v2_json(&zipkin::encode_v2_json(set)).unwrap();
        for t in &via {
            let got = s.store.trace(t.trace_id).unwrap();
            assert!(
                got.iter().any(|g| g.span_id == t.span_id && g.name == t.name && g.start_ns == t.start_ns)
            );
        }
    }
    assert_eq!(s.metric("weft_spans_accepted_total{receiver=\"zipkin\"}"), (a.len() + b.len()) as f64);
}

#[test]
fn grpc_overload_and_zipkin_limits() {
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
    // The store's buffer is full: gRPC answers UNAVAILABLE (which OTLP exporters retry) and the
    // spans are counted as dropped.
    let s = TestServer::with(|sc, c| {
        sc.flush_bytes = usize::MAX;
        sc.max_buffer_bytes = 64 << 10;
        c.max_request_bytes = 256 << 10;
    });
    let batch = spans(11, 200);
    let addr = format!("http://{}", s.grpc);
    let codes: Vec<Result<(), tonic::Code>> = s.rt.block_on(async {
        let mut c = TraceServiceClient::connect(addr).await.unwrap();
        let mut out = Vec::new();
        for _ in 0..4 {
            out.push(c.export(otlp::to_request(&batch)).await.map(|_| ()).map_err(|e| e.code()));
        }
        out
    });
    assert_eq!(codes[0], Ok(()));
    assert!(codes.contains(&Err(tonic::Code::Unavailable)), "{codes:?}");
    let dropped = codes.iter().filter(|c| c.is_err()).count() * batch.len();
    assert_eq!(
        s.metric("weft_spans_dropped_total{receiver=\"otlp_grpc\",reason=\"overloaded\"}"),
        dropped as f64
    );
    // Zipkin: 413 past the request limit, counted; 400 for a malformed body names the field.
    let big = zipkin::encode_v2_json(&spans(12, 1500));
    assert!(big.len() > 256 << 10, "{}", big.len());
    let (st, _, _) = s.post("/api/v2/spans", &[JSON], &big);
    assert_eq!(st, 413);
    assert_eq!(s.metric("weft_requests_too_large_total{receiver=\"zipkin\"}"), 1.0);
    let (st, _, body) = s.post("/api/v2/spans", &[JSON], b"[{\"traceId\": \"0123456789abcdef\", \"id\": 5}]");
    assert_eq!(st, 400);
    assert!(String::from_utf8_lossy(&body).contains("id"), "{}", String::from_utf8_lossy(&body));
}

/// `google.rpc.RetryInfo`, decoded here independently of the server's encoder (the status
/// around it is weft-model's `RpcStatus`).
#[derive(Clone, PartialEq, prost::Message)]
struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    retry_delay: Option<ProtoDuration>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ProtoDuration {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}

/// The `RetryInfo` delay a gRPC status carries, if any.
fn retry_delay(st: &tonic::Status) -> Option<std::time::Duration> {
    if st.details().is_empty() {
        return None;
    }
    let s = otlp::RpcStatus::decode(st.details()).unwrap();
    assert_eq!((s.code, &s.message), (st.code() as i32, &st.message().to_owned()));
    let any = s.details.iter().find(|d| d.type_url == "type.googleapis.com/google.rpc.RetryInfo")?;
    let d = RetryInfo::decode(&any.value[..]).ok()?.retry_delay?;
    Some(std::time::Duration::new(d.seconds as u64, d.nanos as u32))
}

/// Exports `batch` over gRPC `n` times, one connection.
fn grpc_exports(s: &TestServer, batch: &[weft_model::Span], n: usize) -> Vec<Result<(), tonic::Status>> {
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
    let addr = format!("http://{}", s.grpc);
    s.rt.block_on(async {
        let mut c = TraceServiceClient::connect(addr).await.unwrap();
        let mut out = Vec::new();
        for _ in 0..n {
            out.push(c.export(otlp::to_request(batch)).await.map(|_| ()));
        }
        out
    })
}

/// OTLP/gRPC clients retry RESOURCE_EXHAUSTED only when the status carries a `RetryInfo`:
/// throttling says when to come back, whichever limit was hit.
#[test]
fn grpc_throttling_carries_retry_info() {
    // Too many bytes in flight: RESOURCE_EXHAUSTED with a delay.
    let s = TestServer::with(|_, c| c.max_inflight_bytes = 1024);
    let out = grpc_exports(&s, &spans(13, 50), 1);
    let st = out[0].as_ref().unwrap_err();
    assert_eq!(st.code(), tonic::Code::ResourceExhausted, "{st:?}");
    assert!(retry_delay(st).is_some_and(|d| d > std::time::Duration::ZERO), "{st:?}");
    drop(s);
    // The store's buffer is full: UNAVAILABLE with a delay.
    let s = TestServer::with(|sc, _| {
        sc.flush_bytes = usize::MAX;
        sc.max_buffer_bytes = 64 << 10;
    });
    let out = grpc_exports(&s, &spans(14, 200), 4);
    let refused: Vec<_> = out.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(!refused.is_empty(), "{out:?}");
    for st in refused {
        assert_eq!(st.code(), tonic::Code::Unavailable, "{st:?}");
        assert!(retry_delay(st).is_some_and(|d| d > std::time::Duration::ZERO), "{st:?}");
    }
}

/// Issue 18 item 8: a sender that deletes its copy on the acknowledgement (`weft agent`) asks
/// with `weft-ack: fsync` to be acknowledged only once its spans are fsynced, whatever the
/// store's policy; the answer confirms it. Other requests keep the policy (here: never).
#[test]
fn weft_ack_fsync_is_acknowledged_after_the_fsync_and_confirmed() {
    let files = SyncSeam::default();
    let syncs = files.syncs.clone();
    let s = TestServer::with(|sc, _| sc.wal_files = std::sync::Arc::new(files));
    let opened = syncs.load(std::sync::atomic::Ordering::SeqCst);
    let n = || syncs.load(std::sync::atomic::Ordering::SeqCst) - opened;
    let body = otlp::encode_proto(&spans(43, 20));
    let resp = s.agent.post(&s.post_url("/v1/traces")).header(PB.0, PB.1).send(&body[..]).unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert!(resp.headers().get("weft-ack").is_none());
    assert_eq!(n(), 0, "the store's policy is never");
    let resp = s
        .agent
        .post(&s.post_url("/v1/traces"))
        .header(PB.0, PB.1)
        .header("weft-ack", "fsync")
        .send(&body[..])
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.headers().get("weft-ack").and_then(|v| v.to_str().ok()), Some("fsync"));
    assert_eq!(n(), 1, "fsynced before the answer");
    // gRPC: the same, as request and response metadata.
    let out = s.rt.block_on(async {
        use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
        let mut c = TraceServiceClient::connect(format!("http://{}", s.grpc)).await.unwrap();
        let mut req = tonic::Request::new(otlp::to_request(&spans(44, 20)));
        req.metadata_mut().insert("weft-ack", tonic::metadata::MetadataValue::from_static("fsync"));
        c.export(req).await.unwrap()
    });
    assert_eq!(out.metadata().get("weft-ack").and_then(|v| v.to_str().ok()), Some("fsync"));
    assert_eq!(n(), 2);
}

/// WAL files that count their fsyncs, which fail once `failing` is set.
#[derive(Debug, Clone, Default)]
struct SyncSeam {
    failing: std::sync::Arc<std::sync::atomic::AtomicBool>,
    syncs: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

struct SyncSeamFile(Box<dyn weft_store::wal::WalIo>, SyncSeam);

impl weft_store::wal::WalFiles for SyncSeam {
    fn create(&self, path: &std::path::Path) -> std::io::Result<Box<dyn weft_store::wal::WalIo>> {
        Ok(Box::new(SyncSeamFile(weft_store::wal::OsFiles.create(path)?, self.clone())))
    }
}

impl weft_store::wal::WalIo for SyncSeamFile {
    fn write_all(&self, buf: &[u8]) -> std::io::Result<()> {
        self.0.write_all(buf)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.1.syncs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if self.1.failing.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(std::io::Error::other("injected fsync failure (EIO)"));
        }
        self.0.sync_data()
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.0.set_len(len)
    }
}

/// A store that refuses writes after a failed fsync (until its WAL can go on in a new file) is a
/// server-side condition a client should retry later: 503 with `Retry-After` (not 500, which
/// OTLP clients drop), gRPC UNAVAILABLE; nothing is acknowledged.
#[test]
fn a_poisoned_store_answers_503_with_retry_after_and_grpc_unavailable() {
    let files = SyncSeam::default();
    let failing = files.failing.clone();
    let s = TestServer::with(|sc, _| {
        sc.fsync = weft_store::FsyncPolicy::Always;
        sc.wal_files = std::sync::Arc::new(files);
    });
    let batch = spans(15, 20);
    let body = otlp::encode_proto(&batch);
    let (st, _, _) = s.post("/v1/traces", &[PB], &body);
    assert_eq!(st, 200);
    failing.store(true, std::sync::atomic::Ordering::SeqCst);
    // The failing fsync itself, then the sticky refusal after it.
    for _ in 0..2 {
        let (st, retry, body) = s.post("/v1/traces", &[PB], &body);
        assert_eq!(st, 503, "{}", otlp::RpcStatus::message_of(&body));
        assert!(retry.as_deref().and_then(|r| r.parse::<u32>().ok()).is_some_and(|r| r > 0), "{retry:?}");
    }
    let (st, retry, _) = s.post("/api/v2/spans", &[JSON], &zipkin::encode_v2_json(&batch));
    assert_eq!(st, 503);
    assert!(retry.is_some());
    let out = grpc_exports(&s, &batch, 1);
    let st = out[0].as_ref().unwrap_err();
    assert_eq!(st.code(), tonic::Code::Unavailable, "{st:?}");
    assert!(retry_delay(st).is_some_and(|d| d > std::time::Duration::ZERO), "{st:?}");
    assert_eq!(s.metric("weft_spans_accepted_total{receiver=\"otlp_http\"}"), batch.len() as f64);
    assert_eq!(s.metric("weft_spans_accepted_total{receiver=\"otlp_grpc\"}"), 0.0);
}

/// Issue 18 item 1: a small gzip request whose tiny spans share one large scope (64
/// attributes of 64 bytes) used to expand past the store's per-append limit (the scope was
/// copied into every span row): it is accepted, and stored with about the WAL and buffer bytes
/// per span of the same spans with their ordinary scopes.
#[test]
fn spans_sharing_a_large_scope_are_stored_with_the_scope_once() {
    let mut big = weft_model::Scope { name: "big".into(), ..Default::default() };
    for i in 0..64 {
        big.attributes.push(format!("attr.{i}"), format!("{i:064}"));
    }
    let big = std::sync::Arc::new(big);
    // The spans alone take about 1.1 MiB in memory; a copy of the scope on each, ten more.
    let per_span = |large: bool| {
        let s = TestServer::with(|sc, _| sc.max_append_bytes = 4 << 20);
        let mut batch = spans(40, 2000);
        if large {
            for sp in &mut batch {
                sp.scope = std::sync::Arc::clone(&big);
            }
        }
        let body = gzip(&otlp::encode_proto(&batch));
        let (st, _, b) = s.post("/v1/traces", &[PB, ("Content-Encoding", "gzip")], &body);
        assert_eq!(st, 200, "{}", String::from_utf8_lossy(&b));
        let stats = s.store.stats();
        assert_eq!(stats.buffer_spans, batch.len() as u64);
        let n = batch.len() as f64;
        (stats.wal_bytes as f64 / n, stats.buffer_bytes as f64 / n)
    };
    let (small, large) = (per_span(false), per_span(true));
    eprintln!(
        "bytes per span: WAL {:.1} (ordinary scopes) vs {:.1} (one large scope), buffer {:.1} vs {:.1}",
        small.0, large.0, small.1, large.1
    );
    // The scope (~5 KiB) is kept once per distinct resource it comes with (a few services),
    // not once per span (which was ~5 KiB more per span).
    assert!(large.0 < small.0 + 64.0, "WAL: {small:?} vs {large:?}");
    assert!(large.1 < small.1 + 64.0, "buffer: {small:?} vs {large:?}");
}

/// Issue 18 item 1: a small gzip request that truly expands past the store's per-append limit
/// (every tiny span with a long attribute of its own) is refused with 413 naming the reason,
/// alone; the store is not poisoned and the next request is stored.
#[test]
fn a_request_that_expands_past_the_append_limit_gets_413_alone() {
    let s = TestServer::with(|sc, _| sc.max_append_bytes = 1 << 20);
    let mut bomb = spans(40, 2000);
    for sp in &mut bomb {
        sp.attributes.push("blob", "x".repeat(4096));
    }
    let body = gzip(&otlp::encode_proto(&bomb));
    let (st, _, b) = s.post("/v1/traces", &[PB, ("Content-Encoding", "gzip")], &body);
    let text = String::from_utf8_lossy(&b);
    assert_eq!(st, 413, "{text}");
    assert!(text.contains("exceeds the limit"), "{text}");
    let ok = spans(41, 50);
    let (st, _, b) = s.post("/v1/traces", &[PB], &otlp::encode_proto(&ok));
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&b));
    assert_eq!(s.store.stats().buffer_spans, ok.len() as u64);
    assert_eq!(s.metric("weft_store_appends_too_large_total"), 1.0);
}

/// Issue 18 item 6: a client that retries a request it saw fail after the server had written
/// it (a dropped connection) sends the same spans twice, and both are acknowledged. The trace
/// API returns each span once, with its events once.
#[test]
fn the_same_otlp_body_posted_twice_reads_back_once() {
    let s = TestServer::start();
    let batch = spans(42, 80);
    let body = otlp::encode_proto(&batch);
    for _ in 0..2 {
        let (st, _, _) = s.post("/v1/traces", &[PB], &body);
        assert_eq!(st, 200);
    }
    assert_eq!(s.store.stats().buffer_spans, 2 * batch.len() as u64, "both copies are stored");
    let mut ids: Vec<_> = batch.iter().map(|x| x.trace_id).collect();
    ids.sort();
    ids.dedup();
    for t in ids {
        let (st, got) = s.get(&format!("/api/v3/traces/{t}"));
        assert_eq!(st, 200);
        let v: serde_json::Value = serde_json::from_str(&got).unwrap();
        let got = otlp::decode_json(v["result"].to_string().as_bytes()).unwrap();
        let want: Vec<_> = batch.iter().filter(|x| x.trace_id == t).cloned().collect();
        assert_eq!(canon(got), canon(want), "trace {t}");
    }
}

/// Issue 18: gRPC honours --max-request-size, judged by the message's declared length before
/// anything is decoded (it used to decode up to 64 MiB first), and says which limit.
#[test]
fn grpc_messages_past_the_request_limit_are_refused_before_decoding() {
    let s = TestServer::with(|_, c| c.max_request_bytes = 16 << 10);
    let batch = spans(14, 400);
    assert!(otlp::to_request(&batch).encoded_len() > 16 << 10);
    let out = grpc_exports(&s, &batch, 1);
    let st = out[0].as_ref().unwrap_err();
    assert_eq!(st.code(), tonic::Code::ResourceExhausted, "{st:?}");
    assert!(st.message().contains("--max-request-size"), "{}", st.message());
    assert_eq!(retry_delay(st), None, "413-like: not to be retried");
    assert_eq!(s.metric("weft_requests_too_large_total{receiver=\"otlp_grpc\"}"), 1.0);
    assert_eq!(s.metric("weft_requests_total{receiver=\"otlp_grpc\"}"), 1.0);
    assert_eq!(s.store.stats().buffer_spans, 0);
    // a small one still goes through, and the budget it held is given back
    let small = spans(15, 5);
    assert!(grpc_exports(&s, &small, 3).iter().all(Result::is_ok));
    assert_eq!(s.state().inflight_available(), s.state().config.max_inflight_bytes / 1024);
}
