//! Payload builders for tests, kept beside the payloads they build so that
//! a new field breaks one place instead of one per test suite.
//!
//! Compiled only with the `test-support` feature: the controller's unit
//! tests and the tests crate turn it on as a dev-dependency feature, so no
//! daemon ever links it. A feature here couples the test suites to this
//! crate alone, which they depend on already; a shared test crate would add
//! a crate for two functions.

use crate::limits::SCHEMA_VERSION;
use crate::names::{AgentName, HiveName};
use crate::payload::{AgentSpec, AgentStatus, HiveState, HiveStatus, JobSummary, Observed, Power};

/// The id of the job every [`agent_status`] reports, so assertions can name it.
pub const JOB_ID: u64 = 42;

/// A status as a hive would publish it: ready exactly when its state is
/// ok, no warnings, no xkey, no revisions and no agents until they are added.
#[derive(Debug, Clone)]
pub struct HiveStatusBuilder {
    status: HiveStatus,
}

impl HiveStatusBuilder {
    /// Panics when `hive` is not a valid hive name: a test's own typo.
    pub fn new(hive: &str, state: HiveState) -> Self {
        Self {
            status: HiveStatus {
                schema: SCHEMA_VERSION,
                hive: HiveName::new(hive).expect("a test's hive name is valid"),
                ready: state == HiveState::Ok,
                state,
                warnings: vec![],
                converged_revision: None,
                seen_revision: None,
                agents: Default::default(),
                xkey: None,
                version: "0.1.0".into(),
                agent_spec: None,
            },
        }
    }

    /// The newest declaration revision read, and the last one converged on.
    pub fn revisions(mut self, seen: Option<u64>, converged: Option<u64>) -> Self {
        self.status.seen_revision = seen;
        self.status.converged_revision = converged;
        self
    }

    /// Panics when an agent name is not valid: a test's own typo.
    pub fn agents<'a>(mut self, agents: impl IntoIterator<Item = (&'a str, AgentStatus)>) -> Self {
        self.status.agents.extend(
            agents
                .into_iter()
                .map(|(n, a)| (AgentName::new(n).expect("a test's agent name is valid"), a)),
        );
        self
    }

    pub fn build(self) -> HiveStatus {
        self.status
    }
}

/// An agent report for `spec` in the given Docker state, running the spec
/// it was declared with; `job` is the last job's state and error, if any.
pub fn agent_status(
    spec: &AgentSpec,
    observed: Observed,
    job: Option<(&str, Option<&str>)>,
) -> AgentStatus {
    AgentStatus {
        spec: Some(spec.spec_hash()),
        declared_spec: Some(spec.spec_hash()),
        last_job: job.map(|(state, error)| JobSummary {
            id: JOB_ID,
            kind: "first_deploy".into(),
            state: state.into(),
            error: error.map(str::to_string),
        }),
        ..AgentStatus::new(Power::Up, observed)
    }
}
