//! Integration tests of the `weft` binary (run as a subprocess).

mod import_ctf;
mod record;
mod ui;
mod weave;
