"""Zipkin peer for weft's tests: py_zipkin, the Python Zipkin tracer.

    zipkin_py.py write FILE   traces a few requests with py_zipkin (128- and 64-bit trace ids,
                              SERVER/CLIENT/PRODUCER/local spans, local and remote endpoints
                              with IPv4/IPv6 and ports, tags including `error`, annotations)
                              with its V2 JSON encoding, and writes every payload its
                              transport handler was given, one JSON array per line.
"""

import sys
import time

from py_zipkin import Kind
from py_zipkin.encoding import Encoding
from py_zipkin.transport import BaseTransportHandler
from py_zipkin.zipkin import zipkin_span


class Capture(BaseTransportHandler):
    def __init__(self):
        self.payloads = []

    def get_max_payload_bytes(self):
        return None

    def send(self, payload):
        self.payloads.append(payload if isinstance(payload, str) else payload.decode())


def traffic(transport):
    with zipkin_span(
        service_name="frontend",
        span_name="GET /checkout",
        transport_handler=transport,
        sample_rate=100.0,
        encoding=Encoding.V2_JSON,
        kind=Kind.SERVER,
        use_128bit_trace_id=True,
        host="10.0.0.1",
        port=8080,
        binary_annotations={"http.method": "GET", "http.path": "/checkout", "user": "ünïcode \"q\""},
    ) as root:
        root.add_annotation("wire.recv", time.time())
        with zipkin_span(service_name="frontend", span_name="call payments", kind=Kind.CLIENT) as c:
            c.add_sa_binary_annotation(port=9090, service_name="payments", host="10.0.0.3")
            c.update_binary_annotations({"rpc.method": "Charge", "error": "timeout after 3 retries"})
            c.add_annotation("retry", time.time())
            time.sleep(0.002)
        with zipkin_span(service_name="frontend", span_name="render template") as local:
            local.update_binary_annotations({"template": "checkout.html", "bytes": 5120})
            time.sleep(0.001)
        with zipkin_span(service_name="frontend", span_name="publish order", kind=Kind.PRODUCER) as p:
            p.update_binary_annotations({"messaging.destination": "orders"})
        root.update_binary_annotations({"http.status_code": "200"})

    with zipkin_span(
        service_name="inventory",
        span_name="reserve",
        transport_handler=transport,
        sample_rate=100.0,
        encoding=Encoding.V2_JSON,
        kind=Kind.SERVER,
        host="::1",
        port=7000,
    ) as s:
        s.update_binary_annotations({"sku": "A-17", "count": 2})
        with zipkin_span(service_name="inventory", span_name="db query", kind=Kind.CLIENT) as q:
            q.add_sa_binary_annotation(service_name="postgres", host="2001:db8::9", port=5432)


def main():
    if len(sys.argv) != 3 or sys.argv[1] != "write":
        sys.exit(__doc__)
    transport = Capture()
    traffic(transport)
    with open(sys.argv[2], "w") as f:
        for p in transport.payloads:
            f.write(p.strip() + "\n")


if __name__ == "__main__":
    main()
