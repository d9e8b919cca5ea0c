//! Events on the hive's one connection, over a real nats-server and dockerd:
//! deploy requests with replies, knowledge pulls from a local bare repo,
//! sealed credentials delivered on notice and again at boot, and the metrics
//! taken from the same snapshot as the status.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use hive::git::git_for_tests as git;
use hyperhive_tests::docker::{ContainerGuard, TestImage};
use hyperhive_tests::hive::{warning_keys, HiveProc, HiveSpec};
use hyperhive_tests::kv::{container, Swarm};
use hyperhive_tests::{unique_name, wait_until, NatsServer};
use serde_json::json;
use swarm_queue_client::credentials::{seal, XKey};
use swarm_queue_client::subjects::{credential_key, HiveSubjects, KNOWLEDGE};
use swarm_queue_client::{
    AccountName, AgentName, CredentialNotice, DeployReply, DeployRequest, HiveName,
};

const T: Duration = Duration::from_secs(90);

fn decl(image: &str, agents: &[&str]) -> String {
    let agents: serde_json::Map<String, serde_json::Value> = agents
        .iter()
        .map(|a| {
            (
                a.to_string(),
                json!({ "image": image, "command": ["/bin/sleep", "3600"] }),
            )
        })
        .collect();
    json!({ "schema": 1, "agents": agents }).to_string()
}

async fn request(swarm: &Swarm, subject: &str, payload: Vec<u8>) -> DeployReply {
    let msg = swarm
        .client
        .request(subject.to_string(), payload.into())
        .await
        .expect("the hive answers");
    DeployReply::decode(&msg.payload).expect("a deploy reply")
}

#[tokio::test]
async fn deploy_requests_are_answered_with_the_job_or_the_reason() {
    let nats = NatsServer::start();
    let url = nats.url();
    let hive = unique_name("ev-dep");
    let img = TestImage::busybox("ev-dep");
    let _guard = ContainerGuard::new(&hive);
    let swarm = Swarm::connect(&url).await;
    let h = HiveProc::start(HiveSpec {
        name: Some(&hive),
        nats_url: Some(&url),
        ..Default::default()
    });
    let rev = swarm.declare(&hive, &decl(&img.reference, &["app"])).await;
    swarm.converged(&hive, rev, T).await;
    let (first_id, _, _) = container(&hive, "app").unwrap();
    let subject = HiveSubjects::new(&HiveName::new(&hive).unwrap()).deploy;

    // A declared agent that exists: a relocking rebuild, a new container.
    let req =
        swarm_queue_client::encode(&DeployRequest::new(AgentName::new("app").unwrap())).unwrap();
    let job = match request(&swarm, &subject, req).await {
        DeployReply::Queued { job } => job,
        other => panic!("deploy refused: {other:?}"),
    };
    let api = h.job_api().await;
    let done = api.done(job as i64, T).await;
    assert_eq!(done["kind"], "rebuild", "{done}");
    let (second_id, running, _) = container(&hive, "app").unwrap();
    assert!(running);
    assert_ne!(first_id, second_id);

    // An undeclared agent: refused, naming it.
    let req =
        swarm_queue_client::encode(&DeployRequest::new(AgentName::new("ghost").unwrap())).unwrap();
    match request(&swarm, &subject, req).await {
        DeployReply::Refused { error } => {
            assert!(
                error.contains("ghost") && error.contains("not declared"),
                "{error}"
            )
        }
        other => panic!("undeclared agent deployed: {other:?}"),
    }
    // Garbage: refused with the reason, the hive keeps running.
    match request(
        &swarm,
        &subject,
        b"{\"schema\":1,\"agent\":\"Bad.Name\"}".to_vec(),
    )
    .await
    {
        DeployReply::Refused { error } => assert!(error.contains("Bad.Name"), "{error}"),
        other => panic!("garbage accepted: {other:?}"),
    }
    let (code, _) = h.ready().await;
    assert_eq!(code, 200);
    assert!(h
        .daemon
        .log()
        .contains("undecodable deploy request ignored"));
}

#[tokio::test]
async fn knowledge_event_pulls_the_repo_which_agents_see_read_only() {
    let tmp = tempfile::tempdir().unwrap();
    let bare = tmp.path().join("knowledge.git");
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    git(
        tmp.path(),
        &[
            "init",
            "-q",
            "--bare",
            "--initial-branch=main",
            "knowledge.git",
        ],
    );
    git(&work, &["init", "-q", "-b", "main"]);
    std::fs::write(work.join("facts.md"), "v1").unwrap();
    git(&work, &["add", "."]);
    git(&work, &["commit", "-qm", "v1"]);
    git(&work, &["push", "-q", bare.to_str().unwrap(), "main"]);

    let nats = NatsServer::start();
    let url = nats.url();
    let hive = unique_name("ev-kn");
    let img = TestImage::busybox("ev-kn");
    let _guard = ContainerGuard::new(&hive);
    let swarm = Swarm::connect(&url).await;
    let extra = format!("knowledge_repo = {:?}\n", bare.display().to_string());
    let h = HiveProc::start(HiveSpec {
        name: Some(&hive),
        nats_url: Some(&url),
        extra: &extra,
        ..Default::default()
    });
    let checkout = h.state_dir.join("knowledge/facts.md");
    wait_until(T, "the first clone", || async {
        (std::fs::read_to_string(&checkout).ok()? == "v1").then_some(())
    })
    .await;

    let rev = swarm
        .declare(&hive, &decl(&img.reference, &["reader"]))
        .await;
    swarm.converged(&hive, rev, T).await;
    let out = hyperhive_tests::docker::docker(&[
        "exec",
        &format!("hyperhive.{hive}.reader"),
        "/bin/cat",
        "/knowledge/facts.md",
    ]);
    assert_eq!(out, "v1");
    let rw = hyperhive_tests::docker::docker(&[
        "inspect",
        "--format",
        "{{range .Mounts}}{{if eq .Destination \"/knowledge\"}}{{.RW}}{{end}}{{end}}",
        &format!("hyperhive.{hive}.reader"),
    ]);
    assert_eq!(rw, "false", "knowledge must be mounted read-only");

    std::fs::write(work.join("facts.md"), "v2").unwrap();
    git(&work, &["commit", "-qam", "v2"]);
    git(&work, &["push", "-q", bare.to_str().unwrap(), "main"]);
    swarm.client.publish(KNOWLEDGE, "".into()).await.unwrap();
    swarm.client.flush().await.unwrap();
    wait_until(T, "the pull after the knowledge event", || async {
        (std::fs::read_to_string(&checkout).ok()? == "v2").then_some(())
    })
    .await;
    let out = hyperhive_tests::docker::docker(&[
        "exec",
        &format!("hyperhive.{hive}.reader"),
        "/bin/cat",
        "/knowledge/facts.md",
    ]);
    assert_eq!(out, "v2", "the agent sees the new checkout");
}

#[tokio::test]
async fn credentials_are_delivered_sealed_on_notice_and_again_at_boot() {
    let nats = NatsServer::start();
    let url = nats.url();
    let hive = unique_name("ev-cred");
    let controller = XKey::new();
    let stranger = XKey::new();
    let extra = format!(
        "trusted_controller_xkeys = [{:?}]\n",
        controller.public_key()
    );
    let mut h = HiveProc::start(HiveSpec {
        name: Some(&hive),
        nats_url: Some(&url),
        extra: &extra,
        ..Default::default()
    });
    let swarm = Swarm::connect(&url).await;
    let (_, status) = wait_until(T, "the hive's status", || swarm.status(&hive)).await;
    let hive_xkey = status["xkey"].as_str().unwrap().to_string();
    let creds = swarm.bucket("hyperhive-credentials").await;
    let hive_name = HiveName::new(&hive).unwrap();
    let agent = AgentName::new("mailer").unwrap();
    let account = AccountName::new("smtp").unwrap();
    let key = credential_key(&hive_name, &agent, &account);
    let secret = format!("s3cret-{}", std::process::id());

    let env = seal(secret.as_bytes(), &controller, &hive_xkey).unwrap();
    let bytes = swarm_queue_client::encode(&env).unwrap();
    creds.put(&key, bytes.into()).await.unwrap();
    // Sealed at rest: the raw value does not hold the secret.
    let raw = creds.get(&key).await.unwrap().unwrap();
    assert!(!String::from_utf8_lossy(&raw).contains(&secret));
    assert!(!String::from_utf8_lossy(&raw).contains(&hex_of(&secret)));

    let subject = HiveSubjects::new(&hive_name).credential;
    let notice =
        swarm_queue_client::encode(&CredentialNotice::new(agent.clone(), account.clone())).unwrap();
    swarm
        .client
        .publish(subject.clone(), notice.clone().into())
        .await
        .unwrap();
    swarm.client.flush().await.unwrap();
    let path = h.state_dir.join("agents/mailer/credentials/smtp");
    wait_until(T, "the credential file", || async {
        (std::fs::read_to_string(&path).ok()? == secret).then_some(())
    })
    .await;
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "credential file mode {mode:o}");

    // Gone from disk while the hive is down: delivered again at boot. The
    // hive cannot list keys; its declaration names the accounts to read.
    let img = TestImage::busybox("ev-cred");
    let _guard = ContainerGuard::new(&hive);
    let declared = swarm
        .declare(
            &hive,
            &json!({ "schema": 1, "agents": { "mailer": {
                "image": img.reference, "command": ["/bin/sleep", "3600"], "credentials": ["smtp"],
            } } })
            .to_string(),
        )
        .await;
    swarm.converged(&hive, declared, T).await;
    h.daemon.kill();
    std::fs::remove_file(&path).unwrap();
    h.kill_and_restart(&[]);
    wait_until(T, "the credential after a restart", || async {
        (std::fs::read_to_string(&path).ok()? == secret).then_some(())
    })
    .await;

    // Sealed by someone the hive does not trust: refused, warned, not written.
    let planted = seal(b"planted", &stranger, &hive_xkey).unwrap();
    let key2 = credential_key(&hive_name, &agent, &AccountName::new("imap").unwrap());
    creds
        .put(&key2, swarm_queue_client::encode(&planted).unwrap().into())
        .await
        .unwrap();
    let notice2 = swarm_queue_client::encode(&CredentialNotice::new(
        agent,
        AccountName::new("imap").unwrap(),
    ))
    .unwrap();
    swarm.client.publish(subject, notice2.into()).await.unwrap();
    swarm.client.flush().await.unwrap();
    let r = wait_until(T, "the untrusted-sender warning", || async {
        let (_, r) = h.ready().await;
        warning_keys(&r)
            .contains(&"credentials".to_string())
            .then_some(r)
    })
    .await;
    assert!(
        r["warnings"]
            .to_string()
            .contains("not a trusted controller key"),
        "{r}"
    );
    assert!(!h.state_dir.join("agents/mailer/credentials/imap").exists());

    // No log line carries the secret.
    let log = h.daemon.log();
    assert!(!log.contains(&secret), "the hive log contains the secret");
    assert!(!log.contains(&hex_of(&secret)));
    assert!(!nats.log().contains(&secret));
    // The hive goes before `_guard` and `img`, which were made after it and
    // so would drop first: a live hive re-creates the container the guard
    // removed (one run of the suite was left with it).
    drop(h);
}

fn hex_of(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn metrics_agree_with_the_published_status() {
    let nats = NatsServer::start();
    let url = nats.url();
    let hive = unique_name("ev-met");
    let img = TestImage::busybox("ev-met");
    let _guard = ContainerGuard::new(&hive);
    let swarm = Swarm::connect(&url).await;
    let h = HiveProc::start(HiveSpec {
        name: Some(&hive),
        nats_url: Some(&url),
        ..Default::default()
    });
    let rev = swarm
        .declare(&hive, &decl(&img.reference, &["m1", "m2"]))
        .await;
    swarm.converged(&hive, rev, T).await;
    let api = h.api().await;
    let metrics = reqwest::get(format!("{api}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let (_, ready) = h.ready().await;
    assert_eq!(ready["converged_revision"], rev);
    for line in [
        format!("hyperhive_converged_revision {rev}"),
        "hyperhive_agents{observed=\"running\"} 2".to_string(),
        "hyperhive_hive_ready 1".to_string(),
        "hyperhive_job_outcomes_total{kind=\"first_deploy\",state=\"done\"} 2".to_string(),
        "hyperhive_status_publish_failures_total 0".to_string(),
    ] {
        assert!(metrics.contains(&line), "missing {line:?} in:\n{metrics}");
    }
    assert!(metrics.contains("hyperhive_status_last_publish_age_seconds "));
}
