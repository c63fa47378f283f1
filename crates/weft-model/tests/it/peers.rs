//! Real peers: files written by the official OpenTelemetry Python SDK (its OTLP protobuf and
//! OTLP/JSON encoders, and protobuf's `json_format`) and by py_zipkin, generated in the test
//! run. weft must read exactly what the Python side reports, and what weft writes must parse
//! back — with the official Python protobuf classes — to identical content.
//!
//! The Python scripts live in `tests/peers/`; their packages in `.ci/requirements.txt`
//! (installed by `.ci/test`).

use std::path::{Path, PathBuf};
use std::process::Command;

use prost::Message;
use serde_json::{Value as J, json};
use weft_model::codec::stream::{self, Format, WriterOptions};
use weft_model::codec::{Losses, otlp, zipkin};
use weft_model::{LinkRelation, Span, Value};

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers").join(name)
}

/// Runs a peer script with the peers' Python; fails the test with its stderr if it fails.
fn python(script_name: &str, args: &[&Path]) -> Vec<u8> {
    let py = weft_testkit::python();
    let out = Command::new(&py)
        .arg(script(script_name))
        .args(args.iter().map(|a| a.as_os_str()))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} ({e}); run .ci/test to install the peers", py.display()));
    assert!(
        out.status.success(),
        "{script_name} {args:?} failed (are .ci/requirements.txt's packages installed? run .ci/test):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn python_write(script_name: &str, target: &Path) {
    let py = weft_testkit::python();
    let out =
        Command::new(&py).arg(script(script_name)).arg("write").arg(target).output().unwrap_or_else(|e| {
            panic!("cannot run {} ({e}); run .ci/test to install the peers", py.display())
        });
    assert!(
        out.status.success(),
        "{script_name} write failed (are .ci/requirements.txt's packages installed? run .ci/test):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---------------------------------------------------------------------------------------
// The canonical form (the same as `canon` in tests/peers/otlp_sdk.py).

fn value(v: &Value) -> J {
    match v {
        Value::Str(s) => json!({ "string": s }),
        Value::Bool(b) => json!({ "bool": b }),
        Value::I64(i) => json!({ "int": i.to_string() }),
        Value::F64(f) => json!({ "double": f, "bits": hex(&f.to_be_bytes()) }),
        Value::Bytes(b) => json!({ "bytes": hex(b) }),
        Value::Array(a) => json!({ "array": a.iter().map(value).collect::<Vec<_>>() }),
        Value::Map(m) => {
            json!({ "kvlist": m.iter().map(|kv| json!([kv.key, value(&kv.value)])).collect::<Vec<_>>() })
        }
        Value::Empty => json!({ "empty": null }),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn attrs(a: &weft_model::Attributes) -> J {
    J::Array(a.iter().map(|kv| json!([kv.key, value(&kv.value)])).collect())
}

fn canon(spans: &[Span]) -> J {
    J::Array(
        spans
            .iter()
            .map(|s| {
                json!({
                    "resource": {
                        "attributes": attrs(&s.resource.attributes),
                        "dropped_attributes_count": s.resource.dropped_attributes_count,
                        "schema_url": s.resource.schema_url,
                    },
                    "scope": {
                        "name": s.scope.name,
                        "version": s.scope.version,
                        "attributes": attrs(&s.scope.attributes),
                        "dropped_attributes_count": s.scope.dropped_attributes_count,
                        "schema_url": s.scope.schema_url,
                    },
                    "trace_id": s.trace_id.to_string(),
                    "span_id": s.span_id.to_string(),
                    "parent_span_id": s.parent_span_id.map(|p| p.to_string()).unwrap_or_default(),
                    "trace_state": s.trace_state,
                    "flags": s.flags,
                    "name": s.name,
                    "kind": s.kind as i32,
                    "start": s.start_ns.to_string(),
                    "end": s.end_ns.to_string(),
                    "attributes": attrs(&s.attributes),
                    "dropped_attributes_count": s.dropped_attributes_count,
                    "events": s.events.iter().map(|e| json!({
                        "time": e.time_ns.to_string(),
                        "name": e.name,
                        "attributes": attrs(&e.attributes),
                        "dropped_attributes_count": e.dropped_attributes_count,
                    })).collect::<Vec<_>>(),
                    "dropped_events_count": s.dropped_events_count,
                    "links": s.links.iter().map(|l| {
                        // On the wire the relation is the link attribute `weft.link.relation`, last.
                        let mut a = attrs(&l.attributes);
                        if l.relation != LinkRelation::Unspecified
                            && let J::Array(v) = &mut a
                        {
                            v.push(json!([weft_model::conv::LINK_RELATION, { "string": l.relation.as_str() }]));
                        }
                        json!({
                            "trace_id": l.trace_id.to_string(),
                            "span_id": l.span_id.to_string(),
                            "trace_state": l.trace_state,
                            "attributes": a,
                            "dropped_attributes_count": l.dropped_attributes_count,
                            "flags": l.flags,
                        })
                    }).collect::<Vec<_>>(),
                    "dropped_links_count": s.dropped_links_count,
                    "status": { "code": s.status.code as i32, "message": s.status.message },
                })
            })
            .collect(),
    )
}

fn explicit_status(
    mut req: otlp::proto::ExportTraceServiceRequest,
) -> otlp::proto::ExportTraceServiceRequest {
    for rs in &mut req.resource_spans {
        for ss in &mut rs.scope_spans {
            for s in &mut ss.spans {
                s.status.get_or_insert_with(Default::default);
            }
        }
    }
    req
}

/// Reads a whole file through the streaming reader of the detected format.
fn read_detected(path: &Path) -> (Format, Vec<Span>) {
    let bytes = std::fs::read(path).unwrap();
    let format = Format::detect(&bytes).unwrap_or_else(|| panic!("{}: format not detected", path.display()));
    let mut r = stream::reader(format, bytes.as_slice(), false).unwrap();
    let mut spans = Vec::new();
    while r.next_batch(&mut spans, 3).unwrap_or_else(|e| panic!("{}: {e}", path.display())) {}
    (format, spans)
}

fn assert_same(what: &str, got: &J, want: &J) {
    if got != want {
        let (g, w) = (got.as_array().unwrap(), want.as_array().unwrap());
        assert_eq!(g.len(), w.len(), "{what}: span counts differ");
        for (a, b) in g.iter().zip(w) {
            assert_eq!(a, b, "{what}: first differing span");
        }
    }
}

#[test]
fn otlp_python_sdk_files_read_exactly_and_weft_output_parses_back_identically() {
    let dir = tempfile::tempdir().unwrap();
    python_write("otlp_sdk.py", dir.path());
    let expected: J =
        serde_json::from_slice(&std::fs::read(dir.path().join("expected.json")).unwrap()).unwrap();
    assert!(expected.as_array().is_some_and(|a| a.len() == 6), "the SDK recorded 6 spans");

    // weft reads the SDK's protobuf, the SDK's OTLP/JSON (hex ids) and protobuf's json_format
    // (base64 ids, enum names): exactly what Python reports.
    let mut from_pb = Vec::new();
    for (file, format) in [
        ("sdk.pb", Format::OtlpProto),
        ("sdk.otlp.json", Format::OtlpJson),
        ("sdk.pbjson.json", Format::OtlpJson),
    ] {
        let path = dir.path().join(file);
        let (detected, spans) = read_detected(&path);
        assert_eq!(detected, format, "{file}");
        assert_same(file, &canon(&spans), &expected);
        let whole = if format == Format::OtlpProto {
            otlp::decode_proto(&std::fs::read(&path).unwrap()).unwrap()
        } else {
            otlp::decode_json(&std::fs::read(&path).unwrap()).unwrap()
        };
        assert_eq!(whole, spans, "{file}: whole-buffer and streaming decoders agree");
        if format == Format::OtlpProto {
            from_pb = spans;
        }
    }

    // Grouping too: weft's request equals the SDK's request, message for message, in the
    // official generated types — up to the SDK writing an empty `status` where weft leaves a
    // default status out (the same content in proto3).
    let sdk_req = otlp::proto::ExportTraceServiceRequest::decode(
        std::fs::read(dir.path().join("sdk.pb")).unwrap().as_slice(),
    )
    .unwrap();
    assert_eq!(explicit_status(otlp::to_request(&from_pb)), explicit_status(sdk_req));

    // weft writes (whole-buffer and streaming, small batches); the official Python classes
    // parse it back to the same content.
    let whole_pb = dir.path().join("weft.pb");
    std::fs::write(&whole_pb, otlp::encode_proto(&from_pb)).unwrap();
    let whole_json = dir.path().join("weft.otlp.json");
    std::fs::write(&whole_json, otlp::encode_json(&from_pb)).unwrap();
    let mut streamed = Vec::new();
    for format in [Format::OtlpProto, Format::OtlpJson] {
        let path = dir
            .path()
            .join(format!("weft-streamed.{}", if format == Format::OtlpProto { "pb" } else { "json" }));
        let mut buf = Vec::new();
        let mut w = stream::writer(format, &mut buf, WriterOptions::default()).unwrap();
        for chunk in from_pb.chunks(2) {
            w.write(chunk).unwrap();
        }
        assert!(w.finish().unwrap().is_empty(), "OTLP carries everything");
        std::fs::write(&path, buf).unwrap();
        streamed.push(path);
    }
    for path in [&whole_pb, &whole_json, &streamed[0], &streamed[1]] {
        let out = python("otlp_sdk.py", &[Path::new("read"), path]);
        let parsed: J = serde_json::from_slice(&out).unwrap();
        assert_same(&format!("Python reading {}", path.display()), &parsed, &expected);
    }
}

/// Zipkin allows spans in any order and annotations in any order.
fn zipkin_normalized(arrays: impl IntoIterator<Item = J>) -> Vec<J> {
    let mut spans: Vec<J> = Vec::new();
    for a in arrays {
        for mut s in a.as_array().cloned().unwrap_or_else(|| panic!("not a JSON array: {a}")) {
            if let Some(J::Array(ann)) = s.get_mut("annotations") {
                ann.sort_by_key(|a| a.to_string());
            }
            spans.push(s);
        }
    }
    spans.sort_by_key(|s| s.to_string());
    spans
}

#[test]
fn py_zipkin_v2_json_reads_and_writes_back_equivalently() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("py_zipkin.json");
    python_write("zipkin_py.py", &file);
    let text = std::fs::read_to_string(&file).unwrap();
    let payloads: Vec<J> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(payloads.len() >= 2, "py_zipkin sent one payload per trace");
    let want = zipkin_normalized(payloads);
    assert_eq!(want.len(), 6);

    // weft reads all payloads (one array per line) — detected as Zipkin v2 JSON.
    let (format, spans) = read_detected(&file);
    assert_eq!(format, Format::ZipkinV2Json);
    assert_eq!(spans.len(), 6);
    let call = spans.iter().find(|s| s.name == "call payments").expect("client span");
    assert_eq!(call.kind, weft_model::SpanKind::Client);
    assert_eq!(call.status.code, weft_model::StatusCode::Error);
    assert_eq!(call.status.message, "timeout after 3 retries");
    assert_eq!(call.service_name(), "frontend");
    assert_eq!(call.attributes.get_str(weft_model::conv::PEER_SERVICE), Some("payments"));
    assert_eq!(call.attributes.get(weft_model::conv::PEER_PORT), Some(&Value::I64(9090)));
    assert_eq!(call.events.len(), 1);

    // ... and writes it back equivalently, with nothing lost.
    let mut losses = Losses::default();
    let back = zipkin::encode_v2_json_with(&spans, &mut losses);
    assert!(losses.is_empty(), "{losses}");
    let got = zipkin_normalized([serde_json::from_slice::<J>(&back).unwrap()]);
    assert_eq!(got, want);

    // OTLP carries everything Zipkin has: Zipkin → OTLP protobuf → Zipkin is the identity.
    let via_otlp = otlp::decode_proto(&otlp::encode_proto(&spans)).unwrap();
    let again = zipkin::encode_v2_json_with(&via_otlp, &mut losses);
    assert!(losses.is_empty(), "{losses}");
    assert_eq!(zipkin_normalized([serde_json::from_slice::<J>(&again).unwrap()]), want);
    // So does Zipkin's proto3 form.
    let via_proto = zipkin::decode_v2_proto(&zipkin::encode_v2_proto(&spans)).unwrap();
    let again = zipkin::encode_v2_json_with(&via_proto, &mut losses);
    assert_eq!(zipkin_normalized([serde_json::from_slice::<J>(&again).unwrap()]), want);
}
