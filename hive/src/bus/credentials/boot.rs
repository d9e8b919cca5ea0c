//! The boot delivery task: one NATS session after another, each holding
//! the credential doorbell subscription, delivering the declared
//! credentials at every (re)connect, declaration change and repull, and
//! each credential whose key's doorbell rings.

use std::sync::Arc;
use std::time::Duration;

use swarm_queue_client::subjects::parse_credential_key;
use swarm_queue_client::HiveName;
use tokio::time::Instant;

use super::{Credentials, DeliverError, Delivered, Deliverer};
use crate::backoff::Backoff;

/// What the delivery task needs.
#[derive(Clone)]
pub struct BootDeps {
    pub nats: swarm_queue_client::Connection,
    pub hive: HiveName,
    pub board: Arc<crate::status::StatusBoard>,
    pub credentials: Credentials,
    /// The declaration in force: which keys to read at boot.
    pub wanted: crate::agents::declared::WantedRx,
}

/// Deliver the declared credentials whenever NATS (re)connects, the
/// declaration changes, or [`crate::bus::wanted::REPULL_EVERY`] passes (spread
/// by the connection's jitter, as the wanted task's pull); and each
/// credential whose key's doorbell rings (`$KV.hyperhive-credentials.<hive>.>`,
/// a core-NATS subscription: no consumer).
pub async fn run_boot_delivery(deps: BootDeps, mut shutdown: crate::shutdown::Shutdown) {
    let deliverer = deps.credentials.deliverer().await;
    let mut connects = deps.nats.connects.clone();
    let mut wanted = deps.wanted.clone();
    let subject = swarm_queue_client::Bucket::Credentials.key_subject(
        &swarm_queue_client::subjects::credential_prefix_filter(&deps.hive),
    );
    let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(60));
    loop {
        if !shutdown.until_connected(&mut connects).await {
            return;
        }
        let mut doorbell = match deps.nats.client.subscribe(subject.clone()).await {
            Ok(s) => s,
            Err(e) => {
                let wait = backoff.next_wait();
                tracing::warn!(hive = %deps.hive, %subject, error = %e, retry_in = ?wait, "cannot subscribe to the credential doorbell");
                if !shutdown.sleep(wait).await {
                    return;
                }
                continue;
            }
        };
        backoff.reset();
        let session = Session {
            deliverer: &deliverer,
            deps: &deps,
            missing: std::sync::atomic::AtomicBool::new(false),
        };
        let end = session
            .run(&mut doorbell, &mut connects, &mut wanted, &mut shutdown)
            .await;
        if end.is_none() {
            return;
        }
    }
}

/// What one doorbell's read did.
struct Rang {
    /// When a confirming read is due.
    confirm_at: Option<Instant>,
    /// Whether it delivered a new revision (or there was nothing to read).
    fresh: bool,
    /// Whether the bucket answered without a failure.
    answered: bool,
}

struct Session<'a> {
    deliverer: &'a Deliverer,
    deps: &'a BootDeps,
    /// Whether the last read found the bucket missing.
    missing: std::sync::atomic::AtomicBool,
}

impl Session<'_> {
    /// Until shutdown (`None`) or a reconnect (`Some(())`).
    async fn run(
        &self,
        doorbell: &mut async_nats::Subscriber,
        connects: &mut tokio::sync::watch::Receiver<u64>,
        wanted: &mut crate::agents::declared::WantedRx,
        shutdown: &mut crate::shutdown::Shutdown,
    ) -> Option<()> {
        use futures_util::StreamExt;
        let mut confirm_at = self.pass().await;
        if self.missing.load(std::sync::atomic::Ordering::Relaxed) {
            // As at every start: make it where this identity may.
            let js = self.deps.nats.jetstream();
            let bucket = swarm_queue_client::Bucket::Credentials;
            let settings = self.deps.credentials.bucket_settings();
            match swarm_queue_client::buckets::create_bucket(&js, bucket, &settings).await {
                Ok(()) => confirm_at = self.pass().await,
                Err(e) => {
                    tracing::debug!(error = %crate::error_chain(&e), "cannot create the credentials bucket")
                }
            }
        }
        let jitter = &self.deps.nats.jitter;
        let every = crate::bus::wanted::repull_every(&self.deps.nats);
        let repull = tokio::time::sleep(jitter.spread(every));
        tokio::pin!(repull);
        // A doorbell whose read showed nothing new is read again (the
        // stream may not have stored the put yet when the doorbell rang).
        let mut recheck: Option<(Instant, usize, async_nats::Subject)> = None;
        loop {
            let confirm = match (confirm_at, recheck.as_ref().map(|r| r.0)) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            tokio::select! {
                // Cancel-safe: each branch can be dropped between polls
                // without loss (a message stays queued in the subscriber).
                _ = shutdown.wait() => return None,
                _ = connects.changed() => return Some(()),
                _ = wanted.changed() => confirm_at = self.pass().await,
                _ = &mut repull => {
                    repull.as_mut().reset(Instant::now() + jitter.spread(every));
                    confirm_at = self.pass().await;
                }
                _ = tokio::time::sleep_until(confirm.unwrap_or_else(Instant::now)), if confirm.is_some() => {
                    match recheck.take() {
                        Some((at, tries, subject)) if at <= Instant::now() => {
                            recheck = self.ring_and_plan(&subject, tries, &mut confirm_at).await;
                        }
                        other => {
                            recheck = other;
                            confirm_at = self.pass().await;
                        }
                    }
                }
                ring = doorbell.next() => match ring {
                    None => return Some(()),
                    Some(msg) => recheck = self.ring_and_plan(&msg.subject, 0, &mut confirm_at).await,
                }
            }
        }
    }

    /// One delivery pass over the declared keys; returns when a confirming
    /// pass is due.
    async fn pass(&self) -> Option<Instant> {
        let declaration = match self.deps.wanted.borrow().clone() {
            Some(w) => w.declaration.clone(),
            None => return None,
        };
        let result = self.deliverer.deliver_declared(&declaration).await;
        self.report(result)
    }

    /// Ring, then plan a re-read when nothing new showed
    /// ([`crate::bus::wanted::RECHECK_AFTER`]); a zero step is read at
    /// once, as the wanted doorbell's are, unless the read failed.
    async fn ring_and_plan(
        &self,
        subject: &async_nats::Subject,
        mut tries: usize,
        confirm_at: &mut Option<Instant>,
    ) -> Option<(Instant, usize, async_nats::Subject)> {
        loop {
            let rang = self.ring(subject).await;
            if rang.confirm_at.is_some() {
                *confirm_at = rang.confirm_at;
            }
            match crate::bus::wanted::RECHECK_AFTER.get(tries) {
                Some(after) if after.is_zero() && !rang.fresh && rang.answered => tries += 1,
                Some(after) if !rang.fresh => {
                    return Some((Instant::now() + *after, tries + 1, subject.clone()))
                }
                _ => return None,
            }
        }
    }

    /// A doorbell on `subject`: deliver that one key.
    async fn ring(&self, subject: &str) -> Rang {
        let done = Rang {
            confirm_at: None,
            fresh: true,
            answered: true,
        };
        let prefix = swarm_queue_client::Bucket::Credentials.key_subject("");
        let Some(key) = subject.strip_prefix(&prefix) else {
            return done;
        };
        let (hive, agent, account) = match parse_credential_key(key) {
            Ok(parts) => parts,
            Err(e) => {
                tracing::warn!(%key, error = %e, "ignoring a credential doorbell with a bad key name");
                return done;
            }
        };
        if hive != self.deps.hive {
            return done;
        }
        let result = match self.deliverer.deliver(&agent, &account).await {
            Ok(d) => Ok((vec![d], Vec::new())),
            // Not stored yet, maybe: the recheck reads it again.
            Err(DeliverError::Missing { .. }) => Ok((Vec::new(), Vec::new())),
            Err(e) if e.bucket_missing() || matches!(e, DeliverError::NotConnected(_)) => Err(e),
            Err(e) => Ok((Vec::new(), vec![e])),
        };
        let fresh = matches!(&result, Ok((d, _)) if d.iter().any(|d| matches!(d, Delivered::Written { fresh: true, .. } | Delivered::Removed { existed: true, .. })));
        let answered = matches!(&result, Ok((_, failures)) if failures.is_empty());
        Rang {
            confirm_at: self.report(result),
            fresh,
            answered,
        }
    }

    fn report(
        &self,
        result: Result<(Vec<Delivered>, Vec<DeliverError>), DeliverError>,
    ) -> Option<Instant> {
        use crate::status::keys;
        use swarm_queue_client::Level;
        let board = &self.deps.board;
        self.missing.store(
            matches!(&result, Err(e) if e.bucket_missing()),
            std::sync::atomic::Ordering::Relaxed,
        );
        let (done, failures) = match result {
            Ok(r) => r,
            Err(e) if e.bucket_missing() => {
                let msg = crate::error_chain(&e);
                tracing::warn!(hive = %self.deps.hive, error = %msg, "credentials bucket missing");
                board.raise(
                    keys::CREDENTIALS_BUCKET,
                    Level::Warn,
                    format!("{msg}; credentials delivered before stay; the hive reads its keys again when the bucket answers"),
                );
                return None;
            }
            Err(e) => {
                tracing::warn!(hive = %self.deps.hive, error = %crate::error_chain(&e), "credential delivery failed; retrying on the next pass");
                return None;
            }
        };
        board.clear(keys::CREDENTIALS_BUCKET);
        self.deliverer.publish_refusals(board);
        // A refusal has its own warning, naming the agent.
        let total = done.len() + failures.len();
        let failures: Vec<DeliverError> = failures.into_iter().filter(|e| !e.refused()).collect();
        for d in &done {
            if let Delivered::Written {
                path,
                reset_from: Some(last),
                ..
            } = d
            {
                // Info: handled (the new value was written), so the hive is
                // not degraded by it; the note says what happened.
                board.raise(
                    keys::CREDENTIALS_RESET,
                    Level::Info,
                    format!(
                        "the credentials bucket {} was made again (or its store lost): a key went back from revision {last}; \
                         the hive took the new value as the truth and wrote {}",
                        swarm_queue_client::Bucket::Credentials.name(),
                        path.display()
                    ),
                );
            }
        }
        if failures.is_empty() {
            board.clear(keys::CREDENTIALS);
        } else {
            let first = crate::error_chain(&failures[0]);
            board.raise(
                keys::CREDENTIALS,
                Level::Warn,
                format!(
                    "{} of {total} credentials could not be delivered (first: {first})",
                    failures.len(),
                ),
            );
        }
        done.iter()
            .any(|d| matches!(d, Delivered::Unconfirmed { .. }))
            .then(|| Instant::now() + crate::bus::revision::CONFIRM_AFTER)
    }
}
