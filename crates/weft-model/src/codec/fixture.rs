//! Spans for the codecs' unit tests that need private items (the Zipkin scanner, the external
//! sort). The other codec tests run in tests/it on weft-synth's sample spans, which unit tests
//! cannot use (weft-synth links the non-test copy of this crate).

use std::sync::Arc;

use crate::conv;
use crate::id::{SpanId, TraceId};
use crate::span::{Resource, Span, SpanEvent, SpanKind, Status, StatusCode};
use crate::value::{Attributes, Value};

/// `n` spans for `seed` (not 0): traces of four spans over three services, kinds in turn,
/// start times out of order, attributes of every type, one event with an attribute per span,
/// every seventh span failed. Deterministic.
pub(crate) fn spans(n: usize, seed: u64) -> Vec<Span> {
    let services: Vec<Arc<Resource>> =
        ["frontend", "checkout", "payments"].into_iter().map(|s| Arc::new(Resource::service(s))).collect();
    (0..n as u64)
        .map(|i| {
            let start = 1_700_000_000_000_000_000 + (i * 7919 + seed) % 1009 * 1_000_000;
            let mut attributes = Attributes::new();
            attributes.push("http.route", format!("/api/item/{}", (i * seed) % 17));
            attributes.push("http.response.status_code", [200i64, 404, 500][(i % 3) as usize]);
            attributes.push("cache.hit", i % 2 == 0);
            attributes.push("sampling.ratio", 0.25 * (i % 4) as f64);
            attributes.push("request.bytes", Value::Bytes(vec![i as u8, seed as u8]));
            attributes.push("feature.flags", Value::Array(vec!["new-cart".into(), "fast-pay".into()]));
            attributes.push(conv::PEER_IP, "10.0.0.2");
            let mut event = Attributes::new();
            event.push("message.id", i as i64);
            Span {
                trace_id: TraceId::from_u128(u128::from(seed) << 64 | u128::from(i / 4 + 1)),
                span_id: SpanId::from_u64(i + 1),
                parent_span_id: (i % 4 != 0).then(|| SpanId::from_u64(i - i % 4 + 1)),
                name: format!("op{}", i % 5).into(),
                kind: [SpanKind::Server, SpanKind::Client, SpanKind::Internal][(i % 3) as usize],
                start_ns: start,
                end_ns: start + 20_000 + i * 1_000,
                attributes,
                events: vec![SpanEvent {
                    time_ns: start + 10_000,
                    name: "message".into(),
                    attributes: event,
                    ..SpanEvent::default()
                }],
                status: if i % 7 == 0 {
                    Status { code: StatusCode::Error, message: "boom".into() }
                } else {
                    Status::default()
                },
                resource: services[(i % 3) as usize].clone(),
                ..Span::default()
            }
        })
        .collect()
}
