//! What each node op does: [`run_node`] dispatches on the claimed node's
//! [`Op`] to one function per op. Every op looks before it acts (see
//! [`crate::agents::jobs`]'s essay), so a node cut off by a crash or a shutdown
//! simply runs again.

use std::path::{Path, PathBuf};

use swarm_queue_client::containers::container_name;
use swarm_queue_client::{AgentName, AgentSpec, Power};

use super::image::ensure_image;
use super::journal::{delete_dir, replay_cleanups};
use super::{agent_dir, image_ref, short_id, NodeError, WorkerDeps};
use crate::agents::jobs::model::default_power;
use crate::agents::jobs::{now_ms, Claim, CleanupAction, InstalledAgent, Op};
use crate::agents::runtime::admit;
use crate::agents::runtime::confine::BuildRoots;
use crate::agents::runtime::{
    check_owner, AgentContainer, ContainerInfo, ContainerRuntime, ContainerSpec, RuntimeError,
};

/// Do what one node says. Returns a note for the operator.
pub(super) async fn run_node<R: ContainerRuntime>(
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
        Op::Start => start_as_wanted(deps, claim, &name).await,
        Op::Stop => stop_all(deps, agent, &name).await.map(Some),
        Op::Remove { forget } => {
            let note = remove(deps, agent, &name).await?;
            if forget {
                store.forget_agent(agent).await?;
            }
            Ok(Some(note))
        }
        Op::Reconcile => reconcile(deps, agent, &name).await,
        Op::PurgeData => purge_data(deps, agent).await.map(Some),
    }
}

fn need_spec(claim: &Claim) -> Result<&AgentSpec, NodeError> {
    claim.request.spec().ok_or_else(|| NodeError::NoSpec {
        job: claim.job,
        agent: claim.agent.clone(),
        op: claim.op,
    })
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

fn checkout_dir(state_dir: &Path, agent: &AgentName) -> PathBuf {
    BuildRoots::new(state_dir, vec![]).clone_dir(agent.as_str())
}

/// Start the container unless the agent's power intent (recorded, or the
/// spec's default) is down.
async fn start_as_wanted<R: ContainerRuntime>(
    deps: &WorkerDeps<R>,
    claim: &Claim,
    name: &str,
) -> Result<Option<String>, NodeError> {
    let recorded = deps.store.power(&claim.agent).await?;
    let wanted = recorded
        .or(claim.request.spec().map(default_power))
        .unwrap_or(Power::Up);
    if wanted == Power::Down {
        return Ok(Some("left stopped: power intent is down".into()));
    }
    start(deps, &claim.agent, name).await
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

/// Stop every container of the agent (see [`agent_containers`]).
async fn stop_all<R: ContainerRuntime>(
    deps: &WorkerDeps<R>,
    agent: &AgentName,
    name: &str,
) -> Result<String, NodeError> {
    let targets = agent_containers(deps, agent, name).await?;
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
    Ok(match (targets.len(), stopped) {
        (0, _) => "no container".into(),
        (1, 1) => "stopped".into(),
        (1, _) => "was not running".into(),
        (n, s) => format!("{n} containers, {s} stopped"),
    })
}

/// Bring the container's running state in line with the power intent.
async fn reconcile<R: ContainerRuntime>(
    deps: &WorkerDeps<R>,
    agent: &AgentName,
    name: &str,
) -> Result<Option<String>, NodeError> {
    let wanted = deps.store.power(agent).await?.unwrap_or(Power::Up);
    let info = deps
        .runtime
        .inspect(name)
        .await
        .map_err(NodeError::runtime(format!("inspect {name}")))?
        .ok_or_else(|| NodeError::NoContainer {
            agent: agent.clone(),
            container: name.to_string(),
        })?;
    check_owner(&deps.hive, &info).map_err(NodeError::runtime(format!("reconcile {name}")))?;
    match (wanted, info.running) {
        (Power::Up, false) => start(deps, agent, name).await,
        (Power::Down, true) => {
            deps.runtime
                .stop(name, deps.config.stop_timeout)
                .await
                .map_err(NodeError::runtime(format!("stop {name}")))?;
            Ok(Some("stopped (power intent is down)".into()))
        }
        (Power::Up, true) => Ok(Some("running, as wanted".into())),
        (Power::Down, false) => Ok(Some("stopped, as wanted".into())),
    }
}

/// Delete the agent's state dir and build checkout, each journalled
/// first, and forget the agent.
async fn purge_data<R: ContainerRuntime>(
    deps: &WorkerDeps<R>,
    agent: &AgentName,
) -> Result<String, NodeError> {
    let store = &deps.store;
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
    let deleted = format!("deleted {}", agent_dir(&deps.state_dir, agent).display());
    Ok(match super::objects::release_volumes(deps, agent).await? {
        Some(volumes) => format!("{deleted}, {volumes}"),
        None => deleted,
    })
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
    keep_output(deps, agent, info).await;
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

/// Keep the last lines of `info` for `hive logs --previous` before it is
/// removed; best effort (a failure is logged, the removal goes on), and at
/// most [`KEEP_WITHIN`] so an unwell Docker does not hold the job.
async fn keep_output<R: ContainerRuntime>(
    deps: &WorkerDeps<R>,
    agent: &AgentName,
    info: &ContainerInfo,
) {
    use crate::agents::runtime::logs::{keep, LogRequest, KEEP_LINES};
    let request = LogRequest {
        tail: Some(KEEP_LINES),
        ..Default::default()
    };
    let path = crate::agents::worker::previous_log_path(&deps.state_dir, agent);
    let work = async {
        match deps.runtime.logs(&info.id, &request).await {
            Ok(Some(lines)) => keep(&path, lines).await.map_err(|e| e.to_string()),
            Ok(None) => Ok(0),
            Err(e) => Err(crate::error_chain(&e)),
        }
    };
    match tokio::time::timeout(KEEP_WITHIN, work).await {
        Ok(Ok(bytes)) => tracing::debug!(%agent, bytes, "kept the removed container's last lines"),
        Ok(Err(error)) => {
            tracing::warn!(%agent, %error, "could not keep the removed container's last lines")
        }
        Err(_) => {
            tracing::warn!(%agent, "reading the removed container's last lines took too long")
        }
    }
}

/// How long [`keep_output`] may read.
const KEEP_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

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
    let existing = existing_with_spec(deps, agent, name, &spec_hash).await?;
    // What the hive config allows, checked before anything is recorded.
    let ports = admit::ports(agent, spec, &deps.config.host.port_addresses)
        .map_err(NodeError::runtime(format!("create {name}")))?;
    let volume_binds = super::objects::prepare(deps, agent, spec).await?;
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
    let container = ContainerSpec::for_agent(AgentContainer {
        hive: &deps.hive,
        agent,
        spec,
        image: &image,
        state_dir: &dir,
        extra_binds: deps.extra_binds.clone(),
        limits: deps.config.container_limits,
        ports,
        volume_binds,
    });
    match deps.runtime.create(&container).await {
        Ok(id) => Ok(Some(format!("created {}", short_id(&id)))),
        Err(RuntimeError::NameTaken { .. }) => adopt(deps, name, &spec_hash).await.map(Some),
        Err(e) => Err(NodeError::runtime(format!("create {name}"))(e)),
    }
}

/// The container holding `name`, if any; an error unless it is this
/// hive's with `spec_hash`.
async fn existing_with_spec<R: ContainerRuntime>(
    deps: &WorkerDeps<R>,
    agent: &AgentName,
    name: &str,
    spec_hash: &str,
) -> Result<Option<ContainerInfo>, NodeError> {
    let existing = deps
        .runtime
        .inspect(name)
        .await
        .map_err(NodeError::runtime(format!("inspect {name}")))?;
    if let Some(info) = &existing {
        check_owner(&deps.hive, info).map_err(NodeError::runtime(format!("create {name}")))?;
        if info.spec_hash() != Some(spec_hash) {
            return Err(NodeError::SpecMismatch {
                container: name.to_string(),
                agent: agent.clone(),
                found: info.spec_hash().unwrap_or("(none)").to_string(),
                wanted: spec_hash.to_string(),
            });
        }
    }
    Ok(existing)
}

/// A create cut off by a crash can still be finishing inside dockerd when
/// the restarted hive looked: the name is taken by the very container
/// this node made. Look again and adopt it if it is ours with this spec;
/// anything else stays an error.
async fn adopt<R: ContainerRuntime>(
    deps: &WorkerDeps<R>,
    name: &str,
    spec_hash: &str,
) -> Result<String, NodeError> {
    let again = deps
        .runtime
        .inspect(name)
        .await
        .map_err(NodeError::runtime(format!("inspect {name}")))?;
    match again {
        Some(info)
            if check_owner(&deps.hive, &info).is_ok() && info.spec_hash() == Some(spec_hash) =>
        {
            Ok(format!(
                "adopted container {} created before a restart",
                short_id(&info.id)
            ))
        }
        _ => Err(NodeError::runtime(format!("create {name}"))(
            RuntimeError::NameTaken {
                name: name.to_string(),
                message: "taken by a container that is not this agent's with this spec".into(),
            },
        )),
    }
}
