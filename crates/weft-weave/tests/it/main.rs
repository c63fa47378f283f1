//! weft-weave integration tests (one binary).

mod actors;
mod bad_input;
mod fifo;
mod golden;
mod props;
mod topology;
