//! What the webhook remembers, in the `hyperhive-deliveries` bucket that
//! every controller shares, so a forge delivery is acted on once however
//! many times it arrives and at whichever controller:
//!
//! - `delivery.<id>` is written with KV `create` (only if absent) before
//!   anything is published: of two controllers given the same delivery at
//!   once, exactly one writes it, and the other refuses it.
//! - `deployed.<hive>.<agent>` holds the commit a delivery last deployed
//!   that agent for. The hives publish no built commit (their status has
//!   spec hashes and image digests only), so this is what the controller
//!   knows of it. It is claimed by compare-and-set before the deploy
//!   request goes out, and given back when the hive did not queue a job,
//!   so a push of a commit already deployed queues nothing, and a failed
//!   deploy does not stop the next push of that commit.
//!
//! Both kinds of key expire with the bucket's `max_age_secs` (a day by
//! default).

use async_nats::jetstream::kv;
use bytes::Bytes;
use serde_json::json;
use swarm_queue_client::subjects::deployed_key;
use swarm_queue_client::{AgentName, HiveName};

use crate::cas::{write_if, CasError};
use crate::webhook::{Forge, Push};

/// How often a claim is tried again when another controller wrote the key
/// between the read and the write.
const CLAIM_ATTEMPTS: usize = 3;

/// The deliveries bucket could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    #[error("cannot record delivery key {key} in hyperhive-deliveries: {source}")]
    Record {
        key: String,
        #[source]
        source: CasError,
    },
    #[error("cannot read {key} in hyperhive-deliveries: {source}")]
    Read {
        key: String,
        #[source]
        source: kv::EntryError,
    },
    #[error("{key} in hyperhive-deliveries changed {CLAIM_ATTEMPTS} times while it was claimed")]
    Contended { key: String },
}

/// Record a delivery under `key`; `false` when it was recorded before (by
/// this controller or another).
pub async fn record_delivery(
    store: &kv::Store,
    key: &str,
    forge: Forge,
    push: &Push,
) -> Result<bool, DeliveryError> {
    let value = json!({
        "forge": format!("{forge:?}"),
        "repository": push.repository.full_name,
        "ref": push.git_ref,
        "after": push.after,
    });
    match write_if(store, key, Bytes::from(value.to_string()), None).await {
        Ok(_) => Ok(true),
        Err(CasError::Conflict) => Ok(false),
        Err(source) => Err(DeliveryError::Record {
            key: key.to_string(),
            source,
        }),
    }
}

/// What claiming an agent's deploy for a commit found.
#[derive(Debug)]
pub enum Claim {
    /// The key now holds the commit; [`release`] gives it back.
    Claimed(Held),
    /// A delivery already deployed the agent for this commit.
    AlreadyDeployed,
}

/// A claim made: what the key held before, and the revision written.
#[derive(Debug)]
pub struct Held {
    /// `deployed.<hive>.<agent>`.
    key: String,
    /// The revision the claim wrote: the give-back is compare-and-set on
    /// it, so it never undoes a later delivery's claim.
    revision: u64,
    /// What the key held before (empty: nothing), to put back.
    previous: Bytes,
}

/// Claim the deploy of `agent` on `hive` for `commit`.
pub async fn claim(
    store: &kv::Store,
    hive: &HiveName,
    agent: &AgentName,
    commit: &str,
) -> Result<Claim, DeliveryError> {
    let key = deployed_key(hive, agent);
    for _ in 0..CLAIM_ATTEMPTS {
        let entry = store
            .entry(&key)
            .await
            .map_err(|source| DeliveryError::Read {
                key: key.clone(),
                source,
            })?;
        let previous = match &entry {
            Some(e) if e.operation == kv::Operation::Put => e.value.clone(),
            _ => Bytes::new(),
        };
        if previous == commit.as_bytes() {
            return Ok(Claim::AlreadyDeployed);
        }
        let expected = entry.map(|e| e.revision);
        let value = Bytes::copy_from_slice(commit.as_bytes());
        match write_if(store, &key, value, expected).await {
            Ok(revision) => {
                return Ok(Claim::Claimed(Held {
                    key,
                    revision,
                    previous,
                }))
            }
            Err(CasError::Conflict) => continue,
            Err(source) => return Err(DeliveryError::Record { key, source }),
        }
    }
    Err(DeliveryError::Contended { key })
}

/// Give a claim back (the hive queued no job): the key holds what it held
/// before, unless another delivery has written it since.
pub async fn release(store: &kv::Store, held: Held) {
    if let Err(e) = write_if(store, &held.key, held.previous, Some(held.revision)).await {
        tracing::warn!(key = %held.key, error = %e, "could not give back a deploy claim");
    }
}
