//! The recovery from a damaged job database (docs/operations.md, "A corrupt
//! SQLite file"): the hive stopped, `hive.db` moved aside, the hive started
//! with a fresh, empty job store while its agents' containers still run,
//! and the declaration changed meanwhile (agent b dropped; in the second
//! test agent a's spec changed too, and the saved copy of the declaration
//! is lost with the store, so the hive plans from the swarm's alone).
//!
//! The hive plans from its saved copy of the declaration, if any, then from
//! the swarm's. A declared agent whose container runs the declared spec is
//! adopted by a first deploy (the same container, not restarted, no second
//! one); one whose container runs another spec is rebuilt (a first deploy
//! would refuse to replace it, and the hive would never converge without
//! an operator's `hive rebuild`); b is retired once the newer declaration
//! is read, or reaped as an orphan after `orphan_grace_secs` when no
//! declaration the hive reads names it. No job fails. A real hive process, nats-server and dockerd.

use std::time::Duration;

use hyperhive_tests::docker::{docker, ContainerGuard, TestImage};
use hyperhive_tests::hive::{HiveProc, HiveSpec};
use hyperhive_tests::kv::{container, Swarm};
use hyperhive_tests::{unique_name, wait_until, NatsServer};
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(60);

/// What the scenario leaves to check.
struct Recovered {
    name: String,
    hive: HiveProc,
    /// Agent a's container before: id, spec label, start time.
    a_before: (String, String, String),
    /// Every job of the new store, and the containers with the hive's label.
    jobs: Vec<Value>,
    left: Vec<String>,
    _containers: ContainerGuard,
    _image: TestImage,
    _nats: NatsServer,
}

fn started_at(id: &str) -> String {
    docker(&["inspect", "--format", "{{.State.StartedAt}}", id])
}

/// Declare a and b, converge; stop the hive; declare a (with `a_env` as its
/// environment) alone; move the job store aside (and remove the saved
/// declaration when `lose_saved`); start the hive again and wait until it
/// has converged on that declaration.
async fn recover(test: &str, a_env: Value, lose_saved: bool) -> Recovered {
    let nats = NatsServer::start();
    let url = nats.url();
    let swarm = Swarm::connect(&url).await;
    let name = unique_name(test);
    let image = TestImage::busybox(test);
    let containers = ContainerGuard::new(&name);
    let mut hive = HiveProc::start(HiveSpec {
        name: Some(&name),
        nats_url: Some(&url),
        extra: "orphan_grace_secs = 2\n",
        ..Default::default()
    });
    let agent = |env: Value| json!({ "image": image.reference, "command": ["/bin/sleep", "3600"], "env": env });
    let r1 = swarm
        .declare(
            &name,
            &json!({ "schema": 1, "agents": { "a": agent(json!({})), "b": agent(json!({})) } })
                .to_string(),
        )
        .await;
    swarm.converged(&name, r1, T).await;
    let (a_id, a_running, a_spec) = container(&name, "a").expect("agent a's container");
    assert!(a_running);
    let a_before = (a_id.clone(), a_spec, started_at(&a_id));

    // The hive stopped; its agents run on. The declaration changes.
    assert_eq!(hive.daemon.terminate(), Some(0), "the hive stops cleanly");
    assert!(
        container(&name, "a").is_some_and(|c| c.1) && container(&name, "b").is_some_and(|c| c.1)
    );
    let r2 = swarm
        .declare(
            &name,
            &json!({ "schema": 1, "agents": { "a": agent(a_env) } }).to_string(),
        )
        .await;

    // The job store moved aside, as the operations guide says.
    let db = hive.state_dir.join("hive.db");
    let aside = hive.state_dir.join("hive.db.damaged");
    std::fs::rename(&db, &aside).expect("move hive.db aside");
    for side in ["hive.db-wal", "hive.db-shm"] {
        let from = hive.state_dir.join(side);
        if from.exists() {
            let to = hive
                .state_dir
                .join(side.replace("hive.db", "hive.db.damaged"));
            std::fs::rename(&from, &to).expect("move the journal aside with it");
        }
    }
    let kept = std::fs::read(&aside).expect("the moved file");
    if lose_saved {
        std::fs::remove_file(hive.state_dir.join("wanted.json")).expect("remove wanted.json");
    }
    hive.kill_and_restart(&[]);

    let status = swarm.converged(&name, r2, T).await;
    assert_eq!(status["seen_revision"], json!(r2), "{status}");
    assert_eq!(
        std::fs::read(&aside).expect("the moved file is still there"),
        kept,
        "the file moved aside is left as it was"
    );
    // b: retired by the declaration that dropped it, or, when no
    // declaration the hive reads names it, reaped as an orphan.
    wait_until(T, "b's container gone", || async {
        container(&name, "b").is_none().then_some(())
    })
    .await;
    let (_, jobs) = hive.job_api().await.get("/api/v1/jobs?all=true").await;
    let jobs = jobs["jobs"].as_array().cloned().unwrap_or_default();
    assert!(
        jobs.iter().all(|j| j["state"] == "done"),
        "no job failed or is left: {jobs:#?}"
    );
    let retired_b = jobs
        .iter()
        .filter(|j| j["agent"] == "b" && j["kind"] == "retire")
        .count();
    assert_eq!(retired_b, 1, "b retired once: {jobs:#?}");
    let left = containers.ids();
    Recovered {
        name,
        hive,
        a_before,
        jobs,
        left,
        _containers: containers,
        _image: image,
        _nats: nats,
    }
}

/// The create details of agent a's jobs of `kind`.
fn creates(r: &Recovered, kind: &str) -> Vec<String> {
    r.jobs
        .iter()
        .filter(|j| j["agent"] == "a" && j["kind"] == kind)
        .map(|j| {
            hyperhive_tests::jobs::node(j, "create")["detail"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_job_store_is_moved_aside_running_agents_are_adopted_not_restarted() {
    let r = recover("store-lost", json!({}), false).await;
    let (id, spec, started) = &r.a_before;
    assert_eq!(
        container(&r.name, "a"),
        Some((id.clone(), true, spec.clone())),
        "agent a keeps its container"
    );
    assert_eq!(&started_at(id), started, "and was not restarted");
    let adopted = creates(&r, "first_deploy");
    assert!(
        !adopted.is_empty()
            && adopted
                .iter()
                .all(|d| d.contains("already exists with this spec")),
        "each deploy of a adopts its container: {adopted:?}"
    );
    assert!(creates(&r, "rebuild").is_empty(), "nothing rebuilt");
    assert!(
        r.left.len() == 1 && id.starts_with(&r.left[0]),
        "one container left, a's: {:?}",
        r.left
    );
    drop(r.hive);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_job_store_is_moved_aside_a_changed_agent_is_rebuilt() {
    let r = recover("store-lost-chg", json!({ "N": "2" }), true).await;
    let (old_id, old_spec, _) = &r.a_before;
    let (id, running, spec) = container(&r.name, "a").expect("agent a's container");
    assert!(running);
    assert_ne!(&id, old_id, "a's container was replaced");
    assert_ne!(&spec, old_spec, "by one of the new spec");
    assert_eq!(
        creates(&r, "rebuild")
            .iter()
            .filter(|d| d.starts_with("created "))
            .count(),
        1,
        "by one rebuild: {:#?}",
        r.jobs
    );
    assert!(
        r.left.len() == 1 && id.starts_with(&r.left[0]),
        "one container left, a's new one: {:?}",
        r.left
    );
    drop(r.hive);
}
