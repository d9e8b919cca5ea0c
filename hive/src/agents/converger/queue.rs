//! Queueing what was decided: one job request per decided action, all
//! queued in one transaction, and the memory of what this converger
//! queued (whose outcomes back an agent off) and which containers a
//! retire was queued for (so the same orphan is not reaped twice).

use std::collections::BTreeMap;

use swarm_queue_client::AgentName;

use super::Converger;
use crate::agents::declared::Wanted;
use crate::agents::jobs::{now_ms, AppliedRevision, JobId, JobRequest, JobState, StoreError};
use crate::agents::plan::{Action, Seen};
use crate::agents::runtime::ContainerRuntime;

impl<R: ContainerRuntime> Converger<R> {
    /// Queue what the decided actions need, all in one transaction: one
    /// fsync, not one per agent, before the worker is woken (a new
    /// revision of 100 agents, or a boot that finds 100 containers gone).
    /// `wanted` gives specs for deploys.
    pub(super) async fn queue_actions(
        &mut self,
        actions: &[&Action],
        wanted: Option<&Wanted>,
        seen: Option<&BTreeMap<AgentName, Seen>>,
    ) -> Result<Vec<(AgentName, JobId)>, StoreError> {
        let mut planned = Vec::new();
        for action in actions {
            if let Some(request) = self.request_for(action, wanted).await? {
                planned.push((*action, request));
            }
        }
        let requests = planned
            .iter()
            .map(|(a, r)| (a.agent().clone(), r.clone()))
            .collect();
        // The declaration they come from is recorded with them.
        let applied = wanted.map(Wanted::id);
        let queued = self.queue_all(requests, applied).await?;
        let mut jobs = Vec::new();
        for ((action, _), job) in planned.iter().zip(queued) {
            self.queued.insert(action.agent().clone(), job);
            self.note_removal(action, seen, job);
            jobs.push((action.agent().clone(), job));
        }
        Ok(jobs)
    }

    /// Drop a reap whose containers are the ones a finished retire was
    /// already queued for: queueing it again would change nothing.
    pub(super) async fn fresh_reap(
        &self,
        action: &Action,
        seen: &BTreeMap<AgentName, Seen>,
    ) -> Result<bool, StoreError> {
        let Action::ReapOrphan(agent) = action else {
            return Ok(true);
        };
        let Some((ids, job)) = self.reaped.get(agent) else {
            return Ok(true);
        };
        if seen.get(agent).map(|s| &s.ids) != Some(ids) {
            return Ok(true);
        }
        let job = *job;
        let state = match self.deps.store.job(job).await {
            Ok(j) => j.state,
            Err(StoreError::NoSuchJob { .. }) => JobState::Done,
            Err(e) => return Err(e),
        };
        if state == JobState::Done {
            tracing::warn!(hive = %self.deps.hive, %agent, job = job.0, ?ids, "retire job finished but the same containers are still there; not queueing it again");
            return Ok(false);
        }
        Ok(true)
    }

    /// The job request a decided action needs; `None` when there is
    /// nothing to deploy from.
    async fn request_for(
        &self,
        action: &Action,
        wanted: Option<&Wanted>,
    ) -> Result<Option<JobRequest>, StoreError> {
        let agent = action.agent();
        let spec = || wanted.and_then(|w| w.declaration.agents.get(agent).cloned());
        let revision = wanted.map(|w| w.revision);
        let request = match action {
            Action::FirstDeploy(_) => match spec() {
                Some(spec) => JobRequest::FirstDeploy { spec, revision },
                None => return Ok(None),
            },
            Action::Rebuild { relock, .. } => {
                // Repairs use the installed spec; a changed declaration the
                // declared one.
                let spec = match spec() {
                    Some(s) => s,
                    None => match self.deps.store.installed(agent).await? {
                        Some(i) => i.spec,
                        None => return Ok(None),
                    },
                };
                JobRequest::Rebuild {
                    spec,
                    relock: *relock,
                    revision,
                }
            }
            Action::Retire(_) | Action::ReapOrphan(_) => JobRequest::Retire,
            Action::Reconcile(_) => JobRequest::Reconcile,
            Action::RestartUnhealthy(_) => JobRequest::Restart,
        };
        Ok(Some(request))
    }

    /// Queue many requests in one transaction.
    async fn queue_all(
        &self,
        requests: Vec<(AgentName, JobRequest)>,
        applied: Option<AppliedRevision>,
    ) -> Result<Vec<JobId>, StoreError> {
        // A declaration that needs no job is still recorded: a saved copy
        // older than it must not be acted on at start either.
        if requests.is_empty() && applied.is_none() {
            return Ok(Vec::new());
        }
        let kinds: Vec<_> = requests
            .iter()
            .map(|(a, r)| (a.clone(), r.kind()))
            .collect();
        crate::stage!("planned");
        let queued = self
            .deps
            .store
            .enqueue_all(requests, applied, now_ms())
            .await?;
        crate::stage!("committed");
        for ((agent, kind), q) in kinds.iter().zip(&queued) {
            tracing::info!(hive = %self.deps.hive, %agent, job = q.job.0, kind = kind.as_str(), coalesced = q.coalesced, "job queued");
        }
        Ok(queued.into_iter().map(|q| q.job).collect())
    }

    /// Remember which containers a retire or reap was queued for.
    fn note_removal(
        &mut self,
        action: &Action,
        seen: Option<&BTreeMap<AgentName, Seen>>,
        job: JobId,
    ) {
        if let (Action::Retire(agent) | Action::ReapOrphan(agent), Some(s)) =
            (action, seen.and_then(|seen| seen.get(action.agent())))
        {
            self.reaped.insert(agent.clone(), (s.ids.clone(), job));
        }
    }
}
