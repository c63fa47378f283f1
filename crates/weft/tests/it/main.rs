//! Integration tests of the `weft` binary.

mod record;
mod ui;
