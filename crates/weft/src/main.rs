//! `weft` — one binary for every job: convert trace files, weave simulator logs, serve the
//! collector and UI, query the store, control probes, run the agent, record the kernel.

mod cmd;
mod progress;

use clap::{Parser, Subcommand};

/// mimalloc: with glibc's allocator, malloc/free were half of span decoding time (see the
/// decode benchmark in weft-model); mimalloc doubles decode throughput.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// weft builds end-to-end traces across layers: application tracepoints, the kernel, and
/// (simulated) hardware.
#[derive(Parser)]
#[command(name = "weft", version, about, long_about = None)]
struct Cli {
    /// Log filter (tracing's EnvFilter syntax, e.g. `info`, `weft_store=debug`); also `WEFT_LOG`.
    #[arg(long, global = true, env = "WEFT_LOG", default_value = "warn")]
    log: String,
    /// Hide progress bars (they are also hidden when stderr is not a terminal).
    #[arg(long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Convert traces between formats (OTLP proto/JSON, Zipkin v1/v2, Jaeger JSON, Chrome trace).
    Convert(cmd::convert::Args),
    /// Run the collector and store: OTLP/Zipkin receivers, Zipkin/Jaeger/SQL read APIs, metrics.
    Serve(cmd::serve::Args),
    /// Run SQL over stored spans and events (against `weft serve`, or a data directory).
    Query(cmd::query::Args),
    /// Send realistic spans to an OTLP/HTTP endpoint and measure ingest throughput.
    Loadgen(cmd::loadgen::Args),
    /// Record the kernel (perf_event_open): scheduler switches, syscalls, tracepoints, uprobes.
    Record(cmd::record::Args),
    /// Import recorded traces: `weft import ctf TRACE_DIR` (LTTng/CTF: BlkKin spans, every event).
    Import(cmd::import::Args),
    /// Weave simulator logs (gem5, nicbm, ns-3, QEMU) into end-to-end traces, from files or pipes.
    Weave(cmd::weave::Args),
    /// Where the time went: per component (host, NIC, switch, wire) and request direction.
    Breakdown(cmd::breakdown::Args),
    /// Run the per-node agent: drain weft-probe rings, ship spans, take tracepoint commands.
    Agent(cmd::agent::Args),
    /// List, enable or disable the weft-probe tracepoints of local processes.
    Probes(cmd::probes::Args),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_new(&cli.log)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    progress::set_quiet(cli.quiet);
    let result = match cli.command {
        Command::Convert(a) => cmd::convert::run(a),
        Command::Serve(a) => cmd::serve::run(a),
        Command::Query(a) => cmd::query::run(a),
        Command::Loadgen(a) => cmd::loadgen::run(a),
        Command::Record(a) => cmd::record::run(a),
        Command::Import(a) => cmd::import::run(a),
        Command::Weave(a) => cmd::weave::run(a),
        Command::Breakdown(a) => cmd::breakdown::run(a),
        Command::Agent(a) => cmd::agent::run(a),
        Command::Probes(a) => cmd::probes::run(a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
