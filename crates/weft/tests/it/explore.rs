//! `weft explore` end to end: learn a search space from exhaustive traces (OTLP JSON), replay
//! others (OTLP protobuf) through the loop, read the report, show the forest, ask why;
//! malformed inputs.

use weft_model::codec::stream::Format;
use weft_synth::vaif::{CHECKOUT, Generator, KEY, Shape};

use crate::common::{run_err, run_ok, write_spans};

#[test]
fn learn_run_show_why() {
    let dir = std::env::temp_dir().join(format!("weft-explore-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = |n: &str| dir.join(n).display().to_string();
    let shape = Shape { depth: 3, fanout: 2 };
    let problems = shape.problems();
    let learn: Vec<_> = Generator::new(shape, 1).take(200).flatten().collect();
    write_spans(&dir.join("learn.otlp.json"), Format::OtlpJson, &learn);
    let replay: Vec<_> = Generator::new(shape, 2).take(1500).flatten().collect();
    write_spans(&dir.join("replay.pb"), Format::OtlpProto, &replay);

    run_ok(&["explore", "learn", &p("learn.otlp.json"), "-o", &p("space.toml")]);
    let space = std::fs::read_to_string(dir.join("space.toml")).unwrap();
    assert!(space.contains("always_on") && space.contains(&problems.variance), "{space}");

    let (replay, space_file, state) = (p("replay.pb"), p("space.toml"), p("state"));
    let run = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> =
            ["explore", "run", "--replay", &replay, "--state", &state].map(String::from).into();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let args = run(&[
        "--space",
        &space_file,
        "--traces-per-epoch",
        "100",
        "--report",
        &p("report.json"),
        "--max-epochs",
        "30",
    ]);
    let out = run_ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap();
    let findings = report["findings"].as_array().unwrap();
    let top = |principle: &str| {
        findings
            .iter()
            .find(|f| f["principle"] == principle)
            .unwrap_or_else(|| panic!("no {principle} finding in {report:#}"))
    };
    assert_eq!(top("variance")["tracepoints"][0], problems.variance.as_str());
    assert_eq!(top("slow")["tracepoints"][0], problems.slow.as_str());
    assert_eq!(top("key")["tracepoints"][0], problems.key.as_str());
    assert_eq!(top("key")["key"], KEY);
    assert!(top("variance")["share_of_variance"].as_f64().is_some_and(|s| s > 0.1), "{report:#}");
    assert!(report["tracepoints_enabled"].as_u64().unwrap() < report["tracepoints_total"].as_u64().unwrap());
    assert!(report["epochs"].as_u64().unwrap() >= 3);
    assert!(stdout.contains(&format!("{CHECKOUT} [slow]: {}", problems.slow)), "{stdout}");

    let show = run_ok(&["explore", "show", "--state", &p("state")]);
    let show = String::from_utf8_lossy(&show.stdout);
    assert!(show.contains(&format!("enable {}", problems.key)) && show.contains("finding (key"), "{show}");

    // Why, for the key finding's group representative: from the forest alone and from the file.
    let rep = top("key")["group"].as_str().unwrap().to_owned();
    let why = run_ok(&["explore", "why", &rep, "--state", &p("state")]);
    let why = String::from_utf8_lossy(&why.stdout);
    assert!(why.contains(&format!("{}: hypothesis #", problems.key)), "{why}");
    let why = run_ok(&["explore", "why", &rep, "--state", &p("state"), "--traces", &p("replay.pb")]);
    let why = String::from_utf8_lossy(&why.stdout);
    assert!(why.contains("cart.load: always on") && why.contains("not enabled by weft explore"), "{why}");

    // Malformed inputs: named errors.
    let args = run(&["--space", &space_file, "--request-type", "PUT /nope"]);
    let e = run_err(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(e.contains("request type \"PUT /nope\" is not in the search space"), "{e}");
    std::fs::write(dir.join("bad.toml"), space.replacen("bins = []", "bins = [3.0, 3.0]", 1)).unwrap();
    let args = run(&["--space", &p("bad.toml")]);
    let e = run_err(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(e.contains("bad.toml") && e.contains("keys[0].bins"), "{e}");
    let e = run_err(&["explore", "why", "00000000000000000000000000000abc", "--state", &p("state")]);
    assert!(e.contains("not a group representative"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
