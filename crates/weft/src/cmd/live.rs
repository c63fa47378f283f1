//! `weft query` for live sources (`tp('…')`, `tracepoint('…')`, `uprobe(…)` in `FROM`, or
//! `--live`): deploy the query through the collector's control API, refresh a table of the
//! latest closed window on the terminal until Ctrl-C or `--duration` (or the query's own
//! `DURATION`), then remove it; with `--keep NAME` the collector writes every closed window to
//! its store as table `live_NAME`. `EXPLAIN …` prints the plan's three levels — planned locally
//! against this machine's traced processes and tracefs, or by the collector with `--collector`.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

/// What `weft query` needs for a live query.
pub struct LiveArgs<'a> {
    pub sql: &'a str,
    /// The collector; `None`: EXPLAIN is planned locally and running needs the default.
    pub collector: Option<&'a str>,
    pub token: Option<String>,
    pub duration: Option<Duration>,
    /// Keep the windows in the collector's store as `live_NAME`.
    pub keep: Option<&'a str>,
}

/// Does the statement name a live source in `FROM`?
pub fn names_live_source(sql: &str) -> bool {
    let s: String = sql.to_ascii_lowercase().chars().filter(|c| !c.is_whitespace()).collect();
    ["tp(", "probe(", "tracepoint(", "uprobe(", "uretprobe("]
        .iter()
        .any(|f| s.contains(&format!("from{f}")) || s.contains(&format!("join{f}")))
}

fn is_explain(sql: &str) -> bool {
    sql.trim_start().get(..7).is_some_and(|w| w.eq_ignore_ascii_case("explain"))
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn http() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into()
}

fn call(method: &str, url: &str, token: &str, body: Option<&str>) -> anyhow::Result<(u16, Value)> {
    let h = http();
    let auth = format!("Bearer {token}");
    let mut r = match method {
        "POST" => h.post(url).header("Authorization", &auth).send(body.unwrap_or("")),
        "DELETE" => h.delete(url).header("Authorization", &auth).call(),
        _ => h.get(url).header("Authorization", &auth).call(),
    }
    .map_err(|e| {
        anyhow::anyhow!("cannot reach the collector at {url} ({e}); is `weft serve --control-token` running?")
    })?;
    let status = r.status().as_u16();
    let text = r.body_mut().with_config().limit(64 << 20).read_to_string().context("reading the answer")?;
    Ok((status, serde_json::from_str(&text).unwrap_or(Value::String(text))))
}

fn error_of(v: &Value) -> String {
    v["error"]["message"].as_str().map(str::to_owned).unwrap_or_else(|| v.to_string())
}

/// Plan against this machine: the traced processes' tracepoints and tracefs.
fn local_catalog() -> weft_query::ListCatalog {
    let dir = weft_probe::layout::default_dir();
    let mut cat = weft_query::ListCatalog::new().tracefs("/sys/kernel/tracing/events");
    for path in weft_probe::consumer::discover(&dir).unwrap_or_default() {
        let Ok(seg) = weft_probe::consumer::Segment::open_shared(&path) else { continue };
        for t in seg.registry().unwrap_or_default() {
            cat = cat.probe(&t.name, &t.fields);
        }
    }
    cat
}

fn cell(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        Value::Array(b) => b
            .iter()
            .filter_map(|p| Some(format!("{}:{}", p.get(0)?, p.get(1)?)))
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}

/// A text table of a result (`{"rows": …}`) under `columns`.
fn table(columns: &[String], result: &Value) -> String {
    let rows: Vec<Vec<String>> = result["rows"]
        .as_array()
        .map(|r| {
            r.iter()
                .map(|row| row.as_array().map(|c| c.iter().map(cell).collect()).unwrap_or_default())
                .collect()
        })
        .unwrap_or_default();
    let mut width: Vec<usize> = columns.iter().map(|c| c.chars().count()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            if let Some(w) = width.get_mut(i) {
                *w = (*w).max(c.chars().count());
            }
        }
    }
    let line = |cells: &[String]| -> String {
        cells
            .iter()
            .zip(&width)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    let mut out = line(columns);
    out.push('\n');
    out.push_str(&width.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>().join("  "));
    out.push('\n');
    for r in &rows {
        out.push_str(&line(r));
        out.push('\n');
    }
    out
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().map(cell).collect()).unwrap_or_default()
}

/// Run (or explain) a live query.
pub fn run(args: LiveArgs<'_>, out: &mut impl Write) -> anyhow::Result<()> {
    if is_explain(args.sql) && args.collector.is_none() {
        let plan = weft_query::plan(args.sql, &local_catalog()).map_err(|e| anyhow::anyhow!("{e}"))?;
        write!(out, "{}", weft_query::explain(&plan))?;
        return Ok(());
    }
    let base = args.collector.unwrap_or("http://127.0.0.1:16686").trim_end_matches('/');
    let token = args
        .token
        .context("live queries go through the collector's control API: give --control-token-file FILE (or WEFT_CONTROL_TOKEN)")?;
    let mut submit = format!("{base}/api/control/queries");
    if let Some(name) = args.keep {
        weft_store::results::check_name(name).map_err(|e| anyhow::anyhow!("--keep: {e}"))?;
        submit.push_str(&format!("?keep={name}"));
    }
    let (status, v) = call("POST", &submit, &token, Some(args.sql))?;
    match status {
        200 => {
            write!(out, "{}", v["explain"].as_str().unwrap_or_default())?;
            return Ok(());
        }
        201 => {}
        _ => bail!("{}", error_of(&v)),
    }
    let id = v["id"].as_u64().context("the collector answered no query id")?;
    // SAFETY: installing an async-signal-safe handler that only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    let tty = std::io::stdout().is_terminal();
    let started = Instant::now();
    let url = format!("{base}/api/control/queries/{id}/results?windows=1");
    let mut shown: Option<u64> = None;
    let mut ended_at: Option<Instant> = None;
    let last = loop {
        let (status, r) = call("GET", &url, &token, None)?;
        if status != 200 {
            bail!("results of query {id}: {}", error_of(&r));
        }
        let columns = strings(&r["columns"]);
        if let Some(w) = r["windows"].get(0)
            && w["start_ns"].as_u64() != shown
        {
            shown = w["start_ns"].as_u64();
            let secs = shown.unwrap_or(0) / 1_000_000_000;
            let mut text = format!(
                "query {id} — window at {:02}:{:02}:{:02} UTC — agents: {}",
                secs / 3600 % 24,
                secs / 60 % 60,
                secs % 60,
                strings(&w["agents"]).join(", ")
            );
            let missing = strings(&w["missing"]);
            if !missing.is_empty() {
                text.push_str(&format!(" — late or missing: {}", missing.join(", ")));
            }
            text.push('\n');
            text.push_str(&table(&columns, &w["result"]));
            if tty {
                write!(out, "\x1b[H\x1b[2J")?;
            }
            write!(out, "{text}")?;
            if !tty {
                writeln!(out)?;
            }
            out.flush()?;
        }
        let ended = r["state"].as_str() != Some("running");
        if ended && ended_at.is_none() {
            ended_at = Some(Instant::now());
        }
        // an ended query's last windows close after their grace: wait for them (bounded)
        let settled = r["windows_open"].as_u64() == Some(0)
            || ended_at.is_some_and(|t| t.elapsed() >= Duration::from_secs(5));
        if (ended && settled)
            || STOP.load(Ordering::SeqCst)
            || args.duration.is_some_and(|d| started.elapsed() >= d)
        {
            break r;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let (status, v) = call("DELETE", &format!("{base}/api/control/queries/{id}"), &token, None)?;
    if status != 200 {
        eprintln!("removing query {id}: {}", error_of(&v));
    }
    let columns = strings(&last["columns"]);
    writeln!(out, "total over {} windows:", last["windows_closed"])?;
    write!(out, "{}", table(&columns, &last["total"]))?;
    if let Some(name) = args.keep {
        eprintln!("windows kept in the collector's store: weft query \"SELECT * FROM live_{name}\"");
    }
    for f in last["failures"].as_array().into_iter().flatten() {
        eprintln!("failure: agent {} pid {}: {}", cell(&f["agent"]), f["pid"], cell(&f["error"]));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_sources_are_recognised() {
        assert!(names_live_source("SELECT count(*) FROM tp('a.b')"));
        assert!(names_live_source("explain select x from  TRACEPOINT ('sched:x')"));
        assert!(!names_live_source("SELECT count(*) FROM spans WHERE name = 'tp('"));
        assert!(is_explain("  EXPLAIN SELECT 1"));
        assert!(!is_explain("SELECT 1"));
    }

    #[test]
    fn tables_align_and_show_buckets() {
        let t = table(
            &["path".into(), "count(*)".into(), "hist(len)".into()],
            &serde_json::json!({"rows": [["/a", 3, [[10, 2], [11, 1]]], ["/bb", 12, null]]}),
        );
        assert_eq!(
            t,
            "path  count(*)  hist(len)\n----  --------  ---------\n/a    3         10:2 11:1\n/bb   12        -\n"
        );
    }
}
