//! # The hive's durable job DAG
//!
//! Every change the hive makes to a container goes through a **job**: a
//! small DAG of **nodes** (seed power, make the state dir, pull or build the
//! image, create, start, stop, remove, reconcile, purge data), stored in
//! SQLite at `<state_dir>/hive.db` before anything runs. The worker
//! ([`crate::agents::worker`]) claims one ready node at a time per agent, runs
//! it through the container runtime, and records the outcome. This module
//! decides; the worker does.
//!
//! ## The parts
//!
//! - [`model`]: ids, kinds, states, the node operations ([`Op`]) and what a
//!   caller asks for ([`JobRequest`]).
//! - [`templates`]: a request becomes a list of nodes (pure).
//! - [`dag`]: what an outcome does to the rest of the job, and the retry
//!   policy (pure, table-tested).
//! - [`schema`]: the versioned schema and its migrations.
//! - [`store`]: the SQLite file, one module per table: jobs and nodes,
//!   power intent, the installed-agents record, the cleanup journal, the
//!   owned images, the volumes and networks the hive made; and [`JobStore`], its async handle.
//!
//! ## How a job moves
//!
//! Nodes start `ready` (no dependencies) or `pending`. The worker claims a
//! `ready` node (it becomes `running`, its attempt counted), runs it, and
//! reports an [`Outcome`]. Done: every pending node whose dependencies are
//! all done becomes ready. A failure that is *transient* (Docker
//! unreachable, a timeout) puts the node back to ready with a
//! not-before time, `base * 2^(attempt-1)` capped, until
//! [`RetryPolicy::max_attempts`]; a failure that would repeat, or the last
//! transient one, fails the node, marks everything depending on it
//! `skipped`, and fails the job with the node's whole error chain kept on
//! the node and on the job. A job is `done` when every node is done.
//!
//! Jobs of one agent run **one at a time, in the order they were queued**:
//! only the oldest unfinished job of an agent has claimable nodes. Jobs of
//! different agents run side by side. A request for an agent that already
//! has a **pending** job of the same kind (one that has not started) is
//! **coalesced** into it: the newer spec wins, a relock from either is
//! kept, and the caller gets the existing job id back. A job that already
//! started is never changed under the worker; the new request queues
//! behind it.
//!
//! ## Durability
//!
//! Every state change is one SQLite transaction; every claim, and every
//! decision made from what was just read (coalescing, "deploy or
//! rebuild?"), runs in `BEGIN IMMEDIATE`, which takes the write lock before
//! reading, so two requests cannot both decide from the same stale state.
//! The journal is in WAL mode.
//!
//! Two writes that always follow each other share one transaction, so one
//! commit (one fsync) instead of two, and each keeps its own guarantee:
//!
//! - **A node's outcome and its agent's next claim**
//!   ([`Store::finish_and_claim`]): the outcome is on disk before the next
//!   node runs, and a crash after the commit leaves the next node `running`,
//!   which recovery makes ready again, exactly as after a crash right after a
//!   claim of its own.
//! - **A declaration's jobs** ([`Store::enqueue_all`]): the converger queues
//!   every job of a new revision in one transaction; none is queued unless
//!   all are, and the worker is woken after the commit.
//!
//! `synchronous = FULL`. In WAL mode `NORMAL` survives a process crash but
//! can lose the last commits on power loss. That is not good enough here:
//! the cleanup journal's whole promise is "the intent is on disk before the
//! destructive step", and an operator's `hive stop` that is acknowledged
//! and then forgotten after a power cut would start an agent someone
//! deliberately stopped. FULL costs one more fsync per commit; the hive
//! commits a handful of times per job, and `docs/benchmarks-jobs.md`
//! measures what that costs in node transitions per second.
//!
//! ## Idempotency and recovery
//!
//! A node operation first looks, then does only what is missing: create
//! finds a container with this spec's label and adopts it, start finds it
//! running, remove finds it gone. So running a node twice has the effect of
//! running it once. When the worker starts it turns every `running` node
//! back to `ready` ([`Store::recover`]): that node was cut off by a crash,
//! and running it again is safe. A daemon killed between create and start,
//! or in the middle of a pull or build, resumes the same job on restart and
//! ends with exactly one container. The attempt a crash cut off still
//! counts, so a node that kills the daemon every time cannot loop forever.
//!
//! ## Power, installed agents, cleanup
//!
//! - **Power intent** (`up`/`down` per agent) lives in the same file. A first
//!   deploy seeds it (from the spec's default) in the same transaction that
//!   queues the job, so a created but not yet started container is never
//!   mistaken for an agent that should stay down. An operator's start or
//!   stop overwrites it and queues a reconcile in one transaction.
//! - **Installed agents** (agent → spec hash, spec, image, revision) is what
//!   the hive put there. The create node writes it *before* creating the
//!   container; retire and purge remove it after the container is gone. It
//!   is the only input the convergence work may use to retire agents or
//!   reap orphans: what Docker happens to show is never evidence of intent.
//! - **The cleanup journal**: a destructive step (removing a container,
//!   deleting a state directory) is written down before it is taken, and
//!   cleared when it has succeeded. The worker replays what is outstanding
//!   at start, on every pass, and before it runs any node of that agent, so
//!   a step cut off by a crash, or one that failed, is finished before the
//!   agent is touched again. Containers are journalled by id, never by name,
//!   so a replay cannot hit a newer container of the same name.
//!
//! ## Retention
//!
//! Finished jobs older than the retention period are pruned, except each
//! agent's newest job, which `hive agents` and the published status show.

pub mod dag;
pub mod model;
pub mod schema;
pub mod store;
pub mod templates;

pub use dag::{Outcome, PlanError, RetryPolicy};
pub use model::{now_ms, JobId, JobKind, JobRequest, JobState, Millis, NodeState, Op, ParseError};
pub use store::{
    image_cleanup_plan, AgentRecords, AppliedRevision, Claim, CleanupAction, CleanupEntry,
    DeployRequest, Durability, Enqueued, ExitRecord, ExitSeen, Finished, InstalledAgent, JobFilter,
    JobStore, JobView, NodeView, OwnedImage, RecordedObject, Store, StoreError,
};

/// Where the job database lives under the hive's state directory.
pub fn db_path(state_dir: &std::path::Path) -> std::path::PathBuf {
    state_dir.join("hive.db")
}
