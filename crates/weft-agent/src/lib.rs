//! # weft-agent
//!
//! The per-node agent: finds the instrumented processes on the machine (their weft-probe
//! shared-memory segments in `/dev/shm/weft-<uid>/`), drains their rings, turns the records into
//! spans (with `weft_weave::probe`, where the mapping table is), follows the local
//! `lttng-relayd`'s live sessions into BlkKin spans when told to (`--lttng-live`), and ships
//! the spans to the collector (`weft serve`) through a bounded on-disk spool; it reports the processes' buffer
//! occupancy and drops, and switches their tracepoints on request — from `weft probes` over a
//! local socket or from the collector's control API — runs the collector's live queries in the
//! processes and in the kernel (shipping merged partial results), and runs EXIST's bounded captures of a service's
//! function calls on the collector's request.
//!
//! * [`agent`]: [`Agent::start`] and the drain loop (discovery, draining, process death,
//!   restarts, commits).
//! * [`lttng`]: `--lttng-live`, the local `lttng-relayd`'s live sessions (every session or
//!   one) followed, their BlkKin events woven into spans (`weft_weave::live`) and spooled like
//!   the rings' spans; re-attached after a relay daemon restart without spooling a span twice.
//! * [`spool`]: the store-and-forward spool (bounded; drops are explicit and counted).
//! * [`ship`]: the sender (OTLP/HTTP protobuf to the collector's existing receiver, through
//!   `weft_weave::export`'s client and retry policy).
//! * [`control`]: executing [`weft_control::proto::ProbeCommand`]s on segments; the local
//!   control socket.
//! * [`collector`]: the loops of congestion reports and the control-command long poll (over
//!   [`weft_control::client::Collector`]).
//! * [`live`]: live queries at the machine level — install the collector's plans in the
//!   probe level ([`live::ProbeLevel`]: weft-probe tracepoints in the traced processes, and
//!   [`ebpf`]: kernel tracepoints and uprobes through weft-bpf, read and reset per window),
//!   collect and merge their partials every interval, ship one partial per query and window.
//! * [`metrics`]: counters, per-process figures, Prometheus text.
//! * [`capture`]: EXIST's on-demand bounded captures — the usage-aware allocator of per-core
//!   buffers within the node's budget ([`capture::alloc`]) and its `/proc` inputs
//!   ([`capture::usage`]); the capture engine ([`capture::engine`]: target resolution, the
//!   software backend — uprobes on the target's functions —, the operation-aware per-core
//!   controller, the period timer, release of everything); and the captures the collector
//!   requests, woven into the request spans the agent drains and shipped with them
//!   ([`capture::remote`]). Intel PT is detected and refused with a clear message: only the
//!   software backend captures (`docs/captures.md`).
//! * [`cli`]: the command line ([`cli::Args`], [`cli::run`]) of both `weft agent` and the lean
//!   `weft-agent` binary of this package (no DataFusion, Arrow or UI in it).
//!
//! The control messages (shared with `weft probes` and the collector) are in `weft-control`.
//!
//! Spans travel on the collector's standard OTLP/HTTP receiver rather than a weft-native
//! stream: it is already batched, compressed, bounded and acknowledged after the durable append.

pub mod agent;
pub mod capture;
pub mod cli;
pub mod collector;
pub mod control;
pub mod ebpf;
pub mod live;
pub mod lttng;
pub mod metrics;
pub mod ship;
pub mod spool;

pub use agent::{Agent, AgentConfig, AgentError};
