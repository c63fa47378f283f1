//! The OTLP protobuf file sink encodes batches on several threads: the file must still hold
//! every span in the order the weave produced them.

use std::path::Path;

use weft_synth::simlog::Scenario;
use weft_weave::sink::{MemorySink, SinkSpec};
use weft_weave::{Run, Topology};

#[test]
fn otlp_proto_file_keeps_the_weave_order_across_many_batches() {
    let s = Scenario { rounds: 30, noise: 2, ..Scenario::default() };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("kernel.syms"), weft_synth::simlog::kernel_syms()).unwrap();
    std::fs::write(dir.path().join("i40e.syms"), weft_synth::simlog::i40e_syms()).unwrap();
    for (log, bytes) in s.generate() {
        std::fs::write(dir.path().join(log.file_name()), bytes).unwrap();
    }
    let out = dir.path().join("out.pb");
    // Small batches: many requests, encoded out of order by the encoder threads.
    let toml = format!(
        "{}\n[run]\nbatch_events = 7\n[[sink]]\nkind = \"file\"\npath = \"{}\"\nformat = \"otlp-proto\"\n",
        s.topology(dir.path().to_str().unwrap()),
        out.display()
    );
    let topo = Topology::parse(&toml, Path::new("sink.toml"), dir.path()).unwrap();
    let mem = MemorySink::new();
    let rep = Run::start(&topo, vec![SinkSpec::Memory(mem.clone())]).unwrap().wait().unwrap();
    let want = mem.spans();
    assert!(want.len() > 100, "{} spans", want.len());
    assert_eq!(rep.sinks[0].spans, want.len() as u64);
    let got = weft_model::codec::otlp::decode_proto(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "span {i}");
    }
}
