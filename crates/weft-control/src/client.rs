//! The client of the collector's control API (`weft serve`): agents post their congestion
//! reports (`POST /api/agents/report`), long-poll for commands (`POST /api/control/poll`,
//! bearer token) and exchange live queries' plans and partials (`POST /api/control/live`). Spans do not travel here: they go to the collector's OTLP receiver.

use std::time::Duration;

use serde::Serialize;

use crate::proto::{AgentReport, PollRequest, PollResponse};

/// Route of the agents' congestion reports (bearer token: a report registers an agent).
pub const REPORT_ROUTE: &str = "/api/agents/report";
/// Route of the agents' command long poll (bearer token).
pub const POLL_ROUTE: &str = "/api/control/poll";

/// Route of the agents' live-query exchange (bearer token).
pub const LIVE_ROUTE: &str = "/api/control/live";

/// Largest poll answer read, in bytes.
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
}

/// The collector's control API at one base URL, with the bearer token if there is one.
#[derive(Debug, Clone)]
pub struct Collector {
    base: String,
    token: Option<String>,
    http: ureq::Agent,
}

impl Collector {
    /// `base` is `http://host:port` of any of the collector's HTTP listeners (a trailing `/` or
    /// `/v1/traces` is ignored, so the agent's OTLP endpoint works too). Without `token` only
    /// [`Collector::report`] works.
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
        self.long_poll(POLL_ROUTE, req, req.wait_ms)
    }

    /// Deliver partials and learn (waiting up to `req.wait_ms`) which live queries to run.
    pub fn live_sync(&self, req: &crate::live::LiveSync) -> Result<crate::live::LiveAnswer, ClientError> {
        self.long_poll(LIVE_ROUTE, req, req.wait_ms)
    }

    fn long_poll<T: serde::de::DeserializeOwned>(
        &self,
        route: &'static str,
        req: &impl Serialize,
        wait_ms: u64,
    ) -> Result<T, ClientError> {
        let timeout = Duration::from_millis(wait_ms) + POLL_SLACK;
        let mut r = self.post(route, req, timeout, true)?;
        let answer = |detail: String| ClientError::Answer { route, detail };
        let bytes = r
            .body_mut()
            .with_config()
            .limit(MAX_POLL_ANSWER)
            .read_to_vec()
            .map_err(|e| answer(e.to_string()))?;
        serde_json::from_slice(&bytes).map_err(|e| answer(e.to_string()))
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
        match r.status().as_u16() {
            s if (200..300).contains(&s) => Ok(r),
            401 | 403 if auth => Err(ClientError::Unauthorized),
            404 if auth => Err(ClientError::Disabled),
            status => Err(ClientError::Status { route, status }),
        }
    }
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
        let req =
            PollRequest { agent: "a".into(), host: "h".into(), after: None, results: vec![], wait_ms: 0 };
        assert_eq!(c.poll(&req).unwrap_err(), ClientError::NoToken);
    }
}
