//! The generated accounts on a JetStream cluster of three servers, every
//! server running the same block, the buckets with 3 replicas: hive alpha
//! on the first server, the controller on the second, beta on the third.
//!
//! - a real `hive` (alpha) converges on a declaration the controller puts
//!   through another server, hears its doorbell, answers a deploy request
//!   and keeps putting its status: imports and exports between accounts
//!   hold across the cluster's routes;
//! - the reply-subject probes of `isolation_replies`, sent by alpha, change
//!   nothing of the fleet and reach nothing in the controller's inbox, read
//!   through the controller's server: the answer to a request that crossed
//!   alpha's imports is delivered back into alpha's account even when the
//!   stream's leader, which sends it, is another server.

use std::time::Duration;

use async_nats::jetstream;
use futures_util::StreamExt;
use hyperhive_tests::docker::{ContainerGuard, TestImage};
use hyperhive_tests::hive::{HiveProc, HiveSpec};
use hyperhive_tests::identity::{ask_deploy, connect_as, render_roster, Identity};
use hyperhive_tests::kv::Swarm;
use hyperhive_tests::reply_probes;
use hyperhive_tests::swarm::start_cluster_with;
use hyperhive_tests::{unique_name, wait_until, NatsServer};
use swarm_queue_client::direct::{put_own, KeyReader};
use swarm_queue_client::event_stream::EVENTS_STREAM;
use swarm_queue_client::permissions::JsApi;
use swarm_queue_client::subjects::{hive_connection_name, CONTROLLER_CONNECTION_NAME};
use swarm_queue_client::{
    encode, open_or_create, AgentName, Bucket, BucketSettings, Connection, DeployReply,
    DeployRequest, HiveName,
};

const T: Duration = Duration::from_secs(60);

/// Three servers with the accounts for the controller, `alpha` (named
/// `alpha`) and beta.
struct Cluster {
    servers: Vec<NatsServer>,
    controller: Identity,
    alpha: Identity,
    beta: Identity,
    alpha_name: String,
}

impl Cluster {
    fn start(alpha_name: &str) -> Cluster {
        let (controller, alpha, beta) = (
            Identity::new_user(),
            Identity::new_user(),
            Identity::new_user(),
        );
        let roster = [
            (alpha_name.to_string(), alpha.public.clone()),
            ("beta".to_string(), beta.public.clone()),
        ];
        let block = render_roster(&controller.public, &roster);
        let servers = start_cluster_with(&unique_name("iso-clu"), &block);
        Cluster {
            servers,
            controller,
            alpha,
            beta,
            alpha_name: alpha_name.to_string(),
        }
    }

    /// The controller on the second server, every bucket made with 3
    /// replicas (once the cluster has its meta leader).
    async fn controller(&self) -> (Connection, Swarm) {
        let conn = connect_as(
            &self.servers[1].url(),
            &self.controller,
            CONTROLLER_CONNECTION_NAME,
        )
        .await;
        let js = jetstream::new(conn.client.clone());
        for b in Bucket::ALL {
            let settings = BucketSettings {
                replicas: 3,
                ..BucketSettings::default_for(b)
            };
            wait_until(T, &format!("{} made with 3 replicas", b.name()), || async {
                open_or_create(&js, b, &settings).await.ok()
            })
            .await;
        }
        let swarm = Swarm {
            client: conn.client.clone(),
            js,
        };
        (conn, swarm)
    }

    /// Connect as `who` to server `i`, the way a hive's daemon does.
    async fn hive_conn(&self, i: usize, who: &Identity, name: &str) -> Connection {
        let hive = HiveName::new(name).expect("a hive name");
        connect_as(&self.servers[i].url(), who, &hive_connection_name(&hive)).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hive_works_across_the_cluster_with_only_its_account() {
    let name = unique_name("iso-c");
    let cluster = Cluster::start(&name);
    let (_ctl, kv) = cluster.controller().await;
    let info = kv
        .js
        .get_key_value(Bucket::Wanted.name())
        .await
        .unwrap()
        .status()
        .await
        .unwrap();
    assert_eq!(info.info.config.num_replicas, 3);

    // The doorbell crosses the cluster: alpha on the first server hears a
    // put the controller makes on the second.
    let alpha = cluster.hive_conn(0, &cluster.alpha, &name).await;
    let mut bell = alpha
        .client
        .subscribe(Bucket::Wanted.key_subject(&name))
        .await
        .unwrap();
    alpha.client.flush().await.unwrap();
    let _guard = ContainerGuard::new(&name);
    let img = TestImage::busybox("iso-c");
    let declaration = serde_json::json!({
        "schema": 1,
        "agents": { "web": { "image": img.reference, "command": ["/bin/sleep", "3600"] } },
    });
    // Alpha's interest reaches the second server over the route a moment
    // after its own server has it: put again until one rings.
    let mut rung = None;
    for _ in 0..30 {
        let rev = kv.declare(&name, &declaration.to_string()).await;
        if let Ok(Some(_)) = tokio::time::timeout(Duration::from_secs(2), bell.next()).await {
            rung = Some(rev);
            break;
        }
    }
    let rev = rung.expect("the doorbell of alpha's declaration across the cluster");
    drop(alpha);

    // A real hive on the first server converges on it.
    let hive = HiveProc::start(HiveSpec {
        name: Some(&name),
        extra: &cluster.alpha.nats_toml(&cluster.servers[0].url()),
        ..Default::default()
    });
    let status = kv.converged(&name, rev, T).await;
    assert_eq!(status["agents"]["web"]["observed"], "running", "{status}");
    assert_eq!(
        cluster.servers[0]
            .client_account(&format!("hive-{name}"))
            .await
            .as_deref(),
        Some(name.as_str()),
        "the hive is the first server's client, in its own account:\n{}",
        hive.daemon.log()
    );

    // Answers a deploy request sent through the second server.
    let request = encode(&DeployRequest::new(AgentName::new("web").unwrap())).unwrap();
    let answer = ask_deploy(&kv.client, &name, request.into())
        .await
        .expect("a deploy reply across the cluster");
    assert!(matches!(
        DeployReply::decode(&answer.payload).unwrap(),
        DeployReply::Queued { .. }
    ));

    // Stays fresh.
    let (first, _) = kv.status(&name).await.expect("a status");
    wait_until(T, "two more status puts", || async {
        let (now, _) = kv.status(&name).await?;
        (now >= first + 2).then_some(())
    })
    .await;
    let log = hive.daemon.log();
    assert!(!log.contains("Permissions Violation"), "{log}");

    // `status` through the third server finds alpha's connection, which
    // the first server holds: in a cluster the connection list waits for
    // every server's answer, not only the one it asked through.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("controller.toml");
    std::fs::write(
        &config,
        format!(
            "{}[hives.{name}]\n",
            cluster.controller.nats_toml(&cluster.servers[2].url())
        ),
    )
    .unwrap();
    let report = hyperhive_tests::process::status_json(&config).unwrap();
    let row = &report["hives"][0];
    assert_eq!(row["name"], name.as_str(), "{report}");
    assert_eq!(
        (&row["freshness"], &row["freshness_rule"]),
        (&"fresh".into(), &"connection".into()),
        "{row}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_answer_a_hive_can_cause_reaches_beyond_its_own_keys_in_a_cluster() {
    let cluster = Cluster::start("alpha");
    let (_ctl, kv) = cluster.controller().await;
    reply_probes::seed_keys(&kv.js).await;
    // The event stream, made with one copy, is brought to three by the
    // next open with `[events] replicas = 3`, its events kept.
    reply_probes::seed_events_with(&kv.js, 3).await;
    let mut events = kv.js.get_stream(EVENTS_STREAM).await.unwrap();
    let info = events.info().await.unwrap();
    assert_eq!(info.config.num_replicas, 3, "{:?}", info.config);
    assert_eq!(info.state.messages, 2, "{:?}", info.state);
    let beta = cluster.hive_conn(2, &cluster.beta, "beta").await;
    put_own(&beta.jetstream(), Bucket::Status, "beta", "beta-up".into())
        .await
        .expect("beta's status put on the third server");

    let alpha = cluster
        .hive_conn(0, &cluster.alpha, &cluster.alpha_name)
        .await;
    let spy = connect_as(
        &cluster.servers[1].url(),
        &cluster.controller,
        CONTROLLER_CONNECTION_NAME,
    )
    .await;
    let outcome =
        reply_probes::run(&alpha, &spy, &kv.js, "alpha", &JsApi::local(), &["beta"]).await;
    outcome.assert_contained("cluster-of-3");

    put_own(
        &beta.jetstream(),
        Bucket::Status,
        "beta",
        "beta-again".into(),
    )
    .await
    .expect("beta's put after the probes");
    let own = KeyReader::new(&alpha.jetstream(), Bucket::Wanted)
        .last("alpha")
        .await
        .unwrap()
        .expect("alpha's declaration");
    assert_eq!(&own.value[..], b"alpha-declaration");
}
