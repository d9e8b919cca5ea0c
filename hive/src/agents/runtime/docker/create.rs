//! A [`ContainerSpec`] in Docker's terms: the body of one create.

use std::collections::HashMap;

use bollard::models::{
    ContainerCreateBody, HostConfig, Mount, MountType, PortBinding, RestartPolicy,
    RestartPolicyNameEnum,
};

use super::log_config;
use super::logs;
use crate::agents::runtime::{ContainerSpec, NamedVolume, NO_NEW_PRIVILEGES};

/// The create body for `spec`.
pub(super) fn body(spec: &ContainerSpec) -> ContainerCreateBody {
    let mut mounts: Vec<Mount> = spec.binds.iter().map(logs::mount_of).collect();
    mounts.extend(spec.volumes.iter().map(volume_mount));
    let host_config = HostConfig {
        // Mounts, not binds: a missing state dir fails the start instead
        // of Docker making an empty one (see `docker::logs::mount_of`).
        mounts: Some(mounts),
        memory: spec.memory_bytes,
        nano_cpus: spec.nano_cpus,
        // A tiny init as PID 1 forwards SIGTERM to the agent and reaps
        // zombies, so `stop` is quick and clean for any image.
        init: Some(true),
        // No process in the container gains privileges through a setuid
        // binary or file capabilities; see docs/security.md, "Containers".
        security_opt: Some(vec![NO_NEW_PRIVILEGES.to_string()]),
        pids_limit: Some(spec.limits.pids),
        log_config: Some(log_config(&spec.limits)),
        // Docker never restarts an agent by itself: the hive does, with
        // its crash-loop backoff ([`crate::agents::crashloop`]), and shows it.
        restart_policy: Some(RestartPolicy {
            name: Some(RestartPolicyNameEnum::NO),
            maximum_retry_count: None,
        }),
        port_bindings: port_bindings(spec),
        network_mode: spec.network.clone(),
        ..Default::default()
    };
    let exposed: Vec<String> = spec.ports.iter().map(|p| p.container_key()).collect();
    ContainerCreateBody {
        image: Some(spec.image.clone()),
        env: Some(spec.env.clone()),
        cmd: spec.command.clone(),
        labels: Some(spec.labels.clone().into_iter().collect()),
        host_config: Some(host_config),
        healthcheck: spec.health.as_ref().map(health_config),
        user: spec.user.clone(),
        stop_timeout: spec.stop_grace_secs.map(|s| s.min(i64::MAX as u64) as i64),
        exposed_ports: (!exposed.is_empty()).then_some(exposed),
        ..Default::default()
    }
}

/// Each container port with the host address and port it is bound to.
fn port_bindings(spec: &ContainerSpec) -> Option<HashMap<String, Option<Vec<PortBinding>>>> {
    if spec.ports.is_empty() {
        return None;
    }
    let mut map: HashMap<String, Option<Vec<PortBinding>>> = HashMap::new();
    for p in &spec.ports {
        map.entry(p.container_key())
            .or_default()
            .get_or_insert_with(Vec::new)
            .push(PortBinding {
                host_ip: Some(p.address.to_string()),
                host_port: Some(p.host.to_string()),
            });
    }
    Some(map)
}

fn volume_mount(v: &NamedVolume) -> Mount {
    Mount {
        target: Some(v.target.clone()),
        source: Some(v.docker_name.clone()),
        typ: Some(MountType::VOLUME),
        read_only: Some(v.read_only),
        ..Default::default()
    }
}

/// The spec's health check in Docker's terms: exec form, durations in
/// nanoseconds; unset ones stay unset so Docker's defaults apply.
fn health_config(h: &swarm_queue_client::HealthSpec) -> bollard::models::HealthConfig {
    let nanos = |secs: Option<u64>| {
        secs.map(|s| (s.min(i64::MAX as u64 / 1_000_000_000) * 1_000_000_000) as i64)
    };
    let mut test = vec!["CMD".to_string()];
    test.extend(h.command.iter().cloned());
    bollard::models::HealthConfig {
        test: Some(test),
        interval: nanos(h.interval_secs),
        timeout: nanos(h.timeout_secs),
        retries: h.retries.map(i64::from),
        start_period: nanos(h.start_period_secs),
        ..Default::default()
    }
}
