//! A bucket deleted and made again (a lost NATS store, an operator's
//! `nats kv del`), over a real nats-server, dockerd and `hive` process:
//! while it is missing a warning names it; once it is back, the value at
//! its new, lower revision is taken as the truth, a warning says what
//! happened, and nothing needs a restart. For the wanted bucket and the
//! credentials bucket.

use std::time::Duration;

use futures_util::StreamExt;

use hyperhive_tests::docker::{ContainerGuard, TestImage};
use hyperhive_tests::hive::{warning_keys, HiveProc, HiveSpec};
use hyperhive_tests::kv::{container, Swarm};
use hyperhive_tests::{unique_name, wait_until, NatsServer};
use serde_json::{json, Value};
use swarm_queue_client::credentials::{seal, XKey};
use swarm_queue_client::encode;

const T: Duration = Duration::from_secs(90);

fn decl(image: &str, version: &str) -> String {
    json!({
        "schema": 1,
        "agents": { "a": {
            "image": image,
            "command": ["/bin/sleep", "3600"],
            "env": { "V": version },
            "credentials": ["smtp"],
        } }
    })
    .to_string()
}

fn warning<'a>(status: &'a Value, key: &str) -> Option<&'a str> {
    status["warnings"]
        .as_array()?
        .iter()
        .find(|w| w["key"] == key)?["message"]
        .as_str()
}

/// Wait until the hive's `/health/ready` shows a warning `key`; its text.
async fn wait_warning(h: &HiveProc, key: &str) -> String {
    wait_until(T, &format!("warning {key}"), || async {
        let (_, r) = h.ready().await;
        warning(&r, key).map(str::to_string)
    })
    .await
}

#[tokio::test]
async fn a_wanted_bucket_made_again_is_taken_as_the_truth() {
    let nats = NatsServer::start();
    let url = nats.url();
    let hive = unique_name("rs-wanted");
    let img = TestImage::busybox("rs-wanted");
    let _guard = ContainerGuard::new(&hive);
    let swarm = Swarm::connect(&url).await;
    swarm.declare(&hive, &decl(&img.reference, "1")).await;
    swarm.declare(&hive, &decl(&img.reference, "2")).await;
    let r3 = swarm.declare(&hive, &decl(&img.reference, "3")).await;
    let h = HiveProc::start(HiveSpec {
        name: Some(&hive),
        nats_url: Some(&url),
        ..Default::default()
    });
    swarm.converged(&hive, r3, T).await;
    let (_, _, spec3) = container(&hive, "a").unwrap();

    // The bucket goes away. A declaration sent meanwhile is stored by no
    // stream; the hive hears it, reads, and says the bucket is missing.
    swarm.js.delete_key_value("hyperhive-wanted").await.unwrap();
    swarm
        .client
        .publish(
            format!("$KV.hyperhive-wanted.{hive}"),
            decl(&img.reference, "lost").into(),
        )
        .await
        .unwrap();
    let missing = wait_warning(&h, "wanted_bucket").await;
    assert!(missing.contains("hyperhive-wanted"), "{missing}");
    assert!(missing.contains(&format!("revision {r3}")), "{missing}");

    // Made again with the same settings; a new declaration lands at
    // revision 1, below the one the hive handled.
    let r1 = swarm.declare(&hive, &decl(&img.reference, "4")).await;
    assert!(r1 < r3, "revision {r1} after a new bucket");
    let s = swarm
        .status_until(&hive, "converged on the new bucket's revision", T, |s| {
            s["converged_revision"].as_u64() == Some(r1)
        })
        .await;
    assert_eq!(s["agents"]["a"]["observed"], "running", "{s}");
    let (_, running, spec4) = container(&hive, "a").unwrap();
    assert!(running);
    assert_ne!(
        spec3, spec4,
        "the declaration at the new revision was applied"
    );
    let (_, r) = h.ready().await;
    let reset = warning(&r, "wanted_reset").unwrap_or_else(|| panic!("{r}"));
    assert!(
        reset.contains("hyperhive-wanted") && reset.contains(&format!("revision {r1}")),
        "{reset}"
    );
    assert!(
        !warning_keys(&r).contains(&"wanted_bucket".to_string()),
        "{r}"
    );
    // Handled, so a note (info), not a degradation: the controller can
    // count the hive converged on the new bucket's revision.
    let level = r["warnings"]
        .as_array()
        .and_then(|w| w.iter().find(|w| w["key"] == "wanted_reset"))
        .map(|w| w["level"].clone());
    assert_eq!(level, Some(json!("info")), "{r}");

    // The doorbell keeps working: the next declaration is applied too.
    let r2 = swarm.declare(&hive, &decl(&img.reference, "5")).await;
    swarm
        .status_until(&hive, "converged on the next revision", T, |s| {
            s["converged_revision"].as_u64() == Some(r2)
        })
        .await;
}

/// A bucket made again while the hive could not hear it (frozen with
/// SIGSTOP) reaches the very revision number the hive had converged on, with
/// another declaration. The number alone cannot tell them apart: the hive
/// must apply the new one, not keep reporting the old one converged.
#[tokio::test]
async fn a_new_bucket_at_the_same_revision_number_is_applied() {
    let nats = NatsServer::start();
    let url = nats.url();
    let hive = unique_name("rs-same");
    let img = TestImage::busybox("rs-same");
    let _guard = ContainerGuard::new(&hive);
    let swarm = Swarm::connect(&url).await;
    swarm.declare(&hive, &decl(&img.reference, "1")).await;
    let r2 = swarm.declare(&hive, &decl(&img.reference, "2")).await;
    let h = HiveProc::start(HiveSpec {
        name: Some(&hive),
        nats_url: Some(&url),
        ..Default::default()
    });
    swarm.converged(&hive, r2, T).await;
    let (_, _, old_spec) = container(&hive, "a").unwrap();

    h.daemon.signal("STOP");
    swarm.js.delete_key_value("hyperhive-wanted").await.unwrap();
    swarm.declare(&hive, &decl(&img.reference, "a")).await;
    let again = swarm.declare(&hive, &decl(&img.reference, "b")).await;
    // Every status the hive publishes from here on.
    let mut watch = swarm
        .bucket("hyperhive-status")
        .await
        .watch(&hive)
        .await
        .unwrap();
    let published = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Value>::new()));
    let sink = published.clone();
    let watcher = tokio::spawn(async move {
        while let Some(Ok(entry)) = watch.next().await {
            if let Ok(v) = serde_json::from_slice(&entry.value) {
                sink.lock().unwrap().push(v);
            }
        }
    });
    h.daemon.signal("CONT");
    assert_eq!(again, r2, "the new bucket reached the same revision number");

    let new_spec = wait_until(T, "the new bucket's declaration applied", || async {
        let (_, running, spec) = container(&hive, "a")?;
        (running && spec != old_spec).then_some(spec)
    })
    .await;
    let s = swarm
        .status_until(&hive, "converged on the new declaration", T, |s| {
            s["converged_revision"].as_u64() == Some(r2)
                && s["agents"]["a"]["observed"] == "running"
        })
        .await;
    let (_, _, spec) = container(&hive, "a").unwrap();
    assert_eq!(spec, new_spec, "{s}");
    let (_, r) = h.ready().await;
    let reset = warning(&r, "wanted_reset").unwrap_or_else(|| panic!("{r}"));
    assert!(reset.contains(&format!("revision {r2}")), "{reset}");

    // No status claimed the revision converged while the agent it shows
    // ran another spec than the one it shows declared.
    watcher.abort();
    let published = published.lock().unwrap();
    assert!(!published.is_empty(), "the hive published after SIGCONT");
    for p in published.iter() {
        if p["converged_revision"].as_u64() == Some(r2) {
            let a = &p["agents"]["a"];
            assert_eq!(
                a["spec"], a["declared_spec"],
                "converged on {r2} claimed with another spec running: {p}"
            );
        }
    }
}

#[tokio::test]
async fn a_credentials_bucket_made_again_is_taken_as_the_truth() {
    let nats = NatsServer::start();
    let url = nats.url();
    let hive = unique_name("rs-creds");
    let img = TestImage::busybox("rs-creds");
    let _guard = ContainerGuard::new(&hive);
    let swarm = Swarm::connect(&url).await;
    let controller = XKey::new();
    let extra = format!(
        "trusted_controller_xkeys = [{:?}]\n",
        controller.public_key()
    );
    let r = swarm.declare(&hive, &decl(&img.reference, "1")).await;
    let h = HiveProc::start(HiveSpec {
        name: Some(&hive),
        nats_url: Some(&url),
        extra: &extra,
        ..Default::default()
    });
    let status = swarm.converged(&hive, r, T).await;
    let hive_xkey = status["xkey"].as_str().unwrap().to_string();
    let creds = swarm.bucket("hyperhive-credentials").await;
    let key = format!("{hive}.a.smtp");
    let sealed =
        |secret: &str| encode(&seal(secret.as_bytes(), &controller, &hive_xkey).unwrap()).unwrap();
    let path = h.state_dir.join("agents/a/credentials/smtp");
    for secret in ["secret-1", "secret-2", "secret-3"] {
        creds.put(&key, sealed(secret).into()).await.unwrap();
    }
    // Delivered by the doorbell alone: no notice is sent in this test.
    wait_until(T, "secret-3 delivered", || async {
        (std::fs::read(&path).ok()? == b"secret-3").then_some(())
    })
    .await;

    swarm
        .js
        .delete_key_value("hyperhive-credentials")
        .await
        .unwrap();
    swarm
        .client
        .publish(
            format!("$KV.hyperhive-credentials.{key}"),
            sealed("lost").into(),
        )
        .await
        .unwrap();
    let missing = wait_warning(&h, "credentials_bucket").await;
    assert!(missing.contains("hyperhive-credentials"), "{missing}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        b"secret-3",
        "kept while missing"
    );

    let creds = swarm.bucket("hyperhive-credentials").await;
    let rev = creds.put(&key, sealed("secret-new").into()).await.unwrap();
    assert_eq!(rev, 1);
    wait_until(T, "the value of the new bucket delivered", || async {
        (std::fs::read(&path).ok()? == b"secret-new").then_some(())
    })
    .await;
    let reset = wait_warning(&h, "credentials_reset").await;
    assert!(reset.contains("hyperhive-credentials"), "{reset}");
    let (_, r) = h.ready().await;
    assert!(
        !warning_keys(&r).contains(&"credentials_bucket".to_string()),
        "{r}"
    );
}
