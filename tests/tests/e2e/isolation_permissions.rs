//! Per-identity permissions against a real nats-server started with the
//! authorization `swarm-controller nats-config` renders: hive `alpha`
//! reaches what is its own and nothing of `beta`'s, and the controller can
//! do everything hyperhive needs.
//!
//! Every client here connects through `swarm_queue_client::connect`, the
//! code path the daemons use. Every refusal is asserted from the server's
//! own permissions-violation log line, naming the identity's key and the
//! exact subject, not from a timeout.

use std::time::Duration;

use async_nats::jetstream::{self, kv};
use futures_util::StreamExt;
use hyperhive_tests::identity::{ask_deploy, Identity, SecuredNats, Violation};
use hyperhive_tests::wait_until;
use swarm_queue_client::buckets::CURRENT_ROLLOUT_KEY;
use swarm_queue_client::direct::{put_own, KeyReader};
use swarm_queue_client::permissions::js_api;
use swarm_queue_client::subjects::{
    controller_inbox_prefix, credential_key, delivery_key, deploy_answer_prefix,
    deploy_answer_subject, HiveSubjects, KNOWLEDGE,
};
use swarm_queue_client::{
    decode, encode, open_or_create, AccountName, AgentName, Bucket, BucketSettings, Connection,
    CredentialNotice, DeployReply, DeployRequest, HiveName,
};

const T: Duration = Duration::from_secs(20);
/// JetStream requests that the server refuses get no answer; don't wait
/// long for one (the refusal itself is read from the server log).
const REFUSED_WAIT: Duration = Duration::from_millis(700);

fn hive(name: &str) -> HiveName {
    HiveName::new(name).unwrap()
}

fn js(conn: &Connection, timeout: Duration) -> jetstream::Context {
    let mut js = jetstream::new(conn.client.clone());
    js.set_timeout(timeout);
    js
}

async fn open(js: &jetstream::Context, bucket: Bucket) -> kv::Store {
    open_or_create(js, bucket, &BucketSettings::default_for(bucket))
        .await
        .unwrap_or_else(|e| panic!("open {}: {e}", bucket.name()))
}

/// The controller creates the three buckets and writes one declaration and
/// one credential for each of `alpha` and `beta`.
async fn seed(ctl: &Connection) -> [kv::Store; 3] {
    let js = js(ctl, Duration::from_secs(5));
    let status = open(&js, Bucket::Status).await;
    let wanted = open(&js, Bucket::Wanted).await;
    let creds = open(&js, Bucket::Credentials).await;
    for h in ["alpha", "beta"] {
        wanted
            .put(h, format!("{h}-declaration").into())
            .await
            .unwrap();
        creds
            .put(
                credential_key(&hive(h), &agent(), &account()),
                format!("{h}-sealed").into(),
            )
            .await
            .unwrap();
    }
    [status, wanted, creds]
}

fn agent() -> AgentName {
    AgentName::new("mail-bot").unwrap()
}

fn account() -> AccountName {
    AccountName::new("smtp").unwrap()
}

fn violations_by(s: &SecuredNats, key: &str) -> Vec<String> {
    s.violations()
        .into_iter()
        .filter(|l| l.contains(key))
        .collect()
}

#[tokio::test]
async fn a_hive_reaches_everything_that_is_its_own() {
    let s = SecuredNats::start_generated(&["alpha", "beta"]);
    let ctl = s.controller_conn().await;
    let [_, ctl_wanted, _] = seed(&ctl).await;
    let a = s.hive_conn("alpha").await;
    let ajs = js(&a, Duration::from_secs(5));

    // Its own status: a put, with no bucket open (no stream info).
    put_own(&ajs, Bucket::Status, "alpha", "alpha-status".into())
        .await
        .expect("put own status");

    // Its own declaration: a direct get, and the doorbell on its subject.
    let mut doorbell = a
        .client
        .subscribe(Bucket::Wanted.key_subject("alpha"))
        .await
        .expect("subscribe to its own key subject");
    a.client.flush().await.unwrap();
    let wanted = KeyReader::new(&ajs, Bucket::Wanted);
    let entry = wanted
        .last("alpha")
        .await
        .expect("direct get")
        .expect("a value");
    assert_eq!(&entry.value[..], b"alpha-declaration");
    let rev = ctl_wanted
        .put("alpha", "alpha-declaration-2".into())
        .await
        .unwrap();
    tokio::time::timeout(T, doorbell.next())
        .await
        .expect("the doorbell rings")
        .expect("subscription open");
    let current = wanted.last("alpha").await.unwrap().unwrap();
    assert_eq!(
        (current.revision, &current.value[..]),
        (rev, &b"alpha-declaration-2"[..])
    );

    // Its own credentials: by key, and the doorbell on its prefix.
    let _cred_bell = a
        .client
        .subscribe(Bucket::Credentials.key_subject("alpha.>"))
        .await
        .unwrap();
    let creds = KeyReader::new(&ajs, Bucket::Credentials);
    let key = credential_key(&hive("alpha"), &agent(), &account());
    assert_eq!(
        &creds.last(&key).await.unwrap().unwrap().value[..],
        b"alpha-sealed"
    );

    // Its own events: knowledge, deploy (and it answers), credential.
    let subjects = HiveSubjects::new(&hive("alpha"));
    // Subscribed in this order on one connection, so once the deploy
    // subscription is live (the request below finds a responder) the other
    // two are too.
    let mut knowledge = a.client.subscribe(KNOWLEDGE).await.unwrap();
    let mut credential = a
        .client
        .subscribe(subjects.credential.clone())
        .await
        .unwrap();
    let mut deploy = a.client.subscribe(subjects.deploy.clone()).await.unwrap();
    a.client.flush().await.unwrap();
    let responder = tokio::spawn(async move {
        let req = deploy.next().await.expect("a deploy request");
        let decoded = decode::<DeployRequest>(&req.payload).expect("a valid request");
        assert_eq!(decoded.value.agent, agent());
        let reply = req.reply.expect("a reply subject");
        // The reply is under alpha's own answer prefix, the one subject it
        // may answer on: never the controller's inbox.
        let prefix = format!("{}.", deploy_answer_prefix(&hive("alpha")));
        assert!(reply.starts_with(&prefix), "{reply}");
        a.client
            .publish(reply, DeployReply::Queued { job: 7 }.encode().into())
            .await
            .unwrap();
        a.client.flush().await.unwrap();
        a
    });
    let request = encode(&DeployRequest::new(agent())).unwrap();
    let answer = wait_until(T, "alpha to answer its deploy request", || {
        let (client, request) = (ctl.client.clone(), request.clone());
        async move {
            match ask_deploy(&client, "alpha", request.into()).await {
                Ok(answer) => Some(answer),
                // Its subscription has not reached the server yet.
                Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders => None,
                Err(e) => panic!("deploy request failed: {e}"),
            }
        }
    })
    .await;
    assert_eq!(
        DeployReply::decode(&answer.payload).unwrap(),
        DeployReply::Queued { job: 7 }
    );
    let a = responder.await.unwrap();
    ctl.client
        .publish(
            subjects.credential.clone(),
            encode(&CredentialNotice::new(agent(), account()))
                .unwrap()
                .into(),
        )
        .await
        .unwrap();
    ctl.client.publish(KNOWLEDGE, "".into()).await.unwrap();
    ctl.client.flush().await.unwrap();
    let notice = tokio::time::timeout(T, credential.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        decode::<CredentialNotice>(&notice.payload)
            .unwrap()
            .value
            .account,
        account()
    );
    tokio::time::timeout(T, knowledge.next())
        .await
        .unwrap()
        .unwrap();

    // The controller reads what alpha wrote.
    let ctl_status = open(&js(&ctl, Duration::from_secs(5)), Bucket::Status).await;
    assert_eq!(
        &ctl_status.get("alpha").await.unwrap().unwrap()[..],
        b"alpha-status"
    );
    drop(a);
    let alpha_key = &s.hive("alpha").public;
    assert!(
        violations_by(&s, alpha_key).is_empty()
            && violations_by(&s, &s.controller.public).is_empty(),
        "no refusal expected on the allowed paths: {:#?}",
        s.violations()
    );
}

#[tokio::test]
async fn a_hive_cannot_touch_another_hives_keys_or_subjects() {
    let s = SecuredNats::start_generated(&["alpha", "beta"]);
    let ctl = s.controller_conn().await;
    seed(&ctl).await;
    let a = s.hive_conn("alpha").await;
    let ajs = js(&a, REFUSED_WAIT);
    let me = s.hive("alpha").public.clone();
    let beta_cred = credential_key(&hive("beta"), &agent(), &account());
    let beta = HiveSubjects::new(&hive("beta"));

    // Write B's status.
    assert!(put_own(&ajs, Bucket::Status, "beta", "forged".into())
        .await
        .is_err());
    s.violation(Violation::Publish, &me, &Bucket::Status.key_subject("beta"))
        .await;

    // Read B's wanted key and credential by direct get, or hear their
    // doorbells.
    assert!(KeyReader::new(&ajs, Bucket::Wanted)
        .last("beta")
        .await
        .is_err());
    s.violation(
        Violation::Publish,
        &me,
        &js_api::direct_get(Bucket::Wanted, "beta"),
    )
    .await;
    assert!(KeyReader::new(&ajs, Bucket::Credentials)
        .last(&beta_cred)
        .await
        .is_err());
    s.violation(
        Violation::Publish,
        &me,
        &js_api::direct_get(Bucket::Credentials, &beta_cred),
    )
    .await;
    for subject in [
        Bucket::Wanted.key_subject("beta"),
        Bucket::Credentials.key_subject("beta.>"),
        Bucket::Status.key_subject("beta"),
    ] {
        let _sub = a.client.subscribe(subject.clone()).await.unwrap();
        a.client.flush().await.unwrap();
        s.violation(Violation::Subscribe, &me, &subject).await;
    }

    // The controllers' own buckets (the rollout state, the webhook's
    // deliveries, the maintenance holds, even the hive's own), written with
    // `create` as the controller writes them: no hive reads them, or hears
    // them change.
    let delivery = delivery_key("72d3162e-cc78-11e3-81ab-4c9367dc0958").unwrap();
    for (bucket, key) in [
        (Bucket::Rollouts, CURRENT_ROLLOUT_KEY),
        (Bucket::Deliveries, delivery.as_str()),
        (Bucket::Maintenance, "alpha"),
    ] {
        let store = open(&js(&ctl, Duration::from_secs(5)), bucket).await;
        store.create(key, "value".into()).await.unwrap();
        assert!(KeyReader::new(&ajs, bucket).last(key).await.is_err());
        s.violation(Violation::Publish, &me, &js_api::direct_get(bucket, key))
            .await;
        let subject = bucket.key_subject(">");
        let _sub = a.client.subscribe(subject.clone()).await.unwrap();
        a.client.flush().await.unwrap();
        s.violation(Violation::Subscribe, &me, &subject).await;
    }

    // Nor may a hive put itself (or another) in maintenance, or end it.
    for key in ["alpha", "beta"] {
        assert!(put_own(&ajs, Bucket::Maintenance, key, "held".into())
            .await
            .is_err());
        s.violation(
            Violation::Publish,
            &me,
            &Bucket::Maintenance.key_subject(key),
        )
        .await;
    }

    // The stock KV client (stream info to open, consumers to watch) is
    // refused at its first step, for its own key too.
    assert!(ajs.get_key_value(Bucket::Wanted.name()).await.is_err());
    s.violation(
        Violation::Publish,
        &me,
        &js_api::stream_info(Bucket::Wanted),
    )
    .await;

    // Subscribe to B's deploy subject (and B's credential subject).
    let _sub = a.client.subscribe(beta.deploy.clone()).await.unwrap();
    let _sub2 = a.client.subscribe(beta.credential.clone()).await.unwrap();
    a.client.flush().await.unwrap();
    s.violation(Violation::Subscribe, &me, &beta.deploy).await;
    s.violation(Violation::Subscribe, &me, &beta.credential)
        .await;

    // Publish a deploy request, to B or to itself; forge a reply to the
    // controller; announce a credential or a knowledge change.
    let own = HiveSubjects::new(&hive("alpha"));
    let request = encode(&DeployRequest::new(agent())).unwrap();
    for subject in [
        beta.deploy.clone(),
        own.deploy.clone(),
        beta.credential.clone(),
        KNOWLEDGE.to_string(),
    ] {
        a.client
            .publish(subject.clone(), request.clone().into())
            .await
            .unwrap();
        a.client.flush().await.unwrap();
        s.violation(Violation::Publish, &me, &subject).await;
    }
    // Forge a reply into the controller's inbox, or an answer of beta's.
    for forged_reply in [
        format!("{}.forged", controller_inbox_prefix()),
        deploy_answer_subject(&hive("beta"), "forged"),
    ] {
        a.client
            .publish(forged_reply.clone(), "x".into())
            .await
            .unwrap();
        a.client.flush().await.unwrap();
        s.violation(Violation::Publish, &me, &forged_reply).await;
    }
    // Read the controller's replies.
    let _spy = a
        .client
        .subscribe(format!("{}.>", controller_inbox_prefix()))
        .await
        .unwrap();
    a.client.flush().await.unwrap();
    s.violation(
        Violation::Subscribe,
        &me,
        &format!("{}.>", controller_inbox_prefix()),
    )
    .await;

    // Write any wanted key, its own included, and any credential.
    for key in ["alpha", "beta"] {
        assert!(put_own(&ajs, Bucket::Wanted, key, "{}".into())
            .await
            .is_err());
        s.violation(Violation::Publish, &me, &Bucket::Wanted.key_subject(key))
            .await;
    }
    let own_cred = credential_key(&hive("alpha"), &agent(), &account());
    assert!(
        put_own(&ajs, Bucket::Credentials, &own_cred, "planted".into())
            .await
            .is_err()
    );
    s.violation(
        Violation::Publish,
        &me,
        &Bucket::Credentials.key_subject(&own_cred),
    )
    .await;

    // No consumer of any kind, its own key included.
    let own_create = js_api::consumer_create(Bucket::Wanted, "mine", "alpha");
    let _ = a.client.request(own_create.clone(), "{}".into()).await;
    s.violation(Violation::Publish, &me, &own_create).await;

    // Nothing of beta's changed.
    let cjs = js(&ctl, Duration::from_secs(5));
    assert!(open(&cjs, Bucket::Status)
        .await
        .get("beta")
        .await
        .unwrap()
        .is_none());
    let w = open(&cjs, Bucket::Wanted).await;
    assert_eq!(
        &w.get("beta").await.unwrap().unwrap()[..],
        b"beta-declaration"
    );
    assert_eq!(
        &w.get("alpha").await.unwrap().unwrap()[..],
        b"alpha-declaration"
    );
    assert!(
        violations_by(&s, &s.controller.public).is_empty(),
        "{:#?}",
        s.violations()
    );
}

#[tokio::test]
async fn a_hive_opens_buckets_but_never_creates_them() {
    let s = SecuredNats::start_generated(&["alpha"]);
    let a = s.hive_conn("alpha").await;
    let me = s.hive("alpha").public.clone();
    let err = open_or_create(
        &js(&a, REFUSED_WAIT),
        Bucket::Status,
        &BucketSettings::default(),
    )
    .await
    .expect_err("a hive may not create the status bucket");
    let msg = hive::error_chain(&err);
    assert!(
        msg.contains("hyperhive-status") && msg.contains("controller"),
        "{msg}"
    );
    // Opening asks for the stream's info, creating for a create: a hive
    // may do neither.
    for subject in [
        js_api::stream_info(Bucket::Status),
        js_api::stream_create(Bucket::Status),
    ] {
        s.violation(Violation::Publish, &me, &subject).await;
    }
    let err = swarm_queue_client::buckets::create_bucket(
        &js(&a, REFUSED_WAIT),
        Bucket::Status,
        &BucketSettings::default(),
    )
    .await
    .expect_err("what the status publisher tries on a missing bucket is refused");
    assert!(err.to_string().contains("controller"), "{err}");
    // Its put names the missing bucket; once the controller created it,
    // the same put lands.
    let err = put_own(
        &js(&a, Duration::from_secs(5)),
        Bucket::Status,
        "alpha",
        "up".into(),
    )
    .await
    .expect_err("no status bucket yet");
    assert!(err.to_string().contains("hyperhive-status"), "{err}");
    let ctl = s.controller_conn().await;
    open(&js(&ctl, Duration::from_secs(5)), Bucket::Status).await;
    put_own(
        &js(&a, Duration::from_secs(5)),
        Bucket::Status,
        "alpha",
        "up".into(),
    )
    .await
    .expect("put after the controller created it");
}

#[tokio::test]
async fn an_identity_not_on_the_roster_cannot_connect() {
    let s = SecuredNats::start_generated(&["alpha"]);
    let stranger = Identity::new_user();
    let _conn = swarm_queue_client::connect(&stranger.nats_config(&s.server.url()), "hive-alpha")
        .await
        .expect("connect returns at once and retries in the background");
    wait_until(T, "the server to refuse the stranger", || {
        let log = s.server.log();
        async move {
            log.lines()
                .any(|l| {
                    l.contains("authentication error") || l.contains("Authorization Violation")
                })
                .then_some(())
        }
    })
    .await;
}

#[tokio::test]
async fn the_controller_can_do_everything_hyperhive_needs() {
    let s = SecuredNats::start_generated(&["alpha", "beta"]);
    let ctl = s.controller_conn().await;
    // Create buckets, declare, store credentials.
    let [status, wanted, creds] = seed(&ctl).await;
    // Read every status: a hive writes its own, the controller lists and
    // watches them all (the stock, unnamed watch and keys()).
    let a = s.hive_conn("alpha").await;
    put_own(
        &js(&a, Duration::from_secs(5)),
        Bucket::Status,
        "alpha",
        "alpha-up".into(),
    )
    .await
    .unwrap();
    let keys: Vec<String> = status
        .keys()
        .await
        .unwrap()
        .map(|k| k.unwrap())
        .collect()
        .await;
    assert_eq!(keys, vec!["alpha".to_string()]);
    let mut all = status.watch_all_from_revision(1).await.unwrap();
    let first = tokio::time::timeout(T, all.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.key, "alpha");
    let mut declared = wanted.watch_with_history("beta").await.unwrap();
    let d = tokio::time::timeout(T, declared.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(&d.value[..], b"beta-declaration");
    // Compare-and-set declare, delete, and a credential for any hive.
    let rev = wanted.entry("beta").await.unwrap().unwrap().revision;
    wanted.update("beta", "beta-2".into(), rev).await.unwrap();
    wanted.delete("beta").await.unwrap();
    creds
        .put(
            credential_key(&hive("beta"), &agent(), &account()),
            "x".into(),
        )
        .await
        .unwrap();
    let listed: Vec<String> = creds
        .keys()
        .await
        .unwrap()
        .map(|k| k.unwrap())
        .collect()
        .await;
    assert_eq!(listed.len(), 2, "{listed:?}");
    // Create the rollout bucket and change its state by compare-and-set.
    let rollouts = open(&js(&ctl, Duration::from_secs(5)), Bucket::Rollouts).await;
    let rev = rollouts
        .create(CURRENT_ROLLOUT_KEY, "plan".into())
        .await
        .unwrap();
    rollouts
        .update(CURRENT_ROLLOUT_KEY, "wave-2".into(), rev)
        .await
        .unwrap();
    assert!(rollouts
        .update(CURRENT_ROLLOUT_KEY, "stale".into(), rev)
        .await
        .is_err());
    // Create the maintenance bucket, hold a hive, change and end the hold by
    // compare-and-set.
    let holds = open(&js(&ctl, Duration::from_secs(5)), Bucket::Maintenance).await;
    let rev = holds.create("beta", "hold".into()).await.unwrap();
    let rev = holds.update("beta", "longer".into(), rev).await.unwrap();
    assert!(holds.update("beta", "stale".into(), rev - 1).await.is_err());
    holds
        .delete_expect_revision("beta", Some(rev))
        .await
        .unwrap();
    assert!(holds.get("beta").await.unwrap().is_none());
    // Events to any hive.
    for h in ["alpha", "beta"] {
        let subj = HiveSubjects::new(&hive(h));
        ctl.client.publish(subj.deploy, "{}".into()).await.unwrap();
        ctl.client
            .publish(subj.credential, "{}".into())
            .await
            .unwrap();
    }
    ctl.client.publish(KNOWLEDGE, "".into()).await.unwrap();
    ctl.client.flush().await.unwrap();
    // A request with no hive listening fails fast with "no responders",
    // which proves it was allowed through.
    let err = ctl
        .client
        .request(HiveSubjects::new(&hive("beta")).deploy, "{}".into())
        .await
        .expect_err("nobody listens");
    assert_eq!(err.kind(), async_nats::RequestErrorKind::NoResponders);
    assert!(
        violations_by(&s, &s.controller.public).is_empty(),
        "{:#?}",
        s.violations()
    );
    drop(a);
}
