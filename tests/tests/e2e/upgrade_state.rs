//! An upgrade rebuilds nothing: this build's hive, started over the state
//! dir and declaration a previous release left (committed under
//! `tests/data/upgrade-prev/`), adopts that release's containers as they
//! are, converges on the same revision, and creates, removes or restarts
//! none of them.
//!
//! The data was made by `examples/capture_upgrade_state.rs`, run once with
//! the previous release's `hive` binary (see its comment); the test itself
//! needs only this build. The previous release's containers cannot
//! be committed, so the test makes them again from that release's
//! `docker inspect` (`containers.json`): the same config, labels (with the
//! spec hash that release computed), mounts and limits, on a fresh import
//! of the same image.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use bollard::models::ContainerCreateBody;
use bollard::query_parameters::CreateContainerOptions;
use hyperhive_tests::docker::{docker, ContainerGuard};
use hyperhive_tests::hive::{HiveProc, HiveSpec};
use hyperhive_tests::kv::{container, Swarm};
use hyperhive_tests::upgrade_data::{copy_job_store, data, import_image, HIVE, IMAGE, STATE};
use hyperhive_tests::{wait_until, NatsServer};
use serde_json::Value;

const T: Duration = Duration::from_secs(90);
/// The previous release's container `c` made again: its config and host
/// config as inspect showed them, the state dir put back in its mounts.
fn create_body(c: &Value, state: &Path) -> ContainerCreateBody {
    let text = c.to_string().replace(STATE, &state.display().to_string());
    let c: Value = serde_json::from_str(&text).unwrap();
    let mut body = c["Config"].clone();
    // Docker picks these for each container it makes.
    for k in ["Hostname", "Domainname"] {
        body.as_object_mut().unwrap().remove(k);
    }
    body["Image"] = Value::String(IMAGE.into());
    body["HostConfig"] = c["HostConfig"].clone();
    serde_json::from_value(body).unwrap()
}

async fn remake_containers(state: &Path) -> HashMap<String, String> {
    let docker_api = bollard::Docker::connect_with_local_defaults().unwrap();
    let text = std::fs::read_to_string(data().join("containers.json")).unwrap();
    let all: Vec<Value> = serde_json::from_str(&text).unwrap();
    let mut ids = HashMap::new();
    for c in &all {
        let name = c["Name"]
            .as_str()
            .unwrap()
            .trim_start_matches('/')
            .to_string();
        let agent = c["Config"]["Labels"]["org.hyperhive.agent"]
            .as_str()
            .unwrap();
        std::fs::create_dir_all(state.join("agents").join(agent)).unwrap();
        let created = docker_api
            .create_container(
                Some(CreateContainerOptions {
                    name: Some(name.clone()),
                    ..Default::default()
                }),
                create_body(c, state),
            )
            .await
            .unwrap_or_else(|e| panic!("create {name}: {e}"));
        if c["State"]["Running"].as_bool() == Some(true) {
            docker(&["start", &name]);
        }
        ids.insert(agent.to_string(), created.id);
    }
    ids
}

#[tokio::test]
async fn this_build_over_the_previous_releases_state_recreates_no_container() {
    let nats = NatsServer::start();
    let url = nats.url();
    let _image = import_image();
    let _guard = ContainerGuard::new(HIVE);
    let swarm = Swarm::connect(&url).await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    copy_job_store(&data().join("state"), &state);
    let declared = std::fs::read_to_string(data().join("declaration.json")).unwrap();
    let r1 = swarm.declare(HIVE, declared.trim()).await;
    assert_eq!(r1, 1, "the previous release converged on revision 1");
    let before = remake_containers(&state).await;
    // After the remade containers' own create and start events.
    let since = now_text();
    let spec_labels: Vec<(String, String)> = before
        .keys()
        .map(|a| (a.clone(), label_of(a, "org.hyperhive.spec")))
        .collect();

    let h = HiveProc::start(HiveSpec {
        name: Some(HIVE),
        nats_url: Some(&url),
        state_dir: Some(&state),
        ..Default::default()
    });
    let s = swarm.converged(HIVE, r1, T).await;
    // Three status puts more, to give any rebuild the time to start.
    let (mut last, _) = swarm.status(HIVE).await.expect("a status");
    for _ in 0..3 {
        last = wait_until(T, "the next status put", || async {
            let (rev, _) = swarm.status(HIVE).await?;
            (rev > last).then_some(rev)
        })
        .await;
    }
    for (agent, id) in &before {
        let now = container(HIVE, agent).map(|c| c.0);
        assert_eq!(
            now.as_deref(),
            Some(id.as_str()),
            "{agent} was recreated: {s}"
        );
    }
    for (agent, label) in &spec_labels {
        assert_eq!(&label_of(agent, "org.hyperhive.spec"), label);
        // The previous release's hash is what this build computes.
        let spec = &s["agents"][agent.as_str()];
        assert_eq!(
            spec["declared_spec"].as_str(),
            Some(label.as_str()),
            "{agent}: {spec}"
        );
    }
    assert_eq!(running("parked"), "false", "parked was started");
    assert_eq!(running("full"), "true");
    let events = docker(&[
        "events",
        "--since",
        &since,
        "--until",
        &now_text(),
        "--filter",
        &format!("label=org.hyperhive.hive={HIVE}"),
        "--format",
        "{{.Action}} {{.Actor.Attributes.name}}",
    ]);
    println!(
        "docker events after the upgrade: {:?}",
        events.lines().collect::<Vec<_>>()
    );
    for bad in ["create", "destroy", "kill", "stop", "die", "start"] {
        assert!(
            !events.lines().any(|l| l.split(' ').next() == Some(bad)),
            "the upgraded hive did `{bad}`: {events}"
        );
    }
    drop(h);
}

fn label_of(agent: &str, label: &str) -> String {
    docker(&[
        "inspect",
        "-f",
        &format!("{{{{index .Config.Labels \"{label}\"}}}}"),
        &format!("hyperhive.{HIVE}.{agent}"),
    ])
    .trim()
    .to_string()
}

fn running(agent: &str) -> String {
    docker(&[
        "inspect",
        "-f",
        "{{.State.Running}}",
        &format!("hyperhive.{HIVE}.{agent}"),
    ])
    .trim()
    .to_string()
}

/// Now, as `docker events --since` and `--until` take it (seconds since
/// the epoch, with nanoseconds).
fn now_text() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    format!("{}.{:09}", t.as_secs(), t.subsec_nanos())
}
