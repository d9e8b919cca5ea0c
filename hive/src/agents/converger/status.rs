//! Status building: what the converger puts into [`StatusBoard`] after each
//! pass. Every agent's wanted and observed state, spec hashes, last job
//! and retry state, with every string from Docker made safe first
//! ([`crate::agents::observe`]), with each agent's exit evidence and why it is
//! not settled ([`crate::agents::crashloop::unsettled`]); and the revision
//! becomes `converged_revision` only when no declared agent is unsettled and
//! [`plan::convergence_gap`] finds nothing missing.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use swarm_queue_client::{
    AgentName, AgentStatus, ExitReport, JobSummary, Observed, Power, RetryStatus, Unsettled,
};
use tokio::time::Instant;

use super::{Converger, Observation, PassError};
use crate::agents::crashloop::{self, CrashPolicy};
use crate::agents::declared::Wanted;
use crate::agents::jobs::{now_ms, ExitRecord, Millis};
use crate::agents::jobs::{AgentRecords, JobId, JobState, JobView, StoreError};
use crate::agents::observe;
use crate::agents::plan::{self, Installed, JobOutcome, Seen};
use crate::agents::runtime::ContainerRuntime;
use crate::status::ExitTimes;

impl<R: ContainerRuntime> Converger<R> {
    pub(super) async fn report(
        &mut self,
        observation: &Observation,
        wanted: Option<&Wanted>,
    ) -> Result<(), PassError> {
        // One store call for all three: a pass runs after every finished
        // job, and with many agents the store is busy with the worker.
        let records = self.deps.store.agent_records().await?;
        // What the jobs did since the last round (a retry that succeeded)
        // shows at once, not a round later.
        self.note_jobs(&records.last_jobs, Instant::now());
        let (agents, due) = self.agent_statuses(observation, wanted, &records);
        let unsettled: BTreeMap<AgentName, Unsettled> = agents
            .iter()
            .filter_map(|(a, s)| Some((a.clone(), s.unsettled?)))
            .collect();
        let times = exit_times(&records, observation, &self.deps.crash);
        self.deps.board.set_exit_times(times);
        self.deps.board.set_agents(agents, due);
        let AgentRecords {
            installed,
            power,
            last_jobs: last,
            ..
        } = records;

        if let (Some(w), Some(seen)) = (wanted, observation) {
            if self.applied == Some(w.id()) {
                let inst: BTreeMap<AgentName, Installed> = installed
                    .iter()
                    .map(|(a, i)| {
                        let spec = i.spec_hash.clone();
                        (a.clone(), Installed { spec })
                    })
                    .collect();
                let outcomes = self.revision_outcomes(&last).await?;
                self.judge(w, &power, seen, &inst, &outcomes, &unsettled);
            }
        }
        // A report can come before the new bucket's declaration is applied:
        // the old bucket's converged revision must not be shown beside it.
        if let Some(w) = wanted {
            self.forget_converged_of_another_bucket(w);
        }
        self.deps.board.set_revisions(
            wanted.map(|w| w.revision),
            self.converged.map(|c| c.revision),
        );
        Ok(())
    }

    /// Put the repo digest each agent's container runs, and its health,
    /// into `HiveStatus`; an unhealthy agent degrades the hive. A digest that
    /// cannot be looked up is left out, never guessed.
    pub(super) async fn report_images_and_health(
        &self,
        containers: &[crate::agents::runtime::ContainerInfo],
    ) {
        let mut digests = BTreeMap::new();
        let mut health = BTreeMap::new();
        for c in containers
            .iter()
            .filter(|c| c.owner() == Some(self.deps.hive.as_str()))
        {
            let Some(agent) = c.agent().and_then(|a| AgentName::new(a).ok()) else {
                continue;
            };
            if let Some(h) = &c.health {
                health.insert(agent.clone(), h.clone());
            }
            if let Ok(Some(d)) = self.deps.runtime.image_digest(&c.image_id).await {
                digests.insert(agent, d);
            }
        }
        self.deps.board.set_image_digests(digests);
        self.deps.board.set_agent_health(health);
    }

    /// Every agent's status (installed, declared or seen) and when each
    /// backed-off agent is tried next.
    fn agent_statuses(
        &mut self,
        observation: &Observation,
        wanted: Option<&Wanted>,
        records: &AgentRecords,
    ) -> (
        BTreeMap<AgentName, AgentStatus>,
        BTreeMap<AgentName, Instant>,
    ) {
        let (installed, power, last) = (&records.installed, &records.power, &records.last_jobs);
        let declared = wanted.map(|w| &w.declaration.agents);
        let now = now_ms();
        let mut settle_at: Option<Millis> = None;
        let mut restart_pending = false;
        let mut names: BTreeSet<AgentName> = installed.keys().cloned().collect();
        if let Some(d) = declared {
            names.extend(d.keys().cloned());
        }
        if let Some(seen) = observation {
            names.extend(seen.keys().cloned());
        }
        let mut agents = BTreeMap::new();
        let mut due = BTreeMap::new();
        for name in names {
            let spec_decl = declared.and_then(|d| d.get(&name));
            let wanted_power = power
                .get(&name)
                .copied()
                .or(spec_decl.and_then(|s| s.power))
                .unwrap_or(Power::Up);
            let (observed, spec) = observed(observation, &name);
            let retry = self.retries.get(&name).map(|r| {
                due.insert(name.clone(), r.next_try);
                RetryStatus {
                    step: r.step.clone(),
                    attempts: r.attempts,
                    // Filled in from `due` when the status is taken.
                    next_try_in_secs: 0,
                    error: r.error.clone(),
                }
            });
            let record = records.exits.get(&name);
            let seen = observation.as_ref().and_then(|o| o.get(&name));
            let why = crashloop::unsettled(
                &self.deps.crash.for_agent(spec_decl),
                &crashloop::SettleInput {
                    wanted: wanted_power,
                    running: seen.map(|s| s.running),
                    record,
                    health: seen.and_then(|s| s.health.as_deref()),
                    now,
                },
            );
            if let Some(at) = wake_for(why.as_ref(), now) {
                settle_at = Some(settle_at.map_or(at, |s| s.min(at)));
            }
            restart_pending |= why.is_some_and(|w| w.0 == Unsettled::Exited);
            let status = AgentStatus {
                spec,
                declared_spec: spec_decl.map(|s| s.spec_hash()),
                last_job: last.get(&name).map(summary),
                retry,
                exits: record.map(exit_report),
                unsettled: why.map(|w| w.0),
                ..AgentStatus::new(wanted_power, observed)
            };
            agents.insert(name, status.sanitized());
        }
        self.restart_pending = restart_pending;
        self.settle_at = settle_at.map(|at| {
            // A little past the moment, so the look after it sees it over.
            Instant::now() + Duration::from_millis((at - now).max(0) as u64 + 50)
        });
        (agents, due)
    }

    /// How each job queued for the applied revision stands. A newer job of
    /// the agent (a retry, an operator's deploy) speaks for it instead of
    /// the one that failed.
    async fn revision_outcomes(
        &self,
        last: &BTreeMap<AgentName, JobView>,
    ) -> Result<Vec<(AgentName, JobOutcome)>, PassError> {
        let ids: Vec<(AgentName, JobId)> = self
            .revision_jobs
            .iter()
            .map(|(agent, id)| match last.get(agent) {
                Some(newer) if newer.id.0 > id.0 => (agent.clone(), newer.id),
                _ => (agent.clone(), *id),
            })
            .collect();
        // Every job in one store call: one per agent would be a hundred
        // calls in every pass while a hundred agents deploy.
        let outcomes = self
            .deps
            .store
            .call(move |s| {
                let mut outcomes = Vec::with_capacity(ids.len());
                for (agent, id) in ids {
                    let outcome = match s.job(id) {
                        Ok(j) => match j.state {
                            JobState::Done => JobOutcome::Done,
                            JobState::Failed => JobOutcome::Failed,
                            _ => JobOutcome::Active,
                        },
                        // Pruned: its effect is judged from Docker.
                        Err(StoreError::NoSuchJob { .. }) => JobOutcome::Done,
                        Err(e) => return Err(e),
                    };
                    outcomes.push((agent, outcome));
                }
                Ok(outcomes)
            })
            .await?;
        Ok(outcomes)
    }

    /// Mark the revision converged when nothing is missing.
    fn judge(
        &mut self,
        w: &Wanted,
        power: &BTreeMap<AgentName, Power>,
        seen: &BTreeMap<AgentName, Seen>,
        installed: &BTreeMap<AgentName, Installed>,
        outcomes: &[(AgentName, JobOutcome)],
        unsettled: &BTreeMap<AgentName, Unsettled>,
    ) {
        // An agent that is restarting, or has not run long enough, is not
        // as declared even when its container matches.
        let restarting = w.declaration.agents.keys().find_map(|a| {
            // A failing health check degrades a converged revision
            // (the controller says `degraded`, naming the agent); it
            // does not hold convergence back.
            let why = unsettled.get(a).filter(|w| **w != Unsettled::Unhealthy)?;
            Some(format!("{a}: {why}"))
        });
        let gap = restarting.or_else(|| {
            plan::convergence_gap(&w.declaration.agents, power, seen, installed, outcomes)
        });
        match gap {
            None => {
                if self.converged != Some(w.id()) {
                    tracing::info!(hive = %self.deps.hive, revision = w.revision, "converged");
                }
                self.converged = Some(w.id());
            }
            Some(gap) => {
                tracing::debug!(hive = %self.deps.hive, revision = w.revision, %gap, "not converged yet")
            }
        }
    }
}

fn summary(job: &JobView) -> JobSummary {
    JobSummary {
        id: job.id.0 as u64,
        kind: job.kind.as_str().to_string(),
        state: job.state.as_str().to_string(),
        error: job
            .error
            .as_deref()
            .map(swarm_queue_client::payload::sanitize_message),
    }
}

/// When to look at an unsettled agent again: when its delay ends or it
/// has run long enough; an exited agent whose start could not be queued
/// yet (its job still in flight) in a second.
fn wake_for(why: Option<&(Unsettled, Option<Millis>)>, now: Millis) -> Option<Millis> {
    match why? {
        (Unsettled::Exited, _) => Some(now + 1_000),
        (_, at) => *at,
    }
}

/// The durable exit evidence as published; the times are filled in as of
/// each snapshot ([`crate::status::ExitTimes`]).
fn exit_report(rec: &ExitRecord) -> ExitReport {
    use swarm_queue_client::limits::MAX_EXIT_COUNT;
    ExitReport {
        // Docker's codes are 0 to 255; anything else is not one.
        code: rec.last_code.map(|c| {
            i32::try_from(c)
                .ok()
                .filter(|c| (0..=255).contains(c))
                .unwrap_or(-1)
        }),
        oom: rec.oom_killed,
        count: rec.exits.min(MAX_EXIT_COUNT),
        ..Default::default()
    }
}

/// Each agent's start, exit and next-start times, for the snapshot.
fn exit_times(
    records: &AgentRecords,
    observation: &Observation,
    crash: &CrashPolicy,
) -> BTreeMap<AgentName, ExitTimes> {
    let now = now_ms();
    records
        .exits
        .iter()
        .map(|(a, r)| {
            let running = observation
                .as_ref()
                .and_then(|o| o.get(a))
                .is_some_and(|s| s.running);
            let times = ExitTimes {
                first_exit_ms: r.first_exit_at_ms,
                since_ms: if running {
                    r.started_at_ms
                } else {
                    r.finished_at_ms
                },
                next_start_ms: crash.next_start_at(r, now).filter(|_| !running),
            };
            (a.clone(), times)
        })
        .collect()
}

/// What Docker shows for `name`, and its spec label made safe to publish.
fn observed(observation: &Observation, name: &AgentName) -> (Observed, Option<String>) {
    match observation {
        None => (Observed::Unknown, None),
        Some(seen) => match seen.get(name) {
            None => (Observed::Missing, None),
            Some(s) => (
                if s.running {
                    Observed::Running
                } else {
                    Observed::Stopped
                },
                s.spec.as_deref().map(observe::reported_spec),
            ),
        },
    }
}
