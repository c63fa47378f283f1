//! A slow sink: `block` makes the pipeline wait (every span reaches the sink), `drop`
//! discards whole batches and counts them. The "collector" accepts connections and answers
//! each request only after a delay.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

use weft_synth::simlog::Scenario;
use weft_weave::{Run, Topology};

fn slow_collector() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { return };
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 1 << 16];
                // One request per connection is enough for this test: read until idle, answer late.
                let _ = c.set_read_timeout(Some(Duration::from_millis(50)));
                while let Ok(n) = c.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                }
                std::thread::sleep(Duration::from_millis(30));
                let _ = c.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            });
        }
    });
    port
}

fn run(policy: &str) -> weft_weave::RunReport {
    let dir = tempfile::tempdir().unwrap();
    let s = Scenario { rounds: 12, exec_symbols: true, ..Scenario::default() };
    for (log, bytes) in s.generate() {
        std::fs::write(dir.path().join(log.file_name()), bytes).unwrap();
    }
    let port = slow_collector();
    let toml = format!(
        "{}\n[run]\nbatch_events = 16\n[[sink]]\nkind = \"otlp-http\"\nurl = \"http://127.0.0.1:{port}/v1/traces\"\nbatch_spans = 16\nqueue_batches = 1\nbackpressure = \"{policy}\"\n",
        s.topology(dir.path().to_str().unwrap())
    );
    let topo = Topology::parse(&toml, Path::new("t.toml"), dir.path()).unwrap();
    Run::start(&topo, vec![]).unwrap().wait().unwrap()
}

#[test]
fn block_waits_and_drop_counts() {
    let b = run("block");
    assert_eq!(b.sinks[0].spans, b.spans, "{:?}", b.sinks[0]);
    assert_eq!(b.sinks[0].dropped_spans, 0);
    let d = run("drop");
    assert_eq!(d.spans, b.spans, "weaving itself is unaffected");
    assert!(d.sinks[0].dropped_spans > 0, "{:?}", d.sinks[0]);
    assert_eq!(
        d.sinks[0].spans + d.sinks[0].dropped_spans + d.sinks[0].failed_spans,
        d.spans,
        "{:?}",
        d.sinks[0]
    );
}
