//! Service dependency links (Zipkin's `/api/v2/dependencies`): who calls whom, how often, how
//! often with an error — derived from each trace's span tree.
//!
//! The rules are Zipkin's dependency linker's, restated:
//!
//! * links come from **remote** spans; the tree is walked breadth-first;
//! * a `SERVER` or `CONSUMER` span links *its remote ancestor's service* (the nearest ancestor
//!   with a known kind, walking up through local spans) → *its own service*; a root server span
//!   links only when it names its caller (`peer.service`);
//! * a `CLIENT` or `PRODUCER` span links *its service* → *its remote service* (`peer.service`)
//!   — but a client span with children is skipped, so the callee's own server span names the
//!   link (uninstrumented callees still appear through their client spans);
//! * messaging spans (`PRODUCER`, `CONSUMER`) link only when both sides are known (through the
//!   broker named in `peer.service`);
//! * a span without a kind counts as a client when both its service and `peer.service` are known;
//! * when a client span's remote ancestor is another service, the missing link ancestor → client
//!   service is added too (instrumentation that put the remote name on the client side);
//! * a link is an error when the span has error status (Zipkin's `error` tag), or — for a server
//!   span whose parent is the client half of the same call — when that client span has one.
//!
//! A Zipkin "shared" span (client and server halves with one span id) has its server half placed
//! under the client half, as Zipkin's span-tree builder does.

use std::collections::{BTreeMap, HashMap, VecDeque};

use weft_model::{Span, SpanId, SpanKind, StatusCode, conv};

/// One edge of the dependency graph.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DependencyLink {
    /// Calling service.
    pub parent: String,
    /// Called service.
    pub child: String,
    /// Calls seen.
    pub call_count: u64,
    /// Calls that failed.
    pub error_count: u64,
}

/// Accumulates links over many traces (feed one trace at a time).
#[derive(Debug, Default, Clone)]
pub struct DependencyLinker {
    counts: BTreeMap<(String, String), (u64, u64)>,
}

fn remote_service(s: &Span) -> Option<&str> {
    s.attributes.get_str(conv::PEER_SERVICE).filter(|v| !v.is_empty())
}

fn local_service(s: &Span) -> Option<&str> {
    Some(s.service_name()).filter(|v| !v.is_empty())
}

fn is_error(s: &Span) -> bool {
    s.status.code == StatusCode::Error || s.attributes.get("error").is_some()
}

fn known_kind(k: SpanKind) -> bool {
    !matches!(k, SpanKind::Unspecified | SpanKind::Internal)
}

impl DependencyLinker {
    /// A linker with no links.
    pub fn new() -> Self {
        Self::default()
    }

    fn add(&mut self, parent: &str, child: &str, error: bool) {
        let e = self.counts.entry((parent.to_owned(), child.to_owned())).or_insert((0, 0));
        e.0 += 1;
        if error {
            e.1 += 1;
        }
    }

    /// Adds the links of one trace (all spans must share a trace id).
    pub fn put_trace(&mut self, spans: &[Span]) {
        if spans.is_empty() {
            return;
        }
        // Tree: parent index per span (shared server halves go under their client half).
        let mut first: HashMap<SpanId, usize> = HashMap::with_capacity(spans.len());
        for (i, s) in spans.iter().enumerate() {
            let e = first.entry(s.span_id).or_insert(i);
            // Prefer the client half as the owner of a shared id.
            if spans[*e].kind != SpanKind::Client && s.kind == SpanKind::Client {
                *e = i;
            }
        }
        let mut parent: Vec<Option<usize>> = vec![None; spans.len()];
        let mut children: Vec<Vec<usize>> = vec![Vec::new(); spans.len()];
        for (i, s) in spans.iter().enumerate() {
            let p = match first.get(&s.span_id) {
                Some(&owner) if owner != i => Some(owner),
                _ => s.parent_span_id.and_then(|p| first.get(&p).copied()).filter(|&p| p != i),
            };
            parent[i] = p;
            if let Some(p) = p {
                children[p].push(i);
            }
        }
        let roots: Vec<usize> = (0..spans.len()).filter(|&i| parent[i].is_none()).collect();
        let mut queue: VecDeque<usize> = roots.iter().copied().collect();
        let mut seen = vec![false; spans.len()];
        while let Some(i) = queue.pop_front() {
            if std::mem::replace(&mut seen[i], true) {
                continue;
            }
            queue.extend(children[i].iter().copied());
            let s = &spans[i];
            let mut kind = s.kind;
            if kind == SpanKind::Client && !children[i].is_empty() {
                continue;
            }
            let service = local_service(s);
            let remote = remote_service(s);
            if !known_kind(kind) {
                if service.is_some() && remote.is_some() {
                    kind = SpanKind::Client;
                } else {
                    continue;
                }
            }
            let is_root = parent[i].is_none();
            let (mut link_parent, link_child) = match kind {
                SpanKind::Server | SpanKind::Consumer => {
                    if is_root && remote.is_none() {
                        continue;
                    }
                    (remote, service)
                }
                _ => (service, remote),
            };
            let mut error = is_error(s);
            if matches!(kind, SpanKind::Producer | SpanKind::Consumer) {
                if let (Some(p), Some(c)) = (link_parent, link_child) {
                    self.add(p, c, error);
                }
                continue;
            }
            // Nearest ancestor with a remote kind.
            let mut a = parent[i];
            let mut hops = 0;
            while let Some(ai) = a {
                if known_kind(spans[ai].kind) || hops > spans.len() {
                    break;
                }
                a = parent[ai];
                hops += 1;
            }
            if let Some(ai) = a.filter(|&ai| known_kind(spans[ai].kind)) {
                let anc = &spans[ai];
                if let Some(anc_service) = local_service(anc) {
                    if kind == SpanKind::Client
                        && let Some(svc) = service
                        && anc_service != svc
                    {
                        self.add(anc_service, svc, false);
                    }
                    if kind == SpanKind::Server || link_parent.is_none() {
                        link_parent = Some(anc_service);
                    }
                    if !error
                        && anc.kind == SpanKind::Client
                        && (s.parent_span_id == Some(anc.span_id) || s.span_id == anc.span_id)
                    {
                        error = is_error(anc);
                    }
                }
            }
            if let (Some(p), Some(c)) = (link_parent, link_child) {
                self.add(p, c, error);
            }
        }
    }

    /// The links so far, sorted by (parent, child).
    pub fn links(&self) -> Vec<DependencyLink> {
        self.counts
            .iter()
            .map(|((p, c), (n, e))| DependencyLink {
                parent: p.clone(),
                child: c.clone(),
                call_count: *n,
                error_count: *e,
            })
            .collect()
    }
}

/// Links of many traces at once (spans of any number of traces, in any order).
pub fn dependency_links(spans: &[Span]) -> Vec<DependencyLink> {
    let mut by_trace: HashMap<weft_model::TraceId, Vec<Span>> = HashMap::new();
    for s in spans {
        by_trace.entry(s.trace_id).or_default().push(s.clone());
    }
    let mut l = DependencyLinker::new();
    for t in by_trace.values() {
        l.put_trace(t);
    }
    l.links()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use weft_model::{Resource, Status, TraceId};

    use super::*;

    fn span(id: u64, parent: Option<u64>, svc: &str, kind: SpanKind) -> Span {
        Span {
            trace_id: TraceId::from_u128(7),
            span_id: SpanId::from_u64(id),
            parent_span_id: parent.map(SpanId::from_u64),
            kind,
            resource: Arc::new(Resource::service(svc)),
            ..Span::default()
        }
    }

    fn link(p: &str, c: &str, n: u64, e: u64) -> DependencyLink {
        DependencyLink { parent: p.into(), child: c.into(), call_count: n, error_count: e }
    }

    #[test]
    fn client_server_pairs_link_once_each() {
        // frontend(server) → frontend(client) → backend(server) → backend(internal) → db client (uninstrumented)
        let mut db = span(5, Some(4), "backend", SpanKind::Client);
        db.attributes.push(conv::PEER_SERVICE, "postgres");
        let mut server = span(3, Some(2), "backend", SpanKind::Server);
        server.status = Status { code: StatusCode::Error, message: String::new() };
        let t = vec![
            span(1, None, "frontend", SpanKind::Server),
            span(2, Some(1), "frontend", SpanKind::Client),
            server,
            span(4, Some(3), "backend", SpanKind::Internal),
            db,
        ];
        assert_eq!(
            dependency_links(&t),
            vec![link("backend", "postgres", 1, 0), link("frontend", "backend", 1, 1)]
        );
    }

    #[test]
    fn root_server_links_only_with_a_known_caller_and_messaging_needs_both_sides() {
        let mut root = span(1, None, "api", SpanKind::Server);
        assert!(dependency_links(std::slice::from_ref(&root)).is_empty());
        root.attributes.push(conv::PEER_SERVICE, "browser");
        let mut prod = span(2, Some(1), "api", SpanKind::Producer);
        prod.attributes.push(conv::PEER_SERVICE, "kafka");
        let cons = span(3, Some(2), "worker", SpanKind::Consumer); // no broker named: skipped
        let links = dependency_links(&[root, prod, cons]);
        assert_eq!(links, vec![link("api", "kafka", 1, 0), link("browser", "api", 1, 0)]);
    }

    #[test]
    fn shared_span_ids_and_error_on_the_client_half() {
        // Zipkin B3 shared span: client and server halves carry the same id.
        let mut client = span(2, Some(1), "web", SpanKind::Client);
        client.status.code = StatusCode::Error;
        let server = span(2, Some(1), "auth", SpanKind::Server);
        let t = vec![span(1, None, "web", SpanKind::Server), server, client];
        assert_eq!(dependency_links(&t), vec![link("web", "auth", 1, 1)]);
    }

    #[test]
    fn realistic_traces_give_the_shop_topology() {
        let mut l = DependencyLinker::new();
        let mut t = Vec::new();
        for i in 0..3u64 {
            t.clear();
            t.push(span(10 * i + 1, None, "frontend", SpanKind::Server));
            t.push(span(10 * i + 2, Some(10 * i + 1), "frontend", SpanKind::Client));
            t.push(span(10 * i + 3, Some(10 * i + 2), "cart", SpanKind::Server));
            l.put_trace(&t);
        }
        assert_eq!(l.links(), vec![link("frontend", "cart", 3, 0)]);
    }
}
