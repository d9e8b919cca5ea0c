//! The hive converges on its declaration, over a real nats-server and the
//! real dockerd: pull at boot, watch, retire, the reconciler, orphans.

use std::time::Duration;

use hyperhive_tests::docker::{docker, ContainerGuard, TestImage};
use hyperhive_tests::hive::{warning_keys, HiveProc, HiveSpec};
use hyperhive_tests::kv::{container, containers_of, Swarm};
use hyperhive_tests::{unique_name, wait_until, NatsServer};
use serde_json::json;

const T: Duration = Duration::from_secs(90);

fn decl(agents: serde_json::Value) -> String {
    json!({ "schema": 1, "agents": agents }).to_string()
}

fn agent(image: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut a = json!({ "image": image, "command": ["/bin/sleep", "3600"] });
    if let Some(m) = extra.as_object() {
        for (k, v) in m {
            a[k] = v.clone();
        }
    }
    a
}

/// A container with this hive's labels that the hive never installed.
fn plant_orphan(hive: &str, image: &str) {
    docker(&[
        "run",
        "-d",
        "--name",
        &format!("hyperhive.{hive}.stray"),
        "--network",
        "none",
        "--label",
        "org.hyperhive.managed=true",
        "--label",
        &format!("org.hyperhive.hive={hive}"),
        "--label",
        "org.hyperhive.agent=stray",
        image,
        "/bin/sleep",
        "3600",
    ]);
}

fn start_hive(hive: &str, url: &str, extra: &str) -> HiveProc {
    HiveProc::start(HiveSpec {
        name: Some(hive),
        nats_url: Some(url),
        extra,
        ..Default::default()
    })
}

#[tokio::test]
async fn declare_change_delete_garbage_and_retire() {
    let nats = NatsServer::start();
    let url = nats.url();
    let hive = unique_name("cv-life");
    let img = TestImage::busybox("cv-life");
    let _guard = ContainerGuard::new(&hive);
    let swarm = Swarm::connect(&url).await;
    let h = start_hive(&hive, &url, "");

    // A declaration put -> its containers run.
    let r1 = swarm
        .declare(
            &hive,
            &decl(json!({
                "web": agent(&img.reference, json!({})),
                "db": agent(&img.reference, json!({ "env": { "ROLE": "db" } })),
            })),
        )
        .await;
    let s = swarm.converged(&hive, r1, T).await;
    for a in ["web", "db"] {
        assert_eq!(s["agents"][a]["observed"], "running", "{s}");
        assert_eq!(
            s["agents"][a]["spec"], s["agents"][a]["declared_spec"],
            "{s}"
        );
        let (_, running, _) = container(&hive, a).expect("container exists");
        assert!(running);
    }
    let (web_id, _, web_spec) = container(&hive, "web").unwrap();
    let state_file = h.state_dir.join("agents/web/kept.txt");
    std::fs::write(&state_file, "data").unwrap();

    // A changed spec -> rebuilt (new container, new spec label).
    let r2 = swarm
        .declare(
            &hive,
            &decl(json!({
                "web": agent(&img.reference, json!({ "env": { "V": "2" } })),
                "db": agent(&img.reference, json!({ "env": { "ROLE": "db" } })),
            })),
        )
        .await;
    swarm.converged(&hive, r2, T).await;
    let (web_id2, running, web_spec2) = container(&hive, "web").unwrap();
    assert!(running);
    assert_ne!(web_id, web_id2, "web was not replaced");
    assert_ne!(web_spec, web_spec2);
    assert_eq!(std::fs::read_to_string(&state_file).unwrap(), "data");
    let (db_id, _, _) = container(&hive, "db").unwrap();

    // The key deleted -> nothing changes, a warning names the revision.
    swarm.delete_declaration(&hive).await;
    let s = swarm
        .status_until(&hive, "the deletion warning", T, |s| {
            s["warnings"].to_string().contains("not a deletion order")
        })
        .await;
    assert!(
        s["warnings"]
            .to_string()
            .contains(&format!("revision {r2}")),
        "{s}"
    );
    assert_eq!(container(&hive, "web").unwrap().0, web_id2);
    assert_eq!(container(&hive, "db").unwrap().0, db_id);

    // The key purged (the mark a purge leaves) -> likewise nothing changes.
    swarm.mark_declaration_purged(&hive).await;
    swarm
        .status_until(&hive, "the purge warning", T, |s| {
            s["warnings"].to_string().contains("was purged")
        })
        .await;
    assert_eq!(container(&hive, "web").unwrap().0, web_id2);
    assert_eq!(container(&hive, "db").unwrap().0, db_id);

    // A garbage value -> a warning, nothing changes.
    let bad = swarm.declare(&hive, "{\"schema\":1,\"agents\":").await;
    let s = swarm
        .status_until(&hive, "the garbage warning", T, |s| {
            s["warnings"]
                .to_string()
                .contains(&format!("revision {bad} is not valid"))
        })
        .await;
    assert_eq!(s["converged_revision"], r2, "{s}");
    assert_eq!(container(&hive, "web").unwrap().0, web_id2);
    assert_eq!(container(&hive, "db").unwrap().0, db_id);

    // An agent removed from a valid declaration -> retired, state dir kept.
    let r3 = swarm
        .declare(
            &hive,
            &decl(json!({ "db": agent(&img.reference, json!({ "env": { "ROLE": "db" } })) })),
        )
        .await;
    let s = swarm.converged(&hive, r3, T).await;
    assert!(container(&hive, "web").is_none(), "web still exists");
    assert_eq!(container(&hive, "db").unwrap().0, db_id, "db was touched");
    assert_eq!(std::fs::read_to_string(&state_file).unwrap(), "data");
    assert!(s["agents"].get("web").is_none() || s["agents"]["web"]["observed"] == "missing");
    assert!(warning_keys(&s).is_empty(), "{s}");

    // An explicit empty declaration retires everything.
    let r4 = swarm.declare(&hive, &decl(json!({}))).await;
    swarm.converged(&hive, r4, T).await;
    assert!(
        containers_of(&hive).is_empty(),
        "{:?}",
        containers_of(&hive)
    );
    println!("revisions applied: {r1} {r2} {r3} {r4}; ignored: delete, garbage at {bad}");
}

#[tokio::test]
async fn declaration_published_while_the_hive_is_down_is_applied_at_boot() {
    let nats = NatsServer::start();
    let url = nats.url();
    let hive = unique_name("cv-boot");
    let img = TestImage::busybox("cv-boot");
    let _guard = ContainerGuard::new(&hive);
    let swarm = Swarm::connect(&url).await;
    let mut h = start_hive(&hive, &url, "");
    h.ready().await;
    h.daemon.kill();
    let rev = swarm
        .declare(
            &hive,
            &decl(json!({ "late": agent(&img.reference, json!({})) })),
        )
        .await;
    h.kill_and_restart(&[]);
    swarm.converged(&hive, rev, T).await;
    assert!(container(&hive, "late").unwrap().1);
}

#[tokio::test]
async fn declaration_published_while_nats_restarts_is_applied_after_reconnect() {
    let mut nats = NatsServer::start();
    let url = nats.url();
    let hive = unique_name("cv-nats");
    let img = TestImage::busybox("cv-nats");
    let _guard = ContainerGuard::new(&hive);
    let h = start_hive(&hive, &url, "");
    let swarm = Swarm::connect(&url).await;
    let r1 = swarm
        .declare(
            &hive,
            &decl(json!({ "a": agent(&img.reference, json!({})) })),
        )
        .await;
    swarm.converged(&hive, r1, T).await;
    let pid = h.daemon.pid();

    // Restart the server and publish before the hive has reconnected: the
    // hive's watch cannot have heard it; only the pull after the reconnect
    // can.
    nats.restart();
    let swarm = Swarm::connect(&url).await;
    let r2 = swarm
        .declare(
            &hive,
            &decl(json!({ "a": agent(&img.reference, json!({})), "b": agent(&img.reference, json!({})) })),
        )
        .await;
    swarm.converged(&hive, r2, T).await;
    assert!(container(&hive, "b").unwrap().1);
    assert_eq!(h.daemon.pid(), pid, "the hive was restarted");
}

#[tokio::test]
async fn reconciler_recreates_restarts_and_reaps_orphans_after_grace() {
    let nats = NatsServer::start();
    let url = nats.url();
    let hive = unique_name("cv-rec");
    let img = TestImage::busybox("cv-rec");
    let _guard = ContainerGuard::new(&hive);
    let swarm = Swarm::connect(&url).await;
    let h = start_hive(
        &hive,
        &url,
        "reconcile_interval_secs = 1\norphan_grace_secs = 3\n",
    );
    let rev = swarm
        .declare(
            &hive,
            &decl(json!({ "keep": agent(&img.reference, json!({})) })),
        )
        .await;
    swarm.converged(&hive, rev, T).await;
    let (id, _, _) = container(&hive, "keep").unwrap();

    // Removed by hand -> recreated.
    docker(&["rm", "-f", &format!("hyperhive.{hive}.keep")]);
    let (id2, _) = wait_until(T, "the container to be recreated", || async {
        container(&hive, "keep")
            .filter(|c| c.1 && c.0 != id)
            .map(|c| (c.0, c.1))
    })
    .await;
    // Stopped by hand while wanted up -> started.
    docker(&["stop", "-t", "0", &format!("hyperhive.{hive}.keep")]);
    wait_until(T, "the container to be started again", || async {
        container(&hive, "keep").filter(|c| c.1 && c.0 == id2)
    })
    .await;

    // An orphan with our labels, not in the installed record -> reaped,
    // but only after the grace period.
    plant_orphan(&hive, &img.reference);
    let created = std::time::Instant::now();
    wait_until(T, "the orphan to be reaped", || async {
        container(&hive, "stray").is_none().then_some(())
    })
    .await;
    let lived = created.elapsed();
    println!("orphan reaped after {lived:?} (grace 3 s)");
    assert!(
        lived >= Duration::from_secs(3),
        "reaped before its grace period: {lived:?}"
    );
    assert!(h.daemon.log().contains("not in the installed record"));
    // The declared agent was not touched by the reaping.
    assert_eq!(container(&hive, "keep").unwrap().0, id2);
}

#[tokio::test]
async fn no_reaping_when_the_installed_record_is_unreadable() {
    let nats = NatsServer::start();
    let url = nats.url();
    let hive = unique_name("cv-norec");
    let img = TestImage::busybox("cv-norec");
    let _guard = ContainerGuard::new(&hive);
    plant_orphan(&hive, &img.reference);
    let h = start_hive(
        &hive,
        &url,
        "reconcile_interval_secs = 1\norphan_grace_secs = 2\n",
    );
    // The first round sees the orphan and starts its grace period.
    wait_until(T, "the orphan to be noticed", || async {
        h.daemon
            .log()
            .contains("not in the installed record")
            .then_some(())
    })
    .await;
    // Now the record becomes unreadable.
    let db = h.state_dir.join("hive.db");
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('DROP TABLE installed'); c.commit()",
            db.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Several failed rounds, well past the grace period.
    wait_until(T, "three failed reconcile rounds", || async {
        (h.daemon.log().matches("reconcile round failed").count() >= 3).then_some(())
    })
    .await;
    assert!(
        container(&hive, "stray").is_some(),
        "an orphan was reaped while the installed record was unreadable"
    );
    let (_, r) = h.ready().await;
    assert!(warning_keys(&r).contains(&"reconciler".to_string()), "{r}");
}

/// A declaration with agent fields this hive does not know (a newer
/// controller's `user`, `network`, a made-up one): the hive leaves those
/// agents as they are (no rebuild of the running one, no create of the new
/// one), says which fields, and never claims the revision converged; the
/// same agents without the fields converge.
#[tokio::test]
async fn agent_fields_this_hive_does_not_know_leave_the_agent_alone_and_never_converge() {
    let nats = NatsServer::start();
    let url = nats.url();
    let hive = unique_name("cv-unknown");
    let img = TestImage::busybox("cv-unknown");
    let _guard = ContainerGuard::new(&hive);
    let swarm = Swarm::connect(&url).await;
    let _h = start_hive(&hive, &url, "");
    let r1 = swarm
        .declare(
            &hive,
            &decl(json!({ "web": agent(&img.reference, json!({})) })),
        )
        .await;
    swarm.converged(&hive, r1, T).await;
    let (web_id, _, _) = container(&hive, "web").expect("web runs");

    let newer = json!({
        "web": agent(&img.reference, json!({ "future_user_ns": "remap", "future_field_xyz": 1 })),
        "cache": agent(&img.reference, json!({ "future_network_policy": "deny-all" })),
    });
    let r2 = swarm.declare(&hive, &decl(newer)).await;
    let seen = swarm
        .status_until(
            &hive,
            "the hive to read revision 2 and name the fields",
            T,
            |s| {
                s["seen_revision"].as_u64() >= Some(r2)
                    && warning_keys(s).contains(&"wanted_fields_ignored".to_string())
            },
        )
        .await;
    // It says which agent spec its build knows, for the controller.
    assert_eq!(seen["agent_spec"], swarm_queue_client::AGENT_SPEC, "{seen}");
    let said = seen["warnings"].to_string();
    for field in [
        "agents.web.future_user_ns",
        "agents.web.future_field_xyz",
        "agents.cache.future_network_policy",
    ] {
        assert!(said.contains(field), "{field} not named: {said}");
    }
    // Three more status puts: each one without a claim on revision 2, web
    // not rebuilt, cache not created.
    let (mut last, _) = swarm.status(&hive).await.expect("a status");
    for _ in 0..3 {
        let (rev, s) = wait_until(T, "the next status put", || async {
            let (rev, s) = swarm.status(&hive).await?;
            (rev > last).then_some((rev, s))
        })
        .await;
        assert!(s["converged_revision"].as_u64() < Some(r2), "claimed: {s}");
        last = rev;
    }
    assert_eq!(container(&hive, "web").map(|c| c.0), Some(web_id.clone()));
    assert!(container(&hive, "cache").is_none(), "cache was created");

    // Without the fields: cache is made, web rebuilt only if its spec
    // changed (it did not), and revision 3 converges.
    let r3 = swarm
        .declare(
            &hive,
            &decl(json!({
                "web": agent(&img.reference, json!({})),
                "cache": agent(&img.reference, json!({})),
            })),
        )
        .await;
    let s = swarm.converged(&hive, r3, T).await;
    assert!(
        !warning_keys(&s).contains(&"wanted_fields_ignored".to_string()),
        "{s}"
    );
    assert_eq!(container(&hive, "web").map(|c| c.0), Some(web_id));
    assert!(container(&hive, "cache").is_some());
}
