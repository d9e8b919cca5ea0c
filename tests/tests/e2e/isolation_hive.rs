//! The hive's own code under per-hive permissions: a real `hive` process
//! publishing its status with its nkey, and the hive's wanted-state and
//! event tasks (pull + watch of its declaration, deploy requests and their
//! replies, credential notices and boot delivery) run against a server
//! started with the generated authorization.
//!
//! `a_hive_under_its_own_identity_converges_deploys_and_gets_credentials`
//! runs the whole daemon (`hive run`) under its nkey: it converges on a
//! declaration (container running, `converged_revision` published), answers
//! deploy requests (and refuses one for an undeclared agent), and delivers a
//! sealed credential, with no permissions violation.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use hive::bus::credentials::{credential_path, Credentials, Deliverer, DelivererParts};
use hive::bus::deploy::Deployer;
use hive::bus::events::EventDeps;
use hive::bus::wanted::WantedDeps;
use hive::status::StatusBoard;
use hyperhive_tests::docker::{ContainerGuard, TestImage};
use hyperhive_tests::hive::{warning_keys, HiveProc, HiveSpec};
use hyperhive_tests::identity::{ask_deploy, SecuredNats, Violation};
use hyperhive_tests::kv::{container, Swarm};
use hyperhive_tests::{unique_name, wait_until};
use swarm_queue_client::credentials::{seal, XKey};
use swarm_queue_client::subjects::{credential_key, hive_inbox_prefix, HiveSubjects};
use swarm_queue_client::{
    decode, encode, encode_pretty, open_or_create, AccountName, AgentName, AgentSpec, Bucket,
    BucketSettings, Connection, CredentialNotice, Declaration, DeployReply, DeployRequest,
    HiveName, HiveStatus,
};

const T: Duration = Duration::from_secs(30);

async fn controller_buckets(ctl: &Connection) -> [kv::Store; 3] {
    let js = jetstream::new(ctl.client.clone());
    let mut out = Vec::new();
    for b in Bucket::HIVE {
        out.push(
            open_or_create(&js, b, &BucketSettings::default_for(b))
                .await
                .expect("the controller creates the bucket"),
        );
    }
    out.try_into().expect("the hives' three buckets")
}

fn declaration(image: &str) -> Vec<u8> {
    let mut agents = BTreeMap::new();
    agents.insert(
        AgentName::new("mail-bot").unwrap(),
        AgentSpec {
            image: Some(image.to_string()),
            credentials: vec![AccountName::new("smtp").unwrap()],
            ..Default::default()
        },
    );
    encode_pretty(&Declaration::new(agents)).unwrap()
}

#[tokio::test]
async fn a_hive_process_publishes_its_status_with_its_own_identity_only() {
    let s = SecuredNats::start_generated(&["alpha", "beta"]);
    let url = s.server.url();
    let ctl = s.controller_conn().await;
    let [status, _, _] = controller_buckets(&ctl).await;

    let nats = s.hive("alpha").nats_toml(&url);
    let hive = HiveProc::start(HiveSpec {
        name: Some("alpha"),
        extra: &nats,
        ..Default::default()
    });
    // Two publishes: the first and one from the timer.
    let entry = wait_until(T, "alpha's second status publish", || {
        let status = status.clone();
        async move {
            status
                .entry("alpha")
                .await
                .ok()
                .flatten()
                .filter(|e| e.revision >= 2)
        }
    })
    .await;
    let hive_status = decode::<HiveStatus>(&entry.value).unwrap().value;
    assert_eq!(hive_status.hive.as_str(), "alpha");
    let (_, ready) = hive.ready().await;
    let warnings = warning_keys(&ready);
    assert!(
        !warnings
            .iter()
            .any(|k| k.starts_with("nats") || k == "swarm_status_publish"),
        "{ready}"
    );
    let alpha_key = &s.hive("alpha").public;
    assert!(
        !s.violations().iter().any(|l| l.contains(alpha_key)),
        "{:#?}",
        s.violations()
    );

    // A hive that holds another hive's seed cannot act as that hive: with
    // beta's key it may not even read alpha's reply inbox, so no JetStream
    // request (bucket open, put) can complete; the impostor keeps running
    // and alpha's status is untouched.
    drop(hive);
    let before = status.entry("alpha").await.unwrap().unwrap().revision;
    let stolen = s.hive("beta").nats_toml(&url);
    let mut impostor = HiveProc::start(HiveSpec {
        name: Some("alpha"),
        extra: &stolen,
        ..Default::default()
    });
    let alpha_inbox = format!("{}.", hive_inbox_prefix(&HiveName::new("alpha").unwrap()));
    s.violation_where(
        Violation::Subscribe,
        &s.hive("beta").public,
        "alpha's reply inbox",
        |subject| subject.starts_with(&alpha_inbox),
    )
    .await;
    assert!(impostor.daemon.is_running(), "the hive must keep running");
    assert_eq!(
        status.entry("alpha").await.unwrap().unwrap().revision,
        before
    );
}

/// The hive's wanted task and event listener, in-process, connected as
/// alpha: they read the declaration (pull and watch), answer a deploy
/// request, and deliver a credential on a notice and at boot, without a
/// single permissions violation.
#[tokio::test]
async fn the_hive_tasks_work_under_the_hive_identity() {
    let s = SecuredNats::start_generated(&["alpha", "beta"]);
    let ctl = s.controller_conn().await;
    let [_, wanted, creds] = controller_buckets(&ctl).await;
    let alpha = HiveName::new("alpha").unwrap();
    let agent = AgentName::new("mail-bot").unwrap();
    let account = AccountName::new("smtp").unwrap();
    let controller_xkey = XKey::new();
    let hive_xkey = Arc::new(XKey::new());

    // Declared and sealed before the hive starts: the boot paths.
    let first = wanted
        .put("alpha", declaration("local/a:1").into())
        .await
        .unwrap();
    let envelope = seal(b"boot-secret", &controller_xkey, &hive_xkey.public_key()).unwrap();
    creds
        .put(
            credential_key(&alpha, &agent, &account),
            encode(&envelope).unwrap().into(),
        )
        .await
        .unwrap();

    let conn = s.hive_conn("alpha").await;
    let state = tempfile::tempdir().unwrap();
    let board = Arc::new(StatusBoard::new(
        Some(alpha.clone()),
        Some(hive_xkey.public_key()),
    ));
    let (trigger, shutdown) = hive::shutdown::channel();
    let (tx, mut rx) = tokio::sync::watch::channel(None);
    let wanted_task = tokio::spawn(hive::bus::wanted::run(
        WantedDeps {
            nats: conn.clone(),
            hive: alpha.clone(),
            board: board.clone(),
            bucket: BucketSettings::default_for(Bucket::Wanted),
            tx,
        },
        shutdown.clone(),
    ));
    let seen = wait_until(T, "the boot pull", || {
        let w = rx.borrow_and_update().clone();
        async move { w.filter(|w| w.revision == first) }
    })
    .await;
    assert_eq!(seen.declaration.agents.len(), 1);
    let second = wanted
        .put("alpha", declaration("local/a:2").into())
        .await
        .unwrap();
    wait_until(T, "the watch to bring the update", || {
        let w = rx.borrow_and_update().clone();
        async move { w.filter(|w| w.revision == second) }
    })
    .await;

    // Boot delivery of the declared credentials, by direct get.
    let agents_dir = state.path().join("agents");
    let deliverer = Deliverer::new(DelivererParts {
        client: conn.client.clone(),
        hive: alpha.clone(),
        xkey: hive_xkey.clone(),
        trusted: Arc::new(vec![controller_xkey.public_key()]),
        agents_dir: agents_dir.clone(),
    });
    let (written, failures) = deliverer
        .deliver_declared(&declaring(&agent, &account))
        .await
        .unwrap();
    assert_eq!((written.len(), failures.len()), (1, 0));
    let path = credential_path(&agents_dir, &agent, &account);
    assert_eq!(std::fs::read(&path).unwrap(), b"boot-secret");

    // Events: a deploy request answered, a credential notice delivered.
    let jobs = hive::agents::jobs::JobStore::open(&state.path().join("hive.db")).unwrap();
    let deploy = Deployer {
        store: jobs.clone(),
        wake: Arc::default(),
        wanted: rx.clone(),
        hive: alpha.clone(),
    };
    let events = tokio::spawn(hive::bus::events::run(
        EventDeps {
            client: conn.client.clone(),
            hive: alpha.clone(),
            board: board.clone(),
            knowledge: None,
            credentials: Credentials::open(deliverer),
            deploy,
        },
        shutdown.clone(),
    ));
    let subjects = HiveSubjects::new(&alpha);
    let request = encode(&DeployRequest::new(agent.clone())).unwrap();
    let reply = wait_until(T, "alpha's deploy reply", || {
        let (client, request) = (ctl.client.clone(), request.clone());
        async move {
            match ask_deploy(&client, "alpha", request.into()).await {
                Ok(m) => Some(m),
                Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders => None,
                Err(e) => panic!("deploy request: {e}"),
            }
        }
    })
    .await;
    let DeployReply::Queued { job } = DeployReply::decode(&reply.payload).unwrap() else {
        panic!("deploy refused: {reply:?}");
    };
    let queued = jobs.jobs(Default::default()).await.unwrap();
    assert_eq!(queued.len(), 1, "{queued:?}");
    assert_eq!((queued[0].id.0 as u64, &queued[0].agent), (job, &agent));

    let envelope = seal(b"rotated-secret", &controller_xkey, &hive_xkey.public_key()).unwrap();
    creds
        .put(
            credential_key(&alpha, &agent, &account),
            encode(&envelope).unwrap().into(),
        )
        .await
        .unwrap();
    ctl.client
        .publish(
            subjects.credential.clone(),
            encode(&CredentialNotice::new(agent.clone(), account.clone()))
                .unwrap()
                .into(),
        )
        .await
        .unwrap();
    wait_until(T, "the rotated credential on disk", || {
        let got = std::fs::read(&path).ok();
        async move { (got.as_deref() == Some(&b"rotated-secret"[..])).then_some(()) }
    })
    .await;

    trigger.trigger();
    wanted_task.await.unwrap();
    events.await.unwrap().unwrap();
    let alpha_key = &s.hive("alpha").public;
    assert!(
        !s.violations().iter().any(|l| l.contains(alpha_key)),
        "{:#?}",
        s.violations()
    );
}

#[tokio::test]
async fn a_hive_under_its_own_identity_converges_deploys_and_gets_credentials() {
    let hive_name = unique_name("iso");
    let s = SecuredNats::start_generated(&[&hive_name, "beta"]);
    let url = s.server.url();
    let _guard = ContainerGuard::new(&hive_name);
    let img = TestImage::busybox("iso-conv");
    let ctl = s.controller_conn().await;
    let [_, _, creds] = controller_buckets(&ctl).await;
    let swarm = Swarm {
        client: ctl.client.clone(),
        js: jetstream::new(ctl.client.clone()),
    };
    let controller_xkey = XKey::new();
    let extra = format!(
        "trusted_controller_xkeys = [{:?}]\n{}",
        controller_xkey.public_key(),
        s.hive(&hive_name).nats_toml(&url)
    );
    let hive = HiveProc::start(HiveSpec {
        name: Some(&hive_name),
        extra: &extra,
        ..Default::default()
    });

    // Converges on what the controller declares.
    let declaration = serde_json::json!({
        "schema": 1,
        "agents": { "web": {
            "image": img.reference,
            "command": ["/bin/sleep", "3600"],
            "credentials": ["smtp"],
        } },
    });
    let rev = swarm.declare(&hive_name, &declaration.to_string()).await;
    let status = swarm
        .converged(&hive_name, rev, Duration::from_secs(90))
        .await;
    assert_eq!(status["agents"]["web"]["observed"], "running", "{status}");
    assert!(container(&hive_name, "web").expect("the container").1);

    // Deploy requests: queued for a declared agent, refused with the reason
    // for one the declaration does not name.
    let name = HiveName::new(hive_name.clone()).unwrap();
    let subjects = HiveSubjects::new(&name);
    let ask = |agent: &str| {
        let request = encode(&DeployRequest::new(AgentName::new(agent).unwrap())).unwrap();
        let (client, hive) = (ctl.client.clone(), hive_name.clone());
        async move {
            let answer = ask_deploy(&client, &hive, request.into())
                .await
                .expect("a reply");
            DeployReply::decode(&answer.payload).unwrap()
        }
    };
    assert!(matches!(ask("web").await, DeployReply::Queued { .. }));
    match ask("ghost").await {
        DeployReply::Refused { error } => {
            assert!(error.contains("agent ghost is not declared"), "{error}")
        }
        other => panic!("an undeclared agent was queued: {other:?}"),
    }

    // A credential sealed to the xkey it publishes reaches the agent.
    let xkey = status["xkey"]
        .as_str()
        .expect("the hive's xkey")
        .to_string();
    let agent = AgentName::new("web").unwrap();
    let account = AccountName::new("smtp").unwrap();
    let envelope = seal(b"smtp-password", &controller_xkey, &xkey).unwrap();
    creds
        .put(
            credential_key(&name, &agent, &account),
            encode(&envelope).unwrap().into(),
        )
        .await
        .unwrap();
    ctl.client
        .publish(
            subjects.credential.clone(),
            encode(&CredentialNotice::new(agent.clone(), account.clone()))
                .unwrap()
                .into(),
        )
        .await
        .unwrap();
    let path = credential_path(&hive.state_dir.join("agents"), &agent, &account);
    wait_until(T, "the credential in the agent's state dir", || {
        let got = std::fs::read(&path).ok();
        async move { (got.as_deref() == Some(&b"smtp-password"[..])).then_some(()) }
    })
    .await;

    let key = &s.hive(&hive_name).public;
    assert!(
        !s.violations().iter().any(|l| l.contains(key)),
        "{:#?}",
        s.violations()
    );
}

/// A declaration that names `agent`'s credential `account`: what tells a
/// hive which of its keys to read at boot.
fn declaring(agent: &AgentName, account: &AccountName) -> swarm_queue_client::Declaration {
    let text = serde_json::json!({
        "schema": 1,
        "agents": { agent.as_str(): { "image": "local/x:1", "credentials": [account.as_str()] } }
    })
    .to_string();
    decode::<swarm_queue_client::Declaration>(text.as_bytes())
        .unwrap()
        .value
}
