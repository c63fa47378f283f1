use std::sync::Arc;

use weft_model::{Resource, SpanId, TraceId, conv};

use super::*;

fn resource(service: &str, kind: &str) -> Arc<Resource> {
    let mut r = Resource::service(service);
    r.attributes.push(conv::COMPONENT_KIND, kind);
    Arc::new(r)
}

/// A span of trace `t` in component `comp` (service `comp` before the first `/`).
fn sp(t: u128, id: u64, parent: Option<u64>, comp: &str, start: u64, end: u64) -> Span {
    let service = comp.split('/').next().unwrap_or(comp);
    let kind = if service == "ns3" { "network" } else { "host" };
    let mut s = Span {
        trace_id: TraceId::from_u128(t),
        span_id: SpanId::from_u64(id),
        parent_span_id: parent.map(SpanId::from_u64),
        name: "hop".into(),
        start_ns: start,
        end_ns: end,
        resource: resource(service, kind),
        ..Span::default()
    };
    if comp.contains('/') {
        s.attributes.push(conv::COMPONENT, comp);
    }
    s
}

fn with(mut s: Span, kv: &[(&str, &str)]) -> Span {
    for (k, v) in kv {
        s.attributes.push(*k, *v);
    }
    s
}

/// One packet h0 → sw0 → sw1 → h1 (network hops, zero-length receive hops).
fn packet() -> Vec<Span> {
    vec![
        sp(1, 1, None, "ns3/h0", 100, 110),
        sp(1, 2, Some(1), "ns3/sw0", 115, 115),
        sp(1, 3, Some(2), "ns3/sw0", 115, 140),
        sp(1, 4, Some(3), "ns3/sw1", 150, 151),
        sp(1, 5, Some(4), "ns3/sw1", 151, 151),
        sp(1, 6, Some(5), "ns3/h1", 160, 160),
    ]
}

fn names(b: &TraceBreakdown) -> Vec<(&str, u64)> {
    b.rows.iter().map(|r| (r.name.as_str(), r.timeline_ns)).collect()
}

#[test]
fn packet_hops_and_wires_add_up_to_the_end_to_end_time() {
    let b = trace_breakdown(&packet(), &Options::default());
    assert_eq!((b.start_ns, b.end_ns, b.duration_ns, b.spans), (100, 160, 60, 6));
    assert_eq!(names(&b), vec![("ns3/h0", 10), ("ns3/sw0", 25), ("ns3/sw1", 1), ("ns3/h1", 0), (WIRE, 24)]);
    let sum: u64 = b.rows.iter().map(|r| r.timeline_ns).sum();
    assert_eq!(sum, b.duration_ns);
    let sw0 = b.row("ns3/sw0").unwrap();
    assert_eq!((sw0.spans, sw0.total_ns, sw0.self_ns, sw0.first_offset_ns), (2, 25, 25, 15));
    assert_eq!(sw0.component_kind.as_deref(), Some("network"));
    assert!((sw0.share - 25.0 / 60.0).abs() < 1e-12);
    let wire = b.row(WIRE).unwrap();
    assert_eq!((wire.kind, wire.spans, wire.component_kind.as_deref()), (RowKind::Wire, 0, None));

    let per_link = trace_breakdown(&packet(), &Options { wire: WireMode::PerLink, ..Options::default() });
    assert_eq!(
        names(&per_link),
        vec![
            ("ns3/h0", 10),
            ("wire ns3/h0→ns3/sw0", 5),
            ("ns3/sw0", 25),
            ("wire ns3/sw0→ns3/sw1", 10),
            ("ns3/sw1", 1),
            ("wire ns3/sw1→ns3/h1", 9),
            ("ns3/h1", 0),
        ]
    );
}

#[test]
fn nested_and_overlapping_spans_split_time_to_the_innermost() {
    // A [0,100] ⊃ B [10,30], C [20,50]: C started last, so it owns [20,50].
    let spans =
        vec![sp(1, 1, None, "a", 0, 100), sp(1, 2, Some(1), "b", 10, 30), sp(1, 3, Some(1), "c", 20, 50)];
    let b = trace_breakdown(&spans, &Options::default());
    assert_eq!(names(&b), vec![("a", 60), ("b", 10), ("c", 30)]);
    let row = |n| b.row(n).unwrap();
    assert_eq!((row("a").total_ns, row("a").self_ns), (100, 60));
    assert_eq!((row("b").total_ns, row("b").self_ns), (20, 20));
    assert_eq!((row("c").total_ns, row("c").self_ns), (30, 30));
}

#[test]
fn a_child_outliving_its_parent_is_clipped_for_self_time() {
    let spans = vec![sp(1, 1, None, "a", 0, 10), sp(1, 2, Some(1), "b", 5, 20)];
    let b = trace_breakdown(&spans, &Options::default());
    assert_eq!(b.row("a").unwrap().self_ns, 5);
    assert_eq!(names(&b), vec![("a", 5), ("b", 15)]);
}

#[test]
fn a_gap_inside_one_group_is_that_groups_time_not_wire() {
    let spans = vec![sp(1, 1, None, "x", 0, 10), sp(1, 2, None, "x", 20, 30), sp(1, 3, None, "y", 35, 40)];
    let b = trace_breakdown(&spans, &Options::default());
    assert_eq!(names(&b), vec![("x", 30), ("y", 5), (WIRE, 5)]);
}

#[test]
fn group_by_service_operation_and_attribute() {
    let spans = vec![
        with(sp(1, 1, None, "ns3/h0", 0, 10), &[("dev", "eth0")]),
        with(sp(1, 2, Some(1), "ns3/sw0", 10, 30), &[("dev", "p1")]),
    ];
    let by = |g: GroupBy| {
        names(&trace_breakdown(&spans, &Options { group_by: g, ..Options::default() }))
            .into_iter()
            .map(|(n, t)| (n.to_owned(), t))
            .collect::<Vec<_>>()
    };
    assert_eq!(by(GroupBy::Service), vec![("ns3".to_owned(), 30)]);
    assert_eq!(by(GroupBy::Operation), vec![("ns3 hop".to_owned(), 30)]);
    assert_eq!(by(GroupBy::Attribute("dev".into())), vec![("eth0".to_owned(), 10), ("p1".to_owned(), 20)]);
    assert_eq!(by(GroupBy::Attribute("nope".into())), vec![(UNKNOWN.to_owned(), 30)]);
    assert_eq!(GroupBy::parse("attr:net.peer.ip"), Some(GroupBy::Attribute("net.peer.ip".into())));
    assert_eq!(GroupBy::parse("service"), Some(GroupBy::Service));
    assert_eq!(GroupBy::parse("attr:"), None);
    assert_eq!(GroupBy::parse("bogus"), None);
}

#[test]
fn empty_reversed_cyclic_and_duplicate_spans_do_not_break_it() {
    let empty = trace_breakdown(&[], &Options::default());
    assert_eq!((empty.duration_ns, empty.rows.len()), (0, 0));
    // End before start = zero length; 1 ↔ 2 is a parent cycle; id 3 appears twice.
    let spans = vec![
        sp(1, 1, Some(2), "a", 0, 10),
        sp(1, 2, Some(1), "b", 5, 15),
        sp(1, 3, Some(2), "c", 30, 20),
        sp(1, 3, None, "c", 40, 50),
    ];
    let b = trace_breakdown(&spans, &Options::default());
    assert_eq!(b.duplicate_span_ids, 1);
    assert_eq!(b.duration_ns, 50);
    assert_eq!(b.rows.iter().map(|r| r.timeline_ns).sum::<u64>(), 50);
    assert_eq!(b.row("c").unwrap().total_ns, 10);
}

const REQ: &[(&str, &str)] = &[("ip.src", "10.0.0.1"), ("ip.dst", "10.0.0.2")];
const RESP: &[(&str, &str)] = &[("ip.src", "10.0.0.2"), ("ip.dst", "10.0.0.1")];
const BG: &[(&str, &str)] = &[("ip.src", "10.0.0.9"), ("ip.dst", "10.0.0.8")];

/// A request through an idle sw1 and a response that queues in it, plus background.
fn exchange(t: u64, queue: u64) -> Vec<Span> {
    let t = t as u128;
    let base = t as u64 * 10_000;
    vec![
        with(sp(t * 10, 1, None, "ns3/h0", base, base + 10), REQ),
        with(sp(t * 10, 2, Some(1), "ns3/sw1", base + 15, base + 20), REQ),
        // A NIC span below the last hop, without IP attributes: inherits "request".
        sp(t * 10, 3, Some(2), "nic1", base + 22, base + 30),
        with(sp(t * 10 + 1, 1, None, "ns3/sw1", base + 100, base + 105 + queue), RESP),
        with(sp(t * 10 + 1, 2, Some(1), "ns3/h0", base + 115 + queue, base + 120 + queue), RESP),
        with(sp(t * 10 + 2, 1, None, "ns3/sw1", base + 100, base + 5000), BG),
    ]
}

fn ntp_rules() -> Classifier {
    Classifier::parse(&["request: ip.src=10.0.0.1, ip.dst=10.0.0.2", "response: ip.src=10.0.0.2"]).unwrap()
}

#[test]
fn directions_split_requests_from_responses() {
    let spans: Vec<Span> = (1..=4).flat_map(|t| exchange(t, 95 + t * 10)).collect();
    let b = breakdown(&spans, &ntp_rules(), &Options::default());
    assert_eq!(b.traces, 12);
    assert_eq!(b.spans, 24);
    assert_eq!((b.unclassified_spans, b.unclassified_traces), (4, 4));
    assert_eq!(
        b.directions.iter().map(|d| d.direction.as_str()).collect::<Vec<_>>(),
        ["request", "response"]
    );
    let req = b.direction("request").unwrap();
    assert_eq!((req.units, req.spans), (4, 12));
    assert_eq!(req.end_to_end.mean_ns, 30.0);
    let names: Vec<&str> = req.components.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["ns3/h0", "ns3/sw1", "nic1", WIRE]);
    assert_eq!(req.component("ns3/sw1").unwrap().time.mean_ns, 5.0);
    assert_eq!(req.component("nic1").unwrap().time.mean_ns, 8.0);
    assert_eq!(req.component(WIRE).unwrap().time.mean_ns, 7.0);
    let resp = b.direction("response").unwrap();
    // sw1 holds responses 5 + 105, 115, 125, 135 ns.
    let sw1 = resp.component("ns3/sw1").unwrap();
    assert_eq!((sw1.time.mean_ns, sw1.time.min_ns, sw1.time.max_ns), (125.0, 110, 140));
    assert_eq!((sw1.time.median_ns, sw1.time.p95_ns, sw1.present), (120, 140, 4));
    assert_eq!(b.ratio("response", "request", "ns3/sw1"), Some(25.0));
    assert_eq!(b.ratio("response", "request", "nic1"), None);
    for d in &b.directions {
        let mean_sum: f64 = d.components.iter().map(|c| c.time.mean_ns).sum();
        assert!((mean_sum - d.end_to_end.mean_ns).abs() < 1e-9, "{}", d.direction);
        let share_sum: f64 = d.components.iter().map(|c| c.share).sum();
        assert!((share_sum - 1.0).abs() < 1e-9);
    }
}

#[test]
fn without_rules_everything_is_one_direction() {
    let spans: Vec<Span> = (1..=2).flat_map(|t| exchange(t, 100)).collect();
    let b = breakdown(&spans, &Classifier::none(), &Options::default());
    assert_eq!(b.directions.len(), 1);
    let all = b.direction(ALL).unwrap();
    assert_eq!((all.units, all.spans, b.unclassified_spans), (6, 12, 0));
}

#[test]
fn trace_rules_use_the_first_and_last_group_and_the_root() {
    let mut spans = exchange(1, 100);
    spans[0].attributes.push("http.route", "/slow");
    let cls = Classifier::parse(&[
        "out: from=ns3/h0, to=nic1",
        "back: from=ns3/sw1, to=ns3/h0",
        "slow: root.http.route=/slow",
    ])
    .unwrap();
    let b = breakdown(&spans, &cls, &Options::default());
    assert_eq!(b.direction("out").unwrap().units, 1);
    assert_eq!(b.direction("back").unwrap().units, 1);
    // The background trace starts and ends in sw1: no rule.
    assert_eq!((b.unclassified_traces, b.unclassified_spans), (1, 1));
    assert_eq!(b.direction("slow").unwrap().units, 0, "'out' came first");
    let slow_first = Classifier::parse(&["slow: root.http.route=/slow", "out: from=ns3/h0"]).unwrap();
    let b = breakdown(&spans, &slow_first, &Options::default());
    assert_eq!(b.direction("slow").unwrap().units, 1);
    assert_eq!(b.direction("out").unwrap().units, 0);
}

#[test]
fn a_span_rule_with_a_trace_condition_needs_both() {
    let spans = exchange(1, 100);
    let cls = Classifier::parse(&["response: ip.src=10.0.0.2, to=nowhere", "any: ip.src=10.0.0.*"]).unwrap();
    let b = breakdown(&spans, &cls, &Options::default());
    assert_eq!(b.direction("response").unwrap().units, 0);
    assert_eq!(b.direction("any").unwrap().units, 3);
}

#[test]
fn rules_with_the_same_label_merge() {
    let spans = exchange(1, 100);
    let cls = Classifier::parse(&["ntp: ip.src=10.0.0.1", "ntp: ip.src=10.0.0.2"]).unwrap();
    assert_eq!(cls.labels(), vec!["ntp"]);
    let b = breakdown(&spans, &cls, &Options::default());
    assert_eq!(b.directions.len(), 1);
    assert_eq!(b.direction("ntp").unwrap().units, 2);
}

#[test]
fn pushing_spans_in_any_order_equals_adding_whole_traces() {
    let mut spans: Vec<Span> = (1..=5).flat_map(|t| exchange(t, t * 7)).collect();
    let whole = breakdown(&spans, &ntp_rules(), &Options::default());
    spans.reverse();
    spans.swap(0, 7);
    let mut b = BreakdownBuilder::new(ntp_rules(), Options::default());
    for s in &spans {
        assert!(b.push(s));
    }
    let pushed = b.finish();
    assert_eq!(pushed.directions, whole.directions);
    assert_eq!((pushed.traces, pushed.spans), (whole.traces, whole.spans));
}

#[test]
fn push_drops_and_counts_beyond_the_span_limit() {
    let spans = exchange(1, 100);
    let mut b = BreakdownBuilder::new(Classifier::none(), Options::default()).with_max_pending_spans(4);
    let kept = spans.iter().filter(|s| b.push(s)).count();
    assert_eq!((kept, b.dropped_spans()), (4, 2));
    let r = b.finish();
    assert_eq!((r.spans, r.dropped_spans), (4, 2));
}

#[test]
fn the_reservoir_bounds_samples_but_keeps_means_exact() {
    let mut b = BreakdownBuilder::new(Classifier::none(), Options::default()).with_sample_cap(3);
    for t in 0..100u64 {
        b.add_trace(&[sp(t as u128 + 1, 1, None, "x", 0, t)]);
    }
    let r = b.finish();
    assert!(r.sampled);
    let x = r.direction(ALL).unwrap().component("x").unwrap();
    assert_eq!((x.time.count, x.time.mean_ns, x.time.min_ns, x.time.max_ns), (100, 49.5, 0, 99));
    assert!(x.time.median_ns <= 99);
    let exact = breakdown(&[sp(1, 1, None, "x", 0, 7)], &Classifier::none(), &Options::default());
    assert!(!exact.sampled);
}

#[test]
fn rule_text_errors_name_the_rule() {
    for bad in ["no label", ": a=b", "x: a", "x: =b", "x: root.=b", "x: ,"] {
        let e = Rule::parse(bad).unwrap_err();
        assert_eq!(e.rule, bad);
        assert!(e.to_string().contains(bad), "{e}");
    }
    let r = Rule::parse(" response : ip.src=10.0.0.2|10.0.0.3 , name=hop*, root.k=v, from=a, to=b").unwrap();
    assert_eq!(r.label, "response");
    assert_eq!(r.conditions.len(), 5);
    assert!(matches!(&r.conditions[2], Condition::Root { key, .. } if key == "k"));
    let p = Pattern::parse("10.0.0.2|hop*");
    assert!(p.matches("10.0.0.2") && p.matches("hop") && p.matches("hop 3"));
    assert!(!p.matches("10.0.0.22") && !p.matches("ho"));
    let many: Vec<String> = (0..=MAX_RULES).map(|i| format!("r{i}: a=b")).collect();
    assert!(Classifier::parse(&many).is_err());
}

#[test]
fn conditions_read_non_string_values_resource_attributes_and_the_span_name() {
    let mut s = sp(1, 1, None, "ns3/h0", 0, 1);
    s.attributes.push("port", 123i64);
    s.name = "TxQueue".into();
    let cls = Classifier::parse(&["a: port=123, service.name=ns3, name=Tx*"]).unwrap();
    let b = breakdown(&[s], &cls, &Options::default());
    assert_eq!(b.direction("a").unwrap().units, 1);
}

#[test]
fn breakdowns_serialize_to_camel_case_json() {
    let b = trace_breakdown(&packet(), &Options::default());
    let j = serde_json::to_value(&b).unwrap();
    assert_eq!(j["durationNs"], 60);
    assert_eq!(j["rows"][0]["timelineNs"], 10);
    assert_eq!(j["rows"][4]["kind"], "wire");
    let all = breakdown(&packet(), &Classifier::none(), &Options::default());
    let j = serde_json::to_value(&all).unwrap();
    assert_eq!(j["directions"][0]["endToEnd"]["meanNs"], 60.0);
}

mod props {
    use proptest::prelude::*;

    use super::*;

    fn arb_trace() -> impl Strategy<Value = Vec<Span>> {
        // Times near 0, mid-range and just below u64::MAX.
        let base = prop_oneof![Just(0u64), Just(1u64 << 62), Just(u64::MAX - 300)];
        let spans = prop::collection::vec((0u64..200, 0u64..60, 0usize..5, 0u64..30, any::<bool>()), 1..25);
        (base, spans).prop_map(|(base, v)| {
            v.into_iter()
                .enumerate()
                .map(|(i, (start, len, comp, parent, has_parent))| {
                    // Parents anywhere (forward, missing, cyclic, self) on purpose.
                    let parent = has_parent.then_some(parent + 1);
                    let comp = ["a", "b", "ns3/c", "ns3/d", "e"][comp];
                    sp(1, i as u64 + 1, parent, comp, base + start, base + start + len)
                })
                .collect()
        })
    }

    proptest! {
        #[test]
        fn timeline_rows_add_up_and_self_never_exceeds_total(spans in arb_trace(), per_link in any::<bool>()) {
            let wire = if per_link { WireMode::PerLink } else { WireMode::Total };
            let b = trace_breakdown(&spans, &Options { wire, ..Options::default() });
            let lo = spans.iter().map(|s| s.start_ns).min().unwrap();
            let hi = spans.iter().map(|s| s.end_ns).max().unwrap();
            prop_assert_eq!(b.duration_ns, hi - lo);
            prop_assert_eq!(b.rows.iter().map(|r| r.timeline_ns).sum::<u64>(), b.duration_ns);
            for r in &b.rows {
                prop_assert!(r.self_ns <= r.total_ns);
            }
            prop_assert_eq!(b.rows.iter().map(|r| r.spans).sum::<u64>(), spans.len() as u64);
            let all = breakdown(&spans, &Classifier::none(), &Options { wire, ..Options::default() });
            let d = &all.directions[0];
            prop_assert_eq!(d.end_to_end.sum_ns, b.duration_ns);
            for r in &b.rows {
                let c = d.component(&r.name);
                prop_assert!(c.is_some(), "{} missing", r.name);
                prop_assert_eq!(c.map(|c| c.time.sum_ns), Some(r.timeline_ns));
            }
        }
    }
}

#[test]
fn units_with_incomplete_spans_are_counted_per_row() {
    // Two packets; the second one's sw0 hop lost its closing event.
    let mut spans = packet();
    let mut second: Vec<Span> = packet()
        .into_iter()
        .map(|mut s| {
            s.trace_id = TraceId::from_u128(2);
            s
        })
        .collect();
    second[2].attributes.push(conv::INCOMPLETE, true);
    spans.extend(second);
    let b = breakdown(&spans, &Classifier::none(), &Options::default());
    let d = b.direction(ALL).unwrap();
    assert_eq!((d.units, d.incomplete_units), (2, 1));
    // Every row of the cut unit is marked, since the unit's split is off as a whole.
    assert_eq!(d.component("ns3/sw0").unwrap().incomplete_units, 1);
    assert_eq!(d.component("ns3/h1").unwrap().incomplete_units, 1);
    let whole = breakdown(&packet(), &Classifier::none(), &Options::default());
    assert!(whole.direction(ALL).unwrap().components.iter().all(|c| c.incomplete_units == 0));
}
