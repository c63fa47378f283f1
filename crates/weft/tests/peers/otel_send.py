#!/usr/bin/env python3
"""Sends a fixed set of spans to a weft collector through the official OpenTelemetry Python
SDK and one of its own OTLP exporters, then prints (JSON, stdout) the spans exactly as the SDK
recorded them: what the collector must give back.

    otel_send.py http-proto URL     # opentelemetry-exporter-otlp-proto-http (gzip), URL = .../v1/traces
    otel_send.py http-json  URL     # opentelemetry-exporter-otlp-json-http,      URL = .../v1/traces
    otel_send.py grpc       HOST:PORT  # opentelemetry-exporter-otlp-proto-grpc (insecure)

The spans go through the SDK's BatchSpanProcessor (the pipeline an application uses); a
wrapper around the exporter records every export result, and the script fails (exit 1) unless
every export succeeded. The record of what was sent comes from the SDK's InMemorySpanExporter
on the same TracerProvider.
"""

import json
import sys

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState


def make_exporter(mode, target):
    if mode == "http-proto":
        from opentelemetry.exporter.otlp.proto.http import Compression
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=target, compression=Compression.Gzip, timeout=10)
    if mode == "http-json":
        from opentelemetry.exporter.otlp.json.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=target, timeout=10)
    if mode == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=target, insecure=True, timeout=10)
    raise SystemExit(f"unknown mode {mode!r}: use http-proto, http-json or grpc")


class Recording(SpanExporter):
    """Delegates to the real exporter and remembers each result."""

    def __init__(self, inner):
        self.inner = inner
        self.results = []
        self.spans = 0

    def export(self, spans):
        r = self.inner.export(spans)
        self.results.append(r)
        self.spans += len(spans)
        return r

    def shutdown(self):
        self.inner.shutdown()

    def force_flush(self, timeout_millis=30000):
        return True


def typed(v):
    """A value with its OTLP type, as the SDK holds it."""
    if isinstance(v, bool):
        return {"type": "bool", "value": v}
    if isinstance(v, int):
        return {"type": "int", "value": v}
    if isinstance(v, float):
        return {"type": "double", "value": v}
    if isinstance(v, str):
        return {"type": "string", "value": v}
    if isinstance(v, (bytes, bytearray)):
        return {"type": "bytes", "value": bytes(v).hex()}
    if isinstance(v, (list, tuple)):
        return {"type": "array", "value": [typed(x) for x in v]}
    raise TypeError(f"unexpected attribute value {v!r}")


def attrs(a):
    return [{"key": k, **typed(v)} for k, v in (a or {}).items()]


def hex_trace(i):
    return format(i, "032x")


def hex_span(i):
    return format(i, "016x")


def describe(s):
    ctx = s.get_span_context()
    return {
        "trace_id": hex_trace(ctx.trace_id),
        "span_id": hex_span(ctx.span_id),
        "parent_span_id": hex_span(s.parent.span_id) if s.parent else None,
        "trace_state": ctx.trace_state.to_header(),
        "name": s.name,
        "kind": s.kind.name,
        "start_ns": s.start_time,
        "end_ns": s.end_time,
        "status_code": s.status.status_code.name,
        "status_message": s.status.description or "",
        "attributes": attrs(s.attributes),
        "events": [{"name": e.name, "time_ns": e.timestamp, "attributes": attrs(e.attributes)} for e in s.events],
        "links": [
            {
                "trace_id": hex_trace(l.context.trace_id),
                "span_id": hex_span(l.context.span_id),
                # The SDK's OTLP encoders (protobuf and JSON, 1.45) do not send a link's trace
                # state: the collector cannot receive it.
                "trace_state": "",
                "sdk_trace_state": l.context.trace_state.to_header(),
                "attributes": attrs(l.attributes),
            }
            for l in s.links
        ],
        "resource": attrs(s.resource.attributes),
        "resource_schema_url": s.resource.schema_url or "",
        "scope_name": s.instrumentation_scope.name,
        "scope_version": s.instrumentation_scope.version or "",
        "scope_attributes": attrs(s.instrumentation_scope.attributes),
    }


def generate(tracer, mode):
    """A small but complete workload: every span kind, every attribute type, events with and
    without attributes, links (local and to a remote context with trace state), statuses
    unset/ok/error, a parent from a remote context (W3C trace state) and explicit times."""
    t0 = 1_700_000_000_123_456_789  # explicit ns timestamps: not multiples of 1 µs
    every_type = {
        "http.request.method": "POST",
        "http.route": "/checkout/{id}",
        "text.unicode": "größe ✓ 日本",
        "http.response.status_code": 201,
        "big.int": 9007199254740993,  # 2^53 + 1: survives only if ints stay ints
        "negative.int": -42,
        "ratio": 0.1,
        "latency.ms": 12.5,
        "cache.hit": True,
        "retry": False,
        "tags": ["a", "b", "c"],
        "ports": [80, 443, -1],
        "weights": [0.25, 1.5],
        "flags": [True, False],
    }
    root = tracer.start_span("POST /checkout", kind=SpanKind.SERVER, attributes=every_type, start_time=t0)
    root.add_event("request.received", timestamp=t0 + 1_001)
    root.add_event(
        "cache.lookup",
        attributes={"key": "cart:42", "hit": False, "size": 3, "cost": 0.75, "keys": ["x", "y"]},
        timestamp=t0 + 2_500_123,
    )
    root_ctx = trace.set_span_in_context(root)
    charge = tracer.start_span(
        "charge card",
        context=root_ctx,
        kind=SpanKind.CLIENT,
        attributes={"rpc.system": "grpc", "rpc.method": "Charge", "peer.service": "payments", "amount": 1999},
        start_time=t0 + 3_000_007,
    )
    charge.add_event(
        "exception",
        attributes={"exception.type": "CardDeclined", "exception.message": "card declined", "attempt": 2},
        timestamp=t0 + 9_000_001,
    )
    charge.set_status(Status(StatusCode.ERROR, "card declined"))
    charge.end(end_time=t0 + 9_500_003)

    remote = SpanContext(
        trace_id=0x0AF7651916CD43DD8448EB211C80319C,
        span_id=0x00F067AA0BA902B7,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
        trace_state=TraceState([("congo", "t61rcWkgMzE"), ("rojo", "00f067aa0ba902b7")]),
    )
    internal = tracer.start_span(
        "compute totals",
        context=root_ctx,
        kind=SpanKind.INTERNAL,
        links=[
            Link(root.get_span_context(), {"link.kind": "batch", "link.weight": 3}),
            Link(remote, {"remote": True}),
        ],
        start_time=t0 + 10_000_000,
    )
    internal.set_status(Status(StatusCode.OK))
    internal.end(end_time=t0 + 11_234_567)

    producer = tracer.start_span(
        "orders publish",
        context=root_ctx,
        kind=SpanKind.PRODUCER,
        attributes={"messaging.system": "kafka", "messaging.destination.name": "orders"},
        start_time=t0 + 12_000_000,
    )
    producer.end(end_time=t0 + 12_400_000)
    root.set_status(Status(StatusCode.OK))
    root.end(end_time=t0 + 20_000_000)

    # A consumer in the same trace as a remote parent: parent id from the remote context and
    # the W3C trace state carried on.
    consumer = tracer.start_span(
        "orders process",
        context=trace.set_span_in_context(NonRecordingSpan(remote)),
        kind=SpanKind.CONSUMER,
        attributes={"messaging.system": "kafka", "messaging.operation": "process", "mode": mode},
        start_time=t0 + 30_000_000,
    )
    consumer.end(end_time=t0 + 31_000_000)


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    mode, target = sys.argv[1], sys.argv[2]
    resource = Resource.create(
        {
            "service.name": f"py-shop-{mode}",
            "service.version": "2.0.1",
            "host.name": "peer-host",
            "process.pid": 4242,
            "deployment.canary": True,
            "cpu.share": 0.5,
            "service.tags": ["blue", "eu"],
        }
    )
    provider = TracerProvider(resource=resource)
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    exporter = Recording(make_exporter(mode, target))
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=60000))
    tracer = provider.get_tracer("weft.peer.test", "1.2.3", attributes={"scope.owner": "ci", "scope.rev": 7})
    generate(tracer, mode)
    if not provider.force_flush(30000):
        raise SystemExit("force_flush timed out")
    provider.shutdown()
    spans = memory.get_finished_spans()
    if not exporter.results or any(r != SpanExportResult.SUCCESS for r in exporter.results):
        raise SystemExit(f"export failed: {exporter.results}")
    if exporter.spans != len(spans):
        raise SystemExit(f"exported {exporter.spans} spans, recorded {len(spans)}")
    json.dump({"mode": mode, "exports": len(exporter.results), "spans": [describe(s) for s in spans]}, sys.stdout)


if __name__ == "__main__":
    main()
