//! `weft-cluster`: one binary for a Ballista cluster over a weft store — the scheduler, an
//! executor, and `query` (SQL through the scheduler over a store's segments, in a directory or
//! a bucket).

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use ballista_core::utils::default_session_builder;
use ballista_executor::executor_process::{ExecutorProcessConfig, start_executor_process};
use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::config::SchedulerConfig;
use ballista_scheduler::scheduler_process::start_server;
use clap::{Parser, Subcommand, ValueEnum};
use weft_cluster::{BucketRegistry, StoreAt};
use weft_store::datafusion::execution::SessionStateBuilder;
use weft_store::render;

#[derive(Parser, Debug)]
#[command(name = "weft-cluster", about = "Distributed SQL over a weft store on Apache DataFusion Ballista")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a Ballista scheduler (plans queries, hands tasks to the executors).
    Scheduler {
        /// Address to listen on (gRPC, for clients and executors).
        #[arg(long, default_value = "0.0.0.0:50050")]
        bind: SocketAddr,
        /// Host name the executors and clients reach this scheduler by.
        #[arg(long, default_value = "localhost")]
        external_host: String,
        /// `NAME=value` lines (AWS_ENDPOINT, AWS_ACCESS_KEY_ID, …) read over the AWS_*
        /// environment for the buckets queries read (values never logged).
        #[arg(long, value_name = "FILE")]
        credentials_file: Option<PathBuf>,
    },
    /// Run a Ballista executor (runs tasks; registers with the scheduler).
    Executor {
        /// The scheduler, HOST:PORT.
        #[arg(long, default_value = "localhost:50050")]
        scheduler: String,
        /// Address to bind (both ports).
        #[arg(long, default_value = "0.0.0.0")]
        bind_host: String,
        /// Host name other executors and clients fetch results from this executor by.
        #[arg(long)]
        external_host: Option<String>,
        /// Arrow Flight port (results and shuffle data).
        #[arg(long, default_value_t = 50051)]
        port: u16,
        /// gRPC port (tasks from the scheduler).
        #[arg(long, default_value_t = 50052)]
        grpc_port: u16,
        /// Tasks run at once (default: the CPUs).
        #[arg(long)]
        concurrent_tasks: Option<usize>,
        /// Directory for shuffle data (default: a temporary directory).
        #[arg(long)]
        work_dir: Option<PathBuf>,
        /// `NAME=value` lines (AWS_ENDPOINT, AWS_ACCESS_KEY_ID, …) read over the AWS_*
        /// environment for the buckets queries read (values never logged).
        #[arg(long, value_name = "FILE")]
        credentials_file: Option<PathBuf>,
    },
    /// Run one SQL statement on the cluster over a store directory's segments.
    Query {
        /// The scheduler, `df://HOST:PORT`.
        #[arg(long)]
        cluster: String,
        /// Where the store's segments are: its data directory (every node sees it at this
        /// path), or the bucket it uploads them to, `s3://bucket/prefix` (every node reads it):
        /// the manifest there and every collector's one level down (`<prefix>/<name>/`).
        #[arg(long, value_name = "DIR|URL")]
        data: String,
        /// `NAME=value` lines (AWS_ENDPOINT, AWS_ACCESS_KEY_ID, …) read over the AWS_*
        /// environment for an `s3://` --data (values never logged).
        #[arg(long, value_name = "FILE")]
        credentials_file: Option<PathBuf>,
        /// Output format.
        #[arg(long, short, value_enum, default_value = "table")]
        format: Format,
        /// Most rows to print.
        #[arg(long, default_value_t = 10_000)]
        max_rows: usize,
        /// The SQL statement (tables: spans, span_events, span_links, events).
        sql: String,
    },
}

/// Output format of `query`.
#[derive(ValueEnum, Clone, Copy, Debug)]
enum Format {
    /// A text table.
    Table,
    /// CSV with a header row.
    Csv,
    /// JSON: `{"columns": [...], "rows": [[...]]}`.
    Json,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(run(cli.command))
}

async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Scheduler { bind, external_host, credentials_file } => {
            // Ballista's session, reading through a runtime that knows the buckets.
            let session = move |config| {
                let state = default_session_builder(config)?;
                let runtime = BucketRegistry::runtime(credentials_file.clone(), None)?;
                Ok(SessionStateBuilder::new_from_existing(state).with_runtime_env(runtime).build())
            };
            let config = SchedulerConfig::default()
                .with_hostname(external_host)
                .with_port(bind.port())
                .with_override_session_builder(Arc::new(session));
            let config = SchedulerConfig { bind_host: bind.ip().to_string(), ..config };
            let cluster =
                BallistaCluster::new_from_config(&config).await.context("starting the scheduler")?;
            start_server(cluster, bind, Arc::new(config)).await.context("running the scheduler")?;
        }
        Command::Executor {
            scheduler,
            bind_host,
            external_host,
            port,
            grpc_port,
            concurrent_tasks,
            work_dir,
            credentials_file,
        } => {
            let Some((host, sport)) = scheduler.rsplit_once(':') else {
                bail!("--scheduler {scheduler}: give HOST:PORT");
            };
            let scheduler_port: u16 =
                sport.parse().with_context(|| format!("--scheduler {scheduler}: bad port {sport:?}"))?;
            let mut config = ExecutorProcessConfig {
                bind_host,
                external_host,
                port,
                grpc_port,
                scheduler_host: host.to_owned(),
                scheduler_port,
                work_dir: work_dir.as_ref().map(|d| d.to_string_lossy().into_owned()),
                // Tasks read through a runtime that knows the buckets (spill files in the
                // work dir, as Ballista's own runtime puts them).
                override_runtime_producer: Some(Arc::new(move |_| {
                    BucketRegistry::runtime(credentials_file.clone(), work_dir.as_deref())
                })),
                ..ExecutorProcessConfig::default()
            };
            if let Some(n) = concurrent_tasks {
                config.vcores = n;
            }
            start_executor_process(Arc::new(config)).await.context("running the executor")?;
        }
        Command::Query { cluster, data, credentials_file, format, max_rows, sql } => {
            let at = StoreAt::parse(&data, credentials_file);
            let res = weft_cluster::query(&cluster, &at, &sql, max_rows).await?;
            let text = match format {
                Format::Table => render::to_table(&res.schema, &res.batches),
                Format::Csv => render::to_csv(&res.schema, &res.batches),
                Format::Json => render::to_json(&res.schema, &res.batches).to_string(),
            };
            let mut out = std::io::stdout().lock();
            writeln!(out, "{}", text.trim_end())?;
            if res.truncated {
                eprintln!("(only the first {max_rows} rows are shown; raise --max-rows)");
            }
        }
    }
    Ok(())
}
