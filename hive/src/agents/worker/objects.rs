//! What an agent's container needs made before its create: its host
//! paths checked against `volume_roots`, and its named volumes and its
//! network recorded, then made with the hive's labels. A host path that
//! is refused fails the create before anything is recorded or made
//! ([`crate::agents::runtime::confine::confine_volume`]); a name held by a
//! volume or network that is not this hive's fails it too
//! ([`crate::agents::runtime::RuntimeError::ForeignObject`]).
//!
//! And, on purge, the volumes that no agent uses any more are removed
//! ([`release_volumes`]); a network's removal is the converger's
//! ([`crate::agents::converger`]), since a retire is enough for it.

use swarm_queue_client::{AgentName, AgentSpec, ObjectName, NETWORK_BRIDGE, NETWORK_NONE};

use super::{NodeError, WorkerDeps};
use crate::agents::jobs::now_ms;
use crate::agents::runtime::confine::{confine_volume, VolumeRoots};
use crate::agents::runtime::objects::ObjectKind;
use crate::agents::runtime::{Bind, ContainerRuntime, RuntimeError};

/// The spec's host paths as binds (their real paths), once every one is
/// allowed and every named volume and the network exist.
pub(super) async fn prepare<R: ContainerRuntime>(
    deps: &WorkerDeps<R>,
    agent: &AgentName,
    spec: &AgentSpec,
) -> Result<Vec<Bind>, NodeError> {
    let roots = VolumeRoots {
        state_dir: deps.state_dir.clone(),
        configured: deps.config.host.volume_roots.clone(),
    };
    let mut binds = Vec::new();
    for v in &spec.volumes {
        let Some(host) = &v.host else { continue };
        let real = confine_volume(agent, std::path::Path::new(host), &roots).map_err(
            NodeError::runtime(format!("create the container of {agent}")),
        )?;
        binds.push(Bind {
            host: real,
            container: v.target.clone(),
            read_only: !v.writable(),
        });
    }
    let named = spec.volumes.iter().filter_map(|v| v.name.as_ref());
    for name in named {
        ensure(deps, agent, ObjectKind::Volume, name).await?;
    }
    if let Some(network) = spec
        .network
        .as_ref()
        .filter(|n| ![NETWORK_BRIDGE, NETWORK_NONE].contains(&n.as_str()))
    {
        ensure(deps, agent, ObjectKind::Network, network).await?;
    }
    Ok(binds)
}

/// Remove the volumes no agent uses now that `agent` is purged (see
/// [`crate::agents::jobs::Store::release_volumes`]); a note naming them.
pub(super) async fn release_volumes<R: ContainerRuntime>(
    deps: &WorkerDeps<R>,
    agent: &AgentName,
) -> Result<Option<String>, NodeError> {
    let released = agent.clone();
    let unused = deps
        .store
        .call(move |s| s.release_volumes(&released))
        .await?;
    let mut removed = Vec::new();
    for name in unused {
        let docker_name = crate::agents::runtime::admit::object_name(&deps.hive, name.as_str());
        let removal = deps
            .runtime
            .remove_object(ObjectKind::Volume, &docker_name)
            .await;
        match removal {
            Ok(true) => removed.push(docker_name),
            // Only a container outside the record can hold it: say so,
            // keep the record, and let the next purge try again.
            Ok(false) => {
                tracing::warn!(hive = %deps.hive, volume = %docker_name, "a released volume is still in use; kept");
                continue;
            }
            // Not the hive's after all (it was there before the hive
            // recorded it): never touched, and no longer recorded.
            Err(RuntimeError::ForeignObject { .. }) => {}
            Err(e) => {
                return Err(NodeError::runtime(format!("remove volume {docker_name}"))(
                    e,
                ))
            }
        }
        deps.store
            .call(move |s| s.forget_object(ObjectKind::Volume, &name))
            .await?;
    }
    Ok((!removed.is_empty()).then(|| format!("removed volume {}", removed.join(", "))))
}

/// Record that `agent` uses the `kind` `name`, then make it.
async fn ensure<R: ContainerRuntime>(
    deps: &WorkerDeps<R>,
    agent: &AgentName,
    kind: ObjectKind,
    name: &ObjectName,
) -> Result<String, NodeError> {
    let (user, recorded) = (agent.clone(), name.clone());
    deps.store
        .call(move |s| s.record_object_use(kind, &recorded, &user, now_ms()))
        .await?;
    deps.runtime
        .ensure_object(kind, name)
        .await
        .map_err(NodeError::runtime(format!(
            "make {kind} {name} for {agent}"
        )))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use swarm_queue_client::{HiveName, VolumeSpec};
    use tokio::sync::Notify;

    use super::*;
    use crate::agents::jobs::{db_path, JobStore};
    use crate::agents::runtime::fake::FakeRuntime;
    use crate::agents::worker::WorkerConfig;

    fn deps(dir: &std::path::Path, roots: Vec<std::path::PathBuf>) -> WorkerDeps<FakeRuntime> {
        let state_dir = dir.join("state");
        std::fs::create_dir_all(&state_dir).unwrap();
        let mut config = WorkerConfig::default();
        config.host.volume_roots = roots;
        WorkerDeps {
            store: JobStore::open(&db_path(&state_dir)).unwrap(),
            runtime: Arc::new(FakeRuntime::new("h")),
            hive: HiveName::new("h").unwrap(),
            state_dir,
            wake: Arc::new(Notify::new()),
            board: None,
            extra_binds: vec![],
            config,
            events: None,
        }
    }

    fn volume(
        name: Option<&str>,
        host: Option<&str>,
        target: &str,
        rw: Option<bool>,
    ) -> VolumeSpec {
        VolumeSpec {
            name: name.map(|n| ObjectName::new(n).unwrap()),
            host: host.map(String::from),
            target: target.into(),
            rw,
        }
    }

    #[tokio::test]
    async fn volumes_and_the_network_are_made_and_a_purge_removes_the_last_users_volume() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        std::fs::create_dir_all(base.join("srv/data")).unwrap();
        let d = deps(&base, vec![base.join("srv")]);
        let host = base.join("srv/data").display().to_string();
        let spec = AgentSpec {
            image: Some("i".into()),
            volumes: vec![
                volume(Some("cache"), None, "/cache", None),
                volume(None, Some(&host), "/data", None),
                volume(None, Some(&host), "/rw", Some(true)),
            ],
            network: Some(ObjectName::new("back").unwrap()),
            ..Default::default()
        };
        let (a, b) = (AgentName::new("a").unwrap(), AgentName::new("b").unwrap());
        let binds = prepare(&d, &a, &spec).await.unwrap();
        assert_eq!(binds.len(), 2);
        assert!(binds[0].read_only && !binds[1].read_only);
        prepare(&d, &b, &spec).await.unwrap();
        assert_eq!(
            d.runtime.object_names(ObjectKind::Volume),
            vec!["hyperhive.h.cache"]
        );
        assert_eq!(
            d.runtime.object_names(ObjectKind::Network),
            vec!["hyperhive.h.back"]
        );
        // bridge and none are Docker's: nothing made.
        for n in ["bridge", "none"] {
            let plain = AgentSpec {
                network: Some(ObjectName::new(n).unwrap()),
                ..AgentSpec::default()
            };
            prepare(&d, &a, &plain).await.unwrap();
        }
        assert_eq!(d.runtime.object_names(ObjectKind::Network).len(), 1);
        assert_eq!(release_volumes(&d, &a).await.unwrap(), None, "b uses it");
        let note = release_volumes(&d, &b).await.unwrap().unwrap();
        assert_eq!(note, "removed volume hyperhive.h.cache");
        assert!(d.runtime.object_names(ObjectKind::Volume).is_empty());
    }

    #[tokio::test]
    async fn a_refused_host_path_makes_nothing_and_a_foreign_volume_is_never_touched() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        let d = deps(&base, vec![base.join("srv")]);
        let a = AgentName::new("a").unwrap();
        let spec = AgentSpec {
            volumes: vec![
                volume(Some("cache"), None, "/cache", None),
                volume(None, Some("/etc"), "/etc-copy", None),
            ],
            ..Default::default()
        };
        let err = crate::error_chain(&prepare(&d, &a, &spec).await.unwrap_err());
        assert!(
            err.contains("agent a") && err.contains("/etc") && err.contains("rule:"),
            "{err}"
        );
        assert!(d.runtime.object_names(ObjectKind::Volume).is_empty());

        d.runtime
            .plant_object(ObjectKind::Volume, "hyperhive.h.mine", None);
        let spec = AgentSpec {
            volumes: vec![volume(Some("mine"), None, "/m", None)],
            ..Default::default()
        };
        let err = crate::error_chain(&prepare(&d, &a, &spec).await.unwrap_err());
        assert!(err.contains("has no org.hyperhive.hive label"), "{err}");
        // Its record goes with the purge; the volume stays.
        assert_eq!(release_volumes(&d, &a).await.unwrap(), None);
        assert_eq!(
            d.runtime.object_names(ObjectKind::Volume),
            vec!["hyperhive.h.mine"]
        );
        let left = d
            .store
            .call(|s| s.objects(ObjectKind::Volume))
            .await
            .unwrap();
        assert!(left.is_empty(), "{left:?}");
    }
}
