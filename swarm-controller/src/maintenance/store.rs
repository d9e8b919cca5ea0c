//! Reading and writing `hyperhive-maintenance`: every write is a
//! compare-and-set on the revision just read, so two controllers putting
//! the same hive in maintenance (or one ending it while the other extends
//! it) never silently overwrite each other: the loser reads again.

use std::collections::BTreeMap;

use async_nats::jetstream::kv::{self, Operation};
use bytes::Bytes;
use futures_util::TryStreamExt;
use swarm_queue_client::buckets::MAINTENANCE_BUCKET;
use swarm_queue_client::HiveName;

use super::{Hold, HoldEntry};
use crate::cas::CasError;

/// A read or write of the bucket failed.
#[derive(Debug, thiserror::Error)]
pub enum MaintenanceError {
    #[error("cannot read {MAINTENANCE_BUCKET}/{key}: {reason}")]
    Read { key: String, reason: String },
    #[error("cannot write {MAINTENANCE_BUCKET}/{hive}: {reason}")]
    Write { hive: HiveName, reason: String },
    #[error("{MAINTENANCE_BUCKET}/{hive} kept changing under us (another controller writes it); try again")]
    Contended { hive: HiveName },
}

/// Compare-and-set attempts before giving up on a contended key.
const ATTEMPTS: usize = 5;

/// Every stored hold (active or expired) by key.
pub async fn read_all(store: &kv::Store) -> Result<BTreeMap<String, HoldEntry>, MaintenanceError> {
    let read = |key: &str, e: &dyn std::fmt::Display| MaintenanceError::Read {
        key: key.to_string(),
        reason: e.to_string(),
    };
    let keys: Vec<String> = store
        .keys()
        .await
        .map_err(|e| read(">", &e))?
        .try_collect()
        .await
        .map_err(|e| read(">", &e))?;
    let mut out = BTreeMap::new();
    for key in keys {
        if let Some(e) = entry(store, &key).await? {
            out.insert(key, e);
        }
    }
    Ok(out)
}

/// The hold stored for `key`, if any (a deleted key has none).
pub async fn entry(store: &kv::Store, key: &str) -> Result<Option<HoldEntry>, MaintenanceError> {
    let e = store.entry(key).await.map_err(|e| MaintenanceError::Read {
        key: key.to_string(),
        reason: e.to_string(),
    })?;
    Ok(e.filter(|e| e.operation == Operation::Put)
        .map(|e| HoldEntry::decode(e.revision, e.created, &e.value)))
}

/// Store `hold` for `hive`, replacing (and so restarting) any hold it has;
/// the revision written.
pub async fn set(store: &kv::Store, hive: &HiveName, hold: &Hold) -> Result<u64, MaintenanceError> {
    let bytes = Bytes::from(
        serde_json::to_vec(hold).map_err(|e| MaintenanceError::Write {
            hive: hive.clone(),
            reason: e.to_string(),
        })?,
    );
    for _ in 0..ATTEMPTS {
        let expected = entry(store, hive.as_str()).await?.map(|e| e.revision);
        match crate::cas::write_if(store, hive.as_str(), bytes.clone(), expected).await {
            Ok(revision) => return Ok(revision),
            Err(CasError::Conflict) => continue,
            Err(e) => {
                return Err(MaintenanceError::Write {
                    hive: hive.clone(),
                    reason: e.to_string(),
                })
            }
        }
    }
    Err(MaintenanceError::Contended { hive: hive.clone() })
}

/// End `hive`'s hold (a delete marker at the revision read); the hold that
/// was removed, `None` when it had none.
pub async fn clear(
    store: &kv::Store,
    hive: &HiveName,
) -> Result<Option<HoldEntry>, MaintenanceError> {
    for _ in 0..ATTEMPTS {
        let Some(current) = entry(store, hive.as_str()).await? else {
            return Ok(None);
        };
        let deleted = store
            .delete_expect_revision(hive.as_str(), Some(current.revision))
            .await;
        match deleted {
            Ok(()) => return Ok(Some(current)),
            Err(e) => {
                // A wrong last revision: someone wrote in between; look
                // again. Anything else is reported.
                let again = entry(store, hive.as_str()).await?.map(|e| e.revision);
                if again == Some(current.revision) {
                    return Err(MaintenanceError::Write {
                        hive: hive.clone(),
                        reason: e.to_string(),
                    });
                }
            }
        }
    }
    Err(MaintenanceError::Contended { hive: hive.clone() })
}
