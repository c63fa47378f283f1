//! Kernel spans: the attribute keys of the spans made from kernel events (system calls,
//! uprobe calls, on-CPU intervals, per-thread roots — by `weft_weave::kernel`) and read by the
//! analyses that attribute kernel activity to application spans (`weft_analyze::kernel`).
//!
//! They live here, apart from [`crate::conv`], because some are longer than a [`crate::Str`]
//! holds inline; the keys themselves are unchanged since weft first wrote them.

/// Span attribute: what a kernel span is (`thread`, `syscall`, `on_cpu`, `off_cpu`, `uprobe`).
pub const KIND: &str = "weft.kernel.kind";
/// Span attribute: CPU.
pub const CPU: &str = "weft.kernel.cpu";
/// Span attribute (on-CPU spans): the state the thread left the CPU in (`R`, `S`, `D`, `-`).
pub const SWITCH_OUT_STATE: &str = "weft.kernel.switch_out_state";
/// Span attribute (on-CPU spans): the command of the thread switched to.
pub const SWITCHED_TO: &str = "weft.kernel.switched_to";
/// Span attribute (syscall spans): syscall number.
pub const SYSCALL_NR: &str = "weft.kernel.syscall.nr";
/// Span attribute (syscall spans): return value.
pub const SYSCALL_RET: &str = "weft.kernel.syscall.ret";
/// Span attribute (syscall spans): the six argument registers.
pub const SYSCALL_ARGS: &str = "weft.kernel.syscall.args";
/// Span attribute (uprobe spans): `binary:function`.
pub const UPROBE: &str = "weft.kernel.uprobe";
/// Span attribute (uprobe spans): the six integer argument registers at entry.
pub const UPROBE_ARGS: &str = "weft.kernel.uprobe.args";
/// Span attribute (uprobe spans): the return register.
pub const UPROBE_RET: &str = "weft.kernel.uprobe.ret";
/// Scope name of kernel spans.
pub const SCOPE: &str = "weft.kernel";
