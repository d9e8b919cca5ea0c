//! Bad input at every boundary, as tables of cases. Each case gets a clear
//! error or warning that names the bad value, and nothing is lost: the
//! next good input still goes through and what was valid before stays.
//!
//! Boundaries:
//! - the payload decoders (every payload the wire carries);
//! - the hive's config file, through the real `hive --check-config`;
//! - build contexts (`..`, a symlink out of its root, the state dir, a
//!   directory outside every root, one over the size cap) and operator API
//!   requests (wrong method, content type or origin), through a running
//!   `hive` over the real dockerd;
//! - the nats-server (oversized values and messages);
//! - the hive's deploy and credential subjects and its wanted key, through
//!   the hive's own event listener and wanted task, connected as the hive
//!   to a server with the generated per-hive permissions.
//!
//! The subjects and the key are tried twice: through a running `hive`
//! process (the real deploy function, so a deploy for an undeclared agent
//! is refused by the daemon itself; readiness warnings read from
//! `/health/ready`), and through the hive's tasks run in-process, where the
//! warnings and logs can be read one case at a time.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use hive::credentials::{credential_path, Credentials, Deliverer, DelivererParts};
use hive::deploy::Deployer;
use hive::events::EventDeps;
use hive::readiness::{keys, Health};
use hive::wanted::{WantedDeps, WantedRx};
use hyperhive_tests::hive::{HiveProc, HiveSpec};
use hyperhive_tests::identity::SecuredNats;
use hyperhive_tests::trace_log::{in_process_log, in_process_log_text};
use hyperhive_tests::{hive_bin, wait_until};
use swarm_queue_client::credentials::{seal, CredentialEnvelope, XKey};
use swarm_queue_client::limits::{MAX_VALUE_BYTES, SERVER_MAX_PAYLOAD};
use swarm_queue_client::subjects::{credential_key, HiveSubjects};
use swarm_queue_client::{
    decode, encode, encode_pretty, open_or_create, AccountName, AgentName, AgentSpec, Bucket,
    BucketSettings, Connection, CredentialNotice, Declaration, DecodeError, DeployReply,
    DeployRequest, HiveName, Payload, Readiness,
};

const T: Duration = Duration::from_secs(30);

/// The bad names every boundary that takes a name is tried with.
const BAD_NAMES: &[(&str, &str)] = &[
    ("mail.bot", "'.'"),
    ("mail*", "wildcard"),
    ("mail>", "wildcard"),
    ("mail bot", "white space"),
    ("zürich", "non-ASCII"),
];

fn oversized_json(schema: u32) -> Vec<u8> {
    let pad = "x".repeat(MAX_VALUE_BYTES);
    format!(r#"{{"schema":{schema},"agent":"a","account":"b","agents":{{}},"pad":"{pad}"}}"#)
        .into_bytes()
}

fn valid_declaration(image: &str) -> Vec<u8> {
    let mut agents = BTreeMap::new();
    agents.insert(
        AgentName::new("mail-bot").unwrap(),
        AgentSpec {
            image: Some(image.to_string()),
            ..Default::default()
        },
    );
    encode_pretty(&Declaration::new(agents)).unwrap()
}

fn decode_err<T: Payload + std::fmt::Debug>(bytes: &[u8]) -> String {
    match decode::<T>(bytes) {
        Ok(v) => panic!("{} accepted bad input: {v:?}", T::WHAT),
        Err(e) => e.to_string(),
    }
}

#[test]
fn every_payload_decoder_refuses_bad_input_by_name() {
    let truncated_decl = valid_declaration("local/a:1");
    let truncated_decl = &truncated_decl[..truncated_decl.len() / 2];
    let mut cases: Vec<(String, String, Vec<&str>)> = vec![
        // (case, error, what the error must say)
        (
            "oversized declaration".into(),
            decode_err::<Declaration>(&oversized_json(1)),
            vec!["declaration", "over the 524288-byte limit"],
        ),
        (
            "oversized deploy request".into(),
            decode_err::<DeployRequest>(&oversized_json(1)),
            vec!["deploy request", "over the"],
        ),
        (
            "oversized credential notice".into(),
            decode_err::<CredentialNotice>(&oversized_json(1)),
            vec!["credential notice", "over the"],
        ),
        (
            "oversized deploy reply".into(),
            DeployReply::decode(&oversized_json(1))
                .unwrap_err()
                .to_string(),
            vec!["deploy reply", "over the"],
        ),
        (
            "truncated declaration".into(),
            decode_err::<Declaration>(truncated_decl),
            vec!["declaration is not valid", "EOF"],
        ),
        (
            "truncated readiness".into(),
            decode_err::<Readiness>(br#"{"schema":1,"hive":"alpha","ready":tr"#),
            vec!["readiness", "not valid"],
        ),
        (
            "truncated envelope".into(),
            decode_err::<CredentialEnvelope>(br#"{"schema":1,"sender":"X"#),
            vec!["credential envelope", "EOF"],
        ),
        (
            "newer schema that does not fit".into(),
            decode_err::<Declaration>(br#"{"schema":2,"agents":["a"]}"#),
            vec!["schema 2, newer than schema 1"],
        ),
        (
            "schema 0".into(),
            decode_err::<DeployRequest>(br#"{"schema":0,"agent":"a"}"#),
            vec!["schema 0"],
        ),
        (
            "missing schema".into(),
            decode_err::<CredentialNotice>(br#"{"agent":"a","account":"b"}"#),
            vec!["missing field `schema`"],
        ),
        (
            "envelope from something that is not an xkey".into(),
            decode_err::<CredentialEnvelope>(br#"{"schema":1,"sender":"UABC","sealed":"00"}"#),
            vec!["not a public xkey"],
        ),
    ];
    for (bad, why) in BAD_NAMES {
        let json = serde_json::to_string(bad).unwrap();
        cases.push((
            format!("deploy request for agent {bad:?}"),
            decode_err::<DeployRequest>(format!(r#"{{"schema":1,"agent":{json}}}"#).as_bytes()),
            vec!["invalid agent name", why],
        ));
        cases.push((
            format!("credential notice for account {bad:?}"),
            decode_err::<CredentialNotice>(
                format!(r#"{{"schema":1,"agent":"a","account":{json}}}"#).as_bytes(),
            ),
            vec!["invalid credential account name", why],
        ));
        cases.push((
            format!("declaration of agent {bad:?}"),
            decode_err::<Declaration>(
                format!(r#"{{"schema":1,"agents":{{{json}:{{"image":"x"}}}}}}"#).as_bytes(),
            ),
            vec!["invalid agent name", why],
        ));
        cases.push((
            format!("readiness of hive {bad:?}"),
            decode_err::<Readiness>(
                format!(r#"{{"schema":1,"hive":{json},"ready":true,"state":"ok"}}"#).as_bytes(),
            ),
            vec!["invalid hive name", why],
        ));
    }
    let mut failures = Vec::new();
    for (case, error, wants) in &cases {
        for want in wants {
            if !error.contains(want) {
                failures.push(format!("{case}: {error:?} does not say {want:?}"));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");

    // A newer schema whose fields still fit is read, with a warning.
    let newer = decode::<DeployRequest>(br#"{"schema":2,"agent":"a","priority":9}"#).unwrap();
    assert!(
        newer.warnings[0].contains("newer than schema 1"),
        "{newer:?}"
    );
    // An oversized error is bounded by the limit, not by the input.
    assert!(matches!(
        decode::<Declaration>(&oversized_json(1)),
        Err(DecodeError::TooLarge { .. })
    ));
}

#[test]
fn the_hive_config_refuses_bad_names_and_seed_files() {
    let dir = tempfile::tempdir().unwrap();
    let not_a_seed = dir.path().join("not-a-seed");
    std::fs::write(&not_a_seed, "SAsomething-that-is-not-a-user-seed\n").unwrap();
    let mut cases: Vec<(String, String, Vec<String>)> = BAD_NAMES
        .iter()
        .map(|(bad, why)| {
            (
                format!("name {bad:?}"),
                format!("name = {bad:?}\n"),
                vec![
                    format!("{bad:?}"),
                    why.to_string(),
                    "invalid hive name".into(),
                ],
            )
        })
        .collect();
    cases.push((
        "nkey seed file that holds no user seed".into(),
        format!(
            "name = \"alpha\"\n[nats]\nurl = \"nats://127.0.0.1:4222\"\nnkey_seed_file = {:?}\n",
            not_a_seed.display().to_string()
        ),
        vec!["nkey_seed_file".into(), "user seed".into()],
    ));
    let open_token = dir.path().join("open.token");
    std::fs::write(&open_token, "0123456789abcdef0123456789abcdef\n").unwrap();
    std::fs::set_permissions(&open_token, std::fs::Permissions::from_mode(0o640)).unwrap();
    cases.push((
        "API token file group can read".into(),
        format!("api_token_file = {:?}\n", open_token.display().to_string()),
        vec![format!(
            "api_token_file {} has mode 0640",
            open_token.display()
        )],
    ));
    cases.push((
        "relative build root".into(),
        "build_roots = [\"srv/ctx\"]\n".into(),
        vec!["build_roots: \"srv/ctx\" must be an absolute path".into()],
    ));
    cases.push((
        "a zero context cap".into(),
        "build_context_max_bytes = 0\n".into(),
        vec!["build_context_max_bytes = 0".into()],
    ));
    cases.push((
        "truncated config".into(),
        "name = \"alpha\"\n[nats\n".into(),
        vec!["hive.toml".into()],
    ));
    for (case, text, wants) in cases {
        let path = dir.path().join("hive.toml");
        std::fs::write(&path, &text).unwrap();
        let out = Command::new(hive_bin())
            .arg("--check-config")
            .arg(&path)
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(64), "{case}: {said}");
        for want in &wants {
            assert!(
                said.contains(want.as_str()),
                "{case}: {said:?} does not say {want:?}"
            );
        }
        assert!(
            !said.contains("SAsomething"),
            "{case}: the seed file was echoed: {said}"
        );
    }
}

/// Intervals past their upper bounds, in both configs: exit 64 naming the
/// field, so no `Instant + Duration` in the daemons can overflow; and an
/// `http_allowed_hosts` entry that is no plain host name.
#[test]
fn both_configs_refuse_intervals_past_their_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let huge = i64::MAX;
    let cases = [
        (
            hive_bin(),
            "publish_interval_secs = 3601\n".to_string(),
            "publish_interval_secs = 3601: it must be at most 3600",
        ),
        (
            hive_bin(),
            format!("reconcile_interval_secs = {huge}\n"),
            "reconcile_interval_secs",
        ),
        (
            hive_bin(),
            "orphan_grace_secs = 2592001\n".to_string(),
            "orphan_grace_secs = 2592001: it must be at most 2592000",
        ),
        (
            hyperhive_tests::controller_bin(),
            format!("stale_after_secs = {huge}\n[nats]\nurl = \"nats://127.0.0.1:4222\"\n"),
            "stale_after_secs = 9223372036854775807: it must be at most 604800",
        ),
        (
            hive_bin(),
            "http_allowed_hosts = [\"metrics.internal:9100\"]\n".to_string(),
            "http_allowed_hosts entry \"metrics.internal:9100\" is not a host name",
        ),
        (
            hyperhive_tests::controller_bin(),
            "http_allowed_hosts = [\"*.example\"]\n[nats]\nurl = \"nats://127.0.0.1:4222\"\n"
                .to_string(),
            "http_allowed_hosts entry \"*.example\" is not a host name",
        ),
    ];
    for (bin, text, want) in cases {
        let path = dir.path().join("config.toml");
        std::fs::write(&path, &text).unwrap();
        let out = Command::new(&bin)
            .arg("--check-config")
            .arg(&path)
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(64), "{text}: {said}");
        assert!(
            said.contains(want),
            "{text}: {said:?} does not say {want:?}"
        );
    }
}

/// The controller's connection, the hive's, and the three buckets.
struct Fixture {
    s: SecuredNats,
    ctl: Connection,
    hive: Connection,
    wanted: kv::Store,
    creds: kv::Store,
}

async fn fixture() -> Fixture {
    let s = SecuredNats::start_generated(&["alpha"]);
    let ctl = s.controller_conn().await;
    let js = jetstream::new(ctl.client.clone());
    let mut stores = Vec::new();
    for b in Bucket::ALL {
        stores.push(
            open_or_create(&js, b, &BucketSettings::default_for(b))
                .await
                .unwrap(),
        );
    }
    let hive = s.hive_conn("alpha").await;
    Fixture {
        ctl,
        hive,
        wanted: stores[1].clone(),
        creds: stores[2].clone(),
        s,
    }
}

#[tokio::test]
async fn the_server_refuses_oversized_values_and_keeps_the_old_one() {
    let f = fixture().await;
    let rev = f
        .wanted
        .put("alpha", valid_declaration("local/a:1").into())
        .await
        .unwrap();
    let too_big = vec![b'x'; MAX_VALUE_BYTES + 1];
    let err = f.wanted.put("alpha", too_big.into()).await.unwrap_err();
    assert!(err.to_string().to_lowercase().contains("maximum"), "{err}");
    let kept = f.wanted.entry("alpha").await.unwrap().unwrap();
    assert_eq!(kept.revision, rev);
    // Over the server's own limit, the client refuses to send it at all.
    let huge = vec![b'x'; SERVER_MAX_PAYLOAD + 1];
    let err = f
        .ctl
        .client
        .publish(
            HiveSubjects::new(&HiveName::new("alpha").unwrap()).deploy,
            huge.into(),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("payload"), "{err}");
    drop(f.hive);
}

fn warning(health: &Health, key: &str) -> Option<String> {
    health
        .snapshot()
        .readiness
        .warnings
        .iter()
        .find(|w| w.key == key)
        .map(|w| w.message.clone())
}

async fn deploy_reply(ctl: &Connection, subject: &str, payload: Vec<u8>) -> DeployReply {
    let answer = wait_until(T, "a deploy reply", || {
        let (client, subject, payload) = (ctl.client.clone(), subject.to_string(), payload.clone());
        async move {
            match client.request(subject, payload.into()).await {
                Ok(m) => Some(m),
                Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders => None,
                Err(e) => panic!("deploy request: {e}"),
            }
        }
    })
    .await;
    DeployReply::decode(&answer.payload).unwrap()
}

#[tokio::test]
async fn the_hive_warns_on_bad_events_and_declarations_and_loses_nothing() {
    in_process_log();
    let f = fixture().await;
    let alpha = HiveName::new("alpha").unwrap();
    let agent = AgentName::new("mail-bot").unwrap();
    let account = AccountName::new("smtp").unwrap();
    let state = tempfile::tempdir().unwrap();
    let health = Arc::new(Health::new(Some(alpha.clone()), None));
    let (trigger, shutdown) = hive::shutdown::channel();

    // The wanted task, with one valid declaration to start from.
    let good = f
        .wanted
        .put("alpha", valid_declaration("local/a:1").into())
        .await
        .unwrap();
    let (tx, rx) = tokio::sync::watch::channel(None);
    let wanted_task = tokio::spawn(hive::wanted::run(
        WantedDeps {
            nats: f.hive.clone(),
            hive: alpha.clone(),
            health: health.clone(),
            bucket: BucketSettings::default_for(Bucket::Wanted),
            state_dir: state.path().to_path_buf(),
            tx,
        },
        shutdown.clone(),
    ));
    let current = |rx: &WantedRx| rx.borrow().as_ref().map(|w| w.revision);
    wait_until(T, "the first declaration", || {
        let r = current(&rx);
        async move { (r == Some(good)).then_some(()) }
    })
    .await;

    // Bad declarations: each raises a warning naming its revision and why,
    // and the declaration in force stays.
    let mut wanted_cases: Vec<(String, Vec<u8>, &str)> = vec![
        (
            "truncated".into(),
            b"{\"schema\":1,\"agents\":{\"mail-bot\":".to_vec(),
            "EOF",
        ),
        (
            "newer schema that does not fit".into(),
            br#"{"schema":3,"agents":[]}"#.to_vec(),
            "schema 3",
        ),
        (
            "no agents field".into(),
            br#"{"schema":1}"#.to_vec(),
            "agents",
        ),
    ];
    for (bad, why) in BAD_NAMES {
        let json = serde_json::to_string(bad).unwrap();
        wanted_cases.push((
            format!("agent {bad:?}"),
            format!(r#"{{"schema":1,"agents":{{{json}:{{"image":"x"}}}}}}"#).into_bytes(),
            why,
        ));
    }
    for (case, bytes, why) in &wanted_cases {
        let rev = f.wanted.put("alpha", bytes.clone().into()).await.unwrap();
        let message = wait_until(T, "the wanted warning", || {
            let w =
                warning(&health, keys::WANTED).filter(|m| m.contains(&format!("revision {rev}")));
            async move { w }
        })
        .await;
        assert!(
            message.contains(why) && message.contains(&format!("revision {good}")),
            "{case}: {message}"
        );
        assert_eq!(
            current(&rx),
            Some(good),
            "{case}: the valid declaration must stay"
        );
    }
    let fixed = f
        .wanted
        .put("alpha", valid_declaration("local/a:2").into())
        .await
        .unwrap();
    wait_until(T, "the fixed declaration", || {
        let r = current(&rx);
        let clear = warning(&health, keys::WANTED).is_none();
        async move { (r == Some(fixed) && clear).then_some(()) }
    })
    .await;

    // The event listener, with the daemon's own deployer over a job store in
    // the temp dir: it refuses agents the declaration in force does not name.
    let deploy = Deployer {
        store: hive::jobs::JobStore::open(&state.path().join("hive.db")).unwrap(),
        wake: Arc::default(),
        wanted: rx.clone(),
        hive: alpha.clone(),
    };
    let controller_xkey = XKey::new();
    let hive_xkey = Arc::new(XKey::new());
    let agents_dir = state.path().join("agents");
    let events = tokio::spawn(hive::events::run(
        EventDeps {
            client: f.hive.client.clone(),
            hive: alpha.clone(),
            health: health.clone(),
            knowledge: None,
            credentials: Credentials::open(Deliverer::new(DelivererParts {
                client: f.hive.client.clone(),
                hive: alpha.clone(),
                xkey: hive_xkey.clone(),
                trusted: Arc::new(vec![controller_xkey.public_key()]),
                agents_dir: agents_dir.clone(),
            })),
            deploy,
        },
        shutdown.clone(),
    ));
    let subjects = HiveSubjects::new(&alpha);

    // Deploy subject: every bad request is answered with why.
    let mut deploy_cases: Vec<(String, Vec<u8>, String)> = vec![
        (
            "oversized".into(),
            oversized_json(1),
            "over the 524288-byte limit".into(),
        ),
        (
            "truncated".into(),
            br#"{"schema":1,"agent":"mail"#.to_vec(),
            "EOF".into(),
        ),
        (
            "newer schema that does not fit".into(),
            br#"{"schema":2,"agent":7}"#.to_vec(),
            "schema 2".into(),
        ),
        (
            "undeclared agent".into(),
            encode(&DeployRequest::new(AgentName::new("ghost").unwrap())).unwrap(),
            "agent ghost is not declared".into(),
        ),
    ];
    for (bad, why) in BAD_NAMES {
        let json = serde_json::to_string(bad).unwrap();
        deploy_cases.push((
            format!("agent {bad:?}"),
            format!(r#"{{"schema":1,"agent":{json}}}"#).into_bytes(),
            why.to_string(),
        ));
    }
    for (case, bytes, why) in &deploy_cases {
        match deploy_reply(&f.ctl, &subjects.deploy, bytes.clone()).await {
            DeployReply::Refused { error } => {
                assert!(error.contains(why.as_str()), "{case}: {error}")
            }
            other => panic!("{case}: accepted: {other:?}"),
        }
    }
    let ok = deploy_reply(
        &f.ctl,
        &subjects.deploy,
        encode(&DeployRequest::new(agent.clone())).unwrap(),
    )
    .await;
    assert_eq!(
        ok,
        DeployReply::Queued { job: 1 },
        "a good request after the bad ones"
    );

    // Credential subject: undecodable notices are logged and ignored; a
    // notice for a missing key raises a warning naming the key.
    let mut notice_cases: Vec<(String, Vec<u8>)> = vec![
        ("oversized".into(), oversized_json(1)),
        (
            "truncated".into(),
            br#"{"schema":1,"agent":"mail-bot","acc"#.to_vec(),
        ),
        (
            "newer schema that does not fit".into(),
            br#"{"schema":2,"agent":[]}"#.to_vec(),
        ),
    ];
    for (bad, _) in BAD_NAMES {
        let json = serde_json::to_string(bad).unwrap();
        notice_cases.push((
            format!("account {bad:?}"),
            format!(r#"{{"schema":1,"agent":"mail-bot","account":{json}}}"#).into_bytes(),
        ));
    }
    for (_, bytes) in &notice_cases {
        f.ctl
            .client
            .publish(subjects.credential.clone(), bytes.clone().into())
            .await
            .unwrap();
    }
    f.ctl
        .client
        .publish(
            subjects.credential.clone(),
            encode(&CredentialNotice::new(agent.clone(), account.clone()))
                .unwrap()
                .into(),
        )
        .await
        .unwrap();
    f.ctl.client.flush().await.unwrap();
    let missing = wait_until(T, "the missing-credential warning", || {
        let w = warning(&health, keys::CREDENTIALS);
        async move { w }
    })
    .await;
    assert!(
        missing.contains("alpha.mail-bot.smtp")
            && missing.contains("not in the credentials bucket"),
        "{missing}"
    );
    let log = in_process_log_text();
    let ignored = log.matches("undecodable credential notice ignored").count();
    assert!(
        ignored >= notice_cases.len(),
        "{ignored} of {} logged:\n{log}",
        notice_cases.len()
    );
    for (bad, _) in BAD_NAMES {
        assert!(
            log.contains(&format!("{bad:?}").replace('"', "\\\"")) || log.contains(bad),
            "{bad} not named in the log"
        );
    }

    // Nothing lost: the key appears, a notice delivers it, the warning clears.
    let envelope = seal(b"s3cret", &controller_xkey, &hive_xkey.public_key()).unwrap();
    f.creds
        .put(
            credential_key(&alpha, &agent, &account),
            encode(&envelope).unwrap().into(),
        )
        .await
        .unwrap();
    f.ctl
        .client
        .publish(
            subjects.credential.clone(),
            encode(&CredentialNotice::new(agent.clone(), account.clone()))
                .unwrap()
                .into(),
        )
        .await
        .unwrap();
    let path = credential_path(&agents_dir, &agent, &account);
    wait_until(
        T,
        "the credential delivered and the warning cleared",
        || {
            let done = std::fs::read(&path).ok().as_deref() == Some(&b"s3cret"[..])
                && warning(&health, keys::CREDENTIALS).is_none();
            async move { done.then_some(()) }
        },
    )
    .await;

    // Both tasks are still running until asked to stop.
    assert!(!wanted_task.is_finished() && !events.is_finished());
    trigger.trigger();
    wanted_task.await.unwrap();
    events.await.unwrap().unwrap();
    let alpha_key = &f.s.hive("alpha").public;
    assert!(
        !f.s.violations().iter().any(|l| l.contains(alpha_key)),
        "{:#?}",
        f.s.violations()
    );
}

#[tokio::test]
async fn a_running_hive_refuses_bad_input_by_name_and_keeps_running() {
    let f = fixture().await;
    let url = f.s.server.url();
    let nats = f.s.hive("alpha").nats_toml(&url);
    let mut hive = HiveProc::start(HiveSpec {
        name: Some("alpha"),
        extra: &nats,
        ..Default::default()
    });
    let alpha = HiveName::new("alpha").unwrap();
    let subjects = HiveSubjects::new(&alpha);
    let status = open_or_create(
        &jetstream::new(f.ctl.client.clone()),
        Bucket::Status,
        &BucketSettings::default(),
    )
    .await
    .unwrap();
    let converged = |rev: u64| {
        let status = status.clone();
        async move {
            let e = status.entry("alpha").await.ok().flatten()?;
            let r = decode::<Readiness>(&e.value).ok()?.value;
            (r.converged_revision == Some(rev)).then_some(r)
        }
    };
    let empty = f
        .wanted
        .put("alpha", br#"{"schema":1,"agents":{}}"#.to_vec().into())
        .await
        .unwrap();
    wait_until(T, "the empty declaration applied", || converged(empty)).await;

    // Deploy subject.
    let mut cases: Vec<(String, Vec<u8>, String)> = vec![
        (
            "undeclared agent".into(),
            encode(&DeployRequest::new(AgentName::new("ghost").unwrap())).unwrap(),
            "agent ghost is not declared on hive alpha".into(),
        ),
        (
            "oversized".into(),
            oversized_json(1),
            "over the 524288-byte limit".into(),
        ),
        (
            "truncated".into(),
            br#"{"schema":1,"agent":"gh"#.to_vec(),
            "EOF".into(),
        ),
        (
            "newer schema that does not fit".into(),
            br#"{"schema":2,"agent":[1]}"#.to_vec(),
            "schema 2".into(),
        ),
    ];
    for (bad, why) in BAD_NAMES {
        let json = serde_json::to_string(bad).unwrap();
        cases.push((
            format!("agent {bad:?}"),
            format!(r#"{{"schema":1,"agent":{json}}}"#).into_bytes(),
            why.to_string(),
        ));
    }
    for (case, bytes, why) in &cases {
        match deploy_reply(&f.ctl, &subjects.deploy, bytes.clone()).await {
            DeployReply::Refused { error } => {
                assert!(error.contains(why.as_str()), "{case}: {error}")
            }
            other => panic!("{case}: accepted: {other:?}"),
        }
    }

    // Credential subject: a notice for a key that is not there.
    f.ctl
        .client
        .publish(
            subjects.credential.clone(),
            encode(&CredentialNotice::new(
                AgentName::new("mail-bot").unwrap(),
                AccountName::new("smtp").unwrap(),
            ))
            .unwrap()
            .into(),
        )
        .await
        .unwrap();
    let (_, ready) = wait_until(T, "the missing-credential warning", || {
        let hive = &hive;
        async move {
            let (code, body) = hive.ready().await;
            body["warnings"]
                .to_string()
                .contains("alpha.mail-bot.smtp is not in the credentials bucket")
                .then_some((code, body))
        }
    })
    .await;
    assert!(
        ready["warnings"].to_string().contains("credential"),
        "{ready}"
    );

    // Wanted key: a declaration naming a bad agent is refused by revision;
    // the one in force stays.
    let bad = f
        .wanted
        .put(
            "alpha",
            br#"{"schema":1,"agents":{"mail.bot":{"image":"x"}}}"#
                .to_vec()
                .into(),
        )
        .await
        .unwrap();
    let (_, ready) = wait_until(T, "the wanted warning", || {
        let hive = &hive;
        async move {
            let (code, body) = hive.ready().await;
            body["warnings"]
                .to_string()
                .contains(&format!("revision {bad} is not valid"))
                .then_some((code, body))
        }
    })
    .await;
    assert!(
        ready["warnings"].to_string().contains("mail.bot"),
        "{ready}"
    );
    assert_eq!(ready["converged_revision"], empty, "{ready}");

    // Still running, and the next good declaration is taken.
    assert!(hive.daemon.is_running());
    let good = f
        .wanted
        .put("alpha", br#"{"schema":1,"agents":{}}"#.to_vec().into())
        .await
        .unwrap();
    wait_until(T, "the next good declaration", || converged(good)).await;
    let alpha_key = &f.s.hive("alpha").public;
    assert!(
        !f.s.violations().iter().any(|l| l.contains(alpha_key)),
        "{:#?}",
        f.s.violations()
    );
}

/// Hostile build contexts and API requests, against a running hive over
/// the real dockerd: each is refused with the path (or request) and the
/// rule named, nothing is built or queued, and a good deploy still works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_build_contexts_and_api_requests_are_refused_by_name() {
    use hyperhive_tests::docker::{ContainerGuard, TestImage};
    let name = hyperhive_tests::unique_name("bad-ctx");
    // Dropped in reverse: the hive, its containers, whatever it built (a
    // hostile context that was wrongly built included), the base image.
    let base = TestImage::busybox("bad-ctx");
    let _built = BuiltImages(name.clone());
    let _containers = ContainerGuard::new(&name);
    let tmp = tempfile::Builder::new()
        .prefix("hhtest-ctx-")
        .tempdir()
        .unwrap();
    let root = tmp.path().join("root");
    let secret = tmp.path().join("secret");
    for d in [root.join("ok"), root.join("big"), secret.clone()] {
        std::fs::create_dir_all(&d).unwrap();
    }
    let dockerfile = format!("FROM {}\nCOPY . /ctx\n", base.reference);
    for d in [root.join("ok"), root.join("big"), secret.clone()] {
        std::fs::write(d.join("Dockerfile"), &dockerfile).unwrap();
    }
    std::fs::write(root.join("big/blob"), vec![0u8; 256 * 1024]).unwrap();
    std::os::unix::fs::symlink(&secret, root.join("escape")).unwrap();
    let token = tmp.path().join("api.token");
    std::fs::write(&token, "0123456789abcdef0123456789abcdef\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let extra = format!(
        "build_roots = [{:?}]\nbuild_context_max_bytes = 131072\napi_token_file = {:?}\n",
        root.display().to_string(),
        token.display().to_string()
    );
    let hive = HiveProc::start(HiveSpec {
        name: Some(&name),
        extra: &extra,
        ..Default::default()
    });
    let api = hive.job_api().await;
    let state = hive.state_dir.display().to_string();
    let r = root.display().to_string();
    let cases = [
        (format!("{r}/ok/../../secret"), "must not contain '..'"),
        (format!("{r}/escape"), "a symlink must not leave its root"),
        (state.clone(), "is or contains the hive's state dir"),
        (
            format!("{state}/agents"),
            "is or contains the hive's state dir",
        ),
        (
            hive.state_dir.parent().unwrap().display().to_string(),
            "is or contains the hive's state dir",
        ),
        (secret.display().to_string(), "outside every allowed root"),
        (
            format!("{r}/big"),
            "larger than build_context_max_bytes = 131072 bytes",
        ),
        (
            format!("file://{}", secret.display()),
            "outside every allowed root",
        ),
    ];
    for (i, (context, rule)) in cases.iter().enumerate() {
        let agent = format!("c{i}");
        let git_ref = context.starts_with("file://").then_some("main");
        let spec = serde_json::json!({
            "build": { "context": context, "ref": git_ref },
        });
        let job = api.deploy(&agent, spec).await;
        let failed = api.finished(job, T).await;
        assert_eq!(failed["state"], "failed", "{context}: {failed:#}");
        let error = failed["error"].as_str().unwrap_or_default();
        let shown = context.trim_start_matches("file://");
        assert!(error.contains(shown), "{context}: {error}");
        assert!(error.contains(rule), "{context}: {error}");
    }
    let built = hyperhive_tests::docker::docker(&[
        "images",
        "-q",
        "--filter",
        &format!("reference=hyperhive-build/{name}/*"),
    ]);
    assert!(built.trim().is_empty(), "an image was built: {built}");

    // The good context in the same root still builds.
    let job = api
        .deploy(
            "good",
            serde_json::json!({ "build": { "context": format!("{r}/ok") } }),
        )
        .await;
    api.done(job, T).await;
    assert!(built_tag(&api, "good")
        .await
        .starts_with("hyperhive-build/"));

    // API requests with the wrong method, content type or origin: refused
    // with a status that says which, and nothing is queued.
    let before = api.get("/api/v1/jobs?all=true").await.1["jobs"]
        .as_array()
        .unwrap()
        .len();
    let tcp = hive.api().await;
    let bearer = "Bearer 0123456789abcdef0123456789abcdef";
    let http = reqwest::Client::new();
    let deploy = format!("{tcp}/api/v1/agents/x/deploy");
    let requests = [
        (
            "GET on a verb",
            http.get(&deploy).header("Authorization", bearer),
            405,
        ),
        (
            "PUT on a verb",
            http.put(&deploy)
                .header("Authorization", bearer)
                .header("Content-Type", "application/json"),
            405,
        ),
        (
            "DELETE on a verb",
            http.delete(&deploy).header("Authorization", bearer),
            405,
        ),
        (
            "POST on a listing",
            http.post(format!("{tcp}/api/v1/agents"))
                .header("Authorization", bearer)
                .header("Content-Type", "application/json"),
            405,
        ),
        (
            "text/plain",
            http.post(&deploy)
                .header("Authorization", bearer)
                .header("Content-Type", "text/plain"),
            415,
        ),
        (
            "form",
            http.post(&deploy)
                .header("Authorization", bearer)
                .header("Content-Type", "application/x-www-form-urlencoded"),
            415,
        ),
        (
            "Origin",
            http.post(&deploy)
                .header("Authorization", bearer)
                .header("Content-Type", "application/json")
                .header("Origin", "null"),
            403,
        ),
        (
            "no token",
            http.post(&deploy)
                .header("Content-Type", "application/json"),
            401,
        ),
        (
            "POST on a health path",
            http.post(format!("{tcp}/health/ready")),
            405,
        ),
        (
            "unknown path",
            http.post(format!("{tcp}/api/v2/agents/x/deploy")),
            404,
        ),
    ];
    for (what, req, want) in requests {
        let resp = req.body("{}").send().await.unwrap();
        assert_eq!(resp.status().as_u16(), want, "{what}");
    }
    let after = api.get("/api/v1/jobs?all=true").await.1["jobs"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(after, before, "a refused request queued a job");
}

/// Removes every image a hive named `.0` built, on drop.
struct BuiltImages(String);

impl Drop for BuiltImages {
    fn drop(&mut self) {
        let filter = format!("reference=hyperhive-build/{}/*", self.0);
        let ids = Command::new("docker")
            .args(["images", "-q", "--filter", &filter])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
            .unwrap_or_default();
        for id in ids.split_whitespace() {
            let _ = Command::new("docker").args(["rmi", "-f", id]).output();
        }
    }
}

/// The image tag the hive built for `agent`.
async fn built_tag(api: &hyperhive_tests::jobs::JobApi, agent: &str) -> String {
    let (_, agents) = api.get("/api/v1/agents").await;
    agents["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["agent"] == agent)
        .and_then(|a| a["image"].as_str())
        .unwrap_or_default()
        .to_string()
}
