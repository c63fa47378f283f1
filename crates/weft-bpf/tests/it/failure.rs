//! Probes that cannot attach fail cleanly: the verifier's log is shown, an unknown symbol,
//! tracepoint or field is named, and no map, program or perf event stays open.

use std::path::PathBuf;

use weft_bpf::insn::{Asm, R0, R2, Size};
use weft_bpf::{Agg, Error, Location, Probe, Query, Source, Value, compile};

use crate::{bpf_fds, serial};

fn count_writes() -> Query {
    Query::new(Source::Tracepoint("raw_syscalls:sys_enter".into())).agg(Agg::Count)
}

#[test]
fn a_program_the_verifier_refuses_shows_its_log_and_leaves_nothing_behind() {
    let _g = serial();
    let before = bpf_fds();
    let mut c = compile(&count_writes()).unwrap();
    // Replace the program with one that reads an uninitialised register.
    let mut a = Asm::new();
    a.ldx(Size::DW, R0, R2, 0);
    a.exit();
    c.programs[0].code = a.finish().unwrap();
    let err = Probe::attach(c).unwrap_err();
    let Error::Verifier { log, .. } = &err else { panic!("expected a verifier refusal, got {err}") };
    assert!(log.contains("R2 !read_ok"), "verifier log: {log}");
    assert!(err.to_string().contains("R2 !read_ok"));
    assert_eq!(bpf_fds(), before, "maps and programs of the refused probe are closed");

    // A refusal of the second program (a uretprobe's return) detaches the first (its entry).
    let dir = tempfile::tempdir().unwrap();
    let bin = crate::uprobe::workload_binary(dir.path());
    let q = Query::new(Source::Uretprobe { binary: bin, at: Location::Symbol("weft_nap".into()) })
        .agg(Agg::Hist(Value::Latency));
    let mut c = compile(&q).unwrap();
    assert_eq!(c.programs.len(), 2);
    let mut a = Asm::new();
    a.exit(); // R0 never set
    c.programs[1].code = a.finish().unwrap();
    let err = Probe::attach(c).unwrap_err();
    assert!(err.to_string().contains("R0 !read_ok"), "{err}");
    assert_eq!(bpf_fds(), before);
}

#[test]
fn unknown_symbols_tracepoints_and_fields_are_named() {
    let _g = serial();
    let before = bpf_fds();
    let exe = std::env::current_exe().unwrap();
    let q = Query::new(Source::Uprobe { binary: exe, at: Location::Symbol("no_such_function_here".into()) })
        .agg(Agg::Count);
    let err = Probe::start(&q).unwrap_err().to_string();
    assert!(err.contains("no function \"no_such_function_here\""), "{err}");
    let q = Query::new(Source::Uprobe {
        binary: PathBuf::from("/no/such/binary"),
        at: Location::Address(0x1000),
    })
    .agg(Agg::Count);
    assert!(Probe::start(&q).unwrap_err().to_string().contains("/no/such/binary"));
    let q = Query::new(Source::Tracepoint("raw_syscalls:no_such_event".into())).agg(Agg::Count);
    assert!(Probe::start(&q).unwrap_err().to_string().contains("no tracepoint raw_syscalls:no_such_event"));
    let q = count_writes().agg(Agg::Sum(Value::Field("bytes".into())));
    let err = Probe::start(&q).unwrap_err().to_string();
    assert!(err.contains("no field \"bytes\"") && err.contains("args"), "{err}");
    let q = count_writes().agg(Agg::Sum(Value::Field("args[6]".into())));
    assert!(Probe::start(&q).unwrap_err().to_string().contains("beyond its 6 elements"));
    let q = count_writes().agg(Agg::Sum(Value::Retval));
    assert!(Probe::start(&q).unwrap_err().to_string().contains("only a uretprobe"));
    assert_eq!(bpf_fds(), before);
}
