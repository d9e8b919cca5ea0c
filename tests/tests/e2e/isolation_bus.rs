//! The bus, against a real nats-server with the generated nkey
//! authorization, tried as hive `alpha`:
//!
//! - whatever it publishes to its own status key, with any header
//!   JetStream honours, no other key of any bucket changes;
//! - it cannot learn another hive's key names in any bucket;
//! - a bucket made with unsafe settings is named by
//!   `swarm-controller nats-config --check` (exit 1), and the test shows
//!   the hole such a bucket opens.

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream::{self, kv, message::PublishMessage as Publish};
use futures_util::StreamExt;
use hyperhive_tests::controller_bin;
use hyperhive_tests::identity::{SecuredNats, Violation};
use swarm_queue_client::direct::put_own;
use swarm_queue_client::permissions::js_api;
use swarm_queue_client::subjects::credential_key;
use swarm_queue_client::{
    open_or_create, AccountName, AgentName, Bucket, BucketSettings, Connection, HiveName,
};

const REFUSED_WAIT: Duration = Duration::from_millis(700);

fn hive(name: &str) -> HiveName {
    HiveName::new(name).unwrap()
}

fn cred(h: &str) -> String {
    credential_key(
        &hive(h),
        &AgentName::new("mail-bot").unwrap(),
        &AccountName::new("smtp").unwrap(),
    )
}

/// Every key of every bucket with its revision and value, read as the
/// controller.
async fn snapshot(js: &jetstream::Context) -> BTreeMap<String, (u64, Vec<u8>)> {
    let mut out = BTreeMap::new();
    for b in Bucket::ALL {
        let store = js.get_key_value(b.name()).await.unwrap();
        let keys: Vec<String> = match store.keys().await {
            Ok(k) => k.map(|k| k.unwrap()).collect().await,
            Err(_) => Vec::new(),
        };
        for k in keys {
            if let Some(e) = store.entry(&k).await.unwrap() {
                out.insert(format!("{}/{k}", b.name()), (e.revision, e.value.to_vec()));
            }
        }
    }
    out
}

/// The controller creates the buckets (with `stream_config`, or with the
/// stock async-nats KV settings when `stock`) and writes beta's and alpha's
/// declaration and credential; beta puts its status.
async fn seed(s: &SecuredNats, stock: bool) -> (Connection, jetstream::Context) {
    let ctl = s.controller_conn().await;
    let cjs = jetstream::new(ctl.client.clone());
    for b in Bucket::ALL {
        if stock {
            cjs.create_key_value(kv::Config {
                bucket: b.name().into(),
                history: 5,
                ..Default::default()
            })
            .await
            .unwrap();
        } else {
            open_or_create(&cjs, b, &BucketSettings::default_for(b))
                .await
                .unwrap();
        }
    }
    let wanted = cjs.get_key_value(Bucket::Wanted.name()).await.unwrap();
    let creds = cjs.get_key_value(Bucket::Credentials.name()).await.unwrap();
    for h in ["alpha", "beta"] {
        wanted.put(h, "{}".into()).await.unwrap();
        creds.put(cred(h), "sealed".into()).await.unwrap();
    }
    let b = s.hive_conn("beta").await;
    put_own(
        &jetstream::new(b.client.clone()),
        Bucket::Status,
        "beta",
        "beta-up".into(),
    )
    .await
    .unwrap();
    (ctl, cjs)
}

type Headers = Vec<(&'static str, String)>;

fn h(pairs: &[(&'static str, &str)]) -> Headers {
    pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
}

/// Every header nats-server 2.15 acts on in a publish to a stream, the
/// ones that could reach beyond the single message first.
fn attacks() -> Vec<(&'static str, Headers)> {
    let beta = Bucket::Status.key_subject("beta");
    let alpha = Bucket::Status.key_subject("alpha");
    vec![
        ("rollup all", h(&[("Nats-Rollup", "all")])),
        ("rollup sub", h(&[("Nats-Rollup", "sub")])),
        (
            "kv purge",
            h(&[("KV-Operation", "PURGE"), ("Nats-Rollup", "sub")]),
        ),
        ("kv delete", h(&[("KV-Operation", "DEL")])),
        (
            "schedule onto beta",
            h(&[
                ("Nats-Schedule", "@at 2020-01-01T00:00:00Z"),
                ("Nats-Schedule-Target", &beta),
            ]),
        ),
        (
            "schedule copying beta",
            h(&[
                ("Nats-Schedule", "@every 1s"),
                ("Nats-Schedule-Target", &alpha),
                ("Nats-Schedule-Source", &beta),
            ]),
        ),
        (
            "schedule rollup",
            h(&[
                ("Nats-Schedule", "@at 2020-01-01T00:00:00Z"),
                ("Nats-Schedule-Target", &beta),
                ("Nats-Schedule-Rollup", "sub"),
                ("Nats-Schedule-TTL", "1s"),
            ]),
        ),
        ("ttl", h(&[("Nats-TTL", "1s")])),
        ("counter", h(&[("Nats-Incr", "1")])),
        (
            "atomic batch",
            h(&[
                ("Nats-Batch-Id", "b1"),
                ("Nats-Batch-Sequence", "1"),
                ("Nats-Batch-Commit", "1"),
            ]),
        ),
        (
            "expected other subject",
            h(&[
                ("Nats-Expected-Last-Subject-Sequence", "0"),
                ("Nats-Expected-Last-Subject-Sequence-Subject", &beta),
            ]),
        ),
        (
            "expected last sequence",
            h(&[("Nats-Expected-Last-Sequence", "1")]),
        ),
        (
            "expected other stream",
            h(&[("Nats-Expected-Stream", "KV_hyperhive-wanted")]),
        ),
        ("msg id", h(&[("Nats-Msg-Id", "dup")])),
        ("msg id again", h(&[("Nats-Msg-Id", "dup")])),
        ("marker reason", h(&[("Nats-Marker-Reason", "Purge")])),
        ("required api level", h(&[("Nats-Required-Api-Level", "0")])),
    ]
}

/// Publish every attack to alpha's own status key; the outcome of each.
async fn attack(ajs: &jetstream::Context) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (what, headers) in attacks() {
        let mut p = Publish::build().payload("alpha-attack".into());
        for (k, v) in headers {
            p = p.header(k, v.as_str());
        }
        let sent = ajs
            .send_publish(Bucket::Status.key_subject("alpha"), p)
            .await;
        let outcome = match sent {
            Err(e) => format!("refused: {e}"),
            Ok(ack) => match ack.await {
                Ok(a) => format!("stored at {}", a.sequence),
                Err(e) => format!("refused: {e}"),
            },
        };
        out.push((what.to_string(), outcome));
    }
    out
}

#[tokio::test]
async fn a_hives_own_status_put_reaches_no_other_key_whatever_its_headers() {
    let s = SecuredNats::start_generated(&["alpha", "beta"]);
    let (_ctl, cjs) = seed(&s, false).await;
    let before = snapshot(&cjs).await;
    assert_eq!(before.len(), 5, "{before:?}");
    let a = s.hive_conn("alpha").await;
    let ajs = jetstream::new(a.client.clone());
    let outcomes = attack(&ajs).await;
    for (what, outcome) in &outcomes {
        eprintln!("{what}: {outcome}");
    }
    let refused = |w: &str| {
        outcomes
            .iter()
            .find(|(what, _)| what == w)
            .is_some_and(|(_, o)| o.starts_with("refused"))
    };
    // The headers that would act beyond the message are refused outright.
    for w in [
        "rollup all",
        "schedule onto beta",
        "schedule copying beta",
        "schedule rollup",
    ] {
        assert!(refused(w), "{w} was not refused: {outcomes:?}");
    }
    // An honest put by beta still lands after all of that.
    let b = s.hive_conn("beta").await;
    let bjs = jetstream::new(b.client.clone());
    let rev = put_own(&bjs, Bucket::Status, "beta", "beta-up-2".into())
        .await
        .expect("beta's put after the attacks");
    let mut after = snapshot(&cjs).await;
    assert_eq!(
        after.remove("hyperhive-status/beta"),
        Some((rev, b"beta-up-2".to_vec()))
    );
    let mut before = before;
    before.remove("hyperhive-status/beta");
    after.remove("hyperhive-status/alpha");
    before.remove("hyperhive-status/alpha");
    assert_eq!(before, after, "a key other than alpha's own changed");
    // The settings check passes on buckets the controller made.
    let found = swarm_queue_client::buckets::check_buckets(&cjs)
        .await
        .unwrap();
    assert!(found.is_empty(), "{found:?}");
}

#[tokio::test]
async fn a_bucket_with_unsafe_settings_is_named_by_the_check() {
    let s = SecuredNats::start_generated(&["alpha", "beta"]);
    // The stock KV settings, which the hives' status bucket had before.
    let (_ctl, cjs) = seed(&s, true).await;
    let found = swarm_queue_client::buckets::check_buckets(&cjs)
        .await
        .unwrap();
    let named: Vec<String> = found.iter().map(|f| f.to_string()).collect();
    assert!(
        named
            .iter()
            .any(|m| m.contains("hyperhive-status") && m.contains("allow_rollup_hdrs")),
        "{named:?}"
    );
    // `nats-config --check` fails and names it.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("controller.toml");
    std::fs::write(&config, s.controller.nats_toml(&s.server.url())).unwrap();
    let out = std::process::Command::new(controller_bin())
        .args([
            "--config",
            config.to_str().unwrap(),
            "nats-config",
            "--check",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("allow_rollup_hdrs") && stderr.contains("hyperhive-status"),
        "{stderr}"
    );
    // Why it matters: on such a bucket alpha's own put wipes beta's status.
    let before = snapshot(&cjs).await;
    assert!(before.contains_key("hyperhive-status/beta"));
    let a = s.hive_conn("alpha").await;
    let ajs = jetstream::new(a.client.clone());
    let p = Publish::build()
        .payload("x".into())
        .header("Nats-Rollup", "all");
    ajs.send_publish(Bucket::Status.key_subject("alpha"), p)
        .await
        .unwrap()
        .await
        .expect("the stock bucket takes a rollup");
    let after = snapshot(&cjs).await;
    assert!(!after.contains_key("hyperhive-status/beta"), "{after:?}");
}

#[tokio::test]
async fn a_hive_cannot_learn_another_hives_key_names() {
    let s = SecuredNats::start_generated(&["alpha", "beta"]);
    seed(&s, false).await;
    let a = s.hive_conn("alpha").await;
    let me = s.hive("alpha").public.clone();
    let mut answers = Vec::new();
    for b in Bucket::ALL {
        let stream = b.stream_name();
        let asks = [
            (
                js_api::stream_info(b),
                serde_json::json!({ "subjects_filter": ">" }).to_string(),
            ),
            (
                format!("$JS.API.DIRECT.GET.{stream}"),
                serde_json::json!({ "multi_last": [b.key_subject(">")] }).to_string(),
            ),
            (js_api::consumer_create_unnamed(b), "{}".to_string()),
            (format!("$JS.API.CONSUMER.LIST.{stream}"), "{}".to_string()),
            ("$JS.API.STREAM.LIST".to_string(), "{}".to_string()),
            ("$JS.API.STREAM.NAMES".to_string(), "{}".to_string()),
        ];
        for (subject, body) in asks {
            let answer =
                tokio::time::timeout(REFUSED_WAIT, a.client.request(subject.clone(), body.into()))
                    .await;
            if let Ok(Ok(m)) = answer {
                answers.push((
                    subject.clone(),
                    String::from_utf8_lossy(&m.payload).to_string(),
                ));
            }
            s.violation(Violation::Publish, &me, &subject).await;
        }
        let every_key = b.key_subject(">");
        let _sub = a.client.subscribe(every_key.clone()).await.unwrap();
        a.client.flush().await.unwrap();
        s.violation(Violation::Subscribe, &me, &every_key).await;
    }
    for (subject, answer) in &answers {
        assert!(!answer.contains("beta"), "{subject} told alpha: {answer}");
    }
}
