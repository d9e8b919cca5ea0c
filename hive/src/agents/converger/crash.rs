//! The converger's part in crash loops: a start of an agent that keeps
//! exiting, or a restart of one that keeps failing its health checks,
//! waits out its delay ([`crate::agents::crashloop`]), and an operator's
//! deploy or start, or a new revision, starts the delay again.

use std::collections::BTreeMap;

use swarm_queue_client::AgentName;

use super::Converger;
use crate::agents::jobs::{now_ms, ExitRecord, JobView, StoreError};
use crate::agents::plan::{Action, Seen};
use crate::agents::runtime::ContainerRuntime;

/// What starts a crash-loop delay again.
#[derive(Clone, Copy)]
pub(super) enum Asked<'a> {
    /// A revision written to the bucket at this time (a saved one applied
    /// again at boot is older than the exits it would otherwise forgive).
    Revision(crate::agents::jobs::Millis),
    /// Each agent's newest job, where it is an operator's (not one this
    /// converger queued): forgives the exits before it was asked for.
    Jobs(&'a BTreeMap<AgentName, JobView>),
}

impl<R: ContainerRuntime> Converger<R> {
    /// Whether `action` starts an exited agent whose crash-loop delay has
    /// not ended yet; the report wakes the converger when it ends.
    pub(super) fn crash_waiting(
        &self,
        action: &Action,
        seen: &BTreeMap<AgentName, Seen>,
        exits: &BTreeMap<AgentName, ExitRecord>,
    ) -> bool {
        let (agent, exited) = match action {
            Action::Reconcile(agent) => (agent, seen.get(agent).is_some_and(|s| !s.running)),
            // Its stop is an exit: it waits out the delay like a start.
            Action::RestartUnhealthy(agent) => (agent, true),
            _ => return false,
        };
        let due = exits
            .get(agent)
            .and_then(|r| self.deps.crash.next_start_at(r, now_ms()));
        if let (true, Some(due)) = (exited, due) {
            tracing::debug!(hive = %self.deps.hive, %agent, in_ms = due - now_ms(), "crash loop: the start waits");
            return true;
        }
        false
    }

    /// Start the crash-loop delay again for exits before what was asked;
    /// whether any was (then `exits` is out of date).
    pub(super) async fn reset_crash_streaks(
        &self,
        asked: Asked<'_>,
        exits: &BTreeMap<AgentName, ExitRecord>,
    ) -> Result<bool, StoreError> {
        let mut reset = false;
        for (agent, rec) in exits.iter().filter(|(_, r)| r.streak > 0) {
            let asked_at = match asked {
                Asked::Revision(at) => at,
                Asked::Jobs(last) => match last.get(agent) {
                    Some(job) if self.queued.get(agent) != Some(&job.id) => job.created_at_ms,
                    _ => continue,
                },
            };
            if rec.finished_at_ms.is_some_and(|f| f <= asked_at) {
                tracing::info!(hive = %self.deps.hive, %agent, "crash-loop delay starts again");
                self.deps.store.reset_streak(agent, asked_at).await?;
                reset = true;
            }
        }
        Ok(reset)
    }
}
