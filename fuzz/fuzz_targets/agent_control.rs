//! Control messages reach the agent from `weft probes` (local socket) and the collector (JSON):
//! arbitrary bytes are refused with an error, never a panic; an accepted command survives a
//! round trip. The collector's agent-side messages (poll requests, reports) decode or fail
//! cleanly too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_control::proto::{AgentReport, PollRequest, ProbeCommand};

fuzz_target!(|data: &[u8]| {
    if let Ok(cmd) = ProbeCommand::parse(data) {
        let again = serde_json::to_vec(&cmd).expect("serialize");
        assert_eq!(ProbeCommand::parse(&again).expect("round trip"), cmd);
        let _ = cmd.targets(1, "svc");
    }
    let _ = serde_json::from_slice::<PollRequest>(data);
    let _ = serde_json::from_slice::<AgentReport>(data);
});
