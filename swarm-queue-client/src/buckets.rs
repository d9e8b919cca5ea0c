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

    /// Every bucket, in a fixed order.
    pub const ALL: [Bucket; 3] = [Bucket::Status, Bucket::Wanted, Bucket::Credentials];

    /// The JetStream stream that backs the bucket: `KV_<bucket>`.
    pub fn stream_name(self) -> String {
        format!("KV_{}", self.name())
    }

    /// The subject one key is stored under: `$KV.<bucket>.<key>`. `key` may
    /// be a filter such as `alpha.>`.
    pub fn key_subject(self, key: &str) -> String {
        format!("$KV.{}.{key}", self.name())
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
    #[error(
        "KV bucket {bucket} does not exist and could not be created (history {history}, \
         {replicas} replicas); an identity that may not create buckets (a hive under \
         per-hive permissions) needs the controller to create it first"
    )]
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

/// One key's current value, read by [`read_prefix`].
#[derive(Debug, Clone)]
pub struct KvRecord {
    pub key: String,
    pub revision: u64,
    pub value: bytes::Bytes,
}

#[derive(Debug, thiserror::Error)]
pub enum ReadPrefixError {
    #[error("cannot list {filter:?} in {bucket}")]
    Consumer {
        bucket: String,
        filter: String,
        #[source]
        source: jetstream::stream::ConsumerError,
    },
    #[error("reading {filter:?} in {bucket} failed")]
    Read {
        bucket: String,
        filter: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("reading {filter:?} in {bucket} timed out after {timeout:?}")]
    Timeout {
        bucket: String,
        filter: String,
        timeout: std::time::Duration,
    },
}

/// The current value of every key matching `key_filter` (for example
/// `alpha.>`), skipping deleted and purged keys. Exact: the number of
/// entries to read comes from the consumer's pending count, so an empty
/// prefix returns at once instead of waiting for a timeout.
pub async fn read_prefix(
    client: &async_nats::Client,
    store: &kv::Store,
    key_filter: &str,
    timeout: std::time::Duration,
) -> Result<Vec<KvRecord>, ReadPrefixError> {
    use futures_util::StreamExt;
    let filter = format!("{}{}", store.prefix, key_filter);
    let err_ctx = || (store.name.clone(), key_filter.to_string());
    let consumer = store
        .stream
        .create_consumer(jetstream::consumer::push::OrderedConfig {
            name: Some(consumer_name(client)),
            deliver_subject: client.new_inbox(),
            description: Some("hyperhive prefix read".to_string()),
            filter_subject: filter,
            replay_policy: jetstream::consumer::ReplayPolicy::Instant,
            deliver_policy: jetstream::consumer::DeliverPolicy::LastPerSubject,
            ..Default::default()
        })
        .await
        .map_err(|source| {
            let (bucket, filter) = err_ctx();
            ReadPrefixError::Consumer {
                bucket,
                filter,
                source,
            }
        })?;
    let mut pending = consumer.cached_info().num_pending;
    let mut out = Vec::new();
    if pending == 0 {
        return Ok(out);
    }
    let read = async {
        let mut messages = consumer.messages().await.map_err(|e| {
            let (bucket, filter) = err_ctx();
            ReadPrefixError::Read {
                bucket,
                filter,
                source: Box::new(e),
            }
        })?;
        while pending > 0 {
            let Some(msg) = messages.next().await else {
                break;
            };
            let msg = msg.map_err(|e| {
                let (bucket, filter) = err_ctx();
                ReadPrefixError::Read {
                    bucket,
                    filter,
                    source: Box::new(e),
                }
            })?;
            let (revision, left) = match msg.info() {
                Ok(info) => (info.stream_sequence, info.pending),
                Err(_) => (0, pending.saturating_sub(1)),
            };
            pending = left;
            let op = msg
                .headers
                .as_ref()
                .and_then(|h| h.get("KV-Operation"))
                .map(|v| v.as_str().to_string());
            if matches!(op.as_deref(), Some("DEL") | Some("PURGE")) {
                continue;
            }
            let Some(key) = msg.subject.as_str().strip_prefix(store.prefix.as_str()) else {
                continue;
            };
            out.push(KvRecord {
                key: key.to_string(),
                revision,
                value: msg.payload.clone(),
            });
        }
        Ok(out)
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(r) => r,
        Err(_) => {
            let (bucket, filter) = err_ctx();
            Err(ReadPrefixError::Timeout {
                bucket,
                filter,
                timeout,
            })
        }
    }
}

/// A fresh consumer name. Named consumers are created on
/// `$JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>`, the one form whose
/// subject carries the filter (the server refuses a body whose filter
/// differs), so per-identity permissions can allow reading one key and no
/// other. An unnamed consumer is created on `…CREATE.<stream>`, which says
/// nothing about what it reads.
fn consumer_name(client: &async_nats::Client) -> String {
    let inbox = client.new_inbox();
    let unique = inbox.rsplit('.').next().unwrap_or(inbox.as_str());
    format!("hh-{unique}")
}

/// Where a [`watch_key`] starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchFrom {
    /// The key's current value (if any), then every update.
    Current,
    /// Every value from this revision on (use the pulled revision + 1).
    Revision(u64),
    /// Only updates written after the watch starts.
    New,
}

#[derive(Debug, thiserror::Error)]
pub enum WatchKeyError {
    #[error("cannot watch {key:?} in {bucket}")]
    Consumer {
        bucket: String,
        key: String,
        #[source]
        source: jetstream::stream::ConsumerError,
    },
    #[error("cannot watch {key:?} in {bucket}")]
    Subscribe {
        bucket: String,
        key: String,
        #[source]
        source: jetstream::consumer::StreamError,
    },
    #[error("watch of {key:?} in {bucket} failed; it keeps going")]
    Message {
        bucket: String,
        key: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// A stream of a key's entries from [`watch_key`]. An `Err` item (for
/// example a missed heartbeat) does not end it: the ordered consumer
/// recreates itself and the stream goes on.
pub type KeyWatch =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<kv::Entry, WatchKeyError>> + Send>>;

/// Watch one key (or a key filter such as `alpha.>`) of `store`.
///
/// The same as `Store::watch*` except that the consumer is named, so its
/// create request carries the filter in its subject and per-identity
/// permissions can allow it (see [`crate::permissions`]); `Store::watch`
/// creates an unnamed consumer, which a hive identity may not.
pub async fn watch_key(
    client: &async_nats::Client,
    store: &kv::Store,
    key: &str,
    from: WatchFrom,
) -> Result<KeyWatch, WatchKeyError> {
    use futures_util::StreamExt;
    use jetstream::consumer::DeliverPolicy;
    let deliver_policy = match from {
        WatchFrom::Current => DeliverPolicy::LastPerSubject,
        WatchFrom::Revision(start_sequence) => DeliverPolicy::ByStartSequence { start_sequence },
        WatchFrom::New => DeliverPolicy::New,
    };
    let bucket = store.name.clone();
    let consumer = store
        .stream
        .create_consumer(jetstream::consumer::push::OrderedConfig {
            name: Some(consumer_name(client)),
            deliver_subject: client.new_inbox(),
            description: Some("hyperhive key watch".to_string()),
            filter_subject: format!("{}{key}", store.prefix),
            replay_policy: jetstream::consumer::ReplayPolicy::Instant,
            deliver_policy,
            ..Default::default()
        })
        .await
        .map_err(|source| WatchKeyError::Consumer {
            bucket: bucket.clone(),
            key: key.to_string(),
            source,
        })?;
    let messages = consumer
        .messages()
        .await
        .map_err(|source| WatchKeyError::Subscribe {
            bucket: bucket.clone(),
            key: key.to_string(),
            source,
        })?;
    let prefix = store.prefix.clone();
    let key = key.to_string();
    let mut seen_current = false;
    Ok(Box::pin(messages.map(move |message| {
        let fail = |source: Box<dyn std::error::Error + Send + Sync>| WatchKeyError::Message {
            bucket: bucket.clone(),
            key: key.clone(),
            source,
        };
        let message = message.map_err(|e| fail(Box::new(e)))?;
        let info = message.info().map_err(|e| fail(e.to_string().into()))?;
        let operation = match message
            .headers
            .as_ref()
            .and_then(|h| h.get("KV-Operation"))
            .map(|v| v.as_str())
        {
            Some("DEL") => kv::Operation::Delete,
            Some("PURGE") => kv::Operation::Purge,
            _ => kv::Operation::Put,
        };
        let entry_key = message
            .subject
            .as_str()
            .strip_prefix(prefix.as_str())
            .unwrap_or(message.subject.as_str())
            .to_string();
        seen_current |= info.pending == 0;
        Ok(kv::Entry {
            bucket: bucket.clone(),
            key: entry_key,
            value: message.payload.clone(),
            revision: info.stream_sequence,
            delta: info.pending,
            created: info.published,
            operation,
            seen_current,
        })
    })))
}
