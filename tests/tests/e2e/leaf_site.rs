//! A leaf-node site: a hub of three servers (JetStream domain `hub`)
//! holds the buckets with 3 replicas; a site server with its own JetStream
//! (domain `site`) joins the hub as a leaf node; the three real hives
//! connect only to the site and reach the buckets with
//! `jetstream_domain = "hub"`; the controller's `status` connects to the hub.
//!
//! The hives converge and stay fresh through the leaf. Cutting the leaf
//! link (the forwarder between site and hub closes its connections and
//! refuses new ones; the site server and the hives' connections to it stay
//! up) makes them stale at the controller; a declaration put on the hub
//! meanwhile reaches no hive. When the link is back, they are fresh again
//! and converge on it, with no hive restarted. The times are printed
//! (`FIGURES:`), never asserted.

use std::time::{Duration, Instant};

use hyperhive_tests::swarm::{HivesOn, SwarmSpec, TestSwarm};
use hyperhive_tests::wait_until;

const T: Duration = Duration::from_secs(40);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hives_on_a_leaf_site_go_stale_when_the_link_is_cut_and_recover() {
    let swarm = TestSwarm::start(SwarmSpec {
        test: "leaf",
        cluster: true,
        hives_on: HivesOn::LeafSite,
        stale_after_secs: 3,
        ..Default::default()
    })
    .await;
    let site = swarm.site.as_ref().expect("a leaf site");
    let _logs = LogsOnPanic(&swarm);
    let kv = swarm.connect().await;
    let first = swarm.declare_all(&kv, "1").await;
    swarm.all_converged(&kv, &first, T).await;

    // Only the site holds the hives' connections.
    let hive_conns = |held: Vec<String>| {
        let names: Vec<String> = swarm.names.iter().map(|n| format!("hive-{n}")).collect();
        held.into_iter()
            .filter(|c| names.contains(c))
            .collect::<Vec<_>>()
    };
    assert_eq!(hive_conns(site.server.client_names().await).len(), 3);
    for hub in &swarm.nats {
        assert!(
            hive_conns(hub.client_names().await).is_empty(),
            "a hive connected to the hub {}",
            hub.url()
        );
    }
    let pids = swarm.pids();
    all_at_controller(&swarm, "fresh", |row| row["convergence"] == "converged").await;
    // Fresh through the leaf: every hive keeps publishing.
    let before = status_revisions(&swarm, &kv).await;
    wait_until(T, "every hive publishing again", || async {
        let now = status_revisions(&swarm, &kv).await;
        now.iter().zip(&before).all(|(n, b)| n > b).then_some(())
    })
    .await;
    all_at_controller(&swarm, "fresh", |_| true).await;
    assert_eq!(site.leaf_links().await, 1, "the site is joined to the hub");

    site.cut();
    let cut = Instant::now();
    wait_until(T, "the leaf link gone", || async {
        (site.leaf_links().await == 0).then_some(())
    })
    .await;
    all_at_controller(&swarm, "stale", |_| true).await;
    let stale_ms = cut.elapsed().as_millis();
    // Only the link is cut: the hives are still connected to the site.
    assert_eq!(hive_conns(site.server.client_names().await).len(), 3);
    let second = swarm.declare_all(&kv, "2").await;
    for n in &swarm.names {
        let (_, s) = kv.status(n).await.expect("a status");
        assert!(
            s["converged_revision"].as_u64() < second.iter().min().copied(),
            "{n} cannot have converged on a declaration put while cut off: {s:#}"
        );
    }

    site.restore();
    let restored = Instant::now();
    wait_until(T, "the leaf link made again", || async {
        (site.leaf_links().await == 1).then_some(())
    })
    .await;
    let relinked_ms = restored.elapsed().as_millis();
    all_at_controller(&swarm, "fresh", |_| true).await;
    let fresh_ms = restored.elapsed().as_millis();
    swarm.all_converged(&kv, &second, T).await;
    let converged_ms = restored.elapsed().as_millis();
    all_at_controller(&swarm, "fresh", |row| row["convergence"] == "converged").await;
    assert_eq!(swarm.pids(), pids, "no hive restarted");
    println!(
        "FIGURES: leaf_site hub_servers=3 replicas=3 hives=3 stale_after_s=3 \
         cut_to_all_stale_ms={stale_ms} restore_to_leaf_linked_ms={relinked_ms} \
         restore_to_all_fresh_ms={fresh_ms} restore_to_all_converged_ms={converged_ms}"
    );
}

/// On a failure, the hives' and the site server's logs go to stderr.
struct LogsOnPanic<'a>(&'a TestSwarm);

impl Drop for LogsOnPanic<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        for (n, h) in self.0.names.iter().zip(&self.0.hives) {
            eprintln!("--- {n} log ---\n{}", h.daemon.log());
        }
        if let Some(site) = &self.0.site {
            eprintln!("--- site server log ---\n{}", site.server.log());
        }
    }
}

/// Wait until `status --json` (connected to the hub) shows every hive with
/// `freshness` and passing `check`.
async fn all_at_controller(
    swarm: &TestSwarm,
    freshness: &str,
    check: impl Fn(&serde_json::Value) -> bool,
) {
    wait_until(
        T,
        &format!("every hive {freshness} at the controller"),
        || async {
            let report = swarm.controller_status().ok()?;
            swarm
                .names
                .iter()
                .all(|n| {
                    let row = TestSwarm::row(&report, n);
                    row["freshness"] == freshness && check(row)
                })
                .then_some(())
        },
    )
    .await;
}

async fn status_revisions(swarm: &TestSwarm, kv: &hyperhive_tests::kv::Swarm) -> Vec<u64> {
    let mut revs = Vec::new();
    for n in &swarm.names {
        revs.push(kv.status(n).await.map_or(0, |(r, _)| r));
    }
    revs
}
