//! `deploy`: ask one hive to (re)deploy one agent, by request/reply on the
//! hive's deploy subject.
//!
//! The three ways it can end are kept apart because they mean different
//! things to an operator: the hive answered (a queued job id, or its reason
//! for refusing); nobody listens on the subject (the hive is offline: NATS
//! says "no responders" at once); or no answer came in time. The last one is
//! **unknown**, not failed: the request may have reached the hive, which may
//! still act on it.

use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;
use swarm_queue_client::subjects::{fresh_deploy_answer, HiveSubjects};
use swarm_queue_client::{
    encode, ensure_connected, AgentName, DeployReply, DeployRequest, HiveName,
};

/// What came of one deploy request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum DeployOutcome {
    /// The hive queued a job.
    Queued { job: u64 },
    /// The hive answered with an error.
    Refused { error: String },
    /// Nobody listens on the hive's deploy subject: it is offline.
    NoResponders,
    /// No reply in time; the hive may still act on it.
    Unknown { waited_ms: u64, reason: String },
}

impl DeployOutcome {
    pub fn is_queued(&self) -> bool {
        matches!(self, DeployOutcome::Queued { .. })
    }
}

impl std::fmt::Display for DeployOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeployOutcome::Queued { job } => write!(f, "queued job {job}"),
            DeployOutcome::Refused { error } => write!(f, "refused: {error}"),
            DeployOutcome::NoResponders => {
                write!(
                    f,
                    "no responders: the hive is offline (nothing listens on its deploy subject)"
                )
            }
            DeployOutcome::Unknown { reason, .. } => {
                write!(f, "unknown, the hive may still act on it: {reason}")
            }
        }
    }
}

/// Send a deploy request and wait up to `timeout` for the reply.
pub async fn request(
    client: &async_nats::Client,
    hive: &HiveName,
    agent: &AgentName,
    timeout: Duration,
) -> DeployOutcome {
    let span = tracing::info_span!("deploy", %hive, %agent);
    let _guard = span.enter();
    let unknown = |reason: String| DeployOutcome::Unknown {
        waited_ms: timeout.as_millis().try_into().unwrap_or(u64::MAX),
        reason,
    };
    if let Err(e) = ensure_connected(client) {
        // A request while disconnected would only wait for its timeout.
        return unknown(format!("not sent: {e}"));
    }
    let payload = match encode(&DeployRequest::new(agent.clone())) {
        Ok(p) => p,
        Err(e) => {
            return DeployOutcome::Refused {
                error: e.to_string(),
            }
        }
    };
    // The answer comes under the hive's own answer prefix: the only
    // subject the hive may answer on (docs/security.md, "Accounts").
    let request = async_nats::Request::new()
        .payload(Bytes::from(payload))
        .timeout(Some(timeout))
        .inbox(fresh_deploy_answer(client, hive));
    let outcome = match client
        .send_request(HiveSubjects::new(hive).deploy, request)
        .await
    {
        Ok(msg) => match DeployReply::decode(&msg.payload) {
            Ok(DeployReply::Queued { job }) => DeployOutcome::Queued { job },
            Ok(DeployReply::Refused { error }) => DeployOutcome::Refused { error },
            Err(e) => unknown(format!("the reply does not decode: {e}")),
        },
        Err(e) => match e.kind() {
            async_nats::RequestErrorKind::NoResponders => DeployOutcome::NoResponders,
            async_nats::RequestErrorKind::TimedOut => {
                unknown(format!("no reply within {} ms", timeout.as_millis()))
            }
            _ => unknown(e.to_string()),
        },
    };
    tracing::info!(%outcome, "deploy request answered");
    outcome
}
