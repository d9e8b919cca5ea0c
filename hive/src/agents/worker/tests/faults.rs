//! Faults around the worker: Docker unreachable, foreign containers, a
//! daemon stopped or cut off mid-job, and the cleanup journal.

use super::*;

#[tokio::test(start_paused = true)]
async fn docker_unreachable_retries_with_backoff_and_recovers() {
    let mut h = Harness::new(registry());
    h.runtime.unreachable.store(true, Ordering::SeqCst);
    h.start();
    let job = h.deploy("a", spec(IMAGE)).await;
    // Wait until the image node has failed once and is waiting to retry.
    let node = until(async || {
        let view = h.job(job).await;
        let image = view.nodes[2].clone();
        if image.attempts >= 1 && image.state == NodeState::Ready {
            Ok(image)
        } else {
            Err(format!("{view:#?}"))
        }
    })
    .await;
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
    until(async || {
        let view = h.job(job).await;
        if view.nodes[3].state == NodeState::Done {
            assert_eq!(view.nodes[4].state, NodeState::Ready);
            Ok(())
        } else {
            Err(format!("{view:#?}"))
        }
    })
    .await;
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
    until(async || match h.runtime.container(&h.name("a")) {
        None => Ok(()),
        Some(_) => Err("journalled remove was not replayed".to_string()),
    })
    .await;
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
