//! `wanted.json` is written beside the converger, not before it: a
//! declaration's jobs can be committed before its copy is saved, and a
//! crash in between leaves the copy older than the jobs. Those jobs'
//! commit records their declaration, and at start a copy older than that
//! record is not used: the hive waits for the swarm's declaration instead
//! of undoing the newer one.
//!
//! A real hive process, nats-server and dockerd. The window is made wide
//! with the test hook `HYPERHIVE_TEST_SKIP_WANTED_SAVE=1`: the hive never
//! saves, as if it died each time between the commit and the save.

use std::path::Path;
use std::time::Duration;

use hyperhive_tests::docker::{ContainerGuard, TestImage};
use hyperhive_tests::hive::{HiveProc, HiveSpec};
use hyperhive_tests::kv::{container, Swarm};
use hyperhive_tests::{unique_name, wait_until, NatsServer};
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(60);

/// The revision in the hive's `wanted.json`, if it holds one.
fn saved_revision(state_dir: &Path) -> Option<u64> {
    let text = std::fs::read(state_dir.join("wanted.json")).ok()?;
    serde_json::from_slice::<Value>(&text).ok()?["revision"].as_u64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_declaration_older_than_the_queued_jobs_is_not_used_at_start() {
    let mut nats = NatsServer::start();
    let swarm = Swarm::connect(&nats.url()).await;
    let name = unique_name("saved-older");
    let image = TestImage::busybox("saved-older");
    let _containers = ContainerGuard::new(&name);
    let url = nats.url();
    let mut hive = HiveProc::start(HiveSpec {
        name: Some(&name),
        nats_url: Some(&url),
        ..Default::default()
    });
    let state_dir = hive.config_path().with_file_name("state");
    let decl = |n: &str| {
        json!({ "schema": 1, "agents": { "a": {
            "image": image.reference, "command": ["/bin/sleep", "3600"], "env": { "N": n }
        } } })
        .to_string()
    };

    // Revision 1, saved as usual (beside the converger, so waited for).
    let r1 = swarm.declare(&name, &decl("1")).await;
    swarm.converged(&name, r1, T).await;
    wait_until(T, "wanted.json holds revision 1", || async {
        (saved_revision(&state_dir) == Some(r1)).then_some(())
    })
    .await;

    // Revision 2 queued and run, but never saved.
    hive.kill_and_restart(&[("HYPERHIVE_TEST_SKIP_WANTED_SAVE", "1")]);
    let r2 = swarm.declare(&name, &decl("2")).await;
    swarm.converged(&name, r2, T).await;
    let (id2, running, spec2) = container(&name, "a").expect("agent a's container");
    assert!(running);
    assert_eq!(
        saved_revision(&state_dir),
        Some(r1),
        "the hook kept the old copy"
    );
    let api = hive.job_api().await;
    let (_, jobs) = api.get("/api/v1/jobs?all=true").await;
    let jobs_before = jobs["jobs"].as_array().map_or(0, Vec::len);
    assert!(jobs_before >= 2, "two deploys were queued: {jobs}");

    // Start again with NATS gone: only the saved copy could say what is
    // wanted, and it is older than what was queued.
    nats.stop();
    hive.kill_and_restart(&[]);
    // The converger has looked at Docker since this start: its status names
    // the running agent.
    let ready = wait_until(T, "the restarted hive reports agent a", || async {
        let (_, body) = hive.ready().await;
        body["agents"].get("a").is_some().then_some(body)
    })
    .await;
    assert_eq!(
        ready["seen_revision"],
        Value::Null,
        "no declaration is taken as known: {ready}"
    );
    let api = hive.job_api().await;
    let (_, jobs) = api.get("/api/v1/jobs?all=true").await;
    assert_eq!(
        jobs["jobs"].as_array().map_or(0, Vec::len),
        jobs_before,
        "nothing was queued to go back to revision {r1}: {jobs}"
    );
    assert_eq!(
        container(&name, "a"),
        Some((id2, true, spec2)),
        "revision {r2}'s container is untouched"
    );
    let log = std::fs::read_to_string(hive.config_path().with_file_name("hive.log")).unwrap();
    assert!(
        log.contains("the saved declaration is older than the one jobs were queued for"),
        "the hive says why it waits"
    );
}
