//! The client of the collector's control API (`weft serve`): agents post their congestion
//! reports (`POST /api/agents/report`), long-poll for commands (`POST /api/control/poll`,
//! bearer token) and exchange live queries' plans and partials (`POST /api/control/live`); tools
//! submit probe commands (`POST /api/control/probes`) and read the agents' reports
//! (`GET /api/control/agents`); `weft explore` stores its hypothesis forest there
//! (`PUT /api/control/explore/forest`); `weft exist plan` asks for EXIST's profiling rounds
//! (`POST /api/control/exist/plan`). Spans do not travel here: they go to the collector's
//! OTLP receiver.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::proto::{AgentReport, CommandResult, PollRequest, PollResponse, ProbeCommand};

/// Route of the agents' congestion reports (bearer token: a report registers an agent).
pub const REPORT_ROUTE: &str = "/api/agents/report";
/// Route of the agents' command long poll (bearer token).
pub const POLL_ROUTE: &str = "/api/control/poll";
/// Route of the agents' live-query exchange (bearer token).
pub const LIVE_ROUTE: &str = "/api/control/live";
/// Route of probe commands (bearer token).
pub const PROBES_ROUTE: &str = "/api/control/probes";
/// Route of the agents seen, with their last reports (bearer token).
pub const AGENTS_ROUTE: &str = "/api/control/agents";
/// Route where `weft explore` stores its hypothesis forest at the collector (`PUT`, bearer
/// token).
pub const FOREST_ROUTE: &str = "/api/control/explore/forest";

/// Route of EXIST's profiling rounds (bearer token): the coverage optimizer's plan over the
/// replicas the agents report, and its captures dispatched.
pub const EXIST_PLAN_ROUTE: &str = "/api/control/exist/plan";

/// Largest poll, command or agents answer read, in bytes.
const MAX_POLL_ANSWER: u64 = 16 << 20;
/// How long a report may take.
const REPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// How much longer than the requested wait a poll may take.
const POLL_SLACK: Duration = Duration::from_secs(10);

/// Why a request to the collector failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    #[error("no control token: the collector's control API needs one")]
    NoToken,
    #[error("the collector refused the control token")]
    Unauthorized,
    #[error("the collector's control API is disabled (no --control-token)")]
    Disabled,
    #[error("{route} answered HTTP {status}")]
    Status { route: &'static str, status: u16 },
    #[error("{route} failed: {detail}")]
    Transport { route: &'static str, detail: String },
    #[error("unreadable answer from {route}: {detail}")]
    Answer { route: &'static str, detail: String },
    #[error("{route} refused (HTTP {status}): {message}")]
    Refused { route: &'static str, status: u16, message: String },
}

/// The body of a profiling round's request (`POST /api/control/exist/plan`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct PlanRequest {
    /// The spatial sampler's seed (default: the round number).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Globs of the functions captured (default: every function of each target's executable).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub functions: Vec<String>,
    /// Plan only; dispatch nothing.
    pub dry_run: bool,
}

/// The collector's answer to a probe command: its results so far.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
pub struct CommandStatus {
    /// The command's id at the collector.
    pub id: u64,
    /// Agents the command was queued for.
    #[serde(default)]
    pub targets: Vec<String>,
    /// Results of the agents that answered.
    #[serde(default)]
    pub results: Vec<CommandResult>,
    /// Every targeted agent answered.
    #[serde(default)]
    pub complete: bool,
    /// Tracepoints matched, over every process.
    #[serde(default)]
    pub matched: usize,
    /// Processes that acknowledged.
    #[serde(default)]
    pub applied_processes: usize,
    /// Why nothing was switched (no agent polling).
    #[serde(default)]
    pub warning: Option<String>,
}

/// One agent as the collector knows it.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
pub struct AgentStatus {
    /// The agent's name.
    pub agent: String,
    /// Its host.
    #[serde(default)]
    pub host: String,
    /// Since its last request.
    #[serde(default)]
    pub last_seen_ms_ago: u64,
    /// It long-polls for commands.
    #[serde(default)]
    pub polling: bool,
    /// Its last congestion report.
    #[serde(default)]
    pub report: Option<AgentReport>,
}

/// The collector's control API at one base URL, with the bearer token if there is one.
#[derive(Debug, Clone)]
pub struct Collector {
    base: String,
    token: Option<String>,
    http: ureq::Agent,
}

impl Collector {
    /// `base` is `http://host:port` of the collector's query listener, which serves the control
    /// API (a trailing `/` or `/v1/traces` is ignored). Every route of the control API,
    /// reports included, needs `token`: without one the collector answers 401.
    pub fn new(base: &str, token: Option<String>) -> Collector {
        let b = base.trim_end_matches('/');
        let base = b.strip_suffix("/v1/traces").unwrap_or(b).to_string();
        let http = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(2)))
            .build()
            .into();
        Collector { base, token: token.filter(|t| !t.is_empty()), http }
    }

    /// The full URL of a route.
    pub fn url(&self, route: &str) -> String {
        format!("{}{route}", self.base)
    }

    /// Has a control token (the agent then takes commands from the collector).
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// Post one congestion report.
    pub fn report(&self, report: &AgentReport) -> Result<(), ClientError> {
        self.post(REPORT_ROUTE, report, REPORT_TIMEOUT, true).map(drop)
    }

    /// Return results and wait (up to `req.wait_ms`, which the collector caps) for new commands.
    pub fn poll(&self, req: &PollRequest) -> Result<PollResponse, ClientError> {
        let timeout = Duration::from_millis(req.wait_ms) + POLL_SLACK;
        let r = self.post(POLL_ROUTE, req, timeout, true)?;
        read_json(POLL_ROUTE, r)
    }

    /// Deliver partials and learn (waiting up to `req.wait_ms`) which live queries to run.
    pub fn live_sync(&self, req: &crate::live::LiveSync) -> Result<crate::live::LiveAnswer, ClientError> {
        let timeout = Duration::from_millis(req.wait_ms) + POLL_SLACK;
        let r = self.post(LIVE_ROUTE, req, timeout, true)?;
        read_json(LIVE_ROUTE, r)
    }

    /// Submit a probe command and wait up to `wait` (the collector caps it at 30 s) for every
    /// targeted agent's result.
    pub fn submit(&self, command: &ProbeCommand, wait: Duration) -> Result<CommandStatus, ClientError> {
        let route = PROBES_ROUTE;
        let query = format!("?wait={}ms", wait.as_millis());
        let r = self.send(route, &query, Some(command), wait + POLL_SLACK)?;
        read_json(route, r)
    }

    /// The agents the collector has seen, with their last congestion reports.
    pub fn agents(&self) -> Result<Vec<AgentStatus>, ClientError> {
        let r = self.send(AGENTS_ROUTE, "", None::<&()>, REPORT_TIMEOUT)?;
        read_json(AGENTS_ROUTE, r)
    }

    /// Ask EXIST's coverage optimizer for a profiling round and wait up to `wait` (the
    /// collector caps it) for its captures' outcomes; the answer is the collector's JSON (the
    /// round, its plan, skipped services and why, the captures and the merged profiles).
    pub fn exist_plan(&self, req: &PlanRequest, wait: Duration) -> Result<serde_json::Value, ClientError> {
        let route = EXIST_PLAN_ROUTE;
        let query = if wait.is_zero() { String::new() } else { format!("?wait={}ms", wait.as_millis()) };
        let r = self.send(route, &query, Some(req), wait + POLL_SLACK)?;
        read_json(route, r)
    }

    /// Store `weft explore`'s hypothesis forest (its JSON) at the collector, replacing the one
    /// it had. A refusal carries the collector's message (a malformed forest names the field).
    pub fn put_forest(&self, forest: &impl Serialize) -> Result<(), ClientError> {
        let route = FOREST_ROUTE;
        let mut r = self.request(true, route, "", Some(forest), REPORT_TIMEOUT * 6)?;
        let status = r.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(());
        }
        if status == 401 || status == 403 {
            return Err(ClientError::Unauthorized);
        }
        #[derive(Deserialize)]
        struct Error {
            message: String,
        }
        #[derive(Deserialize)]
        struct Body {
            error: Error,
        }
        let bytes = r.body_mut().with_config().limit(64 << 10).read_to_vec().unwrap_or_default();
        let message = serde_json::from_slice::<Body>(&bytes)
            .map(|b| b.error.message)
            .unwrap_or_else(|_| String::from_utf8_lossy(&bytes).into_owned());
        Err(ClientError::Refused { route, status, message })
    }

    fn send(
        &self,
        route: &'static str,
        query: &str,
        body: Option<&impl Serialize>,
        timeout: Duration,
    ) -> Result<ureq::http::Response<ureq::Body>, ClientError> {
        check(route, self.request(false, route, query, body, timeout)?, true)
    }

    /// A request with the token, its status unchecked: POST (PUT when `put`) with a JSON body,
    /// else GET.
    fn request(
        &self,
        put: bool,
        route: &'static str,
        query: &str,
        body: Option<&impl Serialize>,
        timeout: Duration,
    ) -> Result<ureq::http::Response<ureq::Body>, ClientError> {
        let token = self.token.as_deref().ok_or(ClientError::NoToken)?;
        let url = format!("{}{query}", self.url(route));
        let auth = format!("Bearer {token}");
        let transport = |e: ureq::Error| ClientError::Transport { route, detail: e.to_string() };
        let r = match body {
            Some(b) => {
                let bytes = serde_json::to_vec(b)
                    .map_err(|e| ClientError::Transport { route, detail: e.to_string() })?;
                let req = if put { self.http.put(&url) } else { self.http.post(&url) };
                req.config()
                    .timeout_global(Some(timeout))
                    .build()
                    .header("Content-Type", "application/json")
                    .header("Authorization", &auth)
                    .send(&bytes[..])
                    .map_err(transport)?
            }
            None => self
                .http
                .get(&url)
                .config()
                .timeout_global(Some(timeout))
                .build()
                .header("Authorization", &auth)
                .call()
                .map_err(transport)?,
        };
        Ok(r)
    }

    fn post(
        &self,
        route: &'static str,
        body: &impl Serialize,
        timeout: Duration,
        auth: bool,
    ) -> Result<ureq::http::Response<ureq::Body>, ClientError> {
        let body =
            serde_json::to_vec(body).map_err(|e| ClientError::Transport { route, detail: e.to_string() })?;
        let mut req = self
            .http
            .post(&self.url(route))
            .config()
            .timeout_global(Some(timeout))
            .build()
            .header("Content-Type", "application/json");
        if auth {
            let token = self.token.as_deref().ok_or(ClientError::NoToken)?;
            req = req.header("Authorization", &format!("Bearer {token}"));
        }
        let r = req.send(&body[..]).map_err(|e| ClientError::Transport { route, detail: e.to_string() })?;
        check(route, r, auth)
    }
}

/// A 2xx answer, or the error its status means.
fn check(
    route: &'static str,
    r: ureq::http::Response<ureq::Body>,
    auth: bool,
) -> Result<ureq::http::Response<ureq::Body>, ClientError> {
    match r.status().as_u16() {
        s if (200..300).contains(&s) => Ok(r),
        401 | 403 if auth => Err(ClientError::Unauthorized),
        404 if auth => Err(ClientError::Disabled),
        status => Err(ClientError::Status { route, status }),
    }
}

/// A bounded JSON answer.
fn read_json<T: DeserializeOwned>(
    route: &'static str,
    mut r: ureq::http::Response<ureq::Body>,
) -> Result<T, ClientError> {
    let answer = |detail: String| ClientError::Answer { route, detail };
    let bytes =
        r.body_mut().with_config().limit(MAX_POLL_ANSWER).read_to_vec().map_err(|e| answer(e.to_string()))?;
    serde_json::from_slice(&bytes).map_err(|e| answer(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_normalise() {
        for base in ["http://h:4318", "http://h:4318/", "http://h:4318/v1/traces", "http://h:4318/v1/traces/"]
        {
            assert_eq!(
                Collector::new(base, None).url(POLL_ROUTE),
                "http://h:4318/api/control/poll",
                "{base}"
            );
        }
        assert!(!Collector::new("http://h", Some(String::new())).has_token());
    }

    #[test]
    fn a_poll_without_token_is_refused_before_sending() {
        let c = Collector::new("http://127.0.0.1:9", None);
        let req = PollRequest {
            agent: "a".into(),
            host: "h".into(),
            after: None,
            wait_ms: 0,
            ..Default::default()
        };
        assert_eq!(c.poll(&req).unwrap_err(), ClientError::NoToken);
        assert_eq!(c.agents().unwrap_err(), ClientError::NoToken);
        let list = ProbeCommand {
            op: crate::proto::ProbeOp::List,
            selector: None,
            pid: None,
            service: None,
            agent: None,
        };
        assert_eq!(c.submit(&list, Duration::ZERO).unwrap_err(), ClientError::NoToken);
    }
}
