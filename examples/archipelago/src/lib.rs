//! # archipelago
//!
//! A small multi-process storage service in the shape of Archipelago's I/O path, as traced by
//! BlkKin: **gateway → volume composer → mapper → blocker**, each a separate process talking
//! TCP ([`proto`]), the blocker keeping objects as local files. Every tier is instrumented with
//! weft-probe — over 100 tracepoints (`archipelago <role>` lists them with `weft probes list`),
//! most off by default, at levels from error to trace and in groups (`blocker.io`,
//! `mapper.map`, `net.pool`, `zipkin`, ...). Each request carries the W3C `traceparent` of the
//! calling span, so a trace follows it across the four processes:
//!
//! ```text
//! gateway.request (server) ─ gateway.forward (client)
//!   └ vcomposer.request (server) ─ vcomposer.object (client, one per object touched)
//!       └ mapper.request (server) ─ mapper.forward (client)
//!           └ blocker.request (server) ─ blocker.io.write / blocker.io.read (off by default)
//! ```
//!
//! A `stat` request is answered by the gateway alone (root span `gateway.stat`). Performance
//! problems can be injected for `weft explore` ([`problems`], off by default).
//!
//! The default set (always-on and default-on tracepoints) is the server and client spans.
//! Building without the `probes` feature compiles every tracepoint out — the baseline of the
//! overhead measurement (`examples/archipelago/overhead.sh`).

pub mod blocker;
pub mod client;
pub mod gateway;
pub mod mapper;
pub mod net;
pub mod obs;
pub mod problems;
pub mod proto;
pub mod run;
pub mod vcomposer;

/// Are the probes compiled in?
pub const PROBES: bool = obs::ENABLED;
