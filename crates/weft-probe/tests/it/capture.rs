use weft_probe::capture::{self, Capture};
use weft_probe::consumer::{FieldValue, RecordKind};
use weft_probe::{Selector, event, span, tracepoint};

tracepoint!(static CAP_EV = "captest.event", Info, group = "captest", fields = [n: u64, what: str]);
tracepoint!(static CAP_SPAN = "captest.span", Info, group = "captest", flags = [span]);

#[test]
fn in_process_drain_to_a_capture_file() {
    let _g = crate::lock();
    let mut seg = crate::own_segment();
    crate::drain_all(&mut seg);
    drop(seg);
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("probe.cap");
    let drain = capture::start(&path, std::time::Duration::from_millis(5)).unwrap();
    weft_probe::enable(&"group:captest".parse::<Selector>().unwrap());
    let t0 = weft_probe::clock::realtime_ns();
    for n in 0..1000u64 {
        let s = span!(CAP_SPAN);
        event!(CAP_EV, n = n, what = "write");
        drop(s);
    }
    let written = drain.stop().unwrap();
    assert!(written >= 3000, "{written}");
    let cap = Capture::read(&path).unwrap();
    assert_eq!(cap.pid, std::process::id());
    assert_eq!(cap.service, "weft-probe-tests");
    let clock = cap.clock.unwrap();
    let id = cap.tracepoints.iter().find(|t| t.name == "captest.event").unwrap().id;
    let mut ns = Vec::new();
    let mut starts = 0;
    for r in cap.records() {
        let r = r.unwrap();
        if r.tracepoint == id {
            let FieldValue::U64(n) = r.fields[0].value else { panic!() };
            ns.push(n);
            assert!(clock.to_unix_ns(r.timestamp) + 5_000_000 >= t0);
            assert_ne!(r.span_id, 0);
        }
        if r.kind == RecordKind::SpanStart && cap.name_of(r.tracepoint) == Some("captest.span") {
            starts += 1;
        }
    }
    assert_eq!(ns, (0..1000).collect::<Vec<_>>());
    assert_eq!(starts, 1000);
    weft_probe::disable(&"group:captest".parse::<Selector>().unwrap());
    // a corrupt capture is rejected with the byte offset
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[8] = 99;
    let err = Capture::parse(&bytes, &path).unwrap_err().to_string();
    assert!(err.contains("chunk at byte 8") && err.contains("unknown chunk kind"), "{err}");
}
