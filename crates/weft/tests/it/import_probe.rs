//! `weft import probe`: a capture that weft-probe writes in in-process mode (no agent) — made
//! by this test binary re-run as the instrumented program — into a data directory and an
//! OTLP/JSON file.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use weft_probe::{Selector, capture, event, span, tracepoint};

tracepoint!(static REQUEST = "capimp.request", Info, group = "capimp", fields = [path: str], flags = [span]);
tracepoint!(static STEP = "capimp.step", Info, group = "capimp", flags = [span]);
tracepoint!(static NOTE = "capimp.note", Info, group = "capimp", fields = [n: u64]);

/// The instrumented program, when this binary is re-run as one (see [`record_capture`]):
/// three requests, each with a step that records a note, drained into the capture file.
#[test]
fn capture_role() {
    let Ok(path) = std::env::var("WEFT_TEST_CAPTURE_TO") else { return };
    let drain = capture::start(Path::new(&path), Duration::from_millis(5)).expect("start the capture");
    weft_probe::enable(&"group:capimp".parse::<Selector>().expect("selector"));
    for n in 0..3u64 {
        let request = span!(REQUEST, path = "/orders");
        let step = span!(STEP);
        event!(NOTE, n = n);
        drop(step);
        drop(request);
    }
    let records = drain.stop().expect("stop the capture");
    println!("{records} records captured");
    // leave before libtest prints anything else
    std::process::exit(if records == 15 { 0 } else { 1 });
}

fn record_capture(path: &Path) {
    let out = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "import_probe::capture_role", "--nocapture", "--test-threads=1"])
        .env("WEFT_TEST_CAPTURE_TO", path)
        .env("WEFT_PROBE_MODE", "private")
        .env("WEFT_PROBE_SERVICE", "capimp-svc")
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success(), "the instrumented run failed: {}", String::from_utf8_lossy(&out.stdout));
}

fn ok(out: Output) -> String {
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "weft failed:\n{text}");
    text
}

fn attr<'a>(attrs: &'a serde_json::Value, key: &str) -> &'a serde_json::Value {
    attrs.as_array().unwrap().iter().find(|a| a["key"] == key).map(|a| &a["value"]).unwrap_or_else(|| {
        panic!("no attribute {key} in {attrs}");
    })
}

#[test]
fn a_capture_into_a_data_directory_and_an_otlp_file() {
    let tmp = tempfile::tempdir().unwrap();
    let caps = tmp.path().join("captures");
    std::fs::create_dir(&caps).unwrap();
    record_capture(&caps.join("run.wcap"));
    let data = tmp.path().join("data");
    let otlp = tmp.path().join("spans.json");
    let out = ok(Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["import", "probe"])
        .arg(&caps)
        .arg("--data-dir")
        .arg(&data)
        .arg("--to")
        .arg(&otlp)
        .output()
        .unwrap());
    assert!(out.contains("imported 15 records from 1 capture(s)"), "{out}");
    assert!(out.contains("service capimp-svc"), "{out}");
    assert!(out.contains("weft-probe: 15 records → 6 spans\n"), "{out}");
    assert!(out.contains(&format!("6 spans and 15 events to {}", data.display())), "{out}");

    // The OTLP/JSON file: names, parents, attributes, span events, the resource.
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&otlp).unwrap()).unwrap();
    let mut spans = Vec::new();
    for rs in v["resourceSpans"].as_array().unwrap() {
        let svc = attr(&rs["resource"]["attributes"], "service.name").clone();
        assert_eq!(svc["stringValue"], "capimp-svc");
        assert_eq!(attr(&rs["resource"]["attributes"], "weft.source.tool")["stringValue"], "weft-probe");
        for ss in rs["scopeSpans"].as_array().unwrap() {
            spans.extend(ss["spans"].as_array().unwrap().iter().cloned());
        }
    }
    assert_eq!(spans.len(), 6);
    let requests: Vec<&serde_json::Value> = spans.iter().filter(|s| s["name"] == "capimp.request").collect();
    let steps: Vec<&serde_json::Value> = spans.iter().filter(|s| s["name"] == "capimp.step").collect();
    assert_eq!((requests.len(), steps.len()), (3, 3));
    for r in &requests {
        assert!(r["parentSpanId"].as_str().unwrap_or("").is_empty(), "a request is a root: {r}");
        assert_eq!(attr(&r["attributes"], "path")["stringValue"], "/orders");
        assert!(attr(&r["attributes"], "thread.id")["intValue"].is_string());
    }
    let mut notes = Vec::new();
    for s in &steps {
        let parent =
            requests.iter().find(|r| r["spanId"] == s["parentSpanId"]).expect("a step's parent is a request");
        assert_eq!(s["traceId"], parent["traceId"]);
        let ev = s["events"].as_array().unwrap();
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0]["name"], "capimp.note");
        notes.push(attr(&ev[0]["attributes"], "n")["intValue"].as_str().unwrap().to_owned());
    }
    notes.sort();
    assert_eq!(notes, ["0", "1", "2"]);

    // The data directory: the same spans, and every record as an event.
    let query = |sql: &str| -> Vec<Vec<serde_json::Value>> {
        let out = ok(Command::new(env!("CARGO_BIN_EXE_weft"))
            .args(["query", "--format", "json", "--data-dir"])
            .arg(&data)
            .arg(sql)
            .output()
            .unwrap());
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
        v["rows"].as_array().unwrap().iter().map(|r| r.as_array().unwrap().clone()).collect()
    };
    let rows = query(
        "SELECT s.name, p.name FROM spans s LEFT JOIN spans p ON s.parent_span_id = p.span_id \
         WHERE s.service_name = 'capimp-svc' ORDER BY s.start_time",
    );
    let got: Vec<String> = rows.iter().map(|r| format!("{} <- {}", r[0].as_str().unwrap(), r[1])).collect();
    assert_eq!(got.len(), 6, "{got:?}");
    assert_eq!(got.iter().filter(|g| *g == "capimp.step <- \"capimp.request\"").count(), 3, "{got:?}");
    assert_eq!(got.iter().filter(|g| *g == "capimp.request <- null").count(), 3, "{got:?}");
    let rows = query("SELECT count(*) FROM events WHERE type = 'Tracepoint'");
    assert_eq!(rows[0][0], 15);
}
