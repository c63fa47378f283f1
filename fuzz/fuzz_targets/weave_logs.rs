//! Arbitrary bytes as the logs of a gem5 host, an nicbm NIC (PCIe-linked) and an ns-3 network
//! (Ethernet-linked to the NIC): split at NUL bytes, parsed, merged in time order and woven.
//! Whatever the input, weaving must not panic and every span must be well-formed (end ≥ start,
//! a valid id, links and parents resolvable to ids).
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_model::SourceId;
use weft_sources::drive::Driver;
use weft_sources::reader::LineReader;
use weft_sources::sim::{SimFormat, parser_for};
use weft_weave::weaver::{ComponentSpec, EthLink, PcieLink, Role, Weave, WeaveConfig};

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(3, |&b| b == 0);
    let fmts = [SimFormat::Gem5, SimFormat::Nicbm, SimFormat::Ns3(Default::default())];
    let mut events = Vec::new();
    for (i, fmt) in fmts.iter().enumerate() {
        let bytes = parts.next().unwrap_or(&[]);
        let p = parser_for(*fmt, SourceId(i as u32), fmt.default_clock(0));
        let mut d = Driver::new(LineReader::with_limits(bytes, 64, 512), p, 2);
        while d.step(&mut events).unwrap_or(false) {}
    }
    events.sort_by_key(|e| (e.time_ns, e.source));
    let cfg = WeaveConfig {
        components: vec![
            ComponentSpec { name: "h".into(), tool: "gem5".into(), role: Role::Host },
            ComponentSpec { name: "n".into(), tool: "nicbm".into(), role: Role::Nic },
            ComponentSpec { name: "net".into(), tool: "ns-3".into(), role: Role::Network { nodes: Default::default() } },
        ],
        pcie: vec![PcieLink { host: 0, nic: 1 }],
        eth: vec![EthLink { nic: 1, net: 2, node: 0, device: 2 }],
        max_open: 64,
        max_queued_causes: 16,
        ..WeaveConfig::default()
    };
    let Ok(mut w) = Weave::new(&cfg) else { return };
    let mut spans = Vec::new();
    for e in &events {
        w.push(e, &mut spans);
    }
    w.finish(&mut spans);
    for s in &spans {
        assert!(s.end_ns >= s.start_ns, "{s:?}");
        assert!(s.span_id.is_valid() && s.trace_id.is_valid());
    }
});
