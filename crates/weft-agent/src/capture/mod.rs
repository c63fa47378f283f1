//! EXIST's on-demand bounded captures, the agent's side. Built so far: the usage-aware memory
//! allocator ([`alloc`]) and its live inputs from `/proc` ([`usage`]). The controller that
//! opens the per-core Intel PT AUX captures with these buffers comes next
//! (`docs/captures.md`).

pub mod alloc;
pub mod usage;
