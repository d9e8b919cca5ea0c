//! # swarm-queue-client: the hyperhive wire contract
//!
//! Everything the hive and the controller say to each other is defined here,
//! once, so the two sides cannot drift:
//!
//! - [`names`]: `HiveName`, `AgentName`, `AccountName`, `GroupName`, validated DNS labels.
//! - [`subjects`]: every core-NATS subject and KV key format.
//! - [`buckets`]: the six KV buckets (`Bucket::ALL`; a hive uses the three
//!   of `Bucket::HIVE`), the settings they are created with and the check
//!   of an existing bucket's settings.
//! - [`direct`]: a hive's JetStream use: read a key by direct get, put its
//!   own key; no stream info, no consumer.
//! - [`payload`]: `Declaration`, `HiveStatus`, `DeployRequest`,
//!   `DeployReply`, `CredentialNotice`, their bounds and the one
//!   encode/decode path.
//! - [`credentials`]: sealing and opening secrets with NATS xkeys.
//! - [`connect`]: connection options and `ensure_connected`.
//! - [`jitter`]: the spread every fleet-wide timer gets (reconnects, periodic
//!   reads and publishes), so many hives do not act in lockstep.
//! - [`containers`]: container names, labels and mounts a hive uses in Docker.
//! - [`limits`]: every bound, in one place.
//! - [`http_host`]: the `Host` rule both daemons' HTTP listeners apply
//!   against DNS rebinding.
//! - [`redact`]: the userinfo of a URL (a token, a password) taken out of
//!   any text that leaves a process.
//! - [`permissions`]: the per-identity nats-server authorization (which
//!   subjects each hive and the controller may use).
//! - [`event_stream`]: the `hyperhive-events` stream, its subjects and the
//!   event payload.
//! - [`presence`]: the server's connect and disconnect events and its
//!   connection list, as the controller reads them.
//! - `cli` (feature `cli`): what both command lines share: exit codes,
//!   logging set-up (`--log-json`), `--json` output.
//! - `test_support` (feature `test-support`): payload builders for tests.
//!
//! Invariants: no payload carries a timestamp (freshness is the KV entry's
//! own time); a declaration's KV revision is its identity; decoders never
//! panic on arbitrary bytes.

pub mod buckets;
#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "nats")]
pub mod connect;
pub mod containers;
pub mod credentials;
#[cfg(feature = "nats")]
pub mod direct;
pub mod event_stream;
pub mod http_host;
pub mod jitter;
pub mod limits;
pub mod names;
pub mod payload;
pub mod permissions;
pub mod presence;
pub mod redact;
pub mod subjects;
#[cfg(feature = "test-support")]
pub mod test_support;

#[cfg(feature = "nats")]
pub use buckets::open_or_create;
pub use buckets::{Bucket, BucketSettings, Storage};
#[cfg(feature = "nats")]
pub use connect::{connect, connect_with, ensure_connected, Connection, NatsConfig, NotConnected};
pub use jitter::Jitter;
pub use names::{AccountName, AgentName, GroupName, HiveName, LeafSiteName, NameError, ObjectName};
pub use payload::{
    agent_fields_of, decode, encode, encode_pretty, AgentSpec, AgentStatus, BuildSpec,
    CredentialNotice, Declaration, DecodeError, Decoded, DeployReply, DeployRequest, EncodeError,
    ExitReport, HealthSpec, HiveState, HiveStatus, InvalidField, JobSummary, Level, LogFrame,
    LogLine, LogSource, LogsAck, LogsRequest, Observed, Payload, Power, RetryStatus, Unsettled,
    Warning, AGENT_FIELDS, AGENT_SPEC, BASELINE_AGENT_FIELDS,
};
pub use payload::{
    OnCredentialChange, PortSpec, Protocol, VolumeSpec, DEFAULT_STOP_GRACE_SECS,
    MAX_STOP_GRACE_SECS, MAX_UNHEALTHY_CHECKS, NETWORK_BRIDGE, NETWORK_NONE, PORT_FORM,
};
