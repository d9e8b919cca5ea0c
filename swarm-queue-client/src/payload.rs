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

use std::collections::BTreeMap;
use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::limits::*;
use crate::names::{AccountName, AgentName, HiveName};

/// A payload that could not be decoded. Each variant names the payload kind.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("{what} is {len} bytes, over the {max}-byte limit")]
    TooLarge {
        what: &'static str,
        len: usize,
        max: usize,
    },
    #[error("{what} is not valid: {source}")]
    Json {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("{what} has schema {found}, newer than schema {SCHEMA_VERSION} this build reads, and its fields no longer fit: {source}")]
    NewerSchema {
        what: &'static str,
        found: u32,
        #[source]
        source: serde_json::Error,
    },
    #[error("{what} has schema 0; schema versions start at 1")]
    ZeroSchema { what: &'static str },
    #[error("{what} is not valid: {reason}")]
    Invalid {
        what: &'static str,
        reason: InvalidField,
    },
}

/// A bound or rule a payload breaks that serde cannot express. Each variant
/// names the field (`agents.web.env key`, `warnings`) and what was wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InvalidField {
    #[error("{field} is {len} bytes, over the {max}-byte limit")]
    TooLong {
        field: String,
        len: usize,
        max: usize,
    },
    #[error("{field} contains a control character")]
    ControlCharacter { field: String },
    #[error("{field} has {count} entries, over the limit of {max}")]
    TooMany {
        field: String,
        count: usize,
        max: usize,
    },
    #[error("{field} is empty")]
    Empty { field: String },
    #[error("{field} is empty; give the program and its arguments")]
    EmptyCommand { field: String },
    #[error("{field} = {value}: it must be between 1 and {max}")]
    NotBetweenOneAnd { field: String, value: u64, max: u64 },
    #[error("{field} is {value}; it must be {allowed}")]
    OutOfRange {
        field: String,
        value: String,
        allowed: String,
    },
    #[error("{field} has neither image nor build; give one of them")]
    NoImageOrBuild { field: String },
    #[error("{field} {value:?} is not an image reference")]
    NotAnImageReference { field: String, value: String },
    #[error("{field} {value:?} is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")]
    NotAnEnvName { field: String, value: String },
    #[error("sender is not a public xkey (X…)")]
    NotAPublicXKey,
    #[error("sealed value is {len} hex characters, over the limit for a {max_secret}-byte secret")]
    SealedTooLong { len: usize, max_secret: usize },
}

/// A payload that may not be written because it breaks a bound or rule.
#[derive(Debug, thiserror::Error)]
#[error("refusing to write {what}: {reason}")]
pub struct EncodeError {
    pub what: &'static str,
    pub reason: String,
}

/// A decoded payload plus anything the reader should be told about it (for
/// example that it was written by a newer schema).
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded<T> {
    pub value: T,
    pub warnings: Vec<String>,
}

/// Implemented by every wire payload; gives one encode and one decode path.
pub trait Payload: Serialize + DeserializeOwned {
    /// What this payload is called in errors, for example "declaration".
    const WHAT: &'static str;
    fn schema(&self) -> u32;
    /// Check every bound and rule that serde cannot express.
    fn validate(&self) -> Result<(), InvalidField>;
}

#[derive(Deserialize)]
struct SchemaOnly {
    schema: u32,
}

/// Decode and validate a payload. Never panics, whatever the bytes.
pub fn decode<T: Payload>(bytes: &[u8]) -> Result<Decoded<T>, DecodeError> {
    if bytes.len() > MAX_VALUE_BYTES {
        return Err(DecodeError::TooLarge {
            what: T::WHAT,
            len: bytes.len(),
            max: MAX_VALUE_BYTES,
        });
    }
    let value: T = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(source) => {
            if let Ok(SchemaOnly { schema }) = serde_json::from_slice(bytes) {
                if schema > SCHEMA_VERSION {
                    return Err(DecodeError::NewerSchema {
                        what: T::WHAT,
                        found: schema,
                        source,
                    });
                }
            }
            return Err(DecodeError::Json {
                what: T::WHAT,
                source,
            });
        }
    };
    let schema = value.schema();
    if schema == 0 {
        return Err(DecodeError::ZeroSchema { what: T::WHAT });
    }
    value.validate().map_err(|reason| DecodeError::Invalid {
        what: T::WHAT,
        reason,
    })?;
    let mut warnings = Vec::new();
    if schema > SCHEMA_VERSION {
        warnings.push(format!(
            "{} has schema {schema}, newer than schema {SCHEMA_VERSION} this build reads; \
             fields this build does not know were ignored",
            T::WHAT
        ));
    }
    Ok(Decoded { value, warnings })
}

/// Validate and encode a payload, refusing anything over [`MAX_VALUE_BYTES`].
pub fn encode<T: Payload>(value: &T) -> Result<Vec<u8>, EncodeError> {
    let err = |reason| EncodeError {
        what: T::WHAT,
        reason,
    };
    if value.schema() == 0 {
        return Err(err("schema 0 is not a schema version".into()));
    }
    value.validate().map_err(|e| err(e.to_string()))?;
    let bytes = serde_json::to_vec(value).map_err(|e| err(e.to_string()))?;
    if bytes.len() > MAX_VALUE_BYTES {
        return Err(err(format!(
            "it encodes to {} bytes, over the {MAX_VALUE_BYTES}-byte limit",
            bytes.len()
        )));
    }
    Ok(bytes)
}

/// Pretty JSON for people (`nats kv get` shows whatever was stored, so the
/// hive stores this form). Same rules as [`encode`].
pub fn encode_pretty<T: Payload>(value: &T) -> Result<Vec<u8>, EncodeError> {
    let compact = encode(value)?;
    let pretty = serde_json::to_vec_pretty(value).map_err(|e| EncodeError {
        what: T::WHAT,
        reason: e.to_string(),
    })?;
    Ok(if pretty.len() <= MAX_VALUE_BYTES {
        pretty
    } else {
        compact
    })
}

// ---------------------------------------------------------------------------
// Small checks shared by the validators.

fn check_len(field: &str, value: &str, max: usize) -> Result<(), InvalidField> {
    if value.len() > max {
        return Err(InvalidField::TooLong {
            field: field.to_string(),
            len: value.len(),
            max,
        });
    }
    Ok(())
}

fn check_text(field: &str, value: &str, max: usize) -> Result<(), InvalidField> {
    check_len(field, value, max)?;
    if value.chars().any(char::is_control) {
        return Err(InvalidField::ControlCharacter {
            field: field.to_string(),
        });
    }
    Ok(())
}

fn check_count(field: &str, count: usize, max: usize) -> Result<(), InvalidField> {
    if count > max {
        return Err(InvalidField::TooMany {
            field: field.to_string(),
            count,
            max,
        });
    }
    Ok(())
}

/// Make a free-form message safe to carry: control characters become spaces
/// and the length is clipped. Use it on every error text put in a payload.
pub fn sanitize_message(message: &str) -> String {
    let cleaned: String = message
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    clip_message(&cleaned)
}

/// Make a short field read from outside (a Docker label, a container name)
/// safe to carry: control characters become `?` and the length is clipped
/// to [`MAX_SHORT_LEN`], so odd input can never make a payload invalid.
pub fn sanitize_short(value: &str) -> String {
    let cleaned: String = value
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    crate::limits::clip(&cleaned, MAX_SHORT_LEN)
}

impl AgentStatus {
    /// The same status with every free-form field made valid: a publish is
    /// refused only for a bug, never because of what Docker showed.
    pub fn sanitized(mut self) -> AgentStatus {
        let short = |v: &mut Option<String>| {
            if let Some(s) = v.as_mut() {
                *s = sanitize_short(s);
            }
        };
        let long = |v: &mut Option<String>| {
            if let Some(s) = v.as_mut() {
                *s = sanitize_message(s);
            }
        };
        short(&mut self.spec);
        short(&mut self.declared_spec);
        short(&mut self.image_progress);
        short(&mut self.image_digest);
        short(&mut self.health);
        if let Some(j) = self.last_job.as_mut() {
            j.kind = sanitize_short(&j.kind);
            j.state = sanitize_short(&j.state);
            long(&mut j.error);
        }
        if let Some(r) = self.retry.as_mut() {
            short(&mut r.step);
            long(&mut r.error);
        }
        self
    }
}

// ---------------------------------------------------------------------------
// Declaration: hyperhive-wanted/<hive>

/// Whether an agent should be running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Power {
    #[default]
    Up,
    Down,
}

impl fmt::Display for Power {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Power::Up => "up",
            Power::Down => "down",
        })
    }
}

/// Build an image from a context instead of pulling one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BuildSpec {
    /// A directory on the hive, or a git URL.
    pub context: String,
    /// Git ref to check out when `context` is a repository.
    #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
    pub git_ref: Option<String>,
    /// Dockerfile path inside the context (default `Dockerfile`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dockerfile: Option<String>,
}

/// How one agent should run. Every field but `image` (or `build`) is optional.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct AgentSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<BuildSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Never secrets: those go through the credentials bucket.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Default power when the agent is first deployed; an operator's later
    /// start or stop on the hive wins over it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power: Option<Power>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<AccountName>,
    /// A health check, mapped to Docker's; without one the image's own
    /// HEALTHCHECK (if any) applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthSpec>,
}

/// How Docker checks an agent's health: `command` runs in the container
/// (exec form, no shell) every `interval_secs`; `retries` failures in a row
/// make it unhealthy; failures in the first `start_period_secs` do not
/// count. Unset durations take Docker's defaults (30 s, 30 s, 3, 0 s).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct HealthSpec {
    pub command: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_period_secs: Option<u64>,
}

/// Longest health-check interval, timeout or start period, in seconds.
pub const MAX_HEALTH_SECS: u64 = 3600;

impl HealthSpec {
    fn validate(&self, field: &str) -> Result<(), InvalidField> {
        if self.command.is_empty() {
            return Err(InvalidField::EmptyCommand {
                field: format!("{field}.command"),
            });
        }
        check_count(
            &format!("{field}.command"),
            self.command.len(),
            MAX_HEALTH_ARGS,
        )?;
        for (i, arg) in self.command.iter().enumerate() {
            check_text(&format!("{field}.command[{i}]"), arg, MAX_HEALTH_ARG_LEN)?;
        }
        for (name, v) in [
            ("interval_secs", self.interval_secs),
            ("timeout_secs", self.timeout_secs),
            ("start_period_secs", self.start_period_secs),
        ] {
            if let Some(v) = v.filter(|v| !(1..=MAX_HEALTH_SECS).contains(v)) {
                return Err(InvalidField::NotBetweenOneAnd {
                    field: format!("{field}.{name}"),
                    value: v,
                    max: MAX_HEALTH_SECS,
                });
            }
        }
        if let Some(r) = self.retries.filter(|r| !(1..=100).contains(r)) {
            return Err(InvalidField::NotBetweenOneAnd {
                field: format!("{field}.retries"),
                value: u64::from(r),
                max: 100,
            });
        }
        Ok(())
    }
}

impl AgentSpec {
    /// `sha256:<hex>` over everything that needs a new container when it
    /// changes. Power is left out: it is a start or a stop, not a rebuild.
    /// Optional fields are skipped when absent, so adding a field to the
    /// contract does not change the hash of specs that do not use it.
    pub fn spec_hash(&self) -> String {
        let hashed = AgentSpec {
            power: None,
            ..self.clone()
        };
        // Serializing a struct of strings, maps and numbers cannot fail.
        let bytes = serde_json::to_vec(&hashed).unwrap_or_default();
        format!("sha256:{}", hex::encode(Sha256::digest(&bytes)))
    }

    pub fn validate(&self, agent: &AgentName) -> Result<(), InvalidField> {
        let f = |name: &str| format!("agents.{agent}.{name}");
        match (&self.image, &self.build) {
            (None, None) => {
                return Err(InvalidField::NoImageOrBuild {
                    field: format!("agents.{agent}"),
                })
            }
            (Some(image), _) => {
                check_text(&f("image"), image, MAX_IMAGE_LEN)?;
                if image.trim().is_empty() || image.contains(char::is_whitespace) {
                    return Err(InvalidField::NotAnImageReference {
                        field: f("image"),
                        value: image.clone(),
                    });
                }
            }
            _ => {}
        }
        if let Some(build) = &self.build {
            check_text(&f("build.context"), &build.context, MAX_BUILD_FIELD_LEN)?;
            if build.context.trim().is_empty() {
                return Err(InvalidField::Empty {
                    field: f("build.context"),
                });
            }
            if let Some(r) = &build.git_ref {
                check_text(&f("build.ref"), r, MAX_BUILD_FIELD_LEN)?;
            }
            if let Some(d) = &build.dockerfile {
                check_text(&f("build.dockerfile"), d, MAX_BUILD_FIELD_LEN)?;
            }
        }
        if let Some(health) = &self.health {
            health.validate(&f("health"))?;
        }
        if let Some(command) = &self.command {
            check_count(&f("command"), command.len(), MAX_COMMAND_ARGS)?;
            for (i, arg) in command.iter().enumerate() {
                check_text(&format!("{}[{i}]", f("command")), arg, MAX_ARG_LEN)?;
            }
        }
        check_count(&f("env"), self.env.len(), MAX_ENV_VARS)?;
        for (k, v) in &self.env {
            check_len(&f("env key"), k, MAX_ENV_KEY_LEN)?;
            let valid_key = k
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid_key {
                return Err(InvalidField::NotAnEnvName {
                    field: f("env key"),
                    value: k.clone(),
                });
            }
            check_text(&format!("{}.{k}", f("env")), v, MAX_ENV_VALUE_LEN)?;
        }
        if let Some(mb) = self.memory_mb {
            if !(MIN_MEMORY_MB..=MAX_MEMORY_MB).contains(&mb) {
                return Err(InvalidField::OutOfRange {
                    field: f("memory_mb"),
                    value: mb.to_string(),
                    allowed: format!("{MIN_MEMORY_MB} to {MAX_MEMORY_MB}"),
                });
            }
        }
        if let Some(cpus) = self.cpus {
            if !(cpus.is_finite() && cpus > 0.0 && cpus <= MAX_CPUS) {
                return Err(InvalidField::OutOfRange {
                    field: f("cpus"),
                    value: cpus.to_string(),
                    allowed: format!("above 0 and at most {MAX_CPUS}"),
                });
            }
        }
        check_count(
            &f("credentials"),
            self.credentials.len(),
            MAX_CREDENTIALS_PER_AGENT,
        )?;
        Ok(())
    }
}

/// What one hive should run. Its KV revision is its identity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Declaration {
    pub schema: u32,
    /// Required: a declaration without `agents` is refused, never read as
    /// "nothing is wanted". `{}` is an explicit empty declaration.
    pub agents: BTreeMap<AgentName, AgentSpec>,
}

impl Declaration {
    pub fn new(agents: BTreeMap<AgentName, AgentSpec>) -> Self {
        Self {
            schema: SCHEMA_VERSION,
            agents,
        }
    }
}

impl Payload for Declaration {
    const WHAT: &'static str = "declaration";
    fn schema(&self) -> u32 {
        self.schema
    }
    fn validate(&self) -> Result<(), InvalidField> {
        check_count("agents", self.agents.len(), MAX_AGENTS_PER_HIVE)?;
        for (name, spec) in &self.agents {
            spec.validate(name)?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Readiness: hyperhive-status/<hive>

/// The hive's own judgement of itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HiveState {
    Ok,
    Degraded,
    Failing,
    /// Published once on a clean shutdown.
    Stopped,
    /// A state this build does not know (written by a newer hive).
    #[serde(other)]
    Unknown,
}

impl fmt::Display for HiveState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HiveState::Ok => "ok",
            HiveState::Degraded => "degraded",
            HiveState::Failing => "failing",
            HiveState::Stopped => "stopped",
            HiveState::Unknown => "unknown",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Info,
    Warn,
    Error,
    #[serde(other)]
    Unknown,
}

/// One condition the operator should know about, keyed so it can be raised
/// and cleared by the part of the hive that owns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Warning {
    pub key: String,
    pub level: Level,
    pub message: String,
}

impl Warning {
    pub fn new(key: &str, level: Level, message: impl AsRef<str>) -> Self {
        Self {
            key: crate::limits::clip(key, MAX_WARNING_KEY_LEN),
            level,
            message: sanitize_message(message.as_ref()),
        }
    }
}

/// What Docker shows for an agent's container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Observed {
    Running,
    /// Created or exited: it exists but is not running.
    Stopped,
    /// No container.
    Missing,
    /// Docker could not be asked.
    #[serde(other)]
    Unknown,
}

impl fmt::Display for Observed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Observed::Running => "running",
            Observed::Stopped => "stopped",
            Observed::Missing => "missing",
            Observed::Unknown => "unknown",
        })
    }
}

/// The outcome of the last job for an agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSummary {
    pub id: u64,
    /// `first_deploy`, `rebuild`, `retire` or `reconcile`.
    pub kind: String,
    /// `pending`, `running`, `done` or `failed`.
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One agent as the hive sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentStatus {
    pub wanted: Power,
    pub observed: Observed,
    /// Spec hash of the running container (`sha256:…`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<String>,
    /// Spec hash the current declaration asks for, if declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declared_spec: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_job: Option<JobSummary>,
    /// While the agent's image is being pulled: `layers 2/3, 1.5/4.0 MB`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_progress: Option<String>,
    /// The repo digest (`sha256:…`) of the image the agent's container
    /// runs; absent for a locally built image or when there is no container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_digest: Option<String>,
    /// What Docker's health check says: `starting`, `healthy` or
    /// `unhealthy`; absent when the container has no health check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<String>,
    /// Present while the agent is not as declared, its last job failed and
    /// the hive is backing off before it tries again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryStatus>,
}

/// An agent the hive keeps trying to bring to its declared state.
///
/// No timestamps ("nothing stamps its own time"): `next_try_in_secs` counts
/// from the moment the status was written, so a reader adds it to the KV
/// entry's own timestamp to learn when the next try is due.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryStatus {
    /// The node that failed last (`image`, `create`, `start`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// Failed jobs in a row for this agent (1 after the first failure).
    pub attempts: u32,
    /// Seconds from this status's write until the next try; 0 when due.
    pub next_try_in_secs: u64,
    /// Why the last try failed (≤ `MAX_MESSAGE_LEN` bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A hive's readiness, published under its own key. No timestamps: the KV
/// entry's own time is the only freshness there is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Readiness {
    pub schema: u32,
    pub hive: HiveName,
    pub ready: bool,
    pub state: HiveState,
    #[serde(default)]
    pub warnings: Vec<Warning>,
    /// The declaration revision this hive last fully converged on.
    #[serde(default)]
    pub converged_revision: Option<u64>,
    /// The newest declaration revision this hive has read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen_revision: Option<u64>,
    #[serde(default)]
    pub agents: BTreeMap<AgentName, AgentStatus>,
    /// The hive's public xkey, to seal credentials to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xkey: Option<String>,
    pub version: String,
}

impl Payload for Readiness {
    const WHAT: &'static str = "readiness";
    fn schema(&self) -> u32 {
        self.schema
    }
    fn validate(&self) -> Result<(), InvalidField> {
        check_count("warnings", self.warnings.len(), MAX_WARNINGS)?;
        for w in &self.warnings {
            check_text("warning key", &w.key, MAX_WARNING_KEY_LEN)?;
            check_text(&format!("warning {}", w.key), &w.message, MAX_MESSAGE_LEN)?;
        }
        check_count("agents", self.agents.len(), MAX_AGENTS_PER_HIVE)?;
        for (name, a) in &self.agents {
            for (field, v) in [
                ("spec", &a.spec),
                ("declared_spec", &a.declared_spec),
                ("image_progress", &a.image_progress),
                ("image_digest", &a.image_digest),
                ("health", &a.health),
            ] {
                if let Some(v) = v {
                    check_text(&format!("agents.{name}.{field}"), v, MAX_SHORT_LEN)?;
                }
            }
            if let Some(job) = &a.last_job {
                check_text(
                    &format!("agents.{name}.last_job.kind"),
                    &job.kind,
                    MAX_SHORT_LEN,
                )?;
                check_text(
                    &format!("agents.{name}.last_job.state"),
                    &job.state,
                    MAX_SHORT_LEN,
                )?;
                if let Some(e) = &job.error {
                    check_text(&format!("agents.{name}.last_job.error"), e, MAX_MESSAGE_LEN)?;
                }
            }
            if let Some(r) = &a.retry {
                if let Some(step) = &r.step {
                    check_text(&format!("agents.{name}.retry.step"), step, MAX_SHORT_LEN)?;
                }
                if let Some(e) = &r.error {
                    check_text(&format!("agents.{name}.retry.error"), e, MAX_MESSAGE_LEN)?;
                }
            }
        }
        if let Some(x) = &self.xkey {
            check_text("xkey", x, MAX_SHORT_LEN)?;
        }
        check_text("version", &self.version, MAX_SHORT_LEN)?;
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Events

/// `hyperhive.hive.<hive>.deploy`: deploy or redeploy one agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeployRequest {
    pub schema: u32,
    pub agent: AgentName,
}

impl DeployRequest {
    pub fn new(agent: AgentName) -> Self {
        Self {
            schema: SCHEMA_VERSION,
            agent,
        }
    }
}

impl Payload for DeployRequest {
    const WHAT: &'static str = "deploy request";
    fn schema(&self) -> u32 {
        self.schema
    }
    fn validate(&self) -> Result<(), InvalidField> {
        Ok(())
    }
}

/// The reply to a deploy request: the queued job, or why not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum DeployReply {
    Queued { job: u64 },
    Refused { error: String },
}

impl DeployReply {
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        if bytes.len() > MAX_VALUE_BYTES {
            return Err(DecodeError::TooLarge {
                what: "deploy reply",
                len: bytes.len(),
                max: MAX_VALUE_BYTES,
            });
        }
        serde_json::from_slice(bytes).map_err(|source| DecodeError::Json {
            what: "deploy reply",
            source,
        })
    }

    pub fn encode(&self) -> Vec<u8> {
        let clipped = match self {
            DeployReply::Refused { error } => DeployReply::Refused {
                error: sanitize_message(error),
            },
            q => q.clone(),
        };
        // A one-field struct of a number or a string always serializes.
        serde_json::to_vec(&clipped).unwrap_or_default()
    }
}

/// `hyperhive.hive.<hive>.credential`: names only, never a secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialNotice {
    pub schema: u32,
    pub agent: AgentName,
    pub account: AccountName,
}

impl CredentialNotice {
    pub fn new(agent: AgentName, account: AccountName) -> Self {
        Self {
            schema: SCHEMA_VERSION,
            agent,
            account,
        }
    }
}

impl Payload for CredentialNotice {
    const WHAT: &'static str = "credential notice";
    fn schema(&self) -> u32 {
        self.schema
    }
    fn validate(&self) -> Result<(), InvalidField> {
        Ok(())
    }
}

/// Whether `hive` is the hive this readiness is about; a status stored under
/// another hive's key is not evidence about that hive.
pub fn readiness_matches_key(readiness: &Readiness, key: &HiveName) -> bool {
    &readiness.hive == key
}
