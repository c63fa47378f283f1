//! Synthetic LTTng-layout traces (both event header layouts, both byte orders, unaligned bit
//! fields, timestamp wrap-around, extended headers, big event ids): their metadata parses as
//! LTTng's does, and weft and babeltrace2 must agree on every event and field.

use std::path::Path;

use weft_sources::ctf::compile::compile;
use weft_sources::ctf::meta::{ByteOrder, EnvValue, TypeDecl};
use weft_sources::ctf::{CtfReader, DecodeOptions, Metadata};
use weft_synth::ctf::{Header, SynthOptions, metadata, write_trace};

use super::bt2;

fn read_all(dir: &std::path::Path) -> (Vec<weft_model::Event>, weft_sources::ctf::StreamStats) {
    let mut r =
        CtfReader::open(dir, weft_model::SourceId(1), DecodeOptions { strict: true, ..Default::default() })
            .unwrap_or_else(|e| panic!("{e}"));
    let mut evs = Vec::new();
    while r.next_batch(&mut evs, 4096).unwrap_or_else(|e| panic!("{e}")) > 0 {}
    (evs, r.stats())
}

fn check(opts: SynthOptions) {
    let tmp = tempfile::tempdir().unwrap();
    let sum = write_trace(tmp.path(), &opts).unwrap();
    assert_eq!(sum.events, opts.events);
    assert!(sum.wraps > 0, "the trace must wrap the short timestamp field: {sum:?}");
    assert!(sum.extended > 0, "the trace must use extended headers: {sum:?}");
    let (evs, stats) = read_all(tmp.path());
    assert_eq!(evs.len() as u64, opts.events);
    assert_eq!(stats.events, opts.events);
    assert_eq!(stats.packets, sum.packets);
    assert_eq!(stats.errors, 0);
    // Time order after the merge.
    assert!(evs.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
    for (clock, ns) in [("--clock-cycles", false), ("--clock-seconds", true)] {
        let bt = bt2::run(tmp.path(), clock);
        let c = bt2::compare(&evs, &bt, ns);
        assert!(c.mismatches.is_empty(), "{opts:?} {clock}: {:#?}", c.mismatches);
        assert_eq!(c.events as u64, opts.events);
        assert!(c.fields as u64 >= opts.events, "compared {} fields", c.fields);
    }
}

#[test]
fn compact_headers_little_endian_match_babeltrace2() {
    check(SynthOptions {
        events: 3000,
        streams: 3,
        packet_bytes: 4096,
        header: Header::Compact,
        ..Default::default()
    });
}

#[test]
fn large_headers_big_endian_match_babeltrace2() {
    check(SynthOptions {
        events: 3000,
        streams: 2,
        packet_bytes: 8192,
        header: Header::Large,
        big_endian: true,
        seed: 7,
        ..Default::default()
    });
}

#[test]
fn small_events_one_stream_match_babeltrace2() {
    check(SynthOptions {
        events: 5000,
        streams: 1,
        packet_bytes: 16384,
        small_only: true,
        seed: 3,
        ..Default::default()
    });
}

#[test]
fn session_with_kernel_and_ust_traces_is_read_as_one_timeline() {
    // An LTTng session directory: `kernel/` (compact headers) next to `ust/uid/0/64-bit/`.
    let tmp = tempfile::tempdir().unwrap();
    let ust = SynthOptions {
        events: 1500,
        streams: 2,
        packet_bytes: 8192,
        header: Header::Large,
        seed: 5,
        ..Default::default()
    };
    write_trace(tmp.path(), &ust).unwrap();
    let k = tempfile::tempdir().unwrap();
    let kernel = SynthOptions {
        events: 2500,
        streams: 4,
        packet_bytes: 4096,
        header: Header::Compact,
        seed: 9,
        ..Default::default()
    };
    let ks = write_trace(k.path(), &kernel).unwrap();
    std::fs::rename(&ks.trace_dir, tmp.path().join("kernel")).unwrap();
    let dirs = weft_sources::ctf::find_traces(tmp.path()).unwrap();
    assert_eq!(dirs.len(), 2, "{dirs:?}");
    assert!(dirs[0].ends_with("kernel") && dirs[1].ends_with("64-bit"), "{dirs:?}");
    let (evs, stats) = read_all(tmp.path());
    assert_eq!(evs.len(), 4000);
    assert_eq!(stats.errors, 0);
    assert!(evs.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
    let bt = bt2::run(tmp.path(), "--clock-seconds");
    let c = bt2::compare(&evs, &bt, true);
    assert!(c.mismatches.is_empty(), "{:#?}", c.mismatches);
}

/// The metadata weft-synth writes parses and compiles as LTTng's does (which header layouts
/// take the decoder's fast path: the unit tests of the TSDL parser).
#[test]
fn parses_an_lttng_style_metadata() {
    let md = Metadata::parse(&metadata(&SynthOptions::default())).unwrap();
    assert_eq!((md.major, md.minor), (Some(1), Some(8)));
    assert_eq!(md.byte_order, ByteOrder::Le);
    assert_eq!(md.uuid.map(|u| u[0]), Some(0x5e));
    assert_eq!(md.env("hostname"), Some(&EnvValue::Str("synth".into())));
    assert_eq!(md.env("tracer_major"), Some(&EnvValue::Int(2)));
    assert_eq!(md.clocks.len(), 1);
    assert_eq!(&*md.clocks[0].name, "monotonic");
    assert_eq!(md.clocks[0].freq, 1_000_000_000);
    assert_eq!(md.streams.len(), 1);
    assert_eq!(md.events.len(), 5);
    assert_eq!(md.events[1].name, "weft_synth:mixed");
    assert_eq!(md.events[4].id, Some(70000));
    // The event header: enum id then a variant tagged by it.
    let Some(TypeDecl::Struct(h)) = &md.streams[0].event_header else { panic!() };
    assert_eq!(h.min_align, 8);
    let TypeDecl::Enum(e) = &h.fields[0].ty else { panic!() };
    assert_eq!(e.container.size, 5);
    assert_eq!(e.labels(31).map(|l| l.to_string()).collect::<Vec<_>>(), ["extended"]);
    let TypeDecl::Variant(v) = &h.fields[1].ty else { panic!() };
    assert_eq!(v.tag.as_deref(), Some(&["id".to_string()][..]));
    let c = compile(md, Path::new("m")).unwrap();
    assert_eq!(c.events.len(), 5);
    assert_eq!(c.events[4].id, 70000);
    assert_eq!(c.streams[0].clock, Some(0));
}
