//! The controller down for a while: nothing on a hive depends on it. The
//! controller's `serve` process runs, is SIGKILLed, and while it is gone the hives keep their
//! agents running and keep publishing (status revisions advance), take a new
//! declaration, and when the controller is back its `status` sees every hive
//! fresh and converged.

use std::time::{Duration, Instant};

use hyperhive_tests::kv::container;
use hyperhive_tests::swarm::{SwarmSpec, TestSwarm};
use hyperhive_tests::wait_until;

const T: Duration = Duration::from_secs(45);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hives_keep_running_and_publishing_without_the_controller() {
    let _slot = crate::one_slot().await;
    let swarm = TestSwarm::start(SwarmSpec {
        test: "f-ctl",
        stale_after_secs: 5,
        ..Default::default()
    })
    .await;
    let kv = swarm.connect().await;
    let mut serve = swarm.serve_controller();
    let revs = swarm.declare_all(&kv, "1").await;
    swarm.all_converged(&kv, &revs, T).await;
    let ids: Vec<String> = swarm
        .names
        .iter()
        .map(|n| container(n, "a").expect("container").0)
        .collect();
    let mut first = Vec::new();
    for n in &swarm.names {
        first.push(kv.status(n).await.expect("status").0);
    }

    // The controller goes down: only the hives and NATS run. Three publish
    // rounds go by for every hive.
    assert!(serve.is_running(), "serve runs:\n{}", serve.log());
    serve.kill();
    let start = Instant::now();
    for (n, r0) in swarm.names.iter().zip(&first) {
        wait_until(T, &format!("{n} publishing on"), || async {
            let (r, _) = kv.status(n).await?;
            // Revisions are per bucket: 3 hives x 3 rounds at least.
            (r >= r0 + 9).then_some(())
        })
        .await;
    }
    let publishing = start.elapsed();
    let later = swarm.declare_all(&kv, "2").await;
    swarm.all_converged(&kv, &later, T).await;
    for (n, id) in swarm.names.iter().zip(&ids) {
        let (new_id, running, _) = container(n, "a").expect("container");
        assert!(running, "{n}'s agent runs");
        assert_ne!(&new_id, id, "the new declaration was applied on {n}");
    }

    // The controller comes back and sees it all.
    let mut serve = swarm.serve_controller();
    let report = wait_until(T, "the controller sees all fresh and converged", || async {
        let r = swarm.controller_status().ok()?;
        swarm
            .names
            .iter()
            .all(|n| {
                let row = TestSwarm::row(&r, n);
                row["freshness"] == "fresh" && row["convergence"] == "converged"
            })
            .then_some(r)
    })
    .await;
    assert!(serve.is_running(), "serve runs again:\n{}", serve.log());
    println!(
        "FIGURES: faults_controller_down hives=3 three_publish_rounds_ms={} controller_summary={:?}",
        publishing.as_millis(),
        report["summary"]["line"].as_str().unwrap_or_default()
    );
}
