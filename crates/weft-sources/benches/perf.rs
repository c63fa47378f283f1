//! Ring-record decoding throughput: a realistic mix of perf records (sched_switch,
//! raw_syscalls sys_enter/sys_exit samples with their real tracefs layouts) decoded
//!
//! * `parse_only` — the record parser (header, sample fields, RAW slice), no event built;
//! * `typed` — weft's capture path: typed `KernelEvent`s with fields located from `format`;
//! * `generic` — the peer: every tracepoint decoded generically into named attributes (what a
//!   format-driven decoder like `perf script`'s libtraceevent does per field).
//!
//! Run: `cargo bench -p weft-sources --bench perf`. Criterion reports records/s.

use std::hint::black_box;

use criterion::{Criterion, Throughput};
use weft_model::{Clock, SourceId};
use weft_sources::perf::decode::{Decoder, Probe};
use weft_sources::perf::format::Format;
use weft_sources::perf::record::{
    Layout, Parser, Record, SAMPLE_CPU, SAMPLE_IDENTIFIER, SAMPLE_RAW, SAMPLE_TID, SAMPLE_TIME, encode_sample,
};

const SWITCH: &str = "name: sched_switch\nID: 372\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\
\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n\
\tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;\n\
\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n\
\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;\n\
\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n\
\tfield:int next_prio;\toffset:60;\tsize:4;\tsigned:1;\n";
const ENTER: &str = "name: sys_enter\nID: 443\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\
\tfield:long id;\toffset:8;\tsize:8;\tsigned:1;\n\
\tfield:unsigned long args[6];\toffset:16;\tsize:48;\tsigned:0;\n";
const EXIT: &str = "name: sys_exit\nID: 442\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\
\tfield:long id;\toffset:8;\tsize:8;\tsigned:1;\n\
\tfield:long ret;\toffset:16;\tsize:8;\tsigned:1;\n";

const LAYOUT: Layout = Layout {
    sample_type: SAMPLE_IDENTIFIER | SAMPLE_TID | SAMPLE_TIME | SAMPLE_CPU | SAMPLE_RAW,
    regs_user: 0,
    sample_id_all: true,
};

/// 30 000 records: per iteration of the pattern one switch and two syscall samples.
fn records() -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    for i in 0..10_000u64 {
        let t = 1_000_000 + i * 1000;
        let tid = 1000 + (i % 4) as u32;
        let mut sw = vec![0u8; 64];
        sw[8..12].copy_from_slice(b"work");
        sw[24..28].copy_from_slice(&tid.to_le_bytes());
        sw[32..40].copy_from_slice(&1i64.to_le_bytes());
        sw[40..44].copy_from_slice(b"idle");
        v.push(encode_sample(&[1, (u64::from(tid) << 32) | u64::from(tid), t, i % 2], Some(&sw), &[]));
        let mut en = vec![0u8; 64];
        en[8..16].copy_from_slice(&110i64.to_le_bytes());
        v.push(encode_sample(&[2, (u64::from(tid) << 32) | u64::from(tid), t + 10, i % 2], Some(&en), &[]));
        let mut ex = vec![0u8; 24];
        ex[8..16].copy_from_slice(&110i64.to_le_bytes());
        v.push(encode_sample(&[3, (u64::from(tid) << 32) | u64::from(tid), t + 20, i % 2], Some(&ex), &[]));
    }
    v
}

fn decoder(generic: bool) -> Decoder {
    let mut d = Decoder::new(Clock::UNIX_NANOS, SourceId(0));
    for (id, text, sys) in [(1, SWITCH, "sched"), (2, ENTER, "raw_syscalls"), (3, EXIT, "raw_syscalls")] {
        let f = Format::parse(text, sys).expect("format");
        let probe = if generic { Probe::Generic(std::sync::Arc::new(f)) } else { Probe::for_tracepoint(f) };
        d.add(id, LAYOUT, probe).expect("add");
    }
    d
}

fn main() {
    let recs = records();
    let mut c = Criterion::default().configure_from_args();
    let mut g = c.benchmark_group("perf_records");
    g.throughput(Throughput::Elements(recs.len() as u64));
    g.bench_function("parse_only", |b| {
        let mut p = Parser::new();
        for id in 1..=3 {
            p.add(id, LAYOUT).expect("add");
        }
        b.iter(|| {
            let mut n = 0usize;
            for r in &recs {
                if let Ok(Record::Sample(s)) = p.parse(r) {
                    n += s.raw.len();
                }
            }
            black_box(n)
        })
    });
    g.bench_function("typed", |b| {
        let mut d = decoder(false);
        let mut out = Vec::with_capacity(recs.len());
        b.iter(|| {
            out.clear();
            for r in &recs {
                out.push(d.decode(r, 0));
            }
            black_box(out.len())
        })
    });
    g.bench_function("generic", |b| {
        let mut d = decoder(true);
        let mut out = Vec::with_capacity(recs.len());
        b.iter(|| {
            out.clear();
            for r in &recs {
                out.push(d.decode(r, 0));
            }
            black_box(out.len())
        })
    });
    g.finish();
    c.final_summary();
}
