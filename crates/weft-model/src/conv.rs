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

/// Span: the finest component the span belongs to, when finer than its resource's service —
/// e.g. `ns3/sw1` for a hop inside switch `sw1` of the network simulator `ns3`. Breakdowns
/// group by it (falling back to `service.name`).
pub const COMPONENT: &str = "weft.component";
/// Span: set to `true` on spans a weaver had to close without their closing event (the log
/// ended, a bound was hit, or the closing event never came).
pub const INCOMPLETE: &str = "weft.incomplete";

// ---------------------------------------------------------------------------------------
// Spans woven from simulator logs (weft-weave). The crate docs of `weft_weave` describe
// which span type carries which of these.

/// Span: Columbo's span type (`HostCall`, `HostMmio`, `HostDma`, `HostMsix`, `HostInt`,
/// `HostPci`, `NicMmio`, `NicDma`, `NicEth`, `NicMsix`, `NetDevice`).
pub const SPAN_TYPE: &str = "weft.span.type";
/// Span (network hop): ns-3 node index.
pub const NET_NODE: &str = "weft.net.node";
/// Span (network hop): device index on the node.
pub const NET_DEVICE: &str = "weft.net.device";
/// Span (network hop): ns-3 device type (`SimpleNetDevice`, `CosimNetDevice`, ...).
pub const NET_DEVICE_TYPE: &str = "weft.net.device_type";
/// Span (network hop): `<node name>/dev<D>` — the device as a component finer than the node.
pub const NET_PORT: &str = "weft.net.port";
/// Span (network hop): `ingress` (the packet arrives at the node) or `egress` (it leaves).
pub const NET_DIRECTION: &str = "weft.net.direction";
/// Span (network hop): ns-3 packet uid (absent when the log has none).
pub const NET_PACKET_UID: &str = "weft.net.packet_uid";
/// Span (network hop): the SimBricks fork's `Intersting=` flag (absent when the log has none).
pub const NET_INTERESTING: &str = "weft.net.interesting";
/// Span (network hop): `true` when the hop ended in a drop.
pub const NET_DROP: &str = "weft.net.drop";
/// Span (network hop): `from_adapter` / `to_adapter` at the boundary to a NIC simulator.
pub const NET_BOUNDARY: &str = "weft.net.boundary";
/// Span (network hop): application payload size in bytes (`Payload (size=N)`).
pub const NET_PAYLOAD_SIZE: &str = "weft.net.payload_size";
/// Span (network hop): IPv4 total length.
pub const NET_IP_LENGTH: &str = "weft.net.ip_length";
/// Span (network hop, OTel semconv): source address (IPv4 of the IP or ARP sender).
pub const SOURCE_ADDRESS: &str = "source.address";
/// Span (network hop, OTel semconv): source port (UDP/TCP).
pub const SOURCE_PORT: &str = "source.port";
/// Span (network hop, OTel semconv): destination address.
pub const DESTINATION_ADDRESS: &str = "destination.address";
/// Span (network hop, OTel semconv): destination port.
pub const DESTINATION_PORT: &str = "destination.port";
/// Span (network hop, OTel semconv): `udp`, `tcp`, `icmp` or the IP protocol number.
pub const NETWORK_TRANSPORT: &str = "network.transport";
/// Span (network hop, OTel semconv): `ipv4` or `arp`.
pub const NETWORK_PROTOCOL: &str = "network.protocol.name";

// ---------------------------------------------------------------------------------------
// Well-known keys longer than a `Str` holds inline.

/// The `'static` spelling of a well-known attribute key too long to be stored inline in a
/// [`crate::Str`] (more than [`crate::value::STR_INLINE`] bytes): OpenTelemetry
/// semantic-convention names that are common in traces. Decoders build keys through
/// [`crate::value::key`], which uses this to make such keys without allocating. (Every
/// constant in this module is short enough to be inline anyway.)
pub fn known(s: &str) -> Option<&'static str> {
    Some(match s {
        // HTTP (current and pre-1.21 conventions)
        "http.response.status_code" => "http.response.status_code",
        "http.request.resend_count" => "http.request.resend_count",
        "http.request.method_original" => "http.request.method_original",
        "http.request_content_length" => "http.request_content_length",
        "http.response_content_length" => "http.response_content_length",
        "user_agent.synthetic.type" => "user_agent.synthetic.type",
        // messaging
        "messaging.destination.name" => "messaging.destination.name",
        "messaging.destination.template" => "messaging.destination.template",
        "messaging.destination.partition.id" => "messaging.destination.partition.id",
        "messaging.message.conversation_id" => "messaging.message.conversation_id",
        "messaging.message.body.size" => "messaging.message.body.size",
        "messaging.message.envelope.size" => "messaging.message.envelope.size",
        "messaging.batch.message_count" => "messaging.batch.message_count",
        "messaging.consumer.group.name" => "messaging.consumer.group.name",
        "messaging.kafka.message.key" => "messaging.kafka.message.key",
        "messaging.rabbitmq.destination.routing_key" => "messaging.rabbitmq.destination.routing_key",
        // RPC
        "rpc.jsonrpc.error_message" => "rpc.jsonrpc.error_message",
        "rpc.connect_rpc.error_code" => "rpc.connect_rpc.error_code",
        // network, process, deployment, containers
        "network.connection.subtype" => "network.connection.subtype",
        "deployment.environment.name" => "deployment.environment.name",
        "process.runtime.description" => "process.runtime.description",
        "k8s.container.restart_count" => "k8s.container.restart_count",
        "container.image.repo_digests" => "container.image.repo_digests",
        // generative AI
        "gen_ai.request.max_tokens" => "gen_ai.request.max_tokens",
        "gen_ai.request.temperature" => "gen_ai.request.temperature",
        "gen_ai.usage.input_tokens" => "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens" => "gen_ai.usage.output_tokens",
        "gen_ai.response.finish_reasons" => "gen_ai.response.finish_reasons",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key weft writes is short enough for a `Str` to hold inline (no allocation); a new
    /// longer one must go into [`known`] instead.
    #[test]
    fn weft_keys_fit_inline() {
        let src = include_str!("conv.rs");
        let mut n = 0;
        for line in src.lines().filter(|l| l.starts_with("pub const ")) {
            let value = line.split('"').nth(1).unwrap();
            assert!(value.len() <= crate::value::STR_INLINE, "{value} is longer than a Str holds inline");
            n += 1;
        }
        assert!(n > 40, "found only {n} constants");
    }

    #[test]
    fn known_keys_are_long_and_static() {
        for k in ["http.response.status_code", "messaging.destination.name", "gen_ai.usage.output_tokens"] {
            assert_eq!(known(k), Some(k));
            let s = crate::value::key(k);
            assert_eq!(s, k);
            assert!(!s.is_heap_allocated(), "{k}");
            assert_eq!(s.as_static_str(), Some(k));
        }
        assert_eq!(known("http.route"), None);
        assert_eq!(known("some.custom.attribute.that.is.long"), None);
        assert!(crate::value::key("some.custom.attribute.that.is.long").is_heap_allocated());
        assert!(!crate::value::key(SERVICE_INSTANCE_ID).is_heap_allocated());
    }
}
