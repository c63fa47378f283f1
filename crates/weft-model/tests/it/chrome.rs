//! Chrome trace JSON: tracks nest, the document is valid, links become flow pairs.

use std::collections::HashMap;

use weft_model::codec::stream::Format;
use weft_synth::sample;

use crate::zipkin::write_chunked;

#[test]
fn tracks_nest_and_document_is_valid() {
    let spans = sample::spans(400, 19);
    let (out, _) = write_chunked(Format::ChromeJson, &spans, 33, 50);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let xs: Vec<_> = events.iter().filter(|e| e["ph"] == "X").collect();
    assert_eq!(xs.len(), 400);
    assert_eq!(events.iter().filter(|e| e["ph"] == "i").count(), 800);
    // Complete events on one (pid, tid) nest: no partial overlaps.
    let mut by_track: HashMap<(u64, i64), Vec<(f64, f64)>> = HashMap::new();
    for e in &xs {
        let ts = e["ts"].as_f64().unwrap();
        by_track
            .entry((e["pid"].as_u64().unwrap(), e["tid"].as_i64().unwrap()))
            .or_default()
            .push((ts, ts + e["dur"].as_f64().unwrap()));
    }
    for (track, mut iv) in by_track {
        iv.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
        let mut stack: Vec<f64> = Vec::new();
        for (s, e) in iv {
            while stack.last().is_some_and(|&end| end <= s) {
                stack.pop();
            }
            assert!(stack.last().is_none_or(|&end| end >= e - 1e-6), "overlap on {track:?}");
            stack.push(e);
        }
    }
    // Processes are named after services; links in the file became flow pairs.
    assert!(events.iter().any(|e| e["ph"] == "M" && e["args"]["name"] == "checkout"));
    let links_in_file = spans.iter().flat_map(|s| &s.links).count();
    assert_eq!(events.iter().filter(|e| e["ph"] == "s").count(), links_in_file);
}
