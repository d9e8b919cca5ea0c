//! Pulls from a real registry with htpasswd authentication (Debian's
//! `docker-registry`), through a real `hive`, nats-server and dockerd: the
//! login from `registry_auth_file` goes with the pull, its progress reaches
//! `HiveStatus` and `hive deploy --wait`, a wrong login is a clear error, and
//! the password is nowhere: not in a log, a KV value or the job database.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use hyperhive_tests::docker::ContainerGuard;
use hyperhive_tests::hive::{HiveProc, HiveSpec};
use hyperhive_tests::kv::{container, Swarm};
use hyperhive_tests::registry::{write_auth_file, Registry, SlowProxy};
use hyperhive_tests::{hive_bin, unique_name, wait_until, NatsServer};
use serde_json::{json, Value};
use swarm_queue_client::subjects::HiveSubjects;
use swarm_queue_client::{AgentName, DeployRequest, HiveName};

const T: Duration = Duration::from_secs(90);
const USER: &str = "hh-user";
/// Pulls go through a proxy this slow, so a 3 MB layer takes about 2 s and
/// its progress can be seen.
const RATE: usize = 1_500_000;

/// Fields drop in order: the hive, its containers, then the images pulled
/// through the proxy, the registry, and NATS.
struct Setup {
    hive_name: String,
    hive: HiveProc,
    _containers: ContainerGuard,
    proxy: SlowProxy,
    registry: Registry,
    nats: NatsServer,
    dir: tempfile::TempDir,
}

fn password() -> String {
    format!("pw-{}-Zq9x", unique_name("secret"))
}

/// A hive whose `registry_auth_file` holds `login_password` for the
/// proxy's address; the registry accepts `password`.
fn setup(test: &str, password: &str, login_password: &str) -> Setup {
    setup_with(test, password, login_password, "")
}

fn setup_with(test: &str, password: &str, login_password: &str, extra: &str) -> Setup {
    let hive_name = unique_name(test);
    let containers = ContainerGuard::new(&hive_name);
    let nats = NatsServer::start();
    let registry = Registry::start(USER, password);
    let proxy = SlowProxy::start(registry.port(), RATE);
    let dir = tempfile::Builder::new()
        .prefix("hhtest-auth-")
        .tempdir()
        .unwrap();
    let auth = dir.path().join("config.json");
    write_auth_file(&auth, &proxy.host(), USER, login_password);
    let extra = format!(
        "registry_auth_file = {:?}\n{extra}",
        auth.display().to_string()
    );
    let hive = HiveProc::start(HiveSpec {
        name: Some(&hive_name),
        nats_url: Some(&nats.url()),
        extra: &extra,
        ..Default::default()
    });
    Setup {
        hive_name,
        hive,
        _containers: containers,
        proxy,
        registry,
        nats,
        dir,
    }
}

impl Setup {
    /// Push a fresh image and return its reference through the proxy; it
    /// is absent from the local dockerd.
    fn push(&self, repo: &str) -> String {
        let (reference, _) = self.push_digest(repo);
        assert!(
            !image_present(&reference),
            "{reference} must be absent before the test pulls it"
        );
        reference
    }

    /// Push a fresh image under `repo:1` (again: the tag moves); its
    /// reference through the proxy and the digest the registry gave it.
    fn push_digest(&self, repo: &str) -> (String, String) {
        let pushed = self.registry.push_new_image(repo, "1", 3_000_000);
        let reference = pushed
            .reference
            .replace(&self.registry.host(), &self.proxy.host());
        (reference, pushed.digest)
    }

    /// `hive deploy AGENT --spec FILE --wait`: (exit code, stdout, stderr).
    async fn deploy_wait(&self, agent: &str, image: &str) -> (i32, String, String) {
        let spec = self.dir.path().join(format!("{agent}.json"));
        std::fs::write(&spec, json!({ "image": image }).to_string()).unwrap();
        let api = self.hive.socket().await;
        let out = tokio::process::Command::new(hive_bin())
            .args([
                "deploy",
                agent,
                "--spec",
                &spec.display().to_string(),
                "--wait",
            ])
            .env("HYPERHIVE_API", api)
            .output()
            .await
            .expect("run hive deploy");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    }

    /// Every place the password could leak to: the hive's log, every KV
    /// value of every bucket, and the job database.
    async fn assert_password_nowhere(&self, password: &str, also: &str) {
        let b64 = base64::engine::general_purpose::STANDARD;
        let needles = [
            password.to_string(),
            b64.encode(format!("{USER}:{password}")),
            b64.encode(password),
        ];
        let mut haystacks = vec![("hive log".to_string(), self.hive.daemon.log().into_bytes())];
        haystacks.push(("command output".into(), also.as_bytes().to_vec()));
        for file in ["hive.db", "hive.db-wal"] {
            if let Ok(bytes) = std::fs::read(self.hive.state_dir.join(file)) {
                haystacks.push((file.to_string(), bytes));
            }
        }
        let kv = Swarm::connect(&self.nats.url()).await;
        let mut buckets = kv.js.stream_names();
        use futures_util::StreamExt;
        let mut scanned = 0;
        while let Some(Ok(stream)) = buckets.next().await {
            let Some(bucket) = stream.strip_prefix("KV_") else {
                continue;
            };
            let store = kv.js.get_key_value(bucket).await.unwrap();
            let mut keys = store.keys().await.unwrap();
            while let Some(Ok(key)) = keys.next().await {
                let mut history = store.history(&key).await.unwrap();
                while let Some(Ok(entry)) = history.next().await {
                    scanned += 1;
                    haystacks.push((format!("{bucket}/{key}"), entry.value.to_vec()));
                }
            }
        }
        assert!(scanned > 0, "no KV value was scanned");
        for (place, bytes) in &haystacks {
            let text = String::from_utf8_lossy(bytes);
            for needle in &needles {
                assert!(
                    !text.contains(needle.as_str()),
                    "the registry password is in {place}"
                );
            }
        }
    }
}

fn image_present(reference: &str) -> bool {
    hyperhive_tests::docker_cli::run(&["image", "inspect", reference])
        .map(|o| o.status.success())
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authenticated_pull_runs_the_agent_and_shows_its_progress() {
    let pw = password();
    let s = setup("reg-pull", &pw, &pw);
    let kv = Swarm::connect(&s.nats.url()).await;

    // The declared path: progress is seen in the published `HiveStatus`.
    let image = s.push("hh/app");
    let declaration = json!({ "schema": 1, "agents": { "app": { "image": image } } });
    let revision = kv.declare(&s.hive_name, &declaration.to_string()).await;
    let progress = Arc::new(Mutex::new(BTreeSet::<String>::new()));
    let seen = wait_until(T, "the agent to run from the pulled image", || {
        let (kv, hive, progress) = (kv.clone(), s.hive_name.clone(), progress.clone());
        async move {
            let (_, status) = kv.status(&hive).await?;
            if let Some(line) = status["agents"]["app"]["image_progress"].as_str() {
                progress.lock().unwrap().insert(line.to_string());
            }
            let running = container(&hive, "app").is_some_and(|(_, running, _)| running);
            let converged = status["converged_revision"].as_u64() >= Some(revision);
            (running && converged).then(|| progress.lock().unwrap().clone())
        }
    })
    .await;
    println!("image_progress values published while pulling: {seen:?}");
    assert!(
        seen.iter().any(|p| p.starts_with("layers ")),
        "no pull progress reached the published HiveStatus: {seen:?}"
    );
    assert!(image_present(&image), "{image} is local after the pull");

    // The operator's path: `hive deploy --wait` prints the pull's tally.
    let image2 = s.push("hh/tool");
    let (code, out, err) = s.deploy_wait("tool", &image2).await;
    println!("hive deploy --wait printed:\n{out}{err}");
    assert_eq!(code, 0, "deploy failed:\n{out}{err}");
    assert!(
        out.lines()
            .any(|l| l.contains(" image ") && l.contains("layers ")),
        "no progress line in:\n{out}"
    );
    // It ran: `tool` is not in the hive's declaration, so the converger,
    // woken by the job's end, retires it at once (before Docker's events
    // drove it, that took until the next reconcile round).
    assert!(
        out.lines()
            .any(|l| l.contains(" start ") && l.contains("done") && l.contains("running")),
        "the deploy did not start the pulled image:\n{out}"
    );
    s.assert_password_nowhere(&pw, &format!("{out}{err}")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_login_is_a_clear_error_naming_the_registry_and_not_the_password() {
    let pw = password();
    let wrong = password();
    let s = setup("reg-wrong", &pw, &wrong);
    let image = s.push("hh/app");
    let (code, out, err) = s.deploy_wait("app", &image).await;
    println!("hive deploy --wait printed:\n{out}{err}");
    assert_ne!(code, 0, "a refused pull must fail the deploy:\n{out}{err}");
    let text = format!("{out}{err}");
    assert!(
        text.contains(&format!("registry {} refused the pull", s.proxy.host())),
        "the error does not name the registry:\n{text}"
    );
    assert!(
        text.contains(&format!("user \"{USER}\"")) && text.contains("config.json"),
        "the error does not say which login was sent:\n{text}"
    );
    assert!(container(&s.hive_name, "app").is_none());
    // Neither password may appear, the wrong one sent nor the right one.
    s.assert_password_nowhere(&wrong, &text).await;
    s.assert_password_nowhere(&pw, &text).await;

    // A fixed file is read again on the next pull, without a restart.
    let auth = s.dir.path().join("config.json");
    write_auth_file(&auth, &s.proxy.host(), USER, &pw);
    let (code, out, err) = s.deploy_wait("app", &image).await;
    assert_eq!(code, 0, "deploy after fixing the login failed:\n{out}{err}");
}

/// The digest the hive publishes for `agent`, once its container runs.
async fn digest_of(kv: &Swarm, hive: &str, agent: &str, want: &str) -> Value {
    kv.status_until(hive, &format!("{agent} reported running {want}"), T, |s| {
        s["agents"][agent]["observed"] == "running" && s["agents"][agent]["image_digest"] == want
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_tag_is_picked_up_by_a_relock_and_never_by_a_reconcile() {
    let pw = password();
    let s = setup_with("reg-digest", &pw, &pw, "reconcile_interval_secs = 1\n");
    let kv = Swarm::connect(&s.nats.url()).await;
    let (image, d1) = s.push_digest("hh/app");
    let declaration = json!({ "schema": 1, "agents": { "app": { "image": image } } });
    let revision = kv.declare(&s.hive_name, &declaration.to_string()).await;
    kv.converged(&s.hive_name, revision, T).await;
    let status = digest_of(&kv, &s.hive_name, "app", &d1).await;
    println!(
        "published after the pull: agents.app = {}",
        status["agents"]["app"]
    );

    // The tag moves in the registry.
    let (_, d2) = s.push_digest("hh/app");
    assert_ne!(d1, d2);

    // A reconcile round that re-creates the container uses the image the
    // hive has: the digest it locked, not the moved tag.
    let (old_id, _, _) = container(&s.hive_name, "app").unwrap();
    hyperhive_tests::docker::docker(&["rm", "-f", &old_id]);
    wait_until(T, "the reconciler to re-create app", || async {
        container(&s.hive_name, "app")
            .filter(|(id, running, _)| *id != old_id && *running)
            .map(|_| ())
    })
    .await;
    let status = digest_of(&kv, &s.hive_name, "app", &d1).await;
    assert_eq!(status["agents"]["app"]["image_digest"], d1.as_str());

    // An operator's relocking rebuild picks the moved tag up.
    let api = s.hive.socket().await;
    let out = tokio::process::Command::new(hive_bin())
        .args(["rebuild", "app", "--relock", "--wait"])
        .env("HYPERHIVE_API", &api)
        .output()
        .await
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "rebuild failed: {printed}");
    digest_of(&kv, &s.hive_name, "app", &d2).await;

    // So does a deploy event from the swarm (it relocks).
    let (_, d3) = s.push_digest("hh/app");
    let subject = HiveSubjects::new(&HiveName::new(&s.hive_name).unwrap()).deploy;
    let req =
        swarm_queue_client::encode(&DeployRequest::new(AgentName::new("app").unwrap())).unwrap();
    let reply = kv.client.request(subject, req.into()).await.unwrap();
    println!(
        "deploy event answered {}",
        String::from_utf8_lossy(&reply.payload)
    );
    let status = digest_of(&kv, &s.hive_name, "app", &d3).await;
    println!(
        "published after the deploy event: agents.app = {}",
        status["agents"]["app"]
    );

    // A spec may pin a digest: the pinned agent runs d1 whatever the tag says.
    let repo = image.rsplit_once(':').unwrap().0;
    let pinned = format!("{repo}@{d1}");
    let declaration = json!({ "schema": 1, "agents": {
        "app": { "image": image },
        "pinned": { "image": pinned }
    } });
    let revision = kv.declare(&s.hive_name, &declaration.to_string()).await;
    kv.converged(&s.hive_name, revision, T).await;
    digest_of(&kv, &s.hive_name, "pinned", &d1).await;
    digest_of(&kv, &s.hive_name, "app", &d3).await;
}

/// Local image ids whose repository is `repo` (tagged or not) and their
/// total size in bytes, as `docker image inspect` reports it.
fn local_images_of(repo: &str) -> (BTreeSet<String>, u64) {
    let out = hyperhive_tests::docker::docker(&[
        "images",
        "-a",
        "--no-trunc",
        "--format",
        "{{.Repository}} {{.ID}}",
    ]);
    let mut ids: BTreeSet<String> = out
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(r, _)| *r == repo)
        .map(|(_, id)| id.to_string())
        .collect();
    // The hive's cleanup runs meanwhile: an image removed between the list
    // and its inspect is gone, not an error.
    let mut size = 0;
    ids.retain(|id| {
        let out =
            hyperhive_tests::docker_cli::run(&["image", "inspect", "--format", "{{.Size}}", id])
                .unwrap_or_else(|e| panic!("{e}"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() && stderr.to_lowercase().contains("no such image") {
            return false;
        }
        assert!(out.status.success(), "docker image inspect {id}: {stderr}");
        size += String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<u64>()
            .unwrap_or(0);
        true
    });
    (ids, size)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_rebuilds_keep_the_current_and_previous_image_and_no_foreign_one_is_touched() {
    let pw = password();
    let s = setup("reg-clean", &pw, &pw);
    let kv = Swarm::connect(&s.nats.url()).await;
    let foreign = hyperhive_tests::docker::TestImage::busybox("foreign");
    let image = s.push("hh/app");
    let repo = image.rsplit_once(':').unwrap().0.to_string();
    let declaration = json!({ "schema": 1, "agents": { "app": { "image": image } } });
    let revision = kv.declare(&s.hive_name, &declaration.to_string()).await;
    kv.converged(&s.hive_name, revision, T).await;
    let api = s.hive.socket().await;
    let hive = |args: &'static [&'static str]| {
        let api = api.clone();
        async move {
            let out = tokio::process::Command::new(hive_bin())
                .args(args)
                .env("HYPERHIVE_API", &api)
                .output()
                .await
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            assert!(out.status.success(), "hive {args:?} failed: {text}");
            text
        }
    };

    let mut previous_id = String::new();
    let (first, one_image) = local_images_of(&repo);
    let mut current_id = first.into_iter().next().unwrap();
    // Every pushed image has the same size (busybox and 3 MB of noise).
    let bound = 2 * one_image + one_image / 10;
    for round in 1..=4 {
        s.push_digest("hh/app");
        hive(&["rebuild", "app", "--relock", "--wait"]).await;
        // The cleanup runs once the job is recorded done, which is when
        // `--wait` returns: wait for it, not for the job.
        let (ids, size) = wait_until(T, "the cleanup after the rebuild", || async {
            let (ids, size) = local_images_of(&repo);
            (ids.len() <= 2).then_some((ids, size))
        })
        .await;
        let (new_id, _, _) = container(&s.hive_name, "app").unwrap();
        let running =
            hyperhive_tests::docker::docker(&["inspect", "--format", "{{.Image}}", &new_id]);
        println!(
            "after rebuild {round}: {} images of {repo}, {size} bytes",
            ids.len()
        );
        previous_id = std::mem::replace(&mut current_id, running);
        assert!(ids.contains(&current_id), "the running image is kept");
        assert!(ids.contains(&previous_id), "the previous image is kept");
        assert_eq!(ids.len(), 2, "only current and previous remain: {ids:?}");
        assert!(
            size <= bound,
            "disk use {size} grew past two images ({bound})"
        );
    }
    // The hive forgets an image it removed after Docker has removed it (so
    // a failed removal is never forgotten): the wait above can end between
    // the two, with the removed image still listed as removable.
    let listing = wait_until(T, "the hive's record of the last cleanup", || async {
        let listing = hive(&["images", "--json"]).await;
        let view: Value = serde_json::from_str(&listing).unwrap();
        (view["images"].as_array().unwrap().len() <= 2).then_some(listing)
    })
    .await;
    println!("hive images --json: {listing}");
    let view: Value = serde_json::from_str(&listing).unwrap();
    let rows = view["images"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{listing}");
    assert_eq!(rows[0]["image_id"], current_id.as_str());
    assert_eq!(rows[0]["why"], "current");
    assert_eq!(rows[1]["image_id"], previous_id.as_str());
    assert_eq!(rows[1]["why"], "previous (kept for rollback)");
    assert!(
        image_present(&foreign.reference),
        "an image the hive did not pull was removed"
    );
    println!("{}", hive(&["images"]).await);

    // Retired: no declared agent and no container uses its images any
    // more, so both go; the image the hive never pulled stays.
    let empty = json!({ "schema": 1, "agents": {} });
    let revision = kv.declare(&s.hive_name, &empty.to_string()).await;
    kv.converged(&s.hive_name, revision, T).await;
    let (ids, _) = wait_until(T, "the retired agent's images removed", || async {
        let (ids, size) = local_images_of(&repo);
        ids.is_empty().then_some((ids, size))
    })
    .await;
    println!("after retire: {} images of {repo}", ids.len());
    assert!(
        image_present(&foreign.reference),
        "an image the hive did not pull was removed at retire"
    );
    let listing = hive(&["images", "--json"]).await;
    let view: Value = serde_json::from_str(&listing).unwrap();
    assert_eq!(view["images"].as_array().unwrap().len(), 0, "{listing}");
}
