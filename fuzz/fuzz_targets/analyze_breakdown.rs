//! Breakdowns of arbitrary span sets and arbitrary direction rules: any parent structure
//! (cycles, self-parents, duplicate ids, missing parents), any times (reversed, near
//! `u64::MAX`) must give rows whose timeline times add up to the duration — never a panic.
//! The first line of the input is a rule list (`;`-separated); the rest is 24-byte span records.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use weft_analyze::breakdown::{Classifier, Options, WireMode, breakdown, trace_breakdown};
use weft_model::{Resource, Span, SpanId, TraceId, conv};

fuzz_target!(|data: &[u8]| {
    let nl = data.iter().position(|&b| b == b'\n').unwrap_or(data.len());
    let rules_text = String::from_utf8_lossy(&data[..nl]);
    let rules: Vec<&str> = rules_text.split(';').filter(|r| !r.trim().is_empty()).collect();
    let cls = Classifier::parse(&rules).unwrap_or_else(|_| Classifier::none());
    let body = data.get(nl + 1..).unwrap_or(&[]);
    let spans: Vec<Span> = body
        .chunks_exact(24)
        .map(|c| {
            let start = u64::from_le_bytes(c[0..8].try_into().unwrap_or_default());
            let end = u64::from_le_bytes(c[8..16].try_into().unwrap_or_default());
            let mut s = Span {
                trace_id: TraceId::from_u128(u128::from(c[16] % 4)),
                span_id: SpanId::from_u64(u64::from(c[17] % 16)),
                parent_span_id: (c[18] & 1 == 1).then(|| SpanId::from_u64(u64::from(c[19] % 16))),
                name: format!("op{}", c[20] % 3).into(),
                start_ns: start,
                end_ns: end,
                resource: Arc::new(Resource::service(format!("svc{}", c[21] % 3))),
                ..Span::default()
            };
            if c[22] & 1 == 1 {
                s.attributes.push(conv::COMPONENT, format!("net/dev{}", c[22] % 5));
            }
            s.attributes.push("k", i64::from(c[23] % 4));
            s
        })
        .collect();
    for wire in [WireMode::Total, WireMode::PerLink] {
        let opts = Options { wire, ..Options::default() };
        let t = trace_breakdown(&spans, &opts);
        assert_eq!(t.rows.iter().map(|r| u128::from(r.timeline_ns)).sum::<u128>(), u128::from(t.duration_ns));
        let b = breakdown(&spans, &cls, &opts);
        // Sums saturate at u64::MAX; below that, the rows add up to the end-to-end time.
        for d in b.directions.iter().filter(|d| d.end_to_end.sum_ns < u64::MAX) {
            let sum: u128 = d.components.iter().map(|c| u128::from(c.time.sum_ns)).sum();
            assert_eq!(sum, u128::from(d.end_to_end.sum_ns));
        }
    }
});
