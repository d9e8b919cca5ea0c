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

mod boot;
mod refusals;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use swarm_queue_client::credentials::{self, CredentialEnvelope, XKey};
use swarm_queue_client::direct::{KeyEntry, KeyOp, KeyReader, ReadKeyError};
use swarm_queue_client::subjects::credential_key;
use swarm_queue_client::{decode, AccountName, AgentName, Declaration, HiveName};
use tokio::time::Instant;

use zeroize::Zeroizing;

use crate::revision::{judge, Seen, Suspect, Verdict};

pub use boot::{run_boot_delivery, BootDeps};
pub use refusals::Refusals;

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
    /// The deliveries refused last time, with what was found where, until
    /// one of the same key is written.
    pub refusals: Arc<Mutex<Refusals>>,
    /// Where a delivery is told to the fleet (`credential_delivered`,
    /// names only), when the daemon publishes events.
    pub events: Option<crate::fleet_events::EventSink>,
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
        }
    }

    /// The same, telling each new delivery to `events`.
    pub fn with_events(mut self, events: Option<crate::fleet_events::EventSink>) -> Self {
        self.events = events;
        self
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
        let agent_dir = self.agents_dir.join(agent.as_str());
        let file = account.to_string();
        let written =
            tokio::task::spawn_blocking(move || write_secret(&agent_dir, &file, &secret)).await;
        match written {
            Ok(Ok(())) => Ok(path),
            Ok(Err(crate::nofollow::NoFollowError::Io { path, source, .. })) => {
                Err(DeliverError::Write {
                    key: key.to_string(),
                    path,
                    source,
                })
            }
            Ok(Err(source)) => Err(DeliverError::Refused {
                key: key.to_string(),
                source,
            }),
            Err(source) => Err(DeliverError::WriteTask {
                key: key.to_string(),
                path,
                source,
            }),
        }
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
        let written = self.write(&key, agent, account, &entry.value).await;
        let path = self.note_refusal(agent, account, written)?;
        tracing::info!(hive = %self.hive, %agent, %account, revision = entry.revision, path = %path.display(), "credential delivered");
        if let Some(events) = self.events.as_ref().filter(|_| fresh) {
            let said = format!(
                "credential {account} (revision {}) delivered",
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
        })
    }

    /// Remember a refused write (logged here, once per delivery) until a
    /// write of the same key succeeds.
    fn note_refusal(
        &self,
        agent: &AgentName,
        account: &AccountName,
        written: Result<PathBuf, DeliverError>,
    ) -> Result<PathBuf, DeliverError> {
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
    pub fn publish_refusals(&self, health: &crate::readiness::Health) {
        use crate::readiness::keys::CREDENTIAL_REFUSED;
        let warning = self
            .refusals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .warning();
        match warning {
            Some(message) => {
                health.raise(CREDENTIAL_REFUSED, swarm_queue_client::Level::Warn, message)
            }
            None => health.clear(CREDENTIAL_REFUSED),
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
    /// Where deliveries are told to the fleet.
    pub events: Option<crate::fleet_events::EventSink>,
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
        let d = Deliverer::on_context(parts, &o.js).with_events(o.events.clone());
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

    /// Deliver one credential named by a notice, then raise or clear the
    /// `credential_refused` warning in `health`.
    pub async fn deliver(
        &self,
        agent: &AgentName,
        account: &AccountName,
        health: &crate::readiness::Health,
    ) -> Result<Delivered, DeliverError> {
        let deliverer = self.deliverer().await;
        let result = deliverer.deliver(agent, account).await;
        deliverer.publish_refusals(health);
        result
    }
}

/// `credentials/<file>` below the agent's dir: the directory 0700, the
/// file 0600 through a unique temporary file beside it, no link followed
/// below `agent_dir` ([`crate::nofollow`]). The agent's dir itself is the
/// hive's (its parent is not in any container), so it is made by path.
/// Blocking: run it on the blocking pool.
fn write_secret(
    agent_dir: &Path,
    file: &str,
    secret: &[u8],
) -> Result<(), crate::nofollow::NoFollowError> {
    use crate::nofollow::{Dir, NoFollowError};
    std::fs::create_dir_all(agent_dir).map_err(|source| NoFollowError::Io {
        what: "create",
        path: agent_dir.to_path_buf(),
        source,
    })?;
    let dir = Dir::open_root(agent_dir)?.child("credentials", 0o700)?;
    dir.set_mode(0o700)?;
    dir.write_private(file, secret)
}
