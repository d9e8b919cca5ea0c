//! Queueing requests and reading jobs back (tables `jobs` and `nodes`).
//!
//! **Invariant:** a request is decided and queued in one `BEGIN IMMEDIATE`
//! transaction, so two concurrent requests never both decide from the same
//! stale read; a pending job of the same agent and kind absorbs a new
//! request (coalescing) and is re-planned, since it has never run a node.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::str::FromStr;

use rusqlite::{params, OptionalExtension, Transaction};
use serde::{Deserialize, Serialize};
use swarm_queue_client::{AgentName, AgentSpec, Power};

use super::applied::{record_applied_tx, AppliedRevision};
use super::nodes::decode_deps_and_state;
use super::power::{write_power_tx, PowerWrite};
use super::{sql_at, Store, StoreError};
use crate::agents::jobs::dag;
use crate::agents::jobs::model::{
    default_power, JobId, JobKind, JobRequest, JobState, Millis, NodeState,
};
use crate::agents::jobs::templates;

/// What an enqueue did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enqueued {
    pub job: JobId,
    pub kind: JobKind,
    /// True when a pending job of the same agent and kind absorbed this
    /// request instead of a new job being made.
    pub coalesced: bool,
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

/// Which jobs a listing shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobFilter {
    /// Every stored job, not just unfinished and recent ones.
    pub all: bool,
    pub agent: Option<AgentName>,
}

/// "Deploy this agent", as the API and the declaration follower ask it.
#[derive(Debug, Clone, PartialEq)]
pub struct DeployRequest {
    pub spec: AgentSpec,
    /// The declaration revision the spec came from, when it came from one.
    pub revision: Option<u64>,
    /// Re-resolve the image reference on a rebuild.
    pub relock: bool,
}

/// Finished jobs a default listing shows, newest first, next to every
/// unfinished one.
const RECENT_FINISHED: i64 = 20;

impl Store {
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
    /// and none of them is queued unless all are. `applied`: the
    /// declaration they were decided from, recorded in the same commit.
    pub fn enqueue_all(
        &mut self,
        requests: Vec<(AgentName, JobRequest)>,
        applied: Option<AppliedRevision>,
        now: Millis,
    ) -> Result<Vec<Enqueued>, StoreError> {
        let path = self.path.clone();
        let tx = self.immediate("enqueue jobs")?;
        let mut out = Vec::with_capacity(requests.len());
        for (agent, request) in requests {
            out.push(enqueue_tx(&tx, &path, &agent, request, now)?);
        }
        if let Some(applied) = applied {
            record_applied_tx(&tx, &path, applied)?;
        }
        tx.commit().map_err(sql_at(&path, "commit enqueue"))?;
        Ok(out)
    }

    /// "Deploy this agent": a first deploy when nothing is installed or on
    /// its way (joining a first deploy that has not started), otherwise a
    /// rebuild with the request's spec, re-resolving the image when it asks
    /// to relock. Decided and queued in one transaction, so two concurrent
    /// requests cannot both decide from a stale read.
    pub fn request_deploy(
        &mut self,
        agent: &AgentName,
        deploy: DeployRequest,
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
        let DeployRequest {
            spec,
            revision,
            relock,
        } = deploy;
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
        write_power_tx(&tx, &path, agent, power, now, PowerWrite::Replace)?;
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

    /// The agents with a job not finished, read from the index alone (the
    /// converger asks at every pass: no job's nodes are read).
    pub fn busy_agents(&self) -> Result<BTreeSet<AgentName>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT DISTINCT agent FROM jobs WHERE state NOT IN ('done', 'failed')")
            .map_err(self.sql("list busy agents"))?;
        let names = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .map_err(self.sql("list busy agents"))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(self.sql("list busy agents"))?;
        names
            .into_iter()
            .map(|n| AgentName::new(n).map_err(self.decode_err("agent name")))
            .collect()
    }

    /// The newest job of each agent that has one.
    pub fn last_jobs(&self) -> Result<BTreeMap<AgentName, JobView>, StoreError> {
        let jobs = self.query_jobs(
            "WHERE id IN (SELECT MAX(id) FROM jobs GROUP BY agent)",
            params![],
        )?;
        Ok(jobs.into_iter().map(|j| (j.agent.clone(), j)).collect())
    }
}

impl Store {
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
                agent: AgentName::new(agent).map_err(self.decode_err("agent name"))?,
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
                    let (deps, state) = decode_deps_and_state(&self.path, &deps, &state)?;
                    Ok(NodeView {
                        seq,
                        op,
                        deps,
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
    if let JobRequest::FirstDeploy { spec, .. } = &request {
        write_power_tx(tx, path, agent, default_power(spec), now, PowerWrite::Seed)?;
    }
    let (job, request, coalesced) = upsert_job(tx, path, agent, request, now)?;
    // A pending job has never run a node, so re-planning it loses nothing
    // and makes its nodes match the merged request (a relock, say).
    insert_plan(tx, path, job, &request)?;
    Ok(Enqueued {
        job: JobId(job),
        kind,
        coalesced,
    })
}

/// A failed encoding of a stored request or plan, naming the database.
fn encode_err(path: &Path) -> impl Fn(serde_json::Error) -> StoreError + '_ {
    move |e| StoreError::Decode {
        path: path.to_path_buf(),
        what: "job request",
        reason: e.to_string(),
    }
}

/// Merge the request into the agent's pending job of the same kind (its
/// nodes dropped, to be planned again), or insert a new job. Returns the
/// job's id, the request it now carries and whether it was merged.
fn upsert_job(
    tx: &Transaction<'_>,
    path: &Path,
    agent: &AgentName,
    request: JobRequest,
    now: Millis,
) -> Result<(i64, JobRequest, bool), StoreError> {
    let kind = request.kind();
    let pending: Option<(i64, String)> = tx
        .query_row(
            "SELECT id, request FROM jobs WHERE agent = ?1 AND kind = ?2 AND state = 'pending'
             ORDER BY id LIMIT 1",
            params![agent.as_str(), kind.as_str()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(sql_at(path, "find pending duplicate"))?;
    let Some((id, old)) = pending else {
        tx.execute(
            "INSERT INTO jobs (agent, kind, request, state, created_at_ms)
             VALUES (?1, ?2, ?3, 'pending', ?4)",
            params![
                agent.as_str(),
                kind.as_str(),
                serde_json::to_string(&request).map_err(encode_err(path))?,
                now
            ],
        )
        .map_err(sql_at(path, "insert job"))?;
        return Ok((tx.last_insert_rowid(), request, false));
    };
    let old: JobRequest = serde_json::from_str(&old).map_err(encode_err(path))?;
    let merged = old.coalesce(request);
    tx.execute(
        "UPDATE jobs SET request = ?2 WHERE id = ?1",
        params![
            id,
            serde_json::to_string(&merged).map_err(encode_err(path))?
        ],
    )
    .map_err(sql_at(path, "coalesce job"))?;
    tx.execute("DELETE FROM nodes WHERE job_id = ?1", params![id])
        .map_err(sql_at(path, "coalesce job"))?;
    Ok((id, merged, true))
}

/// Insert the nodes the request's plan has, in their initial states.
fn insert_plan(
    tx: &Transaction<'_>,
    path: &Path,
    job: i64,
    request: &JobRequest,
) -> Result<(), StoreError> {
    let plan = templates::plan(request);
    dag::check_plan(&plan).map_err(|e| StoreError::Decode {
        path: path.to_path_buf(),
        what: "job plan",
        reason: e.to_string(),
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
                serde_json::to_string(&node.op).map_err(encode_err(path))?,
                node.op.name(),
                serde_json::to_string(&node.deps).map_err(encode_err(path))?,
                state.as_str()
            ])
            .map_err(sql_at(path, "insert nodes"))?;
    }
    Ok(())
}
