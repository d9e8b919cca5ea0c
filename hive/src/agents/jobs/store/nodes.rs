//! Running nodes (table `nodes`): the claim, the recorded outcome and what
//! it implies for the rest of the job, progress lines, crash recovery and
//! pruning of finished jobs.
//!
//! **Invariant:** only the oldest unfinished job of an agent has claimable
//! nodes, and at most one node of a job runs at a time; an outcome is
//! recorded only for a node that is running.

use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use rusqlite::{params, OptionalExtension, Transaction};
use swarm_queue_client::AgentName;

use super::{sql_at, Store, StoreError};
use crate::agents::jobs::dag::{self, NodeChange, NodeFacts, Outcome, RetryPolicy};
use crate::agents::jobs::model::{JobId, JobRequest, JobState, Millis, NodeState, Op};

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

impl Store {
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
    rows.into_iter()
        .map(|(seq, deps, state, attempts)| {
            let (deps, state) = decode_deps_and_state(path, &deps, &state)?;
            Ok(NodeFacts {
                seq,
                deps,
                state,
                attempts,
            })
        })
        .collect()
}

/// A nodes row's `deps` (stored as a JSON list of seqs) and `state` (stored
/// as its name), typed: the one place that reads them back.
pub(super) fn decode_deps_and_state(
    path: &Path,
    deps: &str,
    state: &str,
) -> Result<(Vec<u32>, NodeState), StoreError> {
    let decode = |what, reason: String| StoreError::Decode {
        path: path.to_path_buf(),
        what,
        reason,
    };
    let state = NodeState::from_str(state).map_err(|e| decode("node state", e.to_string()))?;
    let deps = serde_json::from_str(deps).map_err(|e| decode("node deps", e.to_string()))?;
    Ok((deps, state))
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
