//! Replaying the cleanup journal. A destructive step (removing a
//! container, deleting a directory) is journalled before it is done, so
//! one cut off by a crash or a failure is finished here: by the worker
//! loop for agents that have no node running, and by every node before it
//! runs, so that nothing of an agent runs while a cleanup of it is still
//! outstanding.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Mutex;

use swarm_queue_client::AgentName;

use super::{lock, NodeError, WorkerDeps};
use crate::agents::jobs::CleanupAction;
use crate::agents::runtime::ContainerRuntime;

/// Replay the journal for agents that have no node running. A replay that
/// fails is kept and tried again on the next pass.
pub(super) async fn replay_idle_cleanups<R: ContainerRuntime>(
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
pub(super) async fn replay_cleanups<R: ContainerRuntime>(
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

/// Delete the tree at `path`, whose parent is the hive's (an agent's dir
/// below `<state>/agents`). The agent writes below it, so nothing planted
/// there may be followed: std's `remove_dir_all` opens each directory with
/// `O_NOFOLLOW` relative to its parent and unlinks a link instead of
/// entering it (so also when `path` itself is one), as the worker test
/// `purge_removes_the_links_the_agent_planted_and_nothing_behind_them`
/// shows.
pub(super) async fn delete_dir(path: &Path) -> Result<(), NodeError> {
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
