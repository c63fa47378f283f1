//! The agent's direct OTLP encoder writes exactly the bytes of weft-model's encoder.

use std::sync::Arc;

use proptest::prelude::*;
use weft_model::{
    Attributes, Resource, Scope, Span, SpanEvent, SpanId, SpanKind, Status, StatusCode, TraceId, Value,
};

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        ".{0,12}".prop_map(Value::from),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::I64),
        any::<f64>().prop_map(Value::F64),
        proptest::collection::vec(any::<u8>(), 0..20).prop_map(Value::Bytes),
        Just(Value::Empty),
    ]
}

fn attrs() -> impl Strategy<Value = Attributes> {
    proptest::collection::vec(("[a-z.]{0,10}", value()), 0..5)
        .prop_map(|v| Attributes(v.into_iter().map(|(k, v)| weft_model::KeyValue::new(k, v)).collect()))
}

fn span(resources: Vec<Arc<Resource>>, scopes: Vec<Arc<Scope>>) -> impl Strategy<Value = Span> {
    (
        any::<u128>(),
        any::<u64>(),
        proptest::option::of(any::<u64>()),
        ".{0,16}",
        0i32..6,
        any::<u64>(),
        any::<u64>(),
        attrs(),
        proptest::collection::vec((any::<u64>(), ".{0,8}", attrs(), 0u32..3), 0..4),
        (0u32..3, 0u32..3, prop_oneof![Just(0u32), Just(0x300), any::<u32>()]),
        (0..resources.len(), 0..scopes.len()),
    )
        .prop_map(
            move |(t, s, p, name, kind, start, end, attributes, events, (da, de, flags), (r, sc))| Span {
                trace_id: TraceId::from_u128(t),
                span_id: SpanId::from_u64(s),
                parent_span_id: p.map(SpanId::from_u64),
                name: name.into(),
                kind: SpanKind::from_i32(kind),
                start_ns: start,
                end_ns: end,
                attributes,
                events: events
                    .into_iter()
                    .map(|(time_ns, name, attributes, d)| SpanEvent {
                        time_ns,
                        name: name.into(),
                        attributes,
                        dropped_attributes_count: d,
                    })
                    .collect(),
                dropped_attributes_count: da,
                dropped_events_count: de,
                flags,
                resource: resources[r].clone(),
                scope: scopes[sc].clone(),
                ..Span::default()
            },
        )
}

fn resources() -> Vec<Arc<Resource>> {
    let mut b = Resource::service("b");
    b.attributes.push("process.pid", 7i64);
    b.dropped_attributes_count = 2;
    b.schema_url = "https://x/schema".into();
    vec![Arc::new(Resource::service("a")), Arc::new(b), Arc::new(Resource::service("a"))]
}

fn scopes() -> Vec<Arc<Scope>> {
    vec![
        Arc::new(Scope { name: "weft-probe".into(), version: "0.1.0".into(), ..Scope::default() }),
        Arc::new(Scope::named("other")),
    ]
}

proptest! {
    #[test]
    fn direct_encoding_is_byte_identical(spans in proptest::collection::vec(span(resources(), scopes()), 0..12)) {
        let direct = weft_agent::otlp::encode_direct(&spans).expect("no links, arrays or status");
        prop_assert_eq!(&direct, &weft_model::codec::otlp::encode_proto(&spans));
    }
}

#[test]
fn spans_it_cannot_encode_fall_back() {
    let mut s = Span { trace_id: TraceId::from_u128(1), span_id: SpanId::from_u64(2), ..Span::default() };
    s.status = Status { code: StatusCode::Error, message: "x".into() };
    assert!(weft_agent::otlp::encode_direct(std::slice::from_ref(&s)).is_none());
    assert_eq!(
        weft_agent::otlp::encode(std::slice::from_ref(&s)),
        weft_model::codec::otlp::encode_proto(&[s.clone()])
    );
    s.status = Status::default();
    s.attributes.push("a", Value::Array(vec![Value::I64(1)]));
    assert!(weft_agent::otlp::encode_direct(std::slice::from_ref(&s)).is_none());
}
