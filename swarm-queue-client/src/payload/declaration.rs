//! The declaration: what the controller asks one hive to run, stored under
//! `hyperhive-wanted/<hive>`. Its KV revision is its identity; an agent's
//! spec hash decides whether a change needs a new container.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::checks::{check_count, check_len, check_text, AgentField};
use super::codec::{InvalidField, Payload};
#[cfg(doc)]
use super::container::PortSpec;
use super::container::{
    check_network, check_port_clashes, check_ports, check_user, check_volumes, OnCredentialChange,
    VolumeSpec, DEFAULT_STOP_GRACE_SECS, MAX_STOP_GRACE_SECS, MAX_UNHEALTHY_CHECKS,
};
use crate::limits::*;
use crate::names::{AccountName, AgentName, ObjectName};

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
    /// How long the agent must run before it counts as up; without it the
    /// hive's own `min_running_secs` applies. Not in the spec hash: it
    /// changes how the hive judges the container, not the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_running_secs: Option<u64>,
    /// Run as this user (`USER` or `USER:GROUP`, names or numbers) instead
    /// of the image's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Seconds between SIGTERM and SIGKILL on every stop, rebuild and
    /// retire; [`DEFAULT_STOP_GRACE_SECS`] when unset, at most
    /// [`MAX_STOP_GRACE_SECS`]. Set on the container, so it is hashed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_grace_secs: Option<u64>,
    /// Published ports, `[ADDRESS:]HOST:CONTAINER[/tcp|/udp]`
    /// ([`PortSpec`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<String>,
    /// Named volumes and host paths ([`VolumeSpec`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<VolumeSpec>,
    /// `bridge` (Docker's default, also when unset), `none`, or a network
    /// the hive makes for its agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<ObjectName>,
    /// Restart the agent (through the crash-loop backoff) after this many
    /// failed health checks in a row. How the hive judges, not the
    /// container: not hashed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_on_unhealthy: Option<u32>,
    /// What a changed or deleted credential does to the agent. Not hashed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_credential_change: Option<OnCredentialChange>,
    /// Fields this build does not know (a newer writer's), kept so that a
    /// reader can say it ignored them ([`Payload`]'s decode warns) and a
    /// re-write does not drop them. Never in the spec hash.
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unknown: BTreeMap<String, serde_json::Value>,
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
    fn validate(&self, field: impl fmt::Display + Copy) -> Result<(), InvalidField> {
        if self.command.is_empty() {
            return Err(InvalidField::EmptyCommand {
                field: format!("{field}.command"),
            });
        }
        check_count(
            format_args!("{field}.command"),
            self.command.len(),
            MAX_HEALTH_ARGS,
        )?;
        for (i, arg) in self.command.iter().enumerate() {
            check_text(
                format_args!("{field}.command[{i}]"),
                arg,
                MAX_HEALTH_ARG_LEN,
            )?;
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

/// The version of the agent spec this build knows: each release that adds
/// an agent field raises it and adds the field to [`AGENT_FIELDS`]. A hive
/// publishes it in its status ([`super::HiveStatus::agent_spec`]), so that
/// a controller can refuse to write a field a hive would not honour.
///
/// 2: [`BASELINE_AGENT_FIELDS`] and `min_running_secs`.
/// 3: and `user`, `stop_grace_secs`, `ports`, `volumes`, `network`,
/// `restart_on_unhealthy` and `on_credential_change`.
pub const AGENT_SPEC: u32 = 3;

/// Every agent field this build knows, as the declaration spells it, in
/// the order they were added (a new one goes last).
pub const AGENT_FIELDS: &[&str] = &[
    "image",
    "build",
    "command",
    "env",
    "power",
    "memory_mb",
    "cpus",
    "credentials",
    "health",
    "min_running_secs",
    "user",
    "stop_grace_secs",
    "ports",
    "volumes",
    "network",
    "restart_on_unhealthy",
    "on_credential_change",
];

/// What a hive that publishes no [`AGENT_SPEC`] (one built before it did)
/// is taken to know: the fields of the first agent spec, the first nine of
/// [`AGENT_FIELDS`]. `min_running_secs` is not among them: such a hive may
/// be older than it.
pub const BASELINE_AGENT_FIELDS: &[&str] = AGENT_FIELDS.split_at(9).0;

/// The agent fields a hive publishing `agent_spec` knows, as far as this
/// build can tell: none published (a hive built before it said) or 1, the
/// baseline; 2, the baseline and `min_running_secs`; this build's or
/// newer, every field this build knows.
pub fn agent_fields_of(agent_spec: Option<u32>) -> &'static [&'static str] {
    match agent_spec {
        None | Some(0..=1) => BASELINE_AGENT_FIELDS,
        Some(2) => AGENT_FIELDS.split_at(10).0,
        Some(_) => AGENT_FIELDS,
    }
}

/// What every spec hash starts with: the name of its algorithm.
pub const SPEC_HASH_PREFIX: &str = "sha256:";
const HEX: &[u8; 16] = b"0123456789abcdef";

/// Write a SHA-256 digest as a spec hash is written: `sha256:` and 64
/// lowercase hex digits (the form of [`AgentSpec::spec_hash`], and of the
/// image digests Docker reports).
pub fn write_sha256_text(digest: &[u8; 32], out: &mut impl std::fmt::Write) -> std::fmt::Result {
    out.write_str(SPEC_HASH_PREFIX)?;
    for b in digest {
        out.write_char(char::from(HEX[usize::from(b >> 4)]))?;
        out.write_char(char::from(HEX[usize::from(b & 0xf)]))?;
    }
    Ok(())
}

/// The digest a text written by [`write_sha256_text`] holds, when the text
/// is exactly that form (`sha256:` and 64 lowercase hex digits). One table
/// lookup a digit and one check at the end, no branch a digit: the
/// controller parses six of these a hive when it reads the fleet, and a
/// loop that returned at the first bad digit was 5% of a status read.
pub fn read_sha256_text(text: &str) -> Option<[u8; 32]> {
    const NOT_HEX: u8 = 0xFF;
    static DIGITS: [u8; 256] = {
        let mut table = [NOT_HEX; 256];
        let mut i = 0;
        while i < 16 {
            table[HEX[i] as usize] = i as u8;
            i += 1;
        }
        table
    };
    let hex: &[u8; 64] = text
        .strip_prefix(SPEC_HASH_PREFIX)?
        .as_bytes()
        .try_into()
        .ok()?;
    let mut out = [0u8; 32];
    let mut seen = 0u8;
    for (byte, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
        let (high, low) = (DIGITS[usize::from(pair[0])], DIGITS[usize::from(pair[1])]);
        seen |= high | low;
        *byte = high << 4 | low;
    }
    // A digit is at most 15: any high bit came from a byte that is not one.
    (seen & 0xF0 == 0).then_some(out)
}

impl AgentSpec {
    /// The fields this spec sets, as the declaration spells them (unset
    /// optional fields are not written, so they are not counted), unknown
    /// ones included.
    pub fn set_fields(&self) -> Vec<String> {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(m)) => m.keys().cloned().collect(),
            _ => Vec::new(),
        }
    }

    /// `sha256:<hex>` over everything that needs a new container when it
    /// changes. Power is left out: it is a start or a stop, not a rebuild;
    /// so are `min_running_secs`, `restart_on_unhealthy` and
    /// `on_credential_change`, which only change how the hive judges and
    /// treats the container; and so are unknown fields, which an older reader
    /// could not hash the way their writer does. Optional fields are
    /// skipped when absent, so adding a field to the contract does not
    /// change the hash of specs that do not use it.
    pub fn spec_hash(&self) -> String {
        self.clone().into_spec_hash()
    }

    /// [`AgentSpec::spec_hash`] of a spec the caller is done with: the same
    /// hash without a copy of the spec.
    pub fn into_spec_hash(self) -> String {
        let mut out = String::with_capacity(SPEC_HASH_PREFIX.len() + 64);
        // Writing into a String cannot fail.
        let _ = write_sha256_text(&self.into_spec_digest(), &mut out);
        out
    }

    /// The 32 bytes that [`AgentSpec::into_spec_hash`] writes in hex (the
    /// controller hashes every agent of every declaration it reads and
    /// keeps only these).
    pub fn into_spec_digest(self) -> [u8; 32] {
        let hashed = AgentSpec {
            power: None,
            min_running_secs: None,
            restart_on_unhealthy: None,
            on_credential_change: None,
            unknown: BTreeMap::new(),
            ..self
        };
        // Serialized straight into the hash, with no copy of the JSON.
        // Serializing a struct of strings, maps and numbers cannot fail.
        let mut hasher = Sha256::new();
        let _ = serde_json::to_writer(&mut hasher, &hashed);
        hasher.finalize().into()
    }

    pub fn validate(&self, agent: &AgentName) -> Result<(), InvalidField> {
        let f = |name| AgentField(agent, name);
        match (&self.image, &self.build) {
            (None, None) => {
                return Err(InvalidField::NoImageOrBuild {
                    field: format!("agents.{agent}"),
                })
            }
            (Some(image), _) => {
                check_text(f("image"), image, MAX_IMAGE_LEN)?;
                if image.trim().is_empty() || image.contains(char::is_whitespace) {
                    return Err(InvalidField::NotAnImageReference {
                        field: f("image").to_string(),
                        value: image.clone(),
                    });
                }
            }
            _ => {}
        }
        if let Some(build) = &self.build {
            build.validate(f("build"))?;
        }
        if let Some(health) = &self.health {
            health.validate(f("health"))?;
        }
        if let Some(command) = &self.command {
            check_count(f("command"), command.len(), MAX_COMMAND_ARGS)?;
            for (i, arg) in command.iter().enumerate() {
                check_text(format_args!("{}[{i}]", f("command")), arg, MAX_ARG_LEN)?;
            }
        }
        check_env(f("env"), &self.env)?;
        if let Some(mb) = self.memory_mb {
            if !(MIN_MEMORY_MB..=MAX_MEMORY_MB).contains(&mb) {
                return Err(InvalidField::OutOfRange {
                    field: f("memory_mb").to_string(),
                    value: mb.to_string(),
                    allowed: format!("{MIN_MEMORY_MB} to {MAX_MEMORY_MB}"),
                });
            }
        }
        if let Some(secs) = self.min_running_secs.filter(|s| *s > MAX_MIN_RUNNING_SECS) {
            return Err(InvalidField::OutOfRange {
                field: f("min_running_secs").to_string(),
                value: secs.to_string(),
                allowed: format!("0 to {MAX_MIN_RUNNING_SECS}"),
            });
        }
        if let Some(cpus) = self.cpus {
            if !(cpus.is_finite() && cpus > 0.0 && cpus <= MAX_CPUS) {
                return Err(InvalidField::OutOfRange {
                    field: f("cpus").to_string(),
                    value: cpus.to_string(),
                    allowed: format!("above 0 and at most {MAX_CPUS}"),
                });
            }
        }
        check_count(
            f("credentials"),
            self.credentials.len(),
            MAX_CREDENTIALS_PER_AGENT,
        )?;
        self.validate_container(agent)
    }

    /// The fields of [`super::container`].
    fn validate_container(&self, agent: &AgentName) -> Result<(), InvalidField> {
        let f = |name| AgentField(agent, name);
        if let Some(user) = &self.user {
            check_user(f("user"), user)?;
        }
        if let Some(secs) = self.stop_grace_secs.filter(|s| *s > MAX_STOP_GRACE_SECS) {
            return Err(InvalidField::OutOfRange {
                field: f("stop_grace_secs").to_string(),
                value: secs.to_string(),
                allowed: format!("0 to {MAX_STOP_GRACE_SECS}"),
            });
        }
        check_ports(f("ports"), &self.ports)?;
        check_port_clashes([(agent, &self.ports[..])].into_iter())?;
        check_volumes(f("volumes"), &self.volumes)?;
        if let Some(network) = &self.network {
            check_network(f("network"), network)?;
        }
        if let Some(n) = self
            .restart_on_unhealthy
            .filter(|n| !(1..=MAX_UNHEALTHY_CHECKS).contains(n))
        {
            return Err(InvalidField::NotBetweenOneAnd {
                field: f("restart_on_unhealthy").to_string(),
                value: u64::from(n),
                max: u64::from(MAX_UNHEALTHY_CHECKS),
            });
        }
        Ok(())
    }

    /// How long a stop of this agent's container may take.
    pub fn stop_grace_secs(&self) -> u64 {
        self.stop_grace_secs.unwrap_or(DEFAULT_STOP_GRACE_SECS)
    }

    /// What a changed credential does to this agent.
    pub fn on_credential_change(&self) -> OnCredentialChange {
        self.on_credential_change.unwrap_or_default()
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
        check_port_clashes(self.agents.iter().map(|(a, s)| (a, &s.ports[..])))
    }
    fn ignored_fields(&self) -> Vec<String> {
        self.agents
            .iter()
            .flat_map(|(name, spec)| {
                spec.unknown
                    .keys()
                    .map(move |k| format!("agents.{name}.{k}"))
            })
            .collect()
    }
}

impl BuildSpec {
    fn validate(&self, field: impl fmt::Display + Copy) -> Result<(), InvalidField> {
        check_text(
            format_args!("{field}.context"),
            &self.context,
            MAX_BUILD_FIELD_LEN,
        )?;
        if self.context.trim().is_empty() {
            return Err(InvalidField::Empty {
                field: format!("{field}.context"),
            });
        }
        if let Some(r) = &self.git_ref {
            check_text(format_args!("{field}.ref"), r, MAX_BUILD_FIELD_LEN)?;
        }
        if let Some(d) = &self.dockerfile {
            check_text(format_args!("{field}.dockerfile"), d, MAX_BUILD_FIELD_LEN)?;
        }
        Ok(())
    }
}

/// An agent's environment: bounded, and every name a shell variable name.
fn check_env(
    field: impl fmt::Display + Copy,
    env: &BTreeMap<String, String>,
) -> Result<(), InvalidField> {
    check_count(field, env.len(), MAX_ENV_VARS)?;
    for (k, v) in env {
        check_len(format_args!("{field} key"), k, MAX_ENV_KEY_LEN)?;
        let valid_key = k
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid_key {
            return Err(InvalidField::NotAnEnvName {
                field: format!("{field} key"),
                value: k.clone(),
            });
        }
        check_text(format_args!("{field}.{k}"), v, MAX_ENV_VALUE_LEN)?;
    }
    Ok(())
}
