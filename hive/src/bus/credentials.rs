//! Credential delivery: fetch a sealed envelope from `hyperhive-credentials`,
//! open it with this hive's xkey (only when a trusted controller sealed it),
//! and write the secret to `<state>/agents/<agent>/credentials/<account>`
//! (mode 0600, atomic).
//!
//! The agent can write below its own dir (it is `/state` in its container),
//! so everything below it is opened without following links
//! ([`crate::nofollow`]): a link planted at `credentials` or at the file is
//! refused, the delivery is a `credential_refused` warning naming the agent
//! and the path, and the credential stays in the bucket for the next
//! delivery once the link is gone.
//!
//! A key is read by direct get only ([`KeyReader`]): a hive holds no
//! consumer and cannot list keys, since listing would show other hives' key
//! names (`<hive>.<agent>.<account>`). So it learns which keys to read from
//! three places: a credential notice (names only), the doorbell of a write
//! of one of its own keys (a core-NATS subscription on
//! `$KV.hyperhive-credentials.<hive>.>`, whose subject names the key), and
//! its declaration (each agent's `credentials` accounts) together with the
//! credential files already on disk ([`files::delivered`]), read in full at
//! start, after every reconnect, when the declaration changes and on a
//! timer, so a missed notice or doorbell repairs itself.
//!
//! A key whose revision goes back means the bucket was made again: the
//! value read is delivered and a `credentials_reset` warning says so
//! ([`crate::bus::revision`]).
//!
//! **A delete marker is an order; a missing key is not.** A key whose last
//! message is a delete (or purge) marker was deleted by the controller's
//! `credential delete` (only the controller's identity may write the
//! bucket): the file is removed, a `credential_removed` event says so, and
//! that happens on the notice or doorbell and again at any later pass, so
//! a hive that was down removes it at its next boot. A key that is simply
//! not there (never stored, or the bucket lost and made again) removes
//! nothing: the file delivered before stays.
//!
//! A file whose content changes (a first delivery, a new value) or that a
//! marker removes is a change for its agent ([`on_change`]): with
//! `on_credential_change = "restart"` a restart job is queued.
//!
//! The daemon's boot task and event listener share one [`Credentials`]
//! handle.
//!
//! Invariants: no error, log line or warning carries a secret (errors name
//! the key and the reason only); an opened secret lives in a buffer that is
//! zeroed when dropped; file I/O runs on the blocking pool, never on the
//! async workers.

mod boot;
pub mod files;
pub mod on_change;
mod refusals;
mod shared;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use swarm_queue_client::credentials::{self, CredentialEnvelope, XKey};
use swarm_queue_client::direct::{KeyEntry, KeyOp, KeyReader, ReadKeyError};
use swarm_queue_client::subjects::credential_key;
use swarm_queue_client::{decode, AccountName, AgentName, Declaration, HiveName};
use tokio::time::Instant;

use zeroize::Zeroizing;

use crate::bus::revision::{judge, Seen, Suspect, Verdict};

pub use boot::{run_boot_delivery, BootDeps};
pub use on_change::{Change, OnChange};
pub use refusals::Refusals;
pub use shared::{Credentials, Opener};

#[derive(Debug, thiserror::Error)]
pub enum DeliverError {
    #[error(transparent)]
    NotConnected(#[from] swarm_queue_client::NotConnected),
    #[error("credential {key} is not in the credentials bucket")]
    Missing { key: String },
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
    /// Something below the agent's dir is not what the hive writes there
    /// (a link the agent planted): nothing was written.
    #[error(
        "credential {key} not written: {source}; it stays in the bucket and is delivered \
         once the path is fixed"
    )]
    Refused {
        key: String,
        #[source]
        source: crate::nofollow::NoFollowError,
    },
    #[error("credential {key}: cannot write {path}")]
    Write {
        key: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("credential {key}: cannot remove {path}")]
    Remove {
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
    /// Refused for what is on disk, not for the credential itself.
    pub fn refused(&self) -> bool {
        matches!(self, DeliverError::Refused { .. })
    }

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
/// confirming read ([`crate::bus::revision`]).
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
        /// The file was missing or held another value.
        changed: bool,
    },
    /// The key holds a delete marker: the file is gone.
    Removed {
        path: PathBuf,
        /// The file was there until now (not removed before).
        existed: bool,
    },
    /// A lower revision not yet confirmed: read again after
    /// [`crate::bus::revision::CONFIRM_AFTER`].
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
    /// The deliveries refused last time, with what was found where, until
    /// one of the same key is written.
    pub refusals: Arc<Mutex<Refusals>>,
    /// Where a delivery is told to the fleet (`credential_delivered`,
    /// names only), when the daemon publishes events.
    pub events: Option<crate::fleet_events::EventSink>,
    /// What a change does to its agent (a restart job), when the daemon
    /// runs jobs.
    pub on_change: Option<OnChange>,
    /// Held from a key's read to the change's restart: a notice and a
    /// doorbell of the same put, handled at once, would both see the old
    /// file and queue two restarts, or one would judge the revision new
    /// while the other wrote it.
    serial: Arc<tokio::sync::Mutex<()>>,
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
            refusals: Arc::default(),
            events: None,
            on_change: None,
            serial: Arc::default(),
        }
    }

    /// The same, telling each new delivery to `events`.
    pub fn with_events(mut self, events: Option<crate::fleet_events::EventSink>) -> Self {
        self.events = events;
        self
    }

    /// The same, acting on each change through `on_change`.
    pub fn with_on_change(mut self, on_change: Option<OnChange>) -> Self {
        self.on_change = on_change;
        self
    }

    /// Open the envelope and write the secret, off the async workers.
    async fn write(
        &self,
        key: &str,
        agent: &AgentName,
        account: &AccountName,
        value: &[u8],
    ) -> Result<(PathBuf, bool), DeliverError> {
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
        let agent_dir = self.agents_dir.join(agent.as_str());
        let file = account.to_string();
        let written =
            tokio::task::spawn_blocking(move || files::write_secret(&agent_dir, &file, &secret))
                .await;
        file_result(key, &path, written, FileOp::Write).map(|changed| (path, changed))
    }

    /// A delete marker: remove the file, off the async workers. Whether it
    /// was there.
    async fn remove(
        &self,
        key: &str,
        agent: &AgentName,
        account: &AccountName,
    ) -> Result<(PathBuf, bool), DeliverError> {
        let path = credential_path(&self.agents_dir, agent, account);
        let agent_dir = self.agents_dir.join(agent.as_str());
        let file = account.to_string();
        let removed =
            tokio::task::spawn_blocking(move || files::remove_secret(&agent_dir, &file)).await;
        file_result(key, &path, removed, FileOp::Remove).map(|existed| (path, existed))
    }

    /// Deliver one credential (named by a notice, a doorbell or the
    /// declaration): read its key by direct get, open it, write it.
    pub async fn deliver(
        &self,
        agent: &AgentName,
        account: &AccountName,
    ) -> Result<Delivered, DeliverError> {
        swarm_queue_client::ensure_connected(&self.client)?;
        // The read, the verdict and the file in one turn, so the path that
        // finds a revision new is also the one that writes it.
        let _serial = self.serial.lock().await;
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
            return self.removed(&key, agent, account, entry.revision).await;
        }
        let written = self.write(&key, agent, account, &entry.value).await;
        let (path, changed) = self.note_refusal(agent, account, written)?;
        tracing::info!(hive = %self.hive, %agent, %account, revision = entry.revision, changed, path = %path.display(), "credential delivered");
        let restart = self
            .act_on_change(agent, account, changed.then_some(Change::Written))
            .await;
        if let Some(events) = self.events.as_ref().filter(|_| fresh) {
            let said = format!(
                "credential {account} (revision {}) delivered{restart}",
                entry.revision
            );
            let event =
                swarm_queue_client::event_stream::Event::new("credential_delivered").said(said);
            events.emit(agent, event);
        }
        Ok(Delivered::Written {
            path,
            reset_from,
            fresh,
            changed,
        })
    }

    /// The key holds a delete marker, the controller's order: remove the
    /// file, and when it was there, say so and act on the change.
    async fn removed(
        &self,
        key: &str,
        agent: &AgentName,
        account: &AccountName,
        revision: u64,
    ) -> Result<Delivered, DeliverError> {
        let removed = self.remove(key, agent, account).await;
        let (path, existed) = self.note_refusal(agent, account, removed)?;
        if existed {
            tracing::info!(hive = %self.hive, %agent, %account, revision, path = %path.display(), "credential deleted: file removed");
            let restart = self
                .act_on_change(agent, account, Some(Change::Removed))
                .await;
            if let Some(events) = &self.events {
                let said = format!(
                    "credential {account} deleted (revision {revision}): file removed{restart}"
                );
                let event =
                    swarm_queue_client::event_stream::Event::new("credential_removed").said(said);
                events.emit(agent, event);
            }
        }
        Ok(Delivered::Removed { path, existed })
    }

    /// Queue what `change` asks of the agent (see [`on_change`]); what to
    /// add to the event's message. A store that fails is logged: the file
    /// is as the controller wants it, only the restart is lost.
    async fn act_on_change(
        &self,
        agent: &AgentName,
        account: &AccountName,
        change: Option<Change>,
    ) -> String {
        let (Some(change), Some(on_change)) = (change, &self.on_change) else {
            return String::new();
        };
        match on_change.changed(agent, account, change).await {
            Ok(Some(job)) => format!("; restart queued (job {job})"),
            Ok(None) => String::new(),
            Err(e) => {
                let error = crate::error_chain(&e);
                tracing::warn!(hive = %self.hive, %agent, %account, %error, "credential changed, but the restart could not be queued");
                "; the restart could not be queued".to_string()
            }
        }
    }

    /// Remember a refused write (logged here, once per delivery) until a
    /// write of the same key succeeds.
    fn note_refusal<T>(
        &self,
        agent: &AgentName,
        account: &AccountName,
        written: Result<T, DeliverError>,
    ) -> Result<T, DeliverError> {
        if let Err(DeliverError::Refused { source, .. }) = &written {
            let reason = source.to_string();
            tracing::warn!(hive = %self.hive, %agent, %account, path = %source.path().display(), %reason, "credential delivery refused");
        }
        let mut refusals = self.refusals.lock().unwrap_or_else(|p| p.into_inner());
        refusals.note(agent, account, written.as_ref().map(|_| ()));
        written
    }

    /// Raise the `credential_refused` warning naming every agent whose
    /// delivery stands refused, or clear it when none does.
    pub fn publish_refusals(&self, board: &crate::status::StatusBoard) {
        use crate::status::keys::CREDENTIAL_REFUSED;
        let warning = self
            .refusals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .warning();
        match warning {
            Some(message) => {
                board.raise(CREDENTIAL_REFUSED, swarm_queue_client::Level::Warn, message)
            }
            None => board.clear(CREDENTIAL_REFUSED),
        }
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
    /// (`credentials = [...]` of each), and read again the key of every
    /// credential file on disk (so a delete marker the hive missed removes
    /// its file even when no agent declares the account). A hive cannot
    /// list keys (that would list other hives' key names too), so the
    /// declaration and the files are the index; a credential stored for an
    /// account no agent declares is first delivered by its doorbell or
    /// notice instead. A key not stored (yet, or any more: the bucket made
    /// again) is skipped, and its file kept. Returns the outcomes and the failures (each names its key,
    /// never a secret); a missing bucket fails the whole pass.
    pub async fn deliver_declared(
        &self,
        declaration: &Declaration,
    ) -> Result<(Vec<Delivered>, Vec<DeliverError>), DeliverError> {
        let mut done = Vec::new();
        let mut failures = Vec::new();
        let mut keys: std::collections::BTreeSet<(AgentName, AccountName)> = declaration
            .agents
            .iter()
            .flat_map(|(agent, spec)| spec.credentials.iter().map(|a| (agent.clone(), a.clone())))
            .collect();
        let agents_dir = self.agents_dir.clone();
        match tokio::task::spawn_blocking(move || files::delivered(&agents_dir)).await {
            Ok(on_disk) => keys.extend(on_disk),
            Err(e) => {
                tracing::warn!(hive = %self.hive, error = %e, "cannot list the credential files")
            }
        }
        for (agent, account) in &keys {
            match self.deliver(agent, account).await {
                Ok(d) => done.push(d),
                Err(DeliverError::Missing { key }) => {
                    tracing::debug!(hive = %self.hive, %key, "credential not stored (yet, or any more); its file, if any, stays")
                }
                Err(e) if e.bucket_missing() || matches!(e, DeliverError::NotConnected(_)) => {
                    return Err(e)
                }
                Err(e) => failures.push(e),
            }
        }
        tracing::info!(hive = %self.hive, delivered = done.len(), failed = failures.len(), "credential delivery pass done");
        Ok((done, failures))
    }
}

/// What a file task did, for its error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileOp {
    Write,
    Remove,
}

/// The outcome of a file task as a delivery's
/// error: a link or odd file is a refusal, anything else an I/O failure.
fn file_result<T>(
    key: &str,
    path: &Path,
    done: Result<Result<T, crate::nofollow::NoFollowError>, tokio::task::JoinError>,
    what: FileOp,
) -> Result<T, DeliverError> {
    use crate::nofollow::NoFollowError;
    let key = key.to_string();
    match done {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(NoFollowError::Io { path, source, .. })) if what == FileOp::Remove => {
            Err(DeliverError::Remove { key, path, source })
        }
        Ok(Err(NoFollowError::Io { path, source, .. })) => {
            Err(DeliverError::Write { key, path, source })
        }
        Ok(Err(source)) => Err(DeliverError::Refused { key, source }),
        Err(source) => Err(DeliverError::WriteTask {
            key,
            path: path.to_path_buf(),
            source,
        }),
    }
}
