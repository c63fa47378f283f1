//! `weft convert` (being built: issue "weft speaks every trace format").

/// Arguments of `weft convert`.
#[derive(clap::Args)]
pub struct Args {
    /// Input file.
    input: std::path::PathBuf,
    /// Output file.
    output: std::path::PathBuf,
}

/// Runs `weft convert`.
pub fn run(args: Args) -> anyhow::Result<()> {
    anyhow::bail!("converting {} to {} is not built yet", args.input.display(), args.output.display())
}
