//! Spans — the OTLP span model, which is the richest of the formats weft speaks, plus one
//! extension: a [`LinkRelation`] on links (carried on OTLP as the link attribute
//! [`crate::conv::LINK_RELATION`]).
//!
//! A `Span` is flat: it points at its [`Resource`] and [`Scope`] through `Arc`s, so many spans
//! share one resource without copies and every stage downstream can treat spans one by one.
//! Encoders that group by resource/scope (OTLP) group consecutive spans whose resource and
//! scope are equal.

use std::sync::Arc;

use crate::id::{SpanId, TraceId};
use crate::value::{Attributes, Str};

/// OTLP span kind. The numeric values are OTLP's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpanKind {
    /// 0 — not specified (Zipkin spans without a kind map here).
    #[default]
    Unspecified = 0,
    /// 1 — internal operation.
    Internal = 1,
    /// 2 — server side of a synchronous RPC (Zipkin `SERVER`, annotations sr/ss).
    Server = 2,
    /// 3 — client side of a synchronous RPC (Zipkin `CLIENT`, annotations cs/cr).
    Client = 3,
    /// 4 — producer of an asynchronous message.
    Producer = 4,
    /// 5 — consumer of an asynchronous message.
    Consumer = 5,
}

impl SpanKind {
    /// From the OTLP enum number; unknown numbers map to `Unspecified`.
    pub fn from_i32(v: i32) -> SpanKind {
        match v {
            1 => SpanKind::Internal,
            2 => SpanKind::Server,
            3 => SpanKind::Client,
            4 => SpanKind::Producer,
            5 => SpanKind::Consumer,
            _ => SpanKind::Unspecified,
        }
    }
    /// Lower-case name (`"server"`, ...), as the SQL schema stores it.
    pub fn as_str(self) -> &'static str {
        match self {
            SpanKind::Unspecified => "unspecified",
            SpanKind::Internal => "internal",
            SpanKind::Server => "server",
            SpanKind::Client => "client",
            SpanKind::Producer => "producer",
            SpanKind::Consumer => "consumer",
        }
    }
    /// Inverse of [`SpanKind::as_str`] (case-insensitive; also accepts OTLP's
    /// `SPAN_KIND_SERVER` spelling).
    pub fn parse(s: &str) -> Option<SpanKind> {
        let s = s.trim();
        let s = s.strip_prefix("SPAN_KIND_").unwrap_or(s);
        Some(match s.to_ascii_lowercase().as_str() {
            "unspecified" => SpanKind::Unspecified,
            "internal" => SpanKind::Internal,
            "server" => SpanKind::Server,
            "client" => SpanKind::Client,
            "producer" => SpanKind::Producer,
            "consumer" => SpanKind::Consumer,
            _ => return None,
        })
    }
}

/// OTLP status code. The numeric values are OTLP's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StatusCode {
    /// 0 — unset.
    #[default]
    Unset = 0,
    /// 1 — ok.
    Ok = 1,
    /// 2 — error (Zipkin: the `error` tag; Jaeger: the `error=true` tag).
    Error = 2,
}

impl StatusCode {
    /// From the OTLP enum number; unknown numbers map to `Unset`.
    pub fn from_i32(v: i32) -> StatusCode {
        match v {
            1 => StatusCode::Ok,
            2 => StatusCode::Error,
            _ => StatusCode::Unset,
        }
    }
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            StatusCode::Unset => "unset",
            StatusCode::Ok => "ok",
            StatusCode::Error => "error",
        }
    }
}

/// Span status.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Status {
    /// Code.
    pub code: StatusCode,
    /// Developer-facing message (only meaningful with `Error`).
    #[serde(default)]
    pub message: String,
}

/// The entity that produced spans: a service, a simulated host, a NIC model, a switch, a
/// kernel. Key attributes (see [`crate::conv`]): `service.name`, `host.name`,
/// `service.instance.id`, `weft.component.kind`.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct Resource {
    /// Resource attributes.
    pub attributes: Attributes,
    /// Attributes the producer dropped.
    #[serde(default)]
    pub dropped_attributes_count: u32,
    /// OTLP `ResourceSpans.schema_url`.
    #[serde(default)]
    pub schema_url: String,
}

impl Resource {
    /// A resource with just `service.name`.
    pub fn service(name: impl Into<Str>) -> Resource {
        let mut attributes = Attributes::new();
        attributes.push(crate::conv::SERVICE_NAME, name.into());
        Resource { attributes, ..Resource::default() }
    }
    /// `service.name`, or `""` when absent.
    pub fn service_name(&self) -> &str {
        self.attributes.get_str(crate::conv::SERVICE_NAME).unwrap_or("")
    }
}

/// The instrumentation scope (library) that produced spans.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct Scope {
    /// Scope name (e.g. `weft-probe`, `weft.weave.host`, `opentelemetry.instrumentation.flask`).
    pub name: String,
    /// Scope version.
    #[serde(default)]
    pub version: String,
    /// Scope attributes.
    #[serde(default)]
    pub attributes: Attributes,
    /// Attributes the producer dropped.
    #[serde(default)]
    pub dropped_attributes_count: u32,
    /// OTLP `ScopeSpans.schema_url`.
    #[serde(default)]
    pub schema_url: String,
}

impl Scope {
    /// A scope with a name only.
    pub fn named(name: impl Into<String>) -> Scope {
        Scope { name: name.into(), ..Scope::default() }
    }
}

/// A timestamped annotation inside a span (OTLP span event; Zipkin annotation — `cs`, `sr`,
/// `ss`, `cr` or custom text; Jaeger log).
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct SpanEvent {
    /// When, ns since the epoch.
    pub time_ns: u64,
    /// Event name (the Zipkin annotation value).
    pub name: Str,
    /// Key/value annotations attached to this instant.
    #[serde(default)]
    pub attributes: Attributes,
    /// Attributes the producer dropped.
    #[serde(default)]
    pub dropped_attributes_count: u32,
}

/// Why a span links to another one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkRelation {
    /// Plain OTLP link (no relation given).
    #[default]
    Unspecified,
    /// Jaeger `FOLLOWS_FROM`: the linked span started this one but does not wait for it.
    FollowsFrom,
    /// Jaeger `CHILD_OF` reference other than the primary parent.
    ChildOf,
    /// weft: the linked span, in another component, caused this one (host MMIO → NIC MMIO,
    /// NIC TX → network hop, network → NIC RX, ...). Drawn and followable in the UI.
    CausedBy,
}

impl LinkRelation {
    /// The text carried in [`crate::conv::LINK_RELATION`].
    pub fn as_str(self) -> &'static str {
        match self {
            LinkRelation::Unspecified => "",
            LinkRelation::FollowsFrom => "follows_from",
            LinkRelation::ChildOf => "child_of",
            LinkRelation::CausedBy => "caused_by",
        }
    }
    /// Inverse of [`LinkRelation::as_str`]; unknown text maps to `Unspecified`.
    pub fn parse(s: &str) -> LinkRelation {
        match s {
            "follows_from" | "FOLLOWS_FROM" => LinkRelation::FollowsFrom,
            "child_of" | "CHILD_OF" => LinkRelation::ChildOf,
            "caused_by" => LinkRelation::CausedBy,
            _ => LinkRelation::Unspecified,
        }
    }
}

/// A link to another span (possibly in another trace).
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct Link {
    /// Linked span's trace.
    pub trace_id: TraceId,
    /// Linked span.
    pub span_id: SpanId,
    /// W3C tracestate of the linked context.
    #[serde(default)]
    pub trace_state: String,
    /// Relation (see [`LinkRelation`]).
    #[serde(default)]
    pub relation: LinkRelation,
    /// Link attributes (without the relation, which lives in `relation`).
    #[serde(default)]
    pub attributes: Attributes,
    /// Attributes the producer dropped.
    #[serde(default)]
    pub dropped_attributes_count: u32,
    /// OTLP link flags.
    #[serde(default)]
    pub flags: u32,
}

/// A span.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct Span {
    /// Trace.
    pub trace_id: TraceId,
    /// This span.
    pub span_id: SpanId,
    /// Parent span; `None` for a root.
    pub parent_span_id: Option<SpanId>,
    /// W3C tracestate.
    #[serde(default)]
    pub trace_state: String,
    /// OTLP span flags (W3C trace flags in bits 0–7, has-remote/is-remote in bits 8–9).
    #[serde(default)]
    pub flags: u32,
    /// Operation name.
    pub name: Str,
    /// Kind.
    #[serde(default)]
    pub kind: SpanKind,
    /// Start, ns since the epoch.
    pub start_ns: u64,
    /// End, ns since the epoch (≥ start for well-formed spans; decoders keep what they get).
    pub end_ns: u64,
    /// Status.
    #[serde(default)]
    pub status: Status,
    /// Span attributes.
    #[serde(default)]
    pub attributes: Attributes,
    /// Timestamped annotations.
    #[serde(default)]
    pub events: Vec<SpanEvent>,
    /// Links to other spans.
    #[serde(default)]
    pub links: Vec<Link>,
    /// Who produced it.
    #[serde(default)]
    pub resource: Arc<Resource>,
    /// Instrumentation scope.
    #[serde(default)]
    pub scope: Arc<Scope>,
    /// Attributes the producer dropped.
    #[serde(default)]
    pub dropped_attributes_count: u32,
    /// Events the producer dropped.
    #[serde(default)]
    pub dropped_events_count: u32,
    /// Links the producer dropped.
    #[serde(default)]
    pub dropped_links_count: u32,
}

impl Span {
    /// An empty span (every other field as in `Span::default()`) of `resource` and `scope`.
    /// Unlike `Span { resource, scope, ..Span::default() }` it allocates nothing: the default
    /// builds a resource and a scope of its own only to drop them (two allocations and two
    /// frees per decoded span, ~2 % of a collector's CPU in `perf`).
    pub fn with_context(resource: Arc<Resource>, scope: Arc<Scope>) -> Span {
        Span {
            trace_id: TraceId::default(),
            span_id: SpanId::default(),
            parent_span_id: None,
            trace_state: String::new(),
            flags: 0,
            name: Str::default(),
            kind: SpanKind::default(),
            start_ns: 0,
            end_ns: 0,
            status: Status::default(),
            attributes: Attributes::default(),
            events: Vec::new(),
            links: Vec::new(),
            resource,
            scope,
            dropped_attributes_count: 0,
            dropped_events_count: 0,
            dropped_links_count: 0,
        }
    }
    /// Duration in ns (0 when end precedes start).
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
    /// True when the span has no parent.
    pub fn is_root(&self) -> bool {
        self.parent_span_id.is_none()
    }
    /// The resource's `service.name`.
    pub fn service_name(&self) -> &str {
        self.resource.service_name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_context_is_the_default_span_of_that_context() {
        let resource = Arc::new(Resource::service("cart"));
        let scope = Arc::new(Scope { name: "lib".into(), ..Scope::default() });
        let s = Span::with_context(Arc::clone(&resource), Arc::clone(&scope));
        assert_eq!(s, Span { resource: Arc::clone(&resource), scope: Arc::clone(&scope), ..Span::default() });
        assert!(Arc::ptr_eq(&s.resource, &resource) && Arc::ptr_eq(&s.scope, &scope));
    }
}
