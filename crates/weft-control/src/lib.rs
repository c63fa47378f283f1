//! # weft-control
//!
//! The control plane's messages and the client that carries them to the collector: what
//! `weft probes`, the agent (`weft agent`) and the collector's control API (`weft serve`) say to
//! each other about tracepoints, commands, captures and congestion. Small on purpose (serde, ureq,
//! weft-probe's selectors): the agent, the collector and the tools all link it.
//!
//! * [`proto`]: the JSON wire types — [`proto::ProbeCommand`] and its validation, results,
//!   EXIST's [`proto::CaptureCommand`] and [`proto::CaptureOutcome`], the poll exchange,
//!   [`proto::AgentReport`].
//! * [`client`]: [`client::Collector`], the HTTP client of the collector's control API
//!   (congestion reports, the command long poll, probe commands, the agents' reports, `weft
//!   explore`'s hypothesis forest).
//! * [`live`]: live queries' messages — a probe-level plan to deploy
//!   ([`live::QueryDeploy`]), an agent's partial result for a window
//!   ([`live::PartialReport`]), and the agents' exchange carrying them ([`live::LiveSync`],
//!   [`live::LiveAnswer`]; [`client::Collector::live_sync`]).

pub mod client;
pub mod live;
pub mod proto;
