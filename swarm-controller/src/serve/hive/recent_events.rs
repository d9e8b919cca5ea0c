//! The last N events under one subject filter of `hyperhive-events`,
//! without reading the stream from its start.
//!
//! JetStream delivers forwards only. What it does count cheaply is how
//! many messages under a filter lie from a sequence on (a consumer's
//! `num_pending`, given when the consumer is made). So the start of the
//! last N is found by halving the range of sequences, one count per step
//! (a pull consumer made and deleted, at most about 40 for a stream of
//! a million million messages), then only those N are read, as
//! `events --hive` reads (an ordered consumer from that sequence on).
//! The cost is the N messages plus a logarithm of the stream, never the
//! stream.

use std::time::Duration;

use async_nats::jetstream::consumer::{pull, push::OrderedConfig, AckPolicy, DeliverPolicy};
use async_nats::jetstream::context::GetStreamErrorKind;
use async_nats::jetstream::{self, stream};
use futures_util::StreamExt;
use serde::Serialize;
use swarm_queue_client::event_stream::{Event, EVENTS_STREAM};
use time::format_description::well_known::Rfc3339;

/// How long a counting consumer lives if its delete is lost.
const PROBE_INACTIVE: Duration = Duration::from_secs(30);
/// How long the read of the N may take.
const READ_WAIT: Duration = Duration::from_secs(10);

/// One stored event, as `events --json` prints it.
#[derive(Debug, Serialize)]
pub(super) struct Stored {
    /// When the server stored it (RFC 3339): no event carries a time.
    time: String,
    seq: u64,
    subject: String,
    event: Event,
}

/// What [`read`] found.
#[derive(Debug, Default)]
pub(super) struct Recent {
    /// The events, oldest first.
    pub events: Vec<Stored>,
    /// How many the stream holds under the filter.
    pub matched: u64,
    /// Why there are none, when the stream itself is missing.
    pub note: Option<String>,
}

/// The last `limit` events under `filter`, oldest first.
pub(super) async fn read(
    js: &jetstream::Context,
    filter: String,
    limit: usize,
) -> Result<Recent, String> {
    let mut events = match js.get_stream(EVENTS_STREAM).await {
        Ok(s) => s,
        Err(e) if is_missing(&e) => {
            return Ok(Recent {
                note: Some(format!("no {EVENTS_STREAM} stream yet: {e}")),
                ..Recent::default()
            })
        }
        Err(e) => return Err(format!("open {EVENTS_STREAM}: {e}")),
    };
    let state = events
        .info()
        .await
        .map_err(|e| e.to_string())?
        .state
        .clone();
    if state.messages == 0 {
        return Ok(Recent::default());
    }
    let first = state.first_sequence.max(1);
    let matched = pending_from(&events, &filter, first).await?;
    let start = if matched <= limit as u64 {
        first
    } else {
        last_start(&events, &filter, limit as u64, first, state.last_sequence).await?
    };
    let wanted = matched.min(limit as u64) as usize;
    let read = read_from(js, &events, filter, start, wanted);
    let events = tokio::time::timeout(READ_WAIT, read)
        .await
        .map_err(|_| format!("the read of {wanted} events took over {READ_WAIT:?}"))??;
    Ok(Recent {
        events,
        matched,
        note: None,
    })
}

fn is_missing(e: &jetstream::context::GetStreamError) -> bool {
    matches!(e.kind(), GetStreamErrorKind::JetStream(j)
        if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND)
}

/// The latest sequence from which at least `limit` messages match
/// (exactly `limit` do, since one sequence holds one message): the
/// count from `lo` is at least `limit`, which halving keeps true.
async fn last_start(
    events: &stream::Stream,
    filter: &str,
    limit: u64,
    mut lo: u64,
    mut hi: u64,
) -> Result<u64, String> {
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if pending_from(events, filter, mid).await? >= limit {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Ok(lo)
}

/// How many messages under `filter` lie from sequence `start` on: a pull
/// consumer's count, read from its creation, then the consumer deleted
/// (nothing is delivered).
async fn pending_from(events: &stream::Stream, filter: &str, start: u64) -> Result<u64, String> {
    let consumer = events
        .create_consumer(pull::Config {
            filter_subject: filter.to_string(),
            deliver_policy: DeliverPolicy::ByStartSequence {
                start_sequence: start,
            },
            ack_policy: AckPolicy::None,
            inactive_threshold: PROBE_INACTIVE,
            memory_storage: true,
            ..Default::default()
        })
        .await
        .map_err(|e| format!("count the events from sequence {start}: {e}"))?;
    let info = consumer.cached_info();
    let pending = info.num_pending;
    if let Err(e) = events.delete_consumer(&info.name).await {
        tracing::debug!(error = %e, "a counting consumer is left to expire");
    }
    Ok(pending)
}

/// `count` messages under `filter` from sequence `start` on.
async fn read_from(
    js: &jetstream::Context,
    events: &stream::Stream,
    filter: String,
    start: u64,
    count: usize,
) -> Result<Vec<Stored>, String> {
    let mut out = Vec::with_capacity(count);
    if count == 0 {
        return Ok(out);
    }
    let consumer = events
        .create_consumer(OrderedConfig {
            deliver_subject: js.client().new_inbox(),
            filter_subject: filter,
            deliver_policy: DeliverPolicy::ByStartSequence {
                start_sequence: start,
            },
            ..Default::default()
        })
        .await
        .map_err(|e| e.to_string())?;
    let mut messages = consumer.messages().await.map_err(|e| e.to_string())?;
    while let Some(msg) = messages.next().await {
        let msg = msg.map_err(|e| e.to_string())?;
        let info = msg.info().map_err(|e| e.to_string())?;
        let (seq, left, at) = (info.stream_sequence, info.pending, info.published);
        if let Ok(event) = Event::decode(&msg.payload) {
            out.push(Stored {
                time: at.format(&Rfc3339).unwrap_or_default(),
                seq,
                subject: msg.subject.to_string(),
                event,
            });
        }
        if left == 0 || out.len() >= count {
            break;
        }
    }
    Ok(out)
}
