//! Credential rotation with a real hive, real containers and a real
//! nats-server: `credential put`, a changed put, a put of the same value,
//! and `credential delete`, for two agents that read their credential when
//! they start (each writes what it read to `/state/seen` and a line to
//! `/state/starts`):
//!
//! - `rot` (`on_credential_change = "restart"`) is restarted through a
//!   `restart` job when its file first appears, when the value changes and
//!   when it is deleted, and not when the same value is put again or the
//!   hive boots: its `seen` follows the credential;
//! - `calm` (the default, `none`) keeps running (same `StartedAt`, one
//!   start) while its file is written, changed and removed.
//!
//! Then the two repair paths of "a delete marker is an order, a missing key
//! is not": a delete made while the hive is down removes the file at its
//! next boot, and a credentials bucket deleted and made again (the key
//! missing) keeps the file, on a notice and at boot.

use crate::controller_support::*;
use hyperhive_tests::docker::{docker, ContainerGuard, TestImage};
use hyperhive_tests::hive::HiveProc;
use hyperhive_tests::jobs::JobApi;
use hyperhive_tests::{unique_name, wait_until};
use serde_json::Value;
use swarm_queue_client::subjects::HiveSubjects;
use swarm_queue_client::{
    encode, open_or_create, AccountName, Bucket, BucketSettings, CredentialNotice,
};

/// Reads its credential at start, then waits; a TERM ends it at once.
const AGENT: &str = "trap 'exit 0' TERM; echo start >> /state/starts; \
    cat /state/credentials/smtp > /state/seen 2>/dev/null || echo none > /state/seen; \
    while :; do sleep 1 & wait $!; done";

fn swarm_file(hive: &str, image: &str) -> String {
    let mut text = String::new();
    for (agent, policy) in [
        ("rot", "on_credential_change = \"restart\"\n"),
        ("calm", ""),
    ] {
        text.push_str(&format!(
            "[hives.{hive}.agents.{agent}]\nimage = {image:?}\ncommand = [\"sh\", \"-c\", {AGENT:?}]\n\
             credentials = [\"smtp\"]\n{policy}\n"
        ));
    }
    text
}

/// The test's hive, its controller config and what it looks at.
struct Rig {
    env: Env,
    hive: String,
    h: HiveProc,
}

impl Rig {
    fn agent_file(&self, agent: &str, file: &str) -> std::path::PathBuf {
        self.h.state_dir.join("agents").join(agent).join(file)
    }

    fn credential(&self, agent: &str) -> Option<String> {
        std::fs::read_to_string(self.agent_file(agent, "credentials/smtp")).ok()
    }

    fn seen(&self, agent: &str) -> String {
        std::fs::read_to_string(self.agent_file(agent, "seen")).unwrap_or_default()
    }

    fn starts(&self, agent: &str) -> usize {
        std::fs::read_to_string(self.agent_file(agent, "starts"))
            .unwrap_or_default()
            .lines()
            .count()
    }

    fn started_at(&self, agent: &str) -> String {
        let name = format!("hyperhive.{}.{agent}", self.hive);
        docker(&["inspect", "--format", "{{.State.StartedAt}}", &name])
    }

    /// `credential put` of `secret`; the JSON it printed.
    async fn put(&self, agent: &str, secret: &str) -> Value {
        let file = self.env.write(&format!("{agent}.pw"), secret);
        let file = file.to_str().unwrap();
        let r = self
            .env
            .run(&[
                "credential",
                "put",
                &self.hive,
                agent,
                "smtp",
                "--from-file",
                file,
                "--json",
            ])
            .await;
        assert_eq!(r.code, 0, "{r:?}");
        r.json()
    }

    /// `credential delete --json`, which must succeed.
    async fn delete(&self, agent: &str) -> Value {
        let r = self
            .env
            .run(&["credential", "delete", &self.hive, agent, "smtp", "--json"])
            .await;
        assert_eq!(r.code, 0, "{r:?}");
        r.json()
    }

    /// The hive's events about `agent` of `kind`.
    async fn events(&self, agent: &str, kind: &str) -> Vec<Value> {
        let args = ["events", "--json", "--hive", &self.hive, "--agent", agent];
        let r = self.env.run(&args).await;
        assert_eq!(r.code, 0, "{r:?}");
        r.stdout
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|e| e["event"]["kind"] == kind)
            .collect()
    }

    /// Wait for an event of `kind` about `agent` whose message says
    /// `says`; its message.
    async fn wait_event(&self, agent: &str, kind: &str, says: &str) -> String {
        wait_until(T, &format!("{kind} of {agent} saying {says:?}"), || async {
            let events = self.events(agent, kind).await;
            events.iter().rev().find_map(|e| {
                let said = e["event"]["message"].as_str().unwrap_or_default();
                said.contains(says).then(|| said.to_string())
            })
        })
        .await
    }

    /// Wait until `agent` has had `n` restart jobs, all done.
    async fn wait_restarts(&self, api: &JobApi, agent: &str, n: usize) {
        wait_until(T, &format!("{n} restart jobs of {agent} done"), || async {
            let jobs = restart_jobs(api, agent).await;
            (jobs.len() == n && jobs.iter().all(|j| j["state"] == "done")).then_some(())
        })
        .await;
    }
}

async fn restart_jobs(api: &JobApi, agent: &str) -> Vec<Value> {
    let (code, body) = api
        .get(&format!("/api/v1/jobs?all=true&agent={agent}"))
        .await;
    assert_eq!(code, 200, "{body}");
    body["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["kind"] == "restart")
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_restarts_only_restart_agents_and_a_delete_removes_the_file() {
    let hive = unique_name("credrot");
    let (env, controller) = Env::with_controller_xkey(&[&hive]).await;
    let _containers = ContainerGuard::new(&hive);
    let image = TestImage::busybox("credrot");
    let h = env.trusting_hive(&hive, &controller);
    let rig = Rig { env, hive, h };
    let path = rig
        .env
        .write("swarm.toml", &swarm_file(&rig.hive, &image.reference));
    let r = rig.env.run(&["declare", path.to_str().unwrap()]).await;
    assert_eq!(r.code, 0, "{r:?}");
    rig.env
        .wait_row(&rig.hive, "converged", |r| r["convergence"] == "converged")
        .await;
    let api = rig.h.job_api().await;
    for agent in ["rot", "calm"] {
        wait_until(T, &format!("{agent} to start"), || async {
            (rig.seen(agent) == "none\n").then_some(())
        })
        .await;
    }
    let calm_started = rig.started_at("calm");

    // put: both files appear; rot restarts to read it, calm does not.
    for agent in ["rot", "calm"] {
        let stored = rig.put(agent, "one").await;
        println!("put {agent}: {stored}");
        wait_until(T, &format!("{agent}'s file"), || async {
            (rig.credential(agent).as_deref() == Some("one")).then_some(())
        })
        .await;
    }
    rig.wait_restarts(&api, "rot", 1).await;
    wait_until(T, "rot to read its new credential", || async {
        (rig.seen("rot") == "one").then_some(())
    })
    .await;
    let said = rig
        .wait_event("calm", "credential_delivered", "delivered")
        .await;
    assert!(!said.contains("restart"), "{said}");
    let rot_started = rig.started_at("rot");
    assert_eq!(rig.starts("rot"), 2);

    // A changed value: rot restarts (a new StartedAt, and it read "two").
    for agent in ["rot", "calm"] {
        let stored = rig.put(agent, "two").await;
        let revision = stored["revision"].as_u64().unwrap();
        let said = rig
            .wait_event(
                agent,
                "credential_delivered",
                &format!("(revision {revision})"),
            )
            .await;
        println!("{agent}: {said}");
        assert_eq!(said.contains("restart queued"), agent == "rot", "{said}");
        assert_eq!(rig.credential(agent).as_deref(), Some("two"));
    }
    rig.wait_restarts(&api, "rot", 2).await;
    wait_until(T, "rot to read the new value", || async {
        (rig.seen("rot") == "two").then_some(())
    })
    .await;
    assert_ne!(rig.started_at("rot"), rot_started, "rot was restarted");
    assert_eq!(rig.starts("rot"), 3);

    // The same value again, at a new revision: no change, no restart.
    let stored = rig.put("rot", "two").await;
    let revision = stored["revision"].as_u64().unwrap();
    let said = rig
        .wait_event(
            "rot",
            "credential_delivered",
            &format!("(revision {revision})"),
        )
        .await;
    assert!(!said.contains("restart"), "{said}");
    assert_eq!(restart_jobs(&api, "rot").await.len(), 2);

    // delete: both files go, each with its event; rot restarts once more.
    for agent in ["rot", "calm"] {
        let deleted = rig.delete(agent).await;
        println!("delete {agent}: {deleted}");
        assert_eq!(deleted["already_deleted"], false, "{deleted}");
        let said = rig
            .wait_event(agent, "credential_removed", "file removed")
            .await;
        println!("{agent}: {said}");
        assert_eq!(said.contains("restart queued"), agent == "rot", "{said}");
        assert_eq!(rig.credential(agent), None, "{agent}'s file is gone");
    }
    rig.wait_restarts(&api, "rot", 3).await;
    wait_until(T, "rot to start without its credential", || async {
        (rig.seen("rot") == "none\n").then_some(())
    })
    .await;
    let audit = rig.env.run(&["events", "--json"]).await;
    assert!(
        audit
            .stdout
            .contains("hyperhive.events.audit.credential_delete"),
        "{}",
        audit.stdout
    );

    // calm kept running through it all.
    assert_eq!(rig.started_at("calm"), calm_started);
    assert_eq!((rig.starts("calm"), rig.seen("calm")), (1, "none\n".into()));
    assert!(restart_jobs(&api, "calm").await.is_empty());
    println!(
        "rot: {} starts, 3 restart jobs; calm: 1 start, StartedAt {calm_started} kept",
        rig.starts("rot")
    );

    let rig = deleted_while_the_hive_was_down(rig).await;
    let rig = a_bucket_made_again_keeps_the_file(rig).await;
    // No boot of the hive restarted rot: its credential did not change.
    assert_eq!(restart_jobs(&rig.h.job_api().await, "rot").await.len(), 3);
    assert_eq!(rig.starts("rot"), 4);
    // The hive first: a running hive makes again the containers the
    // image's removal takes, and the image would be left dangling.
    drop(rig);
    drop(image);
}

/// A delete made while the hive is down removes the file at its next boot.
async fn deleted_while_the_hive_was_down(mut rig: Rig) -> Rig {
    rig.put("calm", "three").await;
    wait_until(T, "calm's file", || async {
        (rig.credential("calm").as_deref() == Some("three")).then_some(())
    })
    .await;
    rig.h.daemon.kill();
    let deleted = rig.delete("calm").await;
    println!("delete while down: {deleted}");
    assert_eq!(rig.credential("calm").as_deref(), Some("three"));
    rig.h.kill_and_restart(&[]);
    wait_until(T, "the file removed at boot", || async {
        rig.credential("calm").is_none().then_some(())
    })
    .await;
    let removed = rig.events("calm", "credential_removed").await;
    assert_eq!(removed.len(), 2, "{removed:#?}");
    println!("removed at boot: {}", removed[1]["event"]["message"]);
    rig
}

/// The credentials bucket deleted and made again: the key is missing, which
/// is no order, so the file stays, on a notice and at the next boot.
async fn a_bucket_made_again_keeps_the_file(mut rig: Rig) -> Rig {
    rig.put("calm", "four").await;
    wait_until(T, "calm's file", || async {
        (rig.credential("calm").as_deref() == Some("four")).then_some(())
    })
    .await;
    let js = async_nats::jetstream::new(rig.env.client.clone());
    js.delete_key_value(Bucket::Credentials.name())
        .await
        .unwrap();
    let settings = BucketSettings::default_for(Bucket::Credentials);
    open_or_create(&js, Bucket::Credentials, &settings)
        .await
        .unwrap();
    let hive = swarm_queue_client::HiveName::new(&rig.hive).unwrap();
    let notice = CredentialNotice::new(agent("calm"), AccountName::new("smtp").unwrap());
    let notice = encode(&notice).unwrap();
    let subject = HiveSubjects::new(&hive).credential;
    rig.env
        .client
        .publish(subject, notice.into())
        .await
        .unwrap();
    rig.env.client.flush().await.unwrap();
    wait_until(T, "the hive to find the key missing", || async {
        rig.h
            .daemon
            .log()
            .contains("is not in the credentials bucket")
            .then_some(())
    })
    .await;
    assert_eq!(rig.credential("calm").as_deref(), Some("four"));
    let passes = |log: &str| log.matches("credential delivery pass done").count();
    let before = passes(&rig.h.daemon.log());
    rig.h.kill_and_restart(&[]);
    wait_until(T, "a delivery pass after the boot", || async {
        (passes(&rig.h.daemon.log()) > before).then_some(())
    })
    .await;
    assert_eq!(rig.credential("calm").as_deref(), Some("four"));
    println!("bucket made again: calm's file kept (on the notice and at boot)");
    rig
}
