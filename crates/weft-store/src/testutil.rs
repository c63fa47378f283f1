//! Test helpers.

use std::sync::Arc;

use weft_model::{
    KeyValue, Link, LinkRelation, Resource, Scope, Span, SpanEvent, SpanId, SpanKind, Status, StatusCode,
    TraceId, Value,
};

use crate::arrow_rows::attrs;

/// A span exercising every field (trace = i / 4, root every 4th).
pub(crate) fn span(i: u64) -> Span {
    let mut resource = Resource::service(format!("svc-{}", i % 3));
    resource.attributes.push("host.name", "h1");
    resource.schema_url = "https://opentelemetry.io/schemas/1.21.0".into();
    Span {
        trace_id: TraceId::from_u128(0x1000 + (i / 4) as u128),
        span_id: SpanId::from_u64(i + 1),
        parent_span_id: if i.is_multiple_of(4) { None } else { Some(SpanId::from_u64(i)) },
        trace_state: if i == 1 { "k=v".into() } else { String::new() },
        flags: 0x101,
        name: format!("op-{}", i % 5).into(),
        kind: SpanKind::from_i32((i % 6) as i32),
        start_ns: 1_700_000_000_000_000_000 + i * 1000,
        end_ns: 1_700_000_000_000_000_000 + i * 1000 + 500,
        status: Status { code: StatusCode::from_i32((i % 3) as i32), message: "m".into() },
        attributes: attrs(&[
            ("http.method", "GET".into()),
            ("http.status_code", Value::I64(200)),
            ("ratio", Value::F64(0.25)),
            ("ok", Value::Bool(true)),
            ("blob", Value::Bytes(vec![1, 2])),
            ("list", Value::Array(vec![Value::I64(1), Value::Str("x".into())])),
            ("kv", Value::Map(vec![KeyValue::new("a", 1i64)])),
            ("nothing", Value::Empty),
        ]),
        events: vec![
            SpanEvent {
                time_ns: 5,
                name: "cs".into(),
                attributes: attrs(&[("k", "v".into())]),
                dropped_attributes_count: 1,
            },
            SpanEvent { time_ns: 4, name: "sr".into(), ..Default::default() },
        ],
        links: if i.is_multiple_of(2) {
            vec![Link {
                trace_id: TraceId::from_u128(9),
                span_id: SpanId::from_u64(9),
                trace_state: "a=b".into(),
                relation: LinkRelation::CausedBy,
                attributes: attrs(&[("x", Value::I64(1))]),
                dropped_attributes_count: 2,
                flags: 1,
            }]
        } else {
            vec![]
        },
        resource: Arc::new(resource),
        scope: Arc::new(Scope {
            name: "lib".into(),
            version: "1.0".into(),
            attributes: attrs(&[("s", "t".into())]),
            dropped_attributes_count: 3,
            schema_url: "u".into(),
        }),
        dropped_attributes_count: 1,
        dropped_events_count: 2,
        dropped_links_count: 3,
    }
}
