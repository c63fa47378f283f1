//! # weft-probe-c
//!
//! C ABI for weft-probe (header `include/weft_probe.h`).
