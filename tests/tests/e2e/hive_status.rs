//! The first slice end to end: a real `hive` process publishing its
//! status into a real nats-server, and serving the same value on
//! `/health/ready`.

use std::process::Command;
use std::time::Duration;

use hyperhive_tests::foreign::kv_get as kv_get_external;
use hyperhive_tests::hive::{warning_keys, HiveProc, HiveSpec};
use hyperhive_tests::{wait_until, NatsServer};

const T: Duration = Duration::from_secs(30);

async fn kv_entry(url: &str, key: &str) -> Option<async_nats::jetstream::kv::Entry> {
    let client = async_nats::connect(url).await.ok()?;
    let js = async_nats::jetstream::new(client);
    let kv = js.get_key_value("hyperhive-status").await.ok()?;
    kv.entry(key).await.ok().flatten()
}

#[tokio::test]
async fn running_hive_publishes_status_readable_by_a_foreign_client() {
    let nats = NatsServer::start();
    let url = nats.url();
    let hive = HiveProc::start(HiveSpec {
        name: Some("alpha"),
        nats_url: Some(&url),
        ..Default::default()
    });
    let entry = wait_until(T, "alpha's status in KV", || kv_entry(&url, "alpha")).await;
    assert!(entry.revision >= 1);

    // A plain KV get through another client: a readable JSON document.
    let (rev, doc) = tokio::task::spawn_blocking({
        let url = url.clone();
        move || kv_get_external(&url, "hyperhive-status", "alpha")
    })
    .await
    .unwrap()
    .expect("status key present");
    println!("nats-py read hyperhive-status/alpha at revision {rev}: {doc}");
    assert_eq!(doc["schema"], 1);
    assert_eq!(doc["hive"], "alpha");
    assert_eq!(doc["ready"], true);
    assert_eq!(doc["state"], "ok");
    assert!(doc["xkey"].as_str().unwrap().starts_with('X'));
    // Nothing stamps its own time.
    let text = doc.to_string();
    for word in ["time", "timestamp", "updated", "at\""] {
        assert!(
            !text.contains(word),
            "payload carries a time field ({word}): {text}"
        );
    }

    // /health/ready serves the same value.
    let (code, ready) = hive.ready().await;
    assert_eq!(code, 200);
    assert_eq!(ready, doc, "HTTP and KV disagree");

    // Publish first, then wait: with a 1 s interval the revision keeps moving.
    let first = entry.revision;
    wait_until(T, "a second publish", || async {
        kv_entry(&url, "alpha").await.filter(|e| e.revision > first)
    })
    .await;
}

#[tokio::test]
async fn without_nats_or_name_the_hive_runs_and_says_why() {
    // Not configured at all.
    let alone = HiveProc::start(HiveSpec {
        name: Some("alone"),
        ..Default::default()
    });
    let (code, r) = alone.ready().await;
    assert_eq!(code, 200, "{r}");
    assert_eq!(warning_keys(&r), vec!["nats_not_configured"], "{r}");
    let live = reqwest::get(format!("{}/health/live", alone.api().await))
        .await
        .unwrap();
    assert_eq!(live.status().as_u16(), 200);

    // Configured but unreachable: a different warning.
    let dead_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dead_url = format!("nats://127.0.0.1:{dead_port}");
    let cut_off = HiveProc::start(HiveSpec {
        name: Some("cut-off"),
        nats_url: Some(&dead_url),
        ..Default::default()
    });
    let r = wait_until(T, "nats_unreachable warning", || async {
        let (_, r) = cut_off.ready().await;
        warning_keys(&r)
            .contains(&"nats_unreachable".to_string())
            .then_some(r)
    })
    .await;
    assert!(!warning_keys(&r).contains(&"nats_not_configured".to_string()));
    let msg = r["warnings"].to_string();
    assert!(msg.contains(&dead_url.replace("nats://", "")), "{msg}");

    // No name: runs, does not publish, says so.
    let nats = NatsServer::start();
    let url = nats.url();
    let nameless = HiveProc::start(HiveSpec {
        nats_url: Some(&url),
        ..Default::default()
    });
    let (code, r) = nameless.ready().await;
    assert_eq!(code, 200, "{r}");
    assert_eq!(warning_keys(&r), vec!["hive_name_missing"], "{r}");
}

#[tokio::test]
async fn nats_outage_raises_publish_warning_and_recovery_clears_it() {
    let mut nats = NatsServer::start();
    let url = nats.url();
    let hive = HiveProc::start(HiveSpec {
        name: Some("beta"),
        nats_url: Some(&url),
        ..Default::default()
    });
    let pid = hive.daemon.pid();
    let before = wait_until(T, "first status", || kv_entry(&url, "beta")).await;

    nats.stop();
    // The hive keeps serving /health/ready while NATS is down, and after 3
    // failed publishes in a row says the swarm sees it as stale.
    let r = wait_until(T, "the publish warning", || async {
        let (code, r) = hive.ready().await;
        assert_eq!(
            code, 200,
            "a NATS outage must not make the hive unready: {r}"
        );
        warning_keys(&r)
            .contains(&"swarm_status_publish".to_string())
            .then_some(r)
    })
    .await;
    let w = r["warnings"].to_string();
    assert!(w.contains("3 failures in a row"), "{w}");
    assert!(w.contains("the hive itself is fine"), "{w}");

    // Same server back (same port, same store): publishing resumes without
    // restarting the hive, and the first success clears the warning.
    nats.restart();
    let after = wait_until(T, "a publish after the restart", || async {
        kv_entry(&url, "beta")
            .await
            .filter(|e| e.revision > before.revision)
    })
    .await;
    wait_until(T, "the warning to clear", || async {
        let (_, r) = hive.ready().await;
        warning_keys(&r).is_empty().then_some(())
    })
    .await;
    // The first status the bucket got after the outage does not tell the
    // controller that publishing fails: its arrival says otherwise. It may
    // still say that the wanted bucket did not answer: a restarted server
    // can take a moment before JetStream answers direct gets again (seen
    // once in a clean-clone run), and the hive says what it saw.
    let first_back: serde_json::Value = serde_json::from_slice(&after.value).unwrap();
    let first_warnings = warning_keys(&first_back);
    assert!(
        first_warnings.iter().all(|k| k == "wanted_bucket"),
        "{first_back}"
    );
    let want_state = if first_warnings.is_empty() {
        "ok"
    } else {
        "degraded"
    };
    assert_eq!(first_back["state"], want_state, "{first_back}");
    // Once the hive says nothing is wrong, so does the bucket.
    wait_until(T, "an ok status in the bucket", || async {
        let e = kv_entry(&url, "beta").await?;
        let v: serde_json::Value = serde_json::from_slice(&e.value).ok()?;
        (v["state"] == "ok" && warning_keys(&v).is_empty()).then_some(())
    })
    .await;
    assert_eq!(hive.daemon.pid(), pid, "the hive was not restarted");
    println!(
        "status revision {} before the outage, {} after the restart",
        before.revision, after.revision
    );
}

#[tokio::test]
async fn clean_shutdown_publishes_stopped() {
    let nats = NatsServer::start();
    let url = nats.url();
    let mut hive = HiveProc::start(HiveSpec {
        name: Some("gamma"),
        nats_url: Some(&url),
        publish_interval_secs: 60,
        ..Default::default()
    });
    wait_until(T, "first status", || kv_entry(&url, "gamma")).await;
    let code = hive.daemon.terminate();
    assert_eq!(code, Some(0));
    let e = kv_entry(&url, "gamma").await.unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&e.value).unwrap();
    assert_eq!(doc["state"], "stopped", "{doc}");
    assert_eq!(doc["ready"], false);
}

#[test]
fn check_config_reports_every_problem_and_exits_64() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "name = \"Bad Name\"\nhttp_listen = \"0.0.0.0:7390\"\nstate_dir = \"/var/lib/x\"\n",
    )
    .unwrap();
    let out = Command::new(hyperhive_tests::hive_bin())
        .arg("--check-config")
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("\"Bad Name\""), "{err}");
    assert!(err.contains("0.0.0.0:7390"), "{err}");

    let good = dir.path().join("good.toml");
    std::fs::write(
        &good,
        "name = \"alpha\"\nstate_dir = \"/var/lib/hyperhive\"\n[nats]\nurl = \"nats://127.0.0.1:4222\"\n",
    )
    .unwrap();
    let out = Command::new(hyperhive_tests::hive_bin())
        .arg("--check-config")
        .arg(&good)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = Command::new(hyperhive_tests::hive_bin())
        .args(["run", "--bogus"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "usage errors exit 2");
}
