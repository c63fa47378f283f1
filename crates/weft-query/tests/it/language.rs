//! The language: valid queries plan into the three levels, invalid ones name line, column and
//! reason.

use std::time::Duration;
use weft_probe::agg::{AggKind, Linear};
use weft_probe::query::{CmpOp, Const, Ctx, Filter, Operand};
use weft_query::source::parse_tracefs_format;
use weft_query::{Catalog, ListCatalog, OutCol, QueryError, Source, Type, explain, plan};

/// raw_syscalls:sys_enter's format as tracefs prints it.
const SYS_ENTER: &str = "name: sys_enter\nID: 22\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\tfield:long id;\toffset:8;\tsize:8;\tsigned:1;\n\tfield:unsigned long args[6];\toffset:16;\tsize:48;\tsigned:0;\n\nprint fmt: \"NR %ld (%lx, %lx, %lx, %lx, %lx, %lx)\", REC->id, REC->args[0]\n";

/// The probe tracepoints of a ListCatalog, and raw_syscalls:sys_enter from [`SYS_ENTER`].
struct TestCatalog(ListCatalog);

impl Catalog for TestCatalog {
    fn probe_fields(&self, name: &str) -> Option<Vec<(String, Type)>> {
        self.0.probe_fields(name)
    }
    fn kernel_fields(&self, system: &str, event: &str) -> Option<Vec<(String, Type)>> {
        ((system, event) == ("raw_syscalls", "sys_enter")).then(|| parse_tracefs_format(SYS_ENTER))
    }
}

fn catalog() -> TestCatalog {
    TestCatalog(
        ListCatalog::new()
            .probe("blocker.write", "offset:u64,bytes:u64,path:str")
            .probe("gateway.request", "client:str,route:str")
            .probe("loose", "v"),
    )
}

#[test]
fn kernel_schemas_come_from_tracefs_format_files() {
    let dir = tempfile::tempdir().unwrap();
    let ev = dir.path().join("raw_syscalls").join("sys_enter");
    std::fs::create_dir_all(&ev).unwrap();
    std::fs::write(ev.join("format"), SYS_ENTER).unwrap();
    let cat = ListCatalog::new().tracefs(dir.path());
    assert_eq!(
        cat.kernel_fields("raw_syscalls", "sys_enter"),
        Some(vec![("id".into(), Type::I64), ("args".into(), Type::Bytes)])
    );
    assert_eq!(cat.kernel_fields("raw_syscalls", "nope"), None);
    assert_eq!(cat.kernel_fields("..", "sys_enter"), None, "no path traversal");
}

fn err(sql: &str) -> QueryError {
    plan(sql, &catalog()).unwrap_err()
}

#[test]
fn uprobe_with_a_log2_histogram_per_comm() {
    let p = plan(
        "SELECT comm, log2(arg2) FROM uprobe('/usr/lib/x86_64-linux-gnu/libc.so.6', 'write') WHERE pid = 1234 GROUP BY comm INTERVAL 1s",
        &catalog(),
    )
    .unwrap();
    assert_eq!(
        p.sources[0].0,
        Source::Uprobe {
            binary: "/usr/lib/x86_64-linux-gnu/libc.so.6".into(),
            symbol: "write".into(),
            ret: false
        }
    );
    assert_eq!(p.filters[0], Filter::Cmp(Operand::Ctx(Ctx::Pid), CmpOp::Eq, Const::Uint(1234)));
    assert_eq!(p.keys[0].operand, Operand::Ctx(Ctx::Comm));
    assert_eq!(p.aggs[0].kind, AggKind::Hist);
    assert_eq!(p.window.interval, Some(Duration::from_secs(1)));
    assert!(p.probe_plan().is_none(), "uprobes run in eBPF, not in weft-probe");
    let e = explain(&p);
    assert!(e.contains("eBPF") && e.contains("per-CPU partials") && e.contains("every 1s"), "{e}");
}

#[test]
fn kernel_tracepoint_count_for_a_fixed_duration() {
    let p = plan(
        "SELECT count(*) FROM tracepoint('raw_syscalls:sys_enter') WHERE id = 39 DURATION 5s",
        &catalog(),
    )
    .unwrap();
    assert_eq!(p.sources[0].0, Source::Kernel { system: "raw_syscalls".into(), event: "sys_enter".into() });
    assert_eq!(p.filters[0], Filter::Cmp(Operand::Field("id".into()), CmpOp::Eq, Const::Uint(39)));
    assert_eq!(p.window.duration, Some(Duration::from_secs(5)));
    assert_eq!(p.window.interval, None);
    // `args` is an array: bytes, not comparable with a number
    let e = err("SELECT count(*) FROM tracepoint('raw_syscalls:sys_enter') WHERE args = 3");
    assert_eq!((e.line, e.column), (1, 65), "{e}");
    assert!(e.message.contains("`args` is bytes"), "{e}");
}

#[test]
fn happened_before_join_groups_downstream_by_an_upstream_field() {
    let sql = "EXPLAIN SELECT g.client, sum(w.bytes) AS bytes FROM tp('gateway.request') AS g \
               JOIN tp('blocker.write') AS w ON g -> w WHERE g.route = '/v1/put' AND w.bytes > 0 \
               GROUP BY g.client ORDER BY bytes DESC LIMIT 5 INTERVAL 10s";
    let p = plan(sql, &catalog()).unwrap();
    assert!(p.explain);
    let j = p.join.as_ref().unwrap();
    assert_eq!((j.upstream, j.downstream), (0, 1));
    assert_eq!(j.carried.len(), 1);
    assert_eq!(j.carried[0].name, "client");
    assert_eq!(
        p.filters[0],
        Filter::Cmp(Operand::Field("route".into()), CmpOp::Eq, Const::Str("/v1/put".into()))
    );
    assert_eq!(p.filters[1], Filter::Cmp(Operand::Field("bytes".into()), CmpOp::Gt, Const::Uint(0)));
    assert_eq!(p.order, Some((1, true)));
    assert_eq!(p.limit, Some(5));
    assert!(p.probe_plan().is_none());
    let e = explain(&p);
    for want in [
        "pack into the request's baggage: client",
        "client (from baggage)",
        "top-N: order by bytes desc, keep 5",
        "every 10s",
    ] {
        assert!(e.contains(want), "missing {want:?} in\n{e}");
    }
}

#[test]
fn probe_queries_become_weft_probe_plans() {
    let p = plan(
        "SELECT path, count(*), avg(bytes), lhist(bytes, 0, 4096, 512), quantile(bytes, 0.99) \
         FROM tp('blocker.write') WHERE NOT (path = '/tmp' OR bytes < 10) GROUP BY 1",
        &catalog(),
    )
    .unwrap();
    let pp = p.probe_plan().unwrap();
    assert_eq!(pp.tracepoint, "blocker.write");
    assert_eq!(pp.keys, vec![Operand::Field("path".into())]);
    let kinds: Vec<AggKind> = pp.aggs.iter().map(|a| a.kind).collect();
    assert_eq!(
        kinds,
        vec![
            AggKind::Count,
            AggKind::Avg,
            AggKind::Lhist(Linear::new(0, 4096, 512).unwrap()),
            AggKind::Quantile(0.99)
        ]
    );
    assert_eq!(p.outputs[0], ("path".to_string(), OutCol::Key(0)));
    assert!(matches!(pp.filter, Filter::Not(_)));
    let e = explain(&p);
    assert!(e.contains("weft-probe") && e.contains("1024 entries per thread"), "{e}");
}

#[test]
fn errors_name_line_column_and_reason() {
    let cases: &[(&str, (u64, u64), &str)] = &[
        ("SELECT count(*) FROM tp('blocker.write') WHERE size > 3", (1, 48), "unknown column `size`"),
        ("SELECT count(*) FROM tp('nope')", (1, 22), "no weft-probe tracepoint named 'nope'"),
        ("SELECT path, count(*) FROM tp('blocker.write')", (1, 8), "neither aggregated nor in GROUP BY"),
        ("SELECT sum(path) FROM tp('blocker.write')", (1, 12), "needs an integer column"),
        (
            "SELECT count(*) FROM tp('blocker.write') WHERE path > 3",
            (1, 48),
            "cannot be compared with an integer",
        ),
        ("SELECT count(*)\nFROM tp('blocker.write')\nWHERE bytes >", (3, 14), "Expected"),
        ("SELECT count(*) FROM tp('blocker.write') INTERVAL 3parsecs", (1, 42), "expected a duration"),
        ("SELECT count(*) FROM tp('blocker.write') INTERVAL 3 parsecs", (1, 53), "unexpected `parsecs`"),
        ("SELECT count(*) FROM blocker", (1, 22), "not a live source"),
        (
            "EXPLAIN\n  SELECT count(*) FROM tp('blocker.write') WHERE nope = 1",
            (2, 50),
            "unknown column `nope`",
        ),
        ("SELECT median(bytes) FROM tp('blocker.write')", (1, 8), "unknown aggregate `median`"),
        ("SELECT comm FROM tp('blocker.write') GROUP BY comm", (1, 1), "at least one aggregate"),
        (
            "SELECT count(*) FROM tp('blocker.write') ORDER BY nothing LIMIT 3",
            (1, 51),
            "not an output column",
        ),
        (
            "SELECT count(*) FROM tp('blocker.write') INTERVAL 10s DURATION 1s",
            (1, 42),
            "longer than DURATION",
        ),
        ("SELECT lhist(bytes, 0, 10, 0) FROM tp('blocker.write')", (1, 8), "step must be positive"),
        (
            "SELECT count(*) FROM tp('gateway.request') AS g JOIN tp('blocker.write') AS w ON g -> w WHERE g.route = 'x' OR w.bytes > 1",
            (1, 112),
            "only one side of the join",
        ),
        (
            "SELECT sum(g.route) FROM tp('gateway.request') AS g JOIN tp('blocker.write') AS w ON g -> w",
            (1, 12),
            "downstream source",
        ),
        (
            "SELECT comm, count(*) FROM tp('gateway.request') AS g JOIN tp('blocker.write') AS w ON g -> w GROUP BY comm",
            (1, 104),
            "ambiguous",
        ),
    ];
    for (sql, (line, col), reason) in cases {
        let e = err(sql);
        assert!(e.message.contains(reason), "{sql}: got {e}");
        if *col != 1 || *line != 1 {
            assert_eq!((e.line, e.column), (*line, *col), "{sql}: {e}");
        }
    }
}

#[test]
fn untyped_fields_are_accepted_and_checked_later() {
    let p = plan("SELECT sum(v) FROM tp('loose') WHERE v = 'x' OR v > 3", &catalog()).unwrap();
    assert!(p.probe_plan().is_some());
}

proptest::proptest! {
    /// Any text is a plan or an error with a position, never a panic.
    #[test]
    fn any_text_plans_or_errs(
        words in proptest::collection::vec(proptest::sample::select(vec![
            "SELECT", "EXPLAIN", "count(*)", "sum(bytes)", "hist(", "lhist(bytes,", "quantile(bytes,", "0.5)", ")", "(",
            "FROM", "tp('blocker.write')", "tracepoint('raw_syscalls:sys_enter')", "uprobe('/bin/x',", "'f')",
            "AS", "g", "w", "JOIN", "ON", "->", "WHERE", "AND", "OR", "NOT", "=", ">", "-", "1", "0x10", "'s'", "path",
            "bytes", "comm", "pid", ",", "GROUP", "BY", "ORDER", "DESC", "LIMIT", "INTERVAL", "DURATION", "1s", "5ms", "\n", ";",
        ]), 0..24),
    ) {
        let sql = words.join(" ");
        match plan(&sql, &catalog()) {
            Ok(p) => {
                let _ = explain(&p);
            }
            Err(e) => proptest::prop_assert!(e.line >= 1 && e.column >= 1, "{e}"),
        }
    }
}
