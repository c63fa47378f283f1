use tracing_subscriber::layer::SubscriberExt;
use weft_probe::consumer::{FieldName, FieldValue, RecordKind};
use weft_probe::tracing_layer::WeftLayer;
use weft_probe::{Level, Selector, event, tracepoint};

tracepoint!(static INSIDE = "tltest.inside", Info, group = "tltest", fields = [k: u64], flags = [default_on]);

fn emit_all() -> (u64, u64) {
    let span = tracing::info_span!("tl_request", path = "/v1/x");
    let _e = span.enter();
    tracing::info!(n = 5u64, "hello");
    tracing::debug!(d = 1i64, "debug detail");
    event!(INSIDE, k = 9u64);
    let c = weft_probe::context::current().expect("an entered tracing span is the current weft context");
    (c.span_id, c.trace_id as u64)
}

#[test]
fn tracing_spans_and_events_record_through_weft() {
    let _g = crate::lock();
    let mut seg = crate::own_segment();
    crate::drain_all(&mut seg);
    weft_probe::enable(&"tltest.inside".parse::<Selector>().unwrap());
    let sub = tracing_subscriber::registry().with(WeftLayer::new().with_default_level(Level::Info));
    tracing::subscriber::with_default(sub, || {
        let (span_id, _) = emit_all();
        let list = weft_probe::list();
        let names: Vec<&str> = list.iter().map(|t| t.name.as_str()).collect();
        let span_tp =
            list.iter().find(|t| t.name.ends_with(":tl_request")).unwrap_or_else(|| panic!("{names:?}"));
        assert_eq!(span_tp.group, module_path!());
        assert!(span_tp.is_span());
        assert_eq!(span_tp.field_names(), vec!["path"]);
        let debug_tp = list.iter().find(|t| t.level == Level::Debug && t.group == module_path!()).unwrap();
        assert!(!debug_tp.enabled, "debug callsites start disabled");

        let mut kinds = Vec::new();
        let mut debug_seen = 0;
        let debug_id = debug_tp.id;
        seg.drain(|r| {
            if r.tracepoint == debug_id {
                debug_seen += 1;
            }
            if r.span_id == span_id {
                kinds.push((
                    r.kind,
                    r.fields.iter().map(|f| format!("{:?}={:?}", f.name, f.value)).collect::<Vec<_>>(),
                ));
            }
        });
        assert_eq!(debug_seen, 0);
        assert_eq!(kinds[0], (RecordKind::SpanStart, vec!["Key(\"path\")=Str(\"/v1/x\")".to_string()]));
        assert_eq!(kinds[1].0, RecordKind::Event);
        assert!(kinds[1].1.contains(&"Key(\"n\")=U64(5)".to_string()), "{:?}", kinds[1]);
        assert!(kinds[1].1.iter().any(|f| f.contains("hello")));
        assert_eq!(kinds[2], (RecordKind::Event, vec!["Index(0)=U64(9)".to_string()]));
        assert_eq!(kinds[3].0, RecordKind::SpanEnd);
        assert_eq!(kinds.len(), 4);

        // switch the debug callsites of this module on at run time
        let r = weft_probe::enable(&Selector::Group(module_path!().into()));
        assert!(r.changed >= 1);
        emit_all();
        let mut debug_fields = Vec::new();
        seg.drain(|r| {
            if r.tracepoint == debug_id {
                for f in &r.fields {
                    if let (FieldName::Key("d"), FieldValue::I64(v)) = (f.name, f.value) {
                        debug_fields.push(v);
                    }
                }
            }
        });
        assert_eq!(debug_fields, vec![1]);
        weft_probe::disable(&Selector::Group(module_path!().into()));
    });
}
