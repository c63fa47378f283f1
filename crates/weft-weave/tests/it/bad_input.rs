//! Bad input: truncated lines, garbage, out-of-order timestamps, a pipe that closes early —
//! counted and reported, never a panic, never unbounded buffers.

use std::io::Write;
use std::path::Path;

use weft_synth::simlog::{Log, Scenario};
use weft_weave::sink::{MemorySink, SinkSpec};
use weft_weave::{Run, Topology};

#[test]
fn garbage_truncation_and_disorder_are_counted() {
    let s = Scenario { rounds: 6, ..Scenario { exec_symbols: true, ..Scenario::default() } };
    let dir = tempfile::tempdir().unwrap();
    for (log, bytes) in s.generate() {
        let text = String::from_utf8(bytes).unwrap();
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        match log {
            Log::ClientNic => {
                // Garbage and a truncated record in the middle.
                lines.insert(5, "\u{1}\u{2}garbage ÿ".into());
                lines.insert(9, "info: main_time = 20000012".into());
                lines.insert(12, "info: main_time = 2000001700000: nicbm: issuing dma op 0xzz addr".into());
            }
            Log::ServerGem5 => {
                // A line going back in time by 1 ms.
                let l = lines.remove(3);
                let t: u64 = l.split(':').next().unwrap().parse().unwrap();
                lines.insert(3, l.replacen(&t.to_string(), &(t - 1_000_000_000).to_string(), 1));
            }
            Log::Ns3 => {
                // The log ends in the middle of a line (the writer died).
                let last = lines.pop().unwrap();
                lines.push(last[..last.len() / 2].to_owned());
            }
            _ => {}
        }
        let mut body = lines.join("\n");
        if log != Log::Ns3 {
            body.push('\n');
        }
        std::fs::write(dir.path().join(log.file_name()), body).unwrap();
    }
    let topo =
        Topology::parse(&s.topology(dir.path().to_str().unwrap()), Path::new("t.toml"), dir.path()).unwrap();
    let mem = MemorySink::new();
    let rep = Run::start(&topo, vec![SinkSpec::Memory(mem.clone())]).unwrap().wait().unwrap();
    let by = |n: &str| rep.sources.iter().find(|s| s.name == n).unwrap();
    let nic = &by("client-nic").stats;
    assert_eq!(nic.rejected.count(), 3, "{:?}", nic.rejected);
    assert_eq!(
        nic.rejected.samples[0].line, 6,
        "the first reject names its line: {:?}",
        nic.rejected.samples
    );
    let server = &by("server").stats;
    assert_eq!(server.out_of_order, 1);
    assert_eq!(server.out_of_order_samples[0].line, 4);
    let ns3 = &by("ns3").stats;
    assert!(ns3.ended_mid_line);
    assert_eq!(ns3.rejected.count(), 1, "the half line is rejected: {:?}", ns3.rejected);
    // Everything else still wove: most traces are whole; the broken pieces are marked.
    assert!(rep.spans > 200, "{}", rep.spans);
    let spans = mem.spans();
    assert!(spans.iter().any(|s| s.attributes.get(weft_model::conv::INCOMPLETE).is_some()));
}

#[test]
fn a_pipe_that_closes_early_ends_its_source_only() {
    let dir = tempfile::tempdir().unwrap();
    let s = Scenario { rounds: 4, exec_symbols: true, ..Scenario::default() };
    for (log, bytes) in s.generate() {
        std::fs::write(dir.path().join(log.file_name()), bytes).unwrap();
    }
    // Replace the server NIC's log by a pipe whose writer sends half a line and quits.
    let p = dir.path().join(Log::ServerNic.file_name());
    std::fs::remove_file(&p).unwrap();
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let w = std::thread::spawn(move || {
        let mut f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.write_all(
            b"info: main_time = 2000005900000: nicbm: eth rx: port 0 len 98\ninfo: main_time = 20000059",
        )
        .unwrap();
    });
    let topo =
        Topology::parse(&s.topology(dir.path().to_str().unwrap()), Path::new("t.toml"), dir.path()).unwrap();
    let rep = Run::start(&topo, vec![]).unwrap().wait().unwrap();
    w.join().unwrap();
    let nic = rep.sources.iter().find(|s| s.name == "server-nic").unwrap();
    assert!(nic.stream && nic.stats.ended_mid_line);
    assert_eq!((nic.stats.lines, nic.stats.events, nic.stats.rejected.count()), (2, 1, 1));
    // The server host's DMAs found no NIC cause: counted, not lost.
    let dma = rep.weave.links.iter().find(|l| l.link == "server ↔ server-nic" && l.kind == "dma").unwrap();
    assert!(dma.stats.unmatched_effects > 0, "{dma:?}");
    assert!(rep.spans > 50);
}
