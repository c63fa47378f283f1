#!/usr/bin/env python3
"""Sends traces through the official OpenTelemetry Python SDK to several weft collectors in
turn, as an application behind a round-robin balancer would, until its stdin is closed (or
MAX_TRACES traces are sent), then prints (JSON, stdout) the ids of the spans whose export
succeeded, with the collector each went to.

    otel_roundrobin.py MAX_TRACES URL [URL...]     # URL = http://host:port/v1/traces

Each collector has its own BatchSpanProcessor + OTLPSpanExporter (protobuf over HTTP, gzip); a
span processor hands each ended span to the next of them, so the spans of one trace go to
different collectors. A wrapper around each exporter records what it exported successfully: a
failed export (a collector that is down past the exporter's retries) is counted, not recorded.
"""

import json
import sys
import threading
import time

from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind


class Recording(SpanExporter):
    """Delegates to the real exporter; remembers the ids of the spans it exported."""

    def __init__(self, inner, index):
        self.inner = inner
        self.index = index
        self.exported = []
        self.failed = 0

    def export(self, spans):
        r = self.inner.export(spans)
        if r == SpanExportResult.SUCCESS:
            for s in spans:
                c = s.get_span_context()
                self.exported.append([format(c.trace_id, "032x"), format(c.span_id, "016x"), self.index])
        else:
            self.failed += len(spans)
        return r

    def shutdown(self):
        self.inner.shutdown()

    def force_flush(self, timeout_millis=30000):
        return True


class RoundRobin(SpanProcessor):
    """Hands each ended span to the next processor in turn."""

    def __init__(self, processors):
        self.processors = processors
        self.next = 0
        self.lock = threading.Lock()

    def on_start(self, span, parent_context=None):
        pass

    def on_end(self, span):
        with self.lock:
            p = self.processors[self.next % len(self.processors)]
            self.next += 1
        p.on_end(span)

    def shutdown(self):
        for p in self.processors:
            p.shutdown()

    def force_flush(self, timeout_millis=30000):
        return all(p.force_flush(timeout_millis) for p in self.processors)


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    max_traces = int(sys.argv[1])
    urls = sys.argv[2:]
    exporters = [
        Recording(OTLPSpanExporter(endpoint=u, compression=Compression.Gzip, timeout=5), i)
        for i, u in enumerate(urls)
    ]
    processors = [BatchSpanProcessor(e, schedule_delay_millis=200, max_export_batch_size=64) for e in exporters]
    provider = TracerProvider(resource=Resource.create({"service.name": "otel-roundrobin"}))
    provider.add_span_processor(RoundRobin(processors))
    tracer = provider.get_tracer("weft.collectors-test")

    stop = threading.Event()

    def watch_stdin():
        sys.stdin.read()
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    traces = 0
    spans = 0
    while traces < max_traces and not stop.is_set():
        with tracer.start_as_current_span("checkout", kind=SpanKind.SERVER) as root:
            root.set_attribute("trace.seq", traces)
            for k in range(2 + traces % 4):
                with tracer.start_as_current_span(f"step-{k}", kind=SpanKind.CLIENT) as step:
                    step.set_attribute("step", k)
                    with tracer.start_as_current_span("db.query", kind=SpanKind.INTERNAL):
                        spans += 1
                    spans += 1
            spans += 1
        traces += 1
        time.sleep(0.01)
    provider.shutdown()
    exported = [row for e in exporters for row in e.exported]
    json.dump(
        {
            "traces": traces,
            "spans": spans,
            "failed": sum(e.failed for e in exporters),
            "exported": exported,
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
