//! The status publisher: puts this hive's `HiveStatus` under its own key in
//! `hyperhive-status`.
//!
//! Publish first, then wait. It publishes again when the interval passes,
//! when what is published changes (after a successful publish only, so a
//! NATS outage does not turn into a retry storm; after a failed one only
//! when the seen or converged revision changes, `StatusBoard::revisions_changed`,
//! which is rare and is what the swarm waits for), and right after every
//! reconnect. A put that failed while connected (no ack within
//! [`PUBLISH_TIMEOUT`]: the stream had no leader, during an election; or
//! no stream answered: a leaf node's link down) is tried again after
//! [`RETRY_FIRST`], doubling up to the interval ([`wait_after`]): waiting a
//! whole interval (60 s by default) would leave the swarm without this
//! hive's status, its converged revision included, long after the stream
//! is back. Disconnected, it waits for the reconnect (or the interval).
//! After [`PUBLISH_FAILURES_BEFORE_WARNING`] failures in a row it
//! raises a local warning; the first success clears it, and tells the
//! wanted task the buckets answer again (`StatusBoard::buckets_back`). On
//! shutdown it publishes one last status saying `stopped`.
//!
//! Each wait (the interval, a retry's backoff) is spread by the
//! connection's [`Jitter`](swarm_queue_client::Jitter) (the hive's
//! `jitter_percent`, ±20 % by default), so a fleet that reconnected at one
//! instant does not publish in lockstep ever after.
//!
//! The payload carries no timestamp: readers take freshness from the KV
//! entry's own time.
//!
//! [`PUBLISH_FAILURES_BEFORE_WARNING`]: crate::status::PUBLISH_FAILURES_BEFORE_WARNING

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use swarm_queue_client::buckets::create_bucket;
use swarm_queue_client::direct::{put_own_key, OwnKey, PutOwnError};
use swarm_queue_client::{
    encode_pretty, ensure_connected, Bucket, BucketSettings, Connection, HiveName, Level,
};

use crate::shutdown::Shutdown;
use crate::status::{keys, StatusBoard};

/// Time allowed for one publish (the put and its ack). An ack takes
/// milliseconds (p99 well under 0.5 s at 1,000 hives on one server,
/// docs/benchmarks-scale.md); a put unanswered for a second was dropped by
/// a stream without a leader, and the retry is what gets through.
pub const PUBLISH_TIMEOUT: Duration = Duration::from_secs(1);
/// The first retry after a failed put while connected; each further one
/// waits twice as long, up to the publish interval.
pub const RETRY_FIRST: Duration = Duration::from_millis(250);
/// Shortest gap between two publishes triggered by changes.
const MIN_CHANGE_GAP: Duration = Duration::from_millis(100);

pub struct PublisherDeps {
    pub nats: Connection,
    pub board: Arc<StatusBoard>,
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
            self.deps.board.raise(
                keys::NATS_UNREACHABLE,
                Level::Warn,
                format!(
                    "NATS at {} is configured but unreachable ({}); agents keep running, reconnecting",
                    self.deps.nats.servers, e.state
                ),
            );
            return Err(e.into());
        }
        self.deps.board.clear(keys::NATS_UNREACHABLE);
        // A JetStream publish to its own key, no stream info first: a hive
        // may not ask for it (it lists every key of a bucket). When the
        // bucket is missing, try to create it once (it works only where
        // hives are not limited to their own keys) and put again.
        let attempt = async {
            let bytes = encode_pretty(&self.deps.board.published_status())?;
            let own = OwnKey {
                bucket: Bucket::Status,
                key: self.deps.hive.as_str(),
                domain: self.deps.nats.jetstream_domain.as_deref(),
            };
            match put_own_key(&self.js, own, bytes.clone().into()).await {
                Err(missing @ PutOwnError::BucketMissing { .. }) => {
                    if let Err(e) = create_bucket(&self.js, Bucket::Status, &self.deps.bucket).await
                    {
                        tracing::debug!(error = %crate::error_chain(&e), "cannot create the status bucket");
                        return Err(missing.into());
                    }
                    Ok(put_own_key(&self.js, own, bytes.into()).await?)
                }
                other => Ok(other?),
            }
        };
        match tokio::time::timeout(PUBLISH_TIMEOUT, attempt).await {
            Ok(r) => r,
            Err(_) => Err(PublishError::Timeout(PUBLISH_TIMEOUT)),
        }
    }

    async fn publish_and_record(&mut self) -> Outcome {
        match self.publish().await {
            Ok(revision) => {
                tracing::debug!(hive = %self.deps.hive, revision, "status published");
                self.deps.board.publish_succeeded();
                Outcome::Published
            }
            Err(e) => {
                let msg = crate::error_chain(&e);
                tracing::warn!(hive = %self.deps.hive, error = %msg, "status publish failed");
                self.deps.board.publish_failed(&msg);
                match e {
                    PublishError::NotConnected(_) => Outcome::Disconnected,
                    _ => Outcome::Failed,
                }
            }
        }
    }
}

/// How one publish went, as far as the next one is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Published,
    /// Not connected: the reconnect is the signal to try again.
    Disconnected,
    /// Connected, but the put got no ack (or an error).
    Failed,
}

/// The longest wait before the next publish after `outcome`, and the
/// backoff for the failure after that. `backoff` is the wait for a
/// [`Outcome::Failed`]; it doubles up to `interval` and starts again at
/// [`RETRY_FIRST`] after a success. A reconnect ends any wait early.
pub fn wait_after(outcome: Outcome, backoff: Duration, interval: Duration) -> (Duration, Duration) {
    match outcome {
        Outcome::Published => (interval, RETRY_FIRST),
        Outcome::Disconnected => (interval, backoff),
        Outcome::Failed => (backoff.min(interval), (backoff * 2).min(interval)),
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
    let board = deps.board.clone();
    let js = deps.nats.jetstream();
    let mut p = Publisher { deps, js };
    let mut backoff = RETRY_FIRST;
    let mut revisions = board.revisions_changed.subscribe();
    loop {
        // What this publish carries is what the next revision change is
        // measured against.
        revisions.mark_unchanged();
        let outcome = p.publish_and_record().await;
        let (next, later) = wait_after(outcome, backoff, interval);
        backoff = later;
        let wait = tokio::time::sleep(p.deps.nats.jitter.spread(next));
        tokio::pin!(wait);
        if outcome == Outcome::Published {
            // Only listen for changes after a success; after a failure the
            // next try waits for the interval or a reconnect.
            tokio::select! {
                // All branches are cancel-safe: sleep, Notify::notified and
                // watch::changed can be dropped and re-created freely.
                _ = shutdown.wait() => break,
                _ = &mut wait => {}
                _ = board.changed.notified() => {
                    tokio::time::sleep(MIN_CHANGE_GAP).await;
                }
                _ = connects.changed() => {}
            }
        } else {
            tokio::select! {
                // Cancel-safe as above; watch::Receiver::changed too.
                _ = shutdown.wait() => break,
                _ = &mut wait => {}
                _ = connects.changed() => {}
                // A new seen or converged revision is worth a try at once:
                // the wanted task just read the declaration, so the buckets
                // likely answer again. Rare, so no storm while they do not.
                _ = revisions.changed() => {
                    tokio::time::sleep(MIN_CHANGE_GAP).await;
                }
            }
        }
    }
    board.set_stopping();
    if p.publish_and_record().await == Outcome::Published {
        tracing::info!(hive = %p.deps.hive, "published final status: stopped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_puts_retry_soon_and_back_off_to_the_interval() {
        let interval = Duration::from_secs(60);
        let ms = |n| Duration::from_millis(n);
        let mut backoff = RETRY_FIRST;
        let mut waits = Vec::new();
        for _ in 0..12 {
            let (wait, next) = wait_after(Outcome::Failed, backoff, interval);
            waits.push(wait.as_millis());
            backoff = next;
        }
        assert_eq!(
            waits,
            [250, 500, 1000, 2000, 4000, 8000, 16000, 32000, 60000, 60000, 60000, 60000]
        );
        // Disconnected: wait for the reconnect (or the interval), and keep
        // the backoff where it was.
        assert_eq!(
            wait_after(Outcome::Disconnected, ms(4000), interval),
            (interval, ms(4000))
        );
        // A success starts the backoff again.
        assert_eq!(
            wait_after(Outcome::Published, ms(32000), interval),
            (interval, RETRY_FIRST)
        );
        // An interval shorter than the first retry caps it.
        assert_eq!(
            wait_after(Outcome::Failed, RETRY_FIRST, ms(100)),
            (ms(100), ms(100))
        );
    }
}
