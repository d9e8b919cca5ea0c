//! The worker over the in-memory fake runtime and a real SQLite file, with
//! tokio's clock paused: backoff waits are advanced, never slept.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use swarm_queue_client::{AgentName, AgentSpec, BuildSpec, HiveName, Power};
use tokio::sync::Notify;

use super::*;
use crate::agents::jobs::{
    db_path, CleanupAction, Enqueued, InstalledAgent, JobId, JobRequest, JobState, JobView,
    NodeState,
};
use crate::agents::runtime::fake::FakeRuntime;
use crate::agents::runtime::{AgentContainer, ContainerSpec};
use crate::shutdown::{self, ShutdownTrigger};

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

fn agent(name: &str) -> AgentName {
    AgentName::new(name).unwrap()
}

fn spec(image: &str) -> AgentSpec {
    AgentSpec {
        image: Some(image.into()),
        ..Default::default()
    }
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
        for _ in 0..10_000 {
            let view = self.job(job).await;
            if view.state.is_finished() {
                return view;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("job {job} did not finish: {:#?}", self.job(job).await);
    }

    fn name(&self, a: &str) -> String {
        format!("hyperhive.{HIVE}.{a}")
    }
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
async fn docker_unreachable_retries_with_backoff_and_recovers() {
    let mut h = Harness::new(registry());
    h.runtime.unreachable.store(true, Ordering::SeqCst);
    h.start();
    let job = h.deploy("a", spec(IMAGE)).await;
    // Wait until the image node has failed once and is waiting to retry.
    let mut waited = 0;
    let node = loop {
        let view = h.job(job).await;
        let image = view.nodes[2].clone();
        if image.attempts >= 1 && image.state == NodeState::Ready {
            break image;
        }
        waited += 1;
        assert!(waited < 10_000, "{view:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let error = node.error.unwrap();
    assert!(
        error.contains("Docker is unreachable at unix:///fake/docker.sock"),
        "{error}"
    );
    assert!(node.retry_at_ms.is_some());
    assert_eq!(h.job(job).await.state, JobState::Running);

    h.runtime.unreachable.store(false, Ordering::SeqCst);
    let view = h.finished(job).await;
    assert_eq!(view.state, JobState::Done, "{view:#?}");
    assert!(view.nodes[2].attempts >= 2);
    assert!(view.nodes[2].error.is_none(), "cleared once it worked");
    assert!(h.runtime.container(&h.name("a")).unwrap().running);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn docker_unreachable_past_the_bound_fails_the_job_with_the_whole_chain() {
    let mut h = Harness::new(registry());
    h.runtime.unreachable.store(true, Ordering::SeqCst);
    h.start();
    let job = h.deploy("a", spec(IMAGE)).await;
    let view = h.finished(job).await;
    assert_eq!(view.state, JobState::Failed);
    let error = view.error.unwrap();
    for part in [
        "node 3 of 6 failed",
        "gave up after 4 attempts",
        "look up image local/agent:1",
        "Docker is unreachable at unix:///fake/docker.sock",
        "the socket /fake/docker.sock does not exist",
    ] {
        assert!(error.contains(part), "{part:?} missing from {error}");
    }
    let states: Vec<NodeState> = view.nodes.iter().map(|n| n.state).collect();
    use NodeState::*;
    assert_eq!(states, vec![Done, Done, Failed, Skipped, Skipped, Skipped]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_foreign_container_is_never_touched() {
    let runtime = registry();
    runtime.plant("hyperhive.alpha.a", None, true);
    runtime.plant("hyperhive.alpha.b", Some("beta"), true);
    let mut h = Harness::new(runtime);
    h.start();
    let job = h.deploy("a", spec(IMAGE)).await;
    let view = h.finished(job).await;
    assert_eq!(view.state, JobState::Failed);
    let error = view.error.unwrap();
    assert!(
        error.contains(
            "create hyperhive.alpha.a: container hyperhive.alpha.a has no org.hyperhive.hive label"
        ),
        "{error}"
    );
    // Stopping or retiring another hive's container is refused too.
    h.store
        .record_installed(InstalledAgent {
            agent: agent("b"),
            spec_hash: "sha256:x".into(),
            spec: spec(IMAGE),
            image: IMAGE.into(),
            revision: None,
            updated_at_ms: 0,
        })
        .await
        .unwrap();
    let q = h.enqueue("b", JobRequest::Retire).await;
    let view = h.finished(q.job).await;
    assert_eq!(view.state, JobState::Failed);
    assert!(
        view.error
            .as_deref()
            .unwrap()
            .contains("belongs to hive \"beta\""),
        "{view:#?}"
    );
    for name in ["hyperhive.alpha.a", "hyperhive.alpha.b"] {
        let c = h.runtime.container(name).unwrap();
        assert!(
            c.running && c.id.starts_with("planted-"),
            "{name} was touched"
        );
    }
    let touched: Vec<String> = h
        .runtime
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("stop") || c.starts_with("remove") || c.starts_with("start"))
        .collect();
    assert!(
        touched.iter().all(|c| c.starts_with("stop")),
        "only a refused stop: {touched:?}"
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_daemon_stopped_between_create_and_start_resumes_with_one_container() {
    let mut h = Harness::new(registry());
    h.start_with(WorkerConfig {
        hold_before: Some("start".into()),
        ..config()
    });
    let job = h.deploy("a", spec(IMAGE)).await;
    let mut waited = 0;
    loop {
        let view = h.job(job).await;
        if view.nodes[3].state == NodeState::Done {
            assert_eq!(view.nodes[4].state, NodeState::Ready);
            break;
        }
        waited += 1;
        assert!(waited < 10_000, "{view:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    h.stop().await;
    assert!(!h.runtime.container(&h.name("a")).unwrap().running);

    h.start();
    let view = h.finished(job).await;
    assert_eq!(view.state, JobState::Done);
    assert_eq!(h.runtime.containers.lock().unwrap().len(), 1);
    assert_eq!(h.runtime.created.lock().unwrap().len(), 1);
    assert!(h.runtime.container(&h.name("a")).unwrap().running);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_node_cut_off_mid_create_runs_again_and_adopts_the_container() {
    let mut h = Harness::new(registry());
    h.runtime.images.lock().unwrap().insert(IMAGE.into());
    let job = h.deploy("a", spec(IMAGE)).await;
    // Drive the store by hand up to a claimed create, as a crashed worker
    // would leave it, and make the container as Docker would have.
    loop {
        let c = h.store.claim(now_ms(), None).await.unwrap().unwrap();
        if c.op == Op::Create {
            let container = ContainerSpec::for_agent(AgentContainer {
                hive: &HiveName::new(HIVE).unwrap(),
                agent: &agent("a"),
                spec: &spec(IMAGE),
                image: IMAGE,
                state_dir: &h.state_dir.join("agents/a"),
                extra_binds: vec![],
                limits: WorkerConfig::default().container_limits,
                ports: vec![],
                volume_binds: vec![],
            });
            h.runtime.create(&container).await.unwrap();
            break;
        }
        let policy = config().retry;
        let done = Outcome::Done { detail: None };
        h.store
            .finish(c.job, c.seq, done, policy, now_ms())
            .await
            .unwrap();
    }
    h.start();
    let view = h.finished(job).await;
    assert_eq!(view.state, JobState::Done, "{view:#?}");
    assert_eq!(view.nodes[3].attempts, 2, "the cut-off attempt counts");
    assert!(view.nodes[3]
        .detail
        .as_deref()
        .unwrap()
        .contains("already exists with this spec"));
    assert_eq!(h.runtime.created.lock().unwrap().len(), 1);
    assert!(h.runtime.container(&h.name("a")).unwrap().running);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_container_with_another_spec_is_not_adopted() {
    let mut h = Harness::new(registry());
    h.start();
    let job = h.deploy("a", spec(IMAGE)).await;
    h.finished(job).await;
    h.store.forget_agent(&agent("a")).await.unwrap();
    let job = h.deploy("a", spec("local/agent:2")).await;
    let view = h.finished(job).await;
    assert_eq!(view.state, JobState::Failed);
    let error = view.error.unwrap();
    assert!(error.contains("already exists with spec"), "{error}");
    assert!(error.contains("run `hive rebuild a`"), "{error}");
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_cleanup_journal_is_replayed_before_the_agent_is_touched_again() {
    let mut h = Harness::new(registry());
    h.start();
    let job = h.deploy("a", spec(IMAGE)).await;
    h.finished(job).await;
    h.stop().await;
    // A remove was journalled and then cut off.
    let id = h.runtime.container(&h.name("a")).unwrap().id;
    let action = CleanupAction::RemoveContainer {
        id: id.clone(),
        name: h.name("a"),
    };
    h.store
        .journal_cleanup(&agent("a"), action, now_ms())
        .await
        .unwrap();
    h.start();
    let mut waited = 0;
    while h.runtime.container(&h.name("a")).is_some() {
        waited += 1;
        assert!(waited < 10_000, "journalled remove was not replayed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let journal = h.store.pending_cleanups().await.unwrap();
    assert!(journal.is_empty());
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_failed_remove_stays_journalled_and_blocks_the_agent_until_replayed() {
    let mut h = Harness::new(registry());
    h.start();
    let job = h.deploy("a", spec(IMAGE)).await;
    h.finished(job).await;
    h.runtime.fail_next(
        "remove",
        RuntimeError::Timeout {
            host: "unix:///fake".into(),
            op: "remove",
            target: "x".into(),
            secs: 1,
        },
    );
    let q = h.enqueue("a", JobRequest::Retire).await;
    let view = h.finished(q.job).await;
    assert_eq!(
        view.state,
        JobState::Done,
        "retried past the timeout: {view:#?}"
    );
    assert!(h.runtime.container(&h.name("a")).is_none());
    let journal = h.store.pending_cleanups().await.unwrap();
    assert!(journal.is_empty(), "{journal:?}");
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
