#!/usr/bin/env python3
"""Sends spans to a weft collector with py_zipkin (Zipkin v2 JSON over its SimpleHTTPTransport,
POST /api/v2/spans) and prints (JSON, stdout) every payload py_zipkin sent: what the collector
must give back.

    zipkin_send.py HOST PORT
"""

import json
import sys

from py_zipkin import Kind
from py_zipkin.encoding import Encoding
from py_zipkin.transport import SimpleHTTPTransport
from py_zipkin.zipkin import zipkin_span


class Recording(SimpleHTTPTransport):
    """py_zipkin's own HTTP transport (which asserts 202), remembering each payload."""

    def __init__(self, host, port):
        super().__init__(host, port)
        self.payloads = []

    def send(self, payload):
        super().send(payload)
        self.payloads.append(json.loads(payload))


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    transport = Recording(sys.argv[1], int(sys.argv[2]))
    t0 = 1_700_000_100.000_123  # seconds, as py_zipkin takes them
    with zipkin_span(
        service_name="py-zipkin-frontend",
        span_name="GET /cart",
        transport_handler=transport,
        encoding=Encoding.V2_JSON,
        sample_rate=100.0,
        kind=Kind.SERVER,
        use_128bit_trace_id=True,
        host="10.1.2.3",
        port=8080,
        binary_annotations={"http.method": "GET", "http.path": "/cart", "user": "größe ✓"},
        timestamp=t0,
        duration=0.025,
    ) as root:
        root.add_annotation("cache.miss", timestamp=t0 + 0.001)
        root.update_binary_annotations({"http.status_code": "200"})
        with zipkin_span(
            service_name="py-zipkin-frontend",
            span_name="get cart items",
            kind=Kind.CLIENT,
            binary_annotations={"db.system": "redis"},
            timestamp=t0 + 0.002,
            duration=0.004,
        ) as child:
            child.add_sa_binary_annotation(port=6379, service_name="redis", host="10.9.8.7")
            child.add_annotation("retry", timestamp=t0 + 0.003)
        with zipkin_span(
            service_name="py-zipkin-frontend",
            span_name="render",
            binary_annotations={"error": "template missing"},
            timestamp=t0 + 0.010,
            duration=0.002,
        ):
            pass
    if not transport.payloads:
        raise SystemExit("py_zipkin sent nothing")
    json.dump({"payloads": transport.payloads}, sys.stdout)


if __name__ == "__main__":
    main()
