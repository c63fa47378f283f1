//! `weft import ctf`: synthetic and real LTTng traces into files, a data directory, a server.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use weft_synth::ctf::{Header, SynthOptions, write_trace};

fn weft() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weft"))
}

fn ok(out: Output) -> String {
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "weft failed:\n{text}");
    text
}

/// `weft query --data-dir DIR SQL --format json` → rows.
fn query(dir: &Path, sql: &str) -> Vec<Vec<serde_json::Value>> {
    let out =
        ok(weft().args(["query", "--format", "json", "--data-dir"]).arg(dir).arg(sql).output().unwrap());
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    v["rows"].as_array().unwrap().iter().map(|r| r.as_array().unwrap().clone()).collect()
}

#[test]
fn synthetic_trace_to_files_and_a_data_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = tmp.path().join("trace");
    let opts = SynthOptions {
        events: 20_000,
        streams: 3,
        packet_bytes: 16 << 10,
        header: Header::Compact,
        ..Default::default()
    };
    write_trace(&trace, &opts).unwrap();
    let data = tmp.path().join("data");
    let events = tmp.path().join("events.jsonl");
    let out = ok(weft()
        .args(["import", "ctf"])
        .arg(&trace)
        .arg("--events-to")
        .arg(&events)
        .arg("--data-dir")
        .arg(&data)
        .output()
        .unwrap());
    assert!(out.contains("imported 20000 events from 1 trace(s), 3 stream file(s)"), "{out}");
    assert!(out.contains("weft_synth:small"), "{out}");
    assert!(out.contains("BlkKin: 0 events → 0 spans"), "{out}");
    // JSON Lines: one object per event, with typed fields.
    let text = std::fs::read_to_string(&events).unwrap();
    let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 20_000);
    let mixed = lines.iter().find(|l| l["fields"]["name"] == "weft_synth:mixed").unwrap();
    assert!(mixed["fields"]["s"].as_str().unwrap().starts_with('s'));
    assert!(mixed["fields"]["d"].is_f64());
    assert!(mixed["time_ns"].as_u64().unwrap() > opts.clock_offset_ns);
    // The store's events table.
    let rows = query(&data, "SELECT count(*), count(DISTINCT cpu) FROM events WHERE type = 'Tracepoint'");
    assert_eq!(rows[0][0], 20_000);
    assert_eq!(rows[0][1], 3);

    // --jobs 1 (one time-ordered merge) writes the events in time order.
    let ordered = tmp.path().join("ordered.jsonl");
    ok(weft()
        .args(["import", "ctf", "--jobs", "1"])
        .arg(&trace)
        .arg("--events-to")
        .arg(&ordered)
        .output()
        .unwrap());
    let times: Vec<u64> = std::fs::read_to_string(&ordered)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["time_ns"].as_u64().unwrap())
        .collect();
    assert_eq!(times.len(), 20_000);
    assert!(times.windows(2).all(|w| w[0] <= w[1]));
}

#[test]
fn corrupt_packets_are_counted_or_stop_the_import() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = tmp.path().join("trace");
    let sum = write_trace(
        &trace,
        &SynthOptions { events: 5000, streams: 1, packet_bytes: 4096, ..Default::default() },
    )
    .unwrap();
    let stream = sum.trace_dir.join("ch_0");
    let mut b = std::fs::read(&stream).unwrap();
    // Break the first event header of the second packet: event id 31 (extended) with an id no
    // class has.
    b[4096 + 84] = 0xff;
    b[4096 + 85] = 0xff;
    b[4096 + 86] = 0xff;
    b[4096 + 87] = 0xff;
    b[4096 + 88] = 0xff;
    std::fs::write(&stream, &b).unwrap();
    let out = ok(weft()
        .args(["import", "ctf"])
        .arg(&trace)
        .arg("--events-to")
        .arg(tmp.path().join("e.jsonl"))
        .output()
        .unwrap());
    assert!(out.contains("decoding errors: 1"), "{out}");
    assert!(out.contains("ch_0: packet at byte 4096"), "{out}");
    let out = weft()
        .args(["import", "ctf", "--strict"])
        .arg(&trace)
        .arg("--events-to")
        .arg(tmp.path().join("e.jsonl"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ch_0: packet at byte 4096: byte 4180"), "{err}");
    // No destination, no trace.
    let out = weft().args(["import", "ctf"]).arg(&trace).output().unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--data-dir"));
    let out = weft()
        .args(["import", "ctf"])
        .arg(tmp.path().join("nothing"))
        .arg("--to")
        .arg(tmp.path().join("x.json"))
        .output()
        .unwrap();
    assert!(!out.status.success());
}

/// Kills the server child on drop.
struct Child(std::process::Child);
impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn real_lttng_blkin_trace_to_a_running_server() {
    let rec = weft_testkit::lttng::record(&weft_testkit::lttng::RecordOptions {
        all_types: 50,
        blkin: 1,
        ..Default::default()
    });
    let tmp = tempfile::tempdir().unwrap();
    let (otlp, http) = (weft_testkit::free_port(), weft_testkit::free_port());
    let _server = Child(
        weft()
            .args(["serve", "--otlp-grpc", "off", "--zipkin", "off", "--data-dir"])
            .arg(tmp.path().join("data"))
            .args(["--otlp-http", &format!("127.0.0.1:{otlp}"), "--http", &format!("127.0.0.1:{http}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let t0 = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", otlp)).is_err() {
        assert!(t0.elapsed() < Duration::from_secs(60), "weft serve did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    let spans_file = tmp.path().join("spans.zipkin.json");
    let out = ok(weft()
        .args(["import", "ctf"])
        .arg(&rec.trace)
        .args(["--server", &format!("http://127.0.0.1:{otlp}")])
        .arg("--to")
        .arg(&spans_file)
        .output()
        .unwrap());
    assert!(out.contains("BlkKin: 12 events → 4 spans"), "{out}");
    assert!(out.contains("raw events not kept"), "{out}");
    // The file is Zipkin v2 JSON (from its name): the shared RPC span appears twice.
    let z: serde_json::Value = serde_json::from_slice(&std::fs::read(&spans_file).unwrap()).unwrap();
    let z = z.as_array().unwrap();
    assert_eq!(z.len(), 4);
    assert_eq!(z.iter().filter(|s| s["id"] == "0000000000000011").count(), 2);
    // The server has them.
    let url = format!("http://127.0.0.1:{http}");
    let rows = loop {
        let out = ok(weft()
            .args(["query", "--format", "json", "--url", &url])
            .arg("SELECT service_name, name, kind FROM spans ORDER BY start_time")
            .output()
            .unwrap());
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        let rows = v["rows"].as_array().unwrap().clone();
        if rows.len() == 4 || t0.elapsed() > Duration::from_secs(60) {
            break rows;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let got: Vec<String> = rows
        .iter()
        .map(|r| format!("{} {} {}", r[0].as_str().unwrap(), r[1].as_str().unwrap(), r[2].as_str().unwrap()))
        .collect();
    assert_eq!(
        got,
        ["rbd osd_op client", "osd.0 osd_op server", "osd.0 encode unspecified", "osd.1 scrub unspecified"]
    );
}
