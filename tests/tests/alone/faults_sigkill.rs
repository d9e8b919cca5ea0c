//! A hive of a running swarm SIGKILLed mid-job and restarted: the job
//! resumes and finishes, no container is duplicated, no job is lost, and the
//! other hives are untouched.

use std::time::{Duration, Instant};

use hyperhive_tests::jobs::node;
use hyperhive_tests::kv::containers_of;
use hyperhive_tests::swarm::{SwarmSpec, TestSwarm};
use hyperhive_tests::wait_until;
use serde_json::json;

const T: Duration = Duration::from_secs(45);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_job_resumes_without_duplicates_or_loss() {
    let _slot = crate::one_slot().await;
    let mut swarm = TestSwarm::start(SwarmSpec {
        test: "f-kill",
        hive_envs: &[("HYPERHIVE_TEST_HOLD_BEFORE_NODE", "start")],
        ..Default::default()
    })
    .await;
    let kv = swarm.connect().await;
    let victim = swarm.names[0].clone();
    let api = swarm.hives[0].job_api().await;
    // Two jobs on the victim: one held between create and start, one queued.
    let held = api
        .deploy(
            "j1",
            json!({ "image": swarm.image.reference, "command": ["/bin/sleep", "3600"] }),
        )
        .await;
    let queued = api
        .deploy(
            "j2",
            json!({ "image": swarm.image.reference, "command": ["/bin/sleep", "3600"] }),
        )
        .await;
    wait_until(T, "create done, start held", || async {
        let j = api.job(held).await?;
        (node(&j, "create")["state"] == "done").then_some(())
    })
    .await;
    let (_, before) = api.get("/api/v1/jobs?all=true").await;
    let other_pids: Vec<_> = swarm.pids()[1..].to_vec();

    swarm.hives[0].kill_and_restart(&[]);
    let restarted = Instant::now();
    let api = swarm.hives[0].job_api().await;
    let done1 = api.done(held, T).await;
    let done2 = api.done(queued, T).await;
    let resumed = restarted.elapsed();
    assert_eq!(
        node(&done1, "create")["attempts"],
        1,
        "create not run again: {done1:#}"
    );
    assert_eq!(done2["state"], "done");

    // No job lost: every job listed before the kill is still listed.
    let (_, after) = api.get("/api/v1/jobs?all=true").await;
    let ids = |v: &serde_json::Value| -> Vec<i64> {
        let list = v["jobs"]
            .as_array()
            .or(v.as_array())
            .cloned()
            .unwrap_or_default();
        list.iter().filter_map(|j| j["id"].as_i64()).collect()
    };
    for id in ids(&before) {
        assert!(
            ids(&after).contains(&id),
            "job {id} lost: {before:#} -> {after:#}"
        );
    }
    assert!(
        ids(&after).contains(&held) && ids(&after).contains(&queued),
        "{after:#}"
    );
    // No container duplicated: exactly one per agent.
    let mut names = containers_of(&victim);
    names.sort();
    assert_eq!(
        names,
        vec![
            format!("hyperhive.{victim}.j1"),
            format!("hyperhive.{victim}.j2")
        ],
    );
    // The rest of the swarm did not notice.
    assert_eq!(swarm.pids()[1..].to_vec(), other_pids);
    for n in &swarm.names[1..] {
        assert!(kv.status(n).await.is_some(), "{n} publishes");
    }
    println!(
        "FIGURES: faults_sigkill jobs=2 restart_to_both_done_ms={} create_attempts={} containers={}",
        resumed.as_millis(),
        node(&done1, "create")["attempts"],
        names.len()
    );
}
