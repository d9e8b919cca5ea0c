//! The converger: one task that turns declarations into jobs, repairs drift
//! (the reconciler), and reports what it sees.
//!
//! Each pass:
//! 1. **observe**: list this hive's containers. When Docker cannot be asked
//!    the hive raises an error-level status warning (it is not ready) and
//!    decides nothing destructive: "I could not look" is never "nothing is
//!    there".
//! 2. **apply** a new declaration (from the wanted task): plan against the
//!    durable installed record ([`plan::plan_declaration`]) and queue the
//!    jobs, remembering which jobs belong to the revision.
//! 3. **reconcile**, at start and every `reconcile_interval`: compare the
//!    declaration, the installed record, Docker and the job store
//!    ([`plan::plan_round`], level-triggered) and queue a job for every
//!    agent that is not as declared and has no job in flight, so a first
//!    deploy, rebuild, start or retire that failed is tried again. Each
//!    agent backs off on its own ([`crate::agents::retry`]: `retry_base`, 30 s,
//!    doubling to an hour; reset on success, on a new revision and when an
//!    operator queues a job). A failing round backs off from the interval
//!    doubling to an hour and resets after a clean round. Orphans (labelled
//!    containers not in the installed record) are reaped only after the
//!    grace period, and never when the record cannot be read; a retire that
//!    finished while the same containers are still there is not queued
//!    again. The hive's networks that no installed agent names go after
//!    the same grace ([`networks`]).
//! 4. **report**: the agents' wanted and observed state, spec hashes, last
//!    jobs and retry state (failing step, attempts, next try) go into
//!    [`StatusBoard`], every string from Docker made safe first
//!    ([`crate::agents::observe`]), and the revision becomes
//!    `converged_revision` only when [`plan::convergence_gap`] finds nothing
//!    missing.
//!
//! It wakes on a new declaration, on job progress, on a Docker event
//! ([`crate::agents::docker_events`]: a round at once, so a dead container is
//! started again within a second), when a crash-loop delay ends or an agent
//! has run long enough to count as up ([`crate::agents::crashloop`]), on a
//! short observation timer and on shutdown. A start of an agent in a crash-loop
//! delay waits ([`crash`]), and no revision is converged while an agent is
//! restarting. Deciding is in [`crate::agents::plan`]; this module
//! only reads inputs and queues what was decided.

mod crash;
mod networks;
mod queue;
pub mod stages;
mod status;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use swarm_queue_client::{AgentName, HiveName, Level};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::agents::declared::{MessageId, PlannedTx, Wanted, WantedRx};
use crate::agents::jobs::{
    now_ms, JobId, JobState, JobStore, JobView, Millis, NodeState, StoreError,
};
use crate::agents::observe;
use crate::agents::plan::{self, Action, Installed, Seen};
use crate::agents::retry::{Failure, Retries};
use crate::agents::runtime::ContainerRuntime;
use crate::perf;
use crate::shutdown::Shutdown;
use crate::status::{keys, StatusBoard};

/// How often Docker is looked at when nothing else wakes the converger.
pub const OBSERVE_EVERY: Duration = Duration::from_secs(5);
/// The longest a failing reconcile round backs off.
pub const MAX_BACKOFF: Duration = Duration::from_secs(3600);

/// What the converger needs.
pub struct ConvergerDeps<R> {
    pub store: JobStore,
    pub runtime: Arc<R>,
    pub hive: HiveName,
    pub board: Arc<StatusBoard>,
    /// Wakes the job worker after queueing.
    pub wake: Arc<Notify>,
    pub wanted: WantedRx,
    pub reconcile_interval: Duration,
    pub orphan_grace: Duration,
    /// The first per-agent retry comes this long after a failed job
    /// ([`crate::agents::retry::DEFAULT_BASE`] unless configured).
    pub retry_base: Duration,
    /// Docker reported something about one of this hive's containers
    /// ([`crate::agents::docker_events`]): look, publish and repair now.
    pub docker_changed: Arc<Notify>,
    /// When an agent that exited starts again, and when it counts as up.
    pub crash: crate::agents::crashloop::CrashPolicy,
    /// Told each declaration once it is planned (for the saver of
    /// `wanted.json`, which waits so as not to compete with the commit).
    pub planned: Arc<PlannedTx>,
}

/// Run until shutdown.
pub async fn run<R: ContainerRuntime>(deps: ConvergerDeps<R>, mut shutdown: Shutdown) {
    let mut c = Converger::new(deps);
    let mut wanted = c.deps.wanted.clone();
    let board = c.deps.board.clone();
    let docker_changed = c.deps.docker_changed.clone();
    loop {
        perf::CONVERGER_PASSES.time(c.pass()).await;
        let now = Instant::now();
        let until_round = c.next_round.saturating_duration_since(now);
        // A crash-loop delay that ends, or an agent that has run long
        // enough to count as up, is acted on and shown when it happens.
        let until_settle = c
            .settle_at
            .map_or(OBSERVE_EVERY, |t| t.saturating_duration_since(now));
        tokio::select! {
            // All cancel-safe: watch::changed, Notify::notified, sleep.
            _ = shutdown.wait() => return,
            _ = wanted.changed() => {}
            // A start that waited for the agent's job in flight is queued
            // as soon as that job ends.
            _ = board.job_progress.notified() => if c.restart_pending {
                c.next_round = Instant::now();
            },
            _ = docker_changed.notified() => c.next_round = Instant::now(),
            _ = tokio::time::sleep(OBSERVE_EVERY.min(until_round).min(until_settle)) => {
                if c.settle_at.is_some_and(|t| t <= Instant::now()) {
                    c.next_round = Instant::now();
                }
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
enum PassError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("Docker could not be asked: {0}")]
    Docker(String),
}

/// What one look at Docker showed; `None` when Docker could not be asked.
type Observation = Option<BTreeMap<AgentName, Seen>>;

struct Converger<R> {
    deps: ConvergerDeps<R>,
    /// The wanted message whose jobs have been queued.
    applied: Option<MessageId>,
    /// Jobs queued for `applied`.
    revision_jobs: Vec<(AgentName, JobId)>,
    /// The wanted message the agents were last seen as declared for.
    converged: Option<MessageId>,
    orphan_first_seen: BTreeMap<AgentName, Instant>,
    next_round: Instant,
    backoff: Duration,
    /// Per-agent backoff of failed jobs.
    retries: Retries,
    /// The newest job this converger queued per agent: any other job is an
    /// operator's, whose outcome starts the backoff count again.
    queued: BTreeMap<AgentName, JobId>,
    /// Orphans a retire was queued for: the container ids and the job. The
    /// same containers still there after that job finished are not queued
    /// again.
    reaped: BTreeMap<AgentName, (Vec<String>, JobId)>,
    /// The soonest a crash-loop delay ends or a young agent counts as up.
    settle_at: Option<Instant>,
    /// Some agent exited and waits for its start to be queued.
    restart_pending: bool,
    /// The hive's networks no agent names, removed after the grace.
    networks: networks::NetworkReaper,
}

/// The installed record as the plan reads it: each agent's spec hash.
fn specs(
    all: BTreeMap<AgentName, crate::agents::jobs::InstalledAgent>,
) -> BTreeMap<AgentName, Installed> {
    all.into_iter()
        .map(|(a, i)| (a, Installed { spec: i.spec_hash }))
        .collect()
}

/// The failed node of a failed job: its op and error.
fn failure(job: &JobView, ours: bool) -> Failure {
    let node = job.nodes.iter().find(|n| n.state == NodeState::Failed);
    Failure {
        job: job.id,
        step: node.map(|n| n.op.clone()),
        error: node
            .and_then(|n| n.error.clone())
            .or_else(|| job.error.clone()),
        ours,
    }
}

impl<R: ContainerRuntime> Converger<R> {
    fn new(deps: ConvergerDeps<R>) -> Self {
        let (interval, retry_base) = (deps.reconcile_interval, deps.retry_base);
        Converger {
            deps,
            applied: None,
            revision_jobs: Vec::new(),
            converged: None,
            orphan_first_seen: BTreeMap::new(),
            next_round: Instant::now(),
            backoff: interval,
            retries: Retries::new(retry_base),
            queued: BTreeMap::new(),
            reaped: BTreeMap::new(),
            settle_at: None,
            restart_pending: false,
            networks: networks::NetworkReaper::default(),
        }
    }

    async fn observe(&self) -> Result<BTreeMap<AgentName, Seen>, PassError> {
        let containers = self
            .deps
            .runtime
            .list()
            .await
            .map_err(|e| PassError::Docker(crate::error_chain(&e)))?;
        self.report_images_and_health(&containers).await;
        let mut observed = observe::group(&self.deps.hive, containers);
        self.read_failing_streaks(&mut observed.seen).await;
        if observed.odd.is_empty() {
            self.deps.board.clear(keys::ODD_CONTAINERS);
        } else {
            self.deps.board.raise(
                keys::ODD_CONTAINERS,
                Level::Warn,
                format!(
                    "{} container(s) carry this hive's label but cannot be placed, so the hive \
                     leaves them alone: {}",
                    observed.odd.len(),
                    observed.odd.join("; ")
                ),
            );
        }
        Ok(observed.seen)
    }

    /// Learn from each agent's newest job: a failure backs it off, a success
    /// or an operator's job in flight resets it.
    fn note_jobs(&mut self, last: &BTreeMap<AgentName, JobView>, now: Instant) {
        for (agent, job) in last {
            let ours = self.queued.get(agent) == Some(&job.id);
            match job.state {
                JobState::Failed => self.retries.failed(agent, failure(job, ours), now),
                JobState::Done => self.retries.reset(agent),
                _ if !ours => self.retries.reset(agent),
                _ => {}
            }
        }
    }

    async fn installed(&self) -> Result<BTreeMap<AgentName, Installed>, StoreError> {
        Ok(specs(self.deps.store.installed_all().await?))
    }

    async fn busy(&self) -> Result<BTreeSet<AgentName>, StoreError> {
        self.deps.store.busy_agents().await
    }

    async fn apply(&mut self, wanted: &Wanted, observation: &Observation) -> Result<(), PassError> {
        // One store hop for both: this is on the path to a queued job.
        let (installed, exits) = self.deps.store.installed_and_exits().await?;
        let installed = specs(installed);
        let unseen = BTreeMap::new();
        let seen = observation.as_ref().unwrap_or(&unseen);
        let actions = plan::plan_declaration(&wanted.declaration.agents, &installed, seen);
        tracing::info!(hive = %self.deps.hive, revision = wanted.revision, actions = actions.len(), "applying declaration");
        // A new revision: every agent may be tried at once.
        self.retries.reset_all();
        let at = wanted
            .created_ns
            .map_or_else(now_ms, |ns| (ns / 1_000_000) as Millis);
        self.reset_crash_streaks(crash::Asked::Revision(at), &exits)
            .await?;
        let all: Vec<&Action> = actions.iter().collect();
        let jobs = self
            .queue_actions(&all, Some(wanted), observation.as_ref())
            .await?;
        self.forget_converged_of_another_bucket(wanted);
        self.applied = Some(wanted.id());
        self.revision_jobs = jobs;
        self.deps.wake.notify_one();
        Ok(())
    }

    /// What was converged belongs to another bucket when its number is not
    /// below this declaration's: it says nothing about this one, and is
    /// neither kept nor shown beside it.
    fn forget_converged_of_another_bucket(&mut self, wanted: &Wanted) {
        if self
            .converged
            .is_some_and(|c| c.revision >= wanted.revision && c != wanted.id())
        {
            self.converged = None;
        }
    }

    async fn round(
        &mut self,
        seen: &BTreeMap<AgentName, Seen>,
        wanted: Option<&Wanted>,
        busy_before: BTreeSet<AgentName>,
    ) -> Result<usize, PassError> {
        // Busy first: a job that ends after this read has already changed
        // the record read next (a retire's removal lands with its end), so
        // an agent is either busy here or seen as its job left it.
        let mut busy = self.busy().await?;
        busy.extend(busy_before);
        // Without a readable record nothing is reaped or repaired.
        let installed = self.installed().await?;
        let power = self.deps.store.all_power().await?;
        let now = Instant::now();
        let orphans = plan::orphans(&installed, seen, &busy);
        self.orphan_first_seen.retain(|a, _| orphans.contains(a));
        for o in &orphans {
            self.orphan_first_seen.entry(o.clone()).or_insert_with(|| {
                tracing::warn!(hive = %self.deps.hive, agent = %o, grace = ?self.deps.orphan_grace, "container with this hive's label is not in the installed record; it will be reaped after the grace period");
                now
            });
        }
        self.networks.sweep(&self.deps, now).await;
        let past_grace: BTreeSet<AgentName> = self
            .orphan_first_seen
            .iter()
            .filter(|(_, t)| now.duration_since(**t) >= self.deps.orphan_grace)
            .map(|(a, _)| a.clone())
            .collect();
        let last = self.deps.store.last_jobs().await?;
        self.note_jobs(&last, now);
        let mut exits = self.deps.store.exit_records().await?;
        if self
            .reset_crash_streaks(crash::Asked::Jobs(&last), &exits)
            .await?
        {
            exits = self.deps.store.exit_records().await?;
        }
        let needs = plan::plan_round(&plan::RoundInput {
            declared: wanted.map(|w| &w.declaration.agents),
            installed: &installed,
            power: &power,
            seen,
            busy: &busy,
            orphans_past_grace: &past_grace,
        });
        // An agent that needs nothing and has nothing in flight is as
        // declared: its failures are over.
        let needing: BTreeSet<&AgentName> = needs.iter().map(Action::agent).collect();
        self.retries
            .retain(|a| needing.contains(a) || busy.contains(a));
        let mut due = Vec::new();
        for action in &needs {
            let agent = action.agent();
            if self.retries.waiting(agent, now)
                || self.crash_waiting(action, seen, &exits)
                || !self.fresh_reap(action, seen).await?
            {
                continue;
            }
            let attempt = self.retries.get(agent).map_or(0, |r| r.attempts) + 1;
            tracing::info!(hive = %self.deps.hive, %agent, ?action, attempt, "reconciler queues a job");
            due.push(action);
        }
        let queued = self.queue_actions(&due, wanted, Some(seen)).await?.len();
        self.reaped.retain(|a, _| seen.contains_key(a));
        if queued > 0 {
            self.deps.wake.notify_one();
        }
        Ok(queued)
    }

    /// Each unhealthy agent's failing streak, from an inspect of its main
    /// container (a list does not carry it); left unknown when the inspect
    /// fails, so no restart is decided on it.
    async fn read_failing_streaks(&self, seen: &mut BTreeMap<AgentName, Seen>) {
        for (agent, s) in seen.iter_mut() {
            if s.health.as_deref() != Some("unhealthy") {
                continue;
            }
            let name = swarm_queue_client::containers::container_name(&self.deps.hive, agent);
            if let Ok(Some(info)) = self.deps.runtime.inspect(&name).await {
                s.failing_streak = info.failing_streak;
            }
        }
    }

    /// Observe, raising or clearing the `docker` warning.
    async fn look(&mut self) -> Observation {
        match self.observe().await {
            Ok(seen) => {
                if self.deps.board.has_warning(keys::DOCKER) {
                    // Docker is back: look at everything now rather than
                    // when the failed rounds' backoff ends.
                    self.next_round = Instant::now();
                }
                self.deps.board.clear(keys::DOCKER);
                Some(seen)
            }
            Err(e) => {
                tracing::warn!(hive = %self.deps.hive, error = %e, "cannot observe containers");
                self.deps.board.raise(
                    keys::DOCKER,
                    Level::Error,
                    format!(
                        "{e}; agents may still be running, but this hive cannot see or change them"
                    ),
                );
                None
            }
        }
    }

    /// Apply a declaration not applied yet; how the job store fared
    /// (`None`: it was not the store that failed).
    async fn apply_new(
        &mut self,
        w: &Wanted,
        observation: &Observation,
    ) -> Option<Result<(), String>> {
        match perf::ENQUEUE_REVISION
            .time(self.apply(w, observation))
            .await
        {
            Ok(()) => Some(Ok(())),
            Err(e) => {
                tracing::warn!(hive = %self.deps.hive, revision = w.revision, error = %e, "cannot apply the declaration; will retry");
                match &e {
                    PassError::Store(s) => Some(Err(s.to_string())),
                    _ => None,
                }
            }
        }
    }

    async fn pass(&mut self) {
        let wanted = self.deps.wanted.borrow().clone();
        if wanted
            .as_deref()
            .is_some_and(|w| self.applied != Some(w.id()))
        {
            crate::stage!("pass");
        }
        // The agents with a job in flight *before* Docker is looked at, and
        // those the declaration queues after it: a job that ends between
        // the look and the round changed what Docker shows or what is
        // installed, and the round must not act on the look of before it
        // (a retired agent's container reaped again, a rebuild redone).
        let mut busy_before = self.busy().await.unwrap_or_default();
        let observation = self.look().await;
        // How the job store fared in this pass, when it was used: an error
        // (a full or read-only state dir) raises the `jobs` warning, and
        // only a pass that used it successfully clears it.
        let mut store = match wanted.as_deref() {
            Some(w) if self.applied != Some(w.id()) => {
                crate::stage!("looked");
                let applied = self.apply_new(w, &observation).await;
                self.deps.planned.send_replace(Some(w.id()));
                // Queued after the look: their agents too.
                busy_before.extend(self.revision_jobs.iter().map(|(a, _)| a.clone()));
                applied
            }
            _ => None,
        };
        if Instant::now() >= self.next_round {
            let result = match &observation {
                Some(seen) => self.round(seen, wanted.as_deref(), busy_before).await,
                None => Err(PassError::Docker("see the docker warning".into())),
            };
            match result {
                Ok(n) => {
                    store.get_or_insert(Ok(()));
                    self.backoff = self.deps.reconcile_interval;
                    self.deps.board.clear(keys::RECONCILER);
                    if n > 0 {
                        tracing::info!(hive = %self.deps.hive, repairs = n, "reconcile round queued repairs");
                    }
                }
                Err(e) => {
                    if let PassError::Store(s) = &e {
                        store = Some(Err(s.to_string()));
                    }
                    self.backoff = crate::backoff::doubled(self.backoff, MAX_BACKOFF);
                    tracing::warn!(hive = %self.deps.hive, error = %e, next_in = ?self.backoff, "reconcile round failed; backing off");
                    self.deps.board.raise(
                        keys::RECONCILER,
                        Level::Warn,
                        format!(
                            "reconcile round failed ({e}); next try in {}s",
                            self.backoff.as_secs()
                        ),
                    );
                }
            }
            self.next_round = Instant::now() + self.backoff;
        }
        match store {
            Some(Err(e)) => self.deps.board.raise(
                keys::JOBS,
                Level::Error,
                format!(
                    "the job store in the state dir cannot be used ({e}); declarations are not applied until it can (check free space and permissions)"
                ),
            ),
            Some(Ok(())) => self.deps.board.clear(keys::JOBS),
            None => {}
        }
        if let Err(e) = self.report(&observation, wanted.as_deref()).await {
            tracing::warn!(hive = %self.deps.hive, error = %e, "cannot compute the agents' status");
        }
    }
}

#[cfg(test)]
mod tests;
