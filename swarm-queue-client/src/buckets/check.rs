//! Checking an existing bucket's settings (`unsafe_settings`,
//! `check_buckets`: the controller's start and `nats-config --check`) and
//! fixing what can be fixed in place (`fixed_config`, `fix_buckets`:
//! `nats-config --check --fix`).

#[cfg(feature = "nats")]
use async_nats::jetstream;

#[cfg(feature = "nats")]
use super::*;

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

impl UnsafeSetting {
    /// Whether [`fix_buckets`] makes it safe in place; else the bucket must
    /// be deleted and made again (see [`fixed_config`]).
    pub fn fixed_in_place(&self) -> bool {
        self.setting != "allow_msg_schedules"
    }
}

/// The settings of an existing bucket's stream that are not safe (pure;
/// checked by the controller at startup and by `nats-config --check`).
///
/// What each rule prevents, on nats-server 2.15 (shown by
/// `tests/tests/e2e/isolation_bus.rs`):
/// - `allow_rollup_hdrs` on the status bucket: a hive's put of its own key
///   with `Nats-Rollup: all` purges every other key of the stream.
/// - `allow_msg_schedules`: `Nats-Schedule-Target` makes the server write
///   another key later, and `Nats-Schedule-Source` copies another key's
///   value into it.
/// - `republish`: the server copies each put onto another subject, where a
///   hive's status could land on a subject only the controller may write.
/// - `allow_direct` off: hives read their keys only by direct get.
/// - `deny_delete` or `deny_purge` off, on any bucket: an identity granted
///   `$JS.API.STREAM.MSG.DELETE` or `$JS.API.STREAM.PURGE` (none of the
///   generated ones is, but an operator's or a leaked admin's may be) could
///   erase a declaration, a credential or a rollout without leaving the
///   marker a delete leaves. [`fix_buckets`] turns both on.
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
    if !config.deny_delete {
        flag(
            "deny_delete",
            "false".into(),
            "true",
            "a message delete ($JS.API.STREAM.MSG.DELETE) would erase a value by sequence and leave no marker",
        );
    }
    if !config.deny_purge {
        flag(
            "deny_purge",
            "false".into(),
            "true",
            "a purge ($JS.API.STREAM.PURGE, or a put with Nats-Rollup) would erase keys or the whole bucket",
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
    let mut out = Vec::new();
    for bucket in Bucket::ALL {
        if let Some(config) = existing_config(js, bucket).await? {
            out.extend(unsafe_settings(bucket, &config));
        }
    }
    Ok(out)
}

/// `existing` with every setting [`unsafe_settings`] names that a stream
/// update can change set as [`stream_config`] sets it: `deny_delete` and
/// `deny_purge` on (nats-server lets an update turn them on, never off),
/// `allow_rollup_hdrs` off (it refuses roll-ups together with
/// `deny_purge`), `republish` unset, `allow_direct` on. Not
/// `allow_msg_schedules`: nats-server refuses to turn that off ("message
/// schedules can not be disabled"), so such a bucket must be made again.
#[cfg(feature = "nats")]
pub fn fixed_config(existing: &jetstream::stream::Config) -> jetstream::stream::Config {
    jetstream::stream::Config {
        deny_delete: true,
        deny_purge: true,
        allow_rollup: false,
        republish: None,
        allow_direct: true,
        ..existing.clone()
    }
}

/// A bucket whose stream [`fix_buckets`] updated, and each setting it
/// changed (`deny_purge false -> true`).
#[cfg(feature = "nats")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fixed {
    pub bucket: &'static str,
    pub stream: String,
    pub changes: Vec<String>,
}

#[cfg(feature = "nats")]
impl std::fmt::Display for Fixed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "KV bucket {} (stream {}): {}",
            self.bucket,
            self.stream,
            self.changes.join(", ")
        )
    }
}

/// A bucket's settings could not be read or updated.
#[cfg(feature = "nats")]
#[derive(Debug, thiserror::Error)]
pub enum FixError {
    #[error(transparent)]
    Read(#[from] CheckError),
    #[error(
        "cannot update KV bucket {bucket} (stream {stream}) to {changes}; the identity needs \
         $JS.API.STREAM.UPDATE.{stream} (in the authorization `swarm-controller nats-config` \
         prints)"
    )]
    Update {
        bucket: &'static str,
        stream: String,
        changes: String,
        #[source]
        source: jetstream::context::UpdateStreamError,
    },
}

/// Update each existing bucket's stream to its [`fixed_config`]
/// (`$JS.API.STREAM.UPDATE.KV_<bucket>`), and say what changed. A bucket
/// with nothing to change is left alone: running it twice changes nothing.
#[cfg(feature = "nats")]
pub async fn fix_buckets(js: &jetstream::Context) -> Result<Vec<Fixed>, FixError> {
    let mut out = Vec::new();
    for bucket in Bucket::ALL {
        let Some(config) = existing_config(js, bucket).await? else {
            continue;
        };
        let fixed = fixed_config(&config);
        let changes = config_changes(&config, &fixed);
        if changes.is_empty() {
            continue;
        }
        if let Err(source) = js.update_stream(&fixed).await {
            return Err(FixError::Update {
                bucket: bucket.name(),
                stream: bucket.stream_name(),
                changes: changes.join(", "),
                source,
            });
        }
        out.push(Fixed {
            bucket: bucket.name(),
            stream: bucket.stream_name(),
            changes,
        });
    }
    Ok(out)
}

/// The config of `bucket`'s stream, `None` when it does not exist.
#[cfg(feature = "nats")]
async fn existing_config(
    js: &jetstream::Context,
    bucket: Bucket,
) -> Result<Option<jetstream::stream::Config>, CheckError> {
    use jetstream::context::GetStreamErrorKind;
    match js.get_stream(bucket.stream_name()).await {
        Ok(stream) => Ok(Some(stream.cached_info().config.clone())),
        Err(e) if matches!(e.kind(), GetStreamErrorKind::JetStream(ref j) if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND) => {
            Ok(None)
        }
        Err(source) => Err(CheckError {
            bucket: bucket.name(),
            stream: bucket.stream_name(),
            source,
        }),
    }
}

/// The settings [`fixed_config`] may change that differ between `old` and
/// `new`, as `setting old -> new`.
#[cfg(feature = "nats")]
pub(super) fn config_changes(
    old: &jetstream::stream::Config,
    new: &jetstream::stream::Config,
) -> Vec<String> {
    let republish = |c: &jetstream::stream::Config| match &c.republish {
        Some(r) => format!("({} to {})", r.source, r.destination),
        None => "unset".to_string(),
    };
    [
        (
            "deny_delete",
            old.deny_delete.to_string(),
            new.deny_delete.to_string(),
        ),
        (
            "deny_purge",
            old.deny_purge.to_string(),
            new.deny_purge.to_string(),
        ),
        (
            "allow_rollup_hdrs",
            old.allow_rollup.to_string(),
            new.allow_rollup.to_string(),
        ),
        ("republish", republish(old), republish(new)),
        (
            "allow_direct",
            old.allow_direct.to_string(),
            new.allow_direct.to_string(),
        ),
    ]
    .into_iter()
    .filter(|(_, o, n)| o != n)
    .map(|(setting, o, n)| format!("{setting} {o} -> {n}"))
    .collect()
}
