//! `GET /api/hive/{name}/agents/{agent}/logs`: one agent's log, followed,
//! as server-sent events: its last [`TAIL_LINES`] lines, then each new one.
//! It only reads: the request is the `logs --follow` of [`crate::logs`].
//!
//! Each open tail holds one of `log_tails_max` permits (over all hives);
//! past it, 503 and no request to any hive. A task per tail asks the hive
//! and hands each frame's lines to the page's stream through a small
//! channel; a frame is acknowledged to the hive only once the channel took
//! it, so a slow page slows its hive and nothing buffers more than
//! [`PAGE_BUFFER`] frames. When the page goes away the stream is dropped,
//! the task sees its channel closed and drops the NATS request at once
//! (the hive, no longer acknowledged, ends the stream within seconds), and
//! the permit is given back.
//!
//! Events: `lines` (`[{source, time, line}]`), then at the end `end`
//! (`{error}`: `null` when the log ended, else why it stopped).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use serde_json::json;
use swarm_queue_client::payload::LogsRequest;
use swarm_queue_client::{AgentName, HiveName};
use tokio::sync::{mpsc, OwnedSemaphorePermit};
use tracing::Instrument;

use super::hive::{known_hive, Refused};
use super::{reply, Shared};

/// Lines of the log sent before following it.
pub const TAIL_LINES: u64 = 100;
/// Frames (at most 64 KiB each) waiting for the page.
const PAGE_BUFFER: usize = 4;

pub(super) async fn logs(
    State(shared): State<Arc<Shared>>,
    Path((name, agent)): Path<(String, String)>,
) -> Response {
    let hive = match known_hive(&shared, &name) {
        Ok(h) => h,
        Err(r) => return r.into_response(),
    };
    let agent = match AgentName::new(&agent) {
        Ok(a) => a,
        Err(e) => return Refused::bad_name(e).into_response(),
    };
    let Ok(slot) = shared.tail_slots.clone().try_acquire_owned() else {
        tracing::warn!(cap = shared.log_tails_max, %hive, %agent, "refused a log tail: log_tails_max are open");
        return reply(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({ "error": format!(
                "{} log tails are open, the most this server holds (log_tails_max); \
                 close one or try again later",
                shared.log_tails_max
            ) }),
        );
    };
    let (tx, rx) = mpsc::channel(PAGE_BUFFER);
    let span = tracing::debug_span!("log_tail", %hive, %agent);
    tokio::spawn(follow(shared.client.clone(), hive, agent, tx, slot).instrument(span));
    let live = stream::unfold(rx, |mut rx| async move {
        let event = rx.recv().await?;
        Some((event, rx))
    });
    super::events::until_shutdown(&shared, live)
}

/// The tail task (see the module documentation).
async fn follow(
    client: async_nats::Client,
    hive: HiveName,
    agent: AgentName,
    tx: mpsc::Sender<Event>,
    _slot: OwnedSemaphorePermit,
) {
    let mut request = LogsRequest::new(agent);
    request.follow = true;
    request.tail = Some(TAIL_LINES);
    let read = crate::logs::stream_to(&client, &hive, &request, |lines| {
        let tx = tx.clone();
        async move {
            if lines.is_empty() {
                return !tx.is_closed(); // a heartbeat: nothing to show
            }
            let data = serde_json::to_string(&lines).unwrap_or_default();
            tx.send(Event::default().event("lines").data(data))
                .await
                .is_ok()
        }
    });
    let ended = tokio::select! {
        // Dropping the read (the page left) drops its subscription.
        r = read => r,
        _ = tx.closed() => return,
    };
    let error = ended.err().map(|e| e.to_string());
    if let Some(e) = &error {
        tracing::debug!(error = %e, "a log tail ended");
    }
    let end = json!({ "error": error }).to_string();
    let _ = tx.send(Event::default().event("end").data(end)).await;
}
