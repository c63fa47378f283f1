use super::bt2;
use weft_sources::ctf::{CtfReader, DecodeOptions};

#[test]
#[ignore]
fn dev_compare_babeltrace_traces() {
    let root = std::path::Path::new("/tmp/bt/tests/data/ctf-traces");
    let dirs = std::env::var("DEV_TRACES").unwrap();
    for d in dirs.split(',') {
        let dir = root.join(d);
        let mut r = CtfReader::open(
            &dir,
            weft_model::SourceId(0),
            DecodeOptions { strict: true, ..Default::default() },
        )
        .unwrap();
        let mut evs = Vec::new();
        while r.next_batch(&mut evs, 1000).unwrap() > 0 {}
        let bt = bt2::run(&dir, "--clock-cycles");
        let c = bt2::compare(&evs, &bt, false);
        println!("{d}: {} events, {} fields, {} mismatches", c.events, c.fields, c.mismatches.len());
        for m in c.mismatches.iter().take(5) {
            println!("   {}", &m[..m.len().min(400)]);
        }
    }
}

#[test]
#[ignore]
fn dev_write_synth() {
    use weft_sources::ctf::synth::*;
    let p = std::path::Path::new("/tmp/synthA");
    let _ = std::fs::remove_dir_all(p);
    let s = write_trace(
        p,
        &SynthOptions {
            events: 3000,
            streams: 3,
            packet_bytes: 4096,
            header: Header::Compact,
            ..Default::default()
        },
    )
    .unwrap();
    println!("{s:?}");
}

#[test]
#[ignore]
fn dev_positions() {
    use weft_sources::ctf::*;
    let t = CtfTrace::open(std::path::Path::new("/tmp/synthB")).unwrap();
    let mut d = t.decoders(&DecodeOptions::default()).unwrap().remove(0);
    let bytes = std::fs::read("/tmp/synthB/ch_0").unwrap();
    let mut last = 0u64;
    for _ in 0..45 {
        d.next_event().unwrap();
        let (p, b) = d.position();
        let e = d.event().to_event(weft_model::SourceId(0));
        let weft_model::EventKind::Tracepoint(tp) = &e.kind else { panic!() };
        let start = (p * 8 + last) / 8;
        let end = (p * 8 + b) / 8;
        println!("{} {}..{} {:02x?}", tp.name, start, end, &bytes[start as usize..end as usize]);
        last = b;
    }
}

#[test]
#[ignore]
fn dev_write_1m() {
    use weft_sources::ctf::synth::*;
    for (p, small) in [("/tmp/synth1m", true), ("/tmp/synth1m_mixed", false)] {
        let p = std::path::Path::new(p);
        let _ = std::fs::remove_dir_all(p);
        let h = if small { Header::Large } else { Header::Compact };
        write_trace(
            p,
            &SynthOptions {
                events: 1_000_000,
                streams: 1,
                packet_bytes: 4 << 20,
                header: h,
                small_only: small,
                ..Default::default()
            },
        )
        .unwrap();
    }
}
