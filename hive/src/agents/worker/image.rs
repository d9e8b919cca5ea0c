//! The image node and image cleanup. [`ensure_image`] pulls or builds an
//! agent's image, showing progress on the node and in `HiveStatus` without
//! flooding either; [`ImageCleanup`] defers the hive-wide image cleanup a
//! finished job wants until the worker is idle, so that a rebuild of many
//! agents pays one container listing, not one per job.

use std::sync::Mutex;
use std::time::Duration;

use swarm_queue_client::{AgentName, AgentSpec};
use tokio::sync::watch;

use super::{image_ref, lock, short_id, NodeError, WorkerDeps, PULL_PROGRESS_EVERY};
use crate::agents::jobs::Claim;
use crate::agents::runtime::confine::{confine, confine_repo, BuildRoots};
use crate::agents::runtime::context::{self, ContextSource, Repo};
use crate::agents::runtime::pull_progress;
use crate::agents::runtime::{BuildRequest, ContainerRuntime};

/// The longest a wanted image cleanup waits for the worker to be idle.
const IMAGE_CLEAN_DEFER_MAX: Duration = Duration::from_secs(60);

/// The least time between two detail writes of a node's progress line.
const DETAIL_EVERY: Duration = Duration::from_millis(250);

/// Pull or build the spec's image unless it is there (or `relock` says to
/// resolve it again). Progress lines go to the log and to the node's
/// detail, where `hive job` and `deploy --wait` show them.
pub(super) async fn ensure_image<R: ContainerRuntime>(
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
    let (tx, rx) = watch::channel(String::new());
    let progress = move |line: &str| {
        tracing::debug!(progress = line);
        tx.send_replace(line.to_string());
    };
    let writer = tokio::spawn(write_progress(deps, claim, rx));
    let result = match &spec.build {
        None => pull_image(deps, agent, &image, present, &progress).await,
        Some(build) => build_image(deps, agent, build, &image, relock, &progress).await,
    };
    drop(progress);
    let _ = writer.await;
    if let Ok(detail) = &result {
        record_image(deps, agent, spec, &image, detail).await;
    }
    result.map(Some)
}

/// An image cleanup ([`crate::agents::images::clean`]) wanted by a finished
/// job, run by the worker loop once no node is running, or at the latest
/// [`IMAGE_CLEAN_DEFER_MAX`] after it was first wanted. A cleanup lists
/// every container of the hive: after a rebuild of a hundred agents this
/// is one listing, not one per job, and none runs beside a create.
#[derive(Default)]
pub(super) struct ImageCleanup {
    wanted_since: Mutex<Option<tokio::time::Instant>>,
}

impl ImageCleanup {
    pub(super) fn want(&self) {
        lock(&self.wanted_since).get_or_insert_with(tokio::time::Instant::now);
    }

    pub(super) async fn run_if_due<R: ContainerRuntime>(&self, deps: &WorkerDeps<R>, idle: bool) {
        let due = {
            let mut since = lock(&self.wanted_since);
            let due = since.is_some_and(|t| idle || t.elapsed() >= IMAGE_CLEAN_DEFER_MAX);
            if due {
                *since = None;
            }
            due
        };
        if due {
            if let Err(e) = crate::agents::images::clean(&deps.store, deps.runtime.as_ref()).await {
                tracing::warn!(error = %crate::error_chain(&e), "image cleanup failed; the next one tries again");
            }
        }
    }
}

/// Show the latest progress line on the node, at most a few times a
/// second, and the pull's tally in the agent's `HiveStatus` entry at most
/// once a second: every change there is a publish, and a pull must not
/// flood NATS. Ends when the progress sender is dropped.
fn write_progress<R: ContainerRuntime>(
    deps: &WorkerDeps<R>,
    claim: &Claim,
    mut rx: watch::Receiver<String>,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let (store, job, seq) = (deps.store.clone(), claim.job, claim.seq);
    let (board, who) = (deps.board.clone(), claim.agent.clone());
    async move {
        let mut next_publish = tokio::time::Instant::now();
        while rx.changed().await.is_ok() {
            let line = rx.borrow_and_update().clone();
            let now = tokio::time::Instant::now();
            if let (Some(h), Some(sum)) = (&board, pull_progress::summary_of(&line)) {
                if now >= next_publish {
                    h.set_image_progress(&who, Some(sum));
                    next_publish = now + PULL_PROGRESS_EVERY;
                }
            }
            let _ = store.set_detail(job, seq, line).await;
            tokio::time::sleep(DETAIL_EVERY).await;
        }
        if let Some(h) = &board {
            h.set_image_progress(&who, None);
        }
    }
}

async fn pull_image<R: ContainerRuntime>(
    deps: &WorkerDeps<R>,
    agent: &AgentName,
    image: &str,
    present: bool,
    progress: &(dyn Fn(&str) + Send + Sync),
) -> Result<String, NodeError> {
    match deps.runtime.pull(image, progress).await {
        Ok(()) => {
            if let Some(events) = &deps.events {
                let said = swarm_queue_client::payload::sanitize_message(image);
                let event = swarm_queue_client::event_stream::Event::new("image_pulled");
                events.emit(agent, event.said(said));
            }
            Ok(format!("pulled {image}"))
        }
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
    }
}

/// Record a pulled or built image for the image cleanup (a kept local one
/// is recorded already).
async fn record_image<R: ContainerRuntime>(
    deps: &WorkerDeps<R>,
    agent: &AgentName,
    spec: &AgentSpec,
    image: &str,
    detail: &str,
) {
    tracing::info!(image = %image, "image ready");
    let how = if spec.build.is_some() {
        "built"
    } else {
        "pulled"
    };
    if !detail.starts_with("kept the local") {
        if let Err(e) =
            crate::agents::images::record(&deps.store, deps.runtime.as_ref(), agent, image, how)
                .await
        {
            tracing::warn!(%image, error = %crate::error_chain(&e), "cannot record the image; cleanup will not remove it");
        }
    }
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
        ContextSource::Git { repo, git_ref } => {
            // A local repository is a directory the clone reads: same rule.
            let repo = match repo {
                Repo::Local(path) => {
                    Repo::Local(confine_repo(&path, &roots).map_err(NodeError::runtime(&what))?)
                }
                remote => remote,
            };
            let dir = roots.clone_dir(agent.as_str());
            let shown = repo.shown();
            progress(&format!("checking out {shown}"));
            let commit = context::checkout(&repo, git_ref.as_deref(), &dir, relock)
                .await
                .map_err(NodeError::runtime(&what))?;
            (dir, format!("{shown} at {}", short_id(&commit)))
        }
    };
    deps.runtime
        .build(
            &BuildRequest {
                context: &dir,
                dockerfile: &dockerfile,
                tag,
                no_cache: relock,
            },
            progress,
        )
        .await
        .map_err(NodeError::runtime(&what))?;
    Ok(format!("built {tag} from {from}"))
}
