//! Integration tests of the `weft` binary (one test binary; one module per subject).

mod breakdown;
mod case_study;
mod common;
