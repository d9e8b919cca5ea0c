//! Compare-and-set: every write the controller makes to a bucket, so that
//! concurrent controllers never overwrite each other. Below the fleet and
//! the follower (`nats`), so the verbs that write (declare, maintenance,
//! rollouts) need nothing above them.

use async_nats::jetstream::kv;
use bytes::Bytes;

/// Why a compare-and-set write did not land.
#[derive(Debug, thiserror::Error)]
pub enum CasError {
    /// The key is no longer at the revision read (or exists, when it was
    /// read absent): someone else wrote in between.
    #[error("the key changed since it was read")]
    Conflict,
    #[error(transparent)]
    Update(kv::UpdateError),
    #[error(transparent)]
    Create(kv::CreateError),
}

/// Write `value` under `key` only if the key is still at `expected`
/// (`None`: only if it does not exist); the revision written. Every write
/// the controller makes goes through here, so concurrent controllers never
/// overwrite each other.
pub async fn write_if(
    store: &kv::Store,
    key: &str,
    value: Bytes,
    expected: Option<u64>,
) -> Result<u64, CasError> {
    match expected {
        Some(rev) => store.update(key, value, rev).await.map_err(|e| {
            if e.kind() == kv::UpdateErrorKind::WrongLastRevision {
                CasError::Conflict
            } else {
                CasError::Update(e)
            }
        }),
        None => store.create(key, value).await.map_err(|e| {
            if e.kind() == kv::CreateErrorKind::AlreadyExists {
                CasError::Conflict
            } else {
                CasError::Create(e)
            }
        }),
    }
}
