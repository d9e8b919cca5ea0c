//! The status publisher: puts this hive's `Readiness` under its own key in
//! `hyperhive-status`.
//!
//! Publish first, then wait. It publishes again when the interval passes,
//! when what is published changes (after a successful publish only, so a
//! NATS outage does not turn into a retry storm), and right after every
//! reconnect. After [`PUBLISH_FAILURES_BEFORE_WARNING`] failures in a row it
//! raises a local warning; the first success clears it. On shutdown it
//! publishes one last status saying `stopped`.
//!
//! The payload carries no timestamp: readers take freshness from the KV
//! entry's own time.
//!
//! [`PUBLISH_FAILURES_BEFORE_WARNING`]: crate::readiness::PUBLISH_FAILURES_BEFORE_WARNING

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use swarm_queue_client::buckets::create_bucket;
use swarm_queue_client::direct::{put_own, PutOwnError};
use swarm_queue_client::{
    encode_pretty, ensure_connected, Bucket, BucketSettings, Connection, HiveName, Level,
};

use crate::readiness::{keys, Health};
use crate::shutdown::Shutdown;

/// Time allowed for one publish (the put and its ack).
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);
/// Shortest gap between two publishes triggered by changes.
const MIN_CHANGE_GAP: Duration = Duration::from_millis(100);

pub struct PublisherDeps {
    pub nats: Connection,
    pub health: Arc<Health>,
    pub hive: HiveName,
    pub interval: Duration,
    /// How the status bucket is made if it is missing and this identity
    /// may create it (no per-hive permissions).
    pub bucket: BucketSettings,
}

#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error(transparent)]
    NotConnected(#[from] swarm_queue_client::NotConnected),
    #[error(transparent)]
    Encode(#[from] swarm_queue_client::EncodeError),
    #[error(transparent)]
    Put(#[from] PutOwnError),
    #[error("timed out after {0:?}")]
    Timeout(Duration),
}

struct Publisher {
    deps: PublisherDeps,
    js: jetstream::Context,
}

impl Publisher {
    async fn publish(&mut self) -> Result<u64, PublishError> {
        let client = &self.deps.nats.client;
        if let Err(e) = ensure_connected(client) {
            self.deps.health.raise(
                keys::NATS_UNREACHABLE,
                Level::Warn,
                format!(
                    "NATS at {} is configured but unreachable ({}); agents keep running, reconnecting",
                    self.deps.nats.servers, e.state
                ),
            );
            return Err(e.into());
        }
        self.deps.health.clear(keys::NATS_UNREACHABLE);
        // A JetStream publish to its own key, no stream info first: a hive
        // may not ask for it (it lists every key of a bucket). When the
        // bucket is missing, try to create it once (it works only where
        // hives are not limited to their own keys) and put again.
        let attempt = async {
            let snapshot = self.deps.health.snapshot();
            let bytes = encode_pretty(&snapshot.readiness)?;
            let key = self.deps.hive.as_str();
            match put_own(&self.js, Bucket::Status, key, bytes.clone().into()).await {
                Err(missing @ PutOwnError::BucketMissing { .. }) => {
                    if let Err(e) = create_bucket(&self.js, Bucket::Status, &self.deps.bucket).await
                    {
                        tracing::debug!(error = %crate::error_chain(&e), "cannot create the status bucket");
                        return Err(missing.into());
                    }
                    Ok(put_own(&self.js, Bucket::Status, key, bytes.into()).await?)
                }
                other => Ok(other?),
            }
        };
        match tokio::time::timeout(PUBLISH_TIMEOUT, attempt).await {
            Ok(r) => r,
            Err(_) => Err(PublishError::Timeout(PUBLISH_TIMEOUT)),
        }
    }

    async fn publish_and_record(&mut self) -> bool {
        match self.publish().await {
            Ok(revision) => {
                tracing::debug!(hive = %self.deps.hive, revision, "status published");
                self.deps.health.publish_succeeded();
                true
            }
            Err(e) => {
                let msg = crate::error_chain(&e);
                tracing::warn!(hive = %self.deps.hive, error = %msg, "status publish failed");
                self.deps.health.publish_failed(&msg);
                false
            }
        }
    }
}

/// Run until shutdown, then publish a final `stopped` status.
pub async fn run(deps: PublisherDeps, mut shutdown: Shutdown) {
    let mut connects = deps.nats.connects.clone();
    // Give the first connect a moment, so a hive that starts with NATS up
    // does not report "unreachable" for the few milliseconds before it.
    let _ = tokio::time::timeout(Duration::from_secs(2), connects.wait_for(|n| *n > 0)).await;
    connects.mark_unchanged();
    let interval = deps.interval;
    let health = deps.health.clone();
    let js = jetstream::new(deps.nats.client.clone());
    let mut p = Publisher { deps, js };
    loop {
        let ok = p.publish_and_record().await;
        let wait = tokio::time::sleep(interval);
        tokio::pin!(wait);
        if ok {
            // Only listen for changes after a success; after a failure the
            // next try waits for the interval or a reconnect.
            tokio::select! {
                // All branches are cancel-safe: sleep, Notify::notified and
                // watch::changed can be dropped and re-created freely.
                _ = shutdown.wait() => break,
                _ = &mut wait => {}
                _ = health.changed.notified() => {
                    tokio::time::sleep(MIN_CHANGE_GAP).await;
                }
                _ = connects.changed() => {}
            }
        } else {
            tokio::select! {
                _ = shutdown.wait() => break,
                _ = &mut wait => {}
                _ = connects.changed() => {}
            }
        }
    }
    health.set_stopping();
    if p.publish_and_record().await {
        tracing::info!(hive = %p.deps.hive, "published final status: stopped");
    }
}
