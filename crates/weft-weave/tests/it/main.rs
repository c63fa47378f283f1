//! weft-weave integration tests (one binary).

mod golden;
