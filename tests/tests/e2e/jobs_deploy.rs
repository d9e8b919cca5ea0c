//! The job DAG over the real dockerd, through a real `hive` process and its
//! local API: first deploy, rebuild, power, concurrency, retire and purge,
//! and containers that are not the hive's.

use std::time::Duration;

use hyperhive_tests::docker::{docker, NamedContainerGuard};
use hyperhive_tests::hive::LocalHive as Setup;
use hyperhive_tests::jobs::node;
use hyperhive_tests::{hive_bin, wait_until};
use serde_json::json;

const T: Duration = Duration::from_secs(60);

async fn setup(test: &str) -> Setup {
    Setup::start(test, "").await
}

/// The same, `extra` appended to the hive's config.
async fn setup_with(test: &str, extra: &str) -> Setup {
    Setup::start(test, extra).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_deploy_creates_and_starts_exactly_one_container() {
    let s = setup("jobs-first").await;
    let spec = json!({
        "image": s.image.reference,
        "command": ["sh", "-c", "echo $GREETING > /state/hello; exec sleep 3600"],
        "env": { "GREETING": "hi" },
        "memory_mb": 64,
        "cpus": 0.5
    });
    let job = s.api.deploy("mail", spec).await;
    let done = s.api.done(job, T).await;
    let ops: Vec<&str> = done["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["op"].as_str().unwrap())
        .collect();
    assert_eq!(
        ops,
        [
            "seed_power",
            "state_dir",
            "image",
            "create",
            "start",
            "reconcile"
        ]
    );

    assert_eq!(s.containers(), vec![s.container("mail")]);
    assert!(s.running("mail"));
    let labels = s.inspect("mail", "{{json .Config.Labels}}");
    let labels: serde_json::Value = serde_json::from_str(&labels).unwrap();
    assert_eq!(labels["org.hyperhive.managed"], "true");
    assert_eq!(labels["org.hyperhive.hive"], s.hive_name.as_str());
    assert_eq!(labels["org.hyperhive.agent"], "mail");
    assert!(labels["org.hyperhive.spec"]
        .as_str()
        .unwrap()
        .starts_with("sha256:"));
    assert_eq!(s.inspect("mail", "{{.HostConfig.Memory}}"), "67108864");
    assert_eq!(s.inspect("mail", "{{.HostConfig.NanoCpus}}"), "500000000");
    let state = s.hive.state_dir.join("agents/mail");
    assert_eq!(
        s.inspect(
            "mail",
            "{{range .Mounts}}{{.Source}}:{{.Destination}}{{end}}"
        ),
        format!("{}:/state", state.display())
    );
    // The agent wrote into its state dir through the mount, with its env.
    let hello = state.join("hello");
    let text = wait_until(T, "the agent's file in its state dir", || {
        let hello = hello.clone();
        async move {
            std::fs::read_to_string(&hello)
                .ok()
                .filter(|t| !t.is_empty())
        }
    })
    .await;
    assert_eq!(text, "hi\n");

    let (_, agents) = s.api.get("/api/v1/agents").await;
    let row = &agents["agents"][0];
    assert_eq!(row["agent"], "mail");
    assert_eq!(row["wanted"], "up");
    assert_eq!(row["observed"], "running");
    assert_eq!(row["image"], s.image.reference.as_str());
    assert_eq!(row["spec"], labels["org.hyperhive.spec"]);
    assert_eq!(row["last_job"]["state"], "done");
}

/// Every container the hive creates runs with `no-new-privileges` and under
/// the default pids limit (`container_pids_limit`, 512): Docker shows both,
/// and the agent's own process reads them from the kernel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_run_without_new_privileges_and_under_a_pids_limit() {
    let s = setup("jobs-privs").await;
    let script = "grep NoNewPrivs /proc/self/status > /state/privs; \
                  cat /sys/fs/cgroup/pids.max /sys/fs/cgroup/pids/pids.max > /state/pids 2>/dev/null; \
                  exec sleep 3600";
    let spec = json!({ "image": s.image.reference, "command": ["sh", "-c", script] });
    let job = s.api.deploy("locked", spec).await;
    s.api.done(job, T).await;
    assert_eq!(s.inspect("locked", "{{.HostConfig.PidsLimit}}"), "512");
    assert_eq!(
        s.inspect("locked", "{{json .HostConfig.SecurityOpt}}"),
        r#"["no-new-privileges:true"]"#
    );
    let state = s.hive.state_dir.join("agents/locked");
    let read = |file: &'static str| {
        let path = state.join(file);
        wait_until(T, file, move || {
            let path = path.clone();
            async move {
                std::fs::read_to_string(&path)
                    .ok()
                    .filter(|t| !t.is_empty())
            }
        })
    };
    let privs = read("privs").await;
    assert_eq!(
        privs.split_whitespace().collect::<Vec<_>>(),
        ["NoNewPrivs:", "1"]
    );
    assert_eq!(read("pids").await.trim(), "512");
}

/// Every container's log is Docker's `json-file`, capped and rotated by
/// the hive's `container_log_max_mb` and `container_log_files`: an agent
/// that writes 6 MB under a 1 MB × 2 cap (Docker's `1m` is 10^6 bytes)
/// leaves at most two files of about 1 MB. A hive restarted with another cap rebuilds nothing (the cap is
/// outside the spec hash); the next rebuild takes the new cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_logs_are_capped_and_rotated_and_a_new_cap_rebuilds_nothing() {
    let mut s = setup_with(
        "jobs-logcap",
        "reconcile_interval_secs = 1\ncontainer_log_max_mb = 1\ncontainer_log_files = 2",
    )
    .await;
    let script = "busybox yes 0123456789abcdef0123456789abcdef | busybox head -c 6000000; \
                  touch /state/spoke; exec sleep 3600";
    let spec = json!({ "image": s.image.reference, "command": ["sh", "-c", script] });
    let job = s.api.deploy("noisy", spec).await;
    s.api.done(job, T).await;
    assert_eq!(
        s.inspect("noisy", "{{json .HostConfig.LogConfig}}"),
        r#"{"Type":"json-file","Config":{"max-file":"2","max-size":"1m"}}"#
    );
    let spoke = s.hive.state_dir.join("agents/noisy/spoke");
    wait_until(T, "the agent wrote its 6 MB", || {
        let spoke = spoke.clone();
        async move { spoke.exists().then_some(()) }
    })
    .await;
    // Docker's own files for it: `<id>-json.log`, `<id>-json.log.1`.
    let log_path = std::path::PathBuf::from(s.inspect("noisy", "{{.LogPath}}"));
    let dir = log_path.parent().unwrap();
    let prefix = log_path.file_name().unwrap().to_string_lossy().to_string();
    let files: Vec<(String, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| {
            (
                e.file_name().to_string_lossy().to_string(),
                e.metadata().unwrap().len(),
            )
        })
        .collect();
    let total: u64 = files.iter().map(|(_, n)| n).sum();
    println!("FIGURES log_cap files={files:?} total_bytes={total}");
    assert!(files.len() <= 2, "{files:?}");
    // A file is rotated once a message takes it past 1 MB: a line over.
    assert!(total <= 2_000_000 + 64 * 1024, "{files:?}");
    assert!(
        total > 1_000_000,
        "the agent's output reached the log: {files:?}"
    );

    // Restart with the default cap: the running container stays.
    let before = s.inspect("noisy", "{{.Id}}");
    std::fs::write(
        s.hive.config_path(),
        std::fs::read_to_string(s.hive.config_path())
            .unwrap()
            .replace("container_log_max_mb = 1\ncontainer_log_files = 2", ""),
    )
    .unwrap();
    s.hive.kill_and_restart(&[]);
    s.api = s.hive.job_api().await;
    let metrics = format!("{}/metrics", s.hive.api().await);
    wait_until(
        T,
        "three converger passes (reconcile rounds) after the restart",
        || async {
            let text = reqwest::get(&metrics).await.ok()?.text().await.ok()?;
            let line = text
                .lines()
                .find(|l| l.starts_with("hyperhive_perf_calls_total{what=\"converger_pass\"}"))?;
            let n: u64 = line.rsplit(' ').next()?.parse().ok()?;
            (n >= 3).then_some(())
        },
    )
    .await;
    assert_eq!(s.inspect("noisy", "{{.Id}}"), before, "no surprise rebuild");
    let job = s.api.queue("noisy", "rebuild", json!({})).await;
    s.api.done(job, T).await;
    assert_ne!(s.inspect("noisy", "{{.Id}}"), before);
    assert_eq!(
        s.inspect("noisy", "{{json .HostConfig.LogConfig}}"),
        r#"{"Type":"json-file","Config":{"max-file":"3","max-size":"10m"}}"#
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebuild_replaces_the_container_and_keeps_the_state_dir() {
    let s = setup("jobs-rebuild").await;
    let spec = |greeting: &str| {
        json!({
            "image": s.image.reference,
            "command": ["sh", "-c", "echo $GREETING >> /state/log; exec sleep 3600"],
            "env": { "GREETING": greeting }
        })
    };
    let job = s.api.deploy("a", spec("one")).await;
    s.api.done(job, T).await;
    let first_id = s.inspect("a", "{{.Id}}");
    let log = s.hive.state_dir.join("agents/a/log");
    wait_until(T, "the first container's line", || {
        let log = log.clone();
        async move { (std::fs::read_to_string(&log).ok()? == "one\n").then_some(()) }
    })
    .await;

    // Rebuild in place: same spec, a new container.
    let job = s.api.queue("a", "rebuild", json!({})).await;
    s.api.done(job, T).await;
    let second_id = s.inspect("a", "{{.Id}}");
    assert_ne!(second_id, first_id);
    assert_eq!(s.containers().len(), 1);
    assert!(s.running("a"));

    // Deploying a changed spec of an installed agent is a rebuild too.
    let job = s.api.deploy("a", spec("two")).await;
    let done = s.api.done(job, T).await;
    assert_eq!(done["kind"], "rebuild");
    let third_id = s.inspect("a", "{{.Id}}");
    assert_ne!(third_id, second_id);
    assert_eq!(s.containers().len(), 1);
    assert!(s
        .inspect("a", "{{json .Config.Env}}")
        .contains("GREETING=two"));
    wait_until(T, "every container's line kept in the state dir", || {
        let log = log.clone();
        async move { (std::fs::read_to_string(&log).ok()? == "one\none\ntwo\n").then_some(()) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_and_start_follow_power_intent() {
    let s = setup("jobs-power").await;
    // Declared down: created, never started.
    let job = s
        .api
        .deploy("a", json!({ "image": s.image.reference, "power": "down" }))
        .await;
    let done = s.api.done(job, T).await;
    assert_eq!(
        node(&done, "start")["detail"],
        "left stopped: power intent is down"
    );
    assert!(!s.running("a"));
    for (verb, running, wanted) in [
        ("start", true, "up"),
        ("stop", false, "down"),
        ("start", true, "up"),
    ] {
        let job = s.api.queue("a", verb, json!({})).await;
        let done = s.api.done(job, T).await;
        assert_eq!(done["kind"], "reconcile");
        assert_eq!(s.running("a"), running, "after {verb}");
        let (_, agents) = s.api.get("/api/v1/agents").await;
        assert_eq!(agents["agents"][0]["wanted"], wanted);
    }
    assert_eq!(s.containers().len(), 1);
}

/// The state dir is a mount, not a bind: when it is gone, Docker refuses to
/// start the agent (and the job says why) instead of making an empty one
/// behind the hive's back; a rebuild makes it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_whose_state_dir_is_gone_does_not_start_on_an_empty_one() {
    let s = setup("jobs-nodir").await;
    let spec = json!({ "image": s.image.reference, "command": ["sh", "-c", "exec sleep 3600"] });
    let job = s.api.deploy("a", spec).await;
    s.api.done(job, T).await;
    let job = s.api.queue("a", "stop", json!({})).await;
    s.api.done(job, T).await;
    let dir = s.hive.state_dir.join("agents/a");
    std::fs::remove_dir_all(&dir).unwrap();
    let job = s.api.queue("a", "start", json!({})).await;
    let failed = s.api.finished(job, T).await;
    assert_eq!(failed["state"], "failed", "{failed:#}");
    assert!(
        failed.to_string().contains("does not exist"),
        "the job names the missing path: {failed:#}"
    );
    assert!(!dir.exists(), "nobody made an empty state dir");
    assert!(!s.running("a"));
    let job = s.api.queue("a", "rebuild", json!({})).await;
    s.api.done(job, T).await;
    assert!(dir.is_dir() && s.running("a"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_deploys_of_one_agent_end_with_one_container() {
    let s = setup("jobs-concurrent").await;
    let spec = json!({ "image": s.image.reference });
    let mut requests = Vec::new();
    for _ in 0..8 {
        let (api, spec) = (s.api.clone(), spec.clone());
        requests.push(tokio::spawn(async move { api.deploy("a", spec).await }));
    }
    let mut jobs = Vec::new();
    for r in requests {
        jobs.push(r.await.unwrap());
    }
    for job in &jobs {
        s.api.done(*job, T).await;
    }
    assert_eq!(s.containers(), vec![s.container("a")]);
    assert!(s.running("a"));
    let mut distinct = jobs.clone();
    distinct.sort();
    distinct.dedup();
    assert!(
        distinct.len() < jobs.len(),
        "pending duplicates were coalesced: {jobs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retire_keeps_the_data_and_only_purge_deletes_it() {
    let s = setup("jobs-retire").await;
    let job = s
        .api
        .deploy("a", json!({ "image": s.image.reference }))
        .await;
    s.api.done(job, T).await;
    let data = s.hive.state_dir.join("agents/a/notes");
    std::fs::write(&data, "precious").unwrap();

    let job = s.api.queue("a", "retire", json!({})).await;
    s.api.done(job, T).await;
    assert!(s.containers().is_empty());
    assert_eq!(std::fs::read_to_string(&data).unwrap(), "precious");

    // Purge refuses without confirmation, then deletes.
    let (code, answer) = s.api.post("/api/v1/agents/a/purge", json!({})).await;
    assert_eq!(code, 400);
    assert!(answer["error"]
        .as_str()
        .unwrap()
        .contains("hive purge a --yes"));
    assert!(data.exists());
    let job = s.api.queue("a", "purge", json!({ "confirm": true })).await;
    s.api.done(job, T).await;
    assert!(!s.hive.state_dir.join("agents/a").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_without_the_hives_label_is_never_touched() {
    let s = setup("jobs-foreign").await;
    let name = s.container("squatter");
    let _squatter = NamedContainerGuard { name: name.clone() };
    docker(&["run", "-d", "--name", &name, &s.image.reference]);
    let before = docker(&["inspect", "--format", "{{.Id}} {{.State.Running}}", &name]);

    let job = s
        .api
        .deploy("squatter", json!({ "image": s.image.reference }))
        .await;
    let failed = s.api.finished(job, T).await;
    assert_eq!(failed["state"], "failed");
    let error = failed["error"].as_str().unwrap();
    assert!(
        error.contains(&format!("container {name} has no org.hyperhive.hive label")),
        "{error}"
    );
    assert!(error.contains("never touches it"), "{error}");
    assert_eq!(node(&failed, "create")["attempts"], 1, "not retried");
    assert_eq!(
        docker(&["inspect", "--format", "{{.Id}} {{.State.Running}}", &name]),
        before
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_with_the_value_named() {
    let s = setup("jobs-bad-input").await;
    let (code, answer) = s
        .api
        .post("/api/v1/agents/Not_A.Name/deploy", json!({}))
        .await;
    assert_eq!(code, 400);
    assert!(answer["error"]
        .as_str()
        .unwrap()
        .contains("invalid agent name \"Not_A.Name\""));
    let (code, answer) = s.api.post("/api/v1/agents/ghost/stop", json!({})).await;
    assert_eq!(code, 404);
    assert!(answer["error"]
        .as_str()
        .unwrap()
        .contains("agent ghost is not installed on this hive; deploy it first"));

    // The CLI: a bad name is a usage error (2) naming the value; a refusal
    // from the hive is a runtime failure (1) with the hive's message.
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(hive_bin())
            .arg("--api")
            .arg(&s.api.base)
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, err) = cli(&["deploy", "Bad.Name"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("invalid agent name \"Bad.Name\""), "{err}");
    let (code, err) = cli(&["start", "ghost"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("agent ghost is not installed"), "{err}");
    let (code, err) = cli(&["job", "nope"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("invalid job id \"nope\""), "{err}");
    let (code, err) = cli(&["deploy", "x", "--spec", "/nonexistent/spec.json"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("cannot read the spec file /nonexistent/spec.json"),
        "{err}"
    );
}
