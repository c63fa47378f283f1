//! Integration tests of the `weft` binary (`CARGO_BIN_EXE_weft`, run as a subprocess) on real
//! files, real peers and real kernels.

mod breakdown;
mod case_study;
mod common;
mod convert;
mod import_ctf;
mod record;
mod ui;
mod weave;
