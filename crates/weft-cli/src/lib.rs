//! # weft-cli
//!
//! What weft's command-line binaries (`weft`, and the lean `weft-agent` that runs on every
//! node) share at their edge, so that each exists once:
//!
//! * [`Globals`]: the global options (`--log`, `--quiet`) and [`Globals::init`], which sets up
//!   logging and progress bars; [`exit_code`] turns a command's result into the exit status.
//! * [`progress`]: progress bars and spinners (stderr, only on a terminal, hidden by `--quiet`).
//! * [`units`]: human-friendly sizes and durations for options (`64MiB`, `250ms`).
//! * [`control_token`]: the control API's bearer token from `--control-token`,
//!   `--control-token-file` or `WEFT_CONTROL_TOKEN` (a file or the environment keep it out of
//!   the process list).
//! * [`query_url_near`]: the base URL of `weft serve`'s query listener (metrics, control API)
//!   on the host of an ingest URL, for clients given only the OTLP/HTTP URL.

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

/// The control API's bearer token: `token` (from `--control-token` or `WEFT_CONTROL_TOKEN`),
/// else the first line of `file` (`--control-token-file`, e.g. a mode-0600 secret; surrounding
/// white space is trimmed). An empty token counts as none.
pub fn control_token(token: Option<&str>, file: Option<&std::path::Path>) -> anyhow::Result<Option<String>> {
    let t = match (token, file) {
        (Some(_), Some(_)) => {
            anyhow::bail!("give --control-token (or WEFT_CONTROL_TOKEN) or --control-token-file, not both")
        }
        (Some(t), None) => t.to_string(),
        (None, Some(f)) => {
            let text = std::fs::read_to_string(f)
                .map_err(|e| anyhow::anyhow!("--control-token-file {}: {e}", f.display()))?;
            text.lines().next().unwrap_or("").to_string()
        }
        (None, None) => return Ok(None),
    };
    let t = t.trim();
    Ok((!t.is_empty()).then(|| t.to_string()))
}

/// The query listener of the `weft serve` that takes spans at `ingest` (an `http://` base
/// URL): the same host on port 16686, the query listener's default. The OTLP/HTTP port serves
/// ingest only; metrics and the control API live on the query listener.
pub fn query_url_near(ingest: &str) -> String {
    let rest = ingest.strip_prefix("http://").unwrap_or(ingest);
    let authority = rest.split('/').next().unwrap_or(rest);
    let host = match authority.rsplit_once(':') {
        Some((h, port)) if !port.contains(']') => h,
        _ => authority,
    };
    format!("http://{host}:16686")
}

#[cfg(test)]
mod tests {
    use super::{control_token, query_url_near};

    #[test]
    fn control_token_from_flag_file_or_none() {
        let dir = std::env::temp_dir().join(format!("weft-cli-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("token");
        std::fs::write(&f, "  s3cret \nignored\n").unwrap();
        assert_eq!(control_token(None, Some(&f)).unwrap().as_deref(), Some("s3cret"));
        assert_eq!(control_token(Some("t"), None).unwrap().as_deref(), Some("t"));
        assert_eq!(control_token(Some(""), None).unwrap(), None);
        assert_eq!(control_token(None, None).unwrap(), None);
        assert!(control_token(Some("t"), Some(&f)).is_err());
        let missing = control_token(None, Some(&dir.join("nope"))).unwrap_err().to_string();
        assert!(missing.contains("--control-token-file") && missing.contains("nope"), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_query_url_is_port_16686_of_the_ingest_host() {
        assert_eq!(query_url_near("http://127.0.0.1:4318"), "http://127.0.0.1:16686");
        assert_eq!(query_url_near("http://collector.lan:9999/base"), "http://collector.lan:16686");
        assert_eq!(query_url_near("http://[::1]:4318"), "http://[::1]:16686");
        assert_eq!(query_url_near("http://[::1]"), "http://[::1]:16686");
        assert_eq!(query_url_near("http://node7"), "http://node7:16686");
    }
}
