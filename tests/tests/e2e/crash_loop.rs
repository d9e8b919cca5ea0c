//! Agents that crash, run out of memory or die (issue 21), over a real
//! `hive`, dockerd and nats-server, the status read from the bucket:
//! Docker's events make the hive see a dead container within a second and
//! start it again within two; a crash loop shows its exit code and a
//! growing count, backs off with growing delays, and is never shown as
//! declared; an OOM kill is named; the evidence survives a hive restart;
//! and an agent's own `min_running_secs` overrides the hive's.

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hyperhive_tests::docker::{docker, ContainerGuard, TestImage, OOM_COMMAND, OOM_MEMORY_MB};
use hyperhive_tests::hive::{HiveProc, HiveSpec};
use hyperhive_tests::kv::Swarm;
use hyperhive_tests::{unique_name, wait_until, NatsServer};
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(120);

/// One hive with one declared agent `web`. Fields drop in order: the hive
/// first, the server last.
struct OneAgent {
    hive: String,
    revision: u64,
    h: HiveProc,
    kv: Swarm,
    _image: TestImage,
    _containers: ContainerGuard,
    _nats: NatsServer,
}

impl OneAgent {
    /// `web` runs `command` (with `extra` spec fields) on a hive whose
    /// config has `config` appended.
    async fn start(test: &str, config: &str, command: &[&str], extra: Value) -> OneAgent {
        let nats = NatsServer::start();
        let url = nats.url();
        let hive = unique_name(test);
        let containers = ContainerGuard::new(&hive);
        let image = TestImage::busybox(test);
        let kv = Swarm::connect(&url).await;
        let h = HiveProc::start(HiveSpec {
            name: Some(&hive),
            nats_url: Some(&url),
            extra: config,
            ..Default::default()
        });
        kv.status_until(&hive, "the hive's first status", T, |_| true)
            .await;
        let mut web = json!({ "image": image.reference, "command": command });
        if let (Some(w), Some(e)) = (web.as_object_mut(), extra.as_object()) {
            w.extend(e.clone());
        }
        let decl = json!({ "schema": 1, "agents": { "web": web } }).to_string();
        let revision = kv.declare(&hive, &decl).await;
        OneAgent {
            hive,
            revision,
            h,
            kv,
            _image: image,
            _containers: containers,
            _nats: nats,
        }
    }

    fn container(&self) -> String {
        format!("hyperhive.{}.web", self.hive)
    }

    async fn web(&self) -> Option<Value> {
        let (_, s) = self.kv.status(&self.hive).await?;
        Some(s["agents"]["web"].clone())
    }

    /// When Docker says `agent`'s container last started (ms since the
    /// epoch), while it runs.
    fn started_ms(&self, agent: &str) -> Option<i64> {
        let (_, running, _) = hyperhive_tests::kv::container(&self.hive, agent)?;
        let at = docker(&[
            "inspect",
            "--format",
            "{{.State.StartedAt}}",
            &format!("hyperhive.{}.{agent}", self.hive),
        ]);
        running.then(|| hive::agents::runtime::docker_time_ms(at.trim()))?
    }

    /// `(running, StartedAt, FinishedAt, OOMKilled)` as Docker shows them.
    fn docker_state(&self) -> Option<(bool, String, String, bool)> {
        let out = hyperhive_tests::docker_cli::run(&[
            "inspect",
            "--format",
            "{{.State.Running}} {{.State.StartedAt}} {{.State.FinishedAt}} {{.State.OOMKilled}}",
            &self.container(),
        ])
        .ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let p: Vec<&str> = text.split_whitespace().collect();
        (p.len() == 4).then(|| (p[0] == "true", p[1].into(), p[2].into(), p[3] == "true"))
    }
}

/// What the crash-loop test saw: Docker's distinct start and finish times,
/// the exit counts the bucket showed, and every sample after the first
/// exit that claimed the agent as declared.
#[derive(Default)]
struct Samples {
    starts: Vec<String>,
    finishes: Vec<String>,
    counts: Vec<u64>,
    samples: usize,
    claimed: Vec<Value>,
}

impl Samples {
    fn add(&mut self, docker: Option<(bool, String, String, bool)>, web: Option<Value>) {
        if let Some((_, started, finished, _)) = docker {
            if !started.starts_with("0001") && self.starts.last() != Some(&started) {
                self.starts.push(started);
            }
            if !finished.starts_with("0001") && self.finishes.last() != Some(&finished) {
                self.finishes.push(finished);
            }
        }
        let Some(web) = web.filter(|_| !self.finishes.is_empty()) else {
            return;
        };
        self.samples += 1;
        if claims_declared(&web) {
            self.claimed.push(web.clone());
        }
        if let Some(n) = web["exits"]["count"].as_u64() {
            if self.counts.last() != Some(&n) {
                self.counts.push(n);
            }
        }
    }
}

/// Whether a status entry claims the agent as declared: running the
/// declared spec with nothing unsettled.
fn claims_declared(a: &Value) -> bool {
    a["observed"] == "running" && a["spec"] == a["declared_spec"] && a["unsettled"].is_null()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_killed_behind_the_hives_back_is_seen_at_once_and_runs_again() {
    // Shipped defaults: reconcile every 30 s, min_running_secs 10.
    let a = OneAgent::start(
        "crash-kill",
        "min_running_secs = 10",
        &["/bin/sleep", "3600"],
        json!({}),
    )
    .await;
    let s = a.kv.converged(&a.hive, a.revision, T).await;
    assert!(claims_declared(&s["agents"]["web"]), "{s:#}");
    let (_, started_before, _, _) = a.docker_state().expect("web exists");
    // Only the hive restarts agents: Docker's own policy is off.
    let policy = docker(&[
        "inspect",
        "--format",
        "{{.HostConfig.RestartPolicy.Name}}",
        &a.container(),
    ]);
    assert_eq!(policy.trim(), "no", "{policy}");

    let killed = Instant::now();
    docker(&["kill", &a.container()]);
    let not_declared = wait_until(T, "web shown not as declared", || async {
        let web = a.web().await?;
        (!claims_declared(&web)).then(|| (killed.elapsed(), web))
    })
    .await;
    let running = wait_until(T, "web running again", || async {
        let (running, started, _, _) = a.docker_state()?;
        (running && started != started_before).then(|| killed.elapsed())
    })
    .await;
    println!(
        "docker kill -> not as declared in the bucket: {} ms ({}); -> running again: {} ms",
        not_declared.0.as_millis(),
        not_declared.1,
        running.as_millis()
    );
    assert!(not_declared.0 < Duration::from_secs(1), "{not_declared:?}");
    assert!(running < Duration::from_secs(2), "{running:?}");
    // The kill is named: exit code 137, counted once.
    let web = wait_until(T, "the exit recorded", || async {
        let web = a.web().await?;
        (web["exits"]["count"] == 1).then_some(web)
    })
    .await;
    assert_eq!(web["exits"]["code"], 137, "{web:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_loop_backs_off_with_growing_delays_and_is_never_shown_declared() {
    let a = OneAgent::start(
        "crash-loop",
        "crash_backoff_first_secs = 2\ncrash_backoff_max_secs = 60",
        &["sh", "-c", "sleep 1; exit 3"],
        json!({}),
    )
    .await;
    // A 2 s first delay, doubling, so each wait stands out from the time
    // Docker's event and a start take on a busy machine. Sample Docker and
    // the bucket until five starts are seen: each start after an exit
    // gives one delay.
    let seen = std::sync::Mutex::new(Samples::default());
    wait_until(T, "five starts of the crash loop", || async {
        let docker = a.docker_state();
        let web = a.web().await;
        let mut s = seen.lock().unwrap();
        s.add(docker, web);
        (s.starts.len() >= 5).then_some(())
    })
    .await;
    let Samples {
        starts,
        finishes,
        counts,
        samples,
        claimed,
    } = seen.into_inner().unwrap();
    let ms = |t: &str| hive::agents::runtime::docker_time_ms(t).expect("Docker's time parses");
    // Delay i: from exit i to the start after it.
    let delays: Vec<i64> = finishes
        .iter()
        .zip(starts.iter().skip(1))
        .map(|(f, s)| ms(s) - ms(f))
        .collect();
    println!("crash loop: delays between an exit and the next start (ms): {delays:?}");
    println!(
        "crash loop: exit counts seen: {counts:?}; {samples} status samples after the first exit"
    );
    assert!(
        claimed.is_empty(),
        "samples claimed web as declared: {claimed:#?}"
    );
    assert!(delays.len() >= 4, "{delays:?}");
    // The hive's waits are lower bounds (Docker's event and a start add
    // to each): at once, then 2 s, 4 s, 8 s.
    assert!(
        delays[0] < delays[1],
        "the first exit restarts at once: {delays:?}"
    );
    for (i, want) in [(1, 2_000), (2, 4_000), (3, 8_000)] {
        assert!(
            delays[i] >= want - 100,
            "delay {i} of {want} ms: {delays:?}"
        );
        assert!(delays[i] > delays[i - 1], "the delays grow: {delays:?}");
    }
    assert!(counts.windows(2).all(|w| w[0] < w[1]), "{counts:?}");
    let web = a.web().await.unwrap();
    assert_eq!(web["exits"]["code"], 3, "{web:#}");
    let s = a.kv.status(&a.hive).await.unwrap().1;
    assert_ne!(s["converged_revision"], a.revision, "{s:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oom_killed_agent_is_named_and_its_evidence_survives_a_hive_restart() {
    let mut a = OneAgent::start(
        "crash-oom",
        "crash_backoff_first_secs = 1\ncrash_backoff_max_secs = 2",
        &OOM_COMMAND,
        json!({ "memory_mb": OOM_MEMORY_MB }),
    )
    .await;
    let web =
        a.kv.status_until(&a.hive, "web OOM-killed twice", T, |s| {
            let e = &s["agents"]["web"]["exits"];
            e["oom"] == true && e["count"].as_u64() >= Some(2)
        })
        .await["agents"]["web"]
            .clone();
    println!("OOM-killed agent as published: {web}");
    assert_eq!(web["exits"]["code"], 137, "{web:#}");
    assert!(!claims_declared(&web), "{web:#}");
    // Docker's own word, read with its CLI: Docker clears OOMKilled when
    // the hive starts the container again, so wait for a stopped moment
    // (each stop in this loop is an OOM kill) rather than read once.
    wait_until(T, "Docker to show web stopped and OOMKilled", || {
        let stopped_oom = matches!(a.docker_state(), Some((false, _, _, true)));
        std::future::ready(stopped_oom.then_some(()))
    })
    .await;
    let before = web["exits"]["count"].as_u64().unwrap();

    // A new hive process reads the evidence back from its job store: the
    // count goes on from where it was (Docker alone knows only the last
    // exit).
    a.h.kill_and_restart(&[]);
    let api = a.h.job_api().await;
    let (code, view) = api.get("/api/v1/agents").await;
    assert_eq!(code, 200, "{view:#}");
    let row = view["agents"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["agent"] == "web"))
        .cloned()
        .unwrap_or_else(|| panic!("no web row: {view:#}"));
    println!("after a hive restart, hive agents shows: {}", row["exits"]);
    assert!(row["exits"]["exits"].as_u64() >= Some(before), "{row:#}");
    assert_eq!(row["exits"]["oom_killed"], true, "{row:#}");
    assert_eq!(row["exits"]["last_code"], 137, "{row:#}");
}

/// One status sample while an agent runs: how long it had run when the
/// sample was taken, whether the revision was converged, its `unsettled`.
#[derive(Debug, Clone)]
struct Judged {
    ran_ms: i64,
    converged: bool,
    unsettled: Value,
    status: Value,
}

/// Samples `agent` (Docker's start time, then the hive's status) until
/// `revision` is converged, within `within`; every sample taken while the
/// agent ran, the last one converged.
async fn judged_until_converged(
    a: &OneAgent,
    agent: &str,
    revision: u64,
    within: Duration,
) -> Vec<Judged> {
    let samples = Mutex::new(Vec::new());
    let what = format!(
        "{} converged on revision {revision} ({agent} running)",
        a.hive
    );
    wait_until(within, &what, || async {
        let started = a.started_ms(agent)?;
        let (_, status) = a.kv.status(&a.hive).await?;
        let ran_ms = now_ms() - started;
        let converged = status["converged_revision"].as_u64() >= Some(revision);
        let unsettled = status["agents"][agent]["unsettled"].clone();
        samples.lock().unwrap().push(Judged {
            ran_ms,
            converged,
            unsettled,
            status,
        });
        converged.then_some(())
    })
    .await;
    samples.into_inner().unwrap()
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_own_min_running_secs_overrides_the_hives() {
    // The hive counts an agent as up after 20 s; `web` says 3 s of its own.
    const HIVE_SECS: i64 = 20;
    let a = OneAgent::start(
        "min-run",
        "min_running_secs = 20",
        &["/bin/sleep", "3600"],
        json!({ "min_running_secs": 3 }),
    )
    .await;
    // Well under the hive's 20 s: the old hive, which ignored the agent's
    // value, timed out here.
    let web = judged_until_converged(&a, "web", a.revision, Duration::from_secs(15)).await;
    let last = web.last().unwrap();
    println!(
        "web (min_running_secs = 3, hive's 20): converged after {} ms of running, {} samples",
        last.ran_ms,
        web.len()
    );
    assert!(last.ran_ms >= 3_000 - 100, "converged too soon: {last:?}");
    assert!(last.ran_ms < 8_000, "not by its own 3 s: {last:?}");
    assert!(claims_declared(&last.status["agents"]["web"]), "{last:?}");
    let young: Vec<&Judged> = web.iter().filter(|j| j.unsettled == "young").collect();
    assert!(!young.is_empty(), "web was never shown young: {web:?}");
    assert!(young.iter().all(|j| !j.converged), "{young:?}");
    let (web_id, _, web_label) = hyperhive_tests::kv::container(&a.hive, "web").unwrap();

    // Revision 2: web's value changes (3 to 2: no rebuild, it is not in the
    // spec hash; web has run longer than either, so it stays up) and
    // `slow` comes without one, so the hive's 20 s apply.
    let image = &a._image.reference;
    let web_spec = json!({ "image": image, "command": ["/bin/sleep", "3600"] });
    let decl = |web_extra: Value| {
        let mut w = web_spec.clone();
        w.as_object_mut()
            .unwrap()
            .extend(web_extra.as_object().unwrap().clone());
        json!({ "schema": 1, "agents": { "web": w, "slow": web_spec } }).to_string()
    };
    let two = decl(json!({ "min_running_secs": 2 }));
    let rev2 = a.kv.declare(&a.hive, &two).await;
    let slow = judged_until_converged(&a, "slow", rev2, Duration::from_secs(60)).await;
    let last = slow.last().unwrap();
    println!(
        "slow (the hive's min_running_secs = 20): converged after {} ms of running, {} samples",
        last.ran_ms,
        slow.len()
    );
    assert!(
        last.ran_ms >= HIVE_SECS * 1000 - 100,
        "converged before the hive's time: {last:?}"
    );
    assert!(last.ran_ms < HIVE_SECS * 1000 + 10_000, "{last:?}");
    let early: Vec<&Judged> = slow
        .iter()
        .filter(|j| j.ran_ms < HIVE_SECS * 1000 - 100)
        .collect();
    let young = early.iter().filter(|j| j.unsettled == "young").count();
    assert!(young >= 10, "too few samples of slow young: {slow:?}");
    // A sample may still show the container before it ran (the status
    // lags Docker); once it shows it running, it shows it young.
    let claimed: Vec<&&Judged> = early
        .iter()
        .filter(|j| {
            let shown_running = j.status["agents"]["slow"]["observed"] == "running";
            j.converged || (shown_running && j.unsettled != "young")
        })
        .collect();
    assert!(claimed.is_empty(), "slow shown as up early: {claimed:#?}");
    let web_not: Vec<&Value> = early
        .iter()
        .map(|j| &j.status["agents"]["web"])
        .filter(|w| !claims_declared(w))
        .collect();
    assert!(web_not.is_empty(), "web not kept as declared: {web_not:#?}");
    let (id, running, label) = hyperhive_tests::kv::container(&a.hive, "web").unwrap();
    assert_eq!(
        (id, running, label),
        (web_id, true, web_label),
        "web's container was recreated for a min_running_secs change"
    );

    // A field this hive does not know: the agent is left as it is, the
    // field reported, the revision never claimed.
    let rev3 =
        a.kv.declare(&a.hive, &decl(json!({ "min_running_secs": 2, "gpus": 1 })))
            .await;
    let s =
        a.kv.status_until(&a.hive, "the ignored field reported", T, |s| {
            s["seen_revision"].as_u64() >= Some(rev3) && s["state"] == "degraded"
        })
        .await;
    assert!(s["converged_revision"].as_u64() < Some(rev3), "{s:#}");
    let w = &s["warnings"];
    println!("a declaration with a field this hive does not know: {w}");
    let ignored = w
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["key"] == "wanted_fields_ignored");
    let message = ignored.unwrap_or_else(|| panic!("{s:#}"))["message"].to_string();
    assert!(message.contains("agents.web.gpus"), "{message}");
    let rev4 = a.kv.declare(&a.hive, &two).await;
    a.kv.status_until(&a.hive, "the warning cleared", T, |s| {
        s["converged_revision"].as_u64() >= Some(rev4) && s["state"] == "ok"
    })
    .await;
}
