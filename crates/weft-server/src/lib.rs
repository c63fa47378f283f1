//! # weft-server
//!
//! The collector: receivers (OTLP, Zipkin, weft-native), query APIs (Zipkin v2, Jaeger api_v3, SQL), control API, embedded UI
