//! Golden tests: the woven fixture traces, rendered as text (`weft_weave::render`), checked
//! against files under `tests/golden/` that were reviewed by hand. `WEFT_BLESS=1` rewrites
//! them (review the diff before committing).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use weft_weave::sink::{MemorySink, SinkSpec};
use weft_weave::{Run, RunReport, Topology};

/// Weaves `toml` (paths relative to the simulator fixtures) and returns the rendering.
pub fn weave_in(toml: &str, base: &Path) -> (String, RunReport, Vec<weft_model::Span>) {
    let topo = Topology::parse(toml, Path::new("test.toml"), base).unwrap();
    let mem = MemorySink::new();
    let run = Run::start(&topo, vec![SinkSpec::Memory(mem.clone())]).unwrap();
    let rep = run.wait().unwrap();
    let spans = mem.spans();
    (weft_weave::render::render(&spans), rep, spans)
}

pub fn weave(toml: &str) -> (String, RunReport, Vec<weft_model::Span>) {
    weave_in(toml, &weft_testkit::fixture("simulators"))
}

/// A deterministic summary of a run: per source lines/events/rejects/skips, dropped by actors,
/// anomalies, cross-component matching.
pub fn summary(rep: &RunReport) -> String {
    let mut s = String::new();
    for src in &rep.sources {
        let st = &src.stats;
        let _ = writeln!(
            s,
            "source {}: {} lines, {} events, {} rejected, {} out of order, {} spans",
            src.name,
            st.lines,
            st.events,
            st.rejected.count(),
            st.out_of_order,
            src.spans
        );
        for (r, n) in &st.skipped.0 {
            let _ = writeln!(s, "  skipped {n}: {r}");
        }
        for (r, n) in &st.rejected.by_reason.0 {
            let _ = writeln!(s, "  rejected {n}: {r}");
        }
        if src.actors.symbolized > 0 {
            let _ = writeln!(s, "  symbolized {} instructions", src.actors.symbolized);
        }
        for (r, n) in &src.actors.dropped.0 {
            let _ = writeln!(s, "  dropped {n}: {r}");
        }
    }
    let w = &rep.weave;
    let _ = writeln!(s, "spans: {:?}", w.spans_by_type);
    let _ = writeln!(s, "incomplete spans: {}", w.incomplete);
    for (r, n) in &w.not_woven.0 {
        let _ = writeln!(s, "not woven {n}: {r}");
    }
    for (r, n) in &w.anomalies.0 {
        let _ = writeln!(s, "anomaly {n}: {r}");
    }
    for l in &w.links {
        let st = &l.stats;
        let _ = writeln!(
            s,
            "link {} {}: {} causes, {} matched exactly, {} by order, {} unmatched causes, {} effects without cause",
            l.link, l.kind, st.pushed, st.exact, st.by_order, st.unmatched_causes, st.unmatched_effects
        );
    }
    let a = &w.assemble;
    let _ = writeln!(
        s,
        "assembler: {} exported, {} orphans, {} forced, {} discarded",
        a.exported, a.orphans, a.forced, a.discarded
    );
    s
}

fn golden_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("golden").join(format!("{name}.txt"))
}

/// Compares `text` with the golden file `name` (rewrites it with `WEFT_BLESS=1`).
pub fn check_golden(name: &str, text: &str) {
    let p = golden_path(name);
    if std::env::var_os("WEFT_BLESS").is_some() {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&p).unwrap_or_else(|e| {
        panic!("{}: {e} (run with WEFT_BLESS=1 to create it, then review it)", p.display())
    });
    if want != text {
        let diff: Vec<String> = want
            .lines()
            .zip(text.lines())
            .enumerate()
            .filter(|(_, (a, b))| a != b)
            .take(5)
            .map(|(i, (a, b))| format!("line {}:\n  want: {a}\n  got:  {b}", i + 1))
            .collect();
        panic!(
            "{} differs from the woven output ({} vs {} lines):\n{}",
            p.display(),
            want.lines().count(),
            text.lines().count(),
            diff.join("\n")
        );
    }
}

pub fn golden(name: &str, toml: &str) -> (RunReport, Vec<weft_model::Span>) {
    let (r, rep, spans) = weave(toml);
    check_golden(name, &format!("{}\n{r}", summary(&rep)));
    (rep, spans)
}

#[test]
fn ns3_generated_simbricks_layout() {
    let (rep, _) = golden(
        "ns3-gen-simbricks-style",
        r#"
[[source]]
name = "ns3"
kind = "ns3"
path = "ns3/gen-ns3-3.44-simbricks-style-2host-2switch.tr"
nodes = { 0 = "h0", 1 = "sw0", 2 = "sw1", 3 = "h1" }
"#,
    );
    assert_eq!(rep.sources[0].stats.rejected.count(), 0);
}

#[test]
fn ns3_columbo_fixture() {
    golden(
        "ns3-columbo",
        r#"
[[source]]
name = "ns3"
kind = "ns3"
path = "ns3/columbo-tests-ns3-raw-log.txt"
nodes = { 0 = "sw0", 1 = "sw1" }
"#,
    );
}

#[test]
fn ns3_fork_2023_layout_without_uids() {
    golden(
        "ns3-q713-v1",
        r#"
[[source]]
name = "ns3"
kind = "ns3"
path = "ns3/q713-ns3-raw-log-v1-2023-11-04.txt"
nodes = { 0 = "sw0", 1 = "sw1" }
"#,
    );
}

#[test]
fn ns3_stock_ascii() {
    golden(
        "ns3-stock",
        r#"
[[source]]
name = "ns3"
kind = "ns3-stock"
path = "ns3/gen-ns3-3.44-stock-ascii-2host-2router.tr"
nodes = { 0 = "h0", 1 = "r0", 2 = "r1", 3 = "h1" }
"#,
    );
}

#[test]
fn gem5_and_nicbm_fixtures() {
    golden(
        "gem5-nicbm",
        r#"
[[source]]
name = "client"
kind = "gem5"
path = "gem5/columbo-tests-gem5-events-test.txt"

[[source]]
name = "client-nic"
kind = "nicbm"
path = "nicbm/q713-test-nic-client-log.log"

[[link]]
kind = "pcie"
host = "client"
nic = "client-nic"
"#,
    );
}

#[test]
fn qemu_exec_and_nic() {
    golden(
        "qemu-exec",
        r#"
[functions]
sys_entry = ["entry_SYSCALL_64", "net_rx_action"]
kernel_tx = ["__sys_sendto", "__dev_queue_xmit"]
kernel_rx = ["netif_receive_skb_list_internal", "icmp_rcv"]
driver_tx = ["dev_hard_start_xmit"]

[[source]]
name = "guest"
kind = "qemu"
path = "qemu/gen-qemu7.2-exec-dfilter-kernel-funcs.log"
symbols = [{ path = "qemu/gen-qemu7.2-guest-kallsyms-subset.txt", format = "kallsyms", id = "kallsyms" }]
"#,
    );
}

#[test]
fn qemu_e1000e_trace_events() {
    let (r, rep, _) = weave(
        r#"
[[source]]
name = "guest"
kind = "qemu"
path = "qemu/gen-qemu7.2-e1000e-trace-events.log"
"#,
    );
    // 3500 register accesses: the golden file keeps the summary and the first traces only.
    let head: String = r.lines().take(60).map(|l| format!("{l}\n")).collect();
    check_golden("qemu-e1000e", &format!("{}\n{head}", summary(&rep)));
}

#[test]
fn synthetic_ping_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let s = weft_synth::simlog::Scenario { rounds: 2, noise: 2, ..Default::default() };
    for (log, bytes) in s.generate() {
        std::fs::write(dir.path().join(log.file_name()), bytes).unwrap();
    }
    std::fs::write(dir.path().join("kernel.syms"), weft_synth::simlog::kernel_syms()).unwrap();
    // The i40e functions resolve through the real i40e symbol dump at the module's load address.
    let toml = s.topology(dir.path().to_str().unwrap()).replace(
        &format!("{}/i40e.syms", dir.path().display()),
        &weft_testkit::fixture("simulators/symtables/i40e-image-syms.dump").display().to_string(),
    );
    let (r, rep, spans) = weave_in(&toml, dir.path());
    check_golden(
        "synthetic-ping",
        &format!("{}\n{r}", summary(&rep).replace(&dir.path().display().to_string(), "<dir>")),
    );
    // One trace per round holds all five components.
    let traces: std::collections::HashSet<_> = spans.iter().map(|s| s.trace_id).collect();
    assert_eq!(traces.len(), 4, "two ping traces + two recvfrom syscalls");
    for l in &rep.weave.links {
        assert_eq!(l.stats.unmatched_causes + l.stats.unmatched_effects, 0, "{l:?}");
    }
}

#[test]
fn example_topologies_run_without_rejects() {
    let dir = weft_testkit::workspace_root().join("examples").join("topologies");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "toml") {
            continue;
        }
        // The examples find the fixtures at ../shared beside the repository, or $WEFT_SHARED.
        let vars = [("WEFT_SHARED".to_owned(), weft_testkit::shared_dir().display().to_string())].into();
        let text = std::fs::read_to_string(&p).unwrap();
        let topo = Topology::parse_with_vars(&text, &p, &dir, &vars).unwrap_or_else(|e| panic!("{e}"));
        let rep = Run::start(&topo, vec![]).unwrap().wait().unwrap();
        for s in &rep.sources {
            assert_eq!(s.stats.rejected.count(), 0, "{}: {}: {:?}", p.display(), s.name, s.stats.rejected);
            assert!(s.error.is_none(), "{}: {:?}", p.display(), s.error);
        }
        assert!(rep.spans > 0, "{}", p.display());
        n += 1;
    }
    assert!(n >= 7, "{n} example topologies");
}
