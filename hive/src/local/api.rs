//! # The local operator API
//!
//! JSON over HTTP on the hive's Unix socket ([`crate::local::access`] decides
//! where [`router`] is served: the socket always, TCP only with remote
//! writes and their token). The `hive` operator verbs ([`crate::local::ops`])
//! are its intended client; who may reach it is decided by the socket's mode
//! and group, because it deploys any spec and `purge` deletes data.
//!
//! | method | path | does |
//! |---|---|---|
//! | GET  | `/api/v1/agents` | wanted power, observed state, image, spec, last job per agent |
//! | GET  | `/api/v1/jobs?all=&agent=` | jobs with their nodes (unfinished and recent, or all) |
//! | GET  | `/api/v1/jobs/{id}` | one job |
//! | GET  | `/api/v1/images` | the images this hive pulled or built, and why each is held |
//! | GET  | `/api/v1/agents/{agent}/logs?follow=&tail=&since=&previous=` | the container's output as NDJSON lines ([`logs`]) |
//! | POST | `/api/v1/agents/{agent}/deploy` | first deploy, or a rebuild when installed; body `{"spec"?, "revision"?, "relock"?}` |
//! | POST | `/api/v1/agents/{agent}/rebuild` | body `{"relock": bool}` |
//! | POST | `/api/v1/agents/{agent}/start` · `/stop` | set power intent, queue a reconcile |
//! | POST | `/api/v1/agents/{agent}/retire` | stop and remove, keep the data |
//! | POST | `/api/v1/agents/{agent}/purge` | body `{"confirm": true}`: retire and delete the data |
//!
//! Verbs answer `202 {"job", "kind", "coalesced", "agent"}`. Errors answer
//! `{"error": "…"}` with a status that fits, and every message names the
//! agent and says what to do. Every request that queues a job wakes the
//! worker.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use swarm_queue_client::{
    AgentName, AgentSpec, AgentStatus, HiveName, JobSummary, Observed, Power,
};
use tokio::sync::Notify;

use crate::agents::jobs::{
    now_ms, AgentRecords, DeployRequest, Enqueued, JobFilter, JobId, JobKind, JobStore, JobView,
    ParseError, StoreError,
};
use crate::agents::runtime::ContainerRuntime;

/// Finds an agent's spec (and the declaration revision it came from) in
/// the hive's current declaration. The wanted task owns declarations; this
/// is how a deploy request reaches them.
pub type DeclaredFn = Arc<dyn Fn(&AgentName) -> Option<(AgentSpec, Option<u64>)> + Send + Sync>;

/// What the API handlers share.
pub struct ApiState<R> {
    /// The hive's state dir (for what `logs --previous` kept).
    pub state_dir: std::path::PathBuf,
    pub store: JobStore,
    /// For the observed state in `agents`; nothing here changes containers.
    pub runtime: Arc<R>,
    pub hive: HiveName,
    /// The worker's wake-up.
    pub wake: Arc<Notify>,
    pub declared: DeclaredFn,
}

impl<R> Clone for ApiState<R> {
    fn clone(&self) -> Self {
        Self {
            state_dir: self.state_dir.clone(),
            store: self.store.clone(),
            runtime: Arc::clone(&self.runtime),
            hive: self.hive.clone(),
            wake: Arc::clone(&self.wake),
            declared: Arc::clone(&self.declared),
        }
    }
}

/// The API's routes, ready to merge into the hive's HTTP router.
pub fn router<R: ContainerRuntime>(state: ApiState<R>) -> Router {
    Router::new()
        .route("/api/v1/agents", get(list_agents::<R>))
        .route("/api/v1/jobs", get(list_jobs::<R>))
        .route("/api/v1/jobs/{id}", get(show_job::<R>))
        .route("/api/v1/images", get(list_images::<R>))
        .route("/api/v1/agents/{agent}/logs", get(logs::logs::<R>))
        .route("/api/v1/agents/{agent}/deploy", post(deploy::<R>))
        .route("/api/v1/agents/{agent}/rebuild", post(rebuild::<R>))
        .route("/api/v1/agents/{agent}/start", post(start::<R>))
        .route("/api/v1/agents/{agent}/stop", post(stop::<R>))
        .route("/api/v1/agents/{agent}/retire", post(retire::<R>))
        .route("/api/v1/agents/{agent}/purge", post(purge::<R>))
        .with_state(state)
}

mod logs;

/// An error answer: a status and a message for the operator.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

/// The JSON body of every error answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: self.message,
        };
        (self.status, Json(body)).into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        let status = match &e {
            StoreError::NotInstalled { .. } | StoreError::NoSuchJob { .. } => StatusCode::NOT_FOUND,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let message = crate::error_chain(&e);
        if status.is_server_error() {
            tracing::error!(error = %message, "local API: job store failed");
        }
        ApiError::new(status, message)
    }
}

fn parse_agent(raw: &str) -> Result<AgentName, ApiError> {
    AgentName::new(raw).map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e.to_string()))
}

/// Parse an optional JSON body; empty means the default.
fn parse_body<T: Default + for<'de> Deserialize<'de>>(
    body: &Bytes,
    what: &str,
) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("the {what} request body is not valid: {e}"),
        )
    })
}

/// The answer to a verb that queued (or joined) a job.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Queued {
    pub job: JobId,
    pub kind: JobKind,
    pub coalesced: bool,
    pub agent: AgentName,
}

fn queued<R>(state: &ApiState<R>, agent: AgentName, q: Enqueued) -> Response {
    state.wake.notify_one();
    tracing::info!(agent = %agent, job = %q.job, kind = %q.kind, coalesced = q.coalesced, "local API queued a job");
    let body = Queued {
        job: q.job,
        kind: q.kind,
        coalesced: q.coalesced,
        agent,
    };
    (StatusCode::ACCEPTED, Json(body)).into_response()
}

/// One row of `hive agents`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentRow {
    pub agent: AgentName,
    /// The power intent; none for an agent that is not installed.
    pub wanted: Option<Power>,
    pub observed: Observed,
    /// The image the installed spec runs.
    pub image: Option<String>,
    /// Spec hash of the installed record.
    pub spec: Option<String>,
    /// Spec hash on the container Docker shows, when there is one.
    pub container_spec: Option<String>,
    pub installed: bool,
    pub last_job: Option<JobSummary>,
    /// How the agent's container has been ending (exit code, OOM kill,
    /// exits since the spec changed, start and finish), from the job store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exits: Option<AgentExits>,
}

/// An agent's exit evidence as `hive agents` shows it: the job store's
/// record, its times as seconds before the listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentExits {
    pub last_code: Option<i64>,
    pub oom_killed: bool,
    /// Exits since the spec last changed.
    pub exits: u32,
    pub first_exit_secs_ago: Option<u64>,
    pub started_secs_ago: Option<u64>,
    pub finished_secs_ago: Option<u64>,
}

impl AgentRow {
    /// The row as the published status carries it.
    pub fn status(&self) -> AgentStatus {
        AgentStatus {
            spec: self.container_spec.clone(),
            last_job: self.last_job.clone(),
            ..AgentStatus::new(self.wanted.unwrap_or(Power::Up), self.observed)
        }
    }
}

/// The body of `GET /api/v1/agents`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgentsView {
    pub hive: HiveName,
    pub agents: Vec<AgentRow>,
    /// Set when Docker could not be asked; observed is then `unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docker_error: Option<String>,
}

/// Every agent the hive knows of (installed, with a power intent, a job,
/// or a container with this hive's label), with what Docker shows.
pub async fn agents_view<R: ContainerRuntime>(
    store: &JobStore,
    runtime: &R,
    hive: &HiveName,
) -> Result<AgentsView, StoreError> {
    let AgentRecords {
        installed,
        power,
        last_jobs: last,
        exits,
    } = store.agent_records().await?;
    let (containers, docker_error) = match runtime.list().await {
        Ok(list) => (Some(list), None),
        Err(e) => (None, Some(crate::error_chain(&e))),
    };
    let by_agent: BTreeMap<String, _> = containers
        .iter()
        .flatten()
        .filter_map(|c| c.agent().map(|a| (a.to_string(), c.clone())))
        .collect();
    let mut names: BTreeSet<AgentName> = BTreeSet::new();
    names.extend(installed.keys().cloned());
    names.extend(power.keys().cloned());
    names.extend(last.keys().cloned());
    let now = crate::agents::jobs::now_ms();
    names.extend(
        by_agent
            .keys()
            .filter_map(|a| AgentName::new(a.as_str()).ok()),
    );
    let agents = names
        .into_iter()
        .map(|agent| {
            let container = by_agent.get(agent.as_str());
            let observed = match (&containers, container) {
                (None, _) => Observed::Unknown,
                (Some(_), None) => Observed::Missing,
                (Some(_), Some(c)) if c.running => Observed::Running,
                (Some(_), Some(_)) => Observed::Stopped,
            };
            let rec = installed.get(&agent);
            AgentRow {
                wanted: power.get(&agent).copied(),
                observed,
                image: rec.map(|r| r.image.clone()),
                spec: rec.map(|r| r.spec_hash.clone()),
                container_spec: container.and_then(|c| c.spec_hash().map(str::to_string)),
                installed: rec.is_some(),
                last_job: last.get(&agent).map(|j| JobSummary {
                    id: j.id.0 as u64,
                    kind: j.kind.to_string(),
                    state: j.state.to_string(),
                    error: j
                        .error
                        .as_deref()
                        .map(swarm_queue_client::payload::sanitize_message),
                }),
                exits: exits.get(&agent).map(|e| exit_report(e, now)),
                agent,
            }
        })
        .collect();
    Ok(AgentsView {
        hive: hive.clone(),
        agents,
        docker_error,
    })
}

/// An agent's exit evidence with its times as of `now`.
fn exit_report(
    rec: &crate::agents::jobs::ExitRecord,
    now: crate::agents::jobs::Millis,
) -> AgentExits {
    let ago = |t: Option<i64>| t.map(|t| (now.saturating_sub(t).max(0) / 1000) as u64);
    AgentExits {
        last_code: rec.last_code,
        oom_killed: rec.oom_killed,
        exits: rec.exits,
        first_exit_secs_ago: ago(rec.first_exit_at_ms),
        started_secs_ago: ago(rec.started_at_ms),
        finished_secs_ago: ago(rec.finished_at_ms),
    }
}

async fn list_agents<R: ContainerRuntime>(
    State(state): State<ApiState<R>>,
) -> Result<Json<AgentsView>, ApiError> {
    Ok(Json(
        agents_view(&state.store, state.runtime.as_ref(), &state.hive).await?,
    ))
}

#[derive(Debug, Default, Deserialize)]
struct JobsQuery {
    #[serde(default)]
    all: bool,
    agent: Option<String>,
}

/// The body of `GET /api/v1/jobs`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobsView {
    pub jobs: Vec<JobView>,
}

async fn list_jobs<R: ContainerRuntime>(
    State(state): State<ApiState<R>>,
    Query(q): Query<JobsQuery>,
) -> Result<Json<JobsView>, ApiError> {
    let agent = q.agent.as_deref().map(parse_agent).transpose()?;
    let filter = JobFilter { all: q.all, agent };
    let jobs = state.store.jobs(filter).await?;
    Ok(Json(JobsView { jobs }))
}

/// `GET /api/v1/images`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ImagesView {
    pub images: Vec<crate::agents::images::ImageRow>,
}

async fn list_images<R: ContainerRuntime>(
    State(state): State<ApiState<R>>,
) -> Result<Json<ImagesView>, ApiError> {
    let (owned, installed) = state.store.images_and_installed().await?;
    let installed = installed.into_keys().map(|a| a.to_string()).collect();
    // Without Docker, "in use" is unknown; show the records as they are.
    let in_use = match state.runtime.list().await {
        Ok(list) => list.into_iter().map(|c| c.image_id).collect(),
        Err(_) => Default::default(),
    };
    let images = crate::agents::images::why_held(&owned, &installed, &in_use);
    Ok(Json(ImagesView { images }))
}

async fn show_job<R: ContainerRuntime>(
    State(state): State<ApiState<R>>,
    Path(id): Path<String>,
) -> Result<Json<JobView>, ApiError> {
    let id: JobId = id
        .parse()
        .map_err(|e: ParseError| ApiError::new(StatusCode::BAD_REQUEST, e.to_string()))?;
    Ok(Json(state.store.job(id).await?))
}

/// Body of a deploy: an explicit spec overrides the declaration.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct DeployBody {
    #[serde(default)]
    pub spec: Option<AgentSpec>,
    #[serde(default)]
    pub revision: Option<u64>,
    /// When the agent is already installed: re-resolve the image.
    #[serde(default)]
    pub relock: bool,
}

/// Body of a rebuild.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct RebuildBody {
    #[serde(default)]
    pub relock: bool,
}

/// Body of a purge: it must say it means it.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct PurgeBody {
    #[serde(default)]
    pub confirm: bool,
}

/// The spec to deploy `agent` with: the request's own, else the current
/// declaration's, else what is installed.
async fn spec_for<R>(
    state: &ApiState<R>,
    agent: &AgentName,
    given: Option<AgentSpec>,
    revision: Option<u64>,
) -> Result<(AgentSpec, Option<u64>), ApiError> {
    if let Some(spec) = given {
        spec.validate(agent).map_err(|e| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("the spec given for agent {agent} is not valid: {e}"),
            )
        })?;
        return Ok((spec, revision));
    }
    if let Some(found) = (state.declared)(agent) {
        return Ok(found);
    }
    match state.store.installed(agent).await? {
        Some(rec) => Ok((rec.spec, rec.revision)),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!(
                "agent {agent} is not in hive {}'s declaration and is not installed, so there \
                 is no spec to deploy; declare it with swarm-controller, or give one with \
                 `hive deploy {agent} --spec FILE`",
                state.hive
            ),
        )),
    }
}

async fn deploy<R: ContainerRuntime>(
    State(state): State<ApiState<R>>,
    Path(agent): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let agent = parse_agent(&agent)?;
    let body: DeployBody = parse_body(&body, "deploy")?;
    let (spec, revision) = spec_for(&state, &agent, body.spec, body.revision).await?;
    if let Some(fields) = crate::agents::plan::unknown_fields(&spec) {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!(
                "the spec of agent {agent} has fields this hive (version {}) does not know: \
                 {fields}; nothing was queued",
                env!("CARGO_PKG_VERSION"),
            ),
        ));
    }
    let deploy = DeployRequest {
        spec,
        revision,
        relock: body.relock,
    };
    let q = state.store.request_deploy(&agent, deploy, now_ms()).await?;
    Ok(queued(&state, agent, q))
}

async fn rebuild<R: ContainerRuntime>(
    State(state): State<ApiState<R>>,
    Path(agent): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let agent = parse_agent(&agent)?;
    let body: RebuildBody = parse_body(&body, "rebuild")?;
    let installed = state.store.installed(&agent).await?;
    if installed.is_none() {
        return Err(StoreError::NotInstalled { agent }.into());
    }
    let (spec, revision) = spec_for(&state, &agent, None, None).await?;
    let request = crate::agents::jobs::JobRequest::Rebuild {
        spec,
        relock: body.relock,
        revision,
    };
    let q = state.store.enqueue(&agent, request, now_ms()).await?;
    Ok(queued(&state, agent, q))
}

async fn set_power<R: ContainerRuntime>(
    state: ApiState<R>,
    agent: String,
    power: Power,
) -> Result<Response, ApiError> {
    let agent = parse_agent(&agent)?;
    let q = state.store.set_power(&agent, power, now_ms()).await?;
    Ok(queued(&state, agent, q))
}

async fn start<R: ContainerRuntime>(
    State(state): State<ApiState<R>>,
    Path(agent): Path<String>,
) -> Result<Response, ApiError> {
    set_power(state, agent, Power::Up).await
}

async fn stop<R: ContainerRuntime>(
    State(state): State<ApiState<R>>,
    Path(agent): Path<String>,
) -> Result<Response, ApiError> {
    set_power(state, agent, Power::Down).await
}

async fn retire<R: ContainerRuntime>(
    State(state): State<ApiState<R>>,
    Path(agent): Path<String>,
) -> Result<Response, ApiError> {
    let agent = parse_agent(&agent)?;
    let q = state.store.request_retire(&agent, now_ms()).await?;
    Ok(queued(&state, agent, q))
}

async fn purge<R: ContainerRuntime>(
    State(state): State<ApiState<R>>,
    Path(agent): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let agent = parse_agent(&agent)?;
    let body: PurgeBody = parse_body(&body, "purge")?;
    if !body.confirm {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!(
                "purge deletes agent {agent}'s state directory and cannot be undone; \
                 confirm with `hive purge {agent} --yes`"
            ),
        ));
    }
    let q = state.store.request_purge(&agent, now_ms()).await?;
    Ok(queued(&state, agent, q))
}

#[cfg(test)]
mod tests;
