use super::*;
use crate::codec::{ErrorKind, fixture};

/// The example span of Zipkin's v2 API documentation, plus a shared server side.
const V2_EXAMPLE: &str = r#"[
  {
    "id": "352bff9a74ca9ad2",
    "traceId": "5af7183fb1d4cf5f",
    "parentId": "6b221d5bc9e6496c",
    "name": "get /api",
    "timestamp": 1556604172355737,
    "duration": 1431,
    "kind": "SERVER",
    "localEndpoint": { "serviceName": "backend", "ipv4": "192.168.99.1", "port": 3306 },
    "remoteEndpoint": { "ipv4": "172.19.0.2", "port": 58648 },
    "annotations": [ { "timestamp": 1556604172355800, "value": "wr" } ],
    "tags": { "http.method": "GET", "http.path": "/api", "mvc.controller.class": "Frontend", "error": "500 oops", "count": 3 },
    "shared": true
  }
]"#;

#[test]
fn reads_the_documented_v2_example() {
    let spans = decode_v2_json(V2_EXAMPLE.as_bytes()).unwrap();
    assert_eq!(spans.len(), 1);
    let s = &spans[0];
    assert_eq!(s.trace_id.to_string(), "00000000000000005af7183fb1d4cf5f");
    assert_eq!(s.span_id.to_string(), "352bff9a74ca9ad2");
    assert_eq!(s.parent_span_id.map(|p| p.to_string()).as_deref(), Some("6b221d5bc9e6496c"));
    assert_eq!(s.kind, SpanKind::Server);
    assert_eq!(s.start_ns, 1556604172355737000);
    assert_eq!(s.end_ns, 1556604172355737000 + 1_431_000);
    assert_eq!(s.service_name(), "backend");
    assert_eq!(s.attributes.get_str(conv::LOCAL_IPV4), Some("192.168.99.1"));
    assert_eq!(s.attributes.get(conv::LOCAL_PORT), Some(&Value::I64(3306)));
    assert_eq!(s.attributes.get_str(conv::PEER_IP), Some("172.19.0.2"));
    assert_eq!(s.attributes.get_str("http.path"), Some("/api"));
    assert_eq!(s.attributes.get_str("count"), Some("3"));
    assert_eq!(s.attributes.get(conv::ZIPKIN_SHARED), Some(&Value::Bool(true)));
    assert_eq!(s.status, Status { code: StatusCode::Error, message: "500 oops".into() });
    assert_eq!(s.events[0].name, "wr");
    assert_eq!(s.events[0].time_ns, 1556604172355800000);
}

fn json_eq(a: &[u8], b: &[u8]) {
    let a: serde_json::Value = serde_json::from_slice(a).unwrap();
    let b: serde_json::Value = serde_json::from_slice(b).unwrap();
    assert_eq!(a, b);
}

#[test]
fn v2_json_zipkin_round_trip_is_exact() {
    let mut text = V2_EXAMPLE.replace(", \"count\": 3", "");
    text.retain(|c| !c.is_whitespace() || c == ' ');
    let spans = decode_v2_json(text.as_bytes()).unwrap();
    let mut losses = Losses::default();
    let back = encode_v2_json_with(&spans, &mut losses);
    json_eq(text.as_bytes(), &back);
    assert!(losses.is_empty(), "{losses}");
}

#[test]
fn lenient_v2_rejects_bad_spans_only() {
    let text = br#"[{"traceId":"a","id":"1","name":"ok"},{"traceId":"zz","id":"2"},{"traceId":"a","id":"3","kind":"SIDEWAYS"},{"traceId":"a","id":4},{"traceId":"a","id":"5","name":"ok2"}]"#;
    let (spans, rej) = decode_v2_json_lenient(text).unwrap();
    assert_eq!(spans.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["ok", "ok2"]);
    assert_eq!(rej.count, 3);
    let e = rej.first_error.unwrap();
    assert_eq!(e.field, "[1].traceId");
    let e = decode_v2_json(text).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidId);
}

#[test]
fn v2_bad_input_names_position() {
    let e = decode_v2_json(b"[{\"traceId\":\"a\",\n\"id\":\"1\",\n\"timestamp\":\"x\"}]").unwrap_err();
    assert_eq!(e.field, "[0].timestamp");
    assert!(matches!(e.position, crate::codec::Position::Line { line: 3, .. }), "{e}");
    let e = decode_v2_json(b"[{\"traceId\":\"a\",\"id\":\"1\"},").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Truncated);
    let e = decode_v2_json(b"{\"resourceSpans\":[]}").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Mismatch);
}

/// BlkKin-style v1: one RPC logged by both hosts under one span id, plus a local span with
/// an integer key/value.
const V1_BLKKIN: &str = r#"[
 {"traceId":"00000000000004d2","name":"osd_op","id":"0000000000000007","parentId":"0000000000000003",
  "annotations":[
    {"timestamp":1000,"value":"cs","endpoint":{"serviceName":"rbd","ipv4":"10.0.0.1","port":6800}},
    {"timestamp":1100,"value":"sr","endpoint":{"serviceName":"osd.0","ipv4":"10.0.0.2","port":6801}},
    {"timestamp":1200,"value":"journal_write","endpoint":{"serviceName":"osd.0","ipv4":"10.0.0.2","port":6801}},
    {"timestamp":1800,"value":"ss","endpoint":{"serviceName":"osd.0","ipv4":"10.0.0.2","port":6801}},
    {"timestamp":1900,"value":"cr","endpoint":{"serviceName":"rbd","ipv4":"10.0.0.1","port":6800}}],
  "binaryAnnotations":[
    {"key":"object","value":"rbd_data.1","endpoint":{"serviceName":"rbd","ipv4":"10.0.0.1","port":6800}},
    {"key":"bytes","value":4096,"type":"I64","endpoint":{"serviceName":"osd.0","ipv4":"10.0.0.2","port":6801}},
    {"key":"sa","value":true,"type":"BOOL","endpoint":{"serviceName":"osd.0","ipv4":"10.0.0.2","port":6801}},
    {"key":"ca","value":true,"type":"BOOL","endpoint":{"serviceName":"rbd","ipv4":167772161,"port":6800}}]},
 {"traceId":1234,"name":"encode","id":8,"parentId":7,"timestamp":1300,"duration":50,
  "annotations":[],
  "binaryAnnotations":[{"key":"lc","value":"crush","endpoint":{"serviceName":"osd.0","ipv4":"10.0.0.2"}},
                       {"key":"ratio","value":0.5,"type":"DOUBLE","endpoint":{"serviceName":"osd.0"}}]}
]"#;

#[test]
fn v1_blkkin_shared_spans_split_into_client_and_server() {
    let spans = decode_v1_json(V1_BLKKIN.as_bytes()).unwrap();
    assert_eq!(spans.len(), 3);
    let (c, s, l) = (&spans[0], &spans[1], &spans[2]);
    assert_eq!(c.kind, SpanKind::Client);
    assert_eq!(s.kind, SpanKind::Server);
    assert_eq!(c.span_id, s.span_id);
    assert_eq!(c.trace_id, TraceId::from_u64(1234));
    assert_eq!(c.parent_span_id, Some(SpanId::from_u64(3)));
    assert_eq!((c.start_ns, c.end_ns), (1_000_000, 1_900_000));
    assert_eq!((s.start_ns, s.end_ns), (1_100_000, 1_800_000));
    assert_eq!(c.service_name(), "rbd");
    assert_eq!(s.service_name(), "osd.0");
    assert_eq!(s.attributes.get(conv::ZIPKIN_SHARED), Some(&Value::Bool(true)));
    assert_eq!(c.attributes.get(conv::ZIPKIN_SHARED), None);
    // Remote endpoints from the address annotations (ca's integer IPv4 = 10.0.0.1).
    assert_eq!(c.attributes.get_str(conv::PEER_SERVICE), Some("osd.0"));
    assert_eq!(s.attributes.get_str(conv::PEER_IP), Some("10.0.0.1"));
    // Typed key/values on the side that logged them.
    assert_eq!(s.attributes.get("bytes"), Some(&Value::I64(4096)));
    assert_eq!(c.attributes.get_str("object"), Some("rbd_data.1"));
    // The full timeline stays as events.
    assert_eq!(c.events.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["cs", "cr"]);
    assert_eq!(s.events.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["sr", "journal_write", "ss"]);
    // The local span: integer ids, lc endpoint, typed double.
    assert_eq!(l.kind, SpanKind::Unspecified);
    assert_eq!(l.span_id, SpanId::from_u64(8));
    assert_eq!(l.parent_span_id, Some(SpanId::from_u64(7)));
    assert_eq!(l.service_name(), "osd.0");
    assert_eq!((l.start_ns, l.end_ns), (1_300_000, 1_350_000));
    assert_eq!(l.attributes.get("ratio"), Some(&Value::F64(0.5)));
    assert_eq!(l.attributes.get_str("lc"), Some("crush"));
}

#[test]
fn v1_bad_input() {
    let (ok, rej) =
        decode_v1_json_lenient(br#"[{"traceId":"x1","id":"1"},{"traceId":"1","id":"2"}]"#).unwrap();
    assert_eq!((ok.len(), rej.count), (1, 1));
    let e = decode_v1_json(
        br#"[{"traceId":"1","id":"2","binaryAnnotations":[{"key":"n","value":"abc","type":"I32"}]}]"#,
    )
    .unwrap_err();
    assert!(e.field.contains("binaryAnnotations[n]"), "{e}");
    assert!(decode_v1_json(b"[{").is_err());
}

#[test]
fn endpoint_fields_beat_tags_and_non_addresses_stay_tags() {
    // A tag named like an endpoint attribute and the endpoint itself: keys stay unique.
    let text = br#"[{"traceId":"a","id":"1","remoteEndpoint":{"ipv4":"10.0.0.2","port":80},"tags":{"net.peer.ip":"443","net.peer.port":"x"}}]"#;
    let spans = decode_v2_json(text).unwrap();
    let keys: Vec<_> = spans[0].attributes.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, [conv::PEER_IP, conv::PEER_PORT]);
    assert_eq!(spans[0].attributes.get_str(conv::PEER_IP), Some("10.0.0.2"));
    // Values that are no address / port are written as tags, not dropped.
    let mut s = spans[0].clone();
    s.attributes = Attributes::new();
    s.attributes.push(conv::PEER_IP, "not-an-ip");
    s.attributes.push(conv::PEER_PORT, 70000i64);
    s.attributes.push(conv::LOCAL_IPV4, "::1");
    let mut losses = Losses::default();
    let json: serde_json::Value =
        serde_json::from_slice(&encode_v2_json_with(&[s.clone()], &mut losses)).unwrap();
    assert_eq!(json[0]["tags"]["net.peer.ip"], "not-an-ip");
    assert_eq!(json[0]["tags"]["net.peer.port"], "70000");
    assert_eq!(json[0]["localEndpoint"]["ipv6"], "::1");
    assert!(json[0].get("remoteEndpoint").is_none(), "{json}");
    let back = decode_v2_proto(&encode_v2_proto_with(&[s], &mut losses)).unwrap();
    assert_eq!(back[0].attributes.get_str(conv::PEER_IP), Some("not-an-ip"));
    assert_eq!(losses.get(proto::LOST_BAD_IP), 0);
}

/// Annotation values that carry event attributes are decoded straight into weft values: the
/// same values `json_to_value` makes of a `serde_json::Value` (sorted keys, last repeated key
/// wins, big integers as floats, nesting).
#[test]
fn json_values_decode_as_through_serde_json_value() {
    for text in [
        r#"{"b":1,"a":"x","c":[1,2.5,"s",null,true,{"z":1,"y":2}]}"#,
        r#"{"k":1,"k":2,"a":{"k":"first","k":"second"}}"#,
        r#"{"big":18446744073709551615,"neg":-9223372036854775808,"f":1e300,"e":"\u00e9\"q"}"#,
        r#"[{"x":{}},[],"",0,-0.0]"#,
        r#"{"very.long.attribute.key.beyond.inline":"and a value longer than twenty-four bytes"}"#,
    ] {
        let direct = serde_json::from_str::<JsonValue>(text).unwrap().0;
        let via = json_to_value(serde_json::from_str::<serde_json::Value>(text).unwrap());
        assert_eq!(direct, via, "{text}");
    }
    assert!(serde_json::from_str::<JsonValue>(r#"{"a":1"#).is_err());
    // An event: one key whose value is an object; anything else is the event's name.
    let e = annotation_to_event(2, r#"{"sent":{"id":1,"b":"x","id":2}}"#.into());
    assert_eq!((e.time_ns, e.name.as_str()), (2000, "sent"));
    assert_eq!(e.attributes.0, vec![KeyValue::new("b", "x"), KeyValue::new("id", 2i64)]);
    for plain in [r#"{"a":{},"b":{}}"#, r#"{"a":1}}"#, r#"{"a":[1]}}"#, "wr"] {
        let e = annotation_to_event(1, plain.into());
        assert_eq!((e.name.as_str(), e.attributes.len()), (plain, 0), "{plain}");
    }
}

/// The hand-written scanner (the fast path) answers what serde's path answers, or leaves the
/// input to it: on weft's own output with awkward strings, on hand-written variants, and on
/// every truncation and many one-byte corruptions of a small document.
#[test]
fn scanner_agrees_with_serde() {
    let serde_only = |b: &[u8]| v2::decode_fast(b);
    let mut spans = fixture::spans(200, 9);
    let bytes = encode_v2_json(&spans);
    assert_eq!(scan::decode(&bytes), serde_only(&bytes));
    assert!(scan::decode(&bytes).is_some(), "weft's own output takes the fast path");
    for (i, text) in
        ["\"quoted\" \\ / é 😀", "tab\tnew\nline\r", "\u{1}\u{1f}", "\u{7f}", ""].into_iter().enumerate()
    {
        spans[i].name = text.into();
        spans[i].attributes.set(format!("k{text}"), text);
        spans[i].events[0].name = text.into();
        let bytes = encode_v2_json(&spans);
        let fast = scan::decode(&bytes);
        // Control characters are written as `\u` escapes, which the scanner leaves to serde
        // (and the strings stay in the spans from then on).
        assert_eq!(fast.is_some(), i < 2, "{text:?}");
        assert!(fast.is_none() || fast == serde_only(&bytes), "{text:?}");
        assert_eq!(decode_v2_json(&bytes).unwrap(), serde_only(&bytes).unwrap());
    }
    for doc in [
        V2_EXAMPLE,
        "[]",
        " [ ] ",
        "[{}]",
        r#"[{"traceId":"1","id":"2"}]"#,
        r#"[ { "traceId" : "1" , "id" : "2" , "tags" : { } , "annotations" : [ ] } ] "#,
        r#"[{"traceId":"1","id":"2","name":null}]"#,
        r#"[{"traceId":"1","id":"2","id":"3"}]"#,
        r#"[{"traceId":"1","id":"2","other":1}]"#,
        r#"[{"traceId":"1","id":"2","timestamp":1.0,"duration":-1}]"#,
        r#"[{"traceId":"1","id":"2","timestamp":01}]"#,
        r#"[{"traceId":"1","id":"2","tags":{"a":"\u0041"}}]"#,
        r#"[{"traceId":"1","id":"2","localEndpoint":{"port":99999999999999999999}}]"#,
        r#"[{"traceId":"0","id":"2"}]"#,
        r#"[{"traceId":"1","id":"2","kind":"NOPE"}]"#,
        r#"[{"traceId":"1","id":"2","debug":true,"shared":false}] x"#,
        "[{\"traceId\":\"1\",\"id\":\"2\",\"name\":\"\u{e9}\"}]",
    ] {
        let fast = scan::decode(doc.as_bytes());
        assert!(fast.is_none() || fast == serde_only(doc.as_bytes()), "{doc}");
    }
    let small = encode_v2_json(&fixture::spans(3, 2));
    for cut in 0..small.len() {
        let fast = scan::decode(&small[..cut]);
        assert!(fast.is_none() || fast == serde_only(&small[..cut]), "cut at {cut}");
    }
    for at in 0..small.len() {
        for byte in [b'"', b'\\', b'{', b'}', b',', b'0', b' ', 0x01, 0xff] {
            let mut m = small.clone();
            m[at] = byte;
            let fast = scan::decode(&m);
            assert!(fast.is_none() || fast == serde_only(&m), "{byte:#x} at {at}");
        }
    }
}

#[test]
fn find_special_is_exact() {
    let naive = |b: &[u8], from: usize| {
        let end = (from..b.len()).find(|&i| matches!(b[i], b'"' | b'\\' | 0..=0x1f))?;
        Some((end, b[from..end].iter().any(|&c| c >= 0x80)))
    };
    // xorshift64 from seed 3: the same inputs on every run.
    let mut state = 3u64;
    let mut below = move |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n.max(1)
    };
    let alphabet = [b'a', b'"', b'\\', 0, 0x1f, 0x20, 0x21, 0x5b, 0x5d, 0x7f, 0x80, 0xc3, 0xa9, 0xff];
    for _ in 0..20_000 {
        let len = below(24) as usize;
        let v: Vec<u8> = (0..len)
            .map(|_| if below(4) == 0 { alphabet[below(alphabet.len() as u64) as usize] } else { b'x' })
            .collect();
        let from = below(len as u64 + 1) as usize;
        assert_eq!(scan::find_special(&v, from), naive(&v, from), "{v:?} from {from}");
    }
}
