//! The four JetStream key-value buckets and how they are opened. Hives use
//! three of them; `hyperhive-rollouts` is the controller's alone.
//!
//! `open_or_create` is safe to race: two processes opening the same bucket at
//! once both end up with a handle to the one bucket.

#[cfg(feature = "nats")]
use async_nats::jetstream::{self, kv};
use serde::{Deserialize, Serialize};

#[cfg(feature = "nats")]
use crate::limits::MAX_VALUE_BYTES;

/// `hyperhive-status/<hive>`: `Readiness`, written only by that hive.
pub const STATUS_BUCKET: &str = "hyperhive-status";
/// `hyperhive-wanted/<hive>`: `Declaration`, written by the controller.
pub const WANTED_BUCKET: &str = "hyperhive-wanted";
/// `hyperhive-credentials/<hive>.<agent>.<account>`: a sealed `CredentialEnvelope`.
pub const CREDENTIALS_BUCKET: &str = "hyperhive-credentials";
/// `hyperhive-rollouts/current`: the state of the fleet's staged rollout,
/// read and written (compare-and-set) only by controllers. Hives have no
/// grant on it.
pub const ROLLOUTS_BUCKET: &str = "hyperhive-rollouts";
/// The head of the latest rollout in [`ROLLOUTS_BUCKET`]. It names the
/// parts (`current.<writer>.h<k>`, `current.<writer>.d<k>`) that hold the rest at exact
/// revisions, so every change of a rollout, however large, is committed by
/// one compare-and-set on this key.
pub const CURRENT_ROLLOUT_KEY: &str = "current";

/// Which of the buckets; each has its own default history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bucket {
    Status,
    Wanted,
    Credentials,
    Rollouts,
}

impl Bucket {
    pub fn name(self) -> &'static str {
        match self {
            Bucket::Status => STATUS_BUCKET,
            Bucket::Wanted => WANTED_BUCKET,
            Bucket::Credentials => CREDENTIALS_BUCKET,
            Bucket::Rollouts => ROLLOUTS_BUCKET,
        }
    }

    /// Every bucket, in a fixed order.
    pub const ALL: [Bucket; 4] = [
        Bucket::Status,
        Bucket::Wanted,
        Bucket::Credentials,
        Bucket::Rollouts,
    ];

    /// The buckets a hive reads or writes (its grants name only these).
    pub const HIVE: [Bucket; 3] = [Bucket::Status, Bucket::Wanted, Bucket::Credentials];

    /// The JetStream stream that backs the bucket: `KV_<bucket>`.
    pub fn stream_name(self) -> String {
        format!("KV_{}", self.name())
    }

    /// The subject one key is stored under: `$KV.<bucket>.<key>`. `key` may
    /// be a filter such as `alpha.>`.
    pub fn key_subject(self, key: &str) -> String {
        format!("$KV.{}.{key}", self.name())
    }

    /// The subject a put of `key` is published to: [`Bucket::key_subject`],
    /// or, when the bucket is in another JetStream `domain` (a hive on a
    /// leaf-node site), `$JS.<domain>.API.$KV.<bucket>.<key>`, which the
    /// hub maps to the key's subject. nats-server denies `$KV.>` itself on a
    /// leaf link between two domains, so only the mapped subject crosses.
    pub fn put_subject(self, key: &str, domain: Option<&str>) -> String {
        match domain {
            Some(d) => format!("$JS.{d}.API.{}", self.key_subject(key)),
            None => self.key_subject(key),
        }
    }

    /// The description a created bucket carries.
    pub fn description(self) -> &'static str {
        match self {
            Bucket::Status => "hyperhive: each hive's readiness, keyed by hive name",
            Bucket::Wanted => "hyperhive: each hive's declaration, keyed by hive name",
            Bucket::Credentials => "hyperhive: sealed credentials, keyed <hive>.<agent>.<account>",
            Bucket::Rollouts => "hyperhive: the controllers' staged rollout state (key current)",
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
            Bucket::Wanted | Bucket::Rollouts => Self {
                history: 10,
                ..Self::default()
            },
            _ => Self::default(),
        }
    }
}

/// A bucket could not be opened or created.
#[cfg(feature = "nats")]
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
        source: jetstream::context::CreateStreamError,
    },
    #[error(
        "creating KV bucket {bucket} got no answer within {after:?} (a stream without a \
         leader, or its JetStream domain out of reach); the next start or pull tries again"
    )]
    CreateTimedOut {
        bucket: &'static str,
        after: std::time::Duration,
    },
    #[error("could not open KV bucket {bucket}")]
    Open {
        bucket: &'static str,
        #[source]
        source: jetstream::context::KeyValueError,
    },
}

/// How long [`create_bucket`] waits for the server's answer.
#[cfg(feature = "nats")]
pub const CREATE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Open `bucket`, creating it with `settings` when it does not exist.
#[cfg(feature = "nats")]
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
    match js.create_stream(stream_config(bucket, settings)).await {
        Ok(_) => js
            .get_key_value(name)
            .await
            .map_err(|source| BucketError::Open {
                bucket: name,
                source,
            }),
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

/// Create `bucket` with [`stream_config`], in one request
/// (`$JS.API.STREAM.CREATE.KV_<bucket>`, no stream info first). What a hive
/// tries when it finds a bucket missing: on a server without per-identity
/// permissions (a single-host setup) it makes the bucket; under the
/// generated permissions the server refuses it and only the controller
/// creates buckets. A bucket that exists already is not an error.
///
/// It gives up after [`CREATE_TIMEOUT`]: a hive finds a bucket "missing"
/// (no responders) also while its stream elects a leader after a failover,
/// and then the create gets no answer; waiting the client's 10 s for it
/// held up the hive's wanted task (docs/benchmarks-scale.md, "Failover").
#[cfg(feature = "nats")]
pub async fn create_bucket(
    js: &jetstream::Context,
    bucket: Bucket,
    settings: &BucketSettings,
) -> Result<(), BucketError> {
    use jetstream::context::CreateStreamErrorKind;
    let create = js.create_stream(stream_config(bucket, settings));
    let created = tokio::time::timeout(CREATE_TIMEOUT, create)
        .await
        .map_err(|_| BucketError::CreateTimedOut {
            bucket: bucket.name(),
            after: CREATE_TIMEOUT,
        })?;
    match created {
        Ok(_) => Ok(()),
        Err(e) if matches!(e.kind(), CreateStreamErrorKind::JetStream(ref j) if j.error_code() == jetstream::ErrorCode::STREAM_NAME_EXIST) => {
            Ok(())
        }
        Err(source) => Err(BucketError::Create {
            bucket: bucket.name(),
            history: settings.history,
            replicas: settings.replicas,
            source,
        }),
    }
}

/// The stream behind `bucket` as hyperhive creates it: the layout of an
/// async-nats KV bucket (`$KV.<bucket>.>`, one message per key per history
/// slot, direct get, refuse rather than drop when full) with every
/// stream-wide header feature off that a writer of one key could use to
/// reach another (see [`unsafe_settings`]). The status bucket, the one hives
/// write, also refuses `Nats-Rollup`; the controller may roll up (purge) a
/// declaration or a credential, which only it writes.
#[cfg(feature = "nats")]
pub fn stream_config(bucket: Bucket, settings: &BucketSettings) -> jetstream::stream::Config {
    use jetstream::stream::{Config, DiscardPolicy, StorageType};
    Config {
        name: bucket.stream_name(),
        description: Some(bucket.description().to_string()),
        subjects: vec![bucket.key_subject(">")],
        max_messages_per_subject: settings.history,
        max_message_size: MAX_VALUE_BYTES as i32,
        storage: match settings.storage {
            Storage::File => StorageType::File,
            Storage::Memory => StorageType::Memory,
        },
        num_replicas: settings.replicas,
        discard: DiscardPolicy::New,
        allow_rollup: bucket != Bucket::Status,
        deny_delete: true,
        allow_direct: true,
        ..Default::default()
    }
}

/// A bucket setting that lets a writer of one key reach further, or that
/// breaks how hives read. Its message names the bucket, the setting, the
/// value found and why it matters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("KV bucket {bucket} (stream {stream}) has {setting} = {found}; it must be {wanted}: {why}")]
pub struct UnsafeSetting {
    pub bucket: &'static str,
    pub stream: String,
    /// The stream config field, as nats-server and `nats stream info` name it.
    pub setting: &'static str,
    pub found: String,
    pub wanted: &'static str,
    pub why: &'static str,
}

/// The settings of an existing bucket's stream that are not safe (pure;
/// checked by the controller at startup and by `nats-config --check`).
///
/// What each rule prevents, on nats-server 2.15 (shown by
/// `tests/tests/isolation_bus.rs`):
/// - `allow_rollup_hdrs` on the status bucket: a hive's put of its own key
///   with `Nats-Rollup: all` purges every other key of the stream.
/// - `allow_msg_schedules`: `Nats-Schedule-Target` makes the server write
///   another key later, and `Nats-Schedule-Source` copies another key's
///   value into it.
/// - `republish`: the server copies each put onto another subject, where a
///   hive's status could land on a subject only the controller may write.
/// - `allow_direct` off: hives read their keys only by direct get.
#[cfg(feature = "nats")]
pub fn unsafe_settings(bucket: Bucket, config: &jetstream::stream::Config) -> Vec<UnsafeSetting> {
    let mut out = Vec::new();
    let mut flag = |setting, found: String, wanted, why| {
        out.push(UnsafeSetting {
            bucket: bucket.name(),
            stream: bucket.stream_name(),
            setting,
            found,
            wanted,
            why,
        })
    };
    if bucket == Bucket::Status && config.allow_rollup {
        flag(
            "allow_rollup_hdrs",
            "true".into(),
            "false",
            "a hive's put of its own status with `Nats-Rollup: all` would purge every other hive's status",
        );
    }
    if config.allow_message_schedules {
        flag(
            "allow_msg_schedules",
            "true".into(),
            "false",
            "a scheduled message (`Nats-Schedule-Target`, `Nats-Schedule-Source`) writes or copies another key",
        );
    }
    if let Some(republish) = &config.republish {
        flag(
            "republish",
            format!("{} -> {}", republish.source, republish.destination),
            "unset",
            "every put would be copied by the server onto another subject, beyond the writer's permissions",
        );
    }
    if !config.allow_direct {
        flag(
            "allow_direct",
            "false".into(),
            "true",
            "hives read their own keys only by direct get, which such a bucket does not answer",
        );
    }
    out
}

/// A bucket's settings could not be read.
#[cfg(feature = "nats")]
#[derive(Debug, thiserror::Error)]
#[error("cannot read the settings of KV bucket {bucket} (stream {stream})")]
pub struct CheckError {
    pub bucket: &'static str,
    pub stream: String,
    #[source]
    pub source: jetstream::context::GetStreamError,
}

/// Read each existing bucket's stream config and return what is unsafe in
/// it. A bucket that does not exist yet is skipped: the controller creates
/// it with [`stream_config`].
#[cfg(feature = "nats")]
pub async fn check_buckets(js: &jetstream::Context) -> Result<Vec<UnsafeSetting>, CheckError> {
    use jetstream::context::GetStreamErrorKind;
    let mut out = Vec::new();
    for bucket in Bucket::ALL {
        let stream = match js.get_stream(bucket.stream_name()).await {
            Ok(s) => s,
            Err(e) if matches!(e.kind(), GetStreamErrorKind::JetStream(ref j) if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND) => {
                continue
            }
            Err(source) => {
                return Err(CheckError {
                    bucket: bucket.name(),
                    stream: bucket.stream_name(),
                    source,
                })
            }
        };
        let config = stream.cached_info().config.clone();
        out.extend(unsafe_settings(bucket, &config));
    }
    Ok(out)
}

#[cfg(all(test, feature = "nats"))]
mod tests {
    use super::*;

    #[test]
    fn created_buckets_pass_their_own_check() {
        for b in Bucket::ALL {
            let c = stream_config(b, &BucketSettings::default_for(b));
            assert_eq!(unsafe_settings(b, &c), vec![], "{b:?}");
            assert_eq!(c.subjects, vec![b.key_subject(">")]);
            assert!(c.allow_direct && c.deny_delete);
        }
        assert!(!stream_config(Bucket::Status, &BucketSettings::default()).allow_rollup);
        assert!(stream_config(Bucket::Wanted, &BucketSettings::default()).allow_rollup);
    }

    #[test]
    fn each_unsafe_setting_is_named() {
        use jetstream::stream::{Config, Republish};
        let base = |b| stream_config(b, &BucketSettings::default());
        let cases: Vec<(Bucket, Config, &str)> = vec![
            (
                Bucket::Status,
                Config {
                    allow_rollup: true,
                    ..base(Bucket::Status)
                },
                "allow_rollup_hdrs",
            ),
            (
                Bucket::Wanted,
                Config {
                    allow_message_schedules: true,
                    ..base(Bucket::Wanted)
                },
                "allow_msg_schedules",
            ),
            (
                Bucket::Status,
                Config {
                    allow_message_schedules: true,
                    ..base(Bucket::Status)
                },
                "allow_msg_schedules",
            ),
            (
                Bucket::Credentials,
                Config {
                    allow_direct: false,
                    ..base(Bucket::Credentials)
                },
                "allow_direct",
            ),
            (
                Bucket::Status,
                Config {
                    republish: Some(Republish {
                        source: ">".into(),
                        destination: "$KV.hyperhive-wanted.>".into(),
                        headers_only: false,
                    }),
                    ..base(Bucket::Status)
                },
                "republish",
            ),
        ];
        for (bucket, config, setting) in cases {
            let found = unsafe_settings(bucket, &config);
            assert_eq!(found.len(), 1, "{setting}: {found:?}");
            let msg = found[0].to_string();
            assert!(
                msg.contains(setting) && msg.contains(bucket.name()),
                "{msg}"
            );
        }
        // Rollup is the controller's own tool on the buckets only it writes.
        let wanted = Config {
            allow_rollup: true,
            ..base(Bucket::Wanted)
        };
        assert!(unsafe_settings(Bucket::Wanted, &wanted).is_empty());
    }
}
