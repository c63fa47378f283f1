//! One module per subcommand: each has `Args` (clap) and `run(Args) -> anyhow::Result<()>`;
//! [`pipeline`] is what the commands running a weave pipeline share.

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
