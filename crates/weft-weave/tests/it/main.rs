//! weft-weave integration tests (one binary).

mod actors;
mod backpressure;
mod bad_input;
mod blkin;
mod export;
mod fifo;
mod golden;
mod kernel;
mod ns3_queues;
mod probe;
mod props;
mod sink;
mod topology;
