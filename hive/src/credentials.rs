//! Credential delivery: fetch a sealed envelope from `hyperhive-credentials`,
//! open it with this hive's xkey (only when a trusted controller sealed it),
//! and write the secret to `<state>/agents/<agent>/credentials/<account>`
//! (mode 0600, atomic).
//!
//! A key is read by direct get only ([`KeyReader`]): a hive holds no
//! consumer and cannot list keys, since listing would show other hives' key
//! names (`<hive>.<agent>.<account>`). So it learns which keys to read from
//! three places: a credential notice (names only), the doorbell of a write
//! of one of its own keys (a core-NATS subscription on
//! `$KV.hyperhive-credentials.<hive>.>`, whose subject names the key), and
//! its declaration (each agent's `credentials` accounts), read in full at
//! start, after every reconnect, when the declaration changes and on a
//! timer, so a missed notice or doorbell repairs itself.
//!
//! A key whose revision goes back means the bucket was made again: the
//! value read is delivered and a `credentials_reset` warning says so
//! ([`crate::revision`]). A deleted or purged key is not a deletion order:
//! the file delivered before stays.
//!
//! The daemon's boot task and event listener share one [`Credentials`]
//! handle.
//!
//! Invariants: no error, log line or warning carries a secret (errors name
//! the key and the reason only); an opened secret lives in a buffer that is
//! zeroed when dropped; file I/O runs on the blocking pool, never on the
//! async workers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use swarm_queue_client::credentials::{self, CredentialEnvelope, XKey};
use swarm_queue_client::direct::{KeyEntry, KeyOp, KeyReader, ReadKeyError};
use swarm_queue_client::subjects::{credential_key, parse_credential_key};
use swarm_queue_client::{decode, AccountName, AgentName, Declaration, HiveName};
use tokio::time::Instant;

use zeroize::Zeroizing;

use crate::backoff::Backoff;
use crate::revision::{judge, Seen, Suspect, Verdict};

#[derive(Debug, thiserror::Error)]
pub enum DeliverError {
    #[error(transparent)]
    NotConnected(#[from] swarm_queue_client::NotConnected),
    #[error("credential {key} is not in the credentials bucket")]
    Missing { key: String },
    #[error("credential {key} was deleted or purged at revision {revision}")]
    Removed { key: String, revision: u64 },
    #[error("reading credential {key} failed")]
    Read {
        key: String,
        #[source]
        source: ReadKeyError,
    },
    #[error("credential {key}: {source}")]
    Decode {
        key: String,
        #[source]
        source: swarm_queue_client::DecodeError,
    },
    #[error("credential {key}: {source}")]
    Open {
        key: String,
        #[source]
        source: credentials::CredentialError,
    },
    #[error("credential {key}: cannot write {path}")]
    Write {
        key: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("credential {key}: the write to {path} was cut off")]
    WriteTask {
        key: String,
        path: PathBuf,
        #[source]
        source: tokio::task::JoinError,
    },
}

impl DeliverError {
    /// The credentials bucket itself does not answer.
    pub fn bucket_missing(&self) -> bool {
        matches!(
            self,
            DeliverError::Read {
                source: ReadKeyError::BucketMissing { .. },
                ..
            }
        )
    }
}

/// Per key: the last revision acted on and a lower one awaiting its
/// confirming read ([`crate::revision`]).
#[derive(Debug, Default)]
pub struct Book {
    keys: BTreeMap<String, (Seen, Option<Suspect>)>,
}

/// What one delivery did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivered {
    /// Written (again, when nothing changed: the write is idempotent).
    Written {
        path: PathBuf,
        /// Set when the key's revision went back: the bucket was made
        /// again, and this is the revision handled before.
        reset_from: Option<u64>,
        /// A revision not delivered before (not a repeat of the last one).
        fresh: bool,
    },
    /// A lower revision not yet confirmed: read again after
    /// [`crate::revision::CONFIRM_AFTER`].
    Unconfirmed { key: String },
}

/// What credential delivery needs.
#[derive(Clone)]
pub struct Deliverer {
    pub client: async_nats::Client,
    /// Direct gets of this hive's keys in `hyperhive-credentials`.
    pub reader: KeyReader,
    pub hive: HiveName,
    pub xkey: Arc<XKey>,
    pub trusted: Arc<Vec<String>>,
    pub agents_dir: PathBuf,
    pub book: Arc<Mutex<Book>>,
}

/// What [`Deliverer::new`] takes.
pub struct DelivererParts {
    pub client: async_nats::Client,
    pub hive: HiveName,
    pub xkey: Arc<XKey>,
    pub trusted: Arc<Vec<String>>,
    pub agents_dir: PathBuf,
}

/// Where a credential is written.
pub fn credential_path(agents_dir: &Path, agent: &AgentName, account: &AccountName) -> PathBuf {
    agents_dir
        .join(agent.as_str())
        .join("credentials")
        .join(account.as_str())
}

impl Deliverer {
    /// A deliverer for `hive`'s keys; sends nothing yet.
    pub fn new(parts: DelivererParts) -> Self {
        let js = async_nats::jetstream::new(parts.client.clone());
        Self::on_context(parts, &js)
    }

    /// A deliverer that reads through `js` (the buckets' JetStream domain,
    /// see `swarm_queue_client::Connection::jetstream`).
    pub fn on_context(parts: DelivererParts, js: &async_nats::jetstream::Context) -> Self {
        Deliverer {
            reader: KeyReader::new(js, swarm_queue_client::Bucket::Credentials),
            client: parts.client,
            hive: parts.hive,
            xkey: parts.xkey,
            trusted: parts.trusted,
            agents_dir: parts.agents_dir,
            book: Arc::default(),
        }
    }

    /// Open the envelope and write the secret, off the async workers.
    async fn write(
        &self,
        key: &str,
        agent: &AgentName,
        account: &AccountName,
        value: &[u8],
    ) -> Result<PathBuf, DeliverError> {
        let envelope = decode::<CredentialEnvelope>(value)
            .map_err(|source| DeliverError::Decode {
                key: key.to_string(),
                source,
            })?
            .value;
        let secret = credentials::open(&envelope, &self.xkey, &self.trusted)
            .map(Zeroizing::new)
            .map_err(|source| DeliverError::Open {
                key: key.to_string(),
                source,
            })?;
        let path = credential_path(&self.agents_dir, agent, account);
        let target = path.clone();
        let written = tokio::task::spawn_blocking(move || write_secret(&target, &secret)).await;
        let io = |source| DeliverError::Write {
            key: key.to_string(),
            path: path.clone(),
            source,
        };
        match written {
            Ok(r) => r.map_err(io)?,
            Err(source) => {
                return Err(DeliverError::WriteTask {
                    key: key.to_string(),
                    path,
                    source,
                })
            }
        }
        Ok(path)
    }

    /// Deliver one credential (named by a notice, a doorbell or the
    /// declaration): read its key by direct get, open it, write it.
    pub async fn deliver(
        &self,
        agent: &AgentName,
        account: &AccountName,
    ) -> Result<Delivered, DeliverError> {
        swarm_queue_client::ensure_connected(&self.client)?;
        let key = credential_key(&self.hive, agent, account);
        let entry = self
            .reader
            .last(&key)
            .await
            .map_err(|source| DeliverError::Read {
                key: key.clone(),
                source,
            })?
            .ok_or_else(|| DeliverError::Missing { key: key.clone() })?;
        let verdict = self.judge(&entry);
        let reset_from = match verdict {
            Verdict::Confirm { .. } => return Ok(Delivered::Unconfirmed { key }),
            Verdict::Reset { last } => Some(last),
            Verdict::New | Verdict::Same => None,
        };
        let fresh = verdict != Verdict::Same;
        if entry.operation != KeyOp::Put {
            // Not a deletion order: the file delivered before stays.
            return Err(DeliverError::Removed {
                key,
                revision: entry.revision,
            });
        }
        let path = self.write(&key, agent, account, &entry.value).await?;
        tracing::info!(hive = %self.hive, %agent, %account, revision = entry.revision, path = %path.display(), "credential delivered");
        Ok(Delivered::Written {
            path,
            reset_from,
            fresh,
        })
    }

    fn judge(&self, entry: &KeyEntry) -> Verdict {
        let now = Instant::now();
        let read = Seen {
            revision: entry.revision,
            created: Some(entry.created),
        };
        let mut book = self.book.lock().unwrap_or_else(|p| p.into_inner());
        let (last, suspect) = match book.keys.get(&entry.key) {
            Some((last, suspect)) => (Some(*last), *suspect),
            None => (None, None),
        };
        let verdict = judge(last, suspect, read, now);
        match verdict {
            Verdict::Confirm { .. } => {
                let first_seen = suspect
                    .filter(|s| s.revision == read.revision)
                    .map_or(now, |s| s.first_seen);
                if let Some(last) = last {
                    book.keys.insert(
                        entry.key.clone(),
                        (
                            last,
                            Some(Suspect {
                                revision: read.revision,
                                first_seen,
                            }),
                        ),
                    );
                }
            }
            _ => {
                book.keys.insert(entry.key.clone(), (read, None));
            }
        }
        verdict
    }

    /// Deliver every credential the declaration names for its agents
    /// (`credentials = [...]` of each). A hive cannot list keys (that would
    /// list other hives' key names too), so the declaration is the index; a
    /// credential stored for an account no agent declares is delivered by
    /// its doorbell or notice instead. A declared key not stored yet is
    /// skipped. Returns the outcomes and the failures (each names its key,
    /// never a secret); a missing bucket fails the whole pass.
    pub async fn deliver_declared(
        &self,
        declaration: &Declaration,
    ) -> Result<(Vec<Delivered>, Vec<DeliverError>), DeliverError> {
        let mut done = Vec::new();
        let mut failures = Vec::new();
        for (agent, spec) in &declaration.agents {
            for account in &spec.credentials {
                match self.deliver(agent, account).await {
                    Ok(d) => done.push(d),
                    Err(DeliverError::Missing { key }) => {
                        tracing::debug!(hive = %self.hive, %key, "declared credential not stored yet")
                    }
                    Err(e) if e.bucket_missing() || matches!(e, DeliverError::NotConnected(_)) => {
                        return Err(e)
                    }
                    Err(e) => failures.push(e),
                }
            }
        }
        tracing::info!(hive = %self.hive, delivered = done.len(), failed = failures.len(), "credential delivery pass done");
        Ok((done, failures))
    }
}

/// The directory 0700, the file 0600 through a unique temporary file in
/// the same directory. Blocking: run it on the blocking pool.
fn write_secret(path: &Path, secret: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    crate::xkey::write_private(path, secret)
}

/// Where the daemon's credential delivery reads and writes: one handle
/// shared by the boot task and the event listener.
#[derive(Clone)]
pub struct Credentials {
    opened: Arc<tokio::sync::Mutex<Option<Deliverer>>>,
    opener: Option<Arc<Opener>>,
}

/// What opening the credentials bucket needs.
pub struct Opener {
    pub client: async_nats::Client,
    /// JetStream on the buckets' domain.
    pub js: async_nats::jetstream::Context,
    pub bucket: swarm_queue_client::BucketSettings,
    pub hive: HiveName,
    pub xkey: Arc<XKey>,
    pub trusted: Arc<Vec<String>>,
    pub agents_dir: PathBuf,
}

impl Credentials {
    /// Opens the bucket when first needed.
    pub fn new(opener: Opener) -> Credentials {
        Credentials {
            opened: Arc::default(),
            opener: Some(Arc::new(opener)),
        }
    }

    /// Over a bucket that is already open.
    pub fn open(deliverer: Deliverer) -> Credentials {
        Credentials {
            opened: Arc::new(tokio::sync::Mutex::new(Some(deliverer))),
            opener: None,
        }
    }

    /// The deliverer (made on first use; it sends nothing until asked).
    pub async fn deliverer(&self) -> Deliverer {
        let mut opened = self.opened.lock().await;
        if let Some(d) = opened.as_ref() {
            return d.clone();
        }
        // Only `Credentials::open` makes one without an opener, and it is
        // open from the start, so this cannot fail.
        let o = self
            .opener
            .as_ref()
            .expect("a Credentials without an opener is made open");
        let parts = DelivererParts {
            client: o.client.clone(),
            hive: o.hive.clone(),
            xkey: o.xkey.clone(),
            trusted: o.trusted.clone(),
            agents_dir: o.agents_dir.clone(),
        };
        let d = Deliverer::on_context(parts, &o.js);
        *opened = Some(d.clone());
        d
    }

    /// How the bucket is made if it is missing at start and this identity
    /// may create it (no per-hive permissions).
    fn bucket_settings(&self) -> swarm_queue_client::BucketSettings {
        self.opener
            .as_ref()
            .map(|o| o.bucket.clone())
            .unwrap_or_default()
    }

    /// Deliver one credential named by a notice.
    pub async fn deliver(
        &self,
        agent: &AgentName,
        account: &AccountName,
    ) -> Result<Delivered, DeliverError> {
        self.deliverer().await.deliver(agent, account).await
    }
}

/// What the delivery task needs.
#[derive(Clone)]
pub struct BootDeps {
    pub nats: swarm_queue_client::Connection,
    pub hive: HiveName,
    pub health: Arc<crate::readiness::Health>,
    pub credentials: Credentials,
    /// The declaration in force: which keys to read at boot.
    pub wanted: crate::wanted::WantedRx,
}

/// Deliver the declared credentials whenever NATS (re)connects, the
/// declaration changes, or [`crate::wanted::REPULL_EVERY`] passes; and each
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
        wanted: &mut crate::wanted::WantedRx,
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
        let mut repull = tokio::time::interval(crate::wanted::repull_every(&self.deps.nats));
        repull.tick().await;
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
                _ = repull.tick() => confirm_at = self.pass().await,
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
    /// ([`crate::wanted::RECHECK_AFTER`]).
    async fn ring_and_plan(
        &self,
        subject: &async_nats::Subject,
        tries: usize,
        confirm_at: &mut Option<Instant>,
    ) -> Option<(Instant, usize, async_nats::Subject)> {
        let (again, fresh) = self.ring(subject).await;
        if again.is_some() {
            *confirm_at = again;
        }
        match crate::wanted::RECHECK_AFTER.get(tries) {
            Some(after) if !fresh => Some((Instant::now() + *after, tries + 1, subject.clone())),
            _ => None,
        }
    }

    /// A doorbell on `subject`: deliver that one key. Returns when a
    /// confirming read is due, and whether a new revision was delivered.
    async fn ring(&self, subject: &str) -> (Option<Instant>, bool) {
        let prefix = swarm_queue_client::Bucket::Credentials.key_subject("");
        let Some(key) = subject.strip_prefix(&prefix) else {
            return (None, true);
        };
        let (hive, agent, account) = match parse_credential_key(key) {
            Ok(parts) => parts,
            Err(e) => {
                tracing::warn!(%key, error = %e, "ignoring a credential doorbell with a bad key name");
                return (None, true);
            }
        };
        if hive != self.deps.hive {
            return (None, true);
        }
        let result = match self.deliverer.deliver(&agent, &account).await {
            Ok(d) => Ok((vec![d], Vec::new())),
            // Not stored yet, maybe: the recheck reads it again.
            Err(DeliverError::Missing { .. }) => Ok((Vec::new(), Vec::new())),
            Err(e) if e.bucket_missing() || matches!(e, DeliverError::NotConnected(_)) => Err(e),
            Err(e) => Ok((Vec::new(), vec![e])),
        };
        let fresh = matches!(&result, Ok((d, _)) if d.iter().any(|d| matches!(d, Delivered::Written { fresh: true, .. })));
        (self.report(result), fresh)
    }

    fn report(
        &self,
        result: Result<(Vec<Delivered>, Vec<DeliverError>), DeliverError>,
    ) -> Option<Instant> {
        use crate::readiness::keys;
        use swarm_queue_client::Level;
        let health = &self.deps.health;
        self.missing.store(
            matches!(&result, Err(e) if e.bucket_missing()),
            std::sync::atomic::Ordering::Relaxed,
        );
        let (done, failures) = match result {
            Ok(r) => r,
            Err(e) if e.bucket_missing() => {
                let msg = crate::error_chain(&e);
                tracing::warn!(hive = %self.deps.hive, error = %msg, "credentials bucket missing");
                health.raise(
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
        health.clear(keys::CREDENTIALS_BUCKET);
        for d in &done {
            if let Delivered::Written {
                path,
                reset_from: Some(last),
                ..
            } = d
            {
                // Info: handled (the new value was written), so the hive is
                // not degraded by it; the note says what happened.
                health.raise(
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
            health.clear(keys::CREDENTIALS);
        } else {
            let first = crate::error_chain(&failures[0]);
            health.raise(
                keys::CREDENTIALS,
                Level::Warn,
                format!(
                    "{} of {} credentials could not be delivered (first: {first})",
                    failures.len(),
                    done.len() + failures.len()
                ),
            );
        }
        done.iter()
            .any(|d| matches!(d, Delivered::Unconfirmed { .. }))
            .then(|| Instant::now() + crate::revision::CONFIRM_AFTER)
    }
}
