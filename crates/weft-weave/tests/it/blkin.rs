//! BlkKin spans from a real LTTng recording of a program with BlkKin's `zipkin` provider.

use weft_model::{EventKind, SpanId, SpanKind, TraceId, Value, conv};
use weft_sources::ctf::{CtfReader, DecodeOptions};
use weft_testkit::lttng::{RecordOptions, record};
use weft_weave::blkin::BlkkinWeaver;

#[test]
fn blkin_events_recorded_by_lttng_become_zipkin_style_spans() {
    let rec = record(&RecordOptions { all_types: 20, small: 0, blkin: 1, ..Default::default() });
    let mut r = CtfReader::open(
        &rec.trace,
        weft_model::SourceId(0),
        DecodeOptions { strict: true, ..Default::default() },
    )
    .unwrap();
    let mut evs = Vec::new();
    while r.next_batch(&mut evs, 256).unwrap() > 0 {}
    let mut w = BlkkinWeaver::default();
    let used = evs.iter().filter(|e| w.push(e)).count();
    assert_eq!(used, 12, "the scenario's BlkKin events");
    let (spans, stats) = w.finish();
    assert_eq!((stats.events, stats.malformed, stats.evicted), (12, 0, 0), "{stats:?}");
    assert_eq!(spans.len(), 4, "{spans:#?}");

    let time_of = |ann: &str| {
        evs.iter()
            .find_map(|e| match &e.kind {
                EventKind::Tracepoint(t) if t.fields.get_str("event") == Some(ann) => Some(e.time_ns),
                _ => None,
            })
            .unwrap()
    };
    let tid = evs
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::Tracepoint(t) if &*t.name == "zipkin:timestamp" => t.tid,
            _ => None,
        })
        .unwrap();

    let t1 = TraceId::from_u64(0x1234_5678_90ab_cdef);
    let by = |kind: SpanKind, id: u64| {
        spans.iter().find(|s| s.kind == kind && s.span_id == SpanId::from_u64(id)).unwrap()
    };
    let client = by(SpanKind::Client, 0x11);
    let server = by(SpanKind::Server, 0x11);
    let encode = by(SpanKind::Unspecified, 0x22);
    let scrub = by(SpanKind::Unspecified, -5i64 as u64);

    assert_eq!(client.trace_id, t1);
    assert_eq!(client.name, "osd_op");
    assert!(client.is_root());
    assert_eq!(client.service_name(), "rbd");
    assert_eq!((client.start_ns, client.end_ns), (time_of("cs"), time_of("cr")));
    assert!(client.duration_ns() >= 600_000, "the program sleeps 600 µs between cs and cr");
    assert_eq!(client.attributes.get_str("object"), Some("rbd_data.1"));
    assert_eq!(client.attributes.get_str(conv::LOCAL_IPV4), Some("10.0.0.1"));
    assert_eq!(client.attributes.get(conv::LOCAL_PORT), Some(&Value::I64(6800)));
    assert_eq!(client.attributes.get(conv::THREAD_ID), Some(&Value::I64(tid as i64)));
    assert_eq!(client.events.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["cs", "cr"]);

    assert_eq!(server.trace_id, t1);
    assert_eq!(server.service_name(), "osd.0");
    assert_eq!((server.start_ns, server.end_ns), (time_of("sr"), time_of("ss")));
    assert!(client.start_ns < server.start_ns && server.end_ns < client.end_ns);
    assert_eq!(server.attributes.get("bytes"), Some(&Value::I64(4096)));
    assert_eq!(server.attributes.get(conv::ZIPKIN_SHARED), Some(&Value::Bool(true)));
    assert_eq!(server.attributes.get(conv::LOCAL_PORT), Some(&Value::I64(6801)));
    assert_eq!(
        server.events.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
        ["sr", "journal_write", "ss"]
    );

    assert_eq!(encode.name, "encode");
    assert_eq!(encode.parent_span_id, Some(SpanId::from_u64(0x11)));
    assert_eq!((encode.start_ns, encode.end_ns), (time_of("encode start"), time_of("encode end")));
    assert_eq!(encode.attributes.get("ratio_pct"), Some(&Value::I64(50)));
    assert!(server.start_ns < encode.start_ns && encode.end_ns < server.end_ns);

    assert_eq!(scrub.trace_id, TraceId::from_u64(0xfedc_ba98_7654_3210));
    assert_eq!(scrub.trace_id.to_u128() >> 64, 0, "64-bit ids widen with a zero high half");
    assert!(scrub.is_root());
    assert_eq!(scrub.service_name(), "osd.1");
    assert_eq!(scrub.attributes.get(conv::LOCAL_IPV4), None, "an empty ip is no ip");
    assert_eq!((scrub.start_ns, scrub.end_ns), (time_of("start"), time_of("end")));
}
