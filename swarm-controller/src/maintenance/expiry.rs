//! An expired hold ends by itself, and says so: `serve` records one
//! `maintenance_expired` event in `hyperhive-events` for each hold whose end
//! (its server timestamp plus its TTL) has passed, then removes the hold by
//! compare-and-set on the revision it read (the event's
//! `Nats-Msg-Id` names the hive and the hold's revision, so two
//! controllers, or one that retries, store it once). It wakes at the
//! earliest end it knows of, when a hold is set or changed, and at least
//! every minute.

use std::time::Duration;

use async_nats::jetstream::kv;
use futures_util::StreamExt;
use swarm_queue_client::event_stream::{Event, EventsSettings};
use swarm_queue_client::HiveName;
use time::OffsetDateTime;
use tokio::sync::watch;

use super::store;
use super::HoldEntry;

/// The longest sleep between looks.
const MAX_SLEEP: Duration = Duration::from_secs(60);

/// End expired holds until `shutdown`.
pub async fn run(
    client: async_nats::Client,
    holds: kv::Store,
    events: EventsSettings,
    mut shutdown: watch::Receiver<bool>,
) {
    // A hold set or changed is looked at at once (its end may come before
    // the next wake).
    let mut changes = None;
    loop {
        if changes.is_none() {
            changes = holds.watch_all().await.ok();
        }
        let next = match store::read_all(&holds).await {
            Ok(all) => sweep(&client, &holds, &events, all).await,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the maintenance holds");
                None
            }
        };
        let now = OffsetDateTime::now_utc();
        let sleep = next
            .map(|at| Duration::try_from(at - now).unwrap_or(Duration::ZERO))
            .unwrap_or(MAX_SLEEP)
            .min(MAX_SLEEP)
            + Duration::from_millis(50);
        let changed = async {
            match changes.as_mut() {
                Some(w) => w.next().await.is_some(),
                None => std::future::pending().await,
            }
        };
        let lost = tokio::select! {
            // All cancel-safe: a sleep, a watch receiver, a KV watcher's next.
            _ = tokio::time::sleep(sleep) => false,
            alive = changed => !alive,
            _ = shutdown.wait_for(|s| *s) => return,
        };
        if lost {
            changes = None;
        }
    }
}

/// End every hold of `all` that has expired; the earliest end still to come.
async fn sweep(
    client: &async_nats::Client,
    holds: &kv::Store,
    events: &EventsSettings,
    all: std::collections::BTreeMap<String, HoldEntry>,
) -> Option<OffsetDateTime> {
    let now = OffsetDateTime::now_utc();
    let mut next: Option<OffsetDateTime> = None;
    for (key, entry) in all {
        let (Some(until), Ok(hive)) = (entry.until(), HiveName::new(&key)) else {
            continue;
        };
        if until > now {
            next = Some(next.map_or(until, |n| n.min(until)));
            continue;
        }
        let hold = entry.hold.as_ref().ok();
        let mut event = Event::new("maintenance_expired")
            .touching(std::slice::from_ref(&hive))
            .said(format!(
                "the hold set by {} for {} s ({}) ended at {until}",
                hold.map_or("?", |h| h.by.as_str()),
                hold.map_or(0, |h| h.ttl_secs),
                hold.map_or("", |h| h.reason.as_str()),
            ));
        event.by = Some(crate::audit::identity());
        event.revision = Some(entry.revision);
        let id = format!("maintenance-expired-{hive}-{}", entry.revision);
        // The event first, then the removal: a hold removed without its
        // event would end silently; an event stored twice is one (its id).
        if let Err(e) = crate::audit::publish(client, events, &event, &id).await {
            tracing::warn!(%hive, error = %e, "an expired maintenance hold is kept until its event is recorded");
            continue;
        }
        let ended = holds
            .delete_expect_revision(&key, Some(entry.revision))
            .await;
        // An error: changed since it was read (extended, ended by hand),
        // and the next look judges what is there now.
        if ended.is_ok() {
            tracing::info!(%hive, "maintenance hold expired and removed");
        }
    }
    next
}
