//! `weft query`: SQL over weft's tables — against a running `weft serve` (`--url`, the
//! default) or a data directory directly (`--data-dir`, read-only: safe next to a running
//! server), the kept live queries' windows among them (`live_NAME`) — and live queries over
//! live sources (`FROM tp('…')`, see [`super::live`]).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, bail};
use weft_store::{Store, StoreConfig, render};

/// Output format.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// A text table.
    Table,
    /// CSV with a header row.
    Csv,
    /// JSON: `{"columns": [...], "rows": [[...]]}`.
    Json,
}

impl Format {
    fn as_str(self) -> &'static str {
        match self {
            Format::Table => "table",
            Format::Csv => "csv",
            Format::Json => "json",
        }
    }
}

/// Arguments of `weft query`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The SQL statement (tables: spans, span_events, span_links, events). `-` reads stdin.
    pub sql: Option<String>,
    /// A running weft server's query listener (`--http`, default port 16686).
    #[arg(long, default_value = "http://127.0.0.1:16686", conflicts_with = "data_dir")]
    pub url: String,
    /// Query this data directory directly instead of a server (read-only).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Run the query on an Apache DataFusion Ballista cluster, its scheduler at this URL
    /// (`df://HOST:PORT`), over the segments of --segments or --data-dir. Needs a weft built
    /// with `--features cluster` (or use `weft-cluster query`).
    #[arg(long, value_name = "URL")]
    pub cluster: Option<String>,
    /// With --cluster: where the store's segments are, a data directory (every node sees it at
    /// that path) or the bucket a collector uploads them to, `s3://bucket/prefix` (every node
    /// reads it; endpoint and credentials from the AWS_* environment, over it
    /// --segments-credentials): the manifest there and every collector's one level down
    /// (`s3://bucket/root` for all of `root/<name>/`), as `serve --read-only` reads them.
    #[arg(long, value_name = "DIR|URL", requires = "cluster", conflicts_with = "data_dir")]
    pub segments: Option<String>,
    /// `NAME=value` lines (AWS_ENDPOINT, AWS_ACCESS_KEY_ID, …) for an `s3://` --segments.
    #[arg(long, value_name = "FILE", requires = "segments")]
    pub segments_credentials: Option<PathBuf>,
    /// Output format.
    #[arg(long, short, value_enum, default_value = "table")]
    pub format: Format,
    /// Most rows to print.
    #[arg(long, default_value_t = 10_000)]
    pub max_rows: usize,
    /// Print the tables' documented schema and exit.
    #[arg(long)]
    pub schema: bool,
    /// A live query (implied when FROM names tp(…), tracepoint(…), uprobe(…) or uretprobe(…)):
    /// deployed through the collector's agents, a table refreshed every window until Ctrl-C.
    #[arg(long)]
    pub live: bool,
    /// The collector of a live query (its control API; default: --url). For `EXPLAIN`, without
    /// it the plan is made against this machine's traced processes.
    #[arg(long)]
    pub collector: Option<String>,
    /// The collector's control token (live queries).
    #[arg(long, env = "WEFT_CONTROL_TOKEN", hide_env_values = true)]
    pub control_token: Option<String>,
    /// Read the control token from the first line of this file instead.
    #[arg(long, value_name = "FILE")]
    pub control_token_file: Option<PathBuf>,
    /// Stop a live query after this long (e.g. 30s); default: Ctrl-C or the query's DURATION.
    #[arg(long, value_parser = weft_cli::units::parse_duration)]
    pub duration: Option<std::time::Duration>,
    /// Keep a live query's windows in the collector's store as table `live_NAME` for later
    /// SQL (NAME: 1 to 64 of a-z, 0-9, _).
    #[arg(long, value_name = "NAME")]
    pub keep: Option<String>,
}

/// Runs `weft query`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if args.schema {
        out.write_all(weft_store::schema::schema_markdown().as_bytes())?;
        return Ok(());
    }
    let sql = match args.sql.as_deref() {
        Some("-") => std::io::read_to_string(std::io::stdin()).context("reading SQL from stdin")?,
        Some(s) => s.to_owned(),
        None => bail!("give an SQL statement, e.g. weft query \"SELECT count(*) FROM spans\" (or --schema)"),
    };
    if args.live || super::live::names_live_source(&sql) {
        let token =
            weft_cli::control_token(args.control_token.as_deref(), args.control_token_file.as_deref())?;
        let collector = args.collector.clone();
        let explicit_url =
            collector.or_else(|| (args.url != "http://127.0.0.1:16686").then(|| args.url.clone()));
        let live = super::live::LiveArgs {
            sql: &sql,
            collector: explicit_url.as_deref(),
            token,
            duration: args.duration,
            keep: args.keep.as_deref(),
        };
        return super::live::run(live, &mut out);
    }
    if let Some(url) = &args.cluster {
        let at = match (&args.segments, &args.data_dir) {
            (Some(at), _) => at.clone(),
            (None, Some(dir)) => dir.to_string_lossy().into_owned(),
            (None, None) => {
                bail!("--cluster {url}: give the store's segments, --segments DIR|s3://bucket/prefix")
            }
        };
        let res = cluster(url, &at, args.segments_credentials.clone(), &sql, args.max_rows)?;
        return print_result(&res, args.format, args.max_rows, &mut out);
    }
    match &args.data_dir {
        Some(dir) => local(dir, &sql, args.format, args.max_rows, &mut out),
        None => remote(&args.url, &sql, args.format, args.max_rows, &mut out),
    }
}

fn local(
    dir: &std::path::Path,
    sql: &str,
    format: Format,
    max_rows: usize,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    if !dir.join(weft_store::manifest::MANIFEST).exists() && !dir.join("wal").is_dir() {
        bail!("{} is not a weft data directory (no MANIFEST.json or wal/)", dir.display());
    }
    let mut cfg = StoreConfig::new(dir);
    cfg.read_only = true;
    let store = Store::open(cfg).with_context(|| format!("opening {}", dir.display()))?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let res = rt.block_on(store.sql(sql, max_rows))?;
    print_result(&res, format, max_rows, out)
}

/// `--cluster`: the query on a Ballista cluster over the segments at `at` (a directory or
/// `s3://bucket/prefix`; with the feature `cluster`; without it, an error saying where
/// distributed SQL lives).
fn cluster(
    url: &str,
    at: &str,
    credentials: Option<PathBuf>,
    sql: &str,
    max_rows: usize,
) -> anyhow::Result<weft_store::SqlResult> {
    #[cfg(feature = "cluster")]
    {
        let at = weft_cluster::StoreAt::parse(at, credentials);
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
        Ok(rt.block_on(weft_cluster::query(url, &at, sql, max_rows))?)
    }
    #[cfg(not(feature = "cluster"))]
    {
        let _ = (at, credentials, sql, max_rows);
        bail!(
            "--cluster {url}: this weft was built without Ballista; run the query with `weft-cluster query --cluster {url} --data DIR|s3://bucket/prefix SQL` (package weft-cluster), or build weft with `--features cluster`"
        )
    }
}

fn print_result(
    res: &weft_store::SqlResult,
    format: Format,
    max_rows: usize,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let text = match format {
        Format::Table => render::to_table(&res.schema, &res.batches),
        Format::Csv => render::to_csv(&res.schema, &res.batches),
        Format::Json => render::to_json(&res.schema, &res.batches).to_string(),
    };
    writeln!(out, "{}", text.trim_end())?;
    if res.truncated {
        eprintln!("(only the first {max_rows} rows are shown; raise --max-rows)");
    }
    Ok(())
}

fn remote(url: &str, sql: &str, format: Format, max_rows: usize, out: &mut impl Write) -> anyhow::Result<()> {
    let base = url.trim_end_matches('/');
    let endpoint = format!("{base}/api/sql?format={}&max_rows={max_rows}", format.as_str());
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let mut resp = agent
        .post(&endpoint)
        .header("Content-Type", "text/plain; charset=utf-8")
        .send(sql.as_bytes())
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot reach weft at {base} ({e}); is `weft serve` running? (or use --data-dir DIR to query a data directory)"
            )
        })?;
    let status = resp.status().as_u16();
    let truncated = resp.headers().get("x-weft-truncated").is_some();
    let body = resp.body_mut().with_config().limit(1 << 30).read_to_string().context("reading the answer")?;
    if status != 200 {
        let msg = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
            .unwrap_or(body);
        bail!("query failed ({status}): {msg}");
    }
    writeln!(out, "{}", body.trim_end())?;
    let json_truncated = format == Format::Json
        && serde_json::from_str::<serde_json::Value>(&body).ok().is_some_and(|v| v["truncated"] == true);
    if truncated || json_truncated {
        eprintln!("(the server returned its row limit; narrow the query, {max_rows} requested)");
    }
    Ok(())
}
