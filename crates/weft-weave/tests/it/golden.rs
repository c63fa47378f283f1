use std::path::Path;

use weft_weave::sink::{MemorySink, SinkSpec};
use weft_weave::{Run, Topology};

pub fn weave(toml: &str) -> (String, weft_weave::RunReport) {
    let base = weft_testkit::fixture("simulators");
    let topo = Topology::parse(toml, Path::new("test.toml"), &base).unwrap();
    let mem = MemorySink::new();
    let run = Run::start(&topo, vec![SinkSpec::Memory(mem.clone())]).unwrap();
    let rep = run.wait().unwrap();
    (weft_weave::render::render(&mem.spans()), rep)
}

#[test]
fn scratch() {
    let (r, rep) = weave(
        r#"
[[source]]
name = "ns3"
kind = "ns3"
path = "ns3/gen-ns3-3.44-simbricks-style-2host-2switch.tr"
nodes = { 0 = "h0", 1 = "sw0", 2 = "sw1", 3 = "h1" }
"#,
    );
    println!("{r}");
    println!("{:#?}", rep.weave);
}
