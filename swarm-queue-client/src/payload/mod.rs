//! The payloads on the wire, their bounds, and the one way to encode and
//! decode each.
//!
//! Rules every payload follows:
//! - JSON; unknown fields are ignored; a missing required field is an error.
//! - `schema` is required. A newer schema than [`SCHEMA_VERSION`] decodes with
//!   a warning when its fields still fit; when they do not, the error says the
//!   payload is newer than this build.
//! - Every string and collection is bounded (see [`crate::limits`]) and the
//!   whole value is checked against [`MAX_VALUE_BYTES`] before it is parsed
//!   and before it is written.
//! - No payload carries a timestamp: freshness is the KV entry's own time.
//!
//! The parts, split by what each decides:
//! - `codec`: the one encode/decode path every payload goes through, and
//!   its errors.
//! - `declaration`: what the controller asks a hive to run
//!   (`hyperhive-wanted/<hive>`).
//! - `container`: the agent fields that shape its container beyond image
//!   and command (user, stop grace, ports, volumes, network) and the
//!   hive's reactions (to failed health checks, to a changed credential).
//! - `status`: what a hive says of itself (`hyperhive-status/<hive>`).
//! - `events`: the core-NATS requests and notices (deploy, credential).
//! - `logs`: an agent's output over NATS, its frames and flow control.
//! - `checks`: the bounds checks the validators share, and the sanitizers
//!   that make text from outside safe to carry.
//!
//! [`SCHEMA_VERSION`]: crate::limits::SCHEMA_VERSION
//! [`MAX_VALUE_BYTES`]: crate::limits::MAX_VALUE_BYTES

mod checks;
mod codec;
mod container;
mod declaration;
mod events;
mod logs;
mod status;

pub use checks::{sanitize_message, sanitize_short};
pub use codec::{
    decode, encode, encode_pretty, DecodeError, Decoded, EncodeError, InvalidField, Payload,
};
pub use container::{
    OnCredentialChange, PortSpec, Protocol, VolumeSpec, DEFAULT_STOP_GRACE_SECS,
    MAX_STOP_GRACE_SECS, MAX_UNHEALTHY_CHECKS, NETWORK_BRIDGE, NETWORK_NONE, PORT_FORM,
};
pub use declaration::{
    agent_fields_of, read_sha256_text, write_sha256_text, AgentSpec, BuildSpec, Declaration,
    HealthSpec, Power, AGENT_FIELDS, AGENT_SPEC, BASELINE_AGENT_FIELDS, MAX_HEALTH_SECS,
    SPEC_HASH_PREFIX,
};
pub use events::{CredentialNotice, DeployReply, DeployRequest};
pub use logs::{
    parse_age, LogFrame, LogLine, LogSource, LogsAck, LogsRequest, LOG_ACK_TIMEOUT_SECS,
    LOG_FRAME_OVERHEAD, LOG_HEARTBEAT_SECS, LOG_WINDOW, MAX_LOG_FRAME_BYTES, MAX_LOG_LINE_BYTES,
    MAX_LOG_LINE_COST, MAX_LOG_TAIL,
};
pub use status::{
    status_matches_key, AgentStatus, ExitReport, HiveState, HiveStatus, JobSummary, Level,
    Observed, RetryStatus, Unsettled, Warning,
};
