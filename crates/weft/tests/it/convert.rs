//! `weft convert` end to end: every format pair through the real binary, stdin/stdout, bad
//! input (the message names the file, the position and the field; no output is left
//! behind), and bounded memory on a large input.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use weft_model::Span;
use weft_model::codec::{chrome, jaeger, otlp, zipkin};
use weft_synth::sample;

fn weft() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weft"));
    c.arg("--quiet");
    c
}

fn convert(args: &[&str]) -> Output {
    weft().arg("convert").args(args).output().expect("run weft")
}

fn ok(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "weft failed: {err}");
    err
}

fn failed(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "weft should have failed: {err}");
    assert!(err.contains("error:"), "{err}");
    err
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("write input");
    p
}

/// The number after `label` in the summary (`read      1,234 spans ...`).
fn summary_count(summary: &str, label: &str) -> u64 {
    let line = summary
        .lines()
        .find(|l| l.trim_start().starts_with(label))
        .unwrap_or_else(|| panic!("no {label} line in {summary}"));
    let n = line.trim_start()[label.len()..].split_whitespace().next().unwrap_or("");
    n.replace(',', "").parse().unwrap_or_else(|_| panic!("no count in {line:?}"))
}

#[test]
fn converts_between_every_format_by_name_and_content() {
    let dir = tempfile::tempdir().unwrap();
    let spans = sample::spans(500, 7);
    let pb = write(dir.path(), "in.pb", &otlp::encode_proto(&spans));

    // OTLP protobuf → OTLP/JSON is lossless, formats from the file names.
    let json = dir.path().join("out.otlp.json");
    let summary = ok(&convert(&[s(&pb), s(&json)]));
    assert_eq!(summary_count(&summary, "read"), 500, "{summary}");
    assert_eq!(summary_count(&summary, "wrote"), 500, "{summary}");
    assert!(summary.contains("lost      nothing"), "{summary}");
    assert!(summary.contains("peak RSS"), "{summary}");
    assert_eq!(otlp::decode_json(&std::fs::read(&json).unwrap()).unwrap(), spans);

    // A `.json` name is ambiguous: the content decides the input format, --to the output.
    let back = dir.path().join("back.bin");
    let renamed = dir.path().join("otlp-as.json");
    std::fs::copy(&json, &renamed).unwrap();
    ok(&convert(&[s(&renamed), s(&back), "--to", "otlp-proto"]));
    assert_eq!(otlp::decode_proto(&std::fs::read(&back).unwrap()).unwrap(), spans);

    // Zipkin v2 JSON: the summary names what Zipkin cannot carry.
    let zj = dir.path().join("out.zipkin.json");
    let summary = ok(&convert(&[s(&pb), s(&zj)]));
    assert!(summary.contains("links dropped"), "{summary}");
    assert!(summary.contains("resource attributes dropped"), "{summary}");
    let z: Vec<Span> = zipkin::decode_v2_json(&std::fs::read(&zj).unwrap()).unwrap();
    assert_eq!(z.len(), 500);
    assert_eq!(
        z.iter().map(|s| s.span_id).collect::<Vec<_>>(),
        spans.iter().map(|s| s.span_id).collect::<Vec<_>>()
    );

    // Zipkin JSON → Zipkin proto3 → Jaeger → OTLP: ids and times survive the chain.
    let zp = dir.path().join("out.zipkin.pb");
    ok(&convert(&[s(&zj), s(&zp)]));
    let jg = dir.path().join("out.jaeger.json");
    ok(&convert(&[s(&zp), s(&jg)]));
    let j = jaeger::decode_json(&std::fs::read(&jg).unwrap()).unwrap();
    assert_eq!(j.len(), 500);
    let pb2 = dir.path().join("again.pb");
    ok(&convert(&[s(&jg), s(&pb2)]));
    let mut got: Vec<_> = otlp::decode_proto(&std::fs::read(&pb2).unwrap())
        .unwrap()
        .iter()
        .map(|s| {
            (s.trace_id, s.span_id, s.parent_span_id, s.start_ns / 1000, s.end_ns / 1000, s.name.clone())
        })
        .collect();
    let mut want: Vec<_> = spans
        .iter()
        .map(|s| {
            (s.trace_id, s.span_id, s.parent_span_id, s.start_ns / 1000, s.end_ns / 1000, s.name.clone())
        })
        .collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);

    // Chrome trace: a JSON document Perfetto opens, one complete event per span.
    let ch = dir.path().join("out.chrome.json");
    ok(&convert(&[s(&pb), s(&ch)]));
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&ch).unwrap()).unwrap();
    let events = doc["traceEvents"].as_array().expect("traceEvents");
    assert_eq!(events.iter().filter(|e| e["ph"] == "X").count(), 500);
    let library: serde_json::Value = serde_json::from_slice(&chrome::encode_json(&spans)).unwrap();
    assert_eq!(doc, library, "the CLI writes what the library encodes");
}

#[test]
fn reads_stdin_and_writes_stdout() {
    let spans = sample::spans(50, 3);
    let mut child = weft()
        .args(["convert", "-", "-", "--to", "zipkin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let input = otlp::encode_json(&spans);
    let mut stdin = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap().unwrap();
    let summary = ok(&out);
    assert!(summary.contains("<stdin> (OTLP JSON) → <stdout> (Zipkin v2 JSON)"), "{summary}");
    assert_eq!(zipkin::decode_v2_json(&out.stdout).unwrap().len(), 50);
}

#[test]
fn bad_input_names_file_position_and_field_and_leaves_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let spans = sample::spans(20, 1);

    // Mismatch: Zipkin JSON read as OTLP protobuf.
    let zj = write(dir.path(), "spans.zipkin.json", &zipkin::encode_v2_json(&spans));
    let out = dir.path().join("out.pb");
    let err = failed(&convert(&["--from", "otlp-proto", s(&zj), s(&out)]));
    assert!(err.contains(s(&zj)), "names the file: {err}");
    assert!(err.contains("byte 0"), "names the offset: {err}");
    assert!(err.contains("field resource_spans"), "names the field: {err}");
    assert!(err.contains("try --from zipkin"), "says what it looks like: {err}");
    assert!(!out.exists(), "no output on failure");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(leftovers.len(), 1, "no partial file left: {leftovers:?}");

    // A bad field on line 3 (strict: fail on it).
    let bad = write(
        dir.path(),
        "bad.zipkin.json",
        b"[{\"traceId\":\"a\",\n\"id\":\"1\",\n\"timestamp\":\"soon\"}]",
    );
    let err = failed(&convert(&["--strict", s(&bad), s(&out)]));
    assert!(err.contains(s(&bad)), "{err}");
    assert!(err.contains("line 3"), "{err}");
    assert!(err.contains("field [0].timestamp"), "{err}");

    // Lenient (the default): the bad span is skipped and reported, the rest converted.
    let mixed = write(
        dir.path(),
        "mixed.zipkin.json",
        b"[{\"traceId\":\"a\",\"id\":\"1\",\"name\":\"ok\"},\n{\"traceId\":\"xyz\",\"id\":\"2\"}]",
    );
    let summary = ok(&convert(&[s(&mixed), s(&out)]));
    assert_eq!(summary_count(&summary, "read"), 1, "{summary}");
    assert_eq!(summary_count(&summary, "rejected"), 1, "{summary}");
    assert!(
        summary.contains(&format!("{}: Zipkin v2 JSON, line 2, column 1, field [1].traceId", s(&mixed))),
        "{summary}"
    );
    assert_eq!(otlp::decode_proto(&std::fs::read(&out).unwrap()).unwrap().len(), 1);
    std::fs::remove_file(&out).unwrap();

    // Every span bad: an error, not an empty output.
    let allbad = write(dir.path(), "allbad.zipkin.json", b"[{\"traceId\":\"xyz\",\"id\":\"2\"}]");
    let err = failed(&convert(&[s(&allbad), s(&out)]));
    assert!(err.contains("none of the input's spans could be converted"), "{err}");
    assert!(err.contains("field [0].traceId"), "{err}");
    assert!(!out.exists());

    // Truncated protobuf: the offset of the cut record.
    let pb = otlp::encode_proto(&spans);
    let cut = write(dir.path(), "cut.pb", &pb[..pb.len() - 7]);
    let err = failed(&convert(&[s(&cut), s(&dir.path().join("o.jsonl"))]));
    assert!(err.contains(s(&cut)) && err.contains("byte ") && err.contains("truncated"), "{err}");

    // Truncated JSON.
    let zt = zipkin::encode_v2_json(&spans);
    let cutj = write(dir.path(), "cut.zipkin.json", &zt[..zt.len() / 2]);
    let err = failed(&convert(&[s(&cutj), s(&dir.path().join("o.jsonl"))]));
    assert!(err.contains(s(&cutj)) && err.contains("line 1, column"), "{err}");

    // Garbage and empty input, an unknown output name.
    let g = write(dir.path(), "garbage.txt", b"\x00\x01garbage");
    let err = failed(&convert(&[s(&g), s(&out)]));
    assert!(err.contains("give --from"), "{err}");
    // ... named like protobuf: read as such, and the error says where it stops making sense.
    let g = write(dir.path(), "garbage.bin", b"\x00\x01garbage");
    let err = failed(&convert(&[s(&g), s(&out)]));
    assert!(err.contains("garbage.bin: OTLP protobuf, byte 0, field resource_spans"), "{err}");
    let e = write(dir.path(), "empty.pb", b"");
    let err = failed(&convert(&[s(&e), s(&dir.path().join("o.jsonl"))]));
    assert!(err.contains("empty"), "{err}");
    let err = failed(&convert(&[s(&zj), s(&dir.path().join("out.txt"))]));
    assert!(err.contains("give --to"), "{err}");
    assert!(!out.exists());
}

#[test]
fn memory_stays_far_below_the_input_size() {
    let dir = tempfile::tempdir().unwrap();
    // OTLP protobuf files of `batches` × 1000 spans (~0.9 MiB each), written a batch at a time.
    let file = |name: &str, batches: u64| {
        let path = dir.path().join(name);
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        for seed in 1..=batches {
            f.write_all(&otlp::encode_proto(&sample::spans(1000, seed))).unwrap();
        }
        f.flush().unwrap();
        drop(f);
        (path.clone(), std::fs::metadata(&path).unwrap().len() as f64 / (1 << 20) as f64)
    };
    let (big, size_mib) = file("big.pb", 54);
    assert!(size_mib > 45.0, "{size_mib}");
    // The reference is a file already past the converter's fixed buffers (about 5–6 MiB over
    // a tiny file's peak): what is measured is growth with the input, not those buffers.
    let (half, half_mib) = file("half.pb", 27);

    let rss = |summary: &str| -> f64 {
        let line = summary.lines().find(|l| l.contains("peak RSS")).expect("memory line");
        line.split_whitespace().rev().nth(1).and_then(|v| v.parse::<f64>().ok()).expect("MiB figure")
    };
    let base = rss(&ok(&convert(&[s(&half), s(&dir.path().join("half.zipkin.json"))])));
    let summary = ok(&convert(&[s(&big), s(&dir.path().join("big.zipkin.json"))]));
    assert_eq!(summary_count(&summary, "read"), 54_000);
    let peak = rss(&summary);
    let growth = peak - base;
    eprintln!(
        "peak RSS {peak:.1} MiB on a {size_mib:.0} MiB input ({base:.1} MiB on a {half_mib:.0} MiB one)"
    );
    assert!(
        growth < size_mib / 8.0,
        "peak RSS {peak:.1} MiB vs {base:.1} MiB for a {half_mib:.0} MiB file: grew {growth:.1} MiB on a {size_mib:.0} MiB input"
    );
}
