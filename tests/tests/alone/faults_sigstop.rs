//! A hive SIGSTOPped (frozen): the controller shows it stale within
//! `stale_after`, never `converged` while frozen, and fresh again after
//! SIGCONT.

use std::time::{Duration, Instant};

use hyperhive_tests::swarm::{SwarmSpec, TestSwarm};
use hyperhive_tests::wait_until;

const T: Duration = Duration::from_secs(45);
const STALE_AFTER: u64 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_hive_is_stale_then_fresh_without_false_convergence() {
    let _slot = crate::one_slot().await;
    let swarm = TestSwarm::start(SwarmSpec {
        test: "f-stop",
        stale_after_secs: STALE_AFTER,
        ..Default::default()
    })
    .await;
    let kv = swarm.connect().await;
    let revs = swarm.declare_all(&kv, "1").await;
    swarm.all_converged(&kv, &revs, T).await;
    let frozen = swarm.names[0].clone();
    wait_until(T, "all fresh and converged at the controller", || async {
        let r = swarm.controller_status().ok()?;
        swarm
            .names
            .iter()
            .all(|n| {
                let row = TestSwarm::row(&r, n);
                row["freshness"] == "fresh" && row["convergence"] == "converged"
            })
            .then_some(())
    })
    .await;

    swarm.hives[0].daemon.signal("STOP");
    let stopped = Instant::now();
    // A new declaration while frozen: it cannot be converged on.
    let r2 = kv.declare(&frozen, &swarm.declaration("2")).await;
    let mut samples = 0;
    let mut stale_at = None;
    while stale_at.is_none() || stopped.elapsed() < Duration::from_secs(STALE_AFTER + 2) {
        assert!(
            stopped.elapsed() < T,
            "never stale: {:?}",
            swarm.controller_status()
        );
        let Ok(report) = swarm.controller_status() else {
            continue;
        };
        samples += 1;
        let row = TestSwarm::row(&report, &frozen);
        assert_ne!(
            row["convergence"], "converged",
            "false convergence while frozen: {row:#}"
        );
        if row["freshness"] == "stale" && stale_at.is_none() {
            stale_at = Some(stopped.elapsed());
        }
        if stale_at.is_some() {
            assert_eq!(
                row["freshness"], "stale",
                "stale stays stale while frozen: {row:#}"
            );
        }
        for n in &swarm.names[1..] {
            assert_eq!(
                TestSwarm::row(&report, n)["freshness"],
                "fresh",
                "{report:#}"
            );
        }
    }
    let stale_at = stale_at.expect("stale seen");
    // Within stale_after plus one publish interval (the last publish may
    // have been up to one interval before the stop) and the sample's cost.
    assert!(
        stale_at < Duration::from_secs(STALE_AFTER + 3),
        "stale only after {stale_at:?}"
    );

    swarm.hives[0].daemon.signal("CONT");
    let resumed = Instant::now();
    wait_until(T, "fresh again", || async {
        let r = swarm.controller_status().ok()?;
        (TestSwarm::row(&r, &frozen)["freshness"] == "fresh").then_some(())
    })
    .await;
    let fresh_after = resumed.elapsed();
    kv.converged(&frozen, r2, T).await;
    let converged_after = resumed.elapsed();
    println!(
        "FIGURES: faults_sigstop stale_after_s={STALE_AFTER} stop_to_stale_ms={} samples_while_frozen={samples} false_converged=0 cont_to_fresh_ms={} cont_to_converged_ms={}",
        stale_at.as_millis(),
        fresh_after.as_millis(),
        converged_after.as_millis()
    );
}
