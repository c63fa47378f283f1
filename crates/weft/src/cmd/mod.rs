//! One module per subcommand: each has `Args` (clap) and `run(Args) -> anyhow::Result<()>`;
//! [`pipeline`] is what the commands running a weave pipeline share; [`control_token`] what
//! the commands talking to the collector's control API share.

pub mod breakdown;
pub mod convert;
pub mod exist;
pub mod explore;
pub mod import;
pub mod live;
pub mod loadgen;
pub mod pipeline;
pub mod probes;
pub mod query;
pub mod record;
pub mod serve;
pub mod weave;

/// The collector's control token: the first line of `file`, else `WEFT_CONTROL_TOKEN`; empty
/// when neither gives one (the caller says why it needs one).
pub fn control_token(file: Option<&std::path::Path>) -> anyhow::Result<String> {
    use anyhow::Context;
    Ok(match file {
        Some(f) => std::fs::read_to_string(f)
            .with_context(|| format!("cannot read the control token from {}", f.display()))?
            .trim()
            .to_owned(),
        None => std::env::var("WEFT_CONTROL_TOKEN").unwrap_or_default(),
    })
}
