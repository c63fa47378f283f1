//! Attribute keys weft reads and writes. OpenTelemetry semantic-convention names where one
//! exists; `weft.*` for weft's own.
//!
//! Every codec and weaver uses these constants, never string literals, so the mapping tables
//! in the codec docs and the SQL schema stay in one place.

/// Resource: logical service (Zipkin `localEndpoint.serviceName`, Jaeger `process.serviceName`).
pub const SERVICE_NAME: &str = "service.name";
/// Resource: instance of the service (a simulator instance, a process).
pub const SERVICE_INSTANCE_ID: &str = "service.instance.id";
/// Resource: host name.
pub const HOST_NAME: &str = "host.name";
/// Resource: process id.
pub const PROCESS_PID: &str = "process.pid";
/// Resource: what kind of component produced the spans (`host`, `nic`, `network`, `kernel`,
/// `app`; see [`crate::ComponentKind`]).
pub const COMPONENT_KIND: &str = "weft.component.kind";
/// Resource: the simulator or tool that produced the source data (`gem5`, `nicbm`, `ns-3`,
/// `qemu`, `lttng-ust`, `perf_event`).
pub const SOURCE_TOOL: &str = "weft.source.tool";

/// Span: thread that ran the span (OTel `thread.id`); used to attach kernel activity.
pub const THREAD_ID: &str = "thread.id";
/// Span: local endpoint IPv4 (Zipkin `localEndpoint.ipv4`).
pub const LOCAL_IPV4: &str = "net.host.ip";
/// Span: local endpoint port (Zipkin `localEndpoint.port`).
pub const LOCAL_PORT: &str = "net.host.port";
/// Span: remote endpoint service (Zipkin `remoteEndpoint.serviceName`).
pub const PEER_SERVICE: &str = "peer.service";
/// Span: remote endpoint IPv4/IPv6 (Zipkin `remoteEndpoint.ipv4`/`ipv6`).
pub const PEER_IP: &str = "net.peer.ip";
/// Span: remote endpoint port (Zipkin `remoteEndpoint.port`).
pub const PEER_PORT: &str = "net.peer.port";

/// Link: relation of the link ([`crate::LinkRelation`] text).
pub const LINK_RELATION: &str = "weft.link.relation";

/// Span: raw start time in the source's own clock unit (simulated ps, TSC ticks).
pub const RAW_START: &str = "weft.raw.start";
/// Span: raw end time in the source's own clock unit.
pub const RAW_END: &str = "weft.raw.end";
/// Span: set by read-time clock-skew adjustment: the shift applied, in ns (signed).
pub const SKEW_ADJUSTED_NS: &str = "weft.skew.adjusted_ns";

/// Span: Zipkin's `shared` flag (a server span that shares its id with the client span,
/// Zipkin v1 style), as `true`; absent otherwise.
pub const ZIPKIN_SHARED: &str = "weft.zipkin.shared";
/// Span: Zipkin's `debug` flag, as `true`; absent otherwise.
pub const ZIPKIN_DEBUG: &str = "weft.zipkin.debug";

/// Tag (Zipkin, Jaeger): status code name, `OK` or `ERROR` (OpenTelemetry's non-OTLP mapping).
pub const OTEL_STATUS_CODE: &str = "otel.status_code";
/// Tag (Zipkin, Jaeger): status description.
pub const OTEL_STATUS_DESCRIPTION: &str = "otel.status_description";
/// Tag (Zipkin, Jaeger): instrumentation scope name.
pub const OTEL_SCOPE_NAME: &str = "otel.scope.name";
/// Tag (Zipkin, Jaeger): instrumentation scope version.
pub const OTEL_SCOPE_VERSION: &str = "otel.scope.version";
/// Tag (Zipkin, Jaeger): deprecated spelling of [`OTEL_SCOPE_NAME`], read only.
pub const OTEL_LIBRARY_NAME: &str = "otel.library.name";
/// Tag (Zipkin, Jaeger): deprecated spelling of [`OTEL_SCOPE_VERSION`], read only.
pub const OTEL_LIBRARY_VERSION: &str = "otel.library.version";
/// Tag (Zipkin: the error message; Jaeger: `true`): the span failed.
pub const ERROR: &str = "error";
/// Tag (Jaeger, OpenTracing): span kind (`client`, `server`, `producer`, `consumer`, `internal`).
pub const SPAN_KIND: &str = "span.kind";
