//! perf ring records as a capture drains them: arbitrary bytes split at their header sizes
//! must parse and decode to events or counted errors, never a panic — with typed decoders
//! (sched_switch, sys_enter/exit), a generic tracepoint layout and a uprobe layout registered.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_model::{Clock, SourceId};
use weft_sources::perf::decode::{Decoder, Probe};
use weft_sources::perf::format::Format;
use weft_sources::perf::record::{Layout, SAMPLE_CPU, SAMPLE_IDENTIFIER, SAMPLE_RAW, SAMPLE_TID, SAMPLE_TIME};

const SWITCH: &str = "name: sched_switch\nID: 1\nformat:\n\
\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n\
\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n\
\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;\n\
\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n";
const ENTER: &str = "name: sys_enter\nID: 2\nformat:\n\
\tfield:long id;\toffset:8;\tsize:8;\tsigned:1;\n\
\tfield:unsigned long args[6];\toffset:16;\tsize:48;\tsigned:0;\n";
const EXIT: &str = "name: sys_exit\nID: 3\nformat:\n\
\tfield:long id;\toffset:8;\tsize:8;\tsigned:1;\n\
\tfield:long ret;\toffset:16;\tsize:8;\tsigned:1;\n";
const GENERIC: &str = "name: x\nID: 4\nformat:\n\
\tfield:__data_loc char[] name;\toffset:8;\tsize:4;\tsigned:0;\n\
\tfield:__rel_loc char[] rel;\toffset:12;\tsize:4;\tsigned:0;\n\
\tfield:u16 arr[3];\toffset:16;\tsize:6;\tsigned:0;\n\
\tfield:char c[5];\toffset:22;\tsize:5;\tsigned:0;\n";
const UPROBE: &str = "name: f_0_entry\nID: 5\nformat:\n\
\tfield:unsigned long __probe_ip;\toffset:8;\tsize:8;\tsigned:0;\n\
\tfield:u64 arg0;\toffset:16;\tsize:8;\tsigned:0;\n\tfield:u64 arg1;\toffset:24;\tsize:8;\tsigned:0;\n\
\tfield:u64 arg2;\toffset:32;\tsize:8;\tsigned:0;\n\tfield:u64 arg3;\toffset:40;\tsize:8;\tsigned:0;\n\
\tfield:u64 arg4;\toffset:48;\tsize:8;\tsigned:0;\n\tfield:u64 arg5;\toffset:56;\tsize:8;\tsigned:0;\n";

fuzz_target!(|data: &[u8]| {
    let layout = Layout { sample_type: SAMPLE_IDENTIFIER | SAMPLE_TID | SAMPLE_TIME | SAMPLE_CPU | SAMPLE_RAW, regs_user: 0, sample_id_all: true };
    let mut d = Decoder::new(Clock::UNIX_NANOS, SourceId(0));
    let fmt = |t: &str, sys: &str| Format::parse(t, sys).expect("built-in format parses");
    d.add(1, layout, Probe::for_tracepoint(fmt(SWITCH, "sched"))).unwrap();
    d.add(2, layout, Probe::for_tracepoint(fmt(ENTER, "raw_syscalls"))).unwrap();
    d.add(3, layout, Probe::for_tracepoint(fmt(EXIT, "raw_syscalls"))).unwrap();
    d.add(4, layout, Probe::for_tracepoint(fmt(GENERIC, "s"))).unwrap();
    d.add(5, layout, Probe::for_uprobe("b:f".into(), false, &fmt(UPROBE, "weft")).unwrap()).unwrap();
    let mut rest = data;
    while rest.len() >= 8 {
        let size = (u16::from_le_bytes([rest[6], rest[7]]) as usize).clamp(8, rest.len());
        let _ = d.decode(&rest[..size], 0);
        rest = &rest[size..];
    }
    // The format parser itself on the same bytes.
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(f) = Format::parse(text, "fuzz") {
            let _ = f.decode(data);
        }
    }
});
