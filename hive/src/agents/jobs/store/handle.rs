//! [`JobStore`]: the async, cloneable handle the worker, the converger and
//! the API share.
//!
//! Each method runs one [`Store`] call on tokio's blocking pool, so an
//! fsync never stalls the async threads, and takes its arguments by
//! reference or by value as a caller has them: the clone a `'static`
//! closure needs is made here, once, instead of at every call site.
//!
//! **Invariant:** one call is one lock of the one connection, so the reads
//! a method bundles ([`JobStore::agent_records`]) see one state.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use swarm_queue_client::{AgentName, Power};

use super::{
    AppliedRevision, Claim, CleanupAction, CleanupEntry, DeployRequest, Enqueued, ExitRecord,
    ExitSeen, Finished, InstalledAgent, JobFilter, JobView, OwnedImage, Store, StoreError,
};
use crate::agents::jobs::dag::{Outcome, RetryPolicy};
use crate::agents::jobs::model::{JobId, JobRequest, JobState, Millis};
use crate::perf;

/// The async, cloneable handle to one [`Store`], shared by the worker and
/// the API. One connection behind a mutex: the hive's write rate is a few
/// transactions per job, far below what one connection serves, and it
/// keeps `SQLITE_BUSY` out of the process entirely.
#[derive(Clone)]
pub struct JobStore {
    inner: Arc<Mutex<Store>>,
    path: Arc<PathBuf>,
}

/// What the hive records about every agent, read in one lock: what it
/// installed, the power intents, and each agent's newest job.
#[derive(Debug, Clone, Default)]
pub struct AgentRecords {
    pub installed: BTreeMap<AgentName, InstalledAgent>,
    pub power: BTreeMap<AgentName, Power>,
    pub last_jobs: BTreeMap<AgentName, JobView>,
    /// How each agent's container last ended.
    pub exits: BTreeMap<AgentName, ExitRecord>,
}

impl std::fmt::Debug for JobStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobStore")
            .field("path", &self.path)
            .finish()
    }
}

impl JobStore {
    /// Open the store at `path` (blocking; call it at startup).
    pub fn open(path: &Path) -> Result<JobStore, StoreError> {
        Ok(Self::new(Store::open(path)?))
    }

    pub fn new(store: Store) -> JobStore {
        let path = Arc::new(store.path().to_path_buf());
        JobStore {
            inner: Arc::new(Mutex::new(store)),
            path,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Run `f` on the store on the current thread. For startup and tests.
    pub fn blocking<R>(&self, f: impl FnOnce(&mut Store) -> R) -> R {
        let mut store = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut store)
    }

    // Jobs: see [`Store::enqueue`] and its neighbours in `jobs.rs`.

    pub async fn enqueue(
        &self,
        agent: &AgentName,
        request: JobRequest,
        now: Millis,
    ) -> Result<Enqueued, StoreError> {
        let agent = agent.clone();
        self.call(move |s| s.enqueue(&agent, request, now)).await
    }

    /// See [`Store::enqueue_all`]: one transaction for all of them.
    pub async fn enqueue_all(
        &self,
        requests: Vec<(AgentName, JobRequest)>,
        applied: Option<AppliedRevision>,
        now: Millis,
    ) -> Result<Vec<Enqueued>, StoreError> {
        self.call(move |s| s.enqueue_all(requests, applied, now))
            .await
    }

    pub async fn request_deploy(
        &self,
        agent: &AgentName,
        deploy: DeployRequest,
        now: Millis,
    ) -> Result<Enqueued, StoreError> {
        let agent = agent.clone();
        self.call(move |s| s.request_deploy(&agent, deploy, now))
            .await
    }

    /// Queue a retire: the container goes, the state directory stays.
    pub async fn request_retire(
        &self,
        agent: &AgentName,
        now: Millis,
    ) -> Result<Enqueued, StoreError> {
        let agent = agent.clone();
        self.call(move |s| s.request_removal(&agent, false, now))
            .await
    }

    /// Queue a purge: the container and the state directory go.
    pub async fn request_purge(
        &self,
        agent: &AgentName,
        now: Millis,
    ) -> Result<Enqueued, StoreError> {
        let agent = agent.clone();
        self.call(move |s| s.request_removal(&agent, true, now))
            .await
    }

    pub async fn job(&self, job: JobId) -> Result<JobView, StoreError> {
        self.call(move |s| s.job(job)).await
    }

    pub async fn jobs(&self, filter: JobFilter) -> Result<Vec<JobView>, StoreError> {
        self.call(move |s| s.jobs(&filter)).await
    }

    pub async fn busy_agents(&self) -> Result<BTreeSet<AgentName>, StoreError> {
        self.call(|s| s.busy_agents()).await
    }

    pub async fn last_jobs(&self) -> Result<BTreeMap<AgentName, JobView>, StoreError> {
        self.call(|s| s.last_jobs()).await
    }

    // Running nodes: see `nodes.rs`.

    pub async fn claim(
        &self,
        now: Millis,
        hold: Option<&str>,
    ) -> Result<Option<Claim>, StoreError> {
        let hold = hold.map(str::to_string);
        self.call(move |s| s.claim(now, hold.as_deref())).await
    }

    pub async fn finish(
        &self,
        job: JobId,
        seq: u32,
        outcome: Outcome,
        policy: RetryPolicy,
        now: Millis,
    ) -> Result<Option<JobState>, StoreError> {
        self.call(move |s| s.finish(job, seq, outcome, &policy, now))
            .await
    }

    /// See [`Store::finish_and_claim`].
    pub async fn finish_and_claim(
        &self,
        done: Finished,
        policy: RetryPolicy,
        now: Millis,
        hold: Option<&str>,
    ) -> Result<(Option<JobState>, Option<Claim>), StoreError> {
        let hold = hold.map(str::to_string);
        self.call(move |s| s.finish_and_claim(done, &policy, now, hold.as_deref()))
            .await
    }

    pub async fn set_detail(&self, job: JobId, seq: u32, detail: String) -> Result<(), StoreError> {
        self.call(move |s| s.set_detail(job, seq, &detail)).await
    }

    pub async fn recover(&self) -> Result<usize, StoreError> {
        self.call(|s| s.recover()).await
    }

    pub async fn prune(&self, now: Millis, retention: Duration) -> Result<usize, StoreError> {
        self.call(move |s| s.prune(now, retention)).await
    }

    pub async fn next_retry_at(&self, now: Millis) -> Result<Option<Millis>, StoreError> {
        self.call(move |s| s.next_retry_at(now)).await
    }

    // Power intent: see `power.rs`.

    pub async fn set_power(
        &self,
        agent: &AgentName,
        power: Power,
        now: Millis,
    ) -> Result<Enqueued, StoreError> {
        let agent = agent.clone();
        self.call(move |s| s.set_power(&agent, power, now)).await
    }

    pub async fn seed_power(
        &self,
        agent: &AgentName,
        power: Power,
        now: Millis,
    ) -> Result<Power, StoreError> {
        let agent = agent.clone();
        self.call(move |s| s.seed_power(&agent, power, now)).await
    }

    pub async fn power(&self, agent: &AgentName) -> Result<Option<Power>, StoreError> {
        let agent = agent.clone();
        self.call(move |s| s.power(&agent)).await
    }

    pub async fn all_power(&self) -> Result<BTreeMap<AgentName, Power>, StoreError> {
        self.call(|s| s.all_power()).await
    }

    // Installed agents: see `installed.rs`.

    pub async fn record_installed(&self, record: InstalledAgent) -> Result<(), StoreError> {
        self.call(move |s| s.record_installed(&record)).await
    }

    pub async fn installed(&self, agent: &AgentName) -> Result<Option<InstalledAgent>, StoreError> {
        let agent = agent.clone();
        self.call(move |s| s.installed(&agent)).await
    }

    pub async fn installed_all(&self) -> Result<BTreeMap<AgentName, InstalledAgent>, StoreError> {
        self.call(|s| s.installed_all()).await
    }

    pub async fn forget_agent(&self, agent: &AgentName) -> Result<(), StoreError> {
        let agent = agent.clone();
        self.call(move |s| s.forget_agent(&agent)).await
    }

    /// The installed record, the power intents and the newest jobs, as one
    /// consistent read.
    pub async fn agent_records(&self) -> Result<AgentRecords, StoreError> {
        self.call(|s| {
            Ok(AgentRecords {
                installed: s.installed_all()?,
                power: s.all_power()?,
                last_jobs: s.last_jobs()?,
                exits: s.exit_records()?,
            })
        })
        .await
    }

    // How containers ended: see `exits.rs`.

    pub async fn record_start(
        &self,
        agent: &AgentName,
        spec: Option<String>,
        at: Millis,
    ) -> Result<bool, StoreError> {
        let agent = agent.clone();
        self.call(move |s| s.record_start(&agent, spec.as_deref(), at))
            .await
    }

    pub async fn record_exit(
        &self,
        seen: ExitSeen,
        reset_after: Millis,
    ) -> Result<bool, StoreError> {
        self.call(move |s| s.record_exit(&seen, reset_after)).await
    }

    pub async fn record_oom(&self, agent: &AgentName) -> Result<(), StoreError> {
        let agent = agent.clone();
        self.call(move |s| s.record_oom(&agent)).await
    }

    pub async fn reset_streak(
        &self,
        agent: &AgentName,
        asked_at: Millis,
    ) -> Result<(), StoreError> {
        let agent = agent.clone();
        self.call(move |s| s.reset_streak(&agent, asked_at)).await
    }

    pub async fn exit_records(&self) -> Result<BTreeMap<AgentName, ExitRecord>, StoreError> {
        self.call(|s| s.exit_records()).await
    }

    /// The installed record and the exit records in one call: what a new
    /// declaration is planned against.
    pub async fn installed_and_exits(
        &self,
    ) -> Result<
        (
            BTreeMap<AgentName, InstalledAgent>,
            BTreeMap<AgentName, ExitRecord>,
        ),
        StoreError,
    > {
        self.call(|s| Ok((s.installed_all()?, s.exit_records()?)))
            .await
    }

    // The cleanup journal: see `cleanup.rs`.

    pub async fn journal_cleanup(
        &self,
        agent: &AgentName,
        action: CleanupAction,
        now: Millis,
    ) -> Result<i64, StoreError> {
        let agent = agent.clone();
        self.call(move |s| s.journal_cleanup(&agent, &action, now))
            .await
    }

    pub async fn cleanup_done(&self, id: i64) -> Result<(), StoreError> {
        self.call(move |s| s.cleanup_done(id)).await
    }

    pub async fn cleanup_failed(&self, id: i64, error: String) -> Result<(), StoreError> {
        self.call(move |s| s.cleanup_failed(id, &error)).await
    }

    /// Every outstanding cleanup, oldest first.
    pub async fn pending_cleanups(&self) -> Result<Vec<CleanupEntry>, StoreError> {
        self.call(|s| s.pending_cleanups(None)).await
    }

    /// The outstanding cleanups of one agent, oldest first.
    pub async fn pending_cleanups_of(
        &self,
        agent: &AgentName,
    ) -> Result<Vec<CleanupEntry>, StoreError> {
        let agent = agent.clone();
        self.call(move |s| s.pending_cleanups(Some(&agent))).await
    }

    // Owned images: see `images.rs`.

    pub async fn record_image(&self, image: OwnedImage) -> Result<(), StoreError> {
        self.call(move |s| s.record_image(&image)).await
    }

    pub async fn forget_image(&self, image_id: &str) -> Result<(), StoreError> {
        let image_id = image_id.to_string();
        self.call(move |s| s.forget_image(&image_id)).await
    }

    /// Every recorded image and every installed agent, as one consistent
    /// read: what an image cleanup or listing decides from.
    pub async fn images_and_installed(
        &self,
    ) -> Result<(Vec<OwnedImage>, BTreeMap<AgentName, InstalledAgent>), StoreError> {
        self.call(|s| Ok((s.images()?, s.installed_all()?))).await
    }

    /// Run `f` on the store on tokio's blocking pool. The typed methods
    /// above are built on it; tests use it for a state no method reaches.
    pub(crate) async fn call<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&mut Store) -> Result<R, StoreError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        let asked = std::time::Instant::now();
        tokio::task::spawn_blocking(move || {
            // A panic inside an earlier call cannot leave a transaction
            // open (rusqlite rolls back on drop), so the store behind a
            // poisoned lock is still consistent.
            let mut store = inner.lock().unwrap_or_else(|p| p.into_inner());
            let held = std::time::Instant::now();
            perf::STORE_WAIT.add(held - asked);
            let changes = store.conn.total_changes();
            let out = f(&mut store);
            perf::STORE_CALLS.add(held.elapsed());
            if store.conn.total_changes() != changes {
                perf::STORE_WRITES.add(held.elapsed());
            }
            out
        })
        .await
        .map_err(|e| StoreError::Task(e.to_string()))?
    }
}
