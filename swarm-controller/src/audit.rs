//! The audit trail: every operator verb leaves one event in
//! `hyperhive-events` (`hyperhive.events.audit.<verb>`), naming who ran it,
//! what it touched, and how it ended.
//!
//! The stream is made (or its limits updated) here, with the `[events]`
//! limits of the config. Each event is published through JetStream with a
//! `Nats-Msg-Id` of its own, so a publish retried after a lost ack is
//! stored once. An event that cannot be stored is said on stderr: the
//! action itself has already happened and is not undone.

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use async_nats::HeaderMap;
use swarm_queue_client::event_stream::{
    audit_subject, Event, EventsSettings, EVENTS_STREAM, EVENTS_SUBJECTS,
};

/// Who runs this process: the login, the host, and the controller's
/// instance, for the audit trail and a maintenance hold's `by`.
pub fn identity() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "unknown".into());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "unknown-host".into());
    format!("{user}@{host} (controller {})", instance_id())
}

/// A unique id for this controller process, recorded as a rollout's driver.
pub fn instance_id() -> String {
    format!(
        "c{}-{}",
        std::process::id(),
        crate::age::unix_ms(time::OffsetDateTime::now_utc())
    )
}

/// The stream's config for `settings`.
pub fn stream_config(settings: &EventsSettings) -> stream::Config {
    stream::Config {
        name: EVENTS_STREAM.to_string(),
        description: Some("hyperhive: agents' lifecycle and operators' actions".into()),
        subjects: vec![EVENTS_SUBJECTS.to_string()],
        max_age: Duration::from_secs(settings.max_age_secs),
        max_bytes: settings.max_bytes.min(i64::MAX as u64) as i64,
        discard: stream::DiscardPolicy::Old,
        storage: stream::StorageType::File,
        max_message_size: swarm_queue_client::event_stream::MAX_EVENT_BYTES as i32,
        duplicate_window: Duration::from_secs(120),
        num_replicas: settings.replicas,
        ..Default::default()
    }
}

/// Open the events stream, creating it or bringing its limits and
/// replicas to `settings`.
pub async fn open(
    js: &jetstream::Context,
    settings: &EventsSettings,
) -> Result<stream::Stream, String> {
    let wanted = stream_config(settings);
    match js.get_stream(EVENTS_STREAM).await {
        Ok(mut s) => {
            let have = s.info().await.map_err(|e| e.to_string())?.config.clone();
            let limits = (wanted.max_age, wanted.max_bytes, wanted.num_replicas);
            if (have.max_age, have.max_bytes, have.num_replicas) != limits {
                let mut changed = have;
                changed.max_age = wanted.max_age;
                changed.max_bytes = wanted.max_bytes;
                changed.num_replicas = wanted.num_replicas;
                js.update_stream(changed)
                    .await
                    .map_err(|e| format!("cannot update {EVENTS_STREAM}'s limits: {e}"))?;
            }
            Ok(s)
        }
        Err(_) => js
            .get_or_create_stream(wanted)
            .await
            .map_err(|e| format!("cannot create {EVENTS_STREAM}: {e}")),
    }
}

/// Record `event` (its `by` set to [`identity`]) under
/// `hyperhive.events.audit.<kind>`; a failure is said on stderr.
pub async fn record(client: &async_nats::Client, settings: &EventsSettings, mut event: Event) {
    event.by = Some(identity());
    let id = format!(
        "audit-{}-{}",
        instance_id(),
        time::OffsetDateTime::now_utc().unix_timestamp_nanos()
    );
    if let Err(e) = publish(client, settings, &event, &id).await {
        eprintln!(
            "swarm-controller: audit event {} not recorded: {e}",
            event.kind
        );
    }
}

/// Publish `event` once (`id` is its `Nats-Msg-Id`: the stream stores one
/// of each id within its duplicate window, however often it is sent).
pub async fn publish(
    client: &async_nats::Client,
    settings: &EventsSettings,
    event: &Event,
    id: &str,
) -> Result<(), String> {
    let js = jetstream::new(client.clone());
    open(&js, settings).await?;
    let subject = audit_subject(&event.kind);
    let payload = bytes::Bytes::from(event.encode());
    let mut last = String::new();
    for attempt in 1..=3 {
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", id);
        let acked = match js
            .publish_with_headers(subject.clone(), headers, payload.clone())
            .await
        {
            Ok(ack) => ack.await.map(drop).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match acked {
            Ok(()) => return Ok(()),
            Err(e) => last = e,
        }
        if attempt < 3 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Err(last)
}
