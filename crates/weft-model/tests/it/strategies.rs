//! proptest strategies for arbitrary spans (everything the model can hold).

use std::sync::Arc;

use proptest::prelude::*;
use weft_model::{
    Attributes, KeyValue, Link, LinkRelation, Resource, Scope, Span, SpanEvent, SpanId, SpanKind, Status,
    StatusCode, TraceId, Value,
};

pub fn trace_id() -> impl Strategy<Value = TraceId> {
    any::<u128>().prop_filter_map("non-zero", |v| (v != 0).then(|| TraceId::from_u128(v)))
}

pub fn span_id() -> impl Strategy<Value = SpanId> {
    any::<u64>().prop_filter_map("non-zero", |v| (v != 0).then(|| SpanId::from_u64(v)))
}

pub fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z][a-z0-9_.]{0,15}",
        Just("service.name".to_owned()),
        any::<String>().prop_map(|s| s.chars().take(12).collect()),
    ]
}

pub fn text() -> impl Strategy<Value = String> {
    prop_oneof![3 => "[ -~]{0,20}", 1 => any::<String>().prop_map(|s| s.chars().take(20).collect())]
}

/// A finite double (NaN never equals itself; NaN handling has its own tests).
pub fn finite() -> impl Strategy<Value = f64> {
    any::<f64>().prop_filter("finite", |f| f.is_finite())
}

pub fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        text().prop_map(Value::Str),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::I64),
        finite().prop_map(Value::F64),
        proptest::collection::vec(any::<u8>(), 0..12).prop_map(Value::Bytes),
        Just(Value::Empty),
    ];
    leaf.prop_recursive(2, 12, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::vec((key(), inner), 0..4)
                .prop_map(|kv| Value::Map(kv.into_iter().map(|(k, v)| KeyValue::new(k, v)).collect())),
        ]
    })
}

pub fn attributes() -> impl Strategy<Value = Attributes> {
    proptest::collection::vec((key(), value()), 0..6)
        .prop_map(|kv| kv.into_iter().map(|(k, v)| KeyValue::new(k, v)).collect())
}

pub fn kind() -> impl Strategy<Value = SpanKind> {
    (0i32..6).prop_map(SpanKind::from_i32)
}

pub fn status() -> impl Strategy<Value = Status> {
    ((0i32..3).prop_map(StatusCode::from_i32), text()).prop_map(|(code, message)| Status { code, message })
}

pub fn relation() -> impl Strategy<Value = LinkRelation> {
    prop_oneof![
        Just(LinkRelation::Unspecified),
        Just(LinkRelation::FollowsFrom),
        Just(LinkRelation::ChildOf),
        Just(LinkRelation::CausedBy)
    ]
}

pub fn event() -> impl Strategy<Value = SpanEvent> {
    (any::<u64>(), text(), attributes(), any::<u32>()).prop_map(|(time_ns, name, attributes, d)| SpanEvent {
        time_ns,
        name,
        attributes,
        dropped_attributes_count: d % 3,
    })
}

pub fn link() -> impl Strategy<Value = Link> {
    (trace_id(), span_id(), text(), relation(), attributes(), any::<u32>(), any::<u32>()).prop_map(
        |(trace_id, span_id, trace_state, relation, attributes, d, flags)| Link {
            trace_id,
            span_id,
            trace_state,
            relation,
            attributes,
            dropped_attributes_count: d % 3,
            flags,
        },
    )
}

pub fn resource() -> impl Strategy<Value = Arc<Resource>> {
    (attributes(), any::<u32>(), text(), text()).prop_map(|(mut attributes, d, url, svc)| {
        attributes.set("service.name", svc);
        Arc::new(Resource { attributes, dropped_attributes_count: d % 3, schema_url: url })
    })
}

pub fn scope() -> impl Strategy<Value = Arc<Scope>> {
    (text(), text(), attributes(), any::<u32>(), text()).prop_map(|(name, version, attributes, d, url)| {
        Arc::new(Scope { name, version, attributes, dropped_attributes_count: d % 3, schema_url: url })
    })
}

/// One span with the given resource and scope.
pub fn span_with(res: Arc<Resource>, sc: Arc<Scope>) -> impl Strategy<Value = Span> {
    (
        (trace_id(), span_id(), proptest::option::of(span_id()), text(), any::<u32>(), text(), kind()),
        (any::<u64>(), any::<u64>(), status(), attributes()),
        (proptest::collection::vec(event(), 0..3), proptest::collection::vec(link(), 0..3)),
        (any::<u32>(), any::<u32>(), any::<u32>()),
    )
        .prop_map(move |(a, b, c, d)| Span {
            trace_id: a.0,
            span_id: a.1,
            parent_span_id: a.2,
            trace_state: a.3,
            flags: a.4,
            name: a.5,
            kind: a.6,
            start_ns: b.0,
            end_ns: b.1,
            status: b.2,
            attributes: b.3,
            events: c.0,
            links: c.1,
            resource: Arc::clone(&res),
            scope: Arc::clone(&sc),
            dropped_attributes_count: d.0 % 5,
            dropped_events_count: d.1 % 5,
            dropped_links_count: d.2 % 5,
        })
}

/// A batch: a few resources and scopes, spans drawing from them.
pub fn spans() -> impl Strategy<Value = Vec<Span>> {
    (proptest::collection::vec(resource(), 1..3), proptest::collection::vec(scope(), 1..3)).prop_flat_map(
        |(rs, ss)| {
            proptest::collection::vec((0..rs.len(), 0..ss.len()), 0..6).prop_flat_map(move |picks| {
                picks
                    .into_iter()
                    .map(|(r, s)| span_with(Arc::clone(&rs[r]), Arc::clone(&ss[s])))
                    .collect::<Vec<_>>()
            })
        },
    )
}
