//! The three JetStream key-value buckets and how they are opened.
//!
//! `open_or_create` is safe to race: two processes opening the same bucket at
//! once both end up with a handle to the one bucket.

use async_nats::jetstream::{self, kv};
use serde::{Deserialize, Serialize};

use crate::limits::MAX_VALUE_BYTES;

/// `hyperhive-status/<hive>`: `Readiness`, written only by that hive.
pub const STATUS_BUCKET: &str = "hyperhive-status";
/// `hyperhive-wanted/<hive>`: `Declaration`, written by the controller.
pub const WANTED_BUCKET: &str = "hyperhive-wanted";
/// `hyperhive-credentials/<hive>.<agent>.<account>`: a sealed `CredentialEnvelope`.
pub const CREDENTIALS_BUCKET: &str = "hyperhive-credentials";

/// Which of the three buckets; each has its own default history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bucket {
    Status,
    Wanted,
    Credentials,
}

impl Bucket {
    pub fn name(self) -> &'static str {
        match self {
            Bucket::Status => STATUS_BUCKET,
            Bucket::Wanted => WANTED_BUCKET,
            Bucket::Credentials => CREDENTIALS_BUCKET,
        }
    }

    fn description(self) -> &'static str {
        match self {
            Bucket::Status => "hyperhive: each hive's readiness, keyed by hive name",
            Bucket::Wanted => "hyperhive: each hive's declaration, keyed by hive name",
            Bucket::Credentials => "hyperhive: sealed credentials, keyed <hive>.<agent>.<account>",
        }
    }
}

/// Where a bucket's data lives on the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Storage {
    #[default]
    File,
    Memory,
}

/// How a bucket is created when it does not exist yet. Opening an existing
/// bucket never changes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BucketSettings {
    /// Values kept per key. The wanted bucket keeps a few so an operator can
    /// see what was declared before.
    pub history: i64,
    pub storage: Storage,
    /// Copies in a JetStream cluster; more than 1 needs that many servers.
    pub replicas: usize,
}

impl Default for BucketSettings {
    fn default() -> Self {
        Self {
            history: 1,
            storage: Storage::File,
            replicas: 1,
        }
    }
}

impl BucketSettings {
    pub fn default_for(bucket: Bucket) -> Self {
        match bucket {
            Bucket::Wanted => Self {
                history: 10,
                ..Self::default()
            },
            _ => Self::default(),
        }
    }
}

/// A bucket could not be opened or created.
#[derive(Debug, thiserror::Error)]
pub enum BucketError {
    #[error("bucket settings for {bucket}: {reason}")]
    Settings {
        bucket: &'static str,
        reason: String,
    },
    #[error("could not create KV bucket {bucket} (history {history}, {replicas} replicas)")]
    Create {
        bucket: &'static str,
        history: i64,
        replicas: usize,
        #[source]
        source: jetstream::context::CreateKeyValueError,
    },
    #[error("could not open KV bucket {bucket}")]
    Open {
        bucket: &'static str,
        #[source]
        source: jetstream::context::KeyValueError,
    },
}

/// Open `bucket`, creating it with `settings` when it does not exist.
pub async fn open_or_create(
    js: &jetstream::Context,
    bucket: Bucket,
    settings: &BucketSettings,
) -> Result<kv::Store, BucketError> {
    let name = bucket.name();
    if !(1..=64).contains(&settings.history) {
        return Err(BucketError::Settings {
            bucket: name,
            reason: format!("history must be 1 to 64, not {}", settings.history),
        });
    }
    if !(1..=5).contains(&settings.replicas) {
        return Err(BucketError::Settings {
            bucket: name,
            reason: format!("replicas must be 1 to 5, not {}", settings.replicas),
        });
    }
    match js.get_key_value(name).await {
        Ok(store) => return Ok(store),
        Err(e) if e.kind() == jetstream::context::KeyValueErrorKind::GetBucket => {
            // Not found (or not reachable); try to create it below, which
            // reports the real cause if the server is unreachable.
        }
        Err(source) => {
            return Err(BucketError::Open {
                bucket: name,
                source,
            })
        }
    }
    let config = kv::Config {
        bucket: name.to_string(),
        description: bucket.description().to_string(),
        history: settings.history,
        storage: match settings.storage {
            Storage::File => jetstream::stream::StorageType::File,
            Storage::Memory => jetstream::stream::StorageType::Memory,
        },
        num_replicas: settings.replicas,
        max_value_size: MAX_VALUE_BYTES as i32,
        ..Default::default()
    };
    match js.create_key_value(config).await {
        Ok(store) => Ok(store),
        Err(source) => {
            // Someone else may have created it between our get and create.
            if let Ok(store) = js.get_key_value(name).await {
                return Ok(store);
            }
            Err(BucketError::Create {
                bucket: name,
                history: settings.history,
                replicas: settings.replicas,
                source,
            })
        }
    }
}
