//! The `hyperhive-events` stream (issue 22, point 3) over a real
//! nats-server with the generated accounts, a real hive on the real
//! dockerd and the controller's binary:
//!
//! - every operator verb (declare, deploy, credential put, maintenance on
//!   and off, rollback, knowledge-changed, rollout abort) leaves exactly one
//!   audit event, naming who ran it, read back by `events --json`;
//! - the hive's agents' lifecycle (created, started, exited with its code,
//!   the credential delivered, by name only)
//!   is in the stream under the hive's name, and `--hive`/`--agent` select;
//! - another hive's identity cannot publish into this hive's events or the
//!   audit trail (the server refuses, nothing is stored), and the stream
//!   keeps to its `[events]` limits however much is published.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use async_nats::jetstream;
use hyperhive_tests::identity::Violation;
use hyperhive_tests::secured::SecuredHive;
use hyperhive_tests::wait_until;
use serde_json::Value;
use swarm_queue_client::event_stream::{audit_subject, hive_event_subject, EVENTS_STREAM};
use swarm_queue_client::{AgentName, HiveName};

const T: Duration = Duration::from_secs(60);

/// A secured hive and the controller's config; the controller's verbs run
/// as user `auditor`.
struct Setup(SecuredHive);

impl std::ops::Deref for Setup {
    type Target = SecuredHive;
    fn deref(&self) -> &SecuredHive {
        &self.0
    }
}

impl Setup {
    async fn start(test: &str, tables: &str) -> Setup {
        Setup(SecuredHive::start(test, "", tables).await)
    }

    /// `swarm-controller --config … <args>` as `auditor`.
    async fn run(&self, args: &[&str]) -> (i32, String, String) {
        let out = self
            .controller(args)
            .env("USER", "auditor")
            .output()
            .await
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// `events --json <args>`, parsed.
    async fn events(&self, args: &[&str]) -> Vec<Value> {
        let mut all = vec!["events", "--json"];
        all.extend(args);
        let (code, out, err) = self.run(&all).await;
        assert_eq!(code, 0, "{err}");
        out.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    fn swarm_file(&self, name: &str, script: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        let text = format!(
            "[hives.{}.agents.talker]\nimage = {:?}\ncommand = [\"sh\", \"-c\", {script:?}]\n",
            self.name, self.local.image.reference
        );
        std::fs::write(&path, text).unwrap();
        path
    }
}

/// How many events of each kind `rows` hold.
fn kinds(rows: &[Value]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for r in rows {
        *out.entry(r["event"]["kind"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operator_verb_leaves_one_audit_event_and_agents_their_lifecycle() {
    let s = Setup::start("audit-verbs", "").await;
    let v1 = s.swarm_file("v1.toml", "echo one; exec sleep 3600");
    let v2 = s.swarm_file("v2.toml", "echo two; exit 7");
    let secret = s.dir.path().join("secret");
    std::fs::write(&secret, "hunter2").unwrap();
    let n = s.name.as_str();
    let verbs: Vec<Vec<&str>> = vec![
        vec!["declare", v1.to_str().unwrap()],
        vec!["deploy", n, "talker"],
        vec![
            "credential",
            "put",
            n,
            "talker",
            "smtp",
            "--from-file",
            secret.to_str().unwrap(),
        ],
        vec![
            "maintenance",
            "on",
            n,
            "--ttl",
            "1h",
            "--reason",
            "disk swap",
        ],
        vec!["maintenance", "off", n],
        vec!["declare", v2.to_str().unwrap()],
        vec!["rollback", n],
        vec!["knowledge-changed"],
        vec!["rollout", "abort"],
    ];
    let seen = || async { s.local.hive.ready().await.1["seen_revision"].as_u64() };
    for args in &verbs {
        let before = seen().await;
        let (code, out, err) = s.run(args).await;
        // `rollout abort` with no rollout fails, and is recorded too.
        let failing = args[0] == "rollout";
        assert_eq!(code == 0, !failing, "{args:?}: {out}{err}");
        assert!(!err.contains("not recorded"), "{args:?}: {err}");
        if args[0] == "declare" {
            // The hive checks a deploy against the declaration it holds:
            // the next verb waits until it holds this one (a hive just
            // started reads its key a moment after the put).
            wait_until(T, "the hive holds the new declaration", || async {
                let now = seen().await;
                (now.is_some() && now != before).then_some(())
            })
            .await;
        }
    }
    let audit: Vec<Value> = s
        .events(&[])
        .await
        .into_iter()
        .filter(|r| {
            r["subject"]
                .as_str()
                .unwrap()
                .starts_with("hyperhive.events.audit.")
        })
        .collect();
    let want: BTreeMap<String, usize> = [
        ("declare", 2),
        ("deploy", 1),
        ("credential_put", 1),
        ("maintenance_on", 1),
        ("maintenance_off", 1),
        ("rollback", 1),
        ("knowledge_changed", 1),
        ("rollout_abort", 1),
    ]
    .into_iter()
    .map(|(k, n)| (k.to_string(), n))
    .collect();
    assert_eq!(kinds(&audit), want, "{audit:#?}");
    for r in &audit {
        let by = r["event"]["by"].as_str().unwrap();
        assert!(by.starts_with("auditor@"), "{r}");
        assert!(by.contains("(controller "), "{r}");
        assert!(
            !r.to_string().contains("hunter2"),
            "no secret in the trail: {r}"
        );
    }
    let put = audit
        .iter()
        .find(|r| r["event"]["kind"] == "credential_put")
        .unwrap();
    assert_eq!(put["event"]["hives"], serde_json::json!([n]));
    assert_eq!(put["event"]["agent"], "talker");

    // The lifecycle, from the hive: v1 created and started it, v2 made it
    // exit with 7.
    let lifecycle = wait_until(T, "the hive's events of talker", || async {
        let rows = s.events(&["--hive", n, "--agent", "talker"]).await;
        let k = kinds(&rows);
        let exited = rows
            .iter()
            .any(|r| r["event"]["kind"] == "exited" && r["event"]["exit_code"] == 7);
        let delivered = k.contains_key("credential_delivered");
        (k.contains_key("created") && k.contains_key("started") && exited && delivered)
            .then_some(rows)
    })
    .await;
    // The credential's delivery, by name only.
    let delivered: Vec<&Value> = lifecycle
        .iter()
        .filter(|r| r["event"]["kind"] == "credential_delivered")
        .collect();
    assert_eq!(delivered.len(), 1, "{delivered:#?}");
    let said = delivered[0]["event"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        said.starts_with("credential smtp (revision "),
        "{}",
        delivered[0]
    );
    assert!(
        !delivered[0].to_string().contains("hunter2"),
        "{}",
        delivered[0]
    );
    for r in &lifecycle {
        let e = &r["event"];
        if e["hive"].is_string() {
            assert_eq!(e["hive"], n, "{r}");
            assert_eq!(e["agent"], "talker", "{r}");
            let subject = r["subject"].as_str().unwrap();
            assert!(
                subject.starts_with(&format!("hyperhive.events.hive.{n}.talker.")),
                "{r}"
            );
        }
    }
    // The selection holds: beta has no events and touched no verb here.
    assert!(s.events(&["--hive", "beta"]).await.is_empty());
    let (code, out, _) = s.run(&["events", "--hive", n]).await;
    assert_eq!(code, 0);
    assert!(out.contains(&format!("{n}/talker exited code 7")), "{out}");
    assert!(out.contains("audit declare by auditor@"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_other_identity_writes_a_hives_events_and_the_stream_keeps_its_limits() {
    let s = Setup::start(
        "audit-limits",
        "[events]\nmax_bytes = 1048576\nmax_age_secs = 3600",
    )
    .await;
    // Any verb makes the stream with the config's limits.
    let (code, _, err) = s.run(&["knowledge-changed"]).await;
    assert_eq!(code, 0, "{err}");
    let ctl = s.s.controller_conn().await;
    let js = jetstream::new(ctl.client.clone());
    let mut stream = js.get_stream(EVENTS_STREAM).await.unwrap();
    let info = stream.info().await.unwrap().clone();
    assert_eq!(info.config.max_bytes, 1_048_576);
    assert_eq!(info.config.max_age, Duration::from_secs(3600));
    assert_eq!(info.config.discard, jetstream::stream::DiscardPolicy::Old);

    // Beta's identity: into this hive's events and into the audit trail.
    let beta = s.s.hive_conn("beta").await;
    let hive = HiveName::new(&s.name).unwrap();
    let agent = AgentName::new("talker").unwrap();
    let forged = [
        hive_event_subject(&hive, Some(&agent), "started"),
        audit_subject("declare"),
    ];
    for subject in &forged {
        beta.client
            .publish(
                subject.clone(),
                "{\"schema\":1,\"kind\":\"started\"}".into(),
            )
            .await
            .unwrap();
        s.s.violation(Violation::Publish, &s.s.hive("beta").public, subject)
            .await;
    }
    // The hive's own identity may write its own prefix only.
    let own = s.s.hive_conn(&s.name).await;
    let other = hive_event_subject(&HiveName::new("beta").unwrap(), Some(&agent), "started");
    own.client
        .publish(other.clone(), "{}".into())
        .await
        .unwrap();
    s.s.violation(Violation::Publish, &s.s.hive(&s.name).public, &other)
        .await;
    let mine = hive_event_subject(&hive, Some(&agent), "flood");
    let filler = "x".repeat(3000);
    let body = format!("{{\"schema\":1,\"kind\":\"flood\",\"message\":\"{filler}\"}}");
    for _ in 0..1000 {
        own.client
            .publish(mine.clone(), body.clone().into())
            .await
            .unwrap();
    }
    own.client.flush().await.unwrap();
    let state = wait_until(T, "the flood stored", || async {
        let mut stream = js.get_stream(EVENTS_STREAM).await.ok()?;
        let st = stream.info().await.ok()?.state.clone();
        (st.last_sequence >= 1000).then_some(st)
    })
    .await;
    println!(
        "FIGURES audit_limits published_bytes={} stored_bytes={} stored_messages={}",
        1000 * body.len(),
        state.bytes,
        state.messages
    );
    assert!(state.bytes <= 1_048_576, "{state:?}");
    // Nothing forged got in.
    let rows = s.events(&[]).await;
    for r in &rows {
        let subject = r["subject"].as_str().unwrap();
        assert!(
            subject == mine || subject.starts_with("hyperhive.events.audit.knowledge"),
            "{subject}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_hold_ends_by_itself_and_says_so_once_with_two_controllers() {
    let s = Setup::start("audit-expiry", "").await;
    let (_one, _) =
        hyperhive_tests::process::serve_controller(&s.config, &s.dir.path().join("serve1.log"))
            .await;
    let (_two, _) =
        hyperhive_tests::process::serve_controller(&s.config, &s.dir.path().join("serve2.log"))
            .await;
    let n = s.name.as_str();
    let (code, _, err) = s
        .run(&["maintenance", "on", n, "--ttl", "3s", "--reason", "reboot"])
        .await;
    assert_eq!(code, 0, "{err}");
    let ctl = s.s.controller_conn().await;
    let js = jetstream::new(ctl.client.clone());
    let holds = js.get_key_value("hyperhive-maintenance").await.unwrap();
    let set_at = std::time::Instant::now();
    let rows = wait_until(T, "the hold's expiry in the event stream", || async {
        let rows = s.events(&["--hive", n]).await;
        rows.iter()
            .any(|r| r["event"]["kind"] == "maintenance_expired")
            .then_some(rows)
    })
    .await;
    let seen_ms = set_at.elapsed().as_millis();
    wait_until(T, "the expired hold removed", || async {
        holds.get(n).await.ok().flatten().is_none().then_some(())
    })
    .await;
    // Both controllers judged it: one event.
    let expired: Vec<&Value> = rows
        .iter()
        .filter(|r| r["event"]["kind"] == "maintenance_expired")
        .collect();
    assert_eq!(expired.len(), 1, "{rows:#?}");
    let e = &expired[0]["event"];
    assert_eq!(e["hives"], serde_json::json!([n]));
    assert!(e["message"].as_str().unwrap().contains("reboot"), "{e}");
    println!("FIGURES maintenance_expiry ttl_s=3 expired_event_seen_ms={seen_ms}");
    let again = s.events(&["--hive", n]).await;
    let count = again
        .iter()
        .filter(|r| r["event"]["kind"] == "maintenance_expired")
        .count();
    assert_eq!(count, 1, "{again:#?}");
    let (_, out, _) = s.run(&["maintenance", "list"]).await;
    assert!(!out.contains(n), "{out}");
}
