//! The `weft` binary's integration tests (one binary).

mod weave;
