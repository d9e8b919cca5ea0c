//! Credential delivery: fetch a sealed envelope from `hyperhive-credentials`,
//! open it with this hive's xkey (only when a trusted controller sealed it),
//! and write the secret to `<state>/agents/<agent>/credentials/<account>`
//! (mode 0600, atomic). At boot everything under this hive's prefix is
//! delivered, so a missed notice repairs itself.
//!
//! Invariant: no error, log line or warning carries a secret. Errors name
//! the key and the reason only.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::kv;
use swarm_queue_client::credentials::{self, CredentialEnvelope, XKey};
use swarm_queue_client::subjects::{
    credential_key, credential_prefix_filter, parse_credential_key,
};
use swarm_queue_client::{decode, AccountName, AgentName, HiveName};

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
    fn write(
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
        let secret = credentials::open(&envelope, &self.xkey, &self.trusted).map_err(|source| {
            DeliverError::Open {
                key: key.to_string(),
                source,
            }
        })?;
        let path = credential_path(&self.agents_dir, agent, account);
        let dir = path.parent().expect("credential path has a parent");
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(dir)?;
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
            crate::xkey::write_private(&path, &secret)
        };
        write().map_err(|source| DeliverError::Write {
            key: key.to_string(),
            path: path.clone(),
            source,
        })?;
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
        let path = self.write(&key, agent, account, &entry)?;
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
            match self.write(&r.key, &agent, &account, &r.value) {
                Ok(_) => written += 1,
                Err(e) => failures.push(e),
            }
        }
        tracing::info!(hive = %self.hive, written, failed = failures.len(), "boot credential delivery done");
        Ok((written, failures))
    }
}

/// What the boot delivery task needs.
pub struct BootDeps {
    pub nats: swarm_queue_client::Connection,
    pub hive: HiveName,
    pub health: Arc<crate::readiness::Health>,
    pub bucket: swarm_queue_client::BucketSettings,
    pub xkey: Arc<XKey>,
    pub trusted: Arc<Vec<String>>,
    pub agents_dir: PathBuf,
    /// Filled once the credentials bucket is open; the event listener
    /// delivers through it.
    pub slot: Arc<std::sync::OnceLock<Deliverer>>,
}

/// Open the credentials bucket as soon as NATS is reachable, then deliver
/// everything under this hive's prefix; again after every reconnect, since
/// notices sent during an outage were missed.
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
        let deliverer = match deps.slot.get() {
            Some(d) => d.clone(),
            None => {
                let js = async_nats::jetstream::new(deps.nats.client.clone());
                match swarm_queue_client::open_or_create(
                    &js,
                    swarm_queue_client::Bucket::Credentials,
                    &deps.bucket,
                )
                .await
                {
                    Ok(store) => {
                        let d = Deliverer {
                            client: deps.nats.client.clone(),
                            store,
                            hive: deps.hive.clone(),
                            xkey: deps.xkey.clone(),
                            trusted: deps.trusted.clone(),
                            agents_dir: deps.agents_dir.clone(),
                        };
                        let _ = deps.slot.set(d.clone());
                        d
                    }
                    Err(e) => {
                        tracing::warn!(hive = %deps.hive, error = %crate::error_chain(&e), retry_in = ?backoff, "cannot open the credentials bucket");
                        tokio::select! {
                            _ = shutdown.wait() => return,
                            _ = tokio::time::sleep(backoff) => {}
                        }
                        backoff = (backoff * 2).min(Duration::from_secs(60));
                        continue;
                    }
                }
            }
        };
        match deliverer.deliver_all().await {
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
                tracing::warn!(hive = %deps.hive, error = %crate::error_chain(&e), "boot credential delivery failed; retrying");
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
