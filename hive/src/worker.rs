//! # The job worker
//!
//! One task, [`run`], that executes the job DAG stored by [`crate::jobs`].
//! At start it turns nodes a crash left `running` back to `ready`
//! ([`Store::recover`](crate::jobs::Store::recover)), replays the cleanup
//! journal, and makes its first pass at once. After that it wakes when a
//! job is queued (the [`Notify`] in [`WorkerDeps`]), when a node it runs
//! finishes, when the earliest backoff expires, and at least every
//! `idle_poll`.
//!
//! A pass claims ready nodes (at most one per agent; up to
//! `max_parallel` at a time) and runs each in its own tokio task inside a
//! `job_node` span carrying hive, agent, job, node, op and attempt. The
//! node's outcome goes back to the store, which decides what it means for
//! the rest of the job. The worker never decides: it does. The outcome is
//! written together with the claim of the agent's next runnable node
//! ([`Store::finish_and_claim`](crate::jobs::Store::finish_and_claim)),
//! which then runs in the same task: a job's chain holds one slot from its
//! first node to its last, as a hand-run create and start would, and pays
//! one commit per node instead of two. After shutdown is requested a task
//! only records its outcome and claims nothing more.
//!
//! Every node operation looks before it acts (see [`crate::jobs`]'s essay),
//! so a node cut off by a crash or a shutdown simply runs again. On shutdown
//! the worker gives running nodes a short grace to finish, then drops them;
//! the next start recovers them.
//!
//! Owns: nothing but the tasks it spawns. Invariant: every container change
//! goes through the runtime, which refuses containers of other hives.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use swarm_queue_client::containers::{built_image_tag, container_name};
use swarm_queue_client::{AgentName, AgentSpec, HiveName, Power};
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::jobs::model::default_power;
use crate::jobs::{
    now_ms, Claim, CleanupAction, Finished, InstalledAgent, JobStore, Op, Outcome, RetryPolicy,
    StoreError,
};
use crate::perf;
use crate::readiness::Health;
use crate::runtime::confine::{confine, local_git_path, BuildRoots};
use crate::runtime::context::{self, ContextSource};
use crate::runtime::pull_progress;
use crate::runtime::{
    check_owner, Bind, ContainerInfo, ContainerRuntime, ContainerSpec, RuntimeError,
};
use crate::shutdown::Shutdown;

/// The least time between two pull-progress changes in Readiness.
pub const PULL_PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// Tries to record one node's outcome before leaving it to crash recovery.
const FINISH_ATTEMPTS: u32 = 3;

/// The longest a wanted image cleanup waits for the worker to be idle.
const IMAGE_CLEAN_DEFER_MAX: Duration = Duration::from_secs(60);

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
    pub health: Option<Arc<Health>>,
    /// Mounted into every container after the state dir (the knowledge
    /// directory, read-only, once the hive has one).
    pub extra_binds: Vec<Bind>,
    pub config: WorkerConfig,
}

/// The worker's notion of "now" in [`Millis`](crate::jobs::Millis): the
/// wall clock at start plus tokio's monotonic time since. Backoff deadlines
/// stored in the database and the worker's sleeps then agree, and unit
/// tests can drive both with tokio's paused clock.
#[derive(Debug, Clone, Copy)]
struct Clock {
    base_ms: crate::jobs::Millis,
    base: tokio::time::Instant,
}

impl Clock {
    fn start() -> Clock {
        Clock {
            base_ms: now_ms(),
            base: tokio::time::Instant::now(),
        }
    }

    fn now(&self) -> crate::jobs::Millis {
        self.base_ms + self.base.elapsed().as_millis() as crate::jobs::Millis
    }
}

/// `<state_dir>/agents/<agent>`: mounted at `/state`; only purge deletes it.
pub fn agent_dir(state_dir: &Path, agent: &AgentName) -> PathBuf {
    state_dir.join("agents").join(agent.as_str())
}

fn checkout_dir(state_dir: &Path, agent: &AgentName) -> PathBuf {
    BuildRoots::new(state_dir, vec![]).clone_dir(agent.as_str())
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
        job: crate::jobs::JobId,
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

/// Run the worker until shutdown.
pub async fn run<R: ContainerRuntime>(deps: WorkerDeps<R>, mut shutdown: Shutdown) {
    let deps = Arc::new(deps);
    let clock = Clock::start();
    let span = tracing::info_span!("job_worker", hive = %deps.hive);
    async move {
        match deps.store.recover().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(nodes = n, "resuming nodes cut off by the previous run"),
            Err(e) => tracing::error!(error = %crate::error_chain(&e), "cannot recover running nodes"),
        }
        let in_flight: Arc<Mutex<BTreeSet<AgentName>>> = Arc::default();
        let images: Arc<ImageCleanup> = Arc::default();
        let mut running: JoinSet<()> = JoinSet::new();
        let mut last_prune: Option<tokio::time::Instant> = None;
        loop {
            replay_idle_cleanups(&deps, &in_flight).await;
            images.run_if_due(&deps, running.is_empty()).await;
            if last_prune.is_none_or(|t| t.elapsed() > Duration::from_secs(3600)) {
                match deps.store.prune(clock.now(), deps.config.retention).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(jobs = n, "pruned finished jobs"),
                    Err(e) => {
                        tracing::warn!(error = %crate::error_chain(&e), "cannot prune finished jobs")
                    }
                }
                last_prune = Some(tokio::time::Instant::now());
            }
            while running.len() < deps.config.max_parallel.max(1) {
                let hold = deps.config.hold_before.as_deref();
                match perf::CLAIMS
                    .time(deps.store.claim(clock.now(), hold))
                    .await
                {
                    Ok(Some(claim)) => {
                        let deps = Arc::clone(&deps);
                        let in_flight = Arc::clone(&in_flight);
                        let shutdown = shutdown.clone();
                        let task = Task {
                            clock,
                            images: Arc::clone(&images),
                        };
                        lock(&in_flight).insert(claim.agent.clone());
                        running.spawn(async move {
                            let agent = claim.agent.clone();
                            // The agent's next node, claimed with this
                            // one's outcome, runs in the same slot.
                            let mut next = Some(claim);
                            while let Some(claim) = next {
                                let chain = !shutdown.is_requested();
                                next = perf::NODES.time(execute(&deps, &task, claim, chain)).await;
                            }
                            lock(&in_flight).remove(&agent);
                            deps.wake.notify_one();
                        });
                    }
                    Ok(None) => break,
                    Err(e) => {
                        tracing::error!(error = %crate::error_chain(&e), "cannot claim a node");
                        break;
                    }
                }
            }
            let now = clock.now();
            let next_retry = deps.store.next_retry_at(now).await.ok().flatten();
            let sleep = next_retry
                .map(|at| Duration::from_millis(at.saturating_sub(now).max(1) as u64))
                .unwrap_or(deps.config.idle_poll)
                .min(deps.config.idle_poll);
            tokio::select! {
                // Shutdown::wait is cancel-safe.
                _ = shutdown.wait() => break,
                // JoinSet::join_next is cancel-safe: an unjoined task stays in the set.
                Some(joined) = running.join_next(), if !running.is_empty() => {
                    if let Err(e) = joined {
                        tracing::error!(error = %e, "a node task ended abnormally");
                    }
                }
                // Notify::notified is cancel-safe; a notify while we were busy left a permit.
                _ = deps.wake.notified() => {}
                // A sleep is cancel-safe; the next pass recomputes it.
                _ = tokio::time::sleep(sleep) => {}
            }
        }
        if !running.is_empty() {
            tracing::info!(nodes = running.len(), "waiting briefly for running nodes");
            let _ = tokio::time::timeout(Duration::from_secs(3), async {
                while running.join_next().await.is_some() {}
            })
            .await;
            // Whatever is still running stays `running` in the store and is
            // recovered at the next start.
            running.abort_all();
            while running.join_next().await.is_some() {}
        }
        tracing::info!("job worker stopped");
    }
    .instrument(span)
    .await
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
) -> (Option<crate::jobs::JobState>, Option<Claim>) {
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
    state: crate::jobs::JobState,
    images: &ImageCleanup,
) {
    let kind = claim.request.kind();
    tracing::info!(state = %state, kind = %kind, "job finished");
    if let Some(h) = &deps.health {
        h.record_job_outcome(kind.as_str(), state.as_str());
    }
    if state == crate::jobs::JobState::Done
        && matches!(
            kind,
            crate::jobs::JobKind::Rebuild
                | crate::jobs::JobKind::Retire
                | crate::jobs::JobKind::Purge
        )
    {
        images.want();
    }
}

/// What the worker loop hands each node task besides the deps.
struct Task {
    clock: Clock,
    images: Arc<ImageCleanup>,
}

/// An image cleanup ([`crate::images::clean`]) wanted by a finished job,
/// run by the worker loop once no node is running, or at the latest
/// [`IMAGE_CLEAN_DEFER_MAX`] after it was first wanted. A cleanup lists
/// every container of the hive: after a rebuild of a hundred agents this
/// is one listing, not one per job, and none runs beside a create.
#[derive(Default)]
struct ImageCleanup {
    wanted_since: Mutex<Option<tokio::time::Instant>>,
}

impl ImageCleanup {
    fn want(&self) {
        lock(&self.wanted_since).get_or_insert_with(tokio::time::Instant::now);
    }

    async fn run_if_due<R: ContainerRuntime>(&self, deps: &WorkerDeps<R>, idle: bool) {
        let due = {
            let mut since = lock(&self.wanted_since);
            let due = since.is_some_and(|t| idle || t.elapsed() >= IMAGE_CLEAN_DEFER_MAX);
            if due {
                *since = None;
            }
            due
        };
        if due {
            if let Err(e) = crate::images::clean(&deps.store, deps.runtime.as_ref()).await {
                tracing::warn!(error = %crate::error_chain(&e), "image cleanup failed; the next one tries again");
            }
        }
    }
}

/// Replay the journal for agents that have no node running. A replay that
/// fails is kept and tried again on the next pass.
async fn replay_idle_cleanups<R: ContainerRuntime>(
    deps: &WorkerDeps<R>,
    in_flight: &Mutex<BTreeSet<AgentName>>,
) {
    let entries = match deps.store.pending_cleanups().await {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!(error = %crate::error_chain(&e), "cannot read the cleanup journal");
            return;
        }
    };
    let agents: BTreeSet<AgentName> = entries
        .into_iter()
        .map(|e| e.agent)
        .filter(|a| !lock(in_flight).contains(a))
        .collect();
    for agent in agents {
        if let Err(e) = replay_cleanups(deps, &agent).await {
            tracing::warn!(agent = %agent, error = %crate::error_chain(&e), "cleanup still outstanding");
        }
    }
}

/// Finish every journalled cleanup of `agent`; error if any remains.
async fn replay_cleanups<R: ContainerRuntime>(
    deps: &WorkerDeps<R>,
    agent: &AgentName,
) -> Result<(), NodeError> {
    let entries = deps.store.pending_cleanups_of(agent).await?;
    let mut failed = Vec::new();
    for entry in entries {
        let result = match &entry.action {
            CleanupAction::RemoveContainer { id, name } => {
                deps.runtime
                    .remove(id)
                    .await
                    .map_err(NodeError::runtime(format!(
                        "remove container {name} ({id})"
                    )))
            }
            CleanupAction::DeleteDir { path } => delete_dir(path).await,
        };
        let id = entry.id;
        match result {
            Ok(()) => {
                tracing::info!(agent = %agent, action = ?entry.action, "journalled cleanup done");
                deps.store.cleanup_done(id).await?;
            }
            Err(e) => {
                let msg = crate::error_chain(&e);
                failed.push(msg.clone());
                deps.store.cleanup_failed(id, msg).await?;
            }
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(NodeError::CleanupPending {
            agent: agent.clone(),
            detail: failed.join("; "),
        })
    }
}

async fn delete_dir(path: &Path) -> Result<(), NodeError> {
    match tokio::fs::remove_dir_all(path).await {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(NodeError::Io {
            what: "cannot delete",
            path: path.to_path_buf(),
            source,
        }),
    }
}

async fn make_dir(path: &Path) -> Result<(), NodeError> {
    tokio::fs::create_dir_all(path)
        .await
        .map_err(|source| NodeError::Io {
            what: "cannot create the agent state directory",
            path: path.to_path_buf(),
            source,
        })
}

fn need_spec(claim: &Claim) -> Result<&AgentSpec, NodeError> {
    claim.request.spec().ok_or_else(|| NodeError::NoSpec {
        job: claim.job,
        agent: claim.agent.clone(),
        op: claim.op,
    })
}

/// Do what one node says. Returns a note for the operator.
async fn run_node<R: ContainerRuntime>(
    deps: &WorkerDeps<R>,
    claim: &Claim,
) -> Result<Option<String>, NodeError> {
    // Nothing of an agent runs while a destructive step of it is still
    // outstanding: a retried purge must not delete a new deploy's data.
    replay_cleanups(deps, &claim.agent).await?;
    let agent = &claim.agent;
    let name = container_name(&deps.hive, agent);
    let store = &deps.store;
    match claim.op {
        Op::SeedPower => {
            let seed = default_power(need_spec(claim)?);
            let power = store.seed_power(agent, seed, now_ms()).await?;
            Ok(Some(format!("power intent is {power}")))
        }
        Op::StateDir => {
            let dir = agent_dir(&deps.state_dir, agent);
            make_dir(&dir).await?;
            Ok(Some(dir.display().to_string()))
        }
        Op::Image { relock } => ensure_image(deps, claim, need_spec(claim)?, relock).await,
        Op::Create => create(deps, claim, need_spec(claim)?, &name).await,
        Op::Start => {
            let recorded = store.power(agent).await?;
            let wanted = recorded
                .or(claim.request.spec().map(default_power))
                .unwrap_or(Power::Up);
            if wanted == Power::Down {
                return Ok(Some("left stopped: power intent is down".into()));
            }
            start(deps, agent, &name).await
        }
        Op::Stop => {
            let targets = agent_containers(deps, agent, &name).await?;
            let mut stopped = 0;
            for c in &targets {
                deps.runtime
                    .stop(&c.id, deps.config.stop_timeout)
                    .await
                    .map_err(NodeError::runtime(format!(
                        "stop {} ({})",
                        c.name,
                        short_id(&c.id)
                    )))?;
                stopped += usize::from(c.running);
            }
            Ok(Some(match (targets.len(), stopped) {
                (0, _) => "no container".into(),
                (1, 1) => "stopped".into(),
                (1, _) => "was not running".into(),
                (n, s) => format!("{n} containers, {s} stopped"),
            }))
        }
        Op::Remove { forget } => {
            let note = remove(deps, agent, &name).await?;
            if forget {
                store.forget_agent(agent).await?;
            }
            Ok(Some(note))
        }
        Op::Reconcile => {
            let wanted = store.power(agent).await?.unwrap_or(Power::Up);
            let info = deps
                .runtime
                .inspect(&name)
                .await
                .map_err(NodeError::runtime(format!("inspect {name}")))?
                .ok_or_else(|| NodeError::NoContainer {
                    agent: agent.clone(),
                    container: name.clone(),
                })?;
            check_owner(&deps.hive, &info)
                .map_err(NodeError::runtime(format!("reconcile {name}")))?;
            match (wanted, info.running) {
                (Power::Up, false) => start(deps, agent, &name).await,
                (Power::Down, true) => {
                    deps.runtime
                        .stop(&name, deps.config.stop_timeout)
                        .await
                        .map_err(NodeError::runtime(format!("stop {name}")))?;
                    Ok(Some("stopped (power intent is down)".into()))
                }
                (Power::Up, true) => Ok(Some("running, as wanted".into())),
                (Power::Down, false) => Ok(Some("stopped, as wanted".into())),
            }
        }
        Op::PurgeData => {
            for dir in [
                agent_dir(&deps.state_dir, agent),
                checkout_dir(&deps.state_dir, agent),
            ] {
                let action = CleanupAction::DeleteDir { path: dir.clone() };
                let id = store.journal_cleanup(agent, action, now_ms()).await?;
                delete_dir(&dir).await?;
                store.cleanup_done(id).await?;
            }
            store.forget_agent(agent).await?;
            Ok(Some(format!(
                "deleted {}",
                agent_dir(&deps.state_dir, agent).display()
            )))
        }
    }
}

async fn start<R: ContainerRuntime>(
    deps: &WorkerDeps<R>,
    agent: &AgentName,
    name: &str,
) -> Result<Option<String>, NodeError> {
    match deps.runtime.start(name).await {
        Ok(()) => Ok(Some("running".into())),
        Err(RuntimeError::NoSuchContainer { .. }) => Err(NodeError::NoContainer {
            agent: agent.clone(),
            container: name.to_string(),
        }),
        Err(e) => Err(NodeError::runtime(format!("start {name}"))(e)),
    }
}

/// The agent's containers as Docker shows them: every one with this hive's
/// label and the agent's label (a renamed one too), and whatever holds the
/// expected name (a foreign one there is refused by the caller's owner
/// check, as before).
async fn agent_containers<R: ContainerRuntime>(
    deps: &WorkerDeps<R>,
    agent: &AgentName,
    name: &str,
) -> Result<Vec<ContainerInfo>, NodeError> {
    let mut found: Vec<ContainerInfo> = deps
        .runtime
        .list_agent(agent)
        .await
        .map_err(NodeError::runtime(format!(
            "list the containers of {agent}"
        )))?
        .into_iter()
        .filter(|c| c.owner() == Some(deps.hive.as_str()) && c.agent() == Some(agent.as_str()))
        .collect();
    if let Some(named) = deps
        .runtime
        .inspect(name)
        .await
        .map_err(NodeError::runtime(format!("inspect {name}")))?
    {
        if !found.iter().any(|c| c.id == named.id) {
            found.push(named);
        }
    }
    Ok(found)
}

/// Remove every container of the agent (see [`agent_containers`]),
/// journalling each by id first.
async fn remove<R: ContainerRuntime>(
    deps: &WorkerDeps<R>,
    agent: &AgentName,
    name: &str,
) -> Result<String, NodeError> {
    let targets = agent_containers(deps, agent, name).await?;
    if targets.is_empty() {
        return Ok("no container".into());
    }
    let mut notes = Vec::new();
    for info in &targets {
        notes.push(remove_one(deps, agent, info).await?);
    }
    Ok(notes.join(", "))
}

async fn remove_one<R: ContainerRuntime>(
    deps: &WorkerDeps<R>,
    agent: &AgentName,
    info: &ContainerInfo,
) -> Result<String, NodeError> {
    let name = &info.name;
    check_owner(&deps.hive, info).map_err(NodeError::runtime(format!("remove {name}")))?;
    let action = CleanupAction::RemoveContainer {
        id: info.id.clone(),
        name: name.to_string(),
    };
    let entry = deps.store.journal_cleanup(agent, action, now_ms()).await?;
    match deps.runtime.remove(&info.id).await {
        Ok(()) => {
            deps.store.cleanup_done(entry).await?;
            Ok(format!("removed {}", short_id(&info.id)))
        }
        Err(e) => {
            let err = NodeError::runtime(format!("remove {name}"))(e);
            let msg = crate::error_chain(&err);
            deps.store.cleanup_failed(entry, msg).await?;
            Err(err)
        }
    }
}

fn short_id(id: &str) -> &str {
    &id[..id.len().min(12)]
}

/// Create the container unless one with this spec exists. The installed
/// record is written first, so no container the hive made is ever missing
/// from it.
async fn create<R: ContainerRuntime>(
    deps: &WorkerDeps<R>,
    claim: &Claim,
    spec: &AgentSpec,
    name: &str,
) -> Result<Option<String>, NodeError> {
    let agent = &claim.agent;
    let spec_hash = spec.spec_hash();
    let image = image_ref(&deps.hive, agent, spec);
    let existing = deps
        .runtime
        .inspect(name)
        .await
        .map_err(NodeError::runtime(format!("inspect {name}")))?;
    if let Some(info) = &existing {
        check_owner(&deps.hive, info).map_err(NodeError::runtime(format!("create {name}")))?;
        if info.spec_hash() != Some(spec_hash.as_str()) {
            return Err(NodeError::SpecMismatch {
                container: name.to_string(),
                agent: agent.clone(),
                found: info.spec_hash().unwrap_or("(none)").to_string(),
                wanted: spec_hash,
            });
        }
    }
    let record = InstalledAgent {
        agent: agent.clone(),
        spec_hash: spec_hash.clone(),
        spec: spec.clone(),
        image: image.clone(),
        revision: claim.request.revision(),
        updated_at_ms: now_ms(),
    };
    deps.store.record_installed(record).await?;
    if let Some(info) = existing {
        return Ok(Some(format!(
            "container {} already exists with this spec",
            short_id(&info.id)
        )));
    }
    let dir = agent_dir(&deps.state_dir, agent);
    make_dir(&dir).await?;
    let container = ContainerSpec::for_agent(
        &deps.hive,
        agent,
        spec,
        &image,
        &dir,
        deps.extra_binds.clone(),
    );
    match deps.runtime.create(&container).await {
        Ok(id) => Ok(Some(format!("created {}", short_id(&id)))),
        // A create cut off by a crash can still be finishing inside dockerd
        // when the restarted hive looked: the name is taken by the very
        // container this node made. Look again and adopt it if it is ours
        // with this spec; anything else stays an error.
        Err(RuntimeError::NameTaken { .. }) => {
            let again = deps
                .runtime
                .inspect(name)
                .await
                .map_err(NodeError::runtime(format!("inspect {name}")))?;
            match again {
                Some(info)
                    if check_owner(&deps.hive, &info).is_ok()
                        && info.spec_hash() == Some(spec_hash.as_str()) =>
                {
                    Ok(Some(format!(
                        "adopted container {} created before a restart",
                        short_id(&info.id)
                    )))
                }
                _ => Err(NodeError::runtime(format!("create {name}"))(
                    RuntimeError::NameTaken {
                        name: name.to_string(),
                        message: "taken by a container that is not this agent's with this spec"
                            .into(),
                    },
                )),
            }
        }
        Err(e) => Err(NodeError::runtime(format!("create {name}"))(e)),
    }
}

/// Pull or build the spec's image unless it is there (or `relock` says to
/// resolve it again). Progress lines go to the log and to the node's
/// detail, where `hive job` and `deploy --wait` show them.
async fn ensure_image<R: ContainerRuntime>(
    deps: &WorkerDeps<R>,
    claim: &Claim,
    spec: &AgentSpec,
    relock: bool,
) -> Result<Option<String>, NodeError> {
    let agent = &claim.agent;
    let image = image_ref(&deps.hive, agent, spec);
    let present = deps
        .runtime
        .image_exists(&image)
        .await
        .map_err(NodeError::runtime(format!("look up image {image}")))?;
    if present && !relock {
        return Ok(Some(format!("{image} is present")));
    }

    let (tx, mut rx) = watch::channel(String::new());
    let progress = move |line: &str| {
        tracing::debug!(progress = line);
        tx.send_replace(line.to_string());
    };
    // Show the latest line on the node, at most a few times a second, and
    // the pull's tally in the agent's Readiness entry at most once a second:
    // every change there is a publish, and a pull must not flood NATS.
    let (store, job, seq) = (deps.store.clone(), claim.job, claim.seq);
    let (health, who) = (deps.health.clone(), agent.clone());
    let writer = tokio::spawn(async move {
        let mut next_publish = tokio::time::Instant::now();
        while rx.changed().await.is_ok() {
            let line = rx.borrow_and_update().clone();
            let now = tokio::time::Instant::now();
            if let (Some(h), Some(sum)) = (&health, pull_progress::summary_of(&line)) {
                if now >= next_publish {
                    h.set_image_progress(&who, Some(sum));
                    next_publish = now + PULL_PROGRESS_EVERY;
                }
            }
            let _ = store.set_detail(job, seq, line).await;
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        if let Some(h) = &health {
            h.set_image_progress(&who, None);
        }
    });
    let result = match &spec.build {
        None => match deps.runtime.pull(&image, &progress).await {
            Ok(()) => Ok(format!("pulled {image}")),
            // Re-resolving a tag the hive already has: when the registry
            // cannot be reached (an air-gapped hive, an outage), the local
            // image is still a valid answer, and failing the deploy would
            // leave the agent worse off than keeping it.
            Err(e) if present => {
                let why = crate::error_chain(&e);
                tracing::warn!(%agent, %image, error = %why, "re-resolving the image failed; keeping the local one");
                Ok(format!(
                    "kept the local {image}: re-resolving it failed ({why})"
                ))
            }
            Err(e) => Err(NodeError::runtime(format!("image for agent {agent}"))(e)),
        },
        Some(build) => build_image(deps, agent, build, &image, relock, &progress).await,
    };
    drop(progress);
    let _ = writer.await;
    if let Ok(detail) = &result {
        tracing::info!(image = %image, "image ready");
        let how = if spec.build.is_some() {
            "built"
        } else {
            "pulled"
        };
        if !detail.starts_with("kept the local") {
            if let Err(e) =
                crate::images::record(&deps.store, deps.runtime.as_ref(), agent, &image, how).await
            {
                tracing::warn!(%image, error = %crate::error_chain(&e), "cannot record the image; cleanup will not remove it");
            }
        }
    }
    result.map(Some)
}

async fn build_image<R: ContainerRuntime>(
    deps: &WorkerDeps<R>,
    agent: &AgentName,
    build: &swarm_queue_client::BuildSpec,
    tag: &str,
    relock: bool,
    progress: &(dyn Fn(&str) + Send + Sync),
) -> Result<String, NodeError> {
    let what = format!("image for agent {agent}");
    let dockerfile = context::dockerfile_path(build).map_err(NodeError::runtime(&what))?;
    let roots = BuildRoots::new(&deps.state_dir, deps.config.build_roots.clone());
    let (dir, from) = match context::classify(build).map_err(NodeError::runtime(&what))? {
        ContextSource::Dir(dir) => {
            let real = confine(&dir, &roots).map_err(NodeError::runtime(&what))?;
            (real, dir.display().to_string())
        }
        ContextSource::Git { url, git_ref } => {
            // A local repository is a directory the clone reads: same rule.
            if let Some(local) = local_git_path(&url) {
                confine(&local, &roots).map_err(NodeError::runtime(&what))?;
            }
            let dir = roots.clone_dir(agent.as_str());
            progress(&format!("checking out {url}"));
            let commit = context::checkout(&url, git_ref.as_deref(), &dir, relock)
                .await
                .map_err(NodeError::runtime(&what))?;
            (dir, format!("{url} at {}", short_id(&commit)))
        }
    };
    deps.runtime
        .build(&dir, &dockerfile, tag, relock, progress)
        .await
        .map_err(NodeError::runtime(&what))?;
    Ok(format!("built {tag} from {from}"))
}

#[cfg(test)]
mod tests;
