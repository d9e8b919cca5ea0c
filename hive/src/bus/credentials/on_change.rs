//! What a credential's change does to its agent. With
//! `on_credential_change = "restart"` the hive queues a `restart` job (stop,
//! then start as the power intent says) in the job store, so the restart is
//! durable and runs in turn with the agent's other jobs; with `"none"` (the
//! default) nothing: the agent reads its file again when it likes.
//!
//! A change is a file whose content is new (a first delivery, or a value
//! that differs from the file's), or a file removed by a delete marker. A
//! delivery of the same value again (every boot, every repull) changes
//! nothing, since the comparison is with the file itself; so does a marker
//! whose file is gone already.
//!
//! The policy is read from the declaration in force, else from the
//! installed record (an agent deployed by `hive deploy --spec`). An agent
//! that is not installed is not restarted: it reads the file when it
//! first starts.
//!
//! The job is queued after the file is written or removed, so the restarted
//! container finds the new state. A hive killed between the two leaves the
//! agent running with the new file and no restart (the next boot finds the
//! file as delivered): the window is one SQLite commit.

use std::sync::Arc;

use swarm_queue_client::{AccountName, AgentName, OnCredentialChange};
use tokio::sync::Notify;

use crate::agents::jobs::{now_ms, JobId, JobRequest, JobStore, StoreError};

/// Where a restart is queued, and what says whether to.
#[derive(Clone)]
pub struct OnChange {
    pub store: JobStore,
    /// Wakes the job worker once the restart is queued.
    pub wake: Arc<Notify>,
    /// The declaration in force: each agent's `on_credential_change`.
    pub wanted: crate::agents::declared::WantedRx,
}

/// How a credential changed under its agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// A new value written (the file was missing or held another).
    Written,
    /// Removed by the controller's delete.
    Removed,
}

/// Whether a change is a restart: only with the policy `restart`, and
/// only for an agent the hive installed.
pub fn restart_wanted(policy: OnCredentialChange, installed: bool) -> bool {
    policy == OnCredentialChange::Restart && installed
}

impl OnChange {
    /// Act on `change` of `agent`'s `account`: the restart job it queued,
    /// if any. A failure to read or write the store is returned.
    pub async fn changed(
        &self,
        agent: &AgentName,
        account: &AccountName,
        change: Change,
    ) -> Result<Option<JobId>, StoreError> {
        let installed = self.store.installed(agent).await?;
        let declared = self
            .wanted
            .borrow()
            .as_ref()
            .and_then(|w| w.declaration.agents.get(agent).cloned());
        let policy = declared
            .or_else(|| installed.as_ref().map(|i| i.spec.clone()))
            .map(|spec| spec.on_credential_change())
            .unwrap_or_default();
        if !restart_wanted(policy, installed.is_some()) {
            tracing::debug!(%agent, %account, ?change, ?policy, installed = installed.is_some(), "credential changed; no restart");
            return Ok(None);
        }
        let queued = self
            .store
            .enqueue(agent, JobRequest::Restart, now_ms())
            .await?;
        self.wake.notify_one();
        tracing::info!(%agent, %account, ?change, job = %queued.job, coalesced = queued.coalesced, "credential changed; restart queued");
        Ok(Some(queued.job))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::jobs::{InstalledAgent, JobFilter, JobKind};
    use swarm_queue_client::{AgentSpec, Declaration};

    fn spec(policy: Option<OnCredentialChange>) -> AgentSpec {
        AgentSpec {
            image: Some("local/x:1".into()),
            on_credential_change: policy,
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn a_change_queues_one_restart_for_restart_agents_only() {
        let dir = tempfile::tempdir().unwrap();
        let store = JobStore::open(&dir.path().join("hive.db")).unwrap();
        let name = |n: &str| AgentName::new(n).unwrap();
        let mut declaration = Declaration::new(Default::default());
        for (agent, policy) in [
            ("restarts", Some(OnCredentialChange::Restart)),
            ("stays", None),
            ("not-yet", Some(OnCredentialChange::Restart)),
        ] {
            declaration.agents.insert(name(agent), spec(policy));
        }
        for agent in ["restarts", "stays"] {
            let rec = InstalledAgent {
                agent: name(agent),
                spec_hash: "h".into(),
                // The installed record says otherwise: the declaration wins.
                spec: spec(Some(OnCredentialChange::None)),
                image: "local/x:1".into(),
                revision: Some(1),
                updated_at_ms: 0,
            };
            store.record_installed(rec).await.unwrap();
        }
        let wanted = crate::agents::declared::Wanted {
            revision: 1,
            declaration,
            created_ns: None,
        };
        let (_tx, rx) = tokio::sync::watch::channel(Some(Arc::new(wanted)));
        let on_change = OnChange {
            store: store.clone(),
            wake: Arc::default(),
            wanted: rx,
        };
        let smtp = AccountName::new("smtp").unwrap();
        let first = on_change
            .changed(&name("restarts"), &smtp, Change::Written)
            .await
            .unwrap();
        let again = on_change
            .changed(&name("restarts"), &smtp, Change::Removed)
            .await
            .unwrap();
        assert!(first.is_some());
        assert_eq!(first, again, "a pending restart absorbs the next one");
        for agent in ["stays", "not-yet"] {
            let job = on_change
                .changed(&name(agent), &smtp, Change::Written)
                .await
                .unwrap();
            assert_eq!(job, None, "{agent}");
        }
        let jobs = store.jobs(JobFilter::default()).await.unwrap();
        let kinds: Vec<(String, JobKind)> =
            jobs.iter().map(|j| (j.agent.to_string(), j.kind)).collect();
        assert_eq!(kinds, [("restarts".to_string(), JobKind::Restart)]);
    }

    #[test]
    fn only_restart_of_an_installed_agent_restarts() {
        let cases = [
            (OnCredentialChange::None, false, false),
            (OnCredentialChange::None, true, false),
            (OnCredentialChange::Restart, false, false),
            (OnCredentialChange::Restart, true, true),
        ];
        for (policy, installed, want) in cases {
            assert_eq!(
                restart_wanted(policy, installed),
                want,
                "{policy:?}, installed {installed}"
            );
        }
    }
}
