//! CTF reader tests: babeltrace2 comparison on real LTTng traces, synthetic traces, bad input.

mod bt2;
mod errors;
mod lttng;
mod synth;
