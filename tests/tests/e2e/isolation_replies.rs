//! What the server publishes on a hive's behalf, against a real nats-server
//! running the accounts `swarm-controller nats-config` renders.
//!
//! nats-server never checks a reply subject against permissions, and
//! JetStream answers to whatever reply a request carries. So hive alpha
//! sends every publish it is allowed (its status put, its direct gets) with
//! every answer JetStream gives (an ack, a value, 404, 408, error replies)
//! aimed at beta's keys and a key of no hive in every bucket, at every
//! bucket's JetStream API (purge, delete, message delete, update) and at the
//! controller's inbox ([`hyperhive_tests::reply_probes`]). Nothing changes
//! and the controller hears nothing: each hive's account holds only its own
//! imports, and an answer that crosses an import is delivered back into the
//! asker's account. With the one shared account of before, the same probes
//! purged and deleted the buckets and wrote into beta's declaration.
//!
//! A hive cannot forge the controller's replies either: the doorbell it
//! hears and the deploy request it answers carry no subject of the
//! controller's, and what it sends to them never reaches the controller's
//! inbox.

use std::time::Duration;

use async_nats::jetstream;
use futures_util::StreamExt;
use hyperhive_tests::identity::{ask_deploy, SecuredNats};
use hyperhive_tests::reply_probes::{self, cred_key};
use hyperhive_tests::wait_until;
use swarm_queue_client::direct::KeyReader;
use swarm_queue_client::permissions::JsApi;
use swarm_queue_client::subjects::{
    controller_inbox_prefix, deploy_answer_prefix, deploy_answer_subject, HiveSubjects,
};
use swarm_queue_client::{Bucket, Connection, HiveName};

const T: Duration = Duration::from_secs(30);

/// The controller makes every bucket with the project's settings and
/// writes alpha's and beta's declaration and credential, a rollout head
/// and the event stream with an audit event; beta puts its status.
async fn seed(s: &SecuredNats) -> (Connection, jetstream::Context) {
    let (ctl, cjs) = s.controller_with_buckets().await;
    let wanted = cjs.get_key_value(Bucket::Wanted.name()).await.unwrap();
    let creds = cjs.get_key_value(Bucket::Credentials.name()).await.unwrap();
    let rollouts = cjs.get_key_value(Bucket::Rollouts.name()).await.unwrap();
    for h in ["alpha", "beta"] {
        let declaration = format!("{h}-declaration");
        wanted.put(h, declaration.into()).await.unwrap();
        creds.put(cred_key(h), "sealed".into()).await.unwrap();
    }
    rollouts.put("current", "head".into()).await.unwrap();
    reply_probes::seed_events(&cjs).await;
    s.put_status("beta", "beta-up").await;
    (ctl, cjs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_answer_a_hive_can_cause_reaches_beyond_its_own_keys() {
    let s = SecuredNats::start_generated(&["alpha", "beta"]);
    let (ctl, cjs) = seed(&s).await;
    let alpha = s.hive_conn("alpha").await;
    let spy = s.controller_conn().await;
    let outcome = reply_probes::run(&alpha, &spy, &cjs, "alpha", &JsApi::local(), &["beta"]).await;
    outcome.assert_contained("one-server");

    // Everything still works: beta's next put lands, alpha reads its own.
    s.put_status("beta", "beta-again").await;
    let own = KeyReader::new(&jetstream::new(alpha.client.clone()), Bucket::Wanted)
        .last("alpha")
        .await
        .unwrap()
        .expect("alpha's declaration");
    assert_eq!(&own.value[..], b"alpha-declaration");
    drop(ctl);
}

/// The control: the same probes on a server of one account and no
/// permissions (what the permissions alone gave before accounts) find what
/// they were made to find, the event stream's deletion among it. A run
/// that changed nothing there would prove nothing above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probes_find_the_damage_on_a_server_of_one_account() {
    let server = hyperhive_tests::nats::NatsServer::start();
    let plain = hyperhive_tests::kv::Swarm::connect(&server.url()).await;
    for b in Bucket::ALL {
        plain.bucket(b.name()).await;
    }
    reply_probes::seed_keys(&plain.js).await;
    let connect = |name: &'static str| {
        let config = swarm_queue_client::NatsConfig {
            url: Some(server.url()),
            ..Default::default()
        };
        async move {
            swarm_queue_client::connect(&config, name)
                .await
                .expect("connect")
        }
    };
    let (alpha, spy) = (connect("hive-alpha").await, connect("controller").await);
    let outcome =
        reply_probes::run(&alpha, &spy, &plain.js, "alpha", &JsApi::local(), &["beta"]).await;
    let changes = outcome.changes.join("\n");
    println!(
        "FIGURES: reply_probes where=one-account probes={} changes={} at_controller={}",
        outcome.probes,
        outcome.changes.len(),
        outcome.at_controller.len()
    );
    for gone in [
        "hyperhive-events",
        "KV_hyperhive-wanted",
        "KV_hyperhive-credentials",
    ] {
        assert!(
            changes.contains(&format!("stream {gone} is gone")),
            "{gone} survived the probes:\n{changes}"
        );
    }
    assert!(
        !outcome.at_controller.is_empty(),
        "nothing reached the inbox"
    );
}

/// The doorbell alpha hears is the controller's own put, reply subject
/// and all; a deploy request reaches it with a reply subject under its own
/// answer prefix. Neither lets it put a message in the controller's inbox
/// (a forged ack) or answer for beta (an answer under beta's prefix with
/// the token it saw).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hive_cannot_forge_the_controllers_replies() {
    let s = SecuredNats::start_generated(&["alpha", "beta"]);
    let (ctl, cjs) = seed(&s).await;
    let alpha = s.hive_conn("alpha").await;
    let spy = s.controller_conn().await;
    let mut spied = spy
        .client
        .subscribe(format!("{}.>", controller_inbox_prefix()))
        .await
        .unwrap();
    let beta = HiveName::new("beta").unwrap();
    let mut spied_beta = spy
        .client
        .subscribe(format!("{}.>", deploy_answer_prefix(&beta)))
        .await
        .unwrap();
    spy.client.flush().await.unwrap();

    // The doorbell: answer whatever reply it carries.
    let mut bell = alpha
        .client
        .subscribe(Bucket::Wanted.key_subject("alpha"))
        .await
        .unwrap();
    alpha.client.flush().await.unwrap();
    let wanted = cjs.get_key_value(Bucket::Wanted.name()).await.unwrap();
    let rev = wanted.put("alpha", "declaration-2".into()).await.unwrap();
    let rung = tokio::time::timeout(T, bell.next()).await.unwrap().unwrap();
    if let Some(reply) = rung.reply.clone() {
        alpha
            .client
            .publish(
                reply,
                r#"{"stream":"KV_hyperhive-wanted","seq":1,"forged":1}"#.into(),
            )
            .await
            .unwrap();
    }

    // A deploy request: answer it, again, and as beta.
    let subjects = HiveSubjects::new(&HiveName::new("alpha").unwrap());
    let mut deploy = alpha
        .client
        .subscribe(subjects.deploy.clone())
        .await
        .unwrap();
    alpha.client.flush().await.unwrap();
    let responder = {
        let client = alpha.client.clone();
        tokio::spawn(async move {
            let req = deploy.next().await.expect("a deploy request");
            let reply = req.reply.expect("a reply subject");
            client.publish(reply.clone(), "first".into()).await.unwrap();
            client
                .publish(reply.clone(), "second".into())
                .await
                .unwrap();
            let token = reply.rsplit('.').next().unwrap_or_default();
            let as_beta = deploy_answer_subject(&beta_name(), token);
            client
                .publish(as_beta, "forged-as-beta".into())
                .await
                .unwrap();
            client.flush().await.unwrap();
            reply
        })
    };
    let answer = wait_until(T, "alpha to answer its deploy request", || {
        let client = ctl.client.clone();
        async move {
            match ask_deploy(&client, "alpha", "deploy".into()).await {
                Ok(answer) => Some(answer),
                Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders => None,
                Err(e) => panic!("deploy request failed: {e}"),
            }
        }
    })
    .await;
    assert_eq!(&answer.payload[..], b"first");
    let reply_seen = responder.await.unwrap();
    assert!(
        reply_seen.starts_with(&format!("{}.", deploy_answer_prefix(&subjects_hive()))),
        "alpha's deploy request came with reply {reply_seen}, not under its answer prefix"
    );

    // Settle: one more round trip of the controller's own, then read what
    // reached its inbox.
    assert_eq!(wanted.entry("alpha").await.unwrap().unwrap().revision, rev);
    ctl.client.flush().await.unwrap();
    spy.client.flush().await.unwrap();
    let mut forged = Vec::new();
    while let Ok(Some(m)) = tokio::time::timeout(Duration::ZERO, spied_beta.next()).await {
        forged.push(format!(
            "{}: {}",
            m.subject,
            String::from_utf8_lossy(&m.payload)
        ));
    }
    while let Ok(Some(m)) = tokio::time::timeout(Duration::ZERO, spied.next()).await {
        let text = String::from_utf8_lossy(&m.payload).to_string();
        if text.contains("forged") {
            forged.push(format!("{}: {text}", m.subject));
        }
    }
    assert!(
        forged.is_empty(),
        "alpha's forgeries reached the controller's inbox:\n{}",
        forged.join("\n")
    );
}

fn beta_name() -> HiveName {
    HiveName::new("beta").unwrap()
}

fn subjects_hive() -> HiveName {
    HiveName::new("alpha").unwrap()
}
