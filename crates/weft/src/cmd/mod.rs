//! One module per subcommand: each has `Args` (clap) and `run(Args) -> anyhow::Result<()>`.

pub mod breakdown;
pub mod convert;
pub mod explore;
pub mod import;
pub mod loadgen;
pub mod probes;
pub mod query;
pub mod record;
pub mod serve;
pub mod weave;
