//! Zipkin: sample spans within Zipkin's limits, losses, shared resources, bad proto ids;
//! property tests — v2 JSON and proto3 round trips of everything Zipkin carries (whole buffer
//! and streaming), decoders that never panic, truncated documents that always fail.

use proptest::prelude::*;
use prost::Message;
use weft_model::codec::stream::{self, Format, WriterOptions};
use weft_model::codec::zipkin::proto::ListOfSpans;
use weft_model::codec::zipkin::{
    LOST_INTERNAL, LOST_LINKS, LOST_RESOURCE_ATTRS, LOST_STRINGIFIED, decode_v2_json, decode_v2_proto,
    decode_v2_proto_lenient, encode_v2_json, encode_v2_json_with, encode_v2_proto,
};
use weft_model::codec::{Losses, zipkin};
use weft_model::{KeyValue, Resource, Span, Value};
use weft_synth::sample;

use crate::strategies;

/// Streams `bytes` through the reader of `format` in small batches.
pub fn read_stream(format: Format, bytes: &[u8]) -> Result<Vec<Span>, weft_model::codec::CodecError> {
    let mut r = stream::reader(format, bytes, false)?;
    let mut out = Vec::new();
    while r.next_batch(&mut out, 2)? {}
    Ok(out)
}

/// Streams spans through the writer of `format` in small batches.
pub fn write_stream(format: Format, spans: &[Span]) -> (Vec<u8>, Losses) {
    write_chunked(format, spans, 2, 3)
}

/// Streams spans through the writer of `format`, `chunk` spans per write, sorting them in runs
/// of `sort_run_spans` (spilled to temporary files past one run).
pub fn write_chunked(
    format: Format,
    spans: &[Span],
    chunk: usize,
    sort_run_spans: usize,
) -> (Vec<u8>, Losses) {
    let mut out = Vec::new();
    let options = WriterOptions { sort_run_spans, ..WriterOptions::default() };
    let mut w = stream::writer(format, &mut out, options).unwrap();
    for c in spans.chunks(chunk) {
        w.write(c).unwrap();
    }
    let losses = w.finish().unwrap();
    (out, losses)
}

/// Zipkin tags are a map (the proto3 form sorts them): compare attributes by key.
fn by_key(spans: &[Span]) -> Vec<Span> {
    spans
        .iter()
        .cloned()
        .map(|mut s| {
            s.attributes.0.sort_by(|a, b| a.key.cmp(&b.key));
            s
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn v2_json_round_trip(spans in strategies::zipkin_spans()) {
        let mut losses = Losses::default();
        let text = zipkin::encode_v2_json_with(&spans, &mut losses);
        prop_assert!(losses.is_empty(), "{}", losses);
        let back = zipkin::decode_v2_json(&text)
            .map_err(|e| TestCaseError::fail(format!("{e}\n{}", String::from_utf8_lossy(&text))))?;
        prop_assert_eq!(&back, &spans);
        let (streamed, losses) = write_stream(Format::ZipkinV2Json, &spans);
        prop_assert!(losses.is_empty());
        prop_assert_eq!(read_stream(Format::ZipkinV2Json, &streamed).unwrap(), spans);
    }

    #[test]
    fn v2_proto_round_trip(spans in strategies::zipkin_spans()) {
        let mut losses = Losses::default();
        let bytes = zipkin::encode_v2_proto_with(&spans, &mut losses);
        prop_assert!(losses.is_empty(), "{}", losses);
        prop_assert_eq!(by_key(&zipkin::decode_v2_proto(&bytes).unwrap()), by_key(&spans));
        let (streamed, _) = write_stream(Format::ZipkinV2Proto, &spans);
        prop_assert_eq!(by_key(&read_stream(Format::ZipkinV2Proto, &streamed).unwrap()), by_key(&spans));
    }

    #[test]
    fn truncated_v2_json_always_fails(spans in strategies::zipkin_spans(), cut in any::<prop::sample::Index>()) {
        let text = zipkin::encode_v2_json(&spans);
        let cut = cut.index(text.len());
        prop_assert!(zipkin::decode_v2_json(&text[..cut]).is_err() || text[..cut].iter().all(u8::is_ascii_whitespace));
        prop_assert!(zipkin::decode_v2_json_lenient(&text[..cut]).is_err() || cut == 0);
    }

    #[test]
    fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = zipkin::decode_v2_json_lenient(&bytes);
        let _ = zipkin::decode_v2_proto_lenient(&bytes);
        let _ = zipkin::decode_v1_json_lenient(&bytes);
    }

    #[test]
    fn json_decoders_never_panic_on_json_like_text(text in "[\\[\\]{}\":,0-9a-fA-FtrueslnIdpk \\\\-]{0,160}") {
        let _ = zipkin::decode_v2_json(text.as_bytes());
        let _ = zipkin::decode_v1_json(text.as_bytes());
    }
}

/// Zipkin v1 (BlkKin) — read only in weft, so the test writes it: each client or server span
/// as a v1 span with its core annotations (`cs`/`cr` or `sr`/`ss`), its events as further
/// annotations and its tags as binary annotations, all stamped with the local endpoint.
fn v1_document(spans: &[Span]) -> Vec<u8> {
    use serde_json::json;
    let docs: Vec<serde_json::Value> = spans
        .iter()
        .map(|s| {
            let ep = match s.resource.attributes.get_str("service.name") {
                Some(svc) => json!({ "serviceName": svc, "ipv4": "10.0.0.1" }),
                None => json!({ "ipv4": "10.0.0.1" }),
            };
            let (first, last) = if s.kind == weft_model::SpanKind::Client { ("cs", "cr") } else { ("sr", "ss") };
            let mut annotations = vec![json!({ "timestamp": s.start_ns / 1000, "value": first, "endpoint": ep })];
            for e in &s.events {
                annotations.push(json!({ "timestamp": e.time_ns / 1000, "value": e.name, "endpoint": ep }));
            }
            annotations.push(json!({ "timestamp": s.end_ns / 1000, "value": last, "endpoint": ep }));
            let mut binary: Vec<serde_json::Value> = s
                .attributes
                .iter()
                .map(|kv| json!({ "key": kv.key, "value": kv.value.as_str().unwrap_or_default(), "endpoint": ep }))
                .collect();
            match s.status.code {
                weft_model::StatusCode::Error => {
                    binary.push(json!({ "key": "error", "value": s.status.message, "endpoint": ep }))
                }
                weft_model::StatusCode::Ok => {
                    binary.push(json!({ "key": "otel.status_code", "value": "OK", "endpoint": ep }))
                }
                weft_model::StatusCode::Unset => {}
            }
            let mut doc = json!({
                "traceId": s.trace_id.to_string(),
                "id": s.span_id.to_string(),
                "name": s.name,
                "timestamp": s.start_ns / 1000,
                "duration": (s.end_ns - s.start_ns) / 1000,
                "annotations": annotations,
                "binaryAnnotations": binary,
            });
            if let Some(p) = s.parent_span_id {
                doc["parentId"] = json!(p.to_string());
            }
            doc
        })
        .collect();
    serde_json::to_vec_pretty(&docs).unwrap()
}

/// What weft reads from such a v1 span: the span, with the core annotations kept as events
/// around its own, and the endpoint's address as `net.host.ip`.
fn v1_expected(s: &Span) -> Span {
    let mut want = s.clone();
    let (first, last) = if s.kind == weft_model::SpanKind::Client { ("cs", "cr") } else { ("sr", "ss") };
    let core = |t: u64, n: &str| weft_model::SpanEvent { time_ns: t, name: n.into(), ..Default::default() };
    want.events.insert(0, core(s.start_ns, first));
    want.events.push(core(s.end_ns, last));
    want.attributes.push(weft_model::conv::LOCAL_IPV4, "10.0.0.1");
    want
}

fn v1_spans() -> impl Strategy<Value = Vec<Span>> {
    strategies::zipkin_spans().prop_map(|spans| {
        spans
            .into_iter()
            .map(|mut s| {
                s.kind = if s.span_id.0[7] & 1 == 0 {
                    weft_model::SpanKind::Client
                } else {
                    weft_model::SpanKind::Server
                };
                s.start_ns = s.start_ns.max(1000);
                s.end_ns = s.end_ns.max(s.start_ns);
                s.scope = Default::default();
                for e in &mut s.events {
                    // Plain annotations: no core names, no attributes.
                    e.name = format!("e:{}", e.name).into();
                    e.attributes = Default::default();
                }
                s
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn v1_json_reads_what_a_v1_tracer_wrote(spans in v1_spans()) {
        let doc = v1_document(&spans);
        let got = zipkin::decode_v1_json(&doc)
            .map_err(|e| TestCaseError::fail(format!("{e}\n{}", String::from_utf8_lossy(&doc))))?;
        let want: Vec<Span> = spans.iter().map(v1_expected).collect();
        prop_assert_eq!(&got, &want);
        prop_assert_eq!(read_stream(Format::ZipkinV1Json, &doc).unwrap(), want);
    }

    #[test]
    fn truncated_v1_json_always_fails(spans in v1_spans(), cut in any::<prop::sample::Index>()) {
        let doc = v1_document(&spans);
        let cut = cut.index(doc.len());
        prop_assert!(zipkin::decode_v1_json(&doc[..cut]).is_err() || cut == 0);
    }
}

#[test]
fn sample_spans_survive_zipkin_within_its_limits() {
    let spans: Vec<Span> = sample::spans(200, 11)
        .into_iter()
        .map(|mut s| {
            // What Zipkin carries: string attributes, µs times, no links, CLIENT/SERVER kinds.
            s.attributes = s
                .attributes
                .iter()
                .map(|kv| KeyValue::new(kv.key.clone(), Value::Str(kv.value.to_string().into())))
                .collect();
            s.links.clear();
            s.flags = 0;
            s.start_ns -= s.start_ns % 1000;
            s.end_ns -= s.end_ns % 1000;
            for e in &mut s.events {
                e.time_ns -= e.time_ns % 1000;
            }
            s
        })
        .collect();
    let mut losses = Losses::default();
    let text = encode_v2_json_with(&spans, &mut losses);
    assert!(losses.get(LOST_RESOURCE_ATTRS) > 0);
    assert!(losses.get(LOST_INTERNAL) > 0);
    let back = decode_v2_json(&text).unwrap();
    assert_eq!(back.len(), spans.len());
    for (a, b) in spans.iter().zip(&back) {
        assert_eq!((a.trace_id, a.span_id, a.parent_span_id), (b.trace_id, b.span_id, b.parent_span_id));
        assert_eq!(a.name, b.name);
        assert_eq!((a.start_ns, a.end_ns), (b.start_ns, b.end_ns), "whole µs survive");
        assert_eq!(a.status, b.status);
        assert_eq!(a.service_name(), b.service_name());
        assert_eq!((&a.scope.name, &a.scope.version), (&b.scope.name, &b.scope.version));
        let mut x: Vec<_> = a.attributes.iter().map(|kv| (kv.key.clone(), kv.value.to_string())).collect();
        let mut y: Vec<_> = b.attributes.iter().map(|kv| (kv.key.clone(), kv.value.to_string())).collect();
        x.sort();
        y.sort();
        assert_eq!(x, y);
        // Events with attributes travel as {"name":{attrs}} and come back typed.
        assert_eq!(a.events, b.events);
    }
    // The proto3 form carries the same.
    let back_proto = decode_v2_proto(&encode_v2_proto(&spans)).unwrap();
    assert_eq!(back_proto.len(), back.len());
    for (a, b) in back.iter().zip(&back_proto) {
        let mut x = a.clone();
        let mut y = b.clone();
        x.attributes.0.sort_by(|p, q| p.key.cmp(&q.key));
        y.attributes.0.sort_by(|p, q| p.key.cmp(&q.key));
        assert_eq!(x, y);
    }
}

#[test]
fn losses_are_counted() {
    let spans = sample::spans(20, 3);
    let mut losses = Losses::default();
    encode_v2_json_with(&spans, &mut losses);
    let links: u64 = spans.iter().map(|s| s.links.len() as u64).sum();
    assert_eq!(losses.get(LOST_LINKS), links);
    assert!(losses.get(LOST_STRINGIFIED) > 0);
    assert!(losses.to_string().contains("non-string attributes stringified"), "{losses}");
}

#[test]
fn proto_rejects_bad_ids_and_garbage() {
    let mut spans = sample::spans(3, 1);
    spans.truncate(3);
    let mut list = ListOfSpans::decode(encode_v2_proto(&spans).as_slice()).unwrap();
    list.spans[1].id = vec![1, 2];
    let bytes = prost::Message::encode_to_vec(&list);
    let (ok, rej) = decode_v2_proto_lenient(&bytes).unwrap();
    assert_eq!((ok.len(), rej.count), (2, 1));
    assert_eq!(rej.first_error.unwrap().field, "spans[1].id");
    assert!(decode_v2_proto(&bytes[..bytes.len() - 3]).is_err());
    assert!(decode_v2_proto(b"[{\"a\":1}]").is_err());
}

/// Spans of one service share one resource, with a few services (searched) and with many
/// (hashed).
#[test]
fn resources_are_shared_per_service() {
    let mut spans = sample::spans(200, 4);
    for (i, s) in spans.iter_mut().enumerate() {
        s.resource = std::sync::Arc::new(Resource::service(format!("svc{}", i % 20)));
    }
    let back = decode_v2_json(&encode_v2_json(&spans)).unwrap();
    for (i, s) in back.iter().enumerate() {
        assert_eq!(s.service_name(), format!("svc{}", i % 20));
        let first = &back[i % 20];
        assert!(std::sync::Arc::ptr_eq(&s.resource, &first.resource), "span {i}");
    }
    let distinct: std::collections::HashSet<*const Resource> =
        back.iter().map(|s| std::sync::Arc::as_ptr(&s.resource)).collect();
    assert_eq!(distinct.len(), 20);
}
