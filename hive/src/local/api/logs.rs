//! `GET /api/v1/agents/{agent}/logs`: what an agent's container printed,
//! as NDJSON, one [`LogLine`] a line.
//!
//! - `tail=N` (at most 100,000), `since=<unix seconds>`;
//! - `follow=true` keeps the answer open and passes new lines on. A blank
//!   line goes out every [`KEEPALIVE`] while the agent is quiet, so a
//!   reader that went away is noticed within seconds, and the Docker
//!   stream behind it is dropped;
//! - `previous=true`: the runs that ended (see [`crate::agents::agent_logs`]).
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

use super::{parse_agent, ApiError, ApiState};
use crate::agents::agent_logs::{open, OpenError};
use crate::agents::runtime::logs::{LogRequest, LogStream};
use crate::agents::runtime::ContainerRuntime;

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
    let request = LogRequest {
        follow: q.follow,
        tail: q.tail,
        since_unix: q.since,
        previous: q.previous,
    };
    let opened = open(
        &*state.runtime,
        &state.hive,
        &state.state_dir,
        &agent,
        &request,
    )
    .await;
    match opened {
        Ok(lines) => Ok(ndjson(lines, request.follow, Ended(agent.to_string()))),
        Err(e) => {
            let status = match &e {
                OpenError::Bad(_) => StatusCode::BAD_REQUEST,
                OpenError::NotFound(_) => StatusCode::NOT_FOUND,
                OpenError::Foreign(_) => StatusCode::CONFLICT,
                OpenError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
                OpenError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            };
            Err(ApiError::new(status, e.to_string()))
        }
    }
}

/// The answer: each line as JSON and a newline, pulled from `lines` only as
/// the body is written; with `follow`, a blank line every [`KEEPALIVE`].
fn ndjson(lines: LogStream, follow: bool, ended: Ended) -> Response {
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
    .filter_map(|b| std::future::ready(b.map(Ok::<_, std::io::Error>)))
    // Dropped with the body: at its end, or when the reader went away.
    .map(move |b| {
        let _ = &ended;
        b
    });
    (
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(body),
    )
        .into_response()
}

/// Says, once the answer (and the Docker stream behind it) is dropped,
/// that the agent's log stream on the socket ended.
struct Ended(String);

impl Drop for Ended {
    fn drop(&mut self) {
        tracing::info!(agent = %self.0, reader = "socket", "log stream ended");
    }
}
