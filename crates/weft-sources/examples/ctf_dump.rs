//! Prints every event of the CTF traces under a directory, one per line, in time order:
//! `time_ns raw name cpu pid tid fields`. Counters go to stderr.
//!
//!     cargo run -p weft-sources --example ctf_dump -- TRACE_DIR [--count | --events]
//!
//! With `--live net://HOST[:PORT]/host/HOSTNAME/SESSION` it follows an LTTng live session
//! until it is destroyed and counts its events, converted to weft events (what
//! `weft import ctf --live` reads before weaving).

use std::io::Write;

use weft_sources::ctf::{CtfReader, DecodeOptions};

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(dir) = args.next() else {
        eprintln!("usage: ctf_dump TRACE_DIR [--count | --events]");
        std::process::exit(2);
    };
    if dir == "--live" {
        live(&args.next().unwrap_or_default());
        return;
    }
    let mode = args.next().unwrap_or_default();
    let count_only = mode == "--count";
    let convert_only = mode == "--events";
    let mut held = 0usize;
    let mut r = match CtfReader::open(
        std::path::Path::new(&dir),
        weft_model::SourceId(0),
        DecodeOptions::default(),
    ) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    let out = std::io::stdout();
    let mut out = std::io::BufWriter::new(out.lock());
    let mut n = 0u64;
    let t0 = std::time::Instant::now();
    loop {
        let ev = match r.merged().next_event() {
            Ok(Some(ev)) => ev,
            Ok(None) => break,
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(1);
            }
        };
        n += 1;
        if count_only {
            continue;
        }
        let e = ev.to_event(weft_model::SourceId(0));
        if convert_only {
            held += std::hint::black_box(&e).raw_time as usize & 1;
            continue;
        }
        let weft_model::EventKind::Tracepoint(t) = &e.kind else { continue };
        let fields: Vec<String> = t.fields.iter().map(|kv| format!("{}={}", kv.key, kv.value)).collect();
        let _ = writeln!(
            out,
            "{} {} {} cpu={:?} pid={:?} tid={:?} {}",
            e.time_ns,
            e.raw_time,
            t.name,
            t.cpu,
            t.pid,
            t.tid,
            fields.join(" ")
        );
    }
    let _ = out.flush();
    let el = t0.elapsed();
    let _ = held;
    eprintln!(
        "{n} events in {:.3} s ({:.1} M/s); {:?}",
        el.as_secs_f64(),
        n as f64 / el.as_secs_f64() / 1e6,
        r.stats()
    );
}

fn live(url: &str) {
    use weft_sources::ctf::live::Poll;
    use weft_sources::ctf::{LiveOptions, LiveReader, LiveUrl};
    let run = || -> Result<(u64, std::time::Duration), weft_sources::ctf::LiveError> {
        let url = LiveUrl::parse(url)?;
        let mut r = LiveReader::open(&url, weft_model::SourceId(0), LiveOptions::default())?;
        let t0 = std::time::Instant::now();
        let (mut n, mut batch) = (0u64, Vec::with_capacity(4096));
        loop {
            batch.clear();
            match r.poll(&mut batch, 4096)? {
                Poll::Events(k) => n += k as u64,
                Poll::Idle => std::thread::sleep(std::time::Duration::from_millis(20)),
                Poll::End => return Ok((n, t0.elapsed())),
            }
        }
    };
    match run() {
        Ok((n, el)) => eprintln!("{n} events followed live in {:.3} s", el.as_secs_f64()),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
