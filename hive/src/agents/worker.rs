//! # The job worker
//!
//! One task, [`run`], that executes the job DAG stored by
//! [`crate::agents::jobs`]. At start it turns nodes a crash left `running` back
//! to `ready` ([`Store::recover`](crate::agents::jobs::Store::recover)),
//! replays the cleanup journal, and makes its first pass at once. After that it
//! wakes when a job is queued (the [`Notify`] in [`WorkerDeps`]), when a node
//! it runs finishes, when the earliest backoff expires, and at least every
//! `idle_poll`.
//!
//! A pass claims ready nodes (at most one per agent; up to
//! `max_parallel` at a time) and runs each in its own tokio task inside a
//! `job_node` span carrying hive, agent, job, node, op and attempt. The
//! node's outcome goes back to the store, which decides what it means for
//! the rest of the job. The worker never decides: it does. The outcome is
//! written together with the claim of the agent's next runnable node
//! ([`Store::finish_and_claim`](crate::agents::jobs::Store::finish_and_claim)),
//! which then runs in the same task: a job's chain holds one slot from its
//! first node to its last, as a hand-run create and start would, and pays
//! one commit per node instead of two. After shutdown is requested a task
//! only records its outcome and claims nothing more.
//!
//! Every node operation looks before it acts (see [`crate::agents::jobs`]'s
//! essay), so a node cut off by a crash or a shutdown simply runs again. On
//! shutdown the worker gives running nodes a short grace to finish, then drops
//! them; the next start recovers them.
//!
//! Owns: nothing but the tasks it spawns. Invariant: every container change
//! goes through the runtime, which refuses containers of other hives.

mod image;
mod journal;
mod node;
mod objects;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use swarm_queue_client::containers::built_image_tag;
use swarm_queue_client::{AgentName, AgentSpec, HiveName};
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::agents::jobs::{
    now_ms, Claim, Finished, JobStore, Op, Outcome, RetryPolicy, StoreError,
};
use crate::agents::runtime::{Bind, ContainerRuntime, RuntimeError};
use crate::perf;
use crate::shutdown::Shutdown;
use crate::status::StatusBoard;
use image::ImageCleanup;
use journal::replay_idle_cleanups;
use node::run_node;

/// The least time between two pull-progress changes in `HiveStatus`.
pub const PULL_PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// How the worker behaves. `Default` is what the daemon ships.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub retry: RetryPolicy,
    /// How long `stop` waits for a container before killing it.
    pub stop_timeout: Duration,
    /// Finished jobs older than this are pruned.
    pub retention: Duration,
    /// The longest the worker sleeps without being woken.
    pub idle_poll: Duration,
    /// Nodes run at once (each of a different agent).
    pub max_parallel: usize,
    /// Never claim nodes with this op name: set only by tests (directly in
    /// unit tests, or by the `test-hooks` feature's environment hook).
    pub hold_before: Option<String>,
    /// The hive config's `build_roots`: where directory build contexts may
    /// be, besides the knowledge checkout ([`BuildRoots`]).
    pub build_roots: Vec<PathBuf>,
    /// The hive config's pids limit and log cap, set on every container
    /// the worker creates.
    pub container_limits: crate::agents::runtime::HostLimits,
    /// The hive config's `port_addresses` and `volume_roots`: what an
    /// agent's ports may bind and its host-path volumes may mount.
    pub host: crate::agents::runtime::admit::HostPolicy,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            retry: RetryPolicy::default(),
            stop_timeout: Duration::from_secs(10),
            retention: Duration::from_secs(7 * 24 * 3600),
            idle_poll: Duration::from_secs(30),
            max_parallel: 4,
            hold_before: None,
            build_roots: Vec::new(),
            container_limits: crate::agents::runtime::HostLimits::default(),
            host: crate::agents::runtime::admit::HostPolicy::default(),
        }
    }
}

impl WorkerConfig {
    /// Apply the test hook that holds a node op back; a no-op unless the
    /// `test-hooks` feature is compiled in (see [`crate::test_hooks`]).
    pub fn with_test_hooks(mut self) -> Self {
        if let Some(op) = crate::test_hooks::hold_before() {
            self.hold_before = Some(op);
        }
        self
    }
}

/// What the worker needs.
pub struct WorkerDeps<R> {
    pub store: JobStore,
    pub runtime: Arc<R>,
    pub hive: HiveName,
    /// The hive's state dir: agents' dirs are `<state_dir>/agents/<agent>`,
    /// build checkouts `<state_dir>/builds/<agent>`.
    pub state_dir: PathBuf,
    /// Notified by whoever queues a job.
    pub wake: Arc<Notify>,
    /// Job outcomes are counted here (metrics).
    pub board: Option<Arc<StatusBoard>>,
    /// Mounted into every container after the state dir (the knowledge
    /// directory, read-only, once the hive has one).
    pub extra_binds: Vec<Bind>,
    pub config: WorkerConfig,
    /// Where a job's end is told (hyperhive-events); `None` in tests.
    pub events: Option<crate::fleet_events::EventSink>,
}

/// Run the worker until shutdown.
pub async fn run<R: ContainerRuntime>(deps: WorkerDeps<R>, mut shutdown: Shutdown) {
    let deps = Arc::new(deps);
    let span = tracing::info_span!("job_worker", hive = %deps.hive);
    async move {
        recover(&deps.store).await;
        let mut worker = Worker {
            deps,
            clock: Clock::start(),
            in_flight: Arc::default(),
            images: Arc::default(),
            running: JoinSet::new(),
            last_prune: None,
        };
        loop {
            worker.housekeeping().await;
            worker.claim_and_spawn(&shutdown).await;
            let sleep = worker.sleep_for().await;
            tokio::select! {
                // Shutdown::wait is cancel-safe.
                _ = shutdown.wait() => break,
                // JoinSet::join_next is cancel-safe: an unjoined task stays in the set.
                Some(joined) = worker.running.join_next(), if !worker.running.is_empty() => {
                    if let Err(e) = joined {
                        tracing::error!(error = %e, "a node task ended abnormally");
                    }
                }
                // Notify::notified is cancel-safe; a notify while we were busy left a permit.
                _ = worker.deps.wake.notified() => {}
                // A sleep is cancel-safe; the next pass recomputes it.
                _ = tokio::time::sleep(sleep) => {}
            }
        }
        worker.drain().await;
        tracing::info!("job worker stopped");
    }
    .instrument(span)
    .await
}

/// `<state_dir>/previous-logs/<agent>.ndjson`: the last lines of the
/// agent's container the hive last removed, for `hive logs --previous`.
/// Not under [`agent_dir`]: the container can write there, and a symlink it
/// planted would redirect the hive's write.
pub fn previous_log_path(state_dir: &Path, agent: &AgentName) -> PathBuf {
    state_dir
        .join("previous-logs")
        .join(format!("{agent}.ndjson"))
}

/// `<state_dir>/agents/<agent>`: mounted at `/state`; only purge deletes it.
pub fn agent_dir(state_dir: &Path, agent: &AgentName) -> PathBuf {
    state_dir.join("agents").join(agent.as_str())
}

/// The image an agent's container runs: the declared image, or for a build
/// the declared image name or the hive's own tag for the spec.
pub fn image_ref(hive: &HiveName, agent: &AgentName, spec: &AgentSpec) -> String {
    match (&spec.image, &spec.build) {
        (Some(image), _) => image.clone(),
        (None, _) => built_image_tag(hive, agent, &spec.spec_hash()),
    }
}

/// Why a node failed. Each variant names the agent or container.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("{what}: {source}")]
    Runtime {
        what: String,
        #[source]
        source: RuntimeError,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("job {job} for agent {agent} carries no spec, but its {op} node needs one")]
    NoSpec {
        job: crate::agents::jobs::JobId,
        agent: AgentName,
        op: Op,
    },
    #[error(
        "container {container} already exists with spec {found}, but this job deploys spec \
         {wanted}; run `hive rebuild {agent}` to replace it"
    )]
    SpecMismatch {
        container: String,
        agent: AgentName,
        found: String,
        wanted: String,
    },
    #[error("agent {agent} has no container ({container}); deploy it with `hive deploy {agent}`")]
    NoContainer { agent: AgentName, container: String },
    #[error("an earlier cleanup of agent {agent} has not finished yet: {detail}")]
    CleanupPending { agent: AgentName, detail: String },
}

impl NodeError {
    fn runtime(what: impl Into<String>) -> impl FnOnce(RuntimeError) -> NodeError {
        let what = what.into();
        move |source| NodeError::Runtime { what, source }
    }

    /// Whether the worker should try the node again later.
    pub fn is_transient(&self) -> bool {
        match self {
            NodeError::Runtime { source, .. } => source.is_transient(),
            NodeError::Store(_) | NodeError::CleanupPending { .. } => true,
            _ => false,
        }
    }
}

/// Tries to record one node's outcome before leaving it to crash recovery.
const FINISH_ATTEMPTS: u32 = 3;

/// How often finished jobs are pruned.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// How long running nodes get to finish after shutdown is requested.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// Turn nodes a crash left `running` back to `ready`.
async fn recover(store: &JobStore) {
    match store.recover().await {
        Ok(0) => {}
        Ok(n) => tracing::info!(nodes = n, "resuming nodes cut off by the previous run"),
        Err(e) => tracing::error!(error = %crate::error_chain(&e), "cannot recover running nodes"),
    }
}

/// The worker loop's state between passes.
struct Worker<R> {
    deps: Arc<WorkerDeps<R>>,
    clock: Clock,
    /// Agents with a node task running: the journal replay leaves them be.
    in_flight: Arc<Mutex<BTreeSet<AgentName>>>,
    images: Arc<ImageCleanup>,
    running: JoinSet<()>,
    last_prune: Option<tokio::time::Instant>,
}

impl<R: ContainerRuntime> Worker<R> {
    /// Replay idle agents' cleanups, run a due image cleanup, and prune
    /// finished jobs once in a while.
    async fn housekeeping(&mut self) {
        let deps = &self.deps;
        replay_idle_cleanups(deps, &self.in_flight).await;
        self.images.run_if_due(deps, self.running.is_empty()).await;
        if self.last_prune.is_none_or(|t| t.elapsed() > PRUNE_EVERY) {
            match deps
                .store
                .prune(self.clock.now(), deps.config.retention)
                .await
            {
                Ok(0) => {}
                Ok(n) => tracing::info!(jobs = n, "pruned finished jobs"),
                Err(e) => {
                    tracing::warn!(error = %crate::error_chain(&e), "cannot prune finished jobs")
                }
            }
            self.last_prune = Some(tokio::time::Instant::now());
        }
    }

    /// Claim ready nodes while slots are free, each into its own task.
    async fn claim_and_spawn(&mut self, shutdown: &Shutdown) {
        let deps = Arc::clone(&self.deps);
        while self.running.len() < deps.config.max_parallel.max(1) {
            let hold = deps.config.hold_before.as_deref();
            match perf::CLAIMS
                .time(deps.store.claim(self.clock.now(), hold))
                .await
            {
                Ok(Some(claim)) => self.spawn(claim, shutdown.clone()),
                Ok(None) => break,
                Err(e) => {
                    tracing::error!(error = %crate::error_chain(&e), "cannot claim a node");
                    break;
                }
            }
        }
    }

    fn spawn(&mut self, claim: Claim, shutdown: Shutdown) {
        let deps = Arc::clone(&self.deps);
        let in_flight = Arc::clone(&self.in_flight);
        let task = Task {
            clock: self.clock,
            images: Arc::clone(&self.images),
        };
        lock(&in_flight).insert(claim.agent.clone());
        self.running.spawn(async move {
            let agent = claim.agent.clone();
            // The agent's next node, claimed with this one's outcome, runs
            // in the same slot.
            let mut next = Some(claim);
            while let Some(claim) = next {
                let chain = !shutdown.is_requested();
                next = perf::NODES.time(execute(&deps, &task, claim, chain)).await;
            }
            lock(&in_flight).remove(&agent);
            deps.wake.notify_one();
        });
    }

    /// Until the earliest backoff expires, at most `idle_poll`.
    async fn sleep_for(&self) -> Duration {
        let now = self.clock.now();
        let idle_poll = self.deps.config.idle_poll;
        let next_retry = self.deps.store.next_retry_at(now).await.ok().flatten();
        next_retry
            .map(|at| Duration::from_millis(at.saturating_sub(now).max(1) as u64))
            .unwrap_or(idle_poll)
            .min(idle_poll)
    }

    /// Give running nodes a short grace, then drop them.
    async fn drain(mut self) {
        if self.running.is_empty() {
            return;
        }
        tracing::info!(
            nodes = self.running.len(),
            "waiting briefly for running nodes"
        );
        let running = &mut self.running;
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, async {
            while running.join_next().await.is_some() {}
        })
        .await;
        // Whatever is still running stays `running` in the store and is
        // recovered at the next start.
        self.running.abort_all();
        while self.running.join_next().await.is_some() {}
    }
}

/// The worker's notion of "now" in [`Millis`](crate::agents::jobs::Millis): the
/// wall clock at start plus tokio's monotonic time since. Backoff deadlines
/// stored in the database and the worker's sleeps then agree, and unit
/// tests can drive both with tokio's paused clock.
#[derive(Debug, Clone, Copy)]
struct Clock {
    base_ms: crate::agents::jobs::Millis,
    base: tokio::time::Instant,
}

impl Clock {
    fn start() -> Clock {
        Clock {
            base_ms: now_ms(),
            base: tokio::time::Instant::now(),
        }
    }

    fn now(&self) -> crate::agents::jobs::Millis {
        self.base_ms + self.base.elapsed().as_millis() as crate::agents::jobs::Millis
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Run one claimed node and record its outcome; with `chain`, claim the
/// agent's next runnable node in the same transaction and return it.
async fn execute<R: ContainerRuntime>(
    deps: &WorkerDeps<R>,
    task: &Task,
    claim: Claim,
    chain: bool,
) -> Option<Claim> {
    let span = tracing::info_span!(
        "job_node",
        hive = %deps.hive,
        agent = %claim.agent,
        job = %claim.job,
        node = claim.seq + 1,
        op = %claim.op,
        attempt = claim.attempt,
    );
    async move {
        tracing::info!("node started");
        let outcome = match run_node(deps, &claim).await {
            Ok(detail) => {
                tracing::info!(detail = detail.as_deref().unwrap_or(""), "node done");
                Outcome::Done { detail }
            }
            Err(e) => {
                let error = crate::error_chain(&e);
                let transient = e.is_transient();
                tracing::warn!(error = %error, transient, "node failed");
                Outcome::Failed { error, transient }
            }
        };
        let (state, next) = record_outcome(deps, task.clock, &claim, outcome, chain).await;
        if let Some(state) = state {
            job_finished(deps, &claim, state, &task.images);
        }
        next
    }
    .instrument(span)
    .await
}

/// Write a node's outcome (and, with `chain`, claim the agent's next node
/// in the same transaction). A failed write is tried a few times: until
/// the outcome is recorded the node stays `running` and holds its agent's
/// queue (a restart would recover it, and run it once more).
async fn record_outcome<R: ContainerRuntime>(
    deps: &WorkerDeps<R>,
    clock: Clock,
    claim: &Claim,
    outcome: Outcome,
    chain: bool,
) -> (Option<crate::agents::jobs::JobState>, Option<Claim>) {
    let policy = deps.config.retry;
    for attempt in 1..=FINISH_ATTEMPTS {
        let done = Finished {
            job: claim.job,
            seq: claim.seq,
            agent: claim.agent.clone(),
            outcome: outcome.clone(),
        };
        let (hold, now) = (deps.config.hold_before.as_deref(), clock.now());
        let recorded = if chain {
            deps.store.finish_and_claim(done, policy, now, hold).await
        } else {
            deps.store
                .finish(done.job, done.seq, done.outcome, policy, now)
                .await
                .map(|state| (state, None))
        };
        match recorded {
            Ok(recorded) => return recorded,
            Err(e) => {
                tracing::error!(error = %crate::error_chain(&e), attempt, "cannot record the node outcome");
                if attempt < FINISH_ATTEMPTS {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }
    (None, None)
}

/// A job ended: count it, and want an image cleanup after a job that may
/// have left an image unused.
fn job_finished<R: ContainerRuntime>(
    deps: &WorkerDeps<R>,
    claim: &Claim,
    state: crate::agents::jobs::JobState,
    images: &ImageCleanup,
) {
    let kind = claim.request.kind();
    tracing::info!(state = %state, kind = %kind, "job finished");
    if let Some(events) = &deps.events {
        job_event(events, claim, kind, state);
    }
    if let Some(h) = &deps.board {
        h.record_job_outcome(kind.as_str(), state.as_str());
    }
    if state == crate::agents::jobs::JobState::Done
        && matches!(
            kind,
            crate::agents::jobs::JobKind::Rebuild
                | crate::agents::jobs::JobKind::Retire
                | crate::agents::jobs::JobKind::Purge
        )
    {
        images.want();
    }
}

/// The event of a job's end: `job_failed`, or what a job that was done did
/// to the agent (`created`, `rebuilt`, `retired`, `purged`).
fn job_event(
    events: &crate::fleet_events::EventSink,
    claim: &Claim,
    kind: crate::agents::jobs::JobKind,
    state: crate::agents::jobs::JobState,
) {
    use crate::agents::jobs::{JobKind, JobState};
    let what = match (state, kind) {
        (JobState::Failed, _) => "job_failed",
        (JobState::Done, JobKind::FirstDeploy) => "created",
        (JobState::Done, JobKind::Rebuild) => "rebuilt",
        (JobState::Done, JobKind::Retire) => "retired",
        (JobState::Done, JobKind::Purge) => "purged",
        _ => return,
    };
    let event = swarm_queue_client::event_stream::Event::new(what)
        .said(format!("{kind} job {} {state}", claim.job.0));
    events.emit(&claim.agent, event);
}

/// What the worker loop hands each node task besides the deps.
struct Task {
    clock: Clock,
    images: Arc<ImageCleanup>,
}

fn short_id(id: &str) -> &str {
    &id[..id.len().min(12)]
}

#[cfg(test)]
mod tests;
