//! # weft-sources
//!
//! Readers and parsers: simulator logs (gem5, nicbm, ns-3, QEMU), CTF/LTTng, perf_event, probe rings
