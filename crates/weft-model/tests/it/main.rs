//! weft-model integration tests: every codec on weft-synth's sample spans, property tests of
//! every codec, streaming and whole-input conversion, the real peers (the OpenTelemetry Python
//! SDK, the official protobuf classes, py_zipkin), bad input.

mod chrome;
mod convert;
mod jaeger;
mod otlp;
mod peers;
mod strategies;
mod stream;
mod zipkin;
