//! Reading and writing the rollout state in `hyperhive-rollouts`, every
//! change committed by one compare-and-set.
//!
//! The state is a head (`current`) and parts (`current.<writer>.h<k>`,
//! `current.<writer>.d<k>`; [`parts`] says how it is cut). A change writes the parts whose bytes
//! changed, with plain puts, and then the head, naming each part's revision,
//! by `update(current, head, revision_read)` (or `create` when there is
//! none). The head is the one commit point: of two controllers changing the
//! same rollout from the same read, exactly one head write succeeds; the
//! other gets [`StoreError::Conflict`], reads again, and decides anew from
//! what the winner wrote. A part the loser wrote is never read: each
//! controller writes part keys of its own, and a reader reads each part at
//! exactly the key and revision the head names. The parts a head no longer
//! names are removed after it is written; a loser's, when the next rollout
//! starts ([`remove_part`]: the bucket takes no purge).
//!
//! The head's server timestamp is the rollout's heartbeat: `resume` takes a
//! running rollout over only when that is older than the lease, by the
//! reader's clock against the server's stamp (as freshness).

use async_nats::jetstream::kv::{self, Operation};
use bytes::Bytes;
use swarm_queue_client::buckets::CURRENT_ROLLOUT_KEY;
use time::OffsetDateTime;

use crate::cas::CasError;
pub use crate::rollout::parts::Parts;
use crate::rollout::parts::{
    self, bytes_hash, declaration_part_key, hive_part_key, writer_tag, DeclarationPart, Head,
    HivePart, PartRef,
};
use crate::rollout::state::Rollout;

/// The stored rollout, with what a compare-and-set needs.
#[derive(Debug, Clone)]
pub struct Stored {
    pub rollout: Rollout,
    /// The head's revision.
    pub revision: u64,
    /// When the server stored the head.
    pub created: OffsetDateTime,
    /// The parts the head at `revision` names.
    pub parts: Parts,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot read hyperhive-rollouts/{key}: {reason}")]
    Read { key: String, reason: String },
    #[error("hyperhive-rollouts/{key} revision {revision} does not decode as a rollout: {reason}")]
    Undecodable {
        key: String,
        revision: u64,
        reason: String,
    },
    /// A part the head names is not in the bucket at that revision.
    #[error("hyperhive-rollouts/{key} revision {revision} (hash {hash}), named by the rollout head, is no longer there")]
    PartGone {
        key: String,
        revision: u64,
        hash: String,
    },
    #[error("cannot write hyperhive-rollouts/{key}: {reason}")]
    Write { key: String, reason: String },
    /// Another writer changed the head since `expected` was read.
    #[error("hyperhive-rollouts/{CURRENT_ROLLOUT_KEY} changed since revision {expected:?} was read (another controller wrote it)")]
    Conflict { expected: Option<u64> },
    #[error("hyperhive-rollouts/{key} would be {bytes} bytes, over the {max}-byte value limit")]
    TooBig {
        key: String,
        bytes: usize,
        max: usize,
    },
}

/// How many times a read starts again when the head moved while its parts
/// were read.
const READ_TRIES: usize = 5;

/// The current rollout, if any.
pub async fn read(store: &kv::Store) -> Result<Option<Stored>, StoreError> {
    let mut last = None;
    for _ in 0..READ_TRIES {
        match read_once(store).await {
            Ok(stored) => return Ok(stored),
            // A part the head names is gone: a newer head (a new rollout, or
            // one that removed it) replaced that head meanwhile.
            Err(e @ StoreError::PartGone { .. }) => {
                tracing::debug!(error = %e, "reading the rollout head again");
                last = Some(e);
            }
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| read_error(CURRENT_ROLLOUT_KEY, "the head kept moving")))
}

async fn read_once(store: &kv::Store) -> Result<Option<Stored>, StoreError> {
    let entry = store
        .entry(CURRENT_ROLLOUT_KEY)
        .await
        .map_err(|e| read_error(CURRENT_ROLLOUT_KEY, e))?;
    let Some(entry) = entry.filter(|e| e.operation == Operation::Put) else {
        return Ok(None);
    };
    let undecodable = |reason: String| StoreError::Undecodable {
        key: CURRENT_ROLLOUT_KEY.into(),
        revision: entry.revision,
        reason,
    };
    let value: serde_json::Value =
        serde_json::from_slice(&entry.value).map_err(|e| undecodable(e.to_string()))?;
    let (rollout, parts) = if value.get("parts").is_none() {
        // Schema 1: the whole rollout in the one value.
        let rollout: Rollout =
            serde_json::from_value(value).map_err(|e| undecodable(e.to_string()))?;
        (rollout, Parts::default())
    } else {
        let head: Head = serde_json::from_value(value).map_err(|e| undecodable(e.to_string()))?;
        let parts = head.parts.clone();
        let mut hive_parts = Vec::with_capacity(parts.hives.len());
        for p in &parts.hives {
            hive_parts.push(read_part::<HivePart>(store, p).await?);
        }
        let mut declaration_parts = Vec::with_capacity(parts.declarations.len());
        for p in &parts.declarations {
            declaration_parts.push(read_part::<DeclarationPart>(store, p).await?);
        }
        let rollout = parts::join(head, hive_parts, declaration_parts)
            .map_err(|e| undecodable(e.to_string()))?;
        (rollout, parts)
    };
    Ok(Some(Stored {
        rollout,
        revision: entry.revision,
        created: entry.created,
        parts,
    }))
}

/// One part at exactly the revision `p` names, checked against its hash.
async fn read_part<T: serde::de::DeserializeOwned>(
    store: &kv::Store,
    p: &PartRef,
) -> Result<T, StoreError> {
    let entry = store
        .entry_for_revision(p.key.as_str(), p.revision)
        .await
        .map_err(|e| read_error(&p.key, e))?
        .filter(|e| e.operation == Operation::Put && bytes_hash(&e.value) == p.hash)
        .ok_or_else(|| StoreError::PartGone {
            key: p.key.clone(),
            revision: p.revision,
            hash: p.hash.clone(),
        })?;
    serde_json::from_slice(&entry.value).map_err(|e| StoreError::Undecodable {
        key: p.key.clone(),
        revision: p.revision,
        reason: e.to_string(),
    })
}

fn read_error(key: &str, reason: impl ToString) -> StoreError {
    StoreError::Read {
        key: key.to_string(),
        reason: reason.to_string(),
    }
}

/// The head entry now (None: no key), whatever its value: its revision and
/// server timestamp, which together name one committed state (a bucket made
/// again starts its revisions over).
pub async fn head_id(store: &kv::Store) -> Result<Option<(u64, OffsetDateTime)>, StoreError> {
    let entry = store
        .entry(CURRENT_ROLLOUT_KEY)
        .await
        .map_err(|e| read_error(CURRENT_ROLLOUT_KEY, e))?;
    Ok(entry.map(|e| (e.revision, e.created)))
}

/// The revision of the head now (None: no key), whatever its value: what a
/// new rollout's `create` or `update` expects.
pub async fn revision(store: &kv::Store) -> Result<Option<u64>, StoreError> {
    Ok(head_id(store).await?.map(|(revision, _)| revision))
}

/// Write `rollout` if the head is still at `expected` (None: no head yet):
/// first each part whose bytes differ from `previous`, then the head. The
/// head's new revision, and the parts it names.
pub async fn write(
    store: &kv::Store,
    rollout: &Rollout,
    expected: Option<u64>,
    previous: &Parts,
) -> Result<(u64, Parts), StoreError> {
    let write_error = |key: &str, reason: String| StoreError::Write {
        key: key.to_string(),
        reason,
    };
    let cut = parts::cut(rollout).map_err(|e| write_error(CURRENT_ROLLOUT_KEY, e.to_string()))?;
    let tag = writer_tag(&rollout.driver);
    let mut head = cut.head;
    head.parts = Parts {
        hives: write_parts(store, cut.hives, &previous.hives, |k| {
            hive_part_key(&tag, k)
        })
        .await?,
        declarations: write_parts(store, cut.declarations, &previous.declarations, |k| {
            declaration_part_key(&tag, k)
        })
        .await?,
    };
    let bytes =
        serde_json::to_vec(&head).map_err(|e| write_error(CURRENT_ROLLOUT_KEY, e.to_string()))?;
    check_size(CURRENT_ROLLOUT_KEY, bytes.len())?;
    let revision = crate::cas::write_if(store, CURRENT_ROLLOUT_KEY, Bytes::from(bytes), expected)
        .await
        .map_err(|e| match e {
            CasError::Conflict => StoreError::Conflict { expected },
            other => write_error(CURRENT_ROLLOUT_KEY, other.to_string()),
        })?;
    // The parts the head named before and no longer does (another writer's,
    // or more parts than now): never read again.
    remove_unnamed(store, previous, &head.parts).await;
    Ok((revision, head.parts))
}

/// Put each of `values` under `key(k)`, unless `previous[k]` already holds
/// the same bytes under that key; the references to name in the head.
async fn write_parts(
    store: &kv::Store,
    values: Vec<Vec<u8>>,
    previous: &[PartRef],
    key: impl Fn(usize) -> String,
) -> Result<Vec<PartRef>, StoreError> {
    let mut refs = Vec::with_capacity(values.len());
    for (k, value) in values.into_iter().enumerate() {
        let hash = bytes_hash(&value);
        let key = key(k);
        if let Some(same) = previous.get(k).filter(|p| p.hash == hash && p.key == key) {
            refs.push(same.clone());
            continue;
        }
        check_size(&key, value.len())?;
        let revision = store
            .put(key.as_str(), Bytes::from(value))
            .await
            .map_err(|e| StoreError::Write {
                key: key.clone(),
                reason: e.to_string(),
            })?;
        refs.push(PartRef {
            key,
            revision,
            hash,
        });
    }
    Ok(refs)
}

fn check_size(key: &str, bytes: usize) -> Result<(), StoreError> {
    let max = swarm_queue_client::limits::MAX_VALUE_BYTES;
    if bytes > max {
        return Err(StoreError::TooBig {
            key: key.to_string(),
            bytes,
            max,
        });
    }
    Ok(())
}

/// Write `stored.rollout` over the head revision it was read at (or last
/// written), and keep `stored` in step with what the server holds.
pub async fn update(store: &kv::Store, stored: &mut Stored) -> Result<(), StoreError> {
    let (revision, parts) =
        write(store, &stored.rollout, Some(stored.revision), &stored.parts).await?;
    stored.revision = revision;
    stored.parts = parts;
    stored.created = OffsetDateTime::now_utc();
    Ok(())
}

/// Remove the parts `old` names that `new` does not (another writer's, or
/// more parts than now), so that a listing of the bucket shows what the
/// head names. Best effort: a part left behind is never read.
async fn remove_unnamed(store: &kv::Store, old: &Parts, new: &Parts) {
    let keep: std::collections::BTreeSet<&str> = new.keys().collect();
    for key in old.keys().filter(|k| !keep.contains(k)) {
        if let Err(e) = remove_part(store, key).await {
            tracing::warn!(key, error = %e, "cannot remove an old rollout part; it is never read");
        }
    }
}

/// Remove every part key in the bucket that `named` does not name: the
/// parts of controllers that lost a compare-and-set of the head (they are
/// never read). Called when a rollout starts. Best effort.
pub async fn remove_strays(store: &kv::Store, named: &Parts) {
    use futures_util::StreamExt;
    let keep: std::collections::BTreeSet<&str> = named.keys().collect();
    let prefix = format!("{CURRENT_ROLLOUT_KEY}.");
    let keys: Vec<String> = match store.keys().await {
        Ok(keys) => keys.filter_map(|k| async { k.ok() }).collect().await,
        Err(e) => {
            tracing::warn!(error = %e, "cannot list hyperhive-rollouts to remove stray parts");
            return;
        }
    };
    for key in keys
        .iter()
        .filter(|k| k.starts_with(&prefix) && !keep.contains(k.as_str()))
    {
        if let Err(e) = remove_part(store, key).await {
            tracing::warn!(key, error = %e, "cannot remove a stray rollout part; it is never read");
        }
    }
}

/// Remove the part `key` and its bytes. The bucket refuses purges
/// (`deny_purge`, `swarm_queue_client::buckets::stream_config`), so empty
/// puts first push its earlier values out of the key's history (the
/// bucket keeps that many values a key), and then a delete marker leaves it
/// out of every listing. A reader that asks for it at a revision the head
/// named gets [`StoreError::PartGone`], as after a purge.
pub async fn remove_part(store: &kv::Store, key: &str) -> Result<(), StoreError> {
    let write_error = |e: &dyn std::fmt::Display| StoreError::Write {
        key: key.to_string(),
        reason: e.to_string(),
    };
    let history = store.stream.cached_info().config.max_messages_per_subject;
    for _ in 1..history {
        store
            .put(key, Bytes::new())
            .await
            .map_err(|e| write_error(&e))?;
    }
    store.delete(key).await.map_err(|e| write_error(&e))
}

/// What another controller wrote, in one line, after a lost compare-and-set.
pub async fn winner_line(store: &kv::Store) -> Result<String, StoreError> {
    Ok(read(store)
        .await?
        .map_or("(the rollout state was removed)".into(), |s| {
            s.rollout.line()
        }))
}
