//! Actors: the symbolizer (objdump dumps with a module offset, ELF files), filters.

use std::collections::BTreeMap;

use weft_model::event::{EventKind, HostEvent, NetEvent};
use weft_model::{Event, SourceId};
use weft_sources::symbols::{LoadOptions, SymbolFormat, SymbolTable, Symbolizer};
use weft_weave::actor::{Actors, FilterSpec};

fn instr(pc: u64, t: u64) -> Event {
    Event {
        time_ns: t,
        raw_time: t,
        source: SourceId(0),
        kind: EventKind::Host(HostEvent::Instr { pc, macro_op: true }),
    }
}

#[test]
fn symbolizer_resolves_module_and_elf_symbols() {
    // The real i40e dump, loaded at the first module address.
    let i40e = SymbolTable::load(
        &weft_testkit::fixture("simulators/symtables/i40e-image-syms.dump"),
        "i40e",
        &LoadOptions { offset: 0xffff_ffff_a000_0000, ..LoadOptions::default() },
    )
    .unwrap();
    // An ELF file: this test binary itself.
    let exe = std::env::current_exe().unwrap();
    let elf =
        SymbolTable::load(&exe, "self", &LoadOptions { format: SymbolFormat::Elf, ..LoadOptions::default() })
            .unwrap();
    let some = elf
        .symbols()
        .iter()
        .find(|s| s.name.contains("symbolizer_resolves"))
        .expect("a symbol of this test")
        .clone();
    let sym = Symbolizer::new(vec![i40e, elf]);
    let spec = FilterSpec { blacklist: vec!["i40e_features_check".into()], ..FilterSpec::default() };
    let mut a = Actors::new("client", &BTreeMap::new(), Some(&sym), &spec);
    let mut ev = vec![
        instr(0xffff_ffff_a002_5015, 1), // i40e_lan_xmit_frame
        instr(0xffff_ffff_a002_5016, 2), // inside it: not an entry → dropped by the type filter
        instr(0xffff_ffff_a000_2a0a, 3), // i40e_features_check: blacklisted
        instr(some.addr, 4),
    ];
    a.apply(&mut ev);
    let calls: Vec<(String, String)> = ev
        .iter()
        .map(|e| match &e.kind {
            EventKind::Host(HostEvent::Call { func, comp, .. }) => (func.to_string(), comp.to_string()),
            k => panic!("{k:?}"),
        })
        .collect();
    assert_eq!(
        calls,
        vec![("i40e_lan_xmit_frame".into(), "i40e".into()), (some.name.to_string(), "self".into())]
    );
    assert_eq!(a.stats().symbolized, 3);
    assert_eq!(a.stats().dropped.get("blacklisted function"), 1);
    assert_eq!(a.stats().dropped.get("instruction (type filter; not a function entry)"), 1);
}

#[test]
fn window_and_component_filters() {
    let net = |node: u32, t: u64, interesting: bool| Event {
        time_ns: t,
        raw_time: t * 1000,
        source: SourceId(0),
        kind: EventKind::Net(NetEvent {
            op: weft_model::event::NetOp::Enqueue,
            node,
            device: 1,
            device_type: weft_model::event::DeviceType::Simple,
            trace_source: "TxQueue/Enqueue".into(),
            packet_uid: Some(1),
            interesting: Some(interesting),
            payload_size: 0,
            boundary: Default::default(),
            eth: None,
            arp: None,
            ipv4: None,
        }),
    };
    let nodes: BTreeMap<u32, String> = [(0, "sw0".to_owned()), (1, "sw1".to_owned())].into();
    let spec = FilterSpec {
        components: vec!["ns3/sw1".into(), "ns3/node7/dev1".into()],
        from_raw: Some(2000),
        only_interesting: true,
        ..FilterSpec::default()
    };
    let mut a = Actors::new("ns3", &nodes, None, &spec);
    let mut ev = vec![net(1, 1, true), net(1, 2, true), net(0, 3, true), net(7, 4, true), net(1, 5, false)];
    a.apply(&mut ev);
    assert_eq!(ev.iter().map(|e| e.time_ns).collect::<Vec<_>>(), vec![2, 4]);
    let d = &a.stats().dropped;
    assert_eq!(
        (d.get("outside the time window"), d.get("component filter"), d.get("packet not marked interesting")),
        (1, 1, 1)
    );
    // A source no listed component belongs to is dropped whole.
    let mut other = Actors::new("client", &BTreeMap::new(), None, &spec);
    let mut ev = vec![instr(1, 5000)];
    other.apply(&mut ev);
    assert!(ev.is_empty());
}
