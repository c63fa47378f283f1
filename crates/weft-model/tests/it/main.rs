//! weft-model integration tests: property tests of every codec, the real peers (the
//! OpenTelemetry Python SDK, the official protobuf classes, py_zipkin), bad input.

mod jaeger;
mod otlp;
mod peers;
mod strategies;
mod zipkin;
