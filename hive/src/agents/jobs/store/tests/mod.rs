//! Unit tests of the store over a real SQLite file in a temp dir.

use std::time::Duration;

use swarm_queue_client::{AgentName, Power};

use crate::agents::jobs::*;
use crate::agents::test_names::{agent, spec};

mod on_disk;

fn deploy(image: &str, relock: bool) -> DeployRequest {
    DeployRequest {
        spec: spec(image),
        revision: None,
        relock,
    }
}

fn first_deploy(image: &str) -> JobRequest {
    JobRequest::FirstDeploy {
        spec: spec(image),
        revision: Some(3),
    }
}

fn open() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&db_path(dir.path())).unwrap();
    (dir, store)
}

fn policy() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 2,
        base: Duration::from_millis(100),
        cap: Duration::from_secs(1),
    }
}

fn done() -> Outcome {
    Outcome::Done { detail: None }
}

/// Run every node of the next claimable job to done.
fn drain(store: &mut Store, now: Millis) -> Vec<(String, String)> {
    let mut ran = Vec::new();
    while let Some(c) = store.claim(now, None).unwrap() {
        ran.push((c.agent.to_string(), c.op.name().to_string()));
        store.finish(c.job, c.seq, done(), &policy(), now).unwrap();
    }
    ran
}

#[test]
fn opens_with_wal_full_sync_and_the_latest_schema() {
    let (_dir, store) = open();
    assert_eq!(store.schema_version().unwrap(), schema::latest());
    let mode: String = store
        .conn_for_tests()
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let sync: i64 = store
        .conn_for_tests()
        .query_row("PRAGMA synchronous", [], |r| r.get(0))
        .unwrap();
    assert_eq!(sync, 2, "synchronous = FULL");
    let reopened = Store::open(store.path()).unwrap();
    assert_eq!(reopened.schema_version().unwrap(), schema::latest());
}

#[test]
fn first_deploy_seeds_power_and_plans_nodes() {
    let (_dir, mut store) = open();
    let a = agent("mail-bot");
    let q = store.enqueue(&a, first_deploy("local/x:1"), 10).unwrap();
    assert_eq!(q.kind, JobKind::FirstDeploy);
    assert!(!q.coalesced);
    assert_eq!(store.power(&a).unwrap(), Some(Power::Up));
    let job = store.job(q.job).unwrap();
    assert_eq!(job.state, JobState::Pending);
    let states: Vec<(&str, NodeState)> =
        job.nodes.iter().map(|n| (n.op.as_str(), n.state)).collect();
    assert_eq!(
        states,
        vec![
            ("seed_power", NodeState::Ready),
            ("state_dir", NodeState::Pending),
            ("image", NodeState::Pending),
            ("create", NodeState::Pending),
            ("start", NodeState::Pending),
            ("reconcile", NodeState::Pending),
        ]
    );

    // A declared default of `down` seeds down, but never overwrites an
    // intent already recorded.
    let b = agent("quiet");
    let mut down = spec("local/x:1");
    down.power = Some(Power::Down);
    store
        .enqueue(
            &b,
            JobRequest::FirstDeploy {
                spec: down,
                revision: None,
            },
            10,
        )
        .unwrap();
    assert_eq!(store.power(&b).unwrap(), Some(Power::Down));
    store.enqueue(&b, first_deploy("local/x:2"), 11).unwrap();
    assert_eq!(store.power(&b).unwrap(), Some(Power::Down));
}

#[test]
fn duplicate_pending_requests_coalesce_by_agent_and_kind() {
    let (_dir, mut store) = open();
    let a = agent("a");
    let b = agent("b");
    let rebuild = |relock| JobRequest::Rebuild {
        spec: spec("local/x:1"),
        relock,
        revision: None,
    };
    struct Step {
        agent: AgentName,
        request: JobRequest,
        coalesced_into: Option<usize>,
    }
    let steps = vec![
        Step {
            agent: a.clone(),
            request: rebuild(true),
            coalesced_into: None,
        },
        // same agent and kind, pending: absorbed, relock kept
        Step {
            agent: a.clone(),
            request: rebuild(false),
            coalesced_into: Some(0),
        },
        // another kind: its own job
        Step {
            agent: a.clone(),
            request: JobRequest::Reconcile,
            coalesced_into: None,
        },
        // another agent: its own job
        Step {
            agent: b.clone(),
            request: rebuild(false),
            coalesced_into: None,
        },
        Step {
            agent: a.clone(),
            request: JobRequest::Reconcile,
            coalesced_into: Some(2),
        },
    ];
    let mut ids = Vec::new();
    for (i, step) in steps.into_iter().enumerate() {
        let q = store
            .enqueue(&step.agent, step.request, i as Millis)
            .unwrap();
        match step.coalesced_into {
            Some(j) => {
                assert!(q.coalesced, "step {i}");
                assert_eq!(q.job, ids[j], "step {i}");
            }
            None => assert!(!q.coalesced, "step {i}"),
        }
        ids.push(q.job);
    }
    let job = store.job(ids[0]).unwrap();
    assert_eq!(job.nodes.len(), 5, "re-planned, not duplicated");
    let c = store.claim(100, None).unwrap().unwrap();
    assert_eq!(
        c.op,
        Op::Image { relock: true },
        "a relock asked by either is kept"
    );

    // Once a job has started, a duplicate queues behind it instead.
    let q = store.enqueue(&a, rebuild(false), 101).unwrap();
    assert!(!q.coalesced);
    assert_ne!(q.job, ids[0]);
}

#[test]
fn one_agent_runs_in_order_and_agents_run_side_by_side() {
    let (_dir, mut store) = open();
    let a = agent("a");
    let b = agent("b");
    let j1 = store.enqueue(&a, JobRequest::Retire, 1).unwrap().job;
    let j2 = store.enqueue(&a, JobRequest::Reconcile, 2).unwrap().job;
    let j3 = store.enqueue(&b, JobRequest::Reconcile, 3).unwrap().job;

    let c1 = store.claim(10, None).unwrap().unwrap();
    assert_eq!((c1.job, c1.op.name()), (j1, "stop"));
    // a's next node waits for the running one; b's job is free to go.
    let c3 = store.claim(10, None).unwrap().unwrap();
    assert_eq!((c3.job, c3.op.name()), (j3, "reconcile"));
    assert!(store.claim(10, None).unwrap().is_none());

    store.finish(c1.job, c1.seq, done(), &policy(), 11).unwrap();
    let c = store.claim(12, None).unwrap().unwrap();
    assert_eq!((c.job, c.op.name()), (j1, "remove"), "j2 waits for j1");
    assert_eq!(
        store.finish(c.job, c.seq, done(), &policy(), 13).unwrap(),
        Some(JobState::Done)
    );
    let c = store.claim(14, None).unwrap().unwrap();
    assert_eq!(c.job, j2);
}

#[test]
fn failure_skips_dependents_and_keeps_the_error_chain() {
    let (_dir, mut store) = open();
    let a = agent("a");
    let q = store.enqueue(&a, first_deploy("local/x:1"), 0).unwrap();
    for _ in 0..2 {
        let c = store.claim(1, None).unwrap().unwrap();
        store.finish(c.job, c.seq, done(), &policy(), 1).unwrap();
    }
    let c = store.claim(1, None).unwrap().unwrap();
    assert_eq!(c.op.name(), "image");
    let chain = "pull local/x:1: docker: 404 no such image: local/x:1";
    let state = store
        .finish(
            c.job,
            c.seq,
            Outcome::Failed {
                error: chain.into(),
                transient: false,
            },
            &policy(),
            2,
        )
        .unwrap();
    assert_eq!(state, Some(JobState::Failed));
    let job = store.job(q.job).unwrap();
    assert_eq!(job.state, JobState::Failed);
    assert_eq!(
        job.error.as_deref(),
        Some(&*format!("node 3 of 6 failed: {chain}"))
    );
    let states: Vec<NodeState> = job.nodes.iter().map(|n| n.state).collect();
    use NodeState::*;
    assert_eq!(states, vec![Done, Done, Failed, Skipped, Skipped, Skipped]);
    assert_eq!(job.nodes[2].error.as_deref(), Some(chain));
    assert_eq!(
        job.nodes[3].error.as_deref(),
        Some("skipped: node 3 (image) failed")
    );
    // The failed job no longer holds the agent's queue.
    store.enqueue(&a, JobRequest::Reconcile, 3).unwrap();
    assert_eq!(store.claim(4, None).unwrap().unwrap().op, Op::Reconcile);
}

#[test]
fn transient_failure_waits_out_its_backoff_then_gives_up_at_the_bound() {
    let (_dir, mut store) = open();
    let a = agent("a");
    let q = store.enqueue(&a, JobRequest::Reconcile, 0).unwrap();
    let transient = || Outcome::Failed {
        error: "docker unreachable at unix:///nowhere.sock".into(),
        transient: true,
    };
    let c = store.claim(1_000, None).unwrap().unwrap();
    assert_eq!(c.attempt, 1);
    assert_eq!(
        store
            .finish(c.job, c.seq, transient(), &policy(), 1_000)
            .unwrap(),
        None
    );
    let node = &store.job(q.job).unwrap().nodes[0];
    assert_eq!(node.state, NodeState::Ready);
    assert_eq!(node.retry_at_ms, Some(1_100));
    assert!(node.error.as_deref().unwrap().contains("nowhere.sock"));
    assert_eq!(store.next_retry_at(1_000).unwrap(), Some(1_100));
    assert!(
        store.claim(1_099, None).unwrap().is_none(),
        "still backing off"
    );
    let c = store.claim(1_100, None).unwrap().unwrap();
    assert_eq!(c.attempt, 2);
    assert_eq!(
        store
            .finish(c.job, c.seq, transient(), &policy(), 1_100)
            .unwrap(),
        Some(JobState::Failed)
    );
    let job = store.job(q.job).unwrap();
    assert!(
        job.error
            .as_deref()
            .unwrap()
            .contains("gave up after 2 attempts: docker unreachable at unix:///nowhere.sock"),
        "{:?}",
        job.error
    );
}

#[test]
fn recovery_makes_running_nodes_ready_and_counts_the_cut_off_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(dir.path());
    let a = agent("a");
    let job = {
        let mut store = Store::open(&path).unwrap();
        let q = store.enqueue(&a, JobRequest::Retire, 0).unwrap();
        let c = store.claim(1, None).unwrap().unwrap();
        store.set_detail(c.job, c.seq, "stopping").unwrap();
        q.job
        // dropped with the node running: a crash
    };
    let mut store = Store::open(&path).unwrap();
    assert!(
        store.claim(2, None).unwrap().is_none(),
        "running blocks the agent"
    );
    assert_eq!(store.recover().unwrap(), 1);
    let c = store.claim(3, None).unwrap().unwrap();
    assert_eq!((c.job, c.op.name(), c.attempt), (job, "stop", 2));
}

#[test]
fn hold_leaves_a_node_ready() {
    let (_dir, mut store) = open();
    let a = agent("a");
    store.enqueue(&a, JobRequest::Retire, 0).unwrap();
    assert!(store.claim(1, Some("stop")).unwrap().is_none());
    assert_eq!(
        store.claim(1, Some("remove")).unwrap().unwrap().op.name(),
        "stop"
    );
}

#[test]
fn prune_drops_old_finished_jobs_but_keeps_each_agents_newest() {
    let (_dir, mut store) = open();
    let a = agent("a");
    let b = agent("b");
    let old_a = store.enqueue(&a, JobRequest::Reconcile, 0).unwrap().job;
    drain(&mut store, 0);
    let new_a = store.enqueue(&a, JobRequest::Reconcile, 1).unwrap().job;
    drain(&mut store, 1);
    let only_b = store.enqueue(&b, JobRequest::Reconcile, 2).unwrap().job;
    drain(&mut store, 2);
    let running = store.enqueue(&b, JobRequest::Retire, 3).unwrap().job;
    let day = Duration::from_secs(86_400);
    assert_eq!(store.prune(10, day).unwrap(), 0, "nothing old enough");
    let later = 2 * 86_400_000;
    // b's newest job is the one still running, so its older finished one goes.
    assert_eq!(store.prune(later, day).unwrap(), 2);
    for gone in [old_a, only_b] {
        assert!(matches!(store.job(gone), Err(StoreError::NoSuchJob { .. })));
    }
    for kept in [new_a, running] {
        store.job(kept).unwrap();
    }
    let last = store.last_jobs().unwrap();
    assert_eq!(last[&a].id, new_a);
    assert_eq!(last[&b].id, running);
}

#[test]
fn listings_show_unfinished_and_recent_or_everything() {
    let (_dir, mut store) = open();
    let a = agent("a");
    for i in 0..25 {
        store.enqueue(&a, JobRequest::Reconcile, i).unwrap();
        drain(&mut store, i);
    }
    let open_job = store.enqueue(&a, JobRequest::Retire, 30).unwrap().job;
    let recent = store.jobs(&JobFilter::default()).unwrap();
    assert_eq!(recent.len(), 21);
    assert_eq!(recent[0].id, open_job, "newest first");
    let all = store
        .jobs(&JobFilter {
            all: true,
            agent: Some(a.clone()),
        })
        .unwrap();
    assert_eq!(all.len(), 26);
    let none = store
        .jobs(&JobFilter {
            all: true,
            agent: Some(agent("other")),
        })
        .unwrap();
    assert!(none.is_empty());
}

#[test]
fn deploy_decides_first_deploy_or_rebuild_in_one_transaction() {
    let (_dir, mut store) = open();
    let a = agent("a");
    let q1 = store
        .request_deploy(&a, deploy("local/x:1", false), 0)
        .unwrap();
    assert_eq!(q1.kind, JobKind::FirstDeploy);
    let q = store
        .request_deploy(&a, deploy("local/x:1", false), 1)
        .unwrap();
    assert_eq!(
        (q.kind, q.job, q.coalesced),
        (JobKind::FirstDeploy, q1.job, true)
    );
    // Once the first deploy has started, deploying again is a rebuild.
    store.claim(1, None).unwrap().unwrap();
    let q2 = store
        .request_deploy(&a, deploy("local/x:1", false), 1)
        .unwrap();
    assert_eq!(
        (q2.kind, q2.coalesced),
        (JobKind::Rebuild, false),
        "a first deploy is on its way"
    );
    store
        .record_installed(&InstalledAgent {
            agent: a.clone(),
            spec_hash: spec("local/x:1").spec_hash(),
            spec: spec("local/x:1"),
            image: "local/x:1".into(),
            revision: Some(7),
            updated_at_ms: 2,
        })
        .unwrap();
    let q3 = store
        .request_deploy(&a, deploy("local/x:2", true), 3)
        .unwrap();
    assert_eq!(
        (q3.kind, q3.job, q3.coalesced),
        (JobKind::Rebuild, q2.job, true)
    );
    let JobRequest::Rebuild {
        relock, spec: s, ..
    } = store.claim_request_for_tests(q3.job)
    else {
        panic!("not a rebuild");
    };
    assert!(relock);
    assert_eq!(
        s.image.as_deref(),
        Some("local/x:2"),
        "the newest spec wins"
    );
}

#[test]
fn power_changes_need_an_installed_agent_and_queue_a_reconcile() {
    let (_dir, mut store) = open();
    let ghost = agent("ghost");
    let err = store.set_power(&ghost, Power::Down, 0).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("agent ghost is not installed"), "{msg}");
    assert!(msg.contains("hive deploy ghost"), "{msg}");
    let err = store.request_removal(&ghost, false, 0).unwrap_err();
    assert!(matches!(err, StoreError::NotInstalled { .. }));
    // A purge of something already retired is allowed: its data is what is left.
    assert_eq!(
        store.request_removal(&ghost, true, 0).unwrap().kind,
        JobKind::Purge
    );

    let a = agent("a");
    store.enqueue(&a, first_deploy("local/x:1"), 0).unwrap();
    let q = store.set_power(&a, Power::Down, 1).unwrap();
    assert_eq!(q.kind, JobKind::Reconcile);
    assert_eq!(store.power(&a).unwrap(), Some(Power::Down));
    assert_eq!(store.all_power().unwrap()[&a], Power::Down);
    assert_eq!(store.seed_power(&a, Power::Up, 2).unwrap(), Power::Down);
}
