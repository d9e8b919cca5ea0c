//! Reading and writing `hyperhive-rollouts/current`, always compare-and-set.
//!
//! Every change of a rollout is `update(key, value, revision_read)` (or
//! `create` when there is none), so of two controllers changing the same
//! rollout from the same read, exactly one succeeds; the other gets
//! [`StoreError::Conflict`], reads again, and decides anew from what the
//! winner wrote. The entry's server timestamp is the rollout's heartbeat:
//! `resume` takes a running rollout over only when that is older than the
//! lease, by the reader's clock against the server's stamp (as freshness).

use async_nats::jetstream::kv::{self, Operation};
use bytes::Bytes;
use swarm_queue_client::buckets::CURRENT_ROLLOUT_KEY;
use time::OffsetDateTime;

use crate::nats::CasError;
use crate::rollout::state::Rollout;

/// The stored rollout, with what a compare-and-set needs.
#[derive(Debug, Clone)]
pub struct Stored {
    pub rollout: Rollout,
    pub revision: u64,
    /// When the server stored it.
    pub created: OffsetDateTime,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot read hyperhive-rollouts/{CURRENT_ROLLOUT_KEY}: {0}")]
    Read(String),
    #[error("hyperhive-rollouts/{CURRENT_ROLLOUT_KEY} revision {revision} does not decode as a rollout: {reason}")]
    Undecodable { revision: u64, reason: String },
    #[error("cannot write hyperhive-rollouts/{CURRENT_ROLLOUT_KEY}: {0}")]
    Write(String),
    /// Another writer changed the key since `expected` was read.
    #[error("hyperhive-rollouts/{CURRENT_ROLLOUT_KEY} changed since revision {expected:?} was read (another controller wrote it)")]
    Conflict { expected: Option<u64> },
    #[error("the rollout state is {bytes} bytes, over the {max}-byte value limit; roll out fewer hives at once")]
    TooBig { bytes: usize, max: usize },
}

/// The current rollout, if any.
pub async fn read(store: &kv::Store) -> Result<Option<Stored>, StoreError> {
    let entry = store
        .entry(CURRENT_ROLLOUT_KEY)
        .await
        .map_err(|e| StoreError::Read(e.to_string()))?;
    let Some(entry) = entry.filter(|e| e.operation == Operation::Put) else {
        return Ok(None);
    };
    let rollout: Rollout =
        serde_json::from_slice(&entry.value).map_err(|e| StoreError::Undecodable {
            revision: entry.revision,
            reason: e.to_string(),
        })?;
    Ok(Some(Stored {
        rollout,
        revision: entry.revision,
        created: entry.created,
    }))
}

/// The revision of the key now (None: no key), whatever its value: what a
/// new rollout's `create` or `update` expects.
pub async fn revision(store: &kv::Store) -> Result<Option<u64>, StoreError> {
    let entry = store
        .entry(CURRENT_ROLLOUT_KEY)
        .await
        .map_err(|e| StoreError::Read(e.to_string()))?;
    Ok(entry.map(|e| e.revision))
}

/// Write `rollout` if the key is still at `expected` (None: no key yet);
/// the new revision.
pub async fn write(
    store: &kv::Store,
    rollout: &Rollout,
    expected: Option<u64>,
) -> Result<u64, StoreError> {
    let bytes = serde_json::to_vec(rollout).map_err(|e| StoreError::Write(e.to_string()))?;
    let max = swarm_queue_client::limits::MAX_VALUE_BYTES;
    if bytes.len() > max {
        return Err(StoreError::TooBig {
            bytes: bytes.len(),
            max,
        });
    }
    crate::nats::write_if(store, CURRENT_ROLLOUT_KEY, Bytes::from(bytes), expected)
        .await
        .map_err(|e| match e {
            CasError::Conflict => StoreError::Conflict { expected },
            other => StoreError::Write(other.to_string()),
        })
}

/// Write `stored.rollout` over the revision it was read at (or last
/// written), and keep `stored` in step with what the server holds.
pub async fn update(store: &kv::Store, stored: &mut Stored) -> Result<(), StoreError> {
    let revision = write(store, &stored.rollout, Some(stored.revision)).await?;
    stored.revision = revision;
    stored.created = OffsetDateTime::now_utc();
    Ok(())
}

/// What another controller wrote, in one line, after a lost compare-and-set.
pub async fn winner_line(store: &kv::Store) -> Result<String, StoreError> {
    Ok(read(store)
        .await?
        .map_or("(the rollout state was removed)".into(), |s| {
            s.rollout.line()
        }))
}
