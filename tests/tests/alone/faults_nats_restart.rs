//! NATS restarted while declarations change: three hives keep their
//! processes (same pids) and every one converges on the latest revision after
//! the reconnect.

use std::time::{Duration, Instant};

use hyperhive_tests::kv::container;
use hyperhive_tests::swarm::{SwarmSpec, TestSwarm};

const T: Duration = Duration::from_secs(45);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_restart_while_declarations_change() {
    let _slot = crate::one_slot().await;
    let mut swarm = TestSwarm::start(SwarmSpec {
        test: "f-natsrs",
        ..Default::default()
    })
    .await;
    let kv = swarm.connect().await;
    let first = swarm.declare_all(&kv, "1").await;
    swarm.all_converged(&kv, &first, T).await;
    let pids = swarm.pids();

    // Declarations change, the server goes away between two of them.
    let second = swarm.declare_all(&kv, "2").await;
    swarm.nats[0].stop();
    let down = Instant::now();
    swarm.nats[0].restart();
    let reconnect = Instant::now();
    let kv = swarm.connect().await;
    let third = swarm.declare_all(&kv, "3").await;
    for (a, b) in second.iter().zip(&third) {
        assert!(
            b > a,
            "revisions advance across the restart: {second:?} {third:?}"
        );
    }
    swarm.all_converged(&kv, &third, T).await;
    let converged = reconnect.elapsed();

    assert_eq!(swarm.pids(), pids, "no hive restarted");
    for h in &mut swarm.hives {
        assert!(h.daemon.is_running(), "hive exited:\n{}", h.daemon.log());
    }
    for n in &swarm.names {
        let (_, s) = kv.status(n).await.expect("status");
        assert_eq!(s["agents"]["a"]["observed"], "running", "{s}");
        let (_, running, _) = container(n, "a").expect("container");
        assert!(running);
    }
    println!(
        "FIGURES: faults_nats_restart hives=3 outage_ms={} reconnect_to_all_converged_ms={} latest_revisions={third:?}",
        (reconnect - down).as_millis(),
        converged.as_millis()
    );
}
