use weft_probe::consumer::{FieldName, FieldValue, RecordKind};
use weft_probe::{Context, KeyedValue, Selector, SpanKind, annotation, event, span, tracepoint};

tracepoint!(static OUTER = "spantest.outer", Info, group = "spantest", fields = [path: str], flags = [span]);
tracepoint!(static INNER = "spantest.inner", Debug, group = "spantest", flags = [span]);
tracepoint!(static EV = "spantest.event", Debug, group = "spantest", fields = [n: u64]);
tracepoint!(static SERVER = "spantest.server", Info, group = "spantest", flags = [span]);

#[derive(Debug, Clone)]
struct R {
    kind: RecordKind,
    tp: u32,
    trace: u128,
    span: u64,
    parent: u64,
    flags: u32,
    fields: Vec<String>,
}

fn collect(seg: &mut weft_probe::consumer::Segment) -> Vec<R> {
    let ids = [OUTER.id(), INNER.id(), EV.id(), SERVER.id()];
    let mut out = Vec::new();
    seg.drain(|r| {
        if ids.contains(&r.tracepoint) {
            out.push(R {
                kind: r.kind,
                tp: r.tracepoint,
                trace: r.trace_id,
                span: r.span_id,
                parent: r.parent_span_id,
                flags: r.flags,
                fields: r.fields.iter().map(|f| format!("{:?}={:?}", f.name, f.value)).collect(),
            });
        }
    });
    out
}

#[test]
fn nested_spans_annotations_and_context() {
    let _g = crate::lock();
    let mut seg = crate::own_segment();
    crate::drain_all(&mut seg);
    weft_probe::enable(&"group:spantest".parse::<Selector>().unwrap());
    assert!(weft_probe::context::current().is_none());
    let (outer_ctx, inner_ctx) = {
        let outer = span!(OUTER, path = "/v1/volume");
        outer.annotate(annotation::CS);
        outer.endpoint(weft_probe::Endpoint { service: "gateway", ip: "127.0.0.1", port: 8080 });
        let oc = outer.context().unwrap();
        assert_eq!(weft_probe::context::current(), Some(oc));
        let ic = {
            let inner = INNER.span();
            inner.kv("bytes", KeyedValue::U64(4096));
            inner.kvs(&[("volume", KeyedValue::Str("vol7")), ("ok", KeyedValue::Bool(true))]);
            event!(EV, n = 3u64);
            inner.context().unwrap()
        };
        assert_eq!(weft_probe::context::current(), Some(oc), "inner end restores the outer context");
        outer.annotate(annotation::CR);
        (oc, ic)
    };
    assert!(weft_probe::context::current().is_none());
    assert_eq!(inner_ctx.trace_id, outer_ctx.trace_id);
    assert_ne!(inner_ctx.span_id, outer_ctx.span_id);

    let recs = collect(&mut seg);
    let kinds: Vec<RecordKind> = recs.iter().map(|r| r.kind).collect();
    use RecordKind::*;
    assert_eq!(
        kinds,
        vec![
            SpanStart, Annotation, Endpoint, SpanStart, KeyValue, KeyValue, Event, SpanEnd, Annotation,
            SpanEnd
        ]
    );
    assert!(recs.iter().all(|r| r.trace == outer_ctx.trace_id));
    assert_eq!(recs[0].parent, 0, "outer is a root");
    assert_eq!(recs[0].fields, vec!["Index(0)=Str(\"/v1/volume\")"]);
    assert_eq!(recs[1].fields, vec!["None=Str(\"cs\")"]);
    assert_eq!(
        recs[2].fields,
        vec![
            "Key(\"service\")=Str(\"gateway\")",
            "Key(\"ip\")=Str(\"127.0.0.1\")",
            "Key(\"port\")=U64(8080)"
        ]
    );
    assert_eq!(recs[3].parent, outer_ctx.span_id);
    assert_eq!(recs[3].span, inner_ctx.span_id);
    assert_eq!(recs[4].fields, vec!["Key(\"bytes\")=U64(4096)"]);
    assert_eq!(recs[6].span, inner_ctx.span_id, "events carry the current span");
    assert_eq!(recs[6].tp, EV.id());
    assert_eq!(recs[7].span, inner_ctx.span_id);
    assert_eq!(recs[9].span, outer_ctx.span_id);
    weft_probe::disable(&"group:spantest".parse::<Selector>().unwrap());
}

#[test]
fn remote_parent_through_traceparent_and_b3() {
    let _g = crate::lock();
    let mut seg = crate::own_segment();
    crate::drain_all(&mut seg);
    weft_probe::enable(&"group:spantest".parse::<Selector>().unwrap());
    // client side
    let client = OUTER.span_with(SpanKind::Client, None);
    let header = weft_probe::context::inject_traceparent().unwrap();
    let b3 = weft_probe::context::inject_b3().unwrap();
    let cctx = client.context().unwrap();
    drop(client);
    // server side (another thread, as in another process)
    let (sctx, sctx_b3) = std::thread::spawn(move || {
        let parent = Context::from_traceparent(&header).unwrap();
        let s = SERVER.span_with(SpanKind::Server, Some(&parent));
        s.annotate(annotation::SR);
        let c1 = s.context().unwrap();
        drop(s);
        let parent2 = Context::from_b3(&b3).unwrap();
        let c2 = SERVER.span_with(SpanKind::Server, Some(&parent2)).context().unwrap();
        (c1, c2)
    })
    .join()
    .unwrap();
    assert_eq!(sctx.trace_id, cctx.trace_id);
    assert_eq!(sctx_b3.trace_id, cctx.trace_id);
    let recs = collect(&mut seg);
    let starts: Vec<&R> = recs.iter().filter(|r| r.kind == RecordKind::SpanStart).collect();
    assert_eq!(starts.len(), 3);
    // The rings are drained in slot order, so the server thread's records may come first.
    let (client, servers): (Vec<&R>, Vec<&R>) =
        starts.iter().partition(|r| r.flags & 0xff == SpanKind::Client as u32);
    assert_eq!(client.len(), 1, "one client span");
    assert_eq!(client[0].span, cctx.span_id);
    assert_eq!(client[0].flags & weft_probe::layout::RFLAG_REMOTE_PARENT, 0);
    for s in &servers {
        assert_eq!(s.parent, cctx.span_id, "server span's parent is the client span");
        assert_eq!(s.flags & 0xff, SpanKind::Server as u32);
        assert_ne!(s.flags & weft_probe::layout::RFLAG_REMOTE_PARENT, 0);
    }
    weft_probe::disable(&"group:spantest".parse::<Selector>().unwrap());
}

#[test]
fn disabled_span_changes_nothing() {
    let _g = crate::lock();
    weft_probe::disable(&"group:spantest".parse::<Selector>().unwrap());
    let s = span!(OUTER, path = "x");
    assert!(!s.is_recording());
    assert!(s.context().is_none());
    assert!(weft_probe::context::current().is_none());
    let _ = FieldName::None;
    let _ = FieldValue::Bool(true);
}
