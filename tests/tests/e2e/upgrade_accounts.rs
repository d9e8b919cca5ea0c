//! The upgrade path of docs/operations.md ("Upgrading to per-hive
//! accounts"), on a real single nats-server: a fleet whose identities all
//! lived in the global account (the buckets' streams in the store's `$G`
//! directory) moves to the accounts `nats-config` renders by stopping the
//! server, renaming the store's account directory to `HYPERHIVE` and
//! starting it with the new config. Every bucket, key, revision and
//! history entry is as before; the controller and the hive connect with
//! the seeds they had and reach their keys as before. Started with the new
//! config but without the rename, the server shows no bucket at all: the
//! step the runbook must not skip.

use std::time::Duration;

use async_nats::jetstream;
use hyperhive_tests::identity::{connect_as, render_roster, Identity};
use hyperhive_tests::reply_probes::{cred_key, FleetState};
use hyperhive_tests::NatsServer;
use swarm_queue_client::direct::{put_own, KeyReader};
use swarm_queue_client::subjects::{hive_connection_name, CONTROLLER_CONNECTION_NAME};
use swarm_queue_client::{open_or_create, Bucket, BucketSettings, HiveName};

/// What the old `nats-config` put in a server: nkey users of the global
/// account (their permissions do not matter to where the data lives).
fn global_account_config(controller: &Identity, alpha: &Identity) -> String {
    format!(
        "authorization {{\n  users = [\n    {{ nkey: \"{}\" }}\n    {{ nkey: \"{}\" }}\n  ]\n}}\n",
        controller.public, alpha.public
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renaming_the_global_accounts_store_keeps_every_bucket() {
    let (controller, alpha) = (Identity::new_user(), Identity::new_user());
    let mut server = NatsServer::start_with(Some(&global_account_config(&controller, &alpha)), &[]);
    let url = server.url();
    let hive = HiveName::new("alpha").unwrap();

    // The fleet before: buckets, two declarations of alpha, a credential,
    // alpha's status.
    let before = {
        let ctl = connect_as(&url, &controller, CONTROLLER_CONNECTION_NAME).await;
        let js = jetstream::new(ctl.client.clone());
        for b in Bucket::ALL {
            open_or_create(&js, b, &BucketSettings::default_for(b))
                .await
                .unwrap();
        }
        let wanted = js.get_key_value(Bucket::Wanted.name()).await.unwrap();
        wanted.put("alpha", "declaration-1".into()).await.unwrap();
        wanted.put("alpha", "declaration-2".into()).await.unwrap();
        let creds = js.get_key_value(Bucket::Credentials.name()).await.unwrap();
        creds.put(cred_key("alpha"), "sealed".into()).await.unwrap();
        let a = connect_as(&url, &alpha, &hive_connection_name(&hive)).await;
        put_own(
            &jetstream::new(a.client.clone()),
            Bucket::Status,
            "alpha",
            "up".into(),
        )
        .await
        .unwrap();
        FleetState::read(&js).await
    };
    assert_eq!(before.keys.len(), 3, "{:?}", before.keys.keys());

    // Stop it cleanly, as an operator would.
    server.signal("TERM");
    assert!(
        server.wait_exit(Duration::from_secs(20)),
        "nats-server did not stop"
    );
    let accounts = render_roster(
        &controller.public,
        &[("alpha".to_string(), alpha.public.clone())],
    );

    // The new config alone: the buckets are not in HYPERHIVE's store.
    server.restart_with_config(&accounts);
    {
        let ctl = connect_as(&url, &controller, CONTROLLER_CONNECTION_NAME).await;
        let js = jetstream::new(ctl.client.clone());
        let seen = FleetState::read(&js).await;
        assert!(
            seen.streams.values().all(Option::is_none),
            "{:?}",
            seen.streams
        );
    }
    server.signal("TERM");
    assert!(
        server.wait_exit(Duration::from_secs(20)),
        "nats-server did not stop"
    );

    // The runbook's step: rename the store's account directory.
    let store = server.store_dir().join("jetstream");
    std::fs::rename(store.join("$G"), store.join("HYPERHIVE")).expect("rename the store");
    server.restart_with_config(&accounts);

    let ctl = connect_as(&url, &controller, CONTROLLER_CONNECTION_NAME).await;
    let js = jetstream::new(ctl.client.clone());
    let after = FleetState::read(&js).await;
    assert_eq!(after, before, "the fleet after the rename");
    let wanted = js.get_key_value(Bucket::Wanted.name()).await.unwrap();
    let mut history = wanted.history("alpha").await.unwrap();
    let mut values = Vec::new();
    use futures_util::StreamExt;
    while let Some(e) = history.next().await {
        values.push(String::from_utf8_lossy(&e.unwrap().value).to_string());
    }
    assert_eq!(values, ["declaration-1", "declaration-2"]);

    // The hive, with its old seed, in its own account now.
    let a = connect_as(&url, &alpha, &hive_connection_name(&hive)).await;
    let ajs = jetstream::new(a.client.clone());
    let own = KeyReader::new(&ajs, Bucket::Wanted)
        .last("alpha")
        .await
        .unwrap()
        .expect("alpha's declaration");
    assert_eq!(
        (own.revision, &own.value[..]),
        (
            before.keys["hyperhive-wanted/alpha"].0,
            &b"declaration-2"[..]
        )
    );
    put_own(&ajs, Bucket::Status, "alpha", "up-again".into())
        .await
        .expect("alpha's status put in its own account");
}
