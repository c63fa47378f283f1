//! uprobes and uretprobes on a C program the test builds: count, sum, min/max and log2
//! histogram of an argument, a histogram of the return value, and entry→return latency —
//! weft-bpf and bpftrace on the same run must agree (and with what the program did).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use weft_bpf::{Agg, Cmp, Filter, Location, Probe, Query, Source, State, Value};

use crate::{bpftrace, buckets, log2_bucket, serial};

pub fn workload_binary(dir: &std::path::Path) -> PathBuf {
    weft_testkit::compile_c("crates/weft-bpf/tests/it/workload.c", dir)
}

#[test]
fn uprobe_and_uretprobe_aggregates_match_bpftrace() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let bin = workload_binary(dir.path());
    let mut child = Command::new(&bin).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let pid = child.id() as i64;
    let at = |f: &str| Location::Symbol(f.into());
    let this = Filter::cmp(Value::Pid, Cmp::Eq, pid);
    let entry = Query::new(Source::Uprobe { binary: bin.clone(), at: at("weft_work") })
        .filter(this.clone())
        .agg(Agg::Count)
        .agg(Agg::Sum(Value::Arg(0)))
        .agg(Agg::Hist(Value::Arg(0)))
        .agg(Agg::Min(Value::Arg(0)))
        .agg(Agg::Max(Value::Arg(0)));
    let ret = Query::new(Source::Uretprobe { binary: bin.clone(), at: at("weft_work") })
        .filter(this.clone())
        .agg(Agg::Hist(Value::Retval));
    let lat = Query::new(Source::Uretprobe { binary: bin.clone(), at: at("weft_nap") })
        .filter(this.clone())
        .agg(Agg::Count)
        .agg(Agg::Hist(Value::Latency));
    let probes: Vec<Probe> = [entry, ret, lat].iter().map(|q| Probe::start(q).unwrap()).collect();
    let b = bin.display();
    let bt = bpftrace(&format!(
        "uprobe:{b}:weft_work /pid == {pid}/ {{ @c = count(); @s = sum(arg0); @h = hist(arg0); \
         @mn = min(arg0); @mx = max(arg0); }} \
         uretprobe:{b}:weft_work /pid == {pid}/ {{ @r = hist(retval); }} \
         uprobe:{b}:weft_nap /pid == {pid}/ {{ @start[tid] = nsecs; }} \
         uretprobe:{b}:weft_nap /pid == {pid} && @start[tid]/ {{ @n = count(); \
         @lat = hist(nsecs - @start[tid]); delete(@start[tid]); }}"
    ));
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let got: Vec<_> = probes.iter().map(|p| p.read().unwrap()).collect();
    let bt = bt.finish();
    drop(probes);

    let args: Vec<i64> = (0..1000).map(|i| i % 300).collect();
    let mut hist = BTreeMap::new();
    let mut rets = BTreeMap::new();
    for a in &args {
        *hist.entry(log2_bucket(*a)).or_insert(0u64) += 1;
        *rets.entry(log2_bucket(a * 3)).or_insert(0u64) += 1;
    }
    let expected = vec![
        State::Count(1000),
        State::Sum(args.iter().sum()),
        State::Buckets(hist),
        State::Min(Some(0)),
        State::Max(Some(299)),
    ];
    assert_eq!(got[0].groups[&Vec::new()], expected, "weft-bpf uprobe");
    let from_bt = vec![
        State::Count(bt["@c"].as_u64().unwrap()),
        State::Sum(bt["@s"].as_i64().unwrap()),
        buckets(&bt["@h"], None),
        State::Min(bt["@mn"].as_i64()),
        State::Max(bt["@mx"].as_i64()),
    ];
    assert_eq!(from_bt, expected, "bpftrace uprobe");
    assert_eq!(got[1].groups[&Vec::new()], vec![State::Buckets(rets.clone())], "weft-bpf uretprobe");
    assert_eq!(buckets(&bt["@r"], None), State::Buckets(rets), "bpftrace uretprobe");

    // Latency: 5 naps of 1.2 ms land in [2^20, 2^21) ns, 3 of 5 ms in [2^22, 2^23) — far from
    // the bucket edges, so both tools put each call in the same bucket.
    let lat = &got[2].groups[&Vec::new()];
    assert_eq!(lat[0], State::Count(8));
    assert_eq!(bt["@n"].as_u64(), Some(8));
    assert_eq!(lat[1], buckets(&bt["@lat"], None), "latency: weft-bpf vs bpftrace");
    let State::Buckets(b) = &lat[1] else { panic!("{lat:?}") };
    assert_eq!(b.values().sum::<u64>(), 8);
    assert!(got.iter().all(|p| p.drops == 0));
}
