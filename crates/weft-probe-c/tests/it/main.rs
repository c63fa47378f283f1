//! Builds examples/c-probe against the static and the shared library with gcc, runs it, and
//! checks what it recorded through the capture reader and the consumer (agent) API.

use std::path::{Path, PathBuf};
use std::process::Command;
use weft_probe::capture::Capture;
use weft_probe::consumer::{self, FieldValue, Record, RecordKind, Segment};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).unwrap().to_path_buf()
}

/// The directory holding libweft_probe_c.{a,so}: `target/<profile>/deps/` (where `cargo test`
/// builds the library's staticlib and cdylib next to this test binary) or `target/<profile>/`
/// (where `cargo build` puts them).
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap().to_path_buf();
    let candidates = [deps.clone(), deps.parent().unwrap().to_path_buf()];
    candidates
        .iter()
        .find(|d| d.join("libweft_probe_c.a").exists() && d.join("libweft_probe_c.so").exists())
        .cloned()
        .unwrap_or_else(|| panic!("libweft_probe_c.a/.so not built in {} or its parent", deps.display()))
}

fn gcc(out: &Path, shared: bool) {
    let lib = lib_dir();
    let mut c = Command::new("gcc");
    c.args(["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-pthread", "-I"])
        .arg(root().join("crates/weft-probe-c/include"))
        .arg(root().join("examples/c-probe/main.c"))
        .arg("-o")
        .arg(out);
    if shared {
        c.arg("-L").arg(&lib).arg(format!("-Wl,-rpath,{}", lib.display())).arg("-lweft_probe_c");
    } else {
        c.arg(lib.join("libweft_probe_c.a"));
    }
    c.args(["-lpthread", "-ldl", "-lm"]);
    let o = c.output().expect("gcc is needed for the C example (Debian package gcc; .ci/test installs it)");
    assert!(o.status.success(), "gcc failed:\n{}", String::from_utf8_lossy(&o.stderr));
}

struct Seen {
    io: Vec<(u64, i64)>,
    spans: Vec<(String, u128, u64, u64, u32)>,
    annotations: Vec<String>,
    kvs: Vec<String>,
}

fn check(tps: &[weft_probe::TracepointInfo], recs: &[Record<'_>], traceparent: &str) {
    let name = |id: u32| tps.iter().find(|t| t.id == id).map(|t| t.name.clone()).unwrap_or_default();
    for want in ["cprobe.request", "cprobe.server", "cprobe.io", "cprobe.never"] {
        assert!(tps.iter().any(|t| t.name == want), "{want} not in the registry: {tps:?}");
    }
    let io = tps.iter().find(|t| t.name == "cprobe.io").unwrap();
    assert_eq!(io.field_names(), vec!["offset", "len", "thread"]);
    assert!(tps.iter().find(|t| t.name == "cprobe.request").unwrap().always_on());
    let mut s = Seen { io: vec![], spans: vec![], annotations: vec![], kvs: vec![] };
    for r in recs {
        match (r.kind, name(r.tracepoint).as_str()) {
            (RecordKind::Event, "cprobe.io") => {
                let (FieldValue::U64(off), FieldValue::I64(t)) = (r.fields[0].value, r.fields[2].value)
                else {
                    panic!("{r:?}")
                };
                s.io.push((off, t));
            }
            (RecordKind::SpanStart, n) => {
                s.spans.push((n.to_string(), r.trace_id, r.span_id, r.parent_span_id, r.flags))
            }
            (RecordKind::Annotation, _) => {
                if let FieldValue::Str(a) = r.fields[0].value {
                    s.annotations.push(a.to_string())
                }
            }
            (RecordKind::KeyValue | RecordKind::Endpoint, _) => {
                for f in &r.fields {
                    s.kvs.push(format!("{}={:?}", f.name_in(&[]), f.value));
                }
            }
            _ => {}
        }
    }
    assert_eq!(s.io.len(), 3 * 200 + 1, "disabled events must not be recorded");
    for t in 0..3i64 {
        let offs: Vec<u64> = s.io.iter().filter(|x| x.1 == t).map(|x| x.0).collect();
        assert_eq!(offs, (0..200).collect::<Vec<_>>());
    }
    assert_eq!(s.annotations, vec!["cs", "sr", "ss", "cr"]);
    assert!(s.kvs.contains(&"volume=Str(\"vol7\")".to_string()), "{:?}", s.kvs);
    assert!(s.kvs.contains(&"port=U64(9000)".to_string()), "{:?}", s.kvs);
    assert_eq!(s.spans.len(), 2);
    let (client, server) = (&s.spans[0], &s.spans[1]);
    assert_eq!(client.0, "cprobe.request");
    assert_eq!(server.0, "cprobe.server");
    assert_eq!(server.1, client.1, "same trace");
    assert_eq!(server.3, client.2, "server's parent is the client span");
    assert_eq!(server.4 & 0xff, 1, "server kind");
    assert_eq!(client.4 & 0xff, 2, "client kind");
    let ctx = weft_probe::Context::from_traceparent(traceparent.trim()).unwrap();
    assert_eq!((ctx.trace_id, ctx.span_id), (client.1, client.2));
}

#[test]
fn c_example_static_library_capture_mode() {
    let d = tempfile::tempdir().unwrap();
    let exe = d.path().join("c-probe-static");
    gcc(&exe, false);
    let cap_path = d.path().join("c.wcap");
    let out = Command::new(&exe).arg(&cap_path).env("WEFT_PROBE_MODE", "private").output().unwrap();
    assert!(out.status.success(), "c-probe failed: {}", String::from_utf8_lossy(&out.stderr));
    let cap = Capture::read(&cap_path).unwrap();
    assert_eq!(cap.service, "c-probe-example");
    assert_eq!(cap.dropped, 0);
    let recs: Vec<Record<'_>> = cap.records().map(|r| r.unwrap()).collect();
    check(&cap.tracepoints, &recs, &String::from_utf8_lossy(&out.stdout));
}

#[test]
fn c_example_shared_library_agent_mode() {
    let d = tempfile::tempdir().unwrap();
    let exe = d.path().join("c-probe-shared");
    gcc(&exe, true);
    let shm = d.path().join("shm");
    std::fs::create_dir(&shm).unwrap();
    std::fs::set_permissions(&shm, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let out = Command::new(&exe)
        .arg("-")
        .env("WEFT_PROBE_MODE", "shm")
        .env("WEFT_PROBE_DIR", &shm)
        .output()
        .unwrap();
    assert!(out.status.success(), "c-probe failed: {}", String::from_utf8_lossy(&out.stderr));
    // the process is gone; its segment stays drainable
    let files = consumer::discover(&shm).unwrap();
    assert_eq!(files.len(), 1, "{files:?}");
    let mut seg = Segment::open(&files[0]).unwrap();
    assert!(!seg.producer_alive());
    assert!(seg.exited());
    assert_eq!(seg.service(), "c-probe-example");
    let tps = seg.registry().unwrap();
    let mut bufs: Vec<Vec<u8>> = Vec::new();
    let rep = seg.drain(|r| {
        let mut b = Vec::new();
        weft_probe::capture::encode_record(r, &mut b);
        bufs.push(b);
    });
    assert!(rep.errors.is_empty(), "{:?}", rep.errors);
    let mut recs: Vec<Record<'_>> = bufs.iter().map(|b| consumer::decode_record(b).unwrap()).collect();
    recs.sort_by_key(|r| r.timestamp);
    check(&tps, &recs, &String::from_utf8_lossy(&out.stdout));
    assert_eq!(seg.stats().dropped(), 0);
}

#[test]
fn header_compiles_as_cplusplus() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("t.cc");
    std::fs::write(
        &src,
        "#include \"weft_probe.h\"\nWEFT_TRACEPOINT(tp, \"cxx.tp\", WEFT_INFO, \"cxx\", \"a:u64\", 0);\n\
         int f(unsigned long x) { WEFT_EVENT(tp, weft_u64(x)); weft_span s = WEFT_SPAN_BEGIN(tp, WEFT_KIND_INTERNAL, nullptr); weft_span_end(&s); return 0; }\n",
    )
    .unwrap();
    let o = Command::new("g++")
        .args(["-std=c++17", "-Wall", "-Werror", "-fsyntax-only", "-I"])
        .arg(root().join("crates/weft-probe-c/include"))
        .arg(&src)
        .output()
        .expect("g++ is needed (Debian package g++)");
    assert!(o.status.success(), "g++: {}", String::from_utf8_lossy(&o.stderr));
}
