//! A task that dies is noticed, named and restarted, over a real hive
//! process, nats-server and dockerd.
//!
//! The hive runs with the `test-hooks` feature's kill hook
//! (`HYPERHIVE_TEST_KILL_DIR`): a file `<dir>/<task>` makes that task panic
//! (`panic`) or return (`return`) once. For the event listener and the
//! wanted watch, each an essential task, the test checks what the swarm
//! reads in `hyperhive-status`: a status with `ready: false` and the
//! warning `task_<name>`, then `ready: true` again without it once the
//! supervisor restarted the task; and that the task works after the
//! restart (a deploy request is answered, a new declaration converges).

use std::time::Duration;

use async_nats::jetstream::kv;
use futures_util::StreamExt;
use hyperhive_tests::docker::{ContainerGuard, TestImage};
use hyperhive_tests::hive::{warning_keys, HiveProc, HiveSpec};
use hyperhive_tests::kv::{container, Swarm};
use hyperhive_tests::{unique_name, NatsServer};
use serde_json::{json, Value};
use swarm_queue_client::subjects::HiveSubjects;
use swarm_queue_client::{AgentName, DeployReply, DeployRequest, HiveName};

const T: Duration = Duration::from_secs(90);

fn decl(image: &str, agents: &[&str]) -> String {
    let agents: serde_json::Map<String, Value> = agents
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

/// Every status the hive publishes, in order.
struct Statuses(kv::Watch);

impl Statuses {
    async fn watch(swarm: &Swarm, hive: &str) -> Statuses {
        let store = swarm.bucket("hyperhive-status").await;
        Statuses(store.watch(hive).await.expect("watch the status key"))
    }

    /// The first published status (from now on) that satisfies `check`.
    async fn until(&mut self, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let found = tokio::time::timeout(T, async {
            while let Some(entry) = self.0.next().await {
                let entry = entry.expect("status watch");
                let Ok(status) = serde_json::from_slice::<Value>(&entry.value) else {
                    continue;
                };
                if check(&status) {
                    return Some(status);
                }
            }
            None
        })
        .await;
        match found {
            Ok(Some(s)) => s,
            Ok(None) => panic!("the status watch ended before {what}"),
            Err(_) => panic!("timed out after {T:?} waiting for {what}"),
        }
    }
}

fn warning<'a>(status: &'a Value, key: &str) -> Option<&'a str> {
    status["warnings"]
        .as_array()?
        .iter()
        .find(|w| w["key"] == key)?["message"]
        .as_str()
}

/// Tell `task` to die through the kill hook; wait for the published status
/// that says it is down (not ready, the warning naming it) and then for the
/// one that says it is back.
async fn kill_and_see_it_come_back(
    statuses: &mut Statuses,
    kill_dir: &std::path::Path,
    task: &str,
    order: &str,
    said: &str,
) {
    let key = format!("task_{task}");
    std::fs::write(kill_dir.join(task), order).unwrap();
    let down = statuses
        .until(&format!("a not-ready status naming {key}"), |s| {
            s["ready"] == false && warning(s, &key).is_some()
        })
        .await;
    let message = warning(&down, &key).unwrap();
    assert!(
        message.contains(&format!("task {task} is down"))
            && message.contains(said)
            && message.contains("not ready"),
        "{message}"
    );
    assert_eq!(down["state"], "failing", "{down}");
    let up = statuses
        .until(&format!("a ready status without {key}"), |s| {
            s["ready"] == true && warning(s, &key).is_none()
        })
        .await;
    assert!(
        !warning_keys(&up).iter().any(|k| k.starts_with("task_")),
        "{up}"
    );
}

#[tokio::test]
async fn a_dead_event_listener_or_wanted_watch_is_named_restarted_and_works_again() {
    let nats = NatsServer::start();
    let url = nats.url();
    let hive = unique_name("sup");
    let img = TestImage::busybox("sup");
    let _guard = ContainerGuard::new(&hive);
    let kill_dir = tempfile::Builder::new()
        .prefix("hhtest-kill-")
        .tempdir()
        .unwrap();
    let kill_env = kill_dir.path().display().to_string();
    let swarm = Swarm::connect(&url).await;
    let h = HiveProc::start(HiveSpec {
        name: Some(&hive),
        nats_url: Some(&url),
        envs: &[("HYPERHIVE_TEST_KILL_DIR", &kill_env)],
        ..Default::default()
    });
    let rev = swarm.declare(&hive, &decl(&img.reference, &["app"])).await;
    swarm.converged(&hive, rev, T).await;
    let mut statuses = Statuses::watch(&swarm, &hive).await;

    // The event listener panics; the supervisor restarts it after 1 s.
    kill_and_see_it_come_back(
        &mut statuses,
        kill_dir.path(),
        "events",
        "panic",
        "panicked",
    )
    .await;
    let subject = HiveSubjects::new(&HiveName::new(&hive).unwrap()).deploy;
    let req =
        swarm_queue_client::encode(&DeployRequest::new(AgentName::new("app").unwrap())).unwrap();
    let msg = swarm
        .client
        .request(subject, req.into())
        .await
        .expect("the restarted listener answers");
    let job = match DeployReply::decode(&msg.payload).unwrap() {
        DeployReply::Queued { job } => job,
        other => panic!("deploy refused: {other:?}"),
    };
    let api = h.job_api().await;
    let done = api.done(job as i64, T).await;
    assert_eq!(done["state"], "done", "{done}");

    // The wanted watch returns; once restarted, a new declaration converges.
    kill_and_see_it_come_back(
        &mut statuses,
        kill_dir.path(),
        "wanted",
        "return",
        "stopped by the test hook",
    )
    .await;
    let rev = swarm
        .declare(&hive, &decl(&img.reference, &["app", "second"]))
        .await;
    swarm.converged(&hive, rev, T).await;
    assert!(container(&hive, "second").is_some_and(|(_, running, _)| running));

    let log = h.daemon.log();
    assert!(
        log.contains("task ended; restarting it after a backoff"),
        "{log}"
    );
    assert!(log.contains("restarting the task"), "{log}");
}
