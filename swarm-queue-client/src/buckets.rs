//! The six JetStream key-value buckets and how they are opened. Hives use
//! three of them; `hyperhive-rollouts`, `hyperhive-deliveries` and
//! `hyperhive-maintenance` are the controllers' alone.
//!
//! `open_or_create` is safe to race: two processes opening the same bucket at
//! once both end up with a handle to the one bucket.

#[cfg(feature = "nats")]
use async_nats::jetstream::{self, kv};
use serde::{Deserialize, Serialize};

#[cfg(feature = "nats")]
use crate::limits::MAX_VALUE_BYTES;

/// `hyperhive-status/<hive>`: `HiveStatus`, written only by that hive.
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
/// `hyperhive-deliveries`: the forge webhook deliveries the controllers
/// have acted on (`delivery.<id>`) and the commit each agent was last
/// deployed for by one (`deployed.<hive>.<agent>`), so that a delivery is
/// acted on once however many controllers receive it. Entries expire after
/// the bucket's `max_age_secs`. Hives have no grant on it.
pub const DELIVERIES_BUCKET: &str = "hyperhive-deliveries";
/// Default `max_age_secs` of [`DELIVERIES_BUCKET`]: a day, longer than any
/// forge keeps redelivering one delivery.
pub const DEFAULT_DELIVERIES_MAX_AGE_SECS: u64 = 86_400;
/// The bounds of the deliveries bucket's `max_age_secs`: a minute to 30
/// days. Without an age every delivery id would be kept for ever.
pub const DELIVERIES_MAX_AGE_BOUNDS: (u64, u64) = (60, 30 * 86_400);

/// `hyperhive-maintenance/<hive>`: a maintenance hold on that hive (its
/// reason, time to live and who set it), read and written (compare-and-set)
/// only by controllers. The hold's start is the entry's own server
/// timestamp and it ends that plus its time to live: no writer stamps its
/// own time. Hives have no grant on it.
pub const MAINTENANCE_BUCKET: &str = "hyperhive-maintenance";

/// Which of the buckets; each has its own default history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bucket {
    Status,
    Wanted,
    Credentials,
    Rollouts,
    Deliveries,
    Maintenance,
}

impl Bucket {
    pub fn name(self) -> &'static str {
        match self {
            Bucket::Status => STATUS_BUCKET,
            Bucket::Wanted => WANTED_BUCKET,
            Bucket::Credentials => CREDENTIALS_BUCKET,
            Bucket::Rollouts => ROLLOUTS_BUCKET,
            Bucket::Deliveries => DELIVERIES_BUCKET,
            Bucket::Maintenance => MAINTENANCE_BUCKET,
        }
    }

    /// Every bucket, in a fixed order.
    pub const ALL: [Bucket; 6] = [
        Bucket::Status,
        Bucket::Wanted,
        Bucket::Credentials,
        Bucket::Rollouts,
        Bucket::Deliveries,
        Bucket::Maintenance,
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
            Bucket::Deliveries => {
                "hyperhive: forge webhook deliveries acted on, and each agent's last deployed commit"
            }
            Bucket::Maintenance => "hyperhive: the controllers' maintenance holds, keyed by hive name",
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
    /// Seconds an entry is kept (the stream's `max_age`); 0 keeps it for
    /// ever. Only the deliveries bucket expires its entries.
    pub max_age_secs: u64,
}

impl Default for BucketSettings {
    fn default() -> Self {
        Self {
            history: 1,
            storage: Storage::File,
            replicas: 1,
            max_age_secs: 0,
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
            Bucket::Deliveries => Self {
                max_age_secs: DEFAULT_DELIVERIES_MAX_AGE_SECS,
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
/// reach another (see [`unsafe_settings`]), and with `deny_delete` and
/// `deny_purge`: no message of any bucket can be erased, by sequence or by
/// a purge, whoever asks (nats-server never lets a stream update turn them
/// off again). `deny_purge` also refuses `Nats-Rollup` (nats-server takes
/// no roll-up without the purge permission), so a key is removed with a
/// delete marker, never purged.
#[cfg(feature = "nats")]
pub fn stream_config(bucket: Bucket, settings: &BucketSettings) -> jetstream::stream::Config {
    use jetstream::stream::{Config, DiscardPolicy, StorageType};
    Config {
        name: bucket.stream_name(),
        description: Some(bucket.description().to_string()),
        subjects: vec![bucket.key_subject(">")],
        max_messages_per_subject: settings.history,
        max_age: std::time::Duration::from_secs(settings.max_age_secs),
        max_message_size: MAX_VALUE_BYTES as i32,
        storage: match settings.storage {
            Storage::File => StorageType::File,
            Storage::Memory => StorageType::Memory,
        },
        num_replicas: settings.replicas,
        discard: DiscardPolicy::New,
        allow_rollup: false,
        deny_delete: true,
        deny_purge: true,
        allow_direct: true,
        ..Default::default()
    }
}

mod check;
pub use check::*;

#[cfg(all(test, feature = "nats"))]
mod tests {
    use super::*;
    use check::config_changes;

    #[test]
    fn created_buckets_pass_their_own_check() {
        for b in Bucket::ALL {
            let c = stream_config(b, &BucketSettings::default_for(b));
            assert_eq!(unsafe_settings(b, &c), vec![], "{b:?}");
            assert_eq!(c.subjects, vec![b.key_subject(">")]);
            assert!(c.allow_direct, "{b:?}");
            // No message of any bucket can be erased; nats-server refuses
            // roll-ups together with deny_purge.
            assert!(c.deny_delete && c.deny_purge && !c.allow_rollup, "{b:?}");
        }
    }

    /// What hyperhive made before: deny_delete but no deny_purge, and
    /// roll-ups on every bucket but the status bucket.
    fn made_before(b: Bucket) -> jetstream::stream::Config {
        jetstream::stream::Config {
            deny_purge: false,
            allow_rollup: b != Bucket::Status,
            ..stream_config(b, &BucketSettings::default_for(b))
        }
    }

    #[test]
    fn a_bucket_without_deny_purge_or_deny_delete_is_named() {
        for b in Bucket::ALL {
            let found = unsafe_settings(b, &made_before(b));
            let named: Vec<&str> = found.iter().map(|f| f.setting).collect();
            assert_eq!(named, vec!["deny_purge"], "{b:?}");
            let msg = found[0].to_string();
            assert!(
                msg.contains(b.name()) && msg.contains("deny_purge = false"),
                "{msg}"
            );
            let neither = jetstream::stream::Config {
                deny_delete: false,
                ..made_before(b)
            };
            let named: Vec<&str> = unsafe_settings(b, &neither)
                .iter()
                .map(|f| f.setting)
                .collect();
            assert_eq!(named, vec!["deny_delete", "deny_purge"], "{b:?}");
        }
    }

    #[test]
    fn the_fixed_config_passes_the_check_but_for_schedules() {
        use jetstream::stream::{Config, Republish};
        for b in Bucket::ALL {
            let old = made_before(b);
            let fixed = fixed_config(&old);
            assert_eq!(unsafe_settings(b, &fixed), vec![], "{b:?}");
            let mut expected = vec!["deny_purge false -> true"];
            if b != Bucket::Status {
                expected.push("allow_rollup_hdrs true -> false");
            }
            assert_eq!(config_changes(&old, &fixed), expected, "{b:?}");
            // Nothing else of the stream changes.
            assert_eq!(
                Config {
                    deny_purge: false,
                    allow_rollup: old.allow_rollup,
                    ..fixed.clone()
                },
                old
            );
            assert!(config_changes(&fixed, &fixed_config(&fixed)).is_empty());
        }
        let worst = Config {
            deny_delete: false,
            allow_rollup: true,
            allow_direct: false,
            allow_message_schedules: true,
            republish: Some(Republish {
                source: ">".into(),
                destination: "elsewhere.>".into(),
                headers_only: false,
            }),
            ..made_before(Bucket::Status)
        };
        let fixed = fixed_config(&worst);
        let left: Vec<&str> = unsafe_settings(Bucket::Status, &fixed)
            .iter()
            .map(|f| f.setting)
            .collect();
        assert_eq!(left, vec!["allow_msg_schedules"]);
        // What the fix leaves is exactly what is not fixed in place.
        for f in unsafe_settings(Bucket::Status, &worst) {
            assert_eq!(f.fixed_in_place(), !left.contains(&f.setting), "{f}");
        }
        assert_eq!(
            config_changes(&worst, &fixed),
            vec![
                "deny_delete false -> true",
                "deny_purge false -> true",
                "allow_rollup_hdrs true -> false",
                "republish (> to elsewhere.>) -> unset",
                "allow_direct false -> true",
            ]
        );
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
    }
}
