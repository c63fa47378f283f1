//! Throughput of the simulator-log hot paths, in MB/s of log text, on inputs built by
//! replicating the synthetic ping scenario ([`weft_synth::simlog`]: lines laid out like the
//! fixtures', timestamps and ids shifted per round):
//!
//! * `parse/<fmt>` — read + parse only (weft-sources' driver and parser), one thread;
//! * `actors/gem5` — parse + symbolizer + type filter (gem5 logs are mostly instructions);
//! * `woven/<fmt>` — parse + actors + the weaver, one thread (what one core does per source);
//! * `pipeline/<n>src` — the whole threaded pipeline (sources, merge, weave, sink) over `n`
//!   gem5 logs read in parallel, to see throughput grow with cores; `pipeline/<n>src-nosink`
//!   the same without a sink;
//! * `peer/wc-l`, `peer/grep-c` — `wc -l` and `grep -c` over the same bytes, in the same run:
//!   a read-speed baseline for the machine.

use std::hint::black_box;
use std::path::Path;
use std::process::Command;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use weft_model::{Event, SourceId};
use weft_sources::drive::Driver;
use weft_sources::reader::LineReader;
use weft_sources::sim::{SimFormat, parser_for};
use weft_synth::simlog::{Log, Scenario};
use weft_weave::actor::{Actors, FilterSpec};
use weft_weave::weaver::{ComponentSpec, Role, Weave, WeaveConfig};

const TARGET: usize = 48 << 20;

fn input(log: Log, scenario: &Scenario) -> Vec<u8> {
    let mut out = Vec::with_capacity(TARGET + (1 << 20));
    let mut i = 0;
    while out.len() < TARGET {
        scenario.write_round(log, i, &mut out);
        i += 1;
    }
    out
}

fn scenario() -> Scenario {
    // 20 instruction lines per call: gem5 logs are dominated by instruction lines.
    Scenario { rounds: 0, noise: 20, ..Scenario::default() }
}

fn parse(fmt: SimFormat, data: &[u8]) -> u64 {
    let p = parser_for(fmt, SourceId(0), fmt.default_clock(0));
    let mut d = Driver::new(LineReader::new(data), p, 5);
    let mut out = Vec::with_capacity(8192);
    let mut n = 0u64;
    loop {
        let more = d.step(&mut out).unwrap_or(false);
        n += out.len() as u64;
        out.clear();
        if !more {
            break;
        }
    }
    n
}

fn symbolizer() -> weft_sources::symbols::Symbolizer {
    weft_synth::simlog::symbolizer().expect("synthetic symbol tables")
}

fn weave_one(fmt: SimFormat, role: Role, data: &[u8], actors: &mut Actors) -> u64 {
    let cfg = WeaveConfig {
        components: vec![ComponentSpec { name: "x".into(), tool: fmt.tool().into(), role }],
        ..WeaveConfig::default()
    };
    let mut w = Weave::new(&cfg).expect("weave");
    let p = parser_for(fmt, SourceId(0), fmt.default_clock(0));
    let mut d = Driver::new(LineReader::new(data), p, 5);
    let mut ev: Vec<Event> = Vec::with_capacity(8192);
    let mut spans = Vec::new();
    let mut n = 0u64;
    loop {
        let more = d.step(&mut ev).unwrap_or(false);
        actors.apply(&mut ev);
        for e in &ev {
            w.push(e, &mut spans);
        }
        n += spans.len() as u64;
        spans.clear();
        ev.clear();
        if !more {
            break;
        }
    }
    w.finish(&mut spans);
    n + spans.len() as u64
}

fn benches(c: &mut Criterion) {
    let sc = scenario();
    let gem5 = input(Log::ClientGem5, &sc);
    let nicbm = input(Log::ClientNic, &sc);
    let ns3 = input(Log::Ns3, &sc);
    let sym = symbolizer();
    let spec = FilterSpec::default();
    let nodes = Default::default();

    let mut g = c.benchmark_group("simlogs");
    g.sample_size(10);
    for (name, fmt, data) in [
        ("gem5", SimFormat::Gem5, &gem5),
        ("nicbm", SimFormat::Nicbm, &nicbm),
        ("ns3", SimFormat::Ns3(Default::default()), &ns3),
    ] {
        g.throughput(Throughput::Bytes(data.len() as u64));
        g.bench_function(format!("parse/{name}"), |b| b.iter(|| black_box(parse(fmt, data))));
    }
    g.throughput(Throughput::Bytes(gem5.len() as u64));
    g.bench_function("actors/gem5", |b| {
        b.iter(|| {
            let mut a = Actors::new("x", &nodes, Some(&sym), &spec);
            let p = parser_for(SimFormat::Gem5, SourceId(0), SimFormat::Gem5.default_clock(0));
            let mut d = Driver::new(LineReader::new(&gem5[..]), p, 5);
            let mut ev = Vec::new();
            let mut n = 0;
            loop {
                let more = d.step(&mut ev).unwrap_or(false);
                a.apply(&mut ev);
                n += ev.len();
                ev.clear();
                if !more {
                    break;
                }
            }
            black_box(n)
        })
    });
    for (name, fmt, role, data) in [
        ("gem5", SimFormat::Gem5, Role::Host, &gem5),
        ("nicbm", SimFormat::Nicbm, Role::Nic, &nicbm),
        ("ns3", SimFormat::Ns3(Default::default()), Role::Network { nodes: Default::default() }, &ns3),
    ] {
        g.throughput(Throughput::Bytes(data.len() as u64));
        g.bench_function(format!("woven/{name}"), |b| {
            b.iter(|| {
                let mut a = Actors::new("x", &nodes, (fmt == SimFormat::Gem5).then_some(&sym), &spec);
                black_box(weave_one(fmt, role.clone(), data, &mut a))
            })
        });
    }

    // The threaded pipeline over 1 and 2 gem5 logs (files), all stages, spans to /dev/null.
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("kernel.syms"), weft_synth::simlog::kernel_syms()).expect("write");
    std::fs::write(dir.path().join("i40e.syms"), weft_synth::simlog::i40e_syms()).expect("write");
    for k in 0..2 {
        std::fs::write(dir.path().join(format!("h{k}.gem5.log")), &gem5).expect("write");
    }
    // `nosink`: the same without the sink (spans counted and dropped), to see the sources
    // scale when the single sink thread is not what limits the run.
    for (n, sink) in [(1usize, true), (2, true), (1, false), (2, false)] {
        let mut toml = String::new();
        for k in 0..n {
            toml += &format!(
                "[[source]]\nname = \"h{k}\"\nkind = \"gem5\"\npath = \"h{k}.gem5.log\"\nsymbols = [{{ path = \"kernel.syms\" }}, {{ path = \"i40e.syms\", offset = \"{:#x}\" }}]\n",
                weft_synth::simlog::I40E_BASE
            );
        }
        if sink {
            toml += "[[sink]]\nkind = \"file\"\npath = \"/dev/null\"\nformat = \"otlp-proto\"\n";
        }
        let topo = weft_weave::Topology::parse(&toml, Path::new("bench.toml"), dir.path()).expect("topology");
        g.throughput(Throughput::Bytes((gem5.len() * n) as u64));
        let label = if sink { format!("pipeline/{n}src") } else { format!("pipeline/{n}src-nosink") };
        g.bench_function(label, |b| {
            b.iter(|| {
                black_box(weft_weave::Run::start(&topo, vec![]).expect("start").wait().expect("run").spans)
            })
        });
    }

    let file = dir.path().join("h0.gem5.log");
    g.throughput(Throughput::Bytes(gem5.len() as u64));
    g.bench_function("peer/wc-l", |b| {
        b.iter(|| black_box(Command::new("wc").arg("-l").arg(&file).output().expect("wc")))
    });
    g.bench_function("peer/grep-c", |b| {
        b.iter(|| {
            black_box(Command::new("grep").arg("-c").arg("simbricks").arg(&file).output().expect("grep"))
        })
    });
    g.finish();
}

criterion_group!(group, benches);
criterion_main!(group);
