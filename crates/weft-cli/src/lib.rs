//! # weft-cli
//!
//! What weft's command-line binaries (`weft`, and the lean `weft-agent` that runs on every
//! node) share at their edge, so that each exists once:
//!
//! * [`Globals`]: the global options (`--log`, `--quiet`) and [`Globals::init`], which sets up
//!   logging and progress bars; [`exit_code`] turns a command's result into the exit status.
//! * [`progress`]: progress bars and spinners (stderr, only on a terminal, hidden by `--quiet`).
//! * [`units`]: human-friendly sizes and durations for options (`64MiB`, `250ms`).

pub mod progress;
pub mod units;

use std::process::ExitCode;

/// The options every weft binary takes.
#[derive(clap::Args, Debug)]
pub struct Globals {
    /// Log filter (tracing's EnvFilter syntax, e.g. `info`, `weft_store=debug`); also `WEFT_LOG`.
    #[arg(long, global = true, env = "WEFT_LOG", default_value = "warn")]
    pub log: String,
    /// Hide progress bars (they are also hidden when stderr is not a terminal).
    #[arg(long, global = true)]
    pub quiet: bool,
}

impl Globals {
    /// Logs to stderr with the `--log` filter (`warn` when it does not parse); bars per `--quiet`.
    /// Called once, from `main`.
    pub fn init(&self) {
        let filter = tracing_subscriber::EnvFilter::try_new(&self.log)
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
        progress::set_quiet(self.quiet);
    }
}

/// Success, or the error with its causes on stderr and a failure status.
pub fn exit_code(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
