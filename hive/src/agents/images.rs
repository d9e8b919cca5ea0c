//! # Image records and cleanup
//!
//! Every image the worker pulls or builds is recorded in the job database
//! (table `images`) with the agent it was for. After a rebuild, a retire or
//! a purge finishes (once the worker has no node running, so a burst of
//! rebuilds is cleaned up once; at the latest a minute after the first),
//! [`clean`] removes the recorded images that no
//! installed agent needs (each keeps its current and its previous image,
//! for a rollback) and no container uses, so repeated rebuilds do not fill
//! the disk. An image the hive did not record is never considered: an
//! operator's own images, and other hives', are safe. Removal is never
//! forced, so dockerd itself refuses to remove an image a container uses.
//!
//! Failures here never fail a job: they are logged, and the next cleanup
//! tries again (the records stay until the image is gone).

use std::collections::BTreeSet;

use swarm_queue_client::AgentName;

use crate::agents::jobs::{image_cleanup_plan, now_ms, JobStore, OwnedImage, StoreError};
use crate::agents::runtime::{ContainerRuntime, RuntimeError};

/// Why recording or cleaning failed.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

/// Record that `reference` was pulled or built (`how`) for `agent`.
pub async fn record<R: ContainerRuntime>(
    store: &JobStore,
    runtime: &R,
    agent: &AgentName,
    reference: &str,
    how: &'static str,
) -> Result<(), ImageError> {
    let Some(image_id) = runtime.image_id(reference).await? else {
        return Ok(());
    };
    let image = OwnedImage {
        image_id,
        agent: agent.to_string(),
        reference: reference.to_string(),
        how: how.to_string(),
        recorded_at_ms: now_ms(),
    };
    store.record_image(image).await?;
    Ok(())
}

/// Remove recorded images nothing needs; returns the ids removed.
pub async fn clean<R: ContainerRuntime>(
    store: &JobStore,
    runtime: &R,
) -> Result<Vec<String>, ImageError> {
    let (owned, installed) = store.images_and_installed().await?;
    let installed: BTreeSet<String> = installed.into_keys().map(|a| a.to_string()).collect();
    let in_use: BTreeSet<String> = runtime
        .list()
        .await?
        .into_iter()
        .map(|c| c.image_id)
        .collect();
    let mut removed = Vec::new();
    for image_id in image_cleanup_plan(&owned, &installed, &in_use) {
        if runtime.remove_image(&image_id).await? {
            tracing::info!(image = %image_id, "removed an image no agent needs");
            store.forget_image(&image_id).await?;
            removed.push(image_id);
        } else {
            tracing::info!(image = %image_id, "image still in use; kept");
        }
    }
    Ok(removed)
}

/// One recorded image and why the hive holds it, for `hive images`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ImageRow {
    pub image_id: String,
    pub agent: String,
    pub reference: String,
    /// `pulled` or `built`.
    pub how: String,
    pub recorded_at_ms: i64,
    /// `current`, `previous (kept for rollback)`, `used by a container`, or
    /// `removable at the next cleanup`.
    pub why: String,
}

/// Why each recorded image is held (pure; `in_use` is what containers run).
pub fn why_held(
    owned: &[OwnedImage],
    installed: &BTreeSet<String>,
    in_use: &BTreeSet<String>,
) -> Vec<ImageRow> {
    let removable = image_cleanup_plan(owned, installed, in_use);
    let mut rank: std::collections::BTreeMap<&str, usize> = Default::default();
    let mut sorted: Vec<&OwnedImage> = owned.iter().collect();
    sorted.sort_by_key(|i| std::cmp::Reverse(i.recorded_at_ms));
    sorted
        .into_iter()
        .map(|i| {
            let n = rank.entry(i.agent.as_str()).or_default();
            let why = if removable.contains(&i.image_id) {
                "removable at the next cleanup"
            } else if *n == 0 && installed.contains(&i.agent) {
                "current"
            } else if *n == 1 && installed.contains(&i.agent) {
                "previous (kept for rollback)"
            } else {
                "used by a container"
            };
            *n += 1;
            ImageRow {
                image_id: i.image_id.clone(),
                agent: i.agent.clone(),
                reference: i.reference.clone(),
                how: i.how.clone(),
                recorded_at_ms: i.recorded_at_ms,
                why: why.to_string(),
            }
        })
        .collect()
}
