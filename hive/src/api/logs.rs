//! `GET /api/v1/agents/{agent}/logs`: what an agent's container printed,
//! as NDJSON, one [`LogLine`] a line.
//!
//! - `tail=N` (at most [`MAX_TAIL`]), `since=<unix seconds>`;
//! - `follow=true` keeps the answer open and passes new lines on. A blank
//!   line goes out every [`KEEPALIVE`] while the agent is quiet, so a
//!   reader that went away is noticed within seconds, and the Docker
//!   stream behind it is dropped;
//! - `previous=true`: the lines from before the current run started (the
//!   runs that ended), or, when the container never ended, what the hive
//!   kept of the container it last removed (`<state>/previous-logs/<agent>.ndjson`, at most
//!   [`PREVIOUS_MAX_BYTES`]).
//!
//! Lines are read from Docker as the answer is written: a reader that
//! stops reading stops the hive reading, and nothing is buffered beyond
//! one line. A stream that breaks ends with `{"error": "…"}`.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::{stream, StreamExt};
use serde::Deserialize;
use swarm_queue_client::containers::container_name;

use super::{parse_agent, ApiError, ApiState};
use crate::runtime::logs::{LogRequest, LogStream, MAX_TAIL, PREVIOUS_MAX_BYTES};
use crate::runtime::{ContainerRuntime, RuntimeError};

/// How often a quiet `follow` writes a blank line.
pub const KEEPALIVE: Duration = Duration::from_secs(2);
/// The most lines one write of the answer carries.
const LINES_PER_WRITE: usize = 512;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LogQuery {
    #[serde(default)]
    follow: bool,
    tail: Option<u64>,
    since: Option<i64>,
    #[serde(default)]
    previous: bool,
}

pub(super) async fn logs<R: ContainerRuntime>(
    State(state): State<ApiState<R>>,
    Path(agent): Path<String>,
    Query(q): Query<LogQuery>,
) -> Result<Response, ApiError> {
    let agent = parse_agent(&agent)?;
    if let Some(n) = q.tail.filter(|n| *n > MAX_TAIL) {
        let msg = format!("tail={n}: at most {MAX_TAIL} lines");
        return Err(ApiError::new(StatusCode::BAD_REQUEST, msg));
    }
    if q.previous && q.follow {
        let msg = "previous and follow do not go together: a previous run has ended";
        return Err(ApiError::new(StatusCode::BAD_REQUEST, msg));
    }
    let request = LogRequest {
        follow: q.follow,
        tail: q.tail,
        since_unix: q.since,
        previous: q.previous,
    };
    let name = container_name(&state.hive, &agent);
    match state.runtime.logs(&name, &request).await {
        Ok(Some(lines)) => Ok(ndjson(lines, request.follow)),
        Ok(None) => kept(&state, &agent, request.tail).await,
        Err(RuntimeError::NoSuchContainer { .. }) if request.previous => {
            kept(&state, &agent, request.tail).await
        }
        Err(RuntimeError::NoSuchContainer { .. }) => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("agent {agent} has no container on hive {}", state.hive),
        )),
        Err(e @ RuntimeError::Foreign { .. }) => {
            Err(ApiError::new(StatusCode::CONFLICT, e.to_string()))
        }
        Err(e) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            crate::error_chain(&e),
        )),
    }
}

/// The answer: each line as JSON and a newline, pulled from `lines` only as
/// the body is written; with `follow`, a blank line every [`KEEPALIVE`].
fn ndjson(lines: LogStream, follow: bool) -> Response {
    let lines = lines
        .map(|item| {
            let mut bytes = match item {
                Ok(line) => serde_json::to_vec(&line),
                Err(e) => serde_json::to_vec(&super::ErrorBody {
                    error: crate::error_chain(&e),
                }),
            }
            .unwrap_or_default();
            bytes.push(b'\n');
            bytes
        })
        // The lines Docker has already sent go out as one write (a
        // follow's next line is not waited for).
        .ready_chunks(LINES_PER_WRITE)
        .map(|batch| Some(Bytes::from(batch.concat())))
        // The end of the lines ends the answer, keep-alives or not.
        .chain(stream::once(async { None }));
    let beats = stream::unfold((), |()| async {
        tokio::time::sleep(KEEPALIVE).await;
        Some((Some(Bytes::from_static(b"\n")), ()))
    });
    let body = if follow {
        stream::select(lines, beats).boxed()
    } else {
        lines.boxed()
    }
    .take_while(|b| std::future::ready(b.is_some()))
    .filter_map(|b| std::future::ready(b.map(Ok::<_, std::io::Error>)));
    (
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(body),
    )
        .into_response()
}

/// What the hive kept of the container it last removed, the last `tail`
/// lines of it.
async fn kept<R>(
    state: &ApiState<R>,
    agent: &swarm_queue_client::AgentName,
    tail: Option<u64>,
) -> Result<Response, ApiError> {
    let path = crate::worker::previous_log_path(&state.state_dir, agent);
    let text = match tokio::fs::read(&path).await {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                format!(
                    "agent {agent} has no previous run: its container never ended, and the \
                     hive kept no earlier container of it"
                ),
            ))
        }
        Err(e) => {
            let msg = format!("cannot read {}: {e}", path.display());
            return Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, msg));
        }
    };
    let text = &text[text.len().saturating_sub(PREVIOUS_MAX_BYTES)..];
    let lines: Vec<&[u8]> = text.split_inclusive(|b| *b == b'\n').collect();
    let keep = tail.map_or(lines.len(), |n| (n as usize).min(lines.len()));
    let body: Vec<u8> = lines[lines.len() - keep..].concat();
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response())
}
