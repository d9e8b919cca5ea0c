//! The wanted-state task: this hive's key in `hyperhive-wanted`.
//!
//! The watch is a core-NATS subscription on the key's own subject
//! (`$KV.hyperhive-wanted.<hive>`) used as a doorbell: each message there
//! only triggers a direct get of the key, which is the truth (the stream may
//! have refused the put the doorbell announced, or the doorbell may be a
//! duplicate: either costs one read and changes nothing). So the server
//! holds no JetStream consumer for this hive. A doorbell only rings while
//! the hive listens, so the key is also read (`pull`) at start, after every
//! reconnect and every [`REPULL_EVERY`] ([`REPULL_EVERY_ACROSS_DOMAINS`] on
//! a leaf-node site, where doorbells cannot cross). The subscription is made before
//! the first pull, so a value written in between through the same server
//! rings it. Through another server of a cluster it may not: routes carry
//! the subscription's interest to the other servers a moment later, and a
//! put made there in that moment rings nothing (seen in `faults_cluster`:
//! a hive that read "no declaration" 17 ms before its first one was put
//! waited for the 60 s timer). So the key is read once more
//! [`SETTLE_REREAD`] after each session's first pull. A server that has
//! just started has the same gap the other way round: until its routes are
//! up it does not know of this subscription, and a put made through it
//! then rings nothing; no event tells the hive (async-nats does not pass on
//! the server's notices of a changed cluster), so the periodic pull reads
//! it. Two more reads
//! close the gaps a failover leaves: a read that failed is tried again
//! after [`READ_RETRY_FIRST`], doubling up to [`READ_RETRY_MAX`], until one
//! succeeds; and the key is read whenever the status publisher gets through
//! after failing (`StatusBoard::buckets_back`), because the buckets can be out of
//! reach while the connection stays up (a stream without a leader, a leaf
//! node's link to the hub down), and a doorbell rung meanwhile is lost.
//!
//! Every timed read but the doorbell's re-checks is spread by the
//! connection's [`Jitter`](swarm_queue_client::Jitter) (the hive's
//! `jitter_percent`, ±20 % by default): the periodic pull, the settle read
//! and the retries. A fleet reconnected by one server restart would
//! otherwise read in lockstep from then on.
//!
//! Revisions follow [`crate::bus::revision`]: a lower one than the last handled
//! means the bucket was made again; the hive warns (`wanted_reset`) and
//! takes it. While the bucket does not answer, a `wanted_bucket` warning
//! names it, and the declaration in force stays.
//!
//! Only a valid declaration moves anything: it is handed to the converger
//! through a latest-value channel and, once the converger has planned it,
//! saved to `<state>/wanted.json` (so the hive knows what is wanted while
//! NATS is away; see `saved.rs`). A
//! delete, a purge or an undecodable value is **not** a deletion order: it
//! changes nothing and raises a status warning naming the revision and
//! the reason.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use swarm_queue_client::buckets::create_bucket;
use swarm_queue_client::direct::{KeyEntry, KeyOp, KeyReader, ReadKeyError};
use swarm_queue_client::{
    decode, ensure_connected, Bucket, BucketSettings, Connection, Declaration, HiveName, Level,
};
use tokio::sync::watch;
use tokio::time::Instant;

mod saved;

use crate::agents::declared::{Wanted, WantedTx};
use crate::backoff::Backoff;
use crate::bus::revision::{judge, Seen, Suspect, Verdict, CONFIRM_AFTER};
use crate::shutdown::Shutdown;
use crate::status::{keys, StatusBoard};

/// Re-read the key this often even when the watch is quiet (each wait
/// spread by the connection's jitter).
pub const REPULL_EVERY: Duration = Duration::from_secs(60);
/// …and this often when the buckets are in another JetStream domain (a
/// hive on a leaf-node site): nats-server denies `$KV.>` on a leaf link
/// between two domains, so no doorbell reaches such a hive and this timer
/// is how a new declaration does.
pub const REPULL_EVERY_ACROSS_DOMAINS: Duration = Duration::from_secs(5);

/// How often a hive on `nats` re-reads its keys with no doorbell.
pub fn repull_every(nats: &Connection) -> Duration {
    match nats.jetstream_domain {
        Some(_) => REPULL_EVERY_ACROSS_DOMAINS,
        None => REPULL_EVERY,
    }
}
/// The second read of each session, after the subscription's interest has
/// had time to reach every server of a cluster (spread by the jitter: 0.8
/// to 1.2 s by default).
pub const SETTLE_REREAD: Duration = Duration::from_secs(1);
/// A failed read is tried again after this, then twice as late each time…
pub const READ_RETRY_FIRST: Duration = Duration::from_millis(250);
/// …up to this (a missing bucket is read again at this pace).
pub const READ_RETRY_MAX: Duration = Duration::from_secs(30);

impl Wanted {
    fn seen(&self) -> Seen {
        Seen {
            revision: self.revision,
            created: self
                .created_ns
                .and_then(|ns| time::OffsetDateTime::from_unix_timestamp_nanos(ns.into()).ok()),
        }
    }
}

pub use saved::{load_saved, save_each, saved_path, unless_older, SAVE_WAITS_AT_MOST};

/// After a doorbell whose read showed nothing new, read again after these
/// delays: the core-NATS message can reach the hive before the stream has
/// stored it, so the first read may still see the old value. A doorbell for
/// a refused put or a duplicate costs these few reads and changes nothing.
/// A zero step is read at once, after the last read's answer, not through
/// the timer: tokio's timer ticks by the millisecond, and each zero or
/// 0.25 ms step took 0.5 to 4 ms (1.5 on most) through it. On a busy
/// 2-core machine 5 to 14 of 1,000 declarations were read before they
/// were stored; the read right after found each (the converge bench, stop 45: those samples took
/// 0.65 to 1.3 ms from the put to the job queued, against 1.9 to 3.1 ms
/// with their first re-read on the timer, and 41 to 105 ms when it came
/// after 100 ms). The later steps are for a cluster, where a direct get
/// may be answered by a replica behind.
pub const RECHECK_AFTER: [Duration; 9] = [
    Duration::ZERO,
    Duration::ZERO,
    Duration::ZERO,
    Duration::ZERO,
    Duration::from_millis(1),
    Duration::from_millis(4),
    Duration::from_millis(20),
    Duration::from_millis(100),
    Duration::from_secs(1),
];

/// How long the `wanted_reset` warning stays after a bucket made again.
pub const RESET_WARNING_FOR: Duration = Duration::from_secs(600);

pub struct WantedDeps {
    pub nats: Connection,
    pub hive: HiveName,
    pub board: Arc<StatusBoard>,
    /// How the bucket is made if it is missing at start and this identity
    /// may create it (no per-hive permissions).
    pub bucket: BucketSettings,
    pub tx: WantedTx,
}

enum SessionEnd {
    Shutdown,
    Reconnected,
    Failed(String),
}

struct Session<'a> {
    deps: &'a WantedDeps,
    /// The last read acted on (valid or not).
    last: Option<Seen>,
    /// A lower revision waiting for its confirming read.
    suspect: Option<Suspect>,
    /// When a confirming read is due.
    confirm_at: Option<Instant>,
    /// When the `wanted_reset` warning was raised.
    reset_at: Option<Instant>,
    /// A re-read after a doorbell that showed nothing new, and how many
    /// are left ([`RECHECK_AFTER`]).
    recheck: Option<(Instant, usize)>,
    /// Whether the last read found the bucket missing.
    missing: bool,
    /// After a failed read: when the next is due, and the backoff it used.
    retry: Option<(Instant, Duration)>,
}

impl Session<'_> {
    fn current_revision(&self) -> Option<u64> {
        self.deps.tx.borrow().as_ref().map(|w| w.revision)
    }

    fn keeping(&self) -> String {
        match self.current_revision() {
            Some(r) => format!("keeping the declaration of revision {r}"),
            None => "nothing changes".to_string(),
        }
    }

    /// Read the key and act on what it holds; whether it held a revision
    /// not handled before. Never ends the session: a missing bucket is a
    /// warning, and the next doorbell or pull retries.
    async fn pull(&mut self, reader: &KeyReader, why: &str) -> bool {
        let hive = &self.deps.hive;
        let started = Instant::now();
        let read = reader.last(hive.as_str()).await;
        crate::stage!("read");
        tracing::debug!(%hive, why, took = ?started.elapsed(), ok = read.is_ok(), "declaration read");
        match read {
            Ok(found) => {
                self.missing = false;
                self.retry = None;
                self.deps.board.clear(keys::WANTED_BUCKET);
                match found {
                    Some(entry) => return self.handle(entry, Instant::now()),
                    None => tracing::debug!(%hive, why, "no declaration for this hive yet"),
                }
            }
            Err(e @ ReadKeyError::BucketMissing { .. }) => {
                self.missing = true;
                self.schedule_retry();
                tracing::warn!(%hive, why, error = %e, "wanted bucket missing");
                self.deps.board.raise(
                    keys::WANTED_BUCKET,
                    Level::Warn,
                    format!(
                        "{e}; {}; the hive reads its key again as soon as the bucket answers",
                        self.keeping()
                    ),
                );
            }
            Err(e) => {
                tracing::warn!(%hive, why, error = %crate::error_chain(&e), "reading the declaration failed");
                self.schedule_retry();
            }
        }
        false
    }

    fn schedule_retry(&mut self) {
        let backoff = self
            .retry
            .map_or(READ_RETRY_FIRST, |(_, b)| (b * 2).min(READ_RETRY_MAX));
        let wait = self.deps.nats.jitter.spread(backoff);
        self.retry = Some((Instant::now() + wait, backoff));
    }

    /// A doorbell rang: read, and if nothing new showed, read again later.
    async fn ring(&mut self, reader: &KeyReader, mut why: &str, mut tries: usize) {
        loop {
            let acted = self.pull(reader, why).await;
            let step = RECHECK_AFTER.get(tries).filter(|_| !acted);
            self.recheck = step.map(|after| (Instant::now() + *after, tries + 1));
            // A zero step is read at once, not through the timer (whose
            // ticks are a millisecond); a failed read waits for its retry.
            match step {
                Some(after) if after.is_zero() && self.retry.is_none() => {
                    tries += 1;
                    why = "recheck";
                }
                _ => return,
            }
        }
    }

    /// The next timed read: a confirmation, a doorbell's re-read or the
    /// retry of a failed read.
    fn next_read(&self) -> Option<Instant> {
        [
            self.confirm_at,
            self.recheck.map(|(at, _)| at),
            self.retry.map(|(at, _)| at),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    async fn timed_read(&mut self, reader: &KeyReader) {
        let now = Instant::now();
        if self.confirm_at.is_some_and(|t| t <= now) {
            self.confirm_at = None;
        }
        let why = match self.retry {
            Some((at, _)) if at <= now => "retry",
            _ => "confirm",
        };
        match self.recheck {
            Some((at, tries)) if at <= now => self.ring(reader, "recheck", tries).await,
            _ => {
                self.pull(reader, why).await;
            }
        }
    }

    fn handle(&mut self, entry: KeyEntry, now: Instant) -> bool {
        let read = Seen {
            revision: entry.revision,
            created: Some(entry.created),
        };
        let hive = &self.deps.hive;
        // The reset was handled when it was seen; its note stays a while
        // for the operator, then goes with any later read.
        if self
            .reset_at
            .is_some_and(|t| now.duration_since(t) >= RESET_WARNING_FOR)
        {
            self.deps.board.clear(keys::WANTED_RESET);
            self.reset_at = None;
        }
        match judge(self.last, self.suspect, read, now) {
            Verdict::Same => return false,
            Verdict::Confirm { last } => {
                if self.suspect.map(|s| s.revision) != Some(read.revision) {
                    self.suspect = Some(Suspect {
                        revision: read.revision,
                        first_seen: now,
                    });
                }
                self.confirm_at = Some(now + CONFIRM_AFTER);
                tracing::warn!(%hive, revision = read.revision, last, "declaration revision went back; reading again to confirm");
                return false;
            }
            Verdict::Reset { last } => {
                tracing::warn!(%hive, revision = read.revision, last, "the wanted bucket was made again; taking its value as the truth");
                // Info, not warn: the hive has handled it (it takes the new
                // value as the truth and converges on it), so it is neither
                // degraded nor kept from converging; the note says what
                // happened.
                self.deps.board.raise(
                    keys::WANTED_RESET,
                    Level::Info,
                    format!(
                        "the wanted bucket {} was made again (or its store lost): this hive's key is at revision {}, \
                         not after revision {last} handled before; the hive takes it as the truth",
                        Bucket::Wanted.name(),
                        read.revision
                    ),
                );
                self.reset_at = Some(now);
            }
            Verdict::New => {}
        }
        self.suspect = None;
        self.confirm_at = None;
        self.last = Some(read);
        match entry.operation {
            KeyOp::Delete | KeyOp::Purge => self.removed(&entry),
            KeyOp::Put => self.put(entry),
        }
        true
    }

    fn removed(&self, entry: &KeyEntry) {
        let op = if entry.operation == KeyOp::Delete {
            "deleted"
        } else {
            "purged"
        };
        tracing::warn!(hive = %self.deps.hive, revision = entry.revision, op, "wanted key removed; not a deletion order");
        self.deps.board.raise(
            keys::WANTED,
            Level::Warn,
            format!(
                "this hive's declaration was {op} at revision {}; that is not a deletion order: {} \
                 (to retire everything, declare an explicit empty agent list)",
                entry.revision,
                self.keeping()
            ),
        );
    }

    fn put(&self, entry: KeyEntry) {
        let hive = &self.deps.hive;
        let decoded = decode::<Declaration>(&entry.value);
        crate::stage!("decoded");
        match decoded {
            Err(e) => {
                tracing::warn!(%hive, revision = entry.revision, error = %e, "undecodable declaration ignored");
                self.deps.board.raise(
                    keys::WANTED,
                    Level::Warn,
                    format!(
                        "declaration revision {} is not valid ({e}); {}",
                        entry.revision,
                        self.keeping()
                    ),
                );
            }
            Ok(decoded) => {
                for w in &decoded.warnings {
                    tracing::warn!(%hive, revision = entry.revision, warning = %w, "declaration");
                }
                self.deps.board.clear(keys::WANTED);
                self.report_ignored(entry.revision, &decoded.warnings);
                let wanted = Wanted {
                    revision: entry.revision,
                    declaration: decoded.value,
                    created_ns: i64::try_from(entry.created.unix_timestamp_nanos()).ok(),
                };
                if self.deps.tx.borrow().as_deref() == Some(&wanted) {
                    return;
                }
                tracing::info!(%hive, revision = wanted.revision, agents = wanted.declaration.agents.len(), "new declaration");
                // Saved by `save_each` once handed over, not before.
                self.deps.tx.send_replace(Some(Arc::new(wanted)));
            }
        }
    }

    /// A declaration this build reads only in part is used, but never
    /// silently: a field it does not know (a newer controller's `user` on
    /// an older hive) may be a constraint it cannot honour, so the agent
    /// that has it is left as it is ([`crate::agents::plan::understood`]) and
    /// the status says so until a declaration without one.
    fn report_ignored(&self, revision: u64, warnings: &[String]) {
        if warnings.is_empty() {
            self.deps.board.clear(keys::WANTED_IGNORED);
            return;
        }
        self.deps.board.raise(
            keys::WANTED_IGNORED,
            Level::Warn,
            format!(
                "declaration revision {revision} is in force, but: {} (this hive is version {}; \
                 each agent with such a field is left as it is, neither created nor rebuilt, \
                 until a hive that knows them or a declaration without them)",
                warnings.join("; "),
                env!("CARGO_PKG_VERSION"),
            ),
        );
    }

    async fn run(
        &mut self,
        connects: &mut watch::Receiver<u64>,
        shutdown: &mut Shutdown,
    ) -> SessionEnd {
        let deps = self.deps;
        let client = &deps.nats.client;
        if let Err(e) = ensure_connected(client) {
            return SessionEnd::Failed(e.to_string());
        }
        let key = deps.hive.as_str();
        // The doorbell first, so a put between it and the pull rings it.
        let subject = Bucket::Wanted.key_subject(key);
        let mut doorbell = match client.subscribe(subject.clone()).await {
            Ok(s) => s,
            Err(e) => return SessionEnd::Failed(format!("subscribe to {subject} failed: {e}")),
        };
        let reader = KeyReader::new(&deps.nats.jetstream(), Bucket::Wanted);
        self.pull(&reader, "start").await;
        if self.missing {
            // As at every start: make it where this identity may (no
            // per-hive permissions); under them only the controller can.
            let js = deps.nats.jetstream();
            match create_bucket(&js, Bucket::Wanted, &deps.bucket).await {
                Ok(()) => self.pull(&reader, "created").await,
                Err(e) => {
                    tracing::debug!(error = %crate::error_chain(&e), "cannot create the wanted bucket");
                    false
                }
            };
        }
        self.recheck = None;
        let jitter = &deps.nats.jitter;
        let every = repull_every(&deps.nats);
        let repull = tokio::time::sleep(jitter.spread(every));
        let mut buckets_back = deps.board.buckets_back.subscribe();
        let settle = tokio::time::sleep(jitter.spread(SETTLE_REREAD));
        tokio::pin!(repull, settle);
        let mut settled = false;
        loop {
            let next_read = self.next_read();
            tokio::select! {
                // Cancel-safe: watch::changed, sleep_until and
                // Subscriber::next can be dropped between polls without
                // loss (an undelivered message stays in the subscriber).
                _ = shutdown.wait() => return SessionEnd::Shutdown,
                _ = connects.changed() => return SessionEnd::Reconnected,
                // Cancel-safe: a pinned sleep keeps its deadline.
                _ = &mut repull => {
                    repull.as_mut().reset(Instant::now() + jitter.spread(every));
                    if ensure_connected(client).is_ok() {
                        self.pull(&reader, "timer").await;
                    }
                }
                _ = buckets_back.changed() => {
                    self.pull(&reader, "buckets back").await;
                }
                // Cancel-safe: a pinned sleep keeps its deadline.
                _ = &mut settle, if !settled => {
                    settled = true;
                    if ensure_connected(client).is_ok() {
                        self.pull(&reader, "settle").await;
                    }
                }
                _ = tokio::time::sleep_until(next_read.unwrap_or_else(Instant::now)), if next_read.is_some() => {
                    self.timed_read(&reader).await;
                }
                ring = doorbell.next() => match ring {
                    None => return SessionEnd::Failed(format!("the subscription to {subject} ended")),
                    Some(_) => {
                        crate::stage!("doorbell");
                        self.ring(&reader, "doorbell", 0).await
                    }
                }
            }
        }
    }
}

/// Run until shutdown.
pub async fn run(deps: WantedDeps, mut shutdown: Shutdown) {
    let mut connects = deps.nats.connects.clone();
    let mut session = Session {
        deps: &deps,
        last: deps.tx.borrow().as_ref().map(|w| w.seen()),
        suspect: None,
        confirm_at: None,
        reset_at: None,
        recheck: None,
        missing: false,
        retry: None,
    };
    let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));
    loop {
        if !shutdown.until_connected(&mut connects).await {
            return;
        }
        match session.run(&mut connects, &mut shutdown).await {
            SessionEnd::Shutdown => return,
            SessionEnd::Reconnected => {
                tracing::info!(hive = %deps.hive, "reconnected to NATS: pulling the declaration again");
                backoff.reset();
            }
            SessionEnd::Failed(why) => {
                let wait = backoff.next_wait();
                tracing::warn!(hive = %deps.hive, error = %why, retry_in = ?wait, "wanted-state session failed");
                tokio::select! {
                    _ = shutdown.wait() => return,
                    _ = tokio::time::sleep(wait) => {}
                    _ = connects.changed() => {}
                }
            }
        }
    }
}
