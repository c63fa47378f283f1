//! One module per subcommand: each has `Args` (clap) and `run(Args) -> anyhow::Result<()>`.

pub mod agent;
pub mod convert;
pub mod loadgen;
pub mod probes;
pub mod query;
pub mod serve;
pub mod units;
