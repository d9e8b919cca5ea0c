//! An agent's output for a reader: the one way to open it that the API's
//! `/api/v1/agents/{agent}/logs` (the hive's socket) and the log stream
//! over NATS ([`crate::bus::logs`]) share, so both answer the same request
//! the same way.
//!
//! - the current container's lines (`tail`, `since`, `follow`) from Docker;
//! - `previous`: the lines written before the container last started, or,
//!   when the container never ended, what the hive kept of the container it
//!   last removed (`<state>/previous-logs/<agent>.ndjson`, at most
//!   [`PREVIOUS_MAX_BYTES`]).
//!
//! Only this hive's own agents: the container name is derived from the
//! hive and agent names, and a container of that name that this hive did
//! not make (its labels say so) is refused.

use std::path::Path;

use futures_util::{stream, StreamExt};
use swarm_queue_client::containers::container_name;
use swarm_queue_client::{AgentName, HiveName};

use crate::agents::runtime::logs::{LogLine, LogRequest, LogStream, MAX_TAIL, PREVIOUS_MAX_BYTES};
use crate::agents::runtime::{ContainerRuntime, RuntimeError};

/// Why a log could not be opened; each kind is an HTTP status on the
/// socket and an ending frame's error over NATS.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// The request itself is wrong.
    #[error("{0}")]
    Bad(String),
    #[error("{0}")]
    NotFound(String),
    /// A container of that name is not this hive's.
    #[error("{0}")]
    Foreign(String),
    /// Docker did not answer.
    #[error("{0}")]
    Unavailable(String),
    /// The kept file of a previous container cannot be read.
    #[error("{0}")]
    Internal(String),
}

/// Open `agent`'s log as `request` says.
pub async fn open<R: ContainerRuntime>(
    runtime: &R,
    hive: &HiveName,
    state_dir: &Path,
    agent: &AgentName,
    request: &LogRequest,
) -> Result<LogStream, OpenError> {
    if let Some(n) = request.tail.filter(|n| *n > MAX_TAIL) {
        return Err(OpenError::Bad(format!(
            "tail={n}: at most {MAX_TAIL} lines"
        )));
    }
    if request.previous && request.follow {
        return Err(OpenError::Bad(
            "previous and follow do not go together: a previous run has ended".into(),
        ));
    }
    let name = container_name(hive, agent);
    match runtime.logs(&name, request).await {
        Ok(Some(lines)) => Ok(lines),
        Ok(None) => kept(state_dir, agent, request.tail).await,
        Err(RuntimeError::NoSuchContainer { .. }) if request.previous => {
            kept(state_dir, agent, request.tail).await
        }
        Err(RuntimeError::NoSuchContainer { .. }) => Err(OpenError::NotFound(format!(
            "agent {agent} has no container on hive {hive}"
        ))),
        Err(e @ RuntimeError::Foreign { .. }) => Err(OpenError::Foreign(e.to_string())),
        Err(e) => Err(OpenError::Unavailable(crate::error_chain(&e))),
    }
}

/// What the hive kept of the container it last removed, the last `tail`
/// lines of it.
async fn kept(
    state_dir: &Path,
    agent: &AgentName,
    tail: Option<u64>,
) -> Result<LogStream, OpenError> {
    let path = crate::agents::worker::previous_log_path(state_dir, agent);
    let text = match tokio::fs::read(&path).await {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(OpenError::NotFound(format!(
                "agent {agent} has no previous run: its container never ended, and the \
                 hive kept no earlier container of it"
            )))
        }
        Err(e) => {
            return Err(OpenError::Internal(format!(
                "cannot read {}: {e}",
                path.display()
            )))
        }
    };
    let text = &text[text.len().saturating_sub(PREVIOUS_MAX_BYTES)..];
    let lines: Vec<LogLine> = text
        .split(|b| *b == b'\n')
        .filter_map(|l| serde_json::from_slice(l).ok())
        .collect();
    let keep = tail.map_or(lines.len(), |n| (n as usize).min(lines.len()));
    let last: Vec<_> = lines[lines.len() - keep..]
        .iter()
        .cloned()
        .map(Ok)
        .collect();
    Ok(stream::iter(last).boxed())
}
