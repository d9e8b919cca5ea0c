//! [`ObjectRuntime`] over Docker: the hive's own volumes and networks,
//! made with its labels, listed by them, and removed only when they carry
//! them (see [`crate::agents::runtime::objects`]).
//!
//! Docker's volume create returns an existing volume of that name as it
//! is, labels and all, and a network create of a taken name fails with a
//! conflict; either way the object is checked for the hive's label after
//! the create too, so one made meanwhile by someone else is refused.

use std::collections::HashMap;

use bollard::errors::Error as BollardError;
use bollard::models::{NetworkCreateRequest, VolumeCreateRequest};
use bollard::query_parameters::{ListNetworksOptions, ListVolumesOptions, RemoveVolumeOptions};
use bollard::Docker;
use swarm_queue_client::containers::hive_label_filter;
use swarm_queue_client::ObjectName;

use super::{labels_of, DockerRuntime};
use crate::agents::runtime::admit::object_name;
use crate::agents::runtime::objects::{
    check_object_owner, object_labels, ObjectInfo, ObjectKind, ObjectRuntime,
};
use crate::agents::runtime::RuntimeError;

impl ObjectRuntime for DockerRuntime {
    async fn ensure_object(
        &self,
        kind: ObjectKind,
        name: &ObjectName,
    ) -> Result<String, RuntimeError> {
        let docker_name = object_name(&self.hive, name.as_str());
        if let Some(found) = self.inspect_object(kind, &docker_name).await? {
            check_object_owner(&self.hive, &found)?;
            return Ok(docker_name);
        }
        let docker = self.client()?;
        let labels: HashMap<String, String> =
            object_labels(&self.hive, kind, name).into_iter().collect();
        let made = match kind {
            ObjectKind::Volume => {
                let request = VolumeCreateRequest {
                    name: Some(docker_name.clone()),
                    labels: Some(labels),
                    ..Default::default()
                };
                docker.create_volume(request).await.map(|_| ())
            }
            ObjectKind::Network => {
                let request = NetworkCreateRequest {
                    name: docker_name.clone(),
                    driver: Some("bridge".into()),
                    labels: Some(labels),
                    ..Default::default()
                };
                docker.create_network(request).await.map(|_| ())
            }
        };
        match made {
            Ok(())
            | Err(BollardError::DockerResponseServerError {
                status_code: 409, ..
            }) => {}
            Err(e) => return Err(self.classify(ops(kind).create, &docker_name, e)),
        }
        let found = self
            .inspect_object(kind, &docker_name)
            .await?
            .ok_or_else(|| RuntimeError::Docker {
                op: ops(kind).create,
                target: docker_name.clone(),
                source: "it was gone right after its create".into(),
                transient: true,
            })?;
        check_object_owner(&self.hive, &found)?;
        Ok(docker_name)
    }

    async fn list_objects(&self, kind: ObjectKind) -> Result<Vec<ObjectInfo>, RuntimeError> {
        let docker = self.client()?;
        let filters = Some(HashMap::from([(
            "label".to_string(),
            vec![hive_label_filter(&self.hive)],
        )]));
        let listed = match kind {
            ObjectKind::Volume => docker
                .list_volumes(Some(ListVolumesOptions { filters }))
                .await
                .map(|r| {
                    r.volumes
                        .unwrap_or_default()
                        .into_iter()
                        .map(|v| (v.name, Some(v.labels)))
                        .collect::<Vec<_>>()
                }),
            ObjectKind::Network => docker
                .list_networks(Some(ListNetworksOptions { filters }))
                .await
                .map(|r| {
                    r.into_iter()
                        .map(|n| (n.name.unwrap_or_default(), n.labels))
                        .collect()
                }),
        };
        let listed = listed.map_err(|e| self.classify(ops(kind).list, self.hive.as_str(), e))?;
        Ok(listed
            .into_iter()
            .map(|(docker_name, labels)| ObjectInfo {
                kind,
                docker_name,
                labels: labels_of(labels),
            })
            .collect())
    }

    async fn remove_object(
        &self,
        kind: ObjectKind,
        docker_name: &str,
    ) -> Result<bool, RuntimeError> {
        let Some(found) = self.inspect_object(kind, docker_name).await? else {
            return Ok(true);
        };
        check_object_owner(&self.hive, &found)?;
        let docker = self.client()?;
        let removed = match kind {
            ObjectKind::Volume => {
                let options = RemoveVolumeOptions { force: false };
                docker.remove_volume(docker_name, Some(options)).await
            }
            ObjectKind::Network => docker.remove_network(docker_name).await,
        };
        match removed {
            Ok(()) => Ok(true),
            Err(BollardError::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(true),
            // A volume in use is a conflict; a network with endpoints is
            // forbidden (403) or a conflict, by Docker's version.
            Err(BollardError::DockerResponseServerError {
                status_code: 403 | 409,
                ..
            }) => Ok(false),
            Err(e) => Err(self.classify(ops(kind).remove, docker_name, e)),
        }
    }
}

impl DockerRuntime {
    /// Any volume or network of that exact name, owned or not.
    async fn inspect_object(
        &self,
        kind: ObjectKind,
        docker_name: &str,
    ) -> Result<Option<ObjectInfo>, RuntimeError> {
        let docker = self.client()?;
        let found = inspect_labels(&docker, kind, docker_name).await;
        match found {
            // Docker also finds a network by an id prefix; only the name counts.
            Ok((name, labels)) if name == docker_name => Ok(Some(ObjectInfo {
                kind,
                docker_name: name,
                labels: labels_of(labels),
            })),
            Ok(_) => Ok(None),
            Err(BollardError::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(None),
            Err(e) => Err(self.classify(ops(kind).inspect, docker_name, e)),
        }
    }
}

async fn inspect_labels(
    docker: &Docker,
    kind: ObjectKind,
    docker_name: &str,
) -> Result<(String, Option<HashMap<String, String>>), BollardError> {
    match kind {
        ObjectKind::Volume => docker
            .inspect_volume(docker_name)
            .await
            .map(|v| (v.name, Some(v.labels))),
        ObjectKind::Network => docker
            .inspect_network(docker_name, None)
            .await
            .map(|n| (n.name.unwrap_or_default(), n.labels)),
    }
}

/// The operation names errors give, per kind.
struct Ops {
    create: &'static str,
    list: &'static str,
    remove: &'static str,
    inspect: &'static str,
}

fn ops(kind: ObjectKind) -> &'static Ops {
    match kind {
        ObjectKind::Volume => &Ops {
            create: "create volume",
            list: "list volumes",
            remove: "remove volume",
            inspect: "inspect volume",
        },
        ObjectKind::Network => &Ops {
            create: "create network",
            list: "list networks",
            remove: "remove network",
            inspect: "inspect network",
        },
    }
}
