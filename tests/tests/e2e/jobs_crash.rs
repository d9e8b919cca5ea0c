//! SIGKILL a real `hive` in the middle of a job, start it again on the same
//! state, and check the job completes with exactly one container.
//!
//! Two points of death:
//! - **between create and start**: the hive runs with the test hook
//!   `HYPERHIVE_TEST_HOLD_BEFORE_NODE=start`, so the worker stops claiming
//!   at exactly that point; the test sees `create` done and the container
//!   created but not running, kills the process, and restarts it without
//!   the hook.
//! - **during a long image step**: no registry is reachable here (and none
//!   can be started offline), so the long step is a *build*: a context
//!   whose Dockerfile is `FROM <the local busybox test image>` plus a
//!   `RUN sleep` step. The test waits until the build is inside that step
//!   (the node's progress shows it), kills the hive, and restarts it. The
//!   image node runs again from the top: the cut-off attempt is counted.

use std::time::Duration;

use hyperhive_tests::docker::{docker, ContainerGuard, ImageGuard, TestImage};
use hyperhive_tests::hive::{HiveProc, HiveSpec};
use hyperhive_tests::jobs::node;
use hyperhive_tests::{unique_name, wait_until};
use serde_json::json;
use swarm_queue_client::containers::built_image_tag;
use swarm_queue_client::{AgentName, AgentSpec, BuildSpec, HiveName};

const T: Duration = Duration::from_secs(90);

fn containers(hive: &str) -> Vec<String> {
    docker(&[
        "ps",
        "-a",
        "--filter",
        &format!("label=org.hyperhive.hive={hive}"),
        "--format",
        "{{.ID}} {{.Names}} {{.State}}",
    ])
    .lines()
    .map(str::to_string)
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_between_create_and_start_resumes_with_one_container() {
    let hive_name = unique_name("crash-create");
    // Declared after the image, so dropped before it: containers go first.
    let image = TestImage::busybox("crash-create");
    let _containers = ContainerGuard::new(&hive_name);
    let mut hive = HiveProc::start(HiveSpec {
        name: Some(&hive_name),
        envs: &[("HYPERHIVE_TEST_HOLD_BEFORE_NODE", "start")],
        ..Default::default()
    });
    let api = hive.job_api().await;
    let job = api.deploy("a", json!({ "image": image.reference })).await;
    wait_until(T, "create done, start held", || async {
        let j = api.job(job).await?;
        (node(&j, "create")["state"] == "done" && node(&j, "start")["state"] == "ready")
            .then_some(())
    })
    .await;
    let before = containers(&hive_name);
    assert_eq!(before.len(), 1, "{before:?}");
    assert!(
        before[0].ends_with("created"),
        "created, not started: {before:?}"
    );

    hive.kill_and_restart(&[]);
    let api = hive.job_api().await;
    let done = api.done(job, T).await;
    assert_eq!(done["kind"], "first_deploy");
    let after = containers(&hive_name);
    assert_eq!(after.len(), 1, "{after:?}");
    let id = before[0].split(' ').next().unwrap();
    assert!(
        after[0].starts_with(id),
        "the same container: {before:?} -> {after:?}"
    );
    assert!(after[0].ends_with("running"), "{after:?}");
    assert_eq!(
        node(&done, "create")["attempts"],
        1,
        "create was not run again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_a_long_build_resumes_with_one_container() {
    let hive_name = unique_name("crash-build");
    let base = TestImage::busybox("crash-build");
    let context = tempfile::Builder::new()
        .prefix("hhtest-context-")
        .tempdir()
        .unwrap();
    std::fs::write(
        context.path().join("Dockerfile"),
        format!("FROM {}\nRUN sleep 4\n", base.reference),
    )
    .unwrap();
    let spec = AgentSpec {
        build: Some(BuildSpec {
            context: context.path().display().to_string(),
            git_ref: None,
            dockerfile: None,
        }),
        ..Default::default()
    };
    let tag = built_image_tag(
        &HiveName::new(hive_name.as_str()).unwrap(),
        &AgentName::new("a").unwrap(),
        &spec.spec_hash(),
    );
    // Dropped in reverse: containers, then the built image, then its base.
    let _built = ImageGuard {
        reference: tag.clone(),
    };
    let _containers = ContainerGuard::new(&hive_name);

    // A directory context must lie in one of the hive's build_roots.
    let roots = format!(
        "build_roots = [{:?}]\n",
        context.path().display().to_string()
    );
    let mut hive = HiveProc::start(HiveSpec {
        name: Some(&hive_name),
        extra: &roots,
        ..Default::default()
    });
    let api = hive.job_api().await;
    let job = api.deploy("a", serde_json::to_value(&spec).unwrap()).await;
    let detail = wait_until(T, "the build inside its RUN step", || async {
        let j = api.job(job).await?;
        let image = node(&j, "image");
        let detail = image["detail"].as_str().unwrap_or_default().to_string();
        (image["state"] == "running" && detail.contains("Running in")).then_some(detail)
    })
    .await;
    assert!(
        containers(&hive_name).is_empty(),
        "killed before any container: {detail}"
    );

    hive.kill_and_restart(&[]);
    let api = hive.job_api().await;
    let done = api.done(job, T).await;
    let image_node = node(&done, "image");
    assert_eq!(
        image_node["attempts"], 2,
        "the cut-off build ran again: {done:#}"
    );
    assert!(
        image_node["detail"]
            .as_str()
            .unwrap()
            .starts_with(&format!("built {tag} from ")),
        "{done:#}"
    );
    let after = containers(&hive_name);
    assert_eq!(after.len(), 1, "{after:?}");
    assert!(after[0].ends_with("running"), "{after:?}");
    assert_eq!(
        docker(&[
            "inspect",
            "--format",
            "{{.Config.Image}}",
            &format!("hyperhive.{hive_name}.a")
        ]),
        tag
    );
}
