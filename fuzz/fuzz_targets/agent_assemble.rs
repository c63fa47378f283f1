//! Records from a (possibly corrupt or adversarial) process segment go through the span
//! assembler: whatever their order, ids, kinds or fields, it never panics, every span it
//! emits has valid ids, and the positions it lets the agent release never move backwards past
//! what was read.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_agent::convert::{Assembler, AssemblerConfig, ProcessIdentity, TpTable};
use weft_probe::clock::Calibration;
use weft_probe::consumer::decode_record;

fuzz_target!(|data: &[u8]| {
    let tps = TpTable::new(&[]);
    let clock = Calibration::REALTIME;
    let cfg = AssemblerConfig { max_open: 8, orphan_timeout_ns: 10, ..AssemblerConfig::default() };
    let mut a = Assembler::new(ProcessIdentity::default(), cfg, &clock);
    let mut out = Vec::new();
    let mut pos = 0u64;
    let mut rest = data;
    while rest.len() >= 2 {
        let ring = (rest[0] % 4) as usize;
        let replay = rest[0] & 0x80 != 0;
        let len = ((rest[1] as usize) * 8).clamp(48, 2040);
        rest = &rest[2..];
        let take = len.min(rest.len() & !7);
        if take < 48 {
            break;
        }
        let mut buf = rest[..take].to_vec();
        buf[0..2].copy_from_slice(&(take as u16).to_ne_bytes());
        rest = &rest[take..];
        if let Ok(r) = decode_record(&buf) {
            a.record(ring, pos, &r, replay, &tps, &clock, pos, &mut out);
            let rp = a.release_point(ring, pos + take as u64, 4096);
            assert!(rp <= pos + take as u64);
        }
        pos += take as u64;
        if pos % 7 == 0 {
            a.sweep(pos, &mut out);
        }
    }
    a.end_replay();
    a.flush_all(&mut out);
    assert_eq!(a.open_spans(), 0);
    for s in &out {
        assert!(s.span_id.is_valid(), "{s:?}");
        assert!(s.trace_id.is_valid(), "{s:?}");
    }
});
