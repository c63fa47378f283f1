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
        text().prop_map(|s| Value::Str(s.into())),
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
        name: name.into(),
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
            name: a.5.into(),
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

/// A key that no codec treats specially (`otel.*`, `error`, `span.kind`, endpoint keys, ...).
pub fn plain_key() -> impl Strategy<Value = String> {
    "k\\.[a-z0-9_.]{0,12}"
}

/// Attributes with unique plain keys and the given values.
pub fn unique_attributes(values: impl Strategy<Value = Value>) -> impl Strategy<Value = Attributes> {
    proptest::collection::btree_map(plain_key(), values, 0..6)
        .prop_map(|m| m.into_iter().map(|(k, v)| KeyValue::new(k, v)).collect())
}

/// Whole microseconds (what Zipkin and Jaeger carry), within `u64` ns.
pub fn micros_ns() -> impl Strategy<Value = u64> {
    (0u64..(1 << 52)).prop_map(|us| us * 1000)
}

/// A status as the non-OTLP formats carry it (messages only on errors).
pub fn tag_status() -> impl Strategy<Value = Status> {
    prop_oneof![
        Just(Status::default()),
        Just(Status { code: StatusCode::Ok, message: String::new() }),
        text().prop_map(|message| Status { code: StatusCode::Error, message }),
    ]
}

/// A JSON-typed value (what a Zipkin annotation's attributes carry): no bytes, finite doubles,
/// maps with unique keys.
pub fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        text().prop_map(|s| Value::Str(s.into())),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::I64),
        finite().prop_map(Value::F64),
        Just(Value::Empty),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            proptest::collection::btree_map("[a-z]{1,6}", inner, 0..3)
                .prop_map(|m| Value::Map(m.into_iter().map(|(k, v)| KeyValue::new(k, v)).collect())),
        ]
    })
}

/// Spans within what Zipkin v2 carries: string tags, µs times, CLIENT/SERVER/PRODUCER/CONSUMER
/// or no kind, resources that are just a service name, scopes with a name and version, events
/// whose attributes are JSON values, no links.
pub fn zipkin_spans() -> impl Strategy<Value = Vec<Span>> {
    let resource = proptest::option::of("[a-z][a-z0-9-]{0,8}")
        .prop_map(|svc| Arc::new(svc.map(Resource::service).unwrap_or_default()));
    let scope = proptest::option::of(("[a-z.]{1,8}", "[0-9.]{0,5}")).prop_map(|s| {
        Arc::new(s.map(|(name, version)| Scope { name, version, ..Scope::default() }).unwrap_or_default())
    });
    let event = (micros_ns(), "[ -z|~]{0,12}", unique_attributes(json_value())).prop_map(
        |(time_ns, name, attributes)| SpanEvent {
            time_ns,
            name: name.into(),
            attributes,
            dropped_attributes_count: 0,
        },
    );
    let kind = prop_oneof![
        Just(SpanKind::Unspecified),
        Just(SpanKind::Client),
        Just(SpanKind::Server),
        Just(SpanKind::Producer),
        Just(SpanKind::Consumer)
    ];
    let span = (
        (trace_id(), span_id(), proptest::option::of(span_id()), text(), kind),
        (micros_ns(), (0u64..1 << 40).prop_map(|d| d * 1000), tag_status()),
        (
            unique_attributes(text().prop_map(|s| Value::Str(s.into()))),
            proptest::collection::vec(event, 0..3),
        ),
        (resource, scope),
    )
        .prop_map(|(a, b, c, d)| Span {
            trace_id: a.0,
            span_id: a.1,
            parent_span_id: a.2,
            name: a.3.into(),
            kind: a.4,
            start_ns: b.0,
            end_ns: b.0 + b.1,
            status: b.2,
            attributes: c.0,
            events: c.1,
            resource: d.0,
            scope: d.1,
            ..Span::default()
        });
    proptest::collection::vec(span, 0..6)
}

/// A scalar value Jaeger's typed tags carry.
pub fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        text().prop_map(|s| Value::Str(s.into())),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::I64),
        finite().prop_map(Value::F64),
        proptest::collection::vec(any::<u8>(), 0..8).prop_map(Value::Bytes),
    ]
}

/// Spans within what Jaeger JSON carries: typed scalar tags, µs times, a process per service
/// (with typed tags), FOLLOWS_FROM / CHILD_OF references without attributes, trace state,
/// flags; no dropped counts, schema URLs or scope attributes.
pub fn jaeger_spans() -> impl Strategy<Value = Vec<Span>> {
    let resource = ("[a-z][a-z0-9-]{0,8}", unique_attributes(scalar())).prop_map(|(svc, attrs)| {
        let mut r = Resource::service(svc);
        r.attributes.0.extend(attrs.0);
        Arc::new(r)
    });
    let scope = proptest::option::of(("[a-z.]{1,8}", "[0-9.]{0,5}")).prop_map(|s| {
        Arc::new(s.map(|(name, version)| Scope { name, version, ..Scope::default() }).unwrap_or_default())
    });
    let event = (micros_ns(), text(), unique_attributes(scalar())).prop_map(|(time_ns, name, attributes)| {
        SpanEvent { time_ns, name: name.into(), attributes, dropped_attributes_count: 0 }
    });
    let link = (trace_id(), span_id(), any::<bool>()).prop_map(|(trace_id, span_id, follows)| Link {
        trace_id,
        span_id,
        relation: if follows { LinkRelation::FollowsFrom } else { LinkRelation::ChildOf },
        ..Link::default()
    });
    let span = (
        (trace_id(), span_id(), proptest::option::of(span_id()), text(), kind(), any::<u32>(), text()),
        (micros_ns(), (0u64..1 << 40).prop_map(|d| d * 1000), tag_status()),
        (
            unique_attributes(scalar()),
            proptest::collection::vec(event, 0..3),
            proptest::collection::vec(link, 0..3),
        ),
        (resource, scope),
    )
        .prop_map(|(a, b, c, d)| {
            let mut links = c.2;
            if a.2.is_none() {
                // Without a parent, a CHILD_OF reference in the same trace *is* the parent.
                for l in &mut links {
                    if l.trace_id == a.0 {
                        l.relation = LinkRelation::FollowsFrom;
                    }
                }
            }
            Span {
                trace_id: a.0,
                span_id: a.1,
                parent_span_id: a.2,
                name: a.3.into(),
                kind: a.4,
                flags: a.5,
                trace_state: a.6,
                start_ns: b.0,
                end_ns: b.0 + b.1,
                status: b.2,
                attributes: c.0,
                events: c.1,
                links,
                resource: d.0,
                scope: d.1,
                ..Span::default()
            }
        });
    proptest::collection::vec(span, 0..6)
}
