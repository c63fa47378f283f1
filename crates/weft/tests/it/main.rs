//! Integration tests of the `weft` binary (one test binary: link time).

mod ui;
