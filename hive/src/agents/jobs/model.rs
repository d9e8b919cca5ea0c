//! The vocabulary of the job DAG: ids, kinds, states, node operations and
//! what a caller asks for. Plain data; every name here is also what the
//! database, the API and the CLI show.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use swarm_queue_client::{AgentSpec, Power};

/// A job's id: the database row id, shown to operators as a plain number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobId(pub i64);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A job id, kind or state that does not parse: from an operator's command
/// line, or read back from the database.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("invalid job id {value:?}: a job id is a positive number")]
    JobId { value: String },
    #[error("unknown {what} {value:?}")]
    Unknown { what: &'static str, value: String },
}

impl FromStr for JobId {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        s.trim_start_matches('#')
            .parse::<i64>()
            .ok()
            .filter(|n| *n > 0)
            .map(JobId)
            .ok_or_else(|| ParseError::JobId {
                value: s.to_string(),
            })
    }
}

pub use crate::clock::{now_ms, Millis};

macro_rules! named_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum $name {
            $($(#[$vdoc])* $variant),+
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = ParseError;
            fn from_str(s: &str) -> Result<Self, ParseError> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err(ParseError::Unknown {
                        what: stringify!($name),
                        value: other.to_string(),
                    }),
                }
            }
        }
    };
}

named_enum!(
    /// Which template a job was made from.
    JobKind {
        FirstDeploy => "first_deploy",
        Rebuild => "rebuild",
        Retire => "retire",
        Reconcile => "reconcile",
        /// Retire, then delete the agent's data. Only an operator asks for it.
        Purge => "purge",
        /// Stop the container and start it again as the power intent says:
        /// asked by a credential that changed or was deleted, for an agent
        /// with `on_credential_change = "restart"`.
        Restart => "restart",
    }
);

named_enum!(
    /// A job as a whole. `pending` until its first node runs: only a pending
    /// job can absorb a duplicate request.
    JobState {
        Pending => "pending",
        Running => "running",
        Done => "done",
        Failed => "failed",
    }
);

impl JobState {
    pub fn is_finished(self) -> bool {
        matches!(self, JobState::Done | JobState::Failed)
    }
}

named_enum!(
    /// One node. `pending` waits for its dependencies, `ready` may be claimed
    /// (once its backoff has passed), `running` is claimed by the worker.
    NodeState {
        Pending => "pending",
        Ready => "ready",
        Running => "running",
        Done => "done",
        Failed => "failed",
        /// A dependency failed, so this node never ran.
        Skipped => "skipped",
    }
);

impl NodeState {
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            NodeState::Done | NodeState::Failed | NodeState::Skipped
        )
    }
}

/// What one node does. Every operation is idempotent: it first looks at what
/// is there and does only what is missing, so running it twice (after a
/// crash) has the effect of running it once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Record the agent's power intent unless one is already recorded.
    SeedPower,
    /// Make `<state_dir>/agents/<agent>/` exist.
    StateDir,
    /// Make the spec's image exist locally: pull or build it. With `relock`
    /// the tag is re-resolved (pulled or built again) even when present.
    Image { relock: bool },
    /// Create the container unless one with this spec already exists.
    Create,
    /// Start the container if the power intent is `up`.
    Start,
    /// Stop the container if it runs.
    Stop,
    /// Remove the container if it exists; with `forget`, also drop the
    /// installed record and power intent (the agent is retired).
    Remove { forget: bool },
    /// Start or stop to match the power intent.
    Reconcile,
    /// Delete the agent's state directory and every record of it.
    PurgeData,
}

impl Op {
    /// The short name the database, API and CLI show.
    pub fn name(self) -> &'static str {
        match self {
            Op::SeedPower => "seed_power",
            Op::StateDir => "state_dir",
            Op::Image { .. } => "image",
            Op::Create => "create",
            Op::Start => "start",
            Op::Stop => "stop",
            Op::Remove { .. } => "remove",
            Op::Reconcile => "reconcile",
            Op::PurgeData => "purge_data",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a caller asks the hive to do for one agent. Stored whole with the
/// job, so a job carries everything it needs to finish after a restart: it
/// never re-reads a declaration that may have changed since.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum JobRequest {
    FirstDeploy {
        spec: AgentSpec,
        /// The declaration revision this came from, if any.
        #[serde(default)]
        revision: Option<u64>,
    },
    Rebuild {
        spec: AgentSpec,
        #[serde(default)]
        relock: bool,
        #[serde(default)]
        revision: Option<u64>,
    },
    Retire,
    Reconcile,
    Purge,
    Restart,
}

impl JobRequest {
    pub fn kind(&self) -> JobKind {
        match self {
            JobRequest::FirstDeploy { .. } => JobKind::FirstDeploy,
            JobRequest::Rebuild { .. } => JobKind::Rebuild,
            JobRequest::Retire => JobKind::Retire,
            JobRequest::Reconcile => JobKind::Reconcile,
            JobRequest::Purge => JobKind::Purge,
            JobRequest::Restart => JobKind::Restart,
        }
    }

    pub fn spec(&self) -> Option<&AgentSpec> {
        match self {
            JobRequest::FirstDeploy { spec, .. } | JobRequest::Rebuild { spec, .. } => Some(spec),
            _ => None,
        }
    }

    pub fn revision(&self) -> Option<u64> {
        match self {
            JobRequest::FirstDeploy { revision, .. } | JobRequest::Rebuild { revision, .. } => {
                *revision
            }
            _ => None,
        }
    }

    /// A duplicate request absorbed by a pending job of the same kind: the
    /// newer spec wins (it is what was asked for last) and a relock asked by
    /// either is kept.
    pub fn coalesce(self, newer: JobRequest) -> JobRequest {
        match (self, newer) {
            (
                JobRequest::Rebuild { relock: old, .. },
                JobRequest::Rebuild {
                    spec,
                    relock,
                    revision,
                },
            ) => JobRequest::Rebuild {
                spec,
                relock: old || relock,
                revision,
            },
            (_, newer) => newer,
        }
    }
}

/// The power an agent gets when nothing is recorded yet.
pub fn default_power(spec: &AgentSpec) -> Power {
    spec.power.unwrap_or(Power::Up)
}
