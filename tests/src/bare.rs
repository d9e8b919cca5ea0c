//! The baseline of the Docker benchmarks: the very containers a hive makes
//! (same name scheme, labels, environment, state mount, init, security
//! options and pids limit), made
//! directly through bollard with nothing of the hive around them.

use std::collections::HashMap;
use std::time::Duration;

use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptions, RemoveContainerOptions, StopContainerOptions,
};
use bollard::Docker;
use hive::agents::runtime::ContainerSpec;

/// A client for long benchmark phases: bollard's default timeout would
/// cut off an event stream that lasts longer than two minutes.
pub fn client() -> Docker {
    Docker::connect_with_socket_defaults()
        .expect("connect to dockerd")
        .with_timeout(Duration::from_secs(3600))
}

/// What the hive's Docker runtime sends for `c`.
pub fn create_body(c: &ContainerSpec) -> ContainerCreateBody {
    ContainerCreateBody {
        image: Some(c.image.clone()),
        env: Some(c.env.clone()),
        cmd: c.command.clone(),
        labels: Some(c.labels.clone().into_iter().collect::<HashMap<_, _>>()),
        host_config: Some(HostConfig {
            binds: Some(c.binds.iter().map(|b| b.to_docker()).collect()),
            memory: c.memory_bytes,
            nano_cpus: c.nano_cpus,
            init: Some(true),
            security_opt: Some(vec![hive::agents::runtime::NO_NEW_PRIVILEGES.to_string()]),
            pids_limit: Some(c.limits.pids),
            log_config: Some(hive::agents::runtime::log_config(&c.limits)),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Create and start `c`: a first deploy without the hive.
pub async fn deploy(docker: &Docker, c: &ContainerSpec) {
    let options = CreateContainerOptions {
        name: Some(c.name.clone()),
        ..Default::default()
    };
    let created = bounded(
        &format!("create {}", c.name),
        docker.create_container(Some(options), create_body(c)),
    )
    .await
    .unwrap_or_else(|e| panic!("create {}: {e}", c.name));
    bounded(
        &format!("start {}", c.name),
        docker.start_container(&created.id, None),
    )
    .await
    .unwrap_or_else(|e| panic!("start {}: {e}", c.name));
}

/// Stop, remove, create and start `c`: a rebuild without the hive.
pub async fn replace(docker: &Docker, c: &ContainerSpec, stop_timeout: Duration) {
    let options = StopContainerOptions {
        t: Some(stop_timeout.as_secs() as i32),
        ..Default::default()
    };
    bounded(
        &format!("stop {}", c.name),
        docker.stop_container(&c.name, Some(options)),
    )
    .await
    .unwrap_or_else(|e| panic!("stop {}: {e}", c.name));
    remove(docker, &c.name).await;
    deploy(docker, c).await;
}

/// Remove a container by name, running or not; gone already is fine.
pub async fn remove(docker: &Docker, name: &str) {
    let options = RemoveContainerOptions {
        force: true,
        ..Default::default()
    };
    match bounded(
        &format!("remove {name}"),
        docker.remove_container(name, Some(options)),
    )
    .await
    {
        Ok(())
        | Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => {}
        Err(e) => panic!("remove {name}: {e}"),
    }
}

/// `call` within the harness's limit for one Docker call
/// ([`crate::docker_cli::LIMIT`]): a dockerd that stopped answering fails
/// the benchmark with the call's name, where the client's hour-long
/// timeout (for its event streams) would hold it.
async fn bounded<T>(what: &str, call: impl std::future::Future<Output = T>) -> T {
    let limit = crate::docker_cli::LIMIT;
    tokio::time::timeout(limit, call).await.unwrap_or_else(|_| {
        panic!("{what} had not returned after {limit:?}: dockerd does not answer")
    })
}
