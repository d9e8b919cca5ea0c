//! `HiveStatus`: what a hive says of itself, stored under
//! `hyperhive-status/<hive>`. It carries no timestamp: the KV entry's own
//! time is the only freshness there is, so a reader judges age, never the
//! writer.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::checks::{check_count, check_text, sanitize_message, sanitize_short};
use super::codec::{InvalidField, Payload};
use super::declaration::Power;
use crate::limits::*;
use crate::names::{AgentName, HiveName};

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
    /// How the agent's container has been ending, once it has started or
    /// exited at least once under the hive's watch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exits: Option<ExitReport>,
    /// Why the hive does not count this agent as declared although its
    /// container may match. A reader must not call such an agent converged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsettled: Option<Unsettled>,
}

/// Why an agent whose container may match its declaration is not counted
/// as declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Unsettled {
    /// It exited and does not run; the hive starts it again now.
    Exited,
    /// It exited again and waits out a crash-loop delay
    /// (`exits.next_in`).
    Backoff,
    /// It has run for less than the hive's `min_running_secs`.
    Young,
    /// Docker reports its health check failing.
    Unhealthy,
    /// A reason this build does not know (written by a newer hive): still
    /// not as declared.
    #[serde(other)]
    Unknown,
}

impl fmt::Display for Unsettled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Unsettled::Exited => "exited, starting again",
            Unsettled::Backoff => "crash loop, waiting to start again",
            Unsettled::Young => "started too recently to count as up",
            Unsettled::Unhealthy => "unhealthy (its health check fails)",
            Unsettled::Unknown => "not settled",
        })
    }
}

/// How an agent's container has been ending, from Docker's events and
/// inspect, kept by the hive across its own restarts.
///
/// Compact on purpose: 128 agents of it must fit a status with every other
/// field at its bound. No timestamps: `first` and `since` count back
/// from the moment the status was written, `next_in` forward, as
/// `RetryStatus` does; each at most [`MAX_EXIT_SECS`] (the hive saturates).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitReport {
    /// The exit code of the last exit (137 for a kill, -1 unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
    /// Docker killed the last run for memory (the `oom` event or
    /// `OOMKilled`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub oom: bool,
    /// Exits since the agent's spec last changed, at most
    /// [`MAX_EXIT_COUNT`].
    #[serde(default)]
    pub count: u32,
    /// Seconds since the first of those exits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first: Option<u64>,
    /// Seconds since the last start while the container runs, since the
    /// last exit while it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
    /// While the agent waits out a crash-loop delay: seconds until the hive
    /// starts it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_in: Option<u64>,
}

impl ExitReport {
    fn validate(&self, agent: &AgentName) -> Result<(), InvalidField> {
        let out_of_range = |field: &str, value: String, allowed: String| InvalidField::OutOfRange {
            field: format!("agents.{agent}.exits.{field}"),
            value,
            allowed,
        };
        if let Some(c) = self.code {
            if !(-1..=255).contains(&c) {
                return Err(out_of_range("code", c.to_string(), "-1 to 255".into()));
            }
        }
        if self.count > MAX_EXIT_COUNT {
            let allowed = format!("at most {MAX_EXIT_COUNT}");
            return Err(out_of_range("count", self.count.to_string(), allowed));
        }
        for (field, v) in [
            ("first", self.first),
            ("since", self.since),
            ("next_in", self.next_in),
        ] {
            if let Some(v) = v.filter(|v| *v > MAX_EXIT_SECS) {
                let allowed = format!("at most {MAX_EXIT_SECS}");
                return Err(out_of_range(field, v.to_string(), allowed));
            }
        }
        Ok(())
    }
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

/// A hive's status, published under its own key. No timestamps: the KV
/// entry's own time is the only freshness there is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HiveStatus {
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
    /// Which agent spec this hive's build knows ([`super::AGENT_SPEC`]);
    /// absent from a hive built before it said (then
    /// [`super::BASELINE_AGENT_FIELDS`] is what it is taken to know). A
    /// number, not a list of names: a status has no room to spare.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_spec: Option<u32>,
}

impl HiveStatus {
    /// The agent fields this hive is known to honour, as far as this build
    /// can tell (a newer hive knows at least what this build can write).
    pub fn known_agent_fields(&self) -> &'static [&'static str] {
        super::agent_fields_of(self.agent_spec)
    }
}

impl Payload for HiveStatus {
    const WHAT: &'static str = "hive status";
    fn schema(&self) -> u32 {
        self.schema
    }
    fn validate(&self) -> Result<(), InvalidField> {
        check_count("warnings", self.warnings.len(), MAX_WARNINGS)?;
        for w in &self.warnings {
            check_text("warning key", &w.key, MAX_WARNING_KEY_LEN)?;
            check_text(
                format_args!("warning {}", w.key),
                &w.message,
                MAX_MESSAGE_LEN,
            )?;
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
                    check_text(format_args!("agents.{name}.{field}"), v, MAX_SHORT_LEN)?;
                }
            }
            if let Some(job) = &a.last_job {
                check_text(
                    format_args!("agents.{name}.last_job.kind"),
                    &job.kind,
                    MAX_SHORT_LEN,
                )?;
                check_text(
                    format_args!("agents.{name}.last_job.state"),
                    &job.state,
                    MAX_SHORT_LEN,
                )?;
                if let Some(e) = &job.error {
                    check_text(
                        format_args!("agents.{name}.last_job.error"),
                        e,
                        MAX_MESSAGE_LEN,
                    )?;
                }
            }
            if let Some(e) = &a.exits {
                e.validate(name)?;
            }
            if let Some(r) = &a.retry {
                if let Some(step) = &r.step {
                    check_text(
                        format_args!("agents.{name}.retry.step"),
                        step,
                        MAX_SHORT_LEN,
                    )?;
                }
                if let Some(e) = &r.error {
                    check_text(
                        format_args!("agents.{name}.retry.error"),
                        e,
                        MAX_MESSAGE_LEN,
                    )?;
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

/// Whether `hive` is the hive this status is about; a status stored under
/// another hive's key is not evidence about that hive.
pub fn status_matches_key(status: &HiveStatus, key: &HiveName) -> bool {
    &status.hive == key
}

impl AgentStatus {
    /// An agent the hive knows only as wanted and observed: no container
    /// spec, declaration, job, pull, digest, health check or retry yet.
    /// Callers fill in what they know with `..AgentStatus::new(..)`.
    pub fn new(wanted: Power, observed: Observed) -> AgentStatus {
        AgentStatus {
            wanted,
            observed,
            spec: None,
            declared_spec: None,
            last_job: None,
            image_progress: None,
            image_digest: None,
            health: None,
            retry: None,
            exits: None,
            unsettled: None,
        }
    }

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
