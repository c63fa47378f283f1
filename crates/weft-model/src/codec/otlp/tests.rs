use super::*;
use crate::codec::Position;

const SPEC_EXAMPLE: &str = r#"{
  "resourceSpans": [
    {
      "resource": {
        "attributes": [
          { "key": "service.name", "value": { "stringValue": "my.service" } }
        ]
      },
      "scopeSpans": [
        {
          "scope": { "name": "my.library", "version": "1.0.0",
            "attributes": [ { "key": "my.scope.attribute", "value": { "stringValue": "some scope attribute" } } ] },
          "spans": [
            {
              "traceId": "5B8EFFF798038103D269B633813FC60C",
              "spanId": "EEE19B7EC3C1B174",
              "parentSpanId": "EEE19B7EC3C1B173",
              "name": "I'm a server span",
              "startTimeUnixNano": "1544712660000000000",
              "endTimeUnixNano": 1544712661000000000,
              "kind": 2,
              "futureField": {"ignored": [1, 2, 3]},
              "attributes": [
                { "key": "my.span.attr", "value": { "stringValue": "some value" } },
                { "key": "i", "value": { "intValue": 42 } },
                { "key": "i2", "value": { "intValue": "-7" } },
                { "key": "d", "value": { "doubleValue": "NaN" } },
                { "key": "b", "value": { "bytesValue": "3q2+7w==" } },
                { "key": "arr", "value": { "arrayValue": { "values": [ { "boolValue": true }, {} ] } } },
                { "key": "kv", "value": { "kvlistValue": { "values": [ { "key": "x", "value": { "doubleValue": 1.5 } } ] } } }
              ],
              "status": { "code": 2, "message": "boom" }
            }
          ]
        }
      ]
    }
  ]
}"#;

#[test]
fn reads_the_spec_example_with_extensions() {
    let spans = decode_json(SPEC_EXAMPLE.as_bytes()).unwrap();
    assert_eq!(spans.len(), 1);
    let s = &spans[0];
    assert_eq!(s.trace_id.to_string(), "5b8efff798038103d269b633813fc60c");
    assert_eq!(s.parent_span_id, Some(SpanId::from_u64(0xEEE19B7EC3C1B173)));
    assert_eq!(s.kind, SpanKind::Server);
    assert_eq!((s.start_ns, s.end_ns), (1544712660000000000, 1544712661000000000));
    assert_eq!(s.service_name(), "my.service");
    assert_eq!(s.scope.name, "my.library");
    assert_eq!(s.status, Status { code: StatusCode::Error, message: "boom".into() });
    assert_eq!(s.attributes.get("i"), Some(&Value::I64(42)));
    assert_eq!(s.attributes.get("i2"), Some(&Value::I64(-7)));
    assert!(s.attributes.get("d").and_then(Value::as_f64).is_some_and(f64::is_nan));
    assert_eq!(s.attributes.get("b"), Some(&Value::Bytes(vec![0xde, 0xad, 0xbe, 0xef])));
    assert_eq!(s.attributes.get("arr"), Some(&Value::Array(vec![Value::Bool(true), Value::Empty])));
    assert_eq!(s.attributes.get("kv"), Some(&Value::Map(vec![KeyValue::new("x", 1.5)])));
}

#[test]
fn reads_protobuf_generic_json_mapping() {
    // What `google.protobuf.json_format.MessageToJson` writes: base64 ids, enum names,
    // int64 as strings.
    let text = r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{
        "traceId":"W47/95gDgQPSabYzgT/GDA==","spanId":"7uGbfsPBsXQ=","name":"x",
        "kind":"SPAN_KIND_CLIENT","startTimeUnixNano":"1","endTimeUnixNano":"2",
        "status":{"code":"STATUS_CODE_OK"}}]}]}]}"#;
    let s = &decode_json(text.as_bytes()).unwrap()[0];
    assert_eq!(s.trace_id.to_string(), "5b8efff798038103d269b633813fc60c");
    assert_eq!(s.span_id.to_string(), "eee19b7ec3c1b174");
    assert_eq!(s.kind, SpanKind::Client);
    assert_eq!(s.status.code, StatusCode::Ok);
}

#[test]
fn lenient_json_rejects_bad_ids_and_keeps_the_rest() {
    let text = r#"{"resourceSpans":[{"scopeSpans":[{"spans":[
        {"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708","name":"good"},
        {"traceId":"00000000000000000000000000000000","spanId":"0102030405060708","name":"zero"},
        {"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"xyz","name":"short"},
        {"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060709","name":"good2"}
    ]}]}]}"#;
    let (spans, rej) = decode_json_lenient(text.as_bytes()).unwrap();
    assert_eq!(spans.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["good", "good2"]);
    assert_eq!(rej.count, 2);
    let e = rej.first_error.unwrap();
    assert_eq!(e.field, "resourceSpans[0].scopeSpans[0].spans[1].traceId");
    assert_eq!(e.kind, ErrorKind::InvalidId);
    let strict = decode_json(text.as_bytes()).unwrap_err();
    assert!(strict.to_string().contains("spans[1].traceId"), "{strict}");
}

#[test]
fn json_type_errors_name_line_and_path() {
    let text = "{\"resourceSpans\":[\n{\"scopeSpans\":[{\"spans\":[\n{\"traceId\":\"0102030405060708090a0b0c0d0e0f10\",\n \"name\": 12}]}]}]}";
    let e = decode_json(text.as_bytes()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidValue);
    assert_eq!(e.field, "resourceSpans[0].scopeSpans[0].spans[0].name");
    assert!(matches!(e.position, Position::Line { line: 4, .. }), "{e}");
}
