//! Wire types shared by the agent, `weft probes` and the collector's control API (JSON).
//!
//! * Local control (`weft probes` → agent, Unix socket): one [`ProbeCommand`] per line, answered
//!   by one [`LocalReply`] per line.
//! * Collector control (`POST /api/control/probes`, bearer token): a [`ProbeCommand`] (with an
//!   optional `agent` filter); agents fetch commands with [`PollRequest`] → [`PollResponse`] and
//!   return one [`CommandResult`] each.
//! * EXIST captures (`POST /api/control/captures`, bearer token): a [`CaptureCommand`]; agents
//!   receive them in [`PollResponse::captures`] and return one [`CaptureOutcome`] each in
//!   [`PollRequest::capture_results`].
//! * Congestion reports (`POST /api/agents/report`): an [`AgentReport`], with the processes the
//!   agent may capture ([`TargetReport`], the replicas EXIST's coverage optimizer plans over).
//!
//! Every message is bounded ([`MAX_MESSAGE_BYTES`]) and checked by [`ProbeCommand::validate`]
//! before anything is switched: a malformed command is refused with a message naming the field.

use serde::{Deserialize, Serialize};
use weft_probe::{Op, Selector, select::glob_match};

/// Largest control message (request or command) accepted, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// What a command does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeOp {
    /// List the tracepoints (optionally only those `selector` matches).
    List,
    /// Enable every tracepoint `selector` matches.
    Enable,
    /// Disable every tracepoint `selector` matches, except always-on ones.
    Disable,
    /// Disable every matching tracepoint, always-on ones included.
    ForceDisable,
}

impl ProbeOp {
    /// The probe switch, `None` for `list`.
    pub fn switch(self) -> Option<Op> {
        match self {
            ProbeOp::List => None,
            ProbeOp::Enable => Some(Op::Enable),
            ProbeOp::Disable => Some(Op::Disable),
            ProbeOp::ForceDisable => Some(Op::ForceDisable),
        }
    }

    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeOp::List => "list",
            ProbeOp::Enable => "enable",
            ProbeOp::Disable => "disable",
            ProbeOp::ForceDisable => "force_disable",
        }
    }
}

/// A control command: what to switch, and in which processes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeCommand {
    pub op: ProbeOp,
    /// Tracepoint selector (`name:X`, `glob:P`, `group:G`, `level:L`, `all`, or a bare name or
    /// glob; see [`weft_probe::Selector`]). Required for switches; optional filter for `list`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// Only this process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Only processes whose service name matches this glob.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// Collector only: only agents whose name matches this glob.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

/// Why a command was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    #[error("control message of {0} bytes exceeds the limit of {MAX_MESSAGE_BYTES} bytes")]
    TooLarge(usize),
    #[error("control message is not a valid command: {0}")]
    Json(String),
    #[error("field selector: {0}")]
    Selector(String),
    #[error("field selector: required for {0}")]
    MissingSelector(&'static str),
    #[error("field {field}: {detail}")]
    Field { field: &'static str, detail: String },
}

impl ProbeCommand {
    /// Parse and validate a JSON command (bounded; never panics).
    pub fn parse(bytes: &[u8]) -> Result<ProbeCommand, CommandError> {
        if bytes.len() > MAX_MESSAGE_BYTES {
            return Err(CommandError::TooLarge(bytes.len()));
        }
        let cmd: ProbeCommand =
            serde_json::from_slice(bytes).map_err(|e| CommandError::Json(e.to_string()))?;
        cmd.validate()?;
        Ok(cmd)
    }

    /// Check every field; returns the parsed selector (`None` for a `list` without one).
    pub fn validate(&self) -> Result<Option<Selector>, CommandError> {
        for (field, v) in [("service", &self.service), ("agent", &self.agent)] {
            if let Some(v) = v
                && (v.is_empty() || v.len() > 256)
            {
                return Err(CommandError::Field { field, detail: "must be 1..=256 bytes".into() });
            }
        }
        if self.pid == Some(0) {
            return Err(CommandError::Field { field: "pid", detail: "0 is not a process id".into() });
        }
        match (&self.selector, self.op) {
            (None, ProbeOp::List) => Ok(None),
            (None, op) => Err(CommandError::MissingSelector(op.as_str())),
            (Some(s), _) => {
                if s.len() > 1024 {
                    return Err(CommandError::Selector("longer than 1024 bytes".into()));
                }
                Selector::parse(s).map(Some).map_err(|e| CommandError::Selector(e.to_string()))
            }
        }
    }

    /// Does this command address a process with this pid and service?
    pub fn targets(&self, pid: u32, service: &str) -> bool {
        self.pid.is_none_or(|p| p == pid) && self.service.as_deref().is_none_or(|g| glob_match(g, service))
    }
}

/// One tracepoint in a `list` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TracepointEntry {
    pub id: u32,
    pub name: String,
    pub level: String,
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub fields: String,
    pub enabled: bool,
    #[serde(default)]
    pub always_on: bool,
    #[serde(default)]
    pub span: bool,
}

impl From<&weft_probe::TracepointInfo> for TracepointEntry {
    fn from(t: &weft_probe::TracepointInfo) -> Self {
        TracepointEntry {
            id: t.id,
            name: t.name.clone(),
            level: t.level.as_str().to_string(),
            group: t.group.clone(),
            fields: t.fields.trim_end_matches(',').to_string(),
            enabled: t.enabled,
            always_on: t.always_on(),
            span: t.is_span(),
        }
    }
}

/// What one process did with a command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessOutcome {
    pub pid: u32,
    pub service: String,
    /// Segment file name.
    pub segment: String,
    /// Tracepoints the selector matched.
    pub matched: usize,
    /// The process acknowledged the switch (its control thread applied it).
    pub applied: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `list` only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tracepoints: Vec<TracepointEntry>,
}

/// What one agent did with a command.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CommandResult {
    pub agent: String,
    pub host: String,
    pub processes: Vec<ProcessOutcome>,
    /// The command was refused as a whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The agent's answer on the local socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalReply {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<CommandResult>,
}

/// A command queued at the collector.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueuedCommand {
    /// Increasing id.
    pub id: u64,
    pub command: ProbeCommand,
}

/// An EXIST capture request: trace a target's function calls for a bounded period.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaptureCommand {
    /// The target process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// The target service (processes whose comm or program name is this).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
    /// The target cgroup (v2 directory on the node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    /// The period in milliseconds (100..=2000 unless `force`).
    pub period_ms: u64,
    /// `auto` (default) or a CPU list (`0-3,6`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores: Option<String>,
    /// This capture's memory budget in bytes (default: what is left of the node's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_bytes: Option<u64>,
    /// `software` (default) or `intel_pt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    /// Globs over function names; empty = every function of the module.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub functions: Vec<String>,
    /// The binary or library probed (default: the target's executable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    /// Accept a period outside 100..=2000 ms.
    #[serde(default)]
    pub force: bool,
    /// The target's weft-probe tracepoints switched on for the period: selectors (`all`, a
    /// name, a glob, `group:G`, `level:L`); the enabled set is restored at the end.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tracepoints: Vec<String>,
    /// Collector only: only agents whose name matches this glob.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

impl CaptureCommand {
    /// Parse and check a JSON capture request (bounded; never panics).
    pub fn parse(bytes: &[u8]) -> Result<CaptureCommand, CommandError> {
        if bytes.len() > MAX_MESSAGE_BYTES {
            return Err(CommandError::TooLarge(bytes.len()));
        }
        let cmd: CaptureCommand =
            serde_json::from_slice(bytes).map_err(|e| CommandError::Json(e.to_string()))?;
        cmd.validate()?;
        Ok(cmd)
    }

    /// Check the fields the collector can check (the node checks the rest: the target, the
    /// cores, the budget against its allocator).
    pub fn validate(&self) -> Result<(), CommandError> {
        let field = |field: &'static str, detail: &str| CommandError::Field { field, detail: detail.into() };
        let targets = [self.pid.is_some(), self.service.is_some(), self.cgroup.is_some()];
        if targets.iter().filter(|t| **t).count() != 1 {
            return Err(field("pid", "give exactly one target: pid, service or cgroup"));
        }
        if self.pid == Some(0) {
            return Err(field("pid", "0 is not a process id"));
        }
        for (name, v) in [
            ("service", &self.service),
            ("cgroup", &self.cgroup),
            ("module", &self.module),
            ("agent", &self.agent),
        ] {
            if let Some(v) = v
                && (v.is_empty() || v.len() > 1024)
            {
                return Err(field(name, "must be 1..=1024 bytes"));
            }
        }
        if !self.force && !(100..=2000).contains(&self.period_ms) {
            return Err(field("period_ms", "must be 100..=2000 (or set force)"));
        }
        if self.period_ms == 0 || self.period_ms > 60_000 {
            return Err(field("period_ms", "must be 1..=60000 even with force"));
        }
        if let Some(b) = self.backend.as_deref()
            && !matches!(b, "software" | "intel_pt")
        {
            return Err(field("backend", "must be software or intel_pt"));
        }
        if self.functions.len() > 256 || self.functions.iter().any(|f| f.is_empty() || f.len() > 256) {
            return Err(field("functions", "at most 256 globs of 1..=256 bytes"));
        }
        if self.tracepoints.len() > 256 {
            return Err(field("tracepoints", "at most 256 selectors"));
        }
        for t in &self.tracepoints {
            Selector::parse(t).map_err(|e| field("tracepoints", &format!("{t:?}: {e}")))?;
        }
        Ok(())
    }

    /// Does this capture address the agent `name`?
    pub fn targets_agent(&self, name: &str) -> bool {
        self.agent.as_deref().is_none_or(|g| glob_match(g, name))
    }
}

/// A capture queued at the collector.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueuedCapture {
    /// Increasing id (shared with the probe commands' ids).
    pub id: u64,
    pub capture: CaptureCommand,
}

/// What one agent's capture came to.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CaptureOutcome {
    pub agent: String,
    pub host: String,
    /// Refused or failed, and why (nothing was traced then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default)]
    pub pids: Vec<u32>,
    /// Tracers on and off, ns since the epoch.
    #[serde(default)]
    pub start_ns: u64,
    #[serde(default)]
    pub end_ns: u64,
    #[serde(default)]
    pub calls: u64,
    /// weft-probe tracepoints switched on for the period.
    #[serde(default)]
    pub tracepoints: u64,
    #[serde(default)]
    pub switches: u64,
    /// Function spans shipped to the collector (OTLP, through the agent's spool).
    #[serde(default)]
    pub spans: u64,
    /// Spans placed inside a request span of the target.
    #[serde(default)]
    pub in_requests: u64,
    #[serde(default)]
    pub start_latency_us: u64,
    #[serde(default)]
    pub stop_latency_us: u64,
    #[serde(default)]
    pub control_ops: u64,
    #[serde(default)]
    pub full_cores: Vec<u32>,
    #[serde(default)]
    pub lost: u64,
    #[serde(default)]
    pub target_exited: bool,
    /// Calls per function name over the capture's function spans (EXIST's function-occurrence
    /// profile; the collector merges replicas' profiles and compares consecutive ones).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub functions: Vec<(String, u64)>,
}

/// Agent → collector: results of executed commands, and a request for new ones.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PollRequest {
    pub agent: String,
    pub host: String,
    /// The cursor of the last answer (`None` on the agent's first poll: the collector then
    /// answers with its current cursor and no old commands).
    #[serde(default)]
    pub after: Option<u64>,
    /// Results of commands executed since the last poll, by command id.
    #[serde(default)]
    pub results: Vec<(u64, CommandResult)>,
    /// Outcomes of captures run since the last poll, by capture id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capture_results: Vec<(u64, CaptureOutcome)>,
    /// How long the collector may hold the request waiting for a command (capped at 30 s).
    #[serde(default)]
    pub wait_ms: u64,
}

/// Collector → agent.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PollResponse {
    /// The cursor to send as `after` next time.
    pub cursor: u64,
    pub commands: Vec<QueuedCommand>,
    /// Captures to run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub captures: Vec<QueuedCapture>,
}

/// One instrumented process in an [`AgentReport`] (VAIF's congestion signal).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ProcessReport {
    pub pid: u32,
    pub service: String,
    pub segment: String,
    pub alive: bool,
    /// Rings owned by live threads.
    pub rings_in_use: u32,
    pub rings: u32,
    /// Bytes recorded and not yet released by the agent, over all rings.
    pub pending_bytes: u64,
    pub capacity_bytes: u64,
    /// Fullest ring's occupancy in [0, 1].
    pub max_occupancy: f64,
    /// Records dropped because a ring was full.
    pub dropped_ring_full: u64,
    /// Records dropped because no ring was free.
    pub dropped_no_ring: u64,
    /// Records the agent read.
    pub records: u64,
    /// Spans (and standalone events) the agent built.
    pub spans: u64,
    /// Tracepoints exported / enabled.
    pub tracepoints: u32,
    pub tracepoints_enabled: u32,
    pub ctl_rejected: u32,
    pub ctl_protected: u32,
}

/// The agent's own pipeline figures in an [`AgentReport`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PipelineReport {
    pub spool_bytes: u64,
    pub spool_limit_bytes: u64,
    pub spool_batches: u64,
    pub spool_dropped_batches: u64,
    pub spool_dropped_spans: u64,
    pub batches_sent: u64,
    pub spans_sent: u64,
    pub spans_rejected: u64,
    pub send_errors: u64,
}

/// An LTTng live session the agent follows (`weft agent --lttng-live`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LttngSessionReport {
    /// `net://RELAY:PORT/host/HOSTNAME/SESSION`.
    pub url: String,
    /// The traced host.
    pub host: String,
    /// The session's name.
    pub session: String,
    /// `following`, `reconnecting` or `ended`.
    pub state: String,
    /// Events read (each once, re-attaches included).
    pub events: u64,
    /// Spans woven and spooled.
    pub spans: u64,
    /// Events the tracer discarded (its buffers were full), from the packets' counts.
    pub discarded_events: u64,
    /// Packets missing (gaps in their sequence numbers).
    pub lost_packets: u64,
    /// Events read again after a re-attach and skipped (read before).
    pub replayed_events: u64,
    /// Re-attaches that succeeded.
    pub reconnects: u64,
    /// Decoding errors.
    pub decode_errors: u64,
    /// The last error while reconnecting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// A process an agent may capture (one replica of a service, for EXIST's coverage optimizer):
/// a live process whose `WEFT_PROBE_DIR` names the agent's probe directory.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TargetReport {
    pub pid: u32,
    /// `WEFT_PROBE_SERVICE` of the process, else its comm.
    pub service: String,
    /// Size of its executable in bytes (0 when unreadable).
    pub binary_bytes: u64,
}

/// Agent → collector, every few seconds.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct AgentReport {
    pub agent: String,
    pub host: String,
    pub version: String,
    pub unix_ns: u64,
    pub processes: Vec<ProcessReport>,
    pub pipeline: PipelineReport,
    /// The LTTng live sessions followed (`--lttng-live`); absent from older agents.
    #[serde(default)]
    pub lttng: Vec<LttngSessionReport>,
    /// Processes this agent may capture (EXIST's replicas).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<TargetReport>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_validate_with_named_fields() {
        let c =
            CaptureCommand::parse(br#"{"pid": 42, "period_ms": 500, "functions": ["handle_*"]}"#).unwrap();
        assert_eq!((c.pid, c.period_ms, c.functions.len()), (Some(42), 500, 1));
        assert!(c.targets_agent("node-1"));
        let err = |j: &str| CaptureCommand::parse(j.as_bytes()).unwrap_err().to_string();
        assert!(err(r#"{"period_ms": 500}"#).contains("exactly one target"));
        assert!(err(r#"{"pid": 1, "service": "x", "period_ms": 500}"#).contains("exactly one target"));
        assert!(err(r#"{"pid": 1, "period_ms": 50}"#).contains("field period_ms: must be 100..=2000"));
        assert!(
            err(r#"{"pid": 1, "period_ms": 3000, "force": true, "backend": "pt"}"#).contains("field backend")
        );
        assert!(err(r#"{"pid": 1, "period_ms": 500, "bogus": 1}"#).contains("unknown field"));
        assert!(CaptureCommand::parse(br#"{"service": "s", "period_ms": 3000, "force": true}"#).is_ok());
        let t = CaptureCommand::parse(br#"{"pid": 1, "period_ms": 500, "tracepoints": ["all", "group:db"]}"#);
        assert_eq!(t.unwrap().tracepoints, ["all", "group:db"]);
        assert!(
            err(r#"{"pid": 1, "period_ms": 500, "tracepoints": ["level:loud"]}"#)
                .contains("field tracepoints: \"level:loud\"")
        );
    }

    #[test]
    fn commands_validate_with_named_fields() {
        let ok =
            ProbeCommand::parse(br#"{"op":"enable","selector":"group:blocker.io","service":"bl*"}"#).unwrap();
        assert_eq!(ok.op, ProbeOp::Enable);
        assert!(ok.targets(7, "blocker"));
        assert!(!ok.targets(7, "mapper"));
        let list = ProbeCommand::parse(br#"{"op":"list"}"#).unwrap();
        assert!(list.validate().unwrap().is_none());
        for (bad, want) in [
            (&br#"{"op":"enable"}"#[..], "required for enable"),
            (br#"{"op":"enable","selector":"level:loud"}"#, "field selector"),
            (br#"{"op":"explode","selector":"x"}"#, "unknown variant"),
            (br#"{"op":"enable","selector":"x","bogus":1}"#, "unknown field"),
            (br#"{"op":"enable","selector":"x","pid":0}"#, "field pid"),
            (br#"{"op":"enable","selector":"x","service":""}"#, "field service"),
            (br#"not json"#, "not a valid command"),
            (br#"{"op":"enable","selector":"x","pid":-3}"#, "not a valid command"),
        ] {
            let e = ProbeCommand::parse(bad).unwrap_err().to_string();
            assert!(e.contains(want), "{}: {e}", String::from_utf8_lossy(bad));
        }
        let huge = vec![b' '; MAX_MESSAGE_BYTES + 1];
        assert!(matches!(ProbeCommand::parse(&huge), Err(CommandError::TooLarge(_))));
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
                let _ = ProbeCommand::parse(&bytes);
            }

            #[test]
            fn valid_commands_round_trip(
                op in 0usize..4,
                sel in "(group:|glob:|name:)?[a-z][a-z.*]{0,20}",
                pid in proptest::option::of(1u32..1_000_000),
                service in proptest::option::of("[a-z*]{1,12}"),
            ) {
                let op = [ProbeOp::List, ProbeOp::Enable, ProbeOp::Disable, ProbeOp::ForceDisable][op];
                let cmd = ProbeCommand { op, selector: Some(sel), pid, service, agent: None };
                let bytes = serde_json::to_vec(&cmd).unwrap();
                prop_assert_eq!(ProbeCommand::parse(&bytes).unwrap(), cmd);
            }
        }
    }
}
