"""OTLP peer for weft's tests: the official OpenTelemetry Python SDK and protobuf classes.

    otlp_sdk.py write DIR   records spans with the SDK (every attribute type, events, links,
                            status, span kinds, dropped counts, three resources, several
                            scopes) and writes them as
                              DIR/sdk.pb          OTLP protobuf (opentelemetry-exporter-otlp-proto-common)
                              DIR/sdk.otlp.json   OTLP/JSON (opentelemetry-exporter-otlp-json-common: hex ids)
                              DIR/sdk.pbjson.json protobuf's json_format of the same request (base64 ids)
                              DIR/expected.json   the canonical content (see canon below)
    otlp_sdk.py read FILE   parses FILE (.pb: protobuf, else OTLP/JSON) with the official classes — OTLP protobuf with
                            ExportTraceServiceRequest.FromString, OTLP/JSON (hex ids) with
                            json_format.Parse after the spec's id rule, refusing unknown
                            fields — and prints its canonical content.

The canonical content is a JSON list of spans in file order, every field spelled out; the
Rust test builds the same form from weft's spans and compares.
"""

import base64
import json
import logging
import struct
import sys
from pathlib import Path

from google.protobuf import json_format
from opentelemetry import trace
from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans as encode_json_spans
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as encode_proto_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState


def value(v):
    k = v.WhichOneof("value")
    if k is None:
        return {"empty": None}
    if k == "string_value":
        return {"string": v.string_value}
    if k == "bool_value":
        return {"bool": v.bool_value}
    if k == "int_value":
        return {"int": str(v.int_value)}
    if k == "double_value":
        return {"double": v.double_value, "bits": struct.pack(">d", v.double_value).hex()}
    if k == "bytes_value":
        return {"bytes": v.bytes_value.hex()}
    if k == "array_value":
        return {"array": [value(x) for x in v.array_value.values]}
    if k == "kvlist_value":
        return {"kvlist": attrs(v.kvlist_value.values)}
    raise ValueError(f"unexpected AnyValue field {k}")


def attrs(kvs):
    return [[kv.key, value(kv.value) if kv.HasField("value") else {"empty": None}] for kv in kvs]


def canon(req):
    out = []
    for rs in req.resource_spans:
        resource = {
            "attributes": attrs(rs.resource.attributes),
            "dropped_attributes_count": rs.resource.dropped_attributes_count,
            "schema_url": rs.schema_url,
        }
        for ss in rs.scope_spans:
            scope = {
                "name": ss.scope.name,
                "version": ss.scope.version,
                "attributes": attrs(ss.scope.attributes),
                "dropped_attributes_count": ss.scope.dropped_attributes_count,
                "schema_url": ss.schema_url,
            }
            for s in ss.spans:
                out.append({
                    "resource": resource,
                    "scope": scope,
                    "trace_id": s.trace_id.hex(),
                    "span_id": s.span_id.hex(),
                    "parent_span_id": s.parent_span_id.hex(),
                    "trace_state": s.trace_state,
                    "flags": s.flags,
                    "name": s.name,
                    "kind": s.kind,
                    "start": str(s.start_time_unix_nano),
                    "end": str(s.end_time_unix_nano),
                    "attributes": attrs(s.attributes),
                    "dropped_attributes_count": s.dropped_attributes_count,
                    "events": [{
                        "time": str(e.time_unix_nano),
                        "name": e.name,
                        "attributes": attrs(e.attributes),
                        "dropped_attributes_count": e.dropped_attributes_count,
                    } for e in s.events],
                    "dropped_events_count": s.dropped_events_count,
                    "links": [{
                        "trace_id": l.trace_id.hex(),
                        "span_id": l.span_id.hex(),
                        "trace_state": l.trace_state,
                        "attributes": attrs(l.attributes),
                        "dropped_attributes_count": l.dropped_attributes_count,
                        "flags": l.flags,
                    } for l in s.links],
                    "dropped_links_count": s.dropped_links_count,
                    "status": {"code": s.status.code, "message": s.status.message},
                })
    return out


EVERY_TYPE = {
    "str": "hello, wörld \"quoted\" \n newline",
    "empty.str": "",
    "bool.true": True,
    "bool.false": False,
    "int": 42,
    "int.negative": -9007199254740993,
    "int.max": 2**63 - 1,
    "int.min": -(2**63),
    "double": 3.141592653589793,
    "double.tiny": 5e-324,
    "double.big": 1.7976931348623157e308,
    "double.negative_zero": -0.0,
    "bytes": b"\x00\x01\xfeweft",
    "array.str": ["a", "b", ""],
    "array.bool": [True, False],
    "array.int": [1, -2, 3],
    "array.double": [0.5, -1.25],
    "array.empty": [],
    "none": None,
    "array.mixed": ["a", 1, 2.5, True, None, b"\x02", [3, 4], {"k": "v"}],
    "kvlist": {"tenant": "acme", "tier": 2, "nested": {"ok": True, "ratio": 0.25}},
}


def record():
    exporter = InMemorySpanExporter()
    providers = []

    def provider(resource, limits=None):
        p = TracerProvider(resource=resource, span_limits=limits) if limits else TracerProvider(resource=resource)
        p.add_span_processor(SimpleSpanProcessor(exporter))
        providers.append(p)
        return p

    shop = provider(Resource.create(
        {"service.name": "shop", "service.version": "1.2.3", "host.name": "node-1", "deployment.flags": [1, 2]},
        schema_url="https://opentelemetry.io/schemas/1.26.0",
    ))
    pay = provider(Resource.create({"service.name": "payments", "process.pid": 4242, "cloud.bytes": b"\x07"}))
    limited = provider(
        Resource.create({"service.name": "limited"}),
        SpanLimits(max_span_attributes=2, max_events=1, max_links=1, max_event_attributes=1, max_link_attributes=1),
    )

    http = shop.get_tracer("shop.http", "0.9.1", schema_url="https://opentelemetry.io/schemas/1.21.0",
                           attributes={"scope.attr": "x", "scope.n": 7})
    db = shop.get_tracer("shop.db")
    rpc = pay.get_tracer("payments.rpc", "2.0.0")
    lim = limited.get_tracer("limited.scope")

    remote = SpanContext(
        trace_id=0x0AF7651916CD43DD8448EB211C80319C,
        span_id=0xB7AD6B7169203331,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
        trace_state=TraceState([("vendor", "opaque-1"), ("weft", "t61rcWkgMzE")]),
    )
    other = SpanContext(trace_id=0x1234, span_id=0x99, is_remote=False, trace_flags=TraceFlags(0))
    t = 1_700_000_000_123_456_789
    with http.start_as_current_span(
        "GET /cart", context=trace.set_span_in_context(NonRecordingSpan(remote)),
        kind=SpanKind.SERVER, attributes=EVERY_TYPE, start_time=t,
        links=[Link(other, {"link.kind": "batch", "link.n": 3}),
               Link(remote, {"weft.link.relation": "follows_from"})],
        end_on_exit=False,
    ) as root:
        root.add_event("cache miss", {"key": "cart:7", "bytes": b"\x01", "sizes": [1, 2]}, timestamp=t + 1_000)
        root.add_event("no attributes", timestamp=t + 2_001)
        with db.start_as_current_span("SELECT cart", kind=SpanKind.CLIENT, start_time=t + 5_000, end_on_exit=False) as q:
            q.set_attribute("db.rows", 3)
            q.set_status(Status(StatusCode.OK))
            q.end(end_time=t + 9_999)
        with rpc.start_as_current_span("charge", kind=SpanKind.PRODUCER, start_time=t + 10_000, end_on_exit=False) as c:
            c.set_status(Status(StatusCode.ERROR, "card declined"))
            c.record_exception(ValueError("declined"), timestamp=t + 11_000)
            c.end(end_time=t + 20_000)
        with http.start_as_current_span("render", kind=SpanKind.INTERNAL, start_time=t + 21_000, end_on_exit=False) as r:
            r.end(end_time=t + 22_000)
        with rpc.start_as_current_span("consume", kind=SpanKind.CONSUMER, start_time=t + 23_000, end_on_exit=False) as c:
            c.end(end_time=t + 24_000)
        with lim.start_as_current_span(
            "limited", start_time=t + 25_000, end_on_exit=False,
            attributes={"a": 1, "b": 2, "c": 3, "d": 4},
            links=[Link(other, {"x": 1, "y": 2}), Link(remote)],
        ) as l:
            l.add_event("e1", {"p": 1, "q": 2}, timestamp=t + 25_500)
            l.add_event("e2", timestamp=t + 25_600)
            l.end(end_time=t + 26_000)
        root.end(end_time=t + 30_000)
    for p in providers:
        p.shutdown()
    return exporter.get_finished_spans()


def write(out):
    logging.disable(logging.WARNING)  # the span limits below make the SDK warn on purpose
    out = Path(out)
    spans = record()
    req = encode_proto_spans(spans)
    assert isinstance(req, ExportTraceServiceRequest)
    (out / "sdk.pb").write_bytes(req.SerializeToString())
    (out / "sdk.otlp.json").write_text(encode_json_spans(spans).to_json())
    (out / "sdk.pbjson.json").write_text(json_format.MessageToJson(req))
    (out / "expected.json").write_text(json.dumps(canon(req), indent=1))


def hex_ids_to_base64(node, key=None):
    """OTLP/JSON writes ids as hex; protobuf's JSON mapping wants base64 for bytes."""
    if isinstance(node, dict):
        return {k: hex_ids_to_base64(v, k) for k, v in node.items()}
    if isinstance(node, list):
        return [hex_ids_to_base64(v) for v in node]
    if key in ("traceId", "spanId", "parentSpanId") and isinstance(node, str):
        return base64.b64encode(bytes.fromhex(node)).decode()
    return node


def read(path):
    data = Path(path).read_bytes()
    req = ExportTraceServiceRequest()
    if not path.endswith(".pb"):
        doc = hex_ids_to_base64(json.loads(data))
        json_format.ParseDict(doc, req, ignore_unknown_fields=False)
    else:
        req.ParseFromString(data)
    json.dump(canon(req), sys.stdout, indent=1)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "write":
        write(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "read":
        read(sys.argv[2])
    else:
        sys.exit(__doc__)
