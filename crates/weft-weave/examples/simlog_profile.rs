//! One pass of the simulator-log hot paths over a synthetic input, for profilers
//! (`valgrind --tool=callgrind`, `perf stat`): instructions per input byte are the profiler's
//! count divided by the byte count this prints.
//!
//! ```text
//! cargo build --release -p weft-weave --example simlog_profile
//! valgrind --tool=callgrind target/release/examples/simlog_profile woven nicbm 8
//! ```
//!
//! Arguments: `parse|woven` `gem5|nicbm|ns3` [MiB of input, default 8]. The input is built
//! like the `weave` bench's (the synthetic ping scenario, 20 instruction lines per gem5 call).

use std::time::Instant;

use weft_model::{Event, SourceId};
use weft_sources::drive::Driver;
use weft_sources::reader::LineReader;
use weft_sources::sim::{SimFormat, parser_for};
use weft_synth::simlog::{Log, Scenario};
use weft_weave::actor::{Actors, FilterSpec};
use weft_weave::weaver::{ComponentSpec, Role, Weave, WeaveConfig};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map(String::as_str).unwrap_or("parse");
    let fmt_name = args.get(2).map(String::as_str).unwrap_or("nicbm");
    let mib: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(8);
    let (log, fmt, role) = match fmt_name {
        "gem5" => (Log::ClientGem5, SimFormat::Gem5, Role::Host),
        "nicbm" => (Log::ClientNic, SimFormat::Nicbm, Role::Nic),
        "ns3" => (Log::Ns3, SimFormat::Ns3(Default::default()), Role::Network { nodes: Default::default() }),
        other => {
            eprintln!("unknown format {other} (gem5, nicbm, ns3)");
            std::process::exit(2);
        }
    };
    let sc = Scenario { rounds: 0, noise: 20, ..Scenario::default() };
    let mut data = Vec::with_capacity((mib << 20) + (1 << 20));
    let mut i = 0;
    while data.len() < mib << 20 {
        sc.write_round(log, i, &mut data);
        i += 1;
    }
    let sym = (fmt == SimFormat::Gem5).then(symbolizer);
    let t0 = Instant::now();
    let (lines, events, spans_n) = run(mode == "woven", fmt, role, &data, sym.as_ref());
    let dt = t0.elapsed().as_secs_f64();
    println!(
        "{mode} {fmt_name}: {} bytes, {lines} lines, {events} events, {spans_n} spans, {:.1} MiB/s",
        data.len(),
        data.len() as f64 / dt / (1 << 20) as f64
    );
}

/// The measured work (a separate function so that profilers can collect only it:
/// `--toggle-collect='simlog_profile::run'`). Returns (lines, events, spans).
#[inline(never)]
fn run(
    woven: bool,
    fmt: SimFormat,
    role: Role,
    data: &[u8],
    sym: Option<&weft_sources::symbols::Symbolizer>,
) -> (u64, u64, u64) {
    let p = parser_for(fmt, SourceId(0), fmt.default_clock(0));
    let mut d = Driver::new(LineReader::new(data), p, 5);
    let mut ev: Vec<Event> = Vec::with_capacity(8192);
    let (mut events, mut spans_n) = (0u64, 0u64);
    let nodes = Default::default();
    let spec = FilterSpec::default();
    let mut actors = Actors::new("x", &nodes, sym, &spec);
    let cfg = WeaveConfig {
        components: vec![ComponentSpec { name: "x".into(), tool: fmt.tool().into(), role }],
        ..WeaveConfig::default()
    };
    let mut w = Weave::new(&cfg).expect("weave config");
    let mut spans = Vec::new();
    loop {
        let more = d.step(&mut ev).unwrap_or(false);
        if woven {
            actors.apply(&mut ev);
            for e in &ev {
                w.push(e, &mut spans);
            }
            spans_n += spans.len() as u64;
            spans.clear();
        }
        events += ev.len() as u64;
        ev.clear();
        if !more {
            break;
        }
    }
    if woven {
        w.finish(&mut spans);
        spans_n += spans.len() as u64;
    }
    (d.stats().lines, events, spans_n)
}

fn symbolizer() -> weft_sources::symbols::Symbolizer {
    weft_synth::simlog::symbolizer().expect("synthetic symbol tables")
}
