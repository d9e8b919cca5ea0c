//! A JetStream cluster of three servers on loopback, buckets with 3
//! replicas: one server killed, the hives keep publishing, watching and
//! converging; the server back, nothing is lost (every declared revision
//! still readable).

use std::time::{Duration, Instant};

use hyperhive_tests::swarm::{SwarmSpec, TestSwarm};
use hyperhive_tests::wait_until;

const T: Duration = Duration::from_secs(50);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_of_three_survives_one_server_down() {
    let mut swarm = TestSwarm::start(SwarmSpec {
        test: "f-clu",
        cluster: true,
        ..Default::default()
    })
    .await;
    let kv = swarm.connect().await;
    let wanted = kv.js.get_key_value("hyperhive-wanted").await.unwrap();
    let info = wanted.status().await.unwrap();
    assert_eq!(info.info.config.num_replicas, 3, "wanted has 3 replicas");
    let mut all = Vec::new();
    let first = swarm.declare_all(&kv, "1").await;
    swarm.all_converged(&kv, &first, T).await;
    all.extend(first);
    let pids = swarm.pids();

    // Kill one server (whichever; the first is the one in every URL list).
    swarm.nats[0].stop();
    let down = Instant::now();
    let kv = wait_until(T, "a client on the remaining two", || async {
        let kv = swarm.connect().await;
        kv.js
            .get_key_value("hyperhive-wanted")
            .await
            .ok()
            .map(|_| kv)
    })
    .await;
    let before: Vec<u64> = {
        let mut v = Vec::new();
        for n in &swarm.names {
            v.push(kv.status(n).await.map(|s| s.0).unwrap_or(0));
        }
        v
    };
    let second = wait_until(T, "a declaration accepted by the quorum", || async {
        let mut revs = Vec::new();
        for n in &swarm.names {
            let store = kv.js.get_key_value("hyperhive-wanted").await.ok()?;
            revs.push(store.put(n, swarm.declaration("2").into()).await.ok()?);
        }
        Some(revs)
    })
    .await;
    swarm.all_converged(&kv, &second, T).await;
    let converged_down = down.elapsed();
    for (n, r0) in swarm.names.iter().zip(&before) {
        wait_until(T, &format!("{n} still publishing"), || async {
            let (r, _) = kv.status(n).await?;
            (r > *r0).then_some(())
        })
        .await;
    }
    all.extend(second);

    // Back again: nothing lost.
    swarm.nats[0].restart();
    let back = Instant::now();
    let third = swarm.declare_all(&kv, "3").await;
    swarm.all_converged(&kv, &third, T).await;
    let converged_back = back.elapsed();
    all.extend(third);
    assert_eq!(swarm.pids(), pids, "no hive restarted");
    // Read every revision through the restarted server alone.
    let only = hyperhive_tests::kv::Swarm::connect(&swarm.nats[0].url()).await;
    let store = wait_until(T, "the restarted server serving the bucket", || async {
        only.js.get_key_value("hyperhive-wanted").await.ok()
    })
    .await;
    for (i, r) in all.iter().enumerate() {
        let n = &swarm.names[i % 3];
        let version = ["1", "2", "3"][i / 3];
        let e = wait_until(T, &format!("revision {r} of {n}"), || async {
            store.entry_for_revision(n, *r).await.ok()?
        })
        .await;
        assert_eq!(
            e.value,
            swarm.declaration(version).as_bytes(),
            "revision {r}"
        );
    }
    println!(
        "FIGURES: faults_cluster servers=3 replicas=3 one_down_declare_to_all_converged_ms={} back_declare_to_all_converged_ms={} revisions_checked={}",
        converged_down.as_millis(),
        converged_back.as_millis(),
        all.len()
    );
}
