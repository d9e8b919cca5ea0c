//! Credential delivery: fetch a sealed envelope from `hyperhive-credentials`,
//! open it with this hive's xkey (only when a trusted controller sealed it),
//! and write the secret to `<state>/agents/<agent>/credentials/<account>`
//! (mode 0600, atomic: a unique temporary file in the same directory,
//! fsynced, then renamed). At boot everything under this hive's prefix is
//! delivered, so a missed notice repairs itself.
//!
//! The daemon's boot task and event listener share one [`Credentials`]
//! handle, which opens the bucket on first use by either of them.
//!
//! Invariants: no error, log line or warning carries a secret (errors name
//! the key and the reason only); an opened secret lives in a buffer that is
//! zeroed when dropped; file I/O runs on the blocking pool, never on the
//! async workers.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::kv;
use swarm_queue_client::credentials::{self, CredentialEnvelope, XKey};
use swarm_queue_client::subjects::{
    credential_key, credential_prefix_filter, parse_credential_key,
};
use swarm_queue_client::{decode, AccountName, AgentName, HiveName};
use zeroize::Zeroizing;

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
        source: kv::EntryError,
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
    #[error("listing this hive's credentials failed")]
    List(#[from] swarm_queue_client::buckets::ReadPrefixError),
    #[error(transparent)]
    Bucket(#[from] swarm_queue_client::buckets::BucketError),
    #[error("credential {key}: the write to {path} was cut off")]
    WriteTask {
        key: String,
        path: PathBuf,
        #[source]
        source: tokio::task::JoinError,
    },
}

/// What credential delivery needs.
#[derive(Clone)]
pub struct Deliverer {
    pub client: async_nats::Client,
    pub store: kv::Store,
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

    /// Deliver one credential named by a notice.
    pub async fn deliver(
        &self,
        agent: &AgentName,
        account: &AccountName,
    ) -> Result<PathBuf, DeliverError> {
        swarm_queue_client::ensure_connected(&self.client)?;
        let key = credential_key(&self.hive, agent, account);
        let entry = self
            .store
            .get(&key)
            .await
            .map_err(|source| DeliverError::Read {
                key: key.clone(),
                source,
            })?
            .ok_or_else(|| DeliverError::Missing { key: key.clone() })?;
        let path = self.write(&key, agent, account, &entry).await?;
        tracing::info!(hive = %self.hive, %agent, %account, path = %path.display(), "credential delivered");
        Ok(path)
    }

    /// Deliver everything under this hive's prefix. Returns how many were
    /// written and the failures (each names its key, never a secret).
    pub async fn deliver_all(&self) -> Result<(usize, Vec<DeliverError>), DeliverError> {
        swarm_queue_client::ensure_connected(&self.client)?;
        let records = swarm_queue_client::buckets::read_prefix(
            &self.client,
            &self.store,
            &credential_prefix_filter(&self.hive),
            Duration::from_secs(30),
        )
        .await?;
        let mut written = 0;
        let mut failures = Vec::new();
        for r in records {
            let (hive, agent, account) = match parse_credential_key(&r.key) {
                Ok(parts) => parts,
                Err(e) => {
                    tracing::warn!(key = %r.key, error = %e, "ignoring a credential key with a bad name");
                    continue;
                }
            };
            if hive != self.hive {
                continue;
            }
            match self.write(&r.key, &agent, &account, &r.value).await {
                Ok(_) => written += 1,
                Err(e) => failures.push(e),
            }
        }
        tracing::info!(hive = %self.hive, written, failed = failures.len(), "boot credential delivery done");
        Ok((written, failures))
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
/// shared by the boot task and the event listener. The bucket is opened on
/// first use, by whichever needs it first, and kept.
#[derive(Clone)]
pub struct Credentials {
    opened: Arc<tokio::sync::Mutex<Option<Deliverer>>>,
    opener: Option<Arc<Opener>>,
}

/// What opening the credentials bucket needs.
pub struct Opener {
    pub client: async_nats::Client,
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

    /// The deliverer, opening the bucket first when needed.
    pub async fn deliverer(&self) -> Result<Deliverer, DeliverError> {
        let mut opened = self.opened.lock().await;
        if let Some(d) = opened.as_ref() {
            return Ok(d.clone());
        }
        // Only `Credentials::open` makes one without an opener, and it is
        // open from the start, so this cannot fail.
        let o = self
            .opener
            .as_ref()
            .expect("a Credentials without an opener is made open");
        swarm_queue_client::ensure_connected(&o.client)?;
        let js = async_nats::jetstream::new(o.client.clone());
        let store = swarm_queue_client::open_or_create(
            &js,
            swarm_queue_client::Bucket::Credentials,
            &o.bucket,
        )
        .await?;
        let d = Deliverer {
            client: o.client.clone(),
            store,
            hive: o.hive.clone(),
            xkey: o.xkey.clone(),
            trusted: o.trusted.clone(),
            agents_dir: o.agents_dir.clone(),
        };
        *opened = Some(d.clone());
        Ok(d)
    }

    /// Deliver one credential named by a notice.
    pub async fn deliver(
        &self,
        agent: &AgentName,
        account: &AccountName,
    ) -> Result<PathBuf, DeliverError> {
        self.deliverer().await?.deliver(agent, account).await
    }
}

/// What the boot delivery task needs.
#[derive(Clone)]
pub struct BootDeps {
    pub nats: swarm_queue_client::Connection,
    pub hive: HiveName,
    pub health: Arc<crate::readiness::Health>,
    pub credentials: Credentials,
}

/// Deliver everything under this hive's prefix as soon as NATS is
/// reachable, and again after every reconnect, since notices sent during an
/// outage were missed.
pub async fn run_boot_delivery(deps: BootDeps, mut shutdown: crate::shutdown::Shutdown) {
    use crate::readiness::keys;
    use swarm_queue_client::Level;
    let mut connects = deps.nats.connects.clone();
    let mut backoff = Duration::from_millis(500);
    loop {
        tokio::select! {
            _ = shutdown.wait() => return,
            _ = connects.wait_for(|n| *n > 0) => {}
        }
        connects.mark_unchanged();
        let delivered = match deps.credentials.deliverer().await {
            Ok(d) => d.deliver_all().await,
            Err(e) => Err(e),
        };
        match delivered {
            Ok((_, failures)) if failures.is_empty() => deps.health.clear(keys::CREDENTIALS),
            Ok((written, failures)) => {
                let first = crate::error_chain(&failures[0]);
                deps.health.raise(
                    keys::CREDENTIALS,
                    Level::Warn,
                    format!(
                        "{} of {} credentials could not be delivered (first: {first})",
                        failures.len(),
                        written + failures.len()
                    ),
                );
            }
            Err(e) => {
                tracing::warn!(hive = %deps.hive, error = %crate::error_chain(&e), retry_in = ?backoff, "boot credential delivery failed; retrying");
                tokio::select! {
                    _ = shutdown.wait() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(60));
                continue;
            }
        }
        backoff = Duration::from_millis(500);
        // Wait for the next reconnect.
        tokio::select! {
            _ = shutdown.wait() => return,
            _ = connects.changed() => {}
        }
    }
}
