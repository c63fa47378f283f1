//! Every simulator fixture parses; every skip is deliberate and every reject explained.

use std::fs::File;

use weft_model::event::{EventKind, HostEvent, NetOp, NicEvent};
use weft_model::{Event, SourceId};
use weft_sources::drive::{Driver, SourceStats};
use weft_sources::reader::LineReader;
use weft_sources::sim::{SimFormat, parser_for};
use weft_testkit::fixture;

fn run(rel: &str, format: SimFormat) -> (Vec<Event>, SourceStats) {
    let f = File::open(fixture(rel)).unwrap();
    let clock = format.default_clock(0);
    let mut d = Driver::new(LineReader::new(f), parser_for(format, SourceId(0), clock), 5);
    let mut out = Vec::new();
    while d.step(&mut out).unwrap() {}
    (out, d.into_stats())
}

fn count(ev: &[Event], name: &str) -> usize {
    ev.iter().filter(|e| e.type_name() == name).count()
}

#[test]
fn gem5_columbo_fixture() {
    let (ev, st) = run("simulators/gem5/columbo-tests-gem5-events-test.txt", SimFormat::Gem5);
    assert_eq!((st.lines, st.events, st.rejected.count()), (6, 6, 0), "{st:?}");
    assert_eq!(count(&ev, "HostMmioR"), 4);
    assert_eq!(count(&ev, "HostMmioW"), 2);
    assert_eq!(st.out_of_order, 0);
}

#[test]
fn nicbm_fixture_with_dma_data_quirk() {
    let (ev, st) = run("simulators/nicbm/q713-test-nic-client-log.log", SimFormat::Nicbm);
    assert_eq!(st.rejected.count(), 0, "{:?}", st.rejected);
    assert_eq!(st.lines, 68);
    // 36 register accesses + 4 dma ops (I/Ex/C each) + MSI-X + rx ...
    assert_eq!(count(&ev, "NicMmioR"), 3);
    assert_eq!(count(&ev, "NicMmioW"), 35);
    assert_eq!(count(&ev, "NicDmaI"), 3);
    assert_eq!(count(&ev, "NicDmaEx"), 3);
    assert_eq!(count(&ev, "NicDmaCW"), 3);
    assert_eq!(count(&ev, "NicDmaCR"), 1);
    assert_eq!(count(&ev, "NicMsix"), 2);
    assert_eq!(count(&ev, "NicRx"), 1);
    // The records glued behind DMA payload bytes are found.
    assert!(ev.iter().any(|e| e.raw_time == 5_734_963_257_000
        && e.kind == EventKind::Nic(NicEvent::DmaCW { op: 0x55d6864e9dd0, addr: 0x2368c6000, len: 4 })));
    // The 2022 log predates `posted=`.
    assert!(ev.iter().all(|e| !matches!(e.kind, EventKind::Nic(NicEvent::MmioW { posted: Some(_), .. }))));
    assert_eq!(st.skipped.get("nicbm dma payload dump (not an event)"), 3);
    assert_eq!(st.skipped.get("nicbm informational output (not an event)"), 2 + 1 + 1 + 10);
    assert_eq!(st.events as usize, ev.len());
    assert_eq!(st.out_of_order, 0);
}

#[test]
fn ns3_all_layouts() {
    for (rel, lines, events, blank) in [
        ("simulators/ns3/columbo-tests-ns3-raw-log.txt", 115, 96, 19),
        ("simulators/ns3/q713-ns3-raw-log-v1-2023-11-04.txt", 31, 30, 1),
        ("simulators/ns3/gen-ns3-3.44-simbricks-style-2host-2switch.tr", 432, 432, 0),
        ("simulators/ns3/gen-ns3-3.44-stock-ascii-2host-2router.tr", 324, 324, 0),
    ] {
        let (ev, st) = run(rel, SimFormat::Ns3(Default::default()));
        assert_eq!(st.rejected.count(), 0, "{rel}: {:?}", st.rejected);
        assert_eq!((st.lines, st.events, st.skipped.get("blank line")), (lines, events, blank), "{rel}");
        assert_eq!(st.out_of_order, 0, "{rel}: {:?}", st.out_of_order_samples);
        assert_eq!(ev.len() as u64, events);
    }
    let (ev, _) =
        run("simulators/ns3/gen-ns3-3.44-stock-ascii-2host-2router.tr", SimFormat::Ns3(Default::default()));
    let recv = ev.iter().filter(|e| matches!(&e.kind, EventKind::Net(n) if n.op == NetOp::Receive)).count();
    assert_eq!(recv, 108);
    // Stock times are seconds: the first UDP echo leaves at 1 s.
    assert_eq!(ev[0].raw_time, 1_000_000_000_000);
    assert_eq!(ev[0].time_ns, 1_000_000_000);
}

#[test]
fn qemu_fixtures() {
    let (ev, st) = run("simulators/qemu/gen-qemu7.2-e1000e-trace-events.log", SimFormat::Qemu);
    assert_eq!(st.rejected.count(), 0, "{:?}", st.rejected);
    assert_eq!((st.lines, st.events), (3543, 3543));
    assert_eq!(count(&ev, "NicMmioR"), 1485);
    assert_eq!(count(&ev, "NicMmioW"), 2017);
    assert_eq!(count(&ev, "NicTxDescr"), 11);
    assert_eq!(count(&ev, "NicRxDescr"), 5);
    assert_eq!(count(&ev, "NicRxWritten"), 5);
    assert_eq!(count(&ev, "NicMsix"), 20);

    let (ev, st) = run("simulators/qemu/gen-qemu7.2-exec-dfilter-kernel-funcs.log", SimFormat::Qemu);
    assert_eq!(st.rejected.count(), 0, "{:?}", st.rejected);
    assert_eq!(st.skipped.get("QEMU exec-log bookkeeping"), 6);
    let instr = ev
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Host(HostEvent::Instr { macro_op: true, .. })))
        .count();
    assert_eq!(instr, 4647);
    assert_eq!(st.out_of_order, 0);
    // Untimed exec lines sit between timestamped ones.
    assert!(ev.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
}
