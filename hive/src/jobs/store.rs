//! The SQLite file behind the job DAG, power intent, the installed-agents
//! record and the cleanup journal.
//!
//! [`Store`] is synchronous and owns one connection. Every method that
//! changes state is one transaction; every method that claims or decides
//! from what it reads uses `BEGIN IMMEDIATE`, which takes the write lock up
//! front (a deferred transaction that upgrades to a write gets `SQLITE_BUSY`
//! without waiting for the busy timeout). [`JobStore`] is the cheap, cloneable
//! async handle the worker and the API share: it runs each call on tokio's
//! blocking pool so an fsync never stalls the async threads.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{
    params, Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior,
};
use serde::{Deserialize, Serialize};
use swarm_queue_client::{AgentName, AgentSpec, Power};

use super::dag::{self, NodeChange, NodeFacts, Outcome, RetryPolicy};
use super::model::{default_power, JobId, JobKind, JobRequest, JobState, Millis, NodeState, Op};
use super::schema::{self, APPLICATION_ID};
use super::templates;
use crate::perf;

mod images;
pub use images::{image_cleanup_plan, OwnedImage};

/// How hard each commit is pushed to disk. See the module essay in
/// [`crate::jobs`] for why the hive ships [`Durability::Full`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `synchronous = FULL`: a commit survives power loss.
    #[default]
    Full,
    /// `synchronous = NORMAL`: a commit survives a process crash; the last
    /// commits may be lost on power loss. Only for comparison in benchmarks.
    Normal,
}

/// Everything that can go wrong with the job database. Each variant names
/// the file, so the operator knows which one to look at.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "the job database {path} is damaged and was left exactly as it was: {reason}. \
         The hive will not start on it. Move the file aside (with its -wal and -shm \
         files) to start with an empty job history, or restore it from a backup"
    )]
    Corrupt { path: PathBuf, reason: String },
    #[error(
        "{path} is not a hive job database ({reason}); it was left untouched. \
         Point the hive's state_dir somewhere else, or move the file aside"
    )]
    Foreign { path: PathBuf, reason: String },
    #[error(
        "the job database {path} has schema version {found}, newer than version {supported} \
         this hive build knows; it was left untouched. Run the newer hive, or restore a backup"
    )]
    NewerSchema {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    #[error("cannot create the directory {path} for the job database: {source}")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("job database {path}: {op}: {source}")]
    Sqlite {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: rusqlite::Error,
    },
    #[error("job database {path}: a stored {what} cannot be read back: {reason}")]
    Decode {
        path: PathBuf,
        what: &'static str,
        reason: String,
    },
    #[error("job {job} does not exist (it may have been pruned)")]
    NoSuchJob { job: JobId },
    #[error("node {seq} of job {job} is not running, so its outcome was not recorded")]
    NodeNotRunning { job: JobId, seq: u32 },
    #[error(
        "agent {agent} is not installed on this hive; deploy it first with `hive deploy {agent}`"
    )]
    NotInstalled { agent: AgentName },
    #[error("the job store task stopped: {0}")]
    Task(String),
}

/// What an enqueue did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enqueued {
    pub job: JobId,
    pub kind: JobKind,
    /// True when a pending job of the same agent and kind absorbed this
    /// request instead of a new job being made.
    pub coalesced: bool,
}

/// A node the worker has claimed and must now run.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    pub job: JobId,
    pub seq: u32,
    pub op: Op,
    /// 1 on the first attempt.
    pub attempt: u32,
    pub agent: AgentName,
    pub request: JobRequest,
}

/// The outcome of a claimed node, for [`Store::finish_and_claim`].
#[derive(Debug, Clone)]
pub struct Finished {
    pub job: JobId,
    pub seq: u32,
    /// The node's agent: the next claim is only of this agent.
    pub agent: AgentName,
    pub outcome: Outcome,
}

/// One node as the API and CLI show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeView {
    pub seq: u32,
    pub op: String,
    pub deps: Vec<u32>,
    pub state: NodeState,
    pub attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The latest progress line (pull or build) or outcome note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// When a node waiting to be retried may run again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at_ms: Option<Millis>,
}

/// One job as the API and CLI show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobView {
    pub id: JobId,
    pub agent: AgentName,
    pub kind: JobKind,
    pub state: JobState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub created_at_ms: Millis,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at_ms: Option<Millis>,
    pub nodes: Vec<NodeView>,
}

/// What the hive has installed for one agent: the only input retirement and
/// orphan reaping may use ("what did I put there"), never inferred from
/// what Docker happens to show.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstalledAgent {
    pub agent: AgentName,
    pub spec_hash: String,
    pub spec: AgentSpec,
    pub image: String,
    /// The declaration revision the spec came from, when it came from one.
    pub revision: Option<u64>,
    pub updated_at_ms: Millis,
}

/// A destructive step written down before it is taken, and replayed until
/// it succeeds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum CleanupAction {
    /// Remove one container, by id: a newer container of the same name is
    /// a different id and is never hit by a replay.
    RemoveContainer { id: String, name: String },
    /// Delete a directory tree (an agent's state directory, on purge).
    DeleteDir { path: PathBuf },
}

/// One outstanding entry of the cleanup journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleanupEntry {
    pub id: i64,
    pub agent: AgentName,
    pub action: CleanupAction,
    pub attempts: u32,
    pub last_error: Option<String>,
}

/// Which jobs a listing shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobFilter {
    /// Every stored job, not just unfinished and recent ones.
    pub all: bool,
    pub agent: Option<AgentName>,
}

/// Finished jobs a default listing shows, newest first, next to every
/// unfinished one.
const RECENT_FINISHED: i64 = 20;

/// The synchronous store. One per connection.
pub struct Store {
    conn: Connection,
    path: PathBuf,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

impl Store {
    /// Open (or create) the job database at `path` with the shipped
    /// durability. An existing file is checked before anything is written
    /// to it: a damaged or foreign file is refused and left byte for byte
    /// as it was.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Self::open_with(path, Durability::Full)
    }

    pub fn open_with(path: &Path, durability: Durability) -> Result<Store, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let existing = std::fs::metadata(path)
            .map(|m| m.len() > 0)
            .unwrap_or(false);
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn =
            Connection::open_with_flags(path, flags).map_err(|source| StoreError::Sqlite {
                path: path.to_path_buf(),
                op: "open",
                source,
            })?;
        let mut store = Store {
            conn,
            path: path.to_path_buf(),
        };
        store
            .conn
            .busy_timeout(Duration::from_secs(5))
            .map_err(store.sql("set busy timeout"))?;
        if existing {
            store.check_existing()?;
        }
        store.configure(durability)?;
        store.migrate()?;
        Ok(store)
    }

    /// The file this store writes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn sql(&self, op: &'static str) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        move |source| StoreError::Sqlite {
            path: self.path.clone(),
            op,
            source,
        }
    }

    fn decode_err(&self, what: &'static str) -> impl Fn(String) -> StoreError + '_ {
        move |reason| StoreError::Decode {
            path: self.path.clone(),
            what,
            reason,
        }
    }

    /// Read-only checks of a file that already has content. Nothing here
    /// writes, so a refused file keeps its bytes.
    fn check_existing(&self) -> Result<(), StoreError> {
        let corrupt = |reason: String| StoreError::Corrupt {
            path: self.path.clone(),
            reason,
        };
        let problems: Vec<String> = (|| {
            let mut stmt = self.conn.prepare("PRAGMA quick_check")?;
            let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
            rows.collect::<Result<Vec<_>, _>>()
        })()
        .map_err(|e| corrupt(e.to_string()))?;
        if problems != ["ok"] {
            let shown: Vec<&str> = problems.iter().take(3).map(String::as_str).collect();
            return Err(corrupt(format!("integrity check: {}", shown.join("; "))));
        }
        let app_id: i32 = self
            .conn
            .query_row("PRAGMA application_id", [], |r| r.get(0))
            .map_err(|e| corrupt(e.to_string()))?;
        if app_id == APPLICATION_ID {
            return Ok(());
        }
        let tables: Vec<String> = (|| {
            let mut stmt = self.conn.prepare(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name LIMIT 5",
            )?;
            let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
            rows.collect::<Result<Vec<_>, _>>()
        })()
        .map_err(|e| corrupt(e.to_string()))?;
        if app_id != 0 || !tables.is_empty() {
            return Err(StoreError::Foreign {
                path: self.path.clone(),
                reason: format!("application_id {app_id:#x}, tables [{}]", tables.join(", ")),
            });
        }
        Ok(())
    }

    fn configure(&self, durability: Durability) -> Result<(), StoreError> {
        let mode: String = self
            .conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
            .map_err(self.sql("enable WAL"))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Sqlite {
                path: self.path.clone(),
                op: "enable WAL",
                source: rusqlite::Error::InvalidParameterName(format!(
                    "journal_mode stayed {mode}"
                )),
            });
        }
        let sync = match durability {
            Durability::Full => "FULL",
            Durability::Normal => "NORMAL",
        };
        self.conn
            .pragma_update(None, "synchronous", sync)
            .map_err(self.sql("set synchronous"))?;
        self.conn
            .pragma_update(None, "foreign_keys", "ON")
            .map_err(self.sql("enable foreign keys"))?;
        Ok(())
    }

    fn migrate(&mut self) -> Result<(), StoreError> {
        let found: u32 = self
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(self.sql("read schema version"))?;
        let latest = schema::latest();
        if found > latest {
            return Err(StoreError::NewerSchema {
                path: self.path.clone(),
                found,
                supported: latest,
            });
        }
        for version in found..latest {
            let path = self.path.clone();
            let err = move |source| StoreError::Sqlite {
                path: path.clone(),
                op: "migrate schema",
                source,
            };
            let tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(&err)?;
            tx.execute_batch(schema::MIGRATIONS[version as usize])
                .map_err(&err)?;
            tx.pragma_update(None, "application_id", APPLICATION_ID)
                .map_err(&err)?;
            tx.pragma_update(None, "user_version", version + 1)
                .map_err(&err)?;
            tx.commit().map_err(&err)?;
            tracing::info!(db = %self.path.display(), version = version + 1, "job database schema migrated");
        }
        Ok(())
    }

    /// The schema version of the open file.
    pub fn schema_version(&self) -> Result<u32, StoreError> {
        self.conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(self.sql("read schema version"))
    }

    fn immediate(&mut self, op: &'static str) -> Result<Transaction<'_>, StoreError> {
        let path = self.path.clone();
        self.conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(move |source| StoreError::Sqlite { path, op, source })
    }

    // -----------------------------------------------------------------
    // Enqueueing

    /// Queue `request` for `agent`, or fold it into a pending job of the same
    /// agent and kind. A first deploy seeds the agent's power intent in the
    /// same transaction, before the job exists.
    pub fn enqueue(
        &mut self,
        agent: &AgentName,
        request: JobRequest,
        now: Millis,
    ) -> Result<Enqueued, StoreError> {
        let path = self.path.clone();
        let tx = self.immediate("enqueue job")?;
        let out = enqueue_tx(&tx, &path, agent, request, now)?;
        tx.commit().map_err(sql_at(&path, "commit enqueue"))?;
        Ok(out)
    }

    /// [`enqueue`](Self::enqueue) each request in order, all in one
    /// transaction: one commit (one fsync) for a whole declaration's jobs,
    /// and none of them is queued unless all are.
    pub fn enqueue_all(
        &mut self,
        requests: Vec<(AgentName, JobRequest)>,
        now: Millis,
    ) -> Result<Vec<Enqueued>, StoreError> {
        let path = self.path.clone();
        let tx = self.immediate("enqueue jobs")?;
        let mut out = Vec::with_capacity(requests.len());
        for (agent, request) in requests {
            out.push(enqueue_tx(&tx, &path, &agent, request, now)?);
        }
        tx.commit().map_err(sql_at(&path, "commit enqueue"))?;
        Ok(out)
    }

    /// "Deploy this agent": a first deploy when nothing is installed or on
    /// its way (joining a first deploy that has not started), otherwise a
    /// rebuild with `spec`, re-resolving the image when `relock`. Decided
    /// and queued in one transaction, so two concurrent requests cannot both
    /// decide from a stale read.
    pub fn request_deploy(
        &mut self,
        agent: &AgentName,
        spec: AgentSpec,
        revision: Option<u64>,
        relock: bool,
        now: Millis,
    ) -> Result<Enqueued, StoreError> {
        let path = self.path.clone();
        let tx = self.immediate("enqueue deploy")?;
        // A first deploy that has not started yet absorbs this one; once
        // one is on its way (or done), deploying again means a rebuild.
        let first_pending: bool = tx
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM jobs WHERE agent = ?1 AND kind = 'first_deploy'
                                AND state = 'pending')",
                params![agent.as_str()],
                |r| r.get(0),
            )
            .map_err(sql_at(&path, "check pending deploy"))?;
        let installed = !first_pending && is_installed_or_coming(&tx, &path, agent)?;
        let request = if installed {
            JobRequest::Rebuild {
                spec,
                relock,
                revision,
            }
        } else {
            JobRequest::FirstDeploy { spec, revision }
        };
        let out = enqueue_tx(&tx, &path, agent, request, now)?;
        tx.commit().map_err(sql_at(&path, "commit deploy"))?;
        Ok(out)
    }

    /// Record an operator's start or stop and queue the reconcile that
    /// carries it out, in one transaction.
    pub fn set_power(
        &mut self,
        agent: &AgentName,
        power: Power,
        now: Millis,
    ) -> Result<Enqueued, StoreError> {
        let path = self.path.clone();
        let tx = self.immediate("set power")?;
        if !is_installed_or_coming(&tx, &path, agent)? {
            return Err(StoreError::NotInstalled {
                agent: agent.clone(),
            });
        }
        tx.execute(
            "INSERT INTO power (agent, wanted, updated_at_ms) VALUES (?1, ?2, ?3)
             ON CONFLICT (agent) DO UPDATE SET wanted = ?2, updated_at_ms = ?3",
            params![agent.as_str(), power.to_string(), now],
        )
        .map_err(sql_at(&path, "write power intent"))?;
        let out = enqueue_tx(&tx, &path, agent, JobRequest::Reconcile, now)?;
        tx.commit().map_err(sql_at(&path, "commit power"))?;
        Ok(out)
    }

    /// Queue a retire (`purge: false`) or purge of an installed agent.
    pub fn request_removal(
        &mut self,
        agent: &AgentName,
        purge: bool,
        now: Millis,
    ) -> Result<Enqueued, StoreError> {
        let path = self.path.clone();
        let tx = self.immediate("enqueue removal")?;
        // A purge is allowed for an agent that is already retired: its state
        // directory is exactly what is left to delete.
        if !purge && !is_installed_or_coming(&tx, &path, agent)? {
            return Err(StoreError::NotInstalled {
                agent: agent.clone(),
            });
        }
        let request = if purge {
            JobRequest::Purge
        } else {
            JobRequest::Retire
        };
        let out = enqueue_tx(&tx, &path, agent, request, now)?;
        tx.commit().map_err(sql_at(&path, "commit removal"))?;
        Ok(out)
    }

    // -----------------------------------------------------------------
    // Running

    /// Claim the next runnable node: ready, past its backoff, in the oldest
    /// unfinished job of its agent, and no other node of that agent running.
    /// Nodes whose op is named in `hold` are left ready (a test hook, see
    /// `worker::WorkerConfig::hold_before`).
    pub fn claim(&mut self, now: Millis, hold: Option<&str>) -> Result<Option<Claim>, StoreError> {
        let path = self.path.clone();
        let tx = self.immediate("claim node")?;
        let claim = claim_tx(&tx, &path, now, hold, None)?;
        if claim.is_some() {
            tx.commit().map_err(sql_at(&path, "commit claim"))?;
        }
        Ok(claim)
    }

    /// Record the outcome of a claimed node and everything it implies for
    /// the rest of its job, in one transaction. Returns the job's new state
    /// when the job finished.
    pub fn finish(
        &mut self,
        job: JobId,
        seq: u32,
        outcome: Outcome,
        policy: &RetryPolicy,
        now: Millis,
    ) -> Result<Option<JobState>, StoreError> {
        let path = self.path.clone();
        let tx = self.immediate("record node outcome")?;
        let state = finish_tx(&tx, &path, job, seq, outcome, policy, now)?;
        tx.commit().map_err(sql_at(&path, "commit node outcome"))?;
        Ok(state)
    }

    /// [`finish`](Self::finish), and in the same transaction
    /// [`claim`](Self::claim) the next runnable node of the same agent
    /// (the next step of its job, or its next job). One commit, one fsync,
    /// where a finish and a claim would be two; each is as durable as
    /// alone: the outcome is on disk before the next node runs, and a crash
    /// after the commit leaves the next node `running`, which
    /// [`recover`](Self::recover) makes ready again.
    pub fn finish_and_claim(
        &mut self,
        done: Finished,
        policy: &RetryPolicy,
        now: Millis,
        hold: Option<&str>,
    ) -> Result<(Option<JobState>, Option<Claim>), StoreError> {
        let path = self.path.clone();
        let tx = self.immediate("record node outcome")?;
        let state = finish_tx(&tx, &path, done.job, done.seq, done.outcome, policy, now)?;
        let next = claim_tx(&tx, &path, now, hold, Some(&done.agent))?;
        tx.commit().map_err(sql_at(&path, "commit node outcome"))?;
        Ok((state, next))
    }

    /// Show progress on a running node (the latest pull or build line).
    pub fn set_detail(&mut self, job: JobId, seq: u32, detail: &str) -> Result<(), StoreError> {
        self.conn
            .execute(
                "UPDATE nodes SET detail = ?3 WHERE job_id = ?1 AND seq = ?2 AND state = 'running'",
                params![job.0, seq, detail],
            )
            .map_err(self.sql("write node progress"))?;
        Ok(())
    }

    /// Crash recovery, run once when the worker starts: a node left running
    /// by a previous process never finished, so it becomes ready again and
    /// runs from the top (node operations are idempotent).
    pub fn recover(&mut self) -> Result<usize, StoreError> {
        self.conn
            .execute(
                "UPDATE nodes SET state = 'ready', not_before_ms = 0 WHERE state = 'running'",
                [],
            )
            .map_err(self.sql("recover running nodes"))
    }

    /// Delete finished jobs older than `retention`, keeping each agent's
    /// newest job so `hive agents` can still show how the last one went.
    pub fn prune(&mut self, now: Millis, retention: Duration) -> Result<usize, StoreError> {
        let cutoff = now.saturating_sub(retention.as_millis() as Millis);
        self.conn
            .execute(
                "DELETE FROM jobs
                 WHERE state IN ('done', 'failed') AND finished_at_ms < ?1
                   AND id NOT IN (SELECT MAX(id) FROM jobs GROUP BY agent)",
                params![cutoff],
            )
            .map_err(self.sql("prune finished jobs"))
    }

    /// The earliest time after `now` at which a waiting node becomes
    /// runnable, so the worker can sleep until then.
    pub fn next_retry_at(&self, now: Millis) -> Result<Option<Millis>, StoreError> {
        self.conn
            .query_row(
                "SELECT MIN(not_before_ms) FROM nodes WHERE state = 'ready' AND not_before_ms > ?1",
                params![now],
                |r| r.get(0),
            )
            .map_err(self.sql("find next retry"))
    }

    // -----------------------------------------------------------------
    // Reading jobs

    pub fn job(&self, job: JobId) -> Result<JobView, StoreError> {
        let mut jobs = self.query_jobs("WHERE id = ?1", params![job.0])?;
        jobs.pop().ok_or(StoreError::NoSuchJob { job })
    }

    /// Jobs newest first: with `all`, every stored one; otherwise every
    /// unfinished job and the most recent finished ones.
    pub fn jobs(&self, filter: &JobFilter) -> Result<Vec<JobView>, StoreError> {
        let agent = filter.agent.as_ref().map(|a| a.as_str().to_string());
        if filter.all {
            return self.query_jobs("WHERE (?1 IS NULL OR agent = ?1)", params![agent]);
        }
        self.query_jobs(
            "WHERE (?1 IS NULL OR agent = ?1) AND (state IN ('pending', 'running')
                OR id IN (SELECT id FROM jobs WHERE (?1 IS NULL OR agent = ?1)
                          AND state IN ('done', 'failed') ORDER BY id DESC LIMIT ?2))",
            params![agent, RECENT_FINISHED],
        )
    }

    /// The newest job of each agent that has one.
    pub fn last_jobs(&self) -> Result<BTreeMap<AgentName, JobView>, StoreError> {
        let jobs = self.query_jobs(
            "WHERE id IN (SELECT MAX(id) FROM jobs GROUP BY agent)",
            params![],
        )?;
        Ok(jobs.into_iter().map(|j| (j.agent.clone(), j)).collect())
    }

    fn query_jobs(
        &self,
        filter: &str,
        args: impl rusqlite::Params,
    ) -> Result<Vec<JobView>, StoreError> {
        let sql = format!(
            "SELECT id, agent, kind, state, error, created_at_ms, finished_at_ms
             FROM jobs {filter} ORDER BY id DESC"
        );
        let mut stmt = self.conn.prepare(&sql).map_err(self.sql("list jobs"))?;
        let rows = stmt
            .query_map(args, |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, Option<String>>(4)?,
                    r.get::<_, i64>(5)?,
                    r.get::<_, Option<i64>>(6)?,
                ))
            })
            .map_err(self.sql("list jobs"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(self.sql("list jobs"))?;
        let mut out = Vec::with_capacity(rows.len());
        for (id, agent, kind, state, error, created, finished) in rows {
            out.push(JobView {
                id: JobId(id),
                agent: AgentName::new(agent)
                    .map_err(|e| self.decode_err("agent name")(e.to_string()))?,
                kind: JobKind::from_str(&kind).map_err(self.decode_err("job kind"))?,
                state: JobState::from_str(&state).map_err(self.decode_err("job state"))?,
                error,
                created_at_ms: created,
                finished_at_ms: finished,
                nodes: self.nodes_of(JobId(id))?,
            });
        }
        Ok(out)
    }

    fn nodes_of(&self, job: JobId) -> Result<Vec<NodeView>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT seq, op_name, deps, state, attempts, error, detail, not_before_ms
                 FROM nodes WHERE job_id = ?1 ORDER BY seq",
            )
            .map_err(self.sql("list nodes"))?;
        let rows = stmt
            .query_map(params![job.0], |r| {
                Ok((
                    r.get::<_, u32>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, u32>(4)?,
                    r.get::<_, Option<String>>(5)?,
                    r.get::<_, Option<String>>(6)?,
                    r.get::<_, i64>(7)?,
                ))
            })
            .map_err(self.sql("list nodes"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(self.sql("list nodes"))?;
        rows.into_iter()
            .map(
                |(seq, op, deps, state, attempts, error, detail, not_before)| {
                    let state =
                        NodeState::from_str(&state).map_err(self.decode_err("node state"))?;
                    Ok(NodeView {
                        seq,
                        op,
                        deps: serde_json::from_str(&deps)
                            .map_err(|e| self.decode_err("node deps")(e.to_string()))?,
                        retry_at_ms: (state == NodeState::Ready && not_before > 0)
                            .then_some(not_before),
                        state,
                        attempts,
                        error,
                        detail,
                    })
                },
            )
            .collect()
    }

    // -----------------------------------------------------------------
    // Power intent

    pub fn power(&self, agent: &AgentName) -> Result<Option<Power>, StoreError> {
        let wanted: Option<String> = self
            .conn
            .query_row(
                "SELECT wanted FROM power WHERE agent = ?1",
                params![agent.as_str()],
                |r| r.get(0),
            )
            .optional()
            .map_err(self.sql("read power intent"))?;
        wanted
            .map(|w| parse_power(&w).map_err(self.decode_err("power intent")))
            .transpose()
    }

    pub fn all_power(&self) -> Result<BTreeMap<AgentName, Power>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT agent, wanted FROM power")
            .map_err(self.sql("read power intents"))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .map_err(self.sql("read power intents"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(self.sql("read power intents"))?;
        rows.into_iter()
            .map(|(a, w)| {
                Ok((
                    AgentName::new(a).map_err(|e| self.decode_err("agent name")(e.to_string()))?,
                    parse_power(&w).map_err(self.decode_err("power intent"))?,
                ))
            })
            .collect()
    }

    /// Record `power` for `agent` unless an intent is already recorded: an
    /// operator's earlier start or stop wins over a declaration's default.
    pub fn seed_power(
        &mut self,
        agent: &AgentName,
        power: Power,
        now: Millis,
    ) -> Result<Power, StoreError> {
        seed_power_tx(&self.conn, &self.path, agent, power, now)?;
        Ok(self.power(agent)?.unwrap_or(power))
    }

    // -----------------------------------------------------------------
    // Installed agents

    /// Write what is (about to be) installed for an agent. The create node
    /// writes it before it creates the container, so a container the hive
    /// made is never missing from the record.
    pub fn record_installed(&mut self, rec: &InstalledAgent) -> Result<(), StoreError> {
        let spec = serde_json::to_string(&rec.spec)
            .map_err(|e| self.decode_err("agent spec")(e.to_string()))?;
        self.conn
            .execute(
                "INSERT INTO installed (agent, spec_hash, spec, image, revision, updated_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (agent) DO UPDATE SET spec_hash = ?2, spec = ?3, image = ?4,
                     revision = ?5, updated_at_ms = ?6",
                params![
                    rec.agent.as_str(),
                    rec.spec_hash,
                    spec,
                    rec.image,
                    rec.revision.map(|r| r as i64),
                    rec.updated_at_ms
                ],
            )
            .map_err(self.sql("write installed agent"))?;
        Ok(())
    }

    pub fn installed(&self, agent: &AgentName) -> Result<Option<InstalledAgent>, StoreError> {
        Ok(self
            .query_installed("WHERE agent = ?1", params![agent.as_str()])?
            .pop())
    }

    /// Every installed agent. The convergence work's only input for
    /// retirement and orphan reaping.
    pub fn installed_all(&self) -> Result<BTreeMap<AgentName, InstalledAgent>, StoreError> {
        Ok(self
            .query_installed("", params![])?
            .into_iter()
            .map(|r| (r.agent.clone(), r))
            .collect())
    }

    fn query_installed(
        &self,
        filter: &str,
        args: impl rusqlite::Params,
    ) -> Result<Vec<InstalledAgent>, StoreError> {
        let sql = format!(
            "SELECT agent, spec_hash, spec, image, revision, updated_at_ms FROM installed {filter}
             ORDER BY agent"
        );
        let mut stmt = self
            .conn
            .prepare(&sql)
            .map_err(self.sql("read installed agents"))?;
        let rows = stmt
            .query_map(args, |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, Option<i64>>(4)?,
                    r.get::<_, i64>(5)?,
                ))
            })
            .map_err(self.sql("read installed agents"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(self.sql("read installed agents"))?;
        rows.into_iter()
            .map(|(agent, spec_hash, spec, image, revision, updated)| {
                Ok(InstalledAgent {
                    agent: AgentName::new(agent)
                        .map_err(|e| self.decode_err("agent name")(e.to_string()))?,
                    spec_hash,
                    spec: serde_json::from_str(&spec)
                        .map_err(|e| self.decode_err("agent spec")(e.to_string()))?,
                    image,
                    revision: revision.map(|r| r as u64),
                    updated_at_ms: updated,
                })
            })
            .collect()
    }

    /// Drop the installed record and power intent of a retired agent, in
    /// one transaction.
    pub fn forget_agent(&mut self, agent: &AgentName) -> Result<(), StoreError> {
        let path = self.path.clone();
        let tx = self.immediate("forget agent")?;
        for table in [
            "DELETE FROM installed WHERE agent = ?1",
            "DELETE FROM power WHERE agent = ?1",
        ] {
            tx.execute(table, params![agent.as_str()])
                .map_err(sql_at(&path, "forget agent"))?;
        }
        tx.commit().map_err(sql_at(&path, "commit forget agent"))
    }

    // -----------------------------------------------------------------
    // Cleanup journal

    /// Write a destructive step down before taking it. Returns the entry id
    /// to clear once it succeeded.
    pub fn journal_cleanup(
        &mut self,
        agent: &AgentName,
        action: &CleanupAction,
        now: Millis,
    ) -> Result<i64, StoreError> {
        let json = serde_json::to_string(action)
            .map_err(|e| self.decode_err("cleanup action")(e.to_string()))?;
        self.conn
            .execute(
                "INSERT INTO cleanup (agent, action, created_at_ms) VALUES (?1, ?2, ?3)",
                params![agent.as_str(), json, now],
            )
            .map_err(self.sql("journal cleanup"))?;
        Ok(self.conn.last_insert_rowid())
    }

    pub fn cleanup_done(&mut self, id: i64) -> Result<(), StoreError> {
        self.conn
            .execute("DELETE FROM cleanup WHERE id = ?1", params![id])
            .map_err(self.sql("clear cleanup entry"))?;
        Ok(())
    }

    pub fn cleanup_failed(&mut self, id: i64, error: &str) -> Result<(), StoreError> {
        self.conn
            .execute(
                "UPDATE cleanup SET attempts = attempts + 1, last_error = ?2 WHERE id = ?1",
                params![id, error],
            )
            .map_err(self.sql("record cleanup failure"))?;
        Ok(())
    }

    /// Outstanding cleanups, oldest first; of one agent, or of all.
    pub fn pending_cleanups(
        &self,
        agent: Option<&AgentName>,
    ) -> Result<Vec<CleanupEntry>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, agent, action, attempts, last_error FROM cleanup
                 WHERE (?1 IS NULL OR agent = ?1) ORDER BY id",
            )
            .map_err(self.sql("read cleanup journal"))?;
        let rows = stmt
            .query_map(params![agent.map(AgentName::as_str)], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, u32>(3)?,
                    r.get::<_, Option<String>>(4)?,
                ))
            })
            .map_err(self.sql("read cleanup journal"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(self.sql("read cleanup journal"))?;
        rows.into_iter()
            .map(|(id, agent, action, attempts, last_error)| {
                Ok(CleanupEntry {
                    id,
                    agent: AgentName::new(agent)
                        .map_err(|e| self.decode_err("agent name")(e.to_string()))?,
                    action: serde_json::from_str(&action)
                        .map_err(|e| self.decode_err("cleanup action")(e.to_string()))?,
                    attempts,
                    last_error,
                })
            })
            .collect()
    }
}

fn sql_at<'a>(path: &'a Path, op: &'static str) -> impl Fn(rusqlite::Error) -> StoreError + 'a {
    move |source| StoreError::Sqlite {
        path: path.to_path_buf(),
        op,
        source,
    }
}

fn parse_power(s: &str) -> Result<Power, String> {
    match s {
        "up" => Ok(Power::Up),
        "down" => Ok(Power::Down),
        other => Err(format!("unknown power {other:?}")),
    }
}

fn seed_power_tx(
    conn: &Connection,
    path: &Path,
    agent: &AgentName,
    power: Power,
    now: Millis,
) -> Result<(), StoreError> {
    conn.execute(
        "INSERT OR IGNORE INTO power (agent, wanted, updated_at_ms) VALUES (?1, ?2, ?3)",
        params![agent.as_str(), power.to_string(), now],
    )
    .map_err(sql_at(path, "seed power intent"))?;
    Ok(())
}

/// Installed, or a deploy of it already queued or under way.
fn is_installed_or_coming(
    tx: &Transaction<'_>,
    path: &Path,
    agent: &AgentName,
) -> Result<bool, StoreError> {
    tx.query_row(
        "SELECT EXISTS (SELECT 1 FROM installed WHERE agent = ?1)
             OR EXISTS (SELECT 1 FROM jobs WHERE agent = ?1
                        AND kind IN ('first_deploy', 'rebuild')
                        AND state IN ('pending', 'running'))",
        params![agent.as_str()],
        |r| r.get(0),
    )
    .map_err(sql_at(path, "check installed"))
}

fn enqueue_tx(
    tx: &Transaction<'_>,
    path: &Path,
    agent: &AgentName,
    request: JobRequest,
    now: Millis,
) -> Result<Enqueued, StoreError> {
    let kind = request.kind();
    let encode_err = |e: serde_json::Error| StoreError::Decode {
        path: path.to_path_buf(),
        what: "job request",
        reason: e.to_string(),
    };
    if let JobRequest::FirstDeploy { spec, .. } = &request {
        seed_power_tx(tx, path, agent, default_power(spec), now)?;
    }
    let pending: Option<(i64, String)> = tx
        .query_row(
            "SELECT id, request FROM jobs WHERE agent = ?1 AND kind = ?2 AND state = 'pending'
             ORDER BY id LIMIT 1",
            params![agent.as_str(), kind.as_str()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(sql_at(path, "find pending duplicate"))?;
    let (job, request, coalesced) = match pending {
        Some((id, old)) => {
            let old: JobRequest = serde_json::from_str(&old).map_err(encode_err)?;
            let merged = old.coalesce(request);
            tx.execute(
                "UPDATE jobs SET request = ?2 WHERE id = ?1",
                params![id, serde_json::to_string(&merged).map_err(encode_err)?],
            )
            .map_err(sql_at(path, "coalesce job"))?;
            tx.execute("DELETE FROM nodes WHERE job_id = ?1", params![id])
                .map_err(sql_at(path, "coalesce job"))?;
            (id, merged, true)
        }
        None => {
            tx.execute(
                "INSERT INTO jobs (agent, kind, request, state, created_at_ms)
                 VALUES (?1, ?2, ?3, 'pending', ?4)",
                params![
                    agent.as_str(),
                    kind.as_str(),
                    serde_json::to_string(&request).map_err(encode_err)?,
                    now
                ],
            )
            .map_err(sql_at(path, "insert job"))?;
            (tx.last_insert_rowid(), request, false)
        }
    };
    // A pending job has never run a node, so re-planning it loses nothing
    // and makes its nodes match the merged request (a relock, say).
    let plan = templates::plan(&request);
    dag::check_plan(&plan).map_err(|reason| StoreError::Decode {
        path: path.to_path_buf(),
        what: "job plan",
        reason,
    })?;
    let mut insert = tx
        .prepare_cached(
            "INSERT INTO nodes (job_id, seq, op, op_name, deps, state) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .map_err(sql_at(path, "insert nodes"))?;
    for (seq, (node, state)) in plan.iter().zip(dag::initial_states(&plan)).enumerate() {
        insert
            .execute(params![
                job,
                seq as u32,
                serde_json::to_string(&node.op).map_err(encode_err)?,
                node.op.name(),
                serde_json::to_string(&node.deps).map_err(encode_err)?,
                state.as_str()
            ])
            .map_err(sql_at(path, "insert nodes"))?;
    }
    Ok(Enqueued {
        job: JobId(job),
        kind,
        coalesced,
    })
}

/// One claimable node (see [`Store::claim`]), marked running; only of
/// `agent` when given.
fn claim_tx(
    tx: &Transaction<'_>,
    path: &Path,
    now: Millis,
    hold: Option<&str>,
    agent: Option<&AgentName>,
) -> Result<Option<Claim>, StoreError> {
    // The plan is pinned: walk unfinished jobs oldest first (CROSS JOIN
    // keeps jobs the outer loop, INDEXED BY its index) and look up each
    // job's nodes by key (the unary `+` keeps SQLite from scanning every
    // ready node instead). The first hit ends the walk, so a claim costs
    // about the same with ten jobs queued or ten thousand.
    let row = tx
        .query_row(
            "SELECT n.job_id, n.seq, n.op, n.attempts, j.agent, j.request
                 FROM jobs j INDEXED BY jobs_unfinished
                 CROSS JOIN nodes n ON n.job_id = j.id
                 WHERE j.state IN ('pending', 'running')
                   AND +n.state = 'ready' AND +n.not_before_ms <= ?1
                   AND n.op_name IS NOT ?2
                   AND (?3 IS NULL OR j.agent = ?3)
                   AND NOT EXISTS (SELECT 1 FROM jobs h
                                   WHERE h.agent = j.agent AND h.id < j.id
                                     AND h.state IN ('pending', 'running'))
                   AND NOT EXISTS (SELECT 1 FROM nodes r
                                   WHERE r.job_id = j.id AND r.state = 'running')
                 ORDER BY j.id, n.seq
                 LIMIT 1",
            params![now, hold, agent.map(AgentName::as_str)],
            |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, u32>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, u32>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, String>(5)?,
                ))
            },
        )
        .optional()
        .map_err(sql_at(path, "find a ready node"))?;
    let Some((job, seq, op, attempts, agent, request)) = row else {
        return Ok(None);
    };
    let decode = |what, e: String| StoreError::Decode {
        path: path.to_path_buf(),
        what,
        reason: e,
    };
    let op: Op = serde_json::from_str(&op).map_err(|e| decode("node op", e.to_string()))?;
    let agent = AgentName::new(agent).map_err(|e| decode("agent name", e.to_string()))?;
    let request: JobRequest =
        serde_json::from_str(&request).map_err(|e| decode("job request", e.to_string()))?;
    tx.execute(
        "UPDATE nodes SET state = 'running', attempts = attempts + 1, started_at_ms = ?3
             WHERE job_id = ?1 AND seq = ?2",
        params![job, seq, now],
    )
    .map_err(sql_at(path, "mark node running"))?;
    tx.execute(
        "UPDATE jobs SET state = 'running', started_at_ms = COALESCE(started_at_ms, ?2)
             WHERE id = ?1 AND state = 'pending'",
        params![job, now],
    )
    .map_err(sql_at(path, "mark job running"))?;
    Ok(Some(Claim {
        job: JobId(job),
        seq,
        op,
        attempt: attempts + 1,
        agent,
        request,
    }))
}

/// Record one node's outcome (see [`Store::finish`]).
fn finish_tx(
    tx: &Transaction<'_>,
    path: &Path,
    job: JobId,
    seq: u32,
    outcome: Outcome,
    policy: &RetryPolicy,
    now: Millis,
) -> Result<Option<JobState>, StoreError> {
    let facts = node_facts(tx, path, job)?;
    match facts.iter().find(|n| n.seq == seq) {
        Some(n) if n.state == NodeState::Running => {}
        Some(_) => return Err(StoreError::NodeNotRunning { job, seq }),
        None if facts.is_empty() => return Err(StoreError::NoSuchJob { job }),
        None => return Err(StoreError::NodeNotRunning { job, seq }),
    }
    let transition = dag::on_outcome(&facts, seq, outcome, policy, now);
    let op_names = node_op_names(tx, path, job)?;
    for (s, change) in &transition.nodes {
        apply_change(tx, path, job, *s, change, &op_names, now)?;
    }
    if let Some((state, error)) = &transition.job {
        tx.execute(
            "UPDATE jobs SET state = ?2, error = ?3, finished_at_ms = ?4 WHERE id = ?1",
            params![job.0, state.as_str(), error, now],
        )
        .map_err(sql_at(path, "finish job"))?;
    }
    Ok(transition.job.map(|(s, _)| s))
}

fn node_facts(tx: &Transaction<'_>, path: &Path, job: JobId) -> Result<Vec<NodeFacts>, StoreError> {
    let mut stmt = tx
        .prepare_cached(
            "SELECT seq, deps, state, attempts FROM nodes WHERE job_id = ?1 ORDER BY seq",
        )
        .map_err(sql_at(path, "read nodes"))?;
    let rows = stmt
        .query_map(params![job.0], |r| {
            Ok((
                r.get::<_, u32>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, u32>(3)?,
            ))
        })
        .map_err(sql_at(path, "read nodes"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(sql_at(path, "read nodes"))?;
    let decode = |what, reason: String| StoreError::Decode {
        path: path.to_path_buf(),
        what,
        reason,
    };
    rows.into_iter()
        .map(|(seq, deps, state, attempts)| {
            Ok(NodeFacts {
                seq,
                deps: serde_json::from_str(&deps)
                    .map_err(|e| decode("node deps", e.to_string()))?,
                state: NodeState::from_str(&state).map_err(|e| decode("node state", e))?,
                attempts,
            })
        })
        .collect()
}

fn node_op_names(
    tx: &Transaction<'_>,
    path: &Path,
    job: JobId,
) -> Result<BTreeMap<u32, String>, StoreError> {
    let mut stmt = tx
        .prepare_cached("SELECT seq, op_name FROM nodes WHERE job_id = ?1")
        .map_err(sql_at(path, "read node names"))?;
    let rows = stmt
        .query_map(params![job.0], |r| {
            Ok((r.get::<_, u32>(0)?, r.get::<_, String>(1)?))
        })
        .map_err(sql_at(path, "read node names"))?
        .collect::<Result<BTreeMap<_, _>, _>>()
        .map_err(sql_at(path, "read node names"));
    rows
}

fn apply_change(
    tx: &Transaction<'_>,
    path: &Path,
    job: JobId,
    seq: u32,
    change: &NodeChange,
    op_names: &BTreeMap<u32, String>,
    now: Millis,
) -> Result<(), StoreError> {
    let key = params![job.0, seq];
    let result = match change {
        NodeChange::Ready => tx.execute(
            "UPDATE nodes SET state = 'ready', not_before_ms = 0 WHERE job_id = ?1 AND seq = ?2",
            key,
        ),
        NodeChange::Done { detail } => tx.execute(
            "UPDATE nodes SET state = 'done', error = NULL, detail = COALESCE(?3, detail),
                 finished_at_ms = ?4 WHERE job_id = ?1 AND seq = ?2",
            params![job.0, seq, detail, now],
        ),
        NodeChange::Retry { not_before, error } => tx.execute(
            "UPDATE nodes SET state = 'ready', error = ?3, not_before_ms = ?4
             WHERE job_id = ?1 AND seq = ?2",
            params![job.0, seq, error, not_before],
        ),
        NodeChange::Failed { error } => tx.execute(
            "UPDATE nodes SET state = 'failed', error = ?3, finished_at_ms = ?4
             WHERE job_id = ?1 AND seq = ?2",
            params![job.0, seq, error, now],
        ),
        NodeChange::Skipped { because_of } => {
            let why = format!(
                "skipped: node {} ({}) failed",
                because_of + 1,
                op_names.get(because_of).map_or("?", String::as_str)
            );
            tx.execute(
                "UPDATE nodes SET state = 'skipped', error = ?3, finished_at_ms = ?4
                 WHERE job_id = ?1 AND seq = ?2",
                params![job.0, seq, why, now],
            )
        }
    };
    result.map_err(sql_at(path, "update node"))?;
    Ok(())
}

/// The async, cloneable handle to one [`Store`], shared by the worker and
/// the API. One connection behind a mutex: the hive's write rate is a few
/// transactions per job, far below what one connection serves, and it
/// keeps `SQLITE_BUSY` out of the process entirely.
#[derive(Clone)]
pub struct JobStore {
    inner: Arc<Mutex<Store>>,
    path: Arc<PathBuf>,
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

    /// Run `f` on the store on tokio's blocking pool.
    pub async fn call<R, F>(&self, f: F) -> Result<R, StoreError>
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

    /// Run `f` on the store on the current thread. For startup and tests.
    pub fn blocking<R>(&self, f: impl FnOnce(&mut Store) -> R) -> R {
        let mut store = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut store)
    }
}

#[cfg(test)]
impl Store {
    pub(crate) fn conn_for_tests(&self) -> &Connection {
        &self.conn
    }

    /// The stored request of a job.
    pub(crate) fn claim_request_for_tests(&self, job: JobId) -> JobRequest {
        let json: String = self
            .conn
            .query_row(
                "SELECT request FROM jobs WHERE id = ?1",
                params![job.0],
                |r| r.get(0),
            )
            .unwrap();
        serde_json::from_str(&json).unwrap()
    }
}
