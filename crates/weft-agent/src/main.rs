//! `weft-agent`: the per-node agent on its own — the same command as `weft agent`, in a binary
//! without the collector, the store (DataFusion, Arrow) or the UI, for every node to run.

use clap::Parser;

/// The per-node agent: drains the weft-probe rings of the local processes, ships spans to the
/// collector (`weft serve`), takes tracepoint commands (`weft probes`, the control API).
#[derive(Parser)]
#[command(name = "weft-agent", version, about, long_about = None)]
struct Cli {
    #[command(flatten)]
    globals: weft_cli::Globals,
    #[command(flatten)]
    args: weft_agent::cli::Args,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    cli.globals.init();
    weft_cli::exit_code(weft_agent::cli::run(cli.args))
}
