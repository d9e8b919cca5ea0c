//! Health checks over a real `hive`, dockerd, nats-server and the
//! controller's `status --json`: a spec's `health` becomes Docker's health
//! check, an image's own HEALTHCHECK is honoured, the hive reports what
//! Docker observes, an unhealthy agent makes the hive `degraded` (at the
//! hive and at the controller, naming the agent), and healthy ones let the
//! revision converge.

use crate::controller_support::*;
use hyperhive_tests::docker::{docker, remove_image, ContainerGuard, TestImage};
use hyperhive_tests::hive::{HiveProc, HiveSpec};
use hyperhive_tests::unique_name;

/// An image built on `base` with its own HEALTHCHECK (passes once
/// `/state/ok` exists); removed on drop.
struct HealthImage(String);

impl HealthImage {
    fn build(base: &str) -> HealthImage {
        let tag = format!("{}:1", unique_name("own-health"));
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("Dockerfile"),
            format!(
                "FROM {base}\nHEALTHCHECK --interval=1s --timeout=1s --retries=1 CMD [\"cat\", \"/state/ok\"]\n"
            ),
        )
        .unwrap();
        docker(&["build", "-q", "-t", &tag, dir.path().to_str().unwrap()]);
        HealthImage(tag)
    }
}

impl Drop for HealthImage {
    fn drop(&mut self) {
        remove_image(&self.0);
    }
}

fn swarm_file(hive: &str, image: &str, own: &str, bad_check: &str) -> String {
    let health = |file: &str| {
        format!(
            "[hives.{hive}.agents.{{}}.health]\ncommand = [\"cat\", \"/state/{file}\"]\n\
             interval_secs = 1\ntimeout_secs = 1\nretries = 1\n"
        )
    };
    format!(
        "[hives.{hive}.agents.good]\nimage = \"{image}\"\n\
         command = [\"sh\", \"-c\", \"touch /state/ok; exec sleep 3600\"]\n\
         {}\n\
         [hives.{hive}.agents.bad]\nimage = \"{image}\"\n\
         command = [\"sh\", \"-c\", \"touch /state/ok; exec sleep 3600\"]\n\
         {}\n\
         [hives.{hive}.agents.own]\nimage = \"{own}\"\n\
         command = [\"sh\", \"-c\", \"touch /state/ok; exec sleep 3600\"]\n",
        health("ok").replace("{}", "good"),
        health(bad_check).replace("{}", "bad"),
    )
}

async fn declare(env: &Env, name: &str, text: &str) {
    let path = env.write(name, text);
    let r = env.run(&["declare", path.to_str().unwrap()]).await;
    assert_eq!(r.code, 0, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unhealthy_agent_degrades_the_hive_and_healthy_ones_converge() {
    let hive = unique_name("health");
    let env = Env::new(&[&hive], "").await;
    let _containers = ContainerGuard::new(&hive);
    let image = TestImage::busybox("health");
    let own = HealthImage::build(&image.reference);
    let url = env.nats.url();
    let h = HiveProc::start(HiveSpec {
        name: Some(&hive),
        nats_url: Some(&url),
        extra: "reconcile_interval_secs = 1",
        ..Default::default()
    });

    // `bad` checks a file that never exists: unhealthy after one failure.
    declare(
        &env,
        "v1.toml",
        &swarm_file(&hive, &image.reference, &own.0, "never"),
    )
    .await;
    let row = env
        .wait_row(&hive, "degraded by the unhealthy agent", |r| {
            r["convergence"] == "degraded"
                && r["reason"]
                    .as_str()
                    .unwrap_or("")
                    .contains("bad is unhealthy")
        })
        .await;
    println!("controller: {} — {}", row["convergence"], row["reason"]);
    let (_, ready) = h.ready().await;
    assert_eq!(ready["state"], "degraded", "{ready}");
    let warning = ready["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["key"] == "agent_health")
        .unwrap_or_else(|| panic!("no agent_health warning: {ready}"));
    assert_eq!(
        warning["message"], "agent bad is unhealthy: its health check fails",
        "{ready}"
    );
    assert_eq!(ready["agents"]["bad"]["health"], "unhealthy", "{ready}");
    assert_eq!(ready["agents"]["good"]["health"], "healthy", "{ready}");
    // The image's own HEALTHCHECK, with no `health` in the spec.
    assert_eq!(ready["agents"]["own"]["health"], "healthy", "{ready}");
    let check = docker(&[
        "inspect",
        "--format",
        "{{json .Config.Healthcheck}}",
        &format!("hyperhive.{hive}.good"),
    ]);
    assert!(
        check.contains(r#""Test":["CMD","cat","/state/ok"]"#)
            && check.contains(r#""Interval":1000000000"#),
        "the spec's health check is not Docker's: {check}"
    );

    // Fixed: every agent with a check is healthy, and the revision converges.
    declare(
        &env,
        "v2.toml",
        &swarm_file(&hive, &image.reference, &own.0, "ok"),
    )
    .await;
    let row = env
        .wait_row(&hive, "converged once healthy", |r| {
            r["convergence"] == "converged"
        })
        .await;
    println!("controller: {} — {}", row["convergence"], row["reason"]);
    let (_, ready) = h.ready().await;
    assert_eq!(ready["state"], "ok", "{ready}");
    for agent in ["good", "bad", "own"] {
        assert_eq!(
            ready["agents"][agent]["health"], "healthy",
            "{agent}: {ready}"
        );
    }
}
