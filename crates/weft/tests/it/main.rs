//! Integration tests of the `weft` binary.

mod ui;
