//! The worker over the in-memory fake runtime and a real SQLite file, with
//! tokio's clock paused: backoff waits are advanced, never slept.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use swarm_queue_client::{AgentSpec, BuildSpec, HiveName, Power};
use tokio::sync::Notify;

use super::*;
use crate::agents::jobs::{
    db_path, CleanupAction, Enqueued, InstalledAgent, JobId, JobRequest, JobState, JobView,
    NodeState,
};
use crate::agents::runtime::fake::FakeRuntime;
use crate::agents::runtime::{AgentContainer, ContainerSpec};
use crate::agents::test_names::{agent, spec};
use crate::shutdown::{self, ShutdownTrigger};

mod faults;

const HIVE: &str = "alpha";
const IMAGE: &str = "local/agent:1";

struct Harness {
    _dir: tempfile::TempDir,
    state_dir: PathBuf,
    store: JobStore,
    runtime: Arc<FakeRuntime>,
    wake: Arc<Notify>,
    worker: Option<(ShutdownTrigger, tokio::task::JoinHandle<()>)>,
    events: crate::fleet_events::EventSink,
    queue: crate::fleet_events::EventQueue,
}

fn config() -> WorkerConfig {
    WorkerConfig {
        retry: RetryPolicy {
            max_attempts: 4,
            base: Duration::from_secs(1),
            cap: Duration::from_secs(8),
        },
        ..WorkerConfig::default()
    }
}

impl Harness {
    fn new(runtime: FakeRuntime) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let state_dir = dir.path().to_path_buf();
        let store = JobStore::open(&db_path(&state_dir)).unwrap();
        let (events, queue) = crate::fleet_events::EventSink::new(HiveName::new(HIVE).unwrap());
        Harness {
            events,
            queue,
            _dir: dir,
            state_dir,
            store,
            runtime: Arc::new(runtime),
            wake: Arc::new(Notify::new()),
            worker: None,
        }
    }

    fn start_with(&mut self, config: WorkerConfig) {
        assert!(self.worker.is_none());
        let (trigger, shutdown) = shutdown::channel();
        let deps = WorkerDeps {
            store: self.store.clone(),
            runtime: Arc::clone(&self.runtime),
            hive: HiveName::new(HIVE).unwrap(),
            state_dir: self.state_dir.clone(),
            wake: Arc::clone(&self.wake),
            board: None,
            extra_binds: vec![],
            config,
            events: Some(self.events.clone()),
        };
        self.worker = Some((trigger, tokio::spawn(run(deps, shutdown))));
    }

    fn start(&mut self) {
        self.start_with(config());
    }

    async fn stop(&mut self) {
        let (trigger, handle) = self.worker.take().unwrap();
        trigger.trigger();
        handle.await.unwrap();
    }

    async fn enqueue(&self, a: &str, request: JobRequest) -> Enqueued {
        let q = self
            .store
            .enqueue(&agent(a), request, now_ms())
            .await
            .unwrap();
        self.wake.notify_one();
        q
    }

    async fn deploy(&self, a: &str, spec: AgentSpec) -> JobId {
        self.enqueue(
            a,
            JobRequest::FirstDeploy {
                spec,
                revision: Some(1),
            },
        )
        .await
        .job
    }

    async fn job(&self, job: JobId) -> JobView {
        self.store.job(job).await.unwrap()
    }

    /// Wait (in paused time) until the job finishes.
    async fn finished(&self, job: JobId) -> JobView {
        until(async || {
            let view = self.job(job).await;
            if view.state.is_finished() {
                Ok(view)
            } else {
                Err(format!("job {job} did not finish: {view:#?}"))
            }
        })
        .await
    }

    fn name(&self, a: &str) -> String {
        format!("hyperhive.{HIVE}.{a}")
    }
}

/// Ask `check` until it gives its value: in paused time, 50 ms apart, at
/// most 10,000 times, then fail with what it last said was missing.
async fn until<T>(mut check: impl AsyncFnMut() -> Result<T, String>) -> T {
    let mut missing = String::new();
    for _ in 0..10_000 {
        match check().await {
            Ok(value) => return value,
            Err(why) => missing = why,
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{missing}");
}

fn registry() -> FakeRuntime {
    FakeRuntime::new(HIVE).with_registry(&[IMAGE, "local/agent:2"])
}

#[tokio::test(start_paused = true)]
async fn first_deploy_pulls_creates_and_starts_exactly_one_container() {
    let mut h = Harness::new(registry());
    h.start();
    let mut s = spec(IMAGE);
    s.env.insert("LOG".into(), "info".into());
    let job = h.deploy("mail", s.clone()).await;
    let view = h.finished(job).await;
    assert_eq!(view.state, JobState::Done, "{view:#?}");
    assert!(view.nodes.iter().all(|n| n.state == NodeState::Done));
    assert_eq!(
        view.nodes[2].detail.as_deref(),
        Some("pulled local/agent:1")
    );

    let containers = h.runtime.containers.lock().unwrap().clone();
    assert_eq!(containers.len(), 1);
    let c = &containers[&h.name("mail")];
    assert!(c.running);
    assert_eq!(c.spec_hash(), Some(s.spec_hash().as_str()));
    let created = h.runtime.created.lock().unwrap().clone();
    assert_eq!(created.len(), 1);
    assert_eq!(created[0].env, vec!["LOG=info"]);
    assert_eq!(
        created[0].binds[0].host,
        h.state_dir.join("agents").join("mail")
    );
    assert!(h.state_dir.join("agents/mail").is_dir());
    // What the event stream is told: the pull, then the agent created.
    let told: Vec<(String, String)> = h
        .queue
        .take_queued()
        .await
        .into_iter()
        .map(|e| (e.kind, e.message))
        .collect();
    assert_eq!(
        told,
        [
            ("image_pulled".to_string(), IMAGE.to_string()),
            (
                "created".to_string(),
                format!("first_deploy job {} done", job.0)
            ),
        ]
    );

    let a = agent("mail");
    let installed = h.store.installed(&a).await.unwrap().unwrap();
    let power = h.store.power(&a).await.unwrap();
    assert_eq!(installed.spec_hash, s.spec_hash());
    assert_eq!(installed.image, IMAGE);
    assert_eq!(installed.revision, Some(1));
    assert_eq!(power, Some(Power::Up));
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn rebuild_replaces_the_container_and_keeps_the_state_dir() {
    let mut h = Harness::new(registry());
    h.start();
    let job = h.deploy("a", spec(IMAGE)).await;
    h.finished(job).await;
    let old = h.runtime.container(&h.name("a")).unwrap();
    std::fs::write(h.state_dir.join("agents/a/memory.txt"), "kept").unwrap();

    let q = h
        .enqueue(
            "a",
            JobRequest::Rebuild {
                spec: spec("local/agent:2"),
                relock: false,
                revision: Some(2),
            },
        )
        .await;
    let view = h.finished(q.job).await;
    assert_eq!(view.state, JobState::Done, "{view:#?}");
    let new = h.runtime.container(&h.name("a")).unwrap();
    assert_ne!(new.id, old.id);
    assert!(new.running);
    assert_eq!(new.image, "local/agent:2");
    assert_eq!(h.runtime.containers.lock().unwrap().len(), 1);
    assert_eq!(
        std::fs::read_to_string(h.state_dir.join("agents/a/memory.txt")).unwrap(),
        "kept"
    );

    // A relock pulls again even though the image is present.
    let pulls_before = h
        .runtime
        .calls()
        .iter()
        .filter(|c| c.starts_with("pull"))
        .count();
    let q = h
        .enqueue(
            "a",
            JobRequest::Rebuild {
                spec: spec("local/agent:2"),
                relock: true,
                revision: Some(2),
            },
        )
        .await;
    h.finished(q.job).await;
    let pulls_after = h
        .runtime
        .calls()
        .iter()
        .filter(|c| c.starts_with("pull"))
        .count();
    assert_eq!(pulls_after, pulls_before + 1);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn power_intent_drives_start_and_stop() {
    let mut h = Harness::new(registry());
    h.start();
    // Declared down: created, never started.
    let mut down = spec(IMAGE);
    down.power = Some(Power::Down);
    let job = h.deploy("a", down).await;
    let view = h.finished(job).await;
    assert_eq!(
        view.nodes[4].detail.as_deref(),
        Some("left stopped: power intent is down")
    );
    assert!(!h.runtime.container(&h.name("a")).unwrap().running);

    for (power, running) in [(Power::Up, true), (Power::Down, false), (Power::Up, true)] {
        let q = h
            .store
            .set_power(&agent("a"), power, now_ms())
            .await
            .unwrap();
        h.wake.notify_one();
        let view = h.finished(q.job).await;
        assert_eq!(view.state, JobState::Done, "{view:#?}");
        assert_eq!(
            h.runtime.container(&h.name("a")).unwrap().running,
            running,
            "{power}"
        );
    }
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn retire_keeps_data_and_purge_deletes_it() {
    let mut h = Harness::new(registry());
    h.start();
    let job = h.deploy("a", spec(IMAGE)).await;
    h.finished(job).await;
    std::fs::write(h.state_dir.join("agents/a/data"), "x").unwrap();

    let q = h.enqueue("a", JobRequest::Retire).await;
    assert_eq!(h.finished(q.job).await.state, JobState::Done);
    assert!(h.runtime.container(&h.name("a")).is_none());
    assert!(
        h.state_dir.join("agents/a/data").is_file(),
        "retire keeps the state dir"
    );
    let installed = h.store.installed_all().await.unwrap();
    assert!(installed.is_empty());
    let power = h.store.power(&agent("a")).await.unwrap();
    assert_eq!(power, None);

    let q = h.enqueue("a", JobRequest::Purge).await;
    let view = h.finished(q.job).await;
    assert_eq!(view.state, JobState::Done, "{view:#?}");
    assert!(!h.state_dir.join("agents/a").exists());
    let journal = h.store.pending_cleanups().await.unwrap();
    assert!(journal.is_empty());
    h.stop().await;
}

/// The agent writes its state dir (it is `/state`): the links it planted
/// there to host paths, at the top, deeper down and to a file, go as links;
/// nothing they point at is removed (std's `remove_dir_all` opens each
/// directory with `O_NOFOLLOW` and unlinks a link instead of entering it).
#[tokio::test(start_paused = true)]
async fn purge_removes_the_links_the_agent_planted_and_nothing_behind_them() {
    use std::os::unix::fs::symlink;
    let mut h = Harness::new(registry());
    h.start();
    let job = h.deploy("a", spec(IMAGE)).await;
    h.finished(job).await;
    let host = tempfile::tempdir().unwrap();
    std::fs::create_dir(host.path().join("sub")).unwrap();
    std::fs::write(host.path().join("sub/keep"), "host data").unwrap();
    let dir = h.state_dir.join("agents/a");
    symlink(host.path(), dir.join("credentials")).unwrap();
    std::fs::create_dir(dir.join("deep")).unwrap();
    symlink(host.path().join("sub"), dir.join("deep/link")).unwrap();
    symlink(host.path().join("sub/keep"), dir.join("file-link")).unwrap();

    let q = h.enqueue("a", JobRequest::Purge).await;
    let view = h.finished(q.job).await;
    assert_eq!(view.state, JobState::Done, "{view:#?}");
    assert!(!dir.exists());
    assert_eq!(
        std::fs::read_to_string(host.path().join("sub/keep")).unwrap(),
        "host data"
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn build_contexts_are_built_and_tagged_by_spec() {
    let mut h = Harness::new(FakeRuntime::new(HIVE));
    let ctx = h.state_dir.join("knowledge/ctx");
    std::fs::create_dir_all(&ctx).unwrap();
    std::fs::write(ctx.join("Dockerfile"), "FROM scratch\n").unwrap();
    h.start();
    let s = AgentSpec {
        build: Some(BuildSpec {
            context: ctx.display().to_string(),
            git_ref: None,
            dockerfile: None,
        }),
        ..Default::default()
    };
    let tag = image_ref(&HiveName::new(HIVE).unwrap(), &agent("b"), &s);
    assert!(tag.starts_with("hyperhive-build/alpha/b:"), "{tag}");
    let job = h.deploy("b", s.clone()).await;
    let view = h.finished(job).await;
    assert_eq!(view.state, JobState::Done, "{view:#?}");
    assert!(h.runtime.calls().contains(&format!("build {tag}")));
    assert_eq!(h.runtime.container(&h.name("b")).unwrap().image, tag);

    // A relative context is a permanent, named error.
    let bad = AgentSpec {
        build: Some(BuildSpec {
            context: "relative/ctx".into(),
            git_ref: None,
            dockerfile: None,
        }),
        ..Default::default()
    };
    let job = h.deploy("c", bad).await;
    let view = h.finished(job).await;
    assert_eq!(view.state, JobState::Failed);
    let error = view.error.unwrap();
    assert!(error.contains("build context relative/ctx"), "{error}");
    assert_eq!(view.nodes[2].attempts, 1, "not retried");

    // The state dir outside the knowledge checkout is never a context.
    let inside = h.state_dir.join("agents");
    std::fs::create_dir_all(&inside).unwrap();
    let bad = AgentSpec {
        build: Some(BuildSpec {
            context: inside.display().to_string(),
            git_ref: None,
            dockerfile: None,
        }),
        ..Default::default()
    };
    let job = h.deploy("d", bad).await;
    let view = h.finished(job).await;
    assert_eq!(view.state, JobState::Failed);
    let error = view.error.unwrap();
    assert!(error.contains("hive's state dir"), "{error}");
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn agents_run_side_by_side_and_one_agents_jobs_in_order() {
    let mut h = Harness::new(registry());
    h.start();
    let a1 = h.deploy("a", spec(IMAGE)).await;
    let b1 = h.deploy("b", spec(IMAGE)).await;
    let a2 = h.enqueue("a", JobRequest::Retire).await.job;
    for job in [a1, b1, a2] {
        assert_eq!(h.finished(job).await.state, JobState::Done);
    }
    assert!(h.runtime.container(&h.name("a")).is_none());
    assert!(h.runtime.container(&h.name("b")).unwrap().running);
    let calls = h.runtime.calls();
    let create_a = calls
        .iter()
        .position(|c| c == "create hyperhive.alpha.a")
        .unwrap();
    let remove_a = calls.iter().position(|c| c.starts_with("remove")).unwrap();
    assert!(create_a < remove_a);
    h.stop().await;
}
