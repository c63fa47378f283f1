//! Property tests: parsers never panic, well-formed records always come back exactly, garbage
//! and truncation are counted (never lost data, never a panic), and reading through the
//! driver with any chunk size gives the same result.

use proptest::prelude::*;
use weft_model::event::{EventKind, HostEvent, NetOp, NicEvent};
use weft_model::{Event, SourceId};
use weft_sources::drive::Driver;
use weft_sources::parse::{LineOutcome, LineParser};
use weft_sources::reader::LineReader;
use weft_sources::sim::{SimFormat, parser_for};

const FORMATS: [SimFormat; 4] = [
    SimFormat::Gem5,
    SimFormat::Nicbm,
    SimFormat::Ns3(weft_sources::sim::ns3::Ns3Time::Auto),
    SimFormat::Qemu,
];

fn parse_one(format: SimFormat, line: &[u8]) -> (LineOutcome, Vec<Event>) {
    let mut p = parser_for(format, SourceId(0), format.default_clock(0));
    let mut out = Vec::new();
    let o = p.parse_line(line, &mut out);
    p.finish(&mut out);
    (o, out)
}

/// A gem5 MMIO/DMA line and the event it must give.
fn gem5_line() -> impl Strategy<Value = (String, HostEvent, u64)> {
    let mmio = (
        any::<u64>(),
        any::<u64>(),
        1u32..=64,
        0u8..6,
        any::<u64>(),
        any::<u64>(),
        prop::option::of(any::<bool>()),
    )
        .prop_map(|(t, addr, size, bar, id, offs, posted)| {
            let (text, ev) = match posted {
                None => (
                    format!("sending read addr {addr:x} size {size:x} id {id} bar {bar} offs {offs:x}"),
                    HostEvent::MmioR { id, addr, size, bar, offset: offs },
                ),
                Some(p) => (
                    format!(
                        "sending write addr {addr:x} size {size:x} id {id} bar {bar} offs {offs:x} posted {}",
                        p as u8
                    ),
                    HostEvent::MmioW { id, addr, size, bar, offset: offs, posted: p },
                ),
            };
            (format!("{t}: system.pc.simbricks_0: simbricks-pci: {text}"), ev, t)
        });
    let dma = (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>(), any::<bool>()).prop_map(|(t, id, addr, size, w)| {
        let rw = if w { "write" } else { "read" };
        let ev = if w { HostEvent::DmaW { id, addr, size } } else { HostEvent::DmaR { id, addr, size } };
        (format!("{t}: system.pc.simbricks_0: simbricks-pci: received DMA {rw} id {id} addr {addr:x} size {size:x}"), ev, t)
    });
    let exec = (any::<u64>(), any::<u64>(), any::<bool>()).prop_map(|(t, pc, micro)| {
        let line = if micro {
            format!("{t}: system.switch_cpus: T0 : {pc:#x}. 1 :   LD : ldst t1 : MemRead :")
        } else {
            format!("{t}: system.switch_cpus: A0 T0 : {pc:#x}    : MOV_R_R : IntAlu :")
        };
        (line, HostEvent::Instr { pc, macro_op: !micro }, t)
    });
    prop_oneof![mmio, dma, exec]
}

/// A nicbm record and its event.
fn nicbm_line() -> impl Strategy<Value = (String, NicEvent, u64)> {
    let mmio = (
        any::<u64>(),
        any::<u64>(),
        any::<u32>(),
        any::<u64>(),
        prop::option::of(prop::option::of(any::<bool>())),
    )
        .prop_map(|(t, off, len, val, w)| match w {
            None => {
                (format!("read(off={off:#x}, len={len}, val={val:#x})"), NicEvent::MmioR { off, len, val }, t)
            }
            Some(None) => (
                format!("write(off={off:#x}, len={len}, val={val:#x})"),
                NicEvent::MmioW { off, len, val, posted: None },
                t,
            ),
            Some(Some(p)) => (
                format!("write(off={off:#x}, len={len}, val={val:#x}, posted={})", p as u8),
                NicEvent::MmioW { off, len, val, posted: Some(p) },
                t,
            ),
        });
    let dma = (any::<u64>(), 1u64.., any::<u64>(), any::<u64>(), 0usize..5, any::<bool>()).prop_map(
        |(t, op, addr, len, which, bare)| {
            let a = if bare { format!("{addr:x}") } else { format!("{addr:#x}") };
            match which {
                0 => (
                    format!("issuing dma op {op:#x} addr {a} len {len} pending 0"),
                    NicEvent::DmaI { op, addr, len },
                    t,
                ),
                1 => (
                    format!("enqueuing dma op {op:#x} addr {a} len {len} pending 64"),
                    NicEvent::DmaEn { op, addr, len },
                    t,
                ),
                2 => (
                    format!("executing dma op {op:#x} addr {a} len {len} pending 1"),
                    NicEvent::DmaEx { op, addr, len },
                    t,
                ),
                3 => (
                    format!("completed dma read op {op:#x} addr {a} len {len}"),
                    NicEvent::DmaCR { op, addr, len },
                    t,
                ),
                _ => (
                    format!("completed dma write op {op:#x} addr {a} len {len}"),
                    NicEvent::DmaCW { op, addr, len },
                    t,
                ),
            }
        },
    );
    let eth = (any::<u64>(), any::<u32>(), any::<u32>(), any::<bool>()).prop_map(|(t, port, len, tx)| {
        if tx {
            (format!("eth tx: len {len}"), NicEvent::Tx { len }, t)
        } else {
            (format!("eth rx: port {port} len {len}"), NicEvent::Rx { port, len }, t)
        }
    });
    (prop_oneof![mmio, dma, eth], any::<bool>()).prop_map(|((msg, ev, t), info)| {
        (format!("{}main_time = {t}: nicbm: {msg}", if info { "info: " } else { "" }), ev, t)
    })
}

/// (line, time, op, node, device, uid, src, dst, sport, dport, payload size)
type Ns3Case = (String, u64, NetOp, u32, u32, u64, [u8; 4], [u8; 4], u16, u16, u32);

/// An ns-3 fork line with a UDP packet and the fields it must give.
fn ns3_line() -> impl Strategy<Value = Ns3Case> {
    (
        any::<u64>(),
        prop_oneof![Just(('+', NetOp::Enqueue)), Just(('-', NetOp::Dequeue)), Just(('d', NetOp::Drop))],
        any::<u32>(),
        any::<u32>(),
        any::<u64>(),
        any::<[u8; 4]>(),
        any::<[u8; 4]>(),
        any::<u16>(),
        any::<u16>(),
        any::<u32>(),
    )
        .prop_map(|(t, (k, op), node, dev, uid, s, d, sp, dp, size)| {
            let ip = |a: [u8; 4]| format!("{}.{}.{}.{}", a[0], a[1], a[2], a[3]);
            let line = format!(
                "{k} {t} /$ns3::NodeListPriv/NodeList/{node}/$ns3::Node/DeviceList/{dev}/$ns3::SimpleNetDevice/TxQueue/Enqueue \
                 Packet-Uid={uid} Intersting=false ns3::Ipv4Header (tos 0x0 DSCP Default ECN Not-ECT ttl 64 id 7 protocol 17 \
                 offset (bytes) 0 flags [none] length: 284 {} > {}) ns3::UdpHeader (length: 264 {sp} > {dp}) Payload (size={size})",
                ip(s),
                ip(d)
            );
            (line, t, op, node, dev, uid, s, d, sp, dp, size)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn parsers_never_panic_on_bytes(line in prop::collection::vec(any::<u8>(), 0..300)) {
        for f in FORMATS {
            let (o, ev) = parse_one(f, &line);
            if let LineOutcome::Skipped(_) = o {
                prop_assert!(ev.is_empty() || f == SimFormat::Qemu);
            }
        }
    }

    #[test]
    fn parsers_never_panic_on_near_misses(idx in 0usize..8, cut in 0usize..400, flip in 0usize..400, b in any::<u8>()) {
        // Real-looking lines, truncated and with one byte changed.
        let base = [
            "1869691991749: system.pc.simbricks_0: simbricks-pci: sending read addr c0080300 size 4 id 94469181196688 bar 0 offs 80300",
            "1369146219499: system.pc.simbricks_0: writeConfig: dev 0 func 0 reg 0x4 2 bytes: data = 0x6",
            "7: system.cpu: A0 T0 : 0xffffffff81600136 @slab_pre_alloc_hook.constprop.0+71. 2 : POP_R : IntAlu :",
            "info: 07 info: main_time = 5734963257000: nicbm: completed dma write op 0x55d6864e9dd0 addr 2368c6000 len 4",
            "info: main_time = 1: nicbm: write(off=0x34800, len=4, val=0x18, posted=1)",
            "-  2986435512000 /$ns3::NodeListPriv/NodeList/1/$ns3::Node/DeviceList/2/$ns3::CosimNetDevice/TxPacketToAdapter Packet-Uid=27 Intersting=false ns3::EthernetHeader ( length/type=0x800, source=78:d2:22:c4:b0:a9, destination=a8:32:06:8c:52:b1) ns3::Ipv4Header (tos 0x0 DSCP Default ECN Not-ECT ttl 64 id 50300 protocol 1 offset (bytes) 0 flags [none] length: 84 192.168.64.2 > 192.168.64.3) Payload (size=98)",
            "r 1.00001 /NodeList/2/DeviceList/0/$ns3::PointToPointNetDevice/MacRx ns3::PppHeader (Point-to-Point Protocol: IP (0x0021)) ns3::ArpHeader (reply source mac: 00-06-00:00:00:00:00:01 source ipv4: 10.0.0.1 dest mac: 00-06-00:00:00:00:00:02 dest ipv4: 10.0.0.2) Payload (size=256)",
            "8087@1795303214.725341:e1000e_tx_descr 0x6453002 : 8b00005a 0",
        ][idx];
        let mut line = base.as_bytes()[..cut.min(base.len())].to_vec();
        if !line.is_empty() {
            let i = flip % line.len();
            line[i] = b;
        }
        for f in FORMATS {
            let _ = parse_one(f, &line);
        }
    }

    #[test]
    fn gem5_records_round_trip((line, want, t) in gem5_line()) {
        let (o, ev) = parse_one(SimFormat::Gem5, line.as_bytes());
        prop_assert_eq!(o, LineOutcome::Parsed);
        prop_assert_eq!(ev.len(), 1);
        prop_assert_eq!(ev[0].raw_time, t);
        prop_assert_eq!(ev[0].time_ns, t / 1000);
        prop_assert_eq!(&ev[0].kind, &EventKind::Host(want));
    }

    #[test]
    fn nicbm_records_round_trip((line, want, t) in nicbm_line(), junk in "( info: [0-9A-F]{2}){0,4}") {
        // Glue the record behind DMA payload bytes, as real nicbm logs do.
        let glued = format!("{}{}{line}", junk.trim_start(), if junk.is_empty() { "" } else { " " });
        for l in [line.clone(), glued] {
            let (o, ev) = parse_one(SimFormat::Nicbm, l.as_bytes());
            prop_assert_eq!(o, LineOutcome::Parsed, "{}", l);
            prop_assert_eq!(ev.len(), 1);
            prop_assert_eq!(ev[0].raw_time, t);
            prop_assert_eq!(&ev[0].kind, &EventKind::Nic(want.clone()));
        }
    }

    #[test]
    fn ns3_records_round_trip((line, t, op, node, dev, uid, s, d, sp, dp, size) in ns3_line()) {
        let (o, ev) = parse_one(SimFormat::Ns3(Default::default()), line.as_bytes());
        prop_assert_eq!(o, LineOutcome::Parsed, "{}", line);
        prop_assert_eq!(ev[0].raw_time, t);
        let EventKind::Net(n) = &ev[0].kind else { panic!() };
        prop_assert_eq!((n.op, n.node, n.device, n.packet_uid, n.payload_size), (op, node, dev, Some(uid), size));
        let ip = n.ipv4.unwrap();
        prop_assert_eq!((ip.src_ip, ip.dst_ip, ip.src_port, ip.dst_port, ip.protocol, ip.ident), (s, d, sp, dp, 17, 7));
    }

    /// Valid records mixed with garbage, read with any chunk size: every valid record comes
    /// out once, in order, and every garbage line is counted as rejected.
    #[test]
    fn driver_keeps_every_record_and_counts_garbage(
        recs in prop::collection::vec((nicbm_line(), any::<bool>()), 1..40),
        chunk in 1usize..200,
    ) {
        let mut text = String::new();
        let mut want = Vec::new();
        let mut garbage = 0;
        for ((line, ev, t), bad) in &recs {
            if *bad {
                text.push_str("%%% not a record\n");
                garbage += 1;
            }
            text.push_str(line);
            text.push('\n');
            want.push((*t, ev.clone()));
        }
        let mut d = Driver::new(LineReader::with_limits(text.as_bytes(), chunk, 4096), parser_for(SimFormat::Nicbm, SourceId(0), SimFormat::Nicbm.default_clock(0)), 3);
        let mut out = Vec::new();
        while d.step(&mut out).unwrap() {}
        let st = d.into_stats();
        prop_assert_eq!(st.rejected.count(), garbage);
        prop_assert_eq!(st.rejected.samples.len(), garbage.min(3) as usize);
        let got: Vec<_> = out.iter().map(|e| (e.raw_time, match &e.kind { EventKind::Nic(n) => n.clone(), _ => unreachable!() })).collect();
        prop_assert_eq!(got, want);
        // Time never goes backwards in the output, whatever the input did.
        prop_assert!(out.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
        let mut latest = 0;
        let mut backwards = 0;
        for ((_, _, t), _) in &recs {
            if t / 1000 < latest { backwards += 1 } else { latest = t / 1000 }
        }
        prop_assert_eq!(st.out_of_order, backwards);
    }
}
