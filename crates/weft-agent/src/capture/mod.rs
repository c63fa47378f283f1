//! EXIST's on-demand bounded captures, the agent's side: the usage-aware memory allocator
//! ([`alloc`]) and its live inputs from `/proc` ([`usage`]), and the capture engine
//! ([`engine`]): target resolution, the software backend (uprobes on the target's functions),
//! the target's weft-probe tracepoints switched on for the period ([`tracepoints`]), the
//! operation-aware per-core controller, the period timer and the release of everything;
//! and the captures the collector requests ([`remote`]), shipped like the agent's other spans
//! (`docs/captures.md`).

pub mod alloc;
pub mod engine;
pub mod remote;
pub mod tracepoints;
pub mod usage;
