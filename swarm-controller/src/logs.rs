//! `logs`: read one agent's output from its hive over NATS.
//!
//! The request goes to `hyperhive.hive.<hive>.logs.request` with a reply
//! subject under the hive's answer prefix (the only place the hive may
//! answer); the hive's frames come there, numbered from 1. Each frame is
//! acknowledged on `hyperhive.hive.<hive>.logs.ack.<token>` once its lines
//! are handed on, which lets the hive send the next ones: a reader that
//! stops reading stops the hive, never makes it buffer.
//!
//! The ways it can end are kept apart: the log ended; the hive said why it
//! could not (no such agent, Docker down); nobody listens (the hive is
//! offline); or the hive fell silent, which is *unknown*, never an empty
//! log.

use std::time::Duration;

use futures_util::StreamExt;
use swarm_queue_client::payload::{
    LogFrame, LogLine, LogsAck, LogsRequest, LOG_ACK_TIMEOUT_SECS, LOG_HEARTBEAT_SECS,
};
use swarm_queue_client::subjects::{fresh_deploy_answer, logs_ack_subject, HiveSubjects};
use swarm_queue_client::{encode, ensure_connected, HiveName};

/// How long the first frame may take: the hive opens Docker's log first.
pub const FIRST_FRAME_WAIT: Duration = Duration::from_secs(10);

/// How long a stream may be silent once it runs: a follow beats every
/// [`LOG_HEARTBEAT_SECS`], and a hive gives up on an unacknowledged frame
/// after [`LOG_ACK_TIMEOUT_SECS`]; this is past both.
pub const SILENCE: Duration = Duration::from_secs(3 * LOG_HEARTBEAT_SECS + LOG_ACK_TIMEOUT_SECS);

/// Why a log stream did not end with the end of the log.
#[derive(Debug, thiserror::Error)]
pub enum LogsError {
    #[error("hive {hive} is offline: nothing listens on its logs subject")]
    NoResponders { hive: HiveName },
    #[error("hive {hive}: {error}")]
    Refused { hive: HiveName, error: String },
    #[error(
        "no frame from hive {hive} for {waited_ms} ms after frame {after}: \
         the hive or the connection went away, the rest is unknown"
    )]
    Silent {
        hive: HiveName,
        after: u64,
        waited_ms: u128,
    },
    #[error("hive {hive} sent frame {got} where {want} was due; stopped, the rest is unknown")]
    Gap { hive: HiveName, got: u64, want: u64 },
    #[error("hive {hive} sent a frame that does not decode: {reason}")]
    Undecodable { hive: HiveName, reason: String },
    #[error("cannot ask hive {hive} for logs: {reason}")]
    Nats { hive: HiveName, reason: String },
}

/// Ask `hive` for `request` and hand each frame's lines to `lines` as they
/// come; `Ok` when the log ended (a plain read at its end, a follow when
/// the container went).
pub async fn stream(
    client: &async_nats::Client,
    hive: &HiveName,
    request: &LogsRequest,
    mut lines: impl FnMut(&[LogLine]),
) -> Result<(), LogsError> {
    stream_to(client, hive, request, |batch| {
        lines(&batch);
        std::future::ready(true)
    })
    .await
}

/// [`stream`] into an asynchronous reader: each frame's lines are handed
/// to `take` and acknowledged only once it is done with them, so a slow
/// reader slows the hive and never makes anyone buffer. `take` answering
/// `false` (its reader went away) ends the stream at once, `Ok`.
pub async fn stream_to<F, Fut>(
    client: &async_nats::Client,
    hive: &HiveName,
    request: &LogsRequest,
    mut take: F,
) -> Result<(), LogsError>
where
    F: FnMut(Vec<LogLine>) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let nats = |reason: String| LogsError::Nats {
        hive: hive.clone(),
        reason,
    };
    ensure_connected(client).map_err(|e| nats(e.to_string()))?;
    let payload = encode(request).map_err(|e| nats(e.to_string()))?;
    let reply = fresh_deploy_answer(client, hive);
    let token = reply.rsplit('.').next().unwrap_or_default().to_string();
    let mut frames = client
        .subscribe(reply.clone())
        .await
        .map_err(|e| nats(e.to_string()))?;
    client
        .publish_with_reply(HiveSubjects::new(hive).logs_request, reply, payload.into())
        .await
        .map_err(|e| nats(e.to_string()))?;
    let acks = logs_ack_subject(hive, &token);
    let mut want = 1;
    loop {
        let frame = next_frame(&mut frames, hive, want).await?;
        want += 1;
        let LogFrame {
            seq,
            lines,
            end,
            error,
        } = frame;
        if !take(lines).await {
            return Ok(());
        }
        if end {
            let _ = frames.unsubscribe().await;
            return match error {
                Some(error) => Err(LogsError::Refused {
                    hive: hive.clone(),
                    error,
                }),
                None => Ok(()),
            };
        }
        let ack = LogsAck { seq }.encode();
        client
            .publish(acks.clone(), ack.into())
            .await
            .map_err(|e| nats(e.to_string()))?;
    }
}

/// Frame number `want` of `hive`'s stream, or why it did not come.
async fn next_frame(
    frames: &mut async_nats::Subscriber,
    hive: &HiveName,
    want: u64,
) -> Result<LogFrame, LogsError> {
    let wait = if want == 1 { FIRST_FRAME_WAIT } else { SILENCE };
    let msg = match tokio::time::timeout(wait, frames.next()).await {
        Ok(Some(msg)) => msg,
        Ok(None) => {
            return Err(LogsError::Nats {
                hive: hive.clone(),
                reason: "the subscription ended".into(),
            })
        }
        Err(_) => {
            return Err(LogsError::Silent {
                hive: hive.clone(),
                after: want - 1,
                waited_ms: wait.as_millis(),
            })
        }
    };
    if msg.status == Some(async_nats::StatusCode::NO_RESPONDERS) {
        return Err(LogsError::NoResponders { hive: hive.clone() });
    }
    let frame = LogFrame::decode(&msg.payload).map_err(|e| LogsError::Undecodable {
        hive: hive.clone(),
        reason: e.to_string(),
    })?;
    if frame.seq != want {
        return Err(LogsError::Gap {
            hive: hive.clone(),
            got: frame.seq,
            want,
        });
    }
    Ok(frame)
}
