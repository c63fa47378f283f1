//! Captures a command with weft-sources' perf capture and prints event counts by type:
//!
//!     cargo run -p weft-sources --example capture -- -e raw_syscalls:sys_enter [-u BIN:FUNC] -- CMD ARGS...
//!
//! (Needs root.) `weft record` is the full tool; this is the library on its own.

use std::collections::BTreeMap;
use std::time::Duration;

use weft_sources::perf::{Capture, CaptureConfig, StoppedChild, Target, UprobeTarget};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let split = args
        .iter()
        .position(|a| a == "--")
        .ok_or("usage: capture [-e SYS:EVENT]... [-u BIN:FUNC]... -- CMD...")?;
    let (opts, cmd) = (&args[..split], &args[split + 1..]);
    let mut cfg = CaptureConfig { tracepoints: Vec::new(), ..CaptureConfig::default() };
    let mut it = opts.iter();
    while let Some(o) = it.next() {
        let v = it.next().ok_or("option without a value")?;
        match o.as_str() {
            "-e" => cfg.tracepoints.push(v.clone()),
            "-u" => cfg.uprobes.push(UprobeTarget::resolve(v)?),
            _ => return Err(format!("unknown option {o}").into()),
        }
    }
    let mut child = StoppedChild::spawn(cmd)?;
    cfg.target =
        if std::env::var_os("CAPTURE_ALL").is_some() { Target::All } else { Target::Exec(child.pid) };
    let mut cap = Capture::open(&cfg)?;
    cap.enable()?;
    child.release()?;
    let mut events = Vec::new();
    let code = loop {
        if let Some(c) = child.try_wait() {
            break c;
        }
        cap.poll(Duration::from_millis(100), &mut events)?;
    };
    cap.finish(&mut events);
    let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
    for e in &events {
        *counts.entry(e.type_name()).or_default() += 1;
    }
    println!("exit {code}; events by type: {counts:?}");
    println!("{:?}", cap.stats());
    Ok(())
}
