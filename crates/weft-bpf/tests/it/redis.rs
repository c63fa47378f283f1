//! A real program from Debian under its own benchmark: `redis-server` driven by
//! `redis-benchmark -n N -t set,get`, with weft-bpf and bpftrace attached to the same uprobe
//! and uretprobe of `processCommand` (the function every command goes through) at the same
//! time — the same count and the same histogram of the return value, and at least the `2 N`
//! commands the benchmark sent.

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use weft_bpf::{Agg, Cmp, Filter, Location, Probe, Query, Source, State, Value};

use crate::{bpftrace, buckets, serial};

const REDIS: &str = "/usr/bin/redis-server";
const REQUESTS: u64 = 2000;

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn redis_benchmark_counts_and_return_histogram_match_bpftrace() {
    let _g = serial();
    assert!(
        std::path::Path::new(REDIS).exists(),
        "redis-server and redis-tools (listed in .ci/apt-packages) must be installed"
    );
    let port = weft_testkit::free_port();
    let server = Server(
        Command::new(REDIS)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server"),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "redis-server did not listen on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = server.0.id() as i64;
    let at = || Location::Symbol("processCommand".into());
    let this = Filter::cmp(Value::Pid, Cmp::Eq, pid);
    let entry = Probe::start(
        &Query::new(Source::Uprobe { binary: REDIS.into(), at: at() }).filter(this.clone()).agg(Agg::Count),
    )
    .unwrap();
    let ret = Probe::start(
        &Query::new(Source::Uretprobe { binary: REDIS.into(), at: at() })
            .filter(this)
            .agg(Agg::Count)
            .agg(Agg::Hist(Value::Retval)),
    )
    .unwrap();
    let bt = bpftrace(&format!(
        "uprobe:{REDIS}:processCommand /pid == {pid}/ {{ @c = count(); }} \
         uretprobe:{REDIS}:processCommand /pid == {pid}/ {{ @rc = count(); @r = hist(retval); }}"
    ));
    let bench = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-n", &REQUESTS.to_string()])
        .args(["-t", "set,get", "-c", "4", "-q"])
        .stdout(Stdio::null())
        .status()
        .expect("redis-benchmark (redis-tools)");
    assert!(bench.success());
    let (e, r) = (entry.read().unwrap(), ret.read().unwrap());
    let bt = bt.finish();
    drop((entry, ret, server));

    let count = |s: &State| match s {
        State::Count(n) => *n,
        other => panic!("{other:?}"),
    };
    let calls = count(&e.groups[&Vec::new()][0]);
    assert!(e.drops == 0 && r.drops == 0);
    let r = &r.groups[&Vec::new()];
    eprintln!("redis: {calls} commands for {REQUESTS} SET + {REQUESTS} GET; returns {:?}", r[1]);
    assert!(calls >= 2 * REQUESTS, "{calls} commands for {REQUESTS} SET and {REQUESTS} GET");
    assert_eq!(bt["@c"].as_u64(), Some(calls), "uprobe count: bpftrace vs weft-bpf");
    assert_eq!(count(&r[0]), calls, "every command returned");
    assert_eq!(bt["@rc"].as_u64(), Some(calls), "uretprobe count: bpftrace vs weft-bpf");
    assert_eq!(buckets(&bt["@r"], None), r[1], "return-value histogram: bpftrace vs weft-bpf");
}
