//! `credential put`: seal a secret to one hive and tell it to fetch it;
//! `credential delete`: remove it, and tell the hive to remove its file.
//!
//! The controller's own xkey (its seed in `xkey_seed_file`, created with mode
//! 0600 on first use) is the sender every hive is configured to trust. The
//! hive's public xkey comes from its own `HiveStatus`, so a secret can only be
//! opened by the hive that published that key. The sealed envelope goes into
//! `hyperhive-credentials` under `<hive>.<agent>.<account>`; then a notice
//! with names only goes to the hive's credential subject. A hive that misses
//! the notice still delivers the secret at its next boot.
//!
//! A delete writes a delete marker under the key (never a purge: the
//! buckets are made `deny_purge`), compare-and-set on the revision just
//! read, so a put that lands in between is not deleted unseen; then the
//! same notice. The marker is the order: a hive removes the file when it
//! reads a marker, on the notice or at any later boot or pull, but a key
//! that is simply missing (the bucket made again) removes nothing. Only
//! the controller's identity may write the bucket
//! (`swarm_queue_client::permissions`), so only it can give the order.
//!
//! Nothing in this module logs, formats or returns the secret; it lives in
//! one buffer that is dropped as soon as it is sealed.

use std::path::{Path, PathBuf};

use async_nats::jetstream::kv::{self, Operation};
use bytes::Bytes;
use swarm_queue_client::credentials::{self, seal, CredentialError, XKey};
use swarm_queue_client::subjects::{credential_key, HiveSubjects};
use swarm_queue_client::{
    decode, encode, ensure_connected, AccountName, AgentName, CredentialNotice, HiveName,
    HiveStatus, NotConnected,
};

/// Why a credential could not be stored or announced.
#[derive(Debug, thiserror::Error)]
pub enum CredentialPutError {
    #[error(transparent)]
    Seed(#[from] credentials::SeedFileError),
    #[error("no xkey_seed_file is configured; credentials are sealed with the controller's xkey")]
    NoSeedFile,
    #[error("cannot read the secret from {path}: {source}")]
    SecretFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("hive {hive} is not on the roster")]
    NotRostered { hive: HiveName },
    #[error(transparent)]
    NotConnected(#[from] NotConnected),
    #[error("cannot read the status of hive {hive}: {reason}")]
    Status { hive: HiveName, reason: String },
    #[error("hive {hive} has never reported, so its xkey is not known; start the hive first")]
    NeverReported { hive: HiveName },
    #[error("hive {hive} has not published an xkey in its status; it cannot receive credentials")]
    NoXkey { hive: HiveName },
    #[error("sealing for hive {hive} failed: {source}")]
    Seal {
        hive: HiveName,
        #[source]
        source: CredentialError,
    },
    #[error("cannot store the credential {key}: {reason}")]
    Store { key: String, reason: String },
    #[error("no credential {key} is stored (nothing to delete); `credential put` stores one")]
    NotStored { key: String },
    #[error("cannot delete the credential {key}: {reason}")]
    Delete { key: String, reason: String },
    #[error("{key} is written (revision {revision}), but the notice to hive {hive} failed: {reason}; the hive acts on it at its next boot")]
    Notice {
        hive: HiveName,
        key: String,
        revision: u64,
        reason: String,
    },
}

/// What `credential put` did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Stored {
    pub key: String,
    pub revision: u64,
    /// The hive's status was stale or stopped: the hive will see the notice
    /// only when it is back (it delivers stored credentials at boot).
    pub hive_not_fresh: Option<String>,
}

/// What `credential delete` did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Deleted {
    pub key: String,
    /// The delete marker's revision.
    pub revision: u64,
    /// The key held a delete marker already: written again, and the hive
    /// told again (its file may still be there if it missed the first).
    pub already_deleted: bool,
    /// As in [`Stored`]: the hive removes the file when it is back.
    pub hive_not_fresh: Option<String>,
}

/// Problems with a configured seed file, for `--check-config`: only what
/// can be known before the controller runs. The file need not exist (it is
/// created on first use) but its directory must; its content and mode are
/// checked when it is used, because a deployment may check the config
/// against a stand-in (the NixOS modules check it at build time, with empty
/// files in place of the secrets systemd provides at run time).
pub fn check_seed_file(path: &Path) -> Vec<String> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => Vec::new(),
        Ok(_) => vec![format!("xkey_seed_file {} is not a file", path.display())],
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let parent = path.parent().unwrap_or(Path::new("."));
            if parent.is_dir() {
                Vec::new()
            } else {
                vec![format!(
                    "xkey_seed_file {} does not exist and cannot be created: {} is not a directory",
                    path.display(),
                    parent.display()
                )]
            }
        }
        Err(e) => vec![format!("xkey_seed_file {}: {e}", path.display())],
    }
}

/// The controller's xkey, created (mode 0600) when the file does not exist.
/// Two controllers creating it at once end up with the same key: the file is
/// linked into place only if nobody else did first
/// ([`credentials::load_or_create_seed`], the hive's writer too).
pub fn load_or_create_seed(path: &Path) -> Result<XKey, CredentialPutError> {
    let seed = credentials::load_or_create_seed(path)?;
    if seed.created {
        tracing::info!(path = %path.display(), public = %seed.key.public_key(), "created the controller's xkey");
    }
    Ok(seed.key)
}

/// Read a secret file. Its content is returned only to be sealed.
pub fn read_secret_file(path: &Path) -> Result<Vec<u8>, CredentialPutError> {
    std::fs::read(path).map_err(|source| CredentialPutError::SecretFile {
        path: path.to_path_buf(),
        source,
    })
}

/// What [`put`] works with: the connection, the two buckets and the
/// controller's xkey.
pub struct PutContext<'a> {
    pub client: &'a async_nats::Client,
    /// `hyperhive-status`: where the hive's xkey is read.
    pub status: &'a kv::Store,
    /// `hyperhive-credentials`: where the sealed envelope is stored.
    pub credentials: &'a kv::Store,
    /// The controller's key, the sender of the seal.
    pub controller: &'a XKey,
    /// A hive whose status is older than this is named in the reply.
    pub stale_after: std::time::Duration,
}

/// Whose a credential is: one agent's account on one hive.
#[derive(Debug, Clone, Copy)]
pub struct CredentialFor<'a> {
    pub hive: &'a HiveName,
    pub agent: &'a AgentName,
    pub account: &'a AccountName,
}

/// Seal `secret` to the hive, store it and publish the notice. The secret
/// is never logged and is dropped as soon as it is sealed.
pub async fn put(
    cx: &PutContext<'_>,
    owner: CredentialFor<'_>,
    secret: Vec<u8>,
) -> Result<Stored, CredentialPutError> {
    let CredentialFor {
        hive,
        agent,
        account,
    } = owner;
    ensure_connected(cx.client)?;
    let recipient = recipient(cx.status, hive, cx.stale_after).await?;
    let envelope = seal(&secret, cx.controller, &recipient.xkey).map_err(|source| {
        CredentialPutError::Seal {
            hive: hive.clone(),
            source,
        }
    })?;
    drop(secret);
    let key = credential_key(hive, agent, account);
    let store_err = |reason: String| CredentialPutError::Store {
        key: key.clone(),
        reason,
    };
    let bytes = encode(&envelope).map_err(|e| store_err(e.to_string()))?;
    ensure_connected(cx.client)?;
    let revision = cx
        .credentials
        .put(key.as_str(), Bytes::from(bytes))
        .await
        .map_err(|e| store_err(e.to_string()))?;
    tracing::info!(%hive, %agent, %account, revision, "stored a sealed credential");
    notify(cx.client, owner, &key, revision).await?;
    Ok(Stored {
        key,
        revision,
        hive_not_fresh: recipient.not_fresh,
    })
}

/// What [`delete`] works with: the connection and the two buckets.
pub struct DeleteContext<'a> {
    pub client: &'a async_nats::Client,
    /// `hyperhive-status`: whether the hive will hear the notice soon.
    pub status: &'a kv::Store,
    /// `hyperhive-credentials`: where the delete marker is written.
    pub credentials: &'a kv::Store,
    /// A hive whose status is older than this is named in the reply.
    pub stale_after: std::time::Duration,
}

/// Write a delete marker over a stored credential and tell the hive. A key
/// never stored is refused ([`CredentialPutError::NotStored`]); one
/// deleted before is deleted again (a new marker, a new notice), so an
/// operator can repeat the order.
pub async fn delete(
    cx: &DeleteContext<'_>,
    owner: CredentialFor<'_>,
) -> Result<Deleted, CredentialPutError> {
    let (hive, agent, account) = (owner.hive, owner.agent, owner.account);
    ensure_connected(cx.client)?;
    let key = credential_key(hive, agent, account);
    let fail = |reason: String| CredentialPutError::Delete {
        key: key.clone(),
        reason,
    };
    let last = cx
        .credentials
        .entry(key.as_str())
        .await
        .map_err(|e| fail(e.to_string()))?
        .ok_or_else(|| CredentialPutError::NotStored { key: key.clone() })?;
    let already_deleted = last.operation != Operation::Put;
    // Compare-and-set: a put that landed since the read is not deleted
    // unseen; the operator runs the delete again after looking.
    cx.credentials
        .delete_expect_revision(key.as_str(), Some(last.revision))
        .await
        .map_err(|e| {
            fail(format!(
                "{e} (was it changed meanwhile? run the delete again)"
            ))
        })?;
    let revision = cx
        .credentials
        .entry(key.as_str())
        .await
        .map_err(|e| fail(e.to_string()))?
        .map_or(last.revision + 1, |e| e.revision);
    tracing::info!(%hive, %agent, %account, revision, "deleted a credential");
    let hive_not_fresh = match read_status(cx.status, hive).await {
        Ok((hive_status, created)) => not_fresh(hive, &hive_status, created, cx.stale_after),
        Err(e) => Some(e.to_string()),
    };
    notify(cx.client, owner, &key, revision).await?;
    Ok(Deleted {
        key,
        revision,
        already_deleted,
        hive_not_fresh,
    })
}

/// The hive a credential is sealed to, from its status.
struct Recipient {
    xkey: String,
    /// Why the hive may not pick the credential up soon, if so.
    not_fresh: Option<String>,
}

async fn recipient(
    status: &kv::Store,
    hive: &HiveName,
    stale_after: std::time::Duration,
) -> Result<Recipient, CredentialPutError> {
    let (hive_status, created) = read_status(status, hive).await?;
    let xkey = hive_status
        .xkey
        .clone()
        .ok_or_else(|| CredentialPutError::NoXkey { hive: hive.clone() })?;
    let not_fresh = not_fresh(hive, &hive_status, created, stale_after);
    Ok(Recipient { xkey, not_fresh })
}

/// The hive's last status and when it was written.
async fn read_status(
    status: &kv::Store,
    hive: &HiveName,
) -> Result<(HiveStatus, time::OffsetDateTime), CredentialPutError> {
    let status_err = |reason: String| CredentialPutError::Status {
        hive: hive.clone(),
        reason,
    };
    let entry = status
        .entry(hive.as_str())
        .await
        .map_err(|e| status_err(e.to_string()))?
        .filter(|e| e.operation == Operation::Put)
        .ok_or_else(|| CredentialPutError::NeverReported { hive: hive.clone() })?;
    let hive_status = decode::<HiveStatus>(&entry.value)
        .map_err(|e| status_err(e.to_string()))?
        .value;
    Ok((hive_status, entry.created))
}

/// Why a hive whose status is `hive_status`, written at `created`, may not
/// act on a notice soon, if so.
fn not_fresh(
    hive: &HiveName,
    hive_status: &HiveStatus,
    created: time::OffsetDateTime,
    stale_after: std::time::Duration,
) -> Option<String> {
    let age = time::OffsetDateTime::now_utc() - created;
    if hive_status.state == swarm_queue_client::HiveState::Stopped {
        Some(format!("hive {hive} is stopped"))
    } else if age > stale_after {
        Some(format!(
            "hive {hive} last reported {} s ago",
            age.whole_seconds()
        ))
    } else {
        None
    }
}

/// Tell the hive the credential stored under `key` at `revision` is there.
async fn notify(
    client: &async_nats::Client,
    credential: CredentialFor<'_>,
    key: &str,
    revision: u64,
) -> Result<(), CredentialPutError> {
    let fail = |reason: String| CredentialPutError::Notice {
        hive: credential.hive.clone(),
        key: key.to_string(),
        revision,
        reason,
    };
    let notice = CredentialNotice::new(credential.agent.clone(), credential.account.clone());
    let payload = encode(&notice).map_err(|e| fail(e.to_string()))?;
    client
        .publish(
            HiveSubjects::new(credential.hive).credential,
            Bytes::from(payload),
        )
        .await
        .map_err(|e| fail(e.to_string()))?;
    client.flush().await.map_err(|e| fail(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    // How the file is made (0600, once, racing writers) is the contract's
    // test (`credentials::seed_file`); here only what the check says.
    #[test]
    fn a_missing_seed_passes_the_check_before_and_after_it_is_made() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("controller.xkey");
        assert!(check_seed_file(&path).is_empty());
        let a = load_or_create_seed(&path).unwrap();
        assert!(check_seed_file(&path).is_empty());
        assert_eq!(
            a.public_key(),
            load_or_create_seed(&path).unwrap().public_key()
        );
    }

    #[test]
    fn bad_seed_files_are_refused_when_used_not_when_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        // An empty stand-in (as a build-time check sees it) passes the check.
        std::fs::write(&path, "").unwrap();
        assert!(check_seed_file(&path).is_empty());
        std::fs::write(&path, "not a seed").unwrap();
        let err = load_or_create_seed(&path).unwrap_err().to_string();
        assert!(err.contains("does not hold an xkey seed"), "{err}");
        assert!(
            !err.contains("not a seed\""),
            "the content is never echoed: {err}"
        );
        let missing_dir = dir.path().join("nope/k");
        assert!(check_seed_file(&missing_dir)[0].contains("not a directory"));
        assert!(check_seed_file(dir.path())[0].contains("is not a file"));
    }
}
