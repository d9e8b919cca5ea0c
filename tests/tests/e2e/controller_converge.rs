//! Every convergence state, and every freshness state a hive can be in,
//! reached with a real `hive` process converging on real declarations in
//! the real dockerd, as `swarm-controller status` reports them.
//!
//! How each state is produced:
//! - `unknown` (nothing declared): a fresh hive before any `declare`.
//! - `progressing`: the hive runs with the hive's test hook that holds jobs
//!   before their `start` node, so it has read the revision and cannot
//!   finish it.
//! - `converged`: the hive restarted without the hook; the held job resumes.
//! - `degraded`: `docker stop` of the agent's container (the reconciler is
//!   set to an hour, so nothing repairs it while we look).
//! - `failed`: an agent asking for 1024 CPUs, which dockerd refuses at
//!   create: a permanent failure of the job for that revision.
//! - `published`: the hive is killed, its status is still fresh, and a new
//!   revision is declared that it never reads.
//! - `unknown` (stale): the same, once the status is older than stale_after.
//! - freshness `stopped`: a clean shutdown.
//!
//! A second test sends `deploy` and `credential put` to a real hive: the
//! hive queues the job and answers with its id (or its own refusal), and
//! opens the sealed credential and writes it under its state dir.

use std::os::unix::fs::PermissionsExt;

use crate::controller_support::*;
use hyperhive_tests::docker::{docker, ContainerGuard, TestImage};
use hyperhive_tests::hive::{HiveProc, HiveSpec};
use hyperhive_tests::jobs::node;
use hyperhive_tests::{unique_name, wait_until};

const HOLD: (&str, &str) = ("HYPERHIVE_TEST_HOLD_BEFORE_NODE", "start");

fn swarm_file(hive: &str, image: &str, with_hog: bool, generation: u32) -> String {
    let mut text = format!(
        "[hives.{hive}.agents.web]\nimage = \"{image}\"\ncommand = [\"/bin/sleep\", \"3600\"]\n\
         env = {{ GENERATION = \"{generation}\" }}\n"
    );
    if with_hog {
        text.push_str(&format!(
            "\n[hives.{hive}.agents.hog]\nimage = \"{image}\"\ncommand = [\"/bin/sleep\", \"3600\"]\n\
             cpus = 1024.0\n"
        ));
    }
    text
}

async fn declare(env: &Env, name: &str, text: &str) {
    let path = env.write(name, text);
    let r = env.run(&["declare", path.to_str().unwrap()]).await;
    assert_eq!(r.code, 0, "{r:?}");
    println!("declare {name}:\n{}", r.stdout.trim_end());
}

async fn wait_convergence(env: &Env, hive: &str, want: &str) -> serde_json::Value {
    let row = env
        .wait_row(hive, &format!("convergence {want}"), |r| {
            r["convergence"] == want
        })
        .await;
    println!(
        "{want:>11} ({}): {}",
        row["freshness"].as_str().unwrap_or("?"),
        row["reason"].as_str().unwrap_or("?")
    );
    row
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_hive_goes_through_every_convergence_state() {
    let hive = unique_name("ctlcv");
    let env = Env::new(&[&hive], "stale_after_secs = 6").await;
    let _containers = ContainerGuard::new(&hive);
    let image = TestImage::busybox("ctlcv");
    let url = env.nats.url();
    let mut h = HiveProc::start(HiveSpec {
        name: Some(&hive),
        nats_url: Some(&url),
        extra: "reconcile_interval_secs = 3600",
        envs: &[HOLD],
        ..Default::default()
    });

    let row = env
        .wait_row(&hive, "the hive fresh", |r| r["freshness"] == "fresh")
        .await;
    assert_eq!(row["convergence"], "unknown");
    assert!(row["reason"]
        .as_str()
        .unwrap()
        .contains("nothing is declared"));

    // Read but held before `start`: progressing, naming the job.
    declare(
        &env,
        "v1.toml",
        &swarm_file(&hive, &image.reference, false, 1),
    )
    .await;
    let row = wait_convergence(&env, &hive, "progressing").await;
    let v1 = row["declared_revision"].as_u64().unwrap();
    assert_eq!(row["seen_revision"], v1, "{row}");

    // Once `create` is done (the hook holds `start`), restart without the
    // hook: the job resumes and the hive converges, with complete evidence.
    let job = row["agents"][0]["last_job"]["id"]
        .as_i64()
        .expect("a job id");
    let api = h.job_api().await;
    wait_until(T, "the create node done", || async {
        let j = api.job(job).await?;
        (node(&j, "create")["state"] == "done").then_some(())
    })
    .await;
    h.kill_and_restart(&[]);
    let row = wait_convergence(&env, &hive, "converged").await;
    assert_eq!(row["converged_revision"], v1);
    let web = &row["agents"][0];
    assert_eq!(
        (web["name"].as_str(), web["observed"].as_str()),
        (Some("web"), Some("running"))
    );
    assert_eq!(web["spec_matches"], true, "{row}");

    // Someone stops the container: degraded, naming the agent.
    let container = format!("hyperhive.{hive}.web");
    docker(&["stop", "-t", "1", &container]);
    let row = wait_convergence(&env, &hive, "degraded").await;
    assert!(
        row["reason"]
            .as_str()
            .unwrap()
            .contains("web stopped (wanted up)"),
        "{row}"
    );
    docker(&["start", &container]);
    wait_convergence(&env, &hive, "converged").await;

    // A job dockerd refuses for good: failed, with the hive's error.
    declare(
        &env,
        "v2.toml",
        &swarm_file(&hive, &image.reference, true, 1),
    )
    .await;
    let row = wait_convergence(&env, &hive, "failed").await;
    let reason = row["reason"].as_str().unwrap();
    assert!(
        reason.contains("hog: job") && reason.contains("failed"),
        "{row}"
    );

    // The hive dies; a new revision is declared that it never reads. Its
    // last status is still fresh: published.
    h.daemon.kill();
    declare(
        &env,
        "v3.toml",
        &swarm_file(&hive, &image.reference, false, 3),
    )
    .await;
    let row = wait_convergence(&env, &hive, "published").await;
    let v3 = row["declared_revision"].as_u64().unwrap();
    assert!(
        row["reason"]
            .as_str()
            .unwrap()
            .contains("only up to revision"),
        "{row}"
    );
    // Then its status ages past stale_after: unknown, because stale.
    let row = env
        .wait_row(&hive, "the hive stale", |r| r["freshness"] == "stale")
        .await;
    assert_eq!(row["convergence"], "unknown", "{row}");
    assert!(row["reason"].as_str().unwrap().contains("stale"), "{row}");
    println!("    unknown (stale): {}", row["reason"]);

    // Back up: it pulls revision v3 at boot and converges on it.
    h.daemon.start();
    let row = env
        .wait_row(&hive, "converged on v3", |r| {
            r["convergence"] == "converged" && r["converged_revision"] == v3
        })
        .await;
    assert_eq!(row["freshness"], "fresh");

    // A clean shutdown: stopped at once, and no claim about convergence.
    assert_eq!(h.daemon.terminate(), Some(0));
    let row = env
        .wait_row(&hive, "the hive stopped", |r| r["freshness"] == "stopped")
        .await;
    assert_eq!(row["convergence"], "unknown");
    println!("    stopped: {}", row["freshness_reason"]);
    drop(image);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_and_credential_put_reach_a_real_hive() {
    let hive = unique_name("ctlev");
    let (env, controller) = Env::with_controller_xkey(&[&hive]).await;
    let _containers = ContainerGuard::new(&hive);
    let image = TestImage::busybox("ctlev");
    let h = env.trusting_hive(&hive, &controller);
    declare(
        &env,
        "v1.toml",
        &swarm_file(&hive, &image.reference, false, 1),
    )
    .await;
    wait_convergence(&env, &hive, "converged").await;

    // deploy: the real hive queues a job and answers with its id.
    let r = env.run(&["deploy", &hive, "web", "--json"]).await;
    println!("deploy web: {}", r.stdout.trim());
    assert_eq!(r.code, 0, "{r:?}");
    let job = r.json()["job"].as_u64().expect("a job id");
    let api = h.job_api().await;
    wait_until(T, "the deployed job to finish", || async {
        let j = api.job(job as i64).await?;
        matches!(j["state"].as_str(), Some("done" | "failed")).then_some(())
    })
    .await;
    // An agent the hive does not declare: the hive's own refusal, printed.
    let r = env.run(&["deploy", &hive, "nobody"]).await;
    println!("deploy nobody: {}", r.stdout.trim());
    assert_eq!(r.code, 1);
    assert!(
        r.stdout.contains("refused") && r.stdout.contains("not declared"),
        "{r:?}"
    );

    // credential put: the hive opens it and writes it under its state dir.
    let secret = "s3cret for the real hive";
    let file = env.write("pw", secret);
    let r = env
        .run(&[
            "credential",
            "put",
            &hive,
            "web",
            "smtp",
            "--from-file",
            file.to_str().unwrap(),
        ])
        .await;
    assert_eq!(r.code, 0, "{r:?}");
    let delivered = h.state_dir.join("agents/web/credentials/smtp");
    let got = wait_until(T, "the hive to deliver the credential", || async {
        std::fs::read_to_string(&delivered).ok()
    })
    .await;
    assert_eq!(got, secret);
    let mode = std::fs::metadata(&delivered).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    println!("delivered to {} (mode {mode:o})", delivered.display());
    drop(image);
}
