//! Self-healing past the edges (issue 11), over a real nats-server and the
//! real dockerd: a failed job is tried again with no operator action (the
//! reconciler is level-triggered, each agent backs off on its own), hostile
//! container labels never stop the status publish, and a retired agent's
//! renamed container is removed once, not retired again and again.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use hyperhive_tests::docker::{docker, ContainerGuard, NamedContainerGuard, TestImage};
use hyperhive_tests::hive::{warning_keys, HiveProc, HiveSpec};
use hyperhive_tests::kv::{container, containers_of, Swarm};
use hyperhive_tests::{controller_bin, unique_name, wait_until, NatsServer};
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(120);

/// Rounds every second and a per-agent retry base of one second, so the
/// backoff shows in seconds rather than minutes.
const FAST: &str = "reconcile_interval_secs = 1\nagent_retry_base_secs = 1";

/// Wait for the hive's first status: by then it has made its buckets, so
/// the test's own bucket lookups do not race its creation.
async fn first_status(kv: &Swarm, hive: &str) {
    kv.status_until(hive, "the hive's first status", T, |_| true)
        .await;
}

fn decl(agents: Value) -> String {
    json!({ "schema": 1, "agents": agents }).to_string()
}

fn agent(image: &str) -> Value {
    json!({ "image": image, "command": ["/bin/sleep", "3600"] })
}

/// `swarm-controller status --json` for a roster of one hive.
fn controller_status(dir: &Path, url: &str, hive: &str) -> Value {
    let config = dir.join("controller.toml");
    std::fs::write(
        &config,
        format!("stale_after_secs = 30\n[nats]\nurl = {url:?}\n[hives.{hive:?}]\n"),
    )
    .unwrap();
    let out = Command::new(controller_bin())
        .arg("--config")
        .arg(&config)
        .args(["status", "--json"])
        .env_remove("HYPERHIVE_NATS_URL")
        .output()
        .expect("run the controller");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("status --json is JSON");
    report["hives"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["name"] == hive).cloned())
        .unwrap_or_else(|| panic!("no row for {hive} in {report:#}"))
}

/// A hive whose agent `web` is declared on an image that does not exist
/// yet (`late`; a test makes it by tagging `image`), with reconcile rounds
/// every second and per-agent retries starting at `retry_base_secs`.
/// Fields drop in order: the hive first, the server last.
struct LateImage {
    url: String,
    hive: String,
    late: String,
    revision: u64,
    h: HiveProc,
    kv: Swarm,
    _late_guard: hyperhive_tests::docker::ImageGuard,
    image: TestImage,
    _containers: ContainerGuard,
    _nats: NatsServer,
}

impl LateImage {
    async fn start(test: &str, retry_base_secs: u64) -> LateImage {
        let nats = NatsServer::start();
        let url = nats.url();
        let hive = unique_name(test);
        let containers = ContainerGuard::new(&hive);
        let image = TestImage::busybox(test);
        let late = format!("{}:late", unique_name(&format!("{test}-late")));
        let late_guard = hyperhive_tests::docker::ImageGuard {
            reference: late.clone(),
        };
        let kv = Swarm::connect(&url).await;
        let h = HiveProc::start(HiveSpec {
            name: Some(&hive),
            nats_url: Some(&url),
            extra: &format!(
                "reconcile_interval_secs = 1\nagent_retry_base_secs = {retry_base_secs}"
            ),
            ..Default::default()
        });
        first_status(&kv, &hive).await;
        let revision = kv
            .declare(&hive, &decl(json!({ "web": agent(&late) })))
            .await;
        LateImage {
            url,
            hive,
            late,
            revision,
            h,
            kv,
            _late_guard: late_guard,
            image,
            _containers: containers,
            _nats: nats,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_deploy_that_failed_is_retried_until_the_image_appears() {
    // A 20 s retry base: long enough to see the failure between tries
    // (each try is a job that itself takes about 30 s to give up).
    let LateImage {
        url,
        hive,
        image,
        late,
        kv,
        revision: r1,
        ..
    } = &LateImage::start("heal-img", 20).await;

    // The first deploy fails past all its attempts; the hive says it is
    // retrying, at which step, how often, and when.
    let s = kv
        .status_until(hive, "web failing with a retry", T, |s| {
            let a = &s["agents"]["web"];
            a["last_job"]["state"] == "failed" && a["retry"]["attempts"].as_u64() >= Some(1)
        })
        .await;
    let retry = &s["agents"]["web"]["retry"];
    assert_eq!(retry["step"], "image", "{s:#}");
    assert!(retry["next_try_in_secs"].is_u64(), "{s:#}");
    assert!(
        retry["error"]
            .as_str()
            .unwrap_or_default()
            .contains(late.as_str()),
        "the error names the image: {s:#}"
    );
    assert_eq!(s["agents"]["web"]["observed"], "missing");

    // The controller shows the retry reason.
    let dir = tempfile::tempdir().unwrap();
    let row = wait_until(T, "the controller shows the retry", || async {
        let row = controller_status(dir.path(), url, hive);
        let reason = row["reason"].as_str().unwrap_or_default();
        (reason.contains("web: job ")
            && reason.contains("failed at image, retr")
            && reason.contains("(attempt "))
        .then_some(row)
    })
    .await;
    assert_eq!(row["convergence"], "failed", "{row:#}");
    let agent_row = row["agents"]
        .as_array()
        .and_then(|a| a.iter().find(|a| a["name"] == "web"))
        .expect("web row");
    assert!(agent_row["retry"]["attempts"].is_u64(), "{agent_row:#}");

    // The image appears: the agent runs, with no operator action and no
    // new revision.
    docker(&["tag", &image.reference, late]);
    let s = kv.converged(hive, *r1, T).await;
    assert_eq!(s["agents"]["web"]["observed"], "running", "{s:#}");
    assert!(s["agents"]["web"]["retry"].is_null(), "reset: {s:#}");
    assert!(container(hive, "web").is_some_and(|(_, running, _)| running));
}

/// An operator's `hive deploy` does not wait out the agent's backoff: with
/// a retry base of an hour, the next automatic try is an hour away, and the
/// deploy runs the agent at once and clears the retry record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_deploy_skips_the_backoff_and_resets_it() {
    let LateImage {
        hive,
        image,
        late,
        kv,
        h,
        revision: r1,
        ..
    } = &LateImage::start("heal-op", 3600).await;
    let s = kv
        .status_until(hive, "web failing with a retry an hour away", T, |s| {
            let r = &s["agents"]["web"]["retry"];
            r["attempts"].as_u64() >= Some(1) && r["next_try_in_secs"].as_u64() > Some(600)
        })
        .await;
    assert_eq!(s["agents"]["web"]["observed"], "missing", "{s:#}");

    docker(&["tag", &image.reference, late]);
    let api = h.socket().await;
    let out = tokio::process::Command::new(hyperhive_tests::hive_bin())
        .args(["deploy", "web", "--wait"])
        .env("HYPERHIVE_API", &api)
        .output()
        .await
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "hive deploy web: {printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = kv.converged(hive, *r1, T).await;
    assert_eq!(s["agents"]["web"]["observed"], "running", "{s:#}");
    assert!(s["agents"]["web"]["retry"].is_null(), "reset: {s:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_down_longer_than_the_job_retry_window_heals_by_itself() {
    use hyperhive_tests::docker::PrivateDockerd;
    let nats = NatsServer::start();
    let image = TestImage::busybox("heal-dockerd");
    let mut dockerd = PrivateDockerd::start();
    dockerd.load_image(&image.reference);
    let hive = unique_name("heal-dockerd");
    let extra = format!("docker_host = {:?}\n{FAST}", dockerd.host());
    let _h = HiveProc::start(HiveSpec {
        name: Some(&hive),
        nats_url: Some(&nats.url()),
        extra: &extra,
        ..Default::default()
    });
    let kv = Swarm::connect(&nats.url()).await;
    first_status(&kv, &hive).await;
    dockerd.kill();
    let r1 = kv
        .declare(&hive, &decl(json!({ "a": agent(&image.reference) })))
        .await;
    // The first deploy uses up its own retries while Docker is away.
    let s = kv
        .status_until(&hive, "the first deploy failed", T, |s| {
            s["agents"]["a"]["last_job"]["state"] == "failed"
        })
        .await;
    assert!(
        s["agents"]["a"]["last_job"]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("Docker is unreachable"),
        "{s:#}"
    );
    dockerd.restart();
    let s = kv.converged(&hive, r1, T).await;
    assert_eq!(s["agents"]["a"]["observed"], "running", "{s:#}");
    let running = dockerd
        .cli(&[
            "inspect",
            "--format",
            "{{.State.Running}}",
            &format!("hyperhive.{hive}.a"),
        ])
        .unwrap_or_default();
    assert_eq!(running, "true", "{}", dockerd.log());
}

/// Create a container through Docker's raw API, with `labels_json` put into
/// the body byte for byte (so a test can send what the CLI would refuse).
fn create_raw(name: &str, image: &str, labels_json: &[u8]) -> Result<String, String> {
    let mut body = format!(
        "{{\"Image\":{image:?},\"Cmd\":[\"/bin/sleep\",\"3600\"],\"HostConfig\":{{\"NetworkMode\":\"none\"}},\"Labels\":"
    )
    .into_bytes();
    body.extend_from_slice(labels_json);
    body.push(b'}');
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &body).unwrap();
    let out = Command::new("curl")
        .args(["-sS", "--unix-socket", "/var/run/docker.sock"])
        .args(["-H", "Content-Type: application/json", "--data-binary"])
        .arg(format!("@{}", file.path().display()))
        .arg(format!("http://localhost/containers/create?name={name}"))
        .output()
        .map_err(|e| e.to_string())?;
    let answer: Value = serde_json::from_slice(&out.stdout)
        .map_err(|_| String::from_utf8_lossy(&out.stdout).into_owned())?;
    answer["Id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| answer.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_labels_never_stop_publishing() {
    let nats = NatsServer::start();
    let url = nats.url();
    let hive = unique_name("heal-hostile");
    let _containers = ContainerGuard::new(&hive);
    let image = TestImage::busybox("heal-hostile");
    let kv = Swarm::connect(&url).await;
    let h = HiveProc::start(HiveSpec {
        name: Some(&hive),
        nats_url: Some(&url),
        extra: FAST,
        ..Default::default()
    });
    first_status(&kv, &hive).await;
    let r1 = kv
        .declare(&hive, &decl(json!({ "web": agent(&image.reference) })))
        .await;
    kv.converged(&hive, r1, T).await;

    let ours = |agent: &str, spec: &str| {
        vec![
            "org.hyperhive.managed=true".to_string(),
            format!("org.hyperhive.hive={hive}"),
            format!("org.hyperhive.agent={agent}"),
            format!("org.hyperhive.spec={spec}"),
        ]
    };
    let plant = |name: &str, labels: Vec<String>| {
        let mut args = vec!["create", "--name", name, "--network", "none"];
        for l in &labels {
            args.extend(["--label", l.as_str()]);
        }
        args.extend([image.reference.as_str(), "/bin/sleep", "3600"]);
        docker(&args);
    };
    // A 4 KiB+ spec label with control characters, under a valid agent.
    let long_spec = format!(
        "sha256:{}\u{7}\u{1b}[31m\n{}",
        "f".repeat(64),
        "x".repeat(4200)
    );
    plant(
        &format!("hyperhive.{hive}.hostile"),
        ours("hostile", &long_spec),
    );
    // An agent label that is no agent name, with control characters.
    plant(&format!("odd-{hive}"), ours("Not\tA\nName", "sha256:\u{1}"));
    // A label claiming another hive on a container with this hive's name.
    let foreign = format!("hyperhive.{hive}.intruder");
    let _foreign_guard = NamedContainerGuard {
        name: foreign.clone(),
    };
    plant(
        &foreign,
        vec![
            "org.hyperhive.hive=some-other-hive".into(),
            "org.hyperhive.agent=intruder".into(),
        ],
    );
    // Invalid UTF-8 where Docker allows it: the raw API takes the bytes;
    // Docker's JSON decoder turns them into U+FFFD before storing them.
    let mut raw_labels = format!(
        "{{\"org.hyperhive.managed\":\"true\",\"org.hyperhive.hive\":\"{hive}\",\"org.hyperhive.agent\":\"rawbytes\",\"org.hyperhive.spec\":\"sha256:"
    )
    .into_bytes();
    raw_labels.extend_from_slice(b"\xff\xfe\xc3(");
    raw_labels.extend_from_slice(b"\"}");
    let raw = create_raw(
        &format!("hyperhive.{hive}.rawbytes"),
        &image.reference,
        &raw_labels,
    )
    .expect("Docker accepts a label body with invalid UTF-8");
    let stored = docker(&[
        "inspect",
        "--format",
        "{{index .Config.Labels \"org.hyperhive.spec\"}}",
        &raw,
    ]);
    assert!(
        stored.contains('\u{fffd}'),
        "Docker replaced the invalid bytes: {stored:?}"
    );

    // The hive keeps publishing: the entry's revision advances, and the
    // status is honest about the odd containers.
    let (start_rev, _) = kv.status(&hive).await.expect("a status");
    let (rev, s) = wait_until(T, "fresh status with the odd containers", || async {
        let (rev, s) = kv.status(&hive).await?;
        let keys = warning_keys(&s);
        (rev >= start_rev + 3
            && keys.iter().any(|k| k == "odd_containers")
            && s["agents"]["hostile"].is_object()
            && s["agents"]["rawbytes"].is_object())
        .then_some((rev, s))
    })
    .await;
    assert!(rev > start_rev);
    let hostile = &s["agents"]["hostile"];
    let shown = hostile["spec"].as_str().unwrap_or_default();
    assert!(shown.len() <= 80, "clipped: {hostile}");
    assert!(!shown.chars().any(char::is_control), "{hostile}");
    assert!(shown.starts_with("sha256:fff"), "{hostile}");
    let odd = s["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["key"] == "odd_containers")
        .unwrap();
    let msg = odd["message"].as_str().unwrap();
    assert!(msg.contains(&format!("odd-{hive}")), "{msg}");
    assert!(!msg.chars().any(char::is_control), "{msg}");
    assert!(s["agents"]["intruder"].is_null(), "another hive's: {s:#}");
    assert_eq!(s["ready"], true, "{s:#}");
    // The declared agent is untouched and still converged.
    assert_eq!(s["converged_revision"].as_u64(), Some(r1), "{s:#}");
    let (code, _) = h.ready().await;
    assert_eq!(code, 200);
    // The container of another hive is never touched.
    assert!(docker(&["inspect", "--format", "{{.Id}}", &foreign]).len() > 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renamed_container_of_a_retired_agent_is_removed_once() {
    let nats = NatsServer::start();
    let url = nats.url();
    let hive = unique_name("heal-rename");
    let _containers = ContainerGuard::new(&hive);
    let image = TestImage::busybox("heal-rename");
    let kv = Swarm::connect(&url).await;
    let h = HiveProc::start(HiveSpec {
        name: Some(&hive),
        nats_url: Some(&url),
        extra: &format!("{FAST}\norphan_grace_secs = 0"),
        ..Default::default()
    });
    first_status(&kv, &hive).await;
    let api = h.job_api().await;
    let r1 = kv
        .declare(
            &hive,
            &decl(json!({ "web": agent(&image.reference), "old": agent(&image.reference) })),
        )
        .await;
    kv.converged(&hive, r1, T).await;
    let renamed = format!("renamed-{hive}");
    let _renamed_guard = NamedContainerGuard {
        name: renamed.clone(),
    };
    docker(&["rename", &format!("hyperhive.{hive}.old"), &renamed]);

    let r2 = kv
        .declare(&hive, &decl(json!({ "web": agent(&image.reference) })))
        .await;
    let s = kv.converged(&hive, r2, T).await;
    assert!(s["agents"]["old"].is_null(), "{s:#}");
    let left = containers_of(&hive);
    assert!(
        !left.contains(&renamed),
        "the renamed container is gone: {left:?}"
    );

    // Several more rounds (one a second; each status put is at least a
    // second apart): no retire is queued again.
    let (rev, _) = kv.status(&hive).await.unwrap();
    wait_until(T, "five more status puts", || async {
        let (now, _) = kv.status(&hive).await?;
        (now >= rev + 5).then_some(())
    })
    .await;
    let (_, jobs) = api.get("/api/v1/jobs?all=true").await;
    let retires = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["kind"] == "retire" && j["agent"] == "old")
        .count();
    assert_eq!(retires, 1, "{jobs:#}");
}
